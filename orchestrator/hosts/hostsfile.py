"""The hosts file: which machines run an experiment and how to reach them. Pure (no SSH here).

```yaml
defaults:                       # optional, applied to every host unless it sets the key itself
  user: gossip                  # SSH user; needs passwordless sudo unless it is root
  key: ~/.ssh/id_ed25519        # private key (relative paths: relative to the hosts file)
  port: 22
  workdir: /var/lib/gossip-testbed   # where the lab lives on the host: <workdir>/<lab>/ (venv, node, run files)
  python: /usr/bin/python3      # the host's Python (Ansible's interpreter and the venv's base)
hosts:
  - name: node-a                # inventory name: letters, digits, '-', '_', '.'
    ssh: 192.0.2.10             # SSH address (IPv4 or a DNS name), optionally host:port
    address: 10.1.0.10          # member address: the node listens here and peers send here (IPv4)
    interface: eth0             # optional: the egress to shape (default: the interface holding `address`)
    member: h3                  # optional: the plan member it runs (default: hosts in order -> members in order)
```
"""
from __future__ import annotations

import ipaddress
import re
from pathlib import Path, PurePosixPath

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from orchestrator.errors import SpecError
from orchestrator.source import Source, load_yaml, read_input

HOST_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
DNS_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$")
USER_RE = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
IF_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,15}$")
SAFE_PATH_RE = re.compile(r"^/[A-Za-z0-9_./-]*$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _safe_abs_path(v: str, what: str) -> str:
    if not SAFE_PATH_RE.match(v) or "/../" in v + "/" or "//" in v:
        raise ValueError(f"{what} {v!r} must be an absolute path of letters, digits and _ . - /")
    return str(PurePosixPath(v))


class HostDefaults(_Strict):
    user: str | None = None
    key: str | None = None
    port: int | None = Field(default=None, ge=1, le=65535)
    workdir: str | None = None
    python: str | None = None
    orchestrator: str | None = None
    state_dir: str | None = None


class HostEntry(_Strict):
    name: str
    ssh: str
    address: str
    user: str | None = None
    key: str | None = None
    port: int | None = Field(default=None, ge=1, le=65535)
    interface: str | None = None
    workdir: str | None = None
    python: str | None = None
    member: str | None = None
    orchestrator: str | None = None     # --machines: the machine's Python with this orchestrator installed
    state_dir: str | None = None        # --machines: the machine's lab state directory (default: its own default)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not HOST_RE.match(v):
            raise ValueError(f"host name {v!r}: use letters, digits, '-', '_', '.' (at most 63)")
        return v

    @field_validator("address")
    @classmethod
    def _address(cls, v: str) -> str:
        try:
            return str(ipaddress.IPv4Address(v))
        except ValueError:
            raise ValueError(f"{v!r} is not an IPv4 address") from None

    @field_validator("interface")
    @classmethod
    def _iface(cls, v: str | None) -> str | None:
        if v is not None and not IF_RE.match(v):
            raise ValueError(f"interface {v!r} is not a Linux interface name")
        return v


class Host(BaseModel):
    """One resolved host: every default applied, the key path absolute, the member assigned."""

    model_config = ConfigDict(frozen=True)

    name: str
    ssh_host: str
    ssh_port: int
    user: str
    key: str
    address: str
    interface: str | None
    workdir: str
    python: str
    member: str
    orchestrator: str = ""
    state_dir: str = ""

    @property
    def become(self) -> bool:
        return self.user != "root"

    def lab_dir(self, lab: str) -> str:
        return f"{self.workdir}/{lab}"


def _split_ssh(ssh: str, port: int | None) -> tuple[str, int | None]:
    host, sep, p = ssh.rpartition(":")
    if sep and p.isdigit():
        if port is not None and int(p) != port:
            raise ValueError(f"ssh {ssh!r} names port {p} but port: {port}")
        ssh, port = host, int(p)
    try:
        ipaddress.IPv4Address(ssh)
    except ValueError:
        if not DNS_RE.match(ssh):
            raise ValueError(f"ssh {ssh!r} is neither an IPv4 address nor a host name") from None
    return ssh, port


class HostsFile(_Strict):
    defaults: HostDefaults = HostDefaults()
    hosts: list[HostEntry] = Field(min_length=1)


def parse_hosts(text: str, source: str = "<hosts>", base: Path | None = None) -> list[Host]:
    """Parse and resolve a hosts file's text. Raises SpecError naming the file, line and field (located by the
    experiment loader's own helper, `orchestrator.source.Source`; the YAML is parsed once)."""
    src = Source(source, text)
    doc = load_yaml(src)
    if not isinstance(doc, dict):
        raise src.plain("expected a mapping with `hosts:` (and optional `defaults:`)")
    try:
        hf = HostsFile.model_validate(doc)
    except ValidationError as exc:
        raise src.validation_error(exc) from None
    except RecursionError:
        raise src.plain("nested too deeply") from None

    def fail(i: int, h: HostEntry, msg: str, *key: str) -> SpecError:
        # The host's own key when it sets it, else the host entry (a default or a missing value).
        return src.error(("hosts", i, *key), f"({h.name}) {msg}")

    return resolve_hosts(hf, base or Path.cwd(), fail)


def resolve_hosts(hf: HostsFile, base: Path, fail) -> list[Host]:
    """Every default applied, the key path absolute (relative to `base`), names, addresses and members unique;
    `fail(i, entry, message, *key)` makes the SpecError (the hosts file locates it by line, an Ansible inventory
    names the host)."""
    d = hf.defaults
    out: list[Host] = []
    seen: dict[str, set] = {"name": set(), "address": set(), "member": set()}

    for i, h in enumerate(hf.hosts):
        def err(msg: str, *key: str, i=i, h=h) -> SpecError:
            return fail(i, h, msg, *key)

        try:
            ssh_host, port = _split_ssh(h.ssh, h.port if h.port is not None else None)
        except ValueError as exc:
            raise err(str(exc), "ssh") from None
        user = h.user or d.user
        key = h.key or d.key
        if not user:
            raise err("no `user` (set it on the host or in `defaults`)")
        if not USER_RE.match(user):
            raise err(f"user {user!r} is not a valid user name", *(("user",) if h.user else ()))
        if not key:
            raise err("no `key` (set it on the host or in `defaults`)")
        key_where = ("key",) if h.key else ()
        try:
            key_path = (base / Path(key).expanduser()).resolve()
            is_file = key_path.is_file()
        except (OSError, RuntimeError, ValueError) as exc:     # ~nosuchuser, a NUL, a name too long
            raise err(f"key {key!r} cannot be used: {exc}", *key_where) from None
        if not is_file:
            raise err(f"key {key} ({key_path}) is not a file", *key_where)
        try:
            workdir = _safe_abs_path(h.workdir or d.workdir or "/var/lib/gossip-testbed", "workdir")
            python = _safe_abs_path(h.python or d.python or "/usr/bin/python3", "python")
            orch = h.orchestrator or d.orchestrator
            orch = _safe_abs_path(orch, "orchestrator") if orch else ""
            state_dir = h.state_dir or d.state_dir
            state_dir = _safe_abs_path(state_dir, "state_dir") if state_dir else ""
        except ValueError as exc:
            raise err(str(exc)) from None
        if workdir == "/":
            raise err("workdir must not be /")
        for k, v in (("name", h.name), ("address", h.address), ("member", h.member)):
            if v is None:
                continue
            if v in seen[k]:
                raise err(f"{k} {v!r} appears twice", k)
            seen[k].add(v)
        out.append(Host(name=h.name, ssh_host=ssh_host, ssh_port=port or d.port or 22, user=user,
                        key=str(key_path), address=h.address, interface=h.interface, workdir=workdir,
                        python=python, member=h.member or "", orchestrator=orch, state_dir=state_dir))
    return out


INI_LINE_RE = re.compile(r"^\s*(\[[^\]\s]+\]|[^\s#;=]+\s+[A-Za-z_]\w*=\S*)", re.M)


def is_hosts_file(text: str) -> bool:
    """This project's hosts file (a YAML mapping with `hosts:` or `defaults:`), not an Ansible inventory (YAML
    whose top-level keys are groups, or INI: `[group]`, `name var=value` or bare names). Broken YAML that looks
    like no INI is taken for a hosts file, so its error is located."""
    import yaml

    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError:
        return not INI_LINE_RE.search(text)
    if isinstance(doc, dict):
        return "hosts" in doc or "defaults" in doc
    return not isinstance(doc, str)          # bare INI host names read as one YAML string


def load_hosts(path: str | Path) -> list[Host]:
    """A hosts file (`orchestrator.hosts.inventory.load` also takes an Ansible inventory)."""
    path = Path(path)
    return parse_hosts(read_input(path, "hosts"), str(path), path.resolve().parent)


def assign_members(hosts: list[Host], members: list[str]) -> list[Host]:
    """Give every plan member a host: hosts that name a `member` get it, the rest take the remaining members in
    order. There must be exactly one host per member (a real host runs one node)."""
    named = {h.member for h in hosts if h.member}
    unknown = sorted(named - set(members))
    if unknown:
        raise SpecError(f"hosts file: member(s) {unknown} are not members of the experiment "
                        f"(members: {', '.join(members[:8])}{', ...' if len(members) > 8 else ''})")
    if len(hosts) != len(members):
        raise SpecError(f"hosts file has {len(hosts)} host(s) but the experiment has {len(members)} member(s): "
                        "one host per member")
    free = iter(m for m in members if m not in named)
    out = [h if h.member else h.model_copy(update={"member": next(free)}) for h in hosts]
    order = {m: i for i, m in enumerate(members)}
    return sorted(out, key=lambda h: order[h.member])
