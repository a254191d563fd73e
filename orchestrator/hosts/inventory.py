"""An Ansible inventory (INI or YAML, as users already keep them) as the hosts backend's hosts.

    [testbed]
    node-a ansible_host=192.0.2.10 testbed_address=10.1.0.10
    node-b ansible_host=192.0.2.11 ansible_port=2222
    [testbed:vars]
    ansible_user=gossip
    ansible_ssh_private_key_file=~/.ssh/id_ed25519

The hosts are those of the group `testbed` (its children's too), else every host of the inventory, in the
inventory's order. Ansible itself reads the file (`ansible-inventory --list`, only its `ini` and `yaml` plugins:
never a script), so group variables, children and ranges mean what they mean to Ansible; what we take from each
host's variables:

| variable | hosts file key | default |
|---|---|---|
| `ansible_host` (+ `ansible_port`) | `ssh` (+ `port`) | the inventory name; port 22 |
| `ansible_user` | `user` | the user running the orchestrator (as Ansible) |
| `ansible_ssh_private_key_file` (or `ansible_private_key_file`) | `key` | none: required |
| `ansible_python_interpreter` | `python` | /usr/bin/python3 |
| `testbed_address` (or `testbed_underlay`) | `address` (the member's) | `ansible_host` if an IPv4 address |
| `testbed_interface`, `testbed_workdir`, `testbed_member` | `interface`, `workdir`, `member` | as the hosts file |
| `testbed_orchestrator`, `testbed_state_dir` | `orchestrator`, `state_dir` | `--machines` only (docs/machines.md) |

A relative key path is relative to the directory the orchestrator runs in, as Ansible's is. Every check of the
hosts file applies (orchestrator.hosts.hostsfile.resolve_hosts); an error names the inventory and the host.
"""
from __future__ import annotations

import functools
import getpass
import hashlib
import ipaddress
import json
import os
import subprocess
import sys
from pathlib import Path

from pydantic import ValidationError

from orchestrator.errors import SpecError
from orchestrator.hosts.hostsfile import Host, HostEntry, HostsFile, is_hosts_file, load_hosts, resolve_hosts
from orchestrator.source import read_input

GROUP = "testbed"
VARS = {"ansible_host": "ssh", "ansible_port": "port", "ansible_user": "user",
        "ansible_ssh_private_key_file": "key", "ansible_private_key_file": "key",
        "ansible_python_interpreter": "python", "testbed_address": "address", "testbed_underlay": "address",
        "testbed_interface": "interface", "testbed_workdir": "workdir", "testbed_member": "member",
        "testbed_orchestrator": "orchestrator", "testbed_state_dir": "state_dir"}
# Only the plugins that read files: the default list also has `script` (runs an executable inventory) and
# `host_list`/`auto`, which would take a typo for a host name or a plugin config.
ENV = {"ANSIBLE_INVENTORY_ENABLED": "ini,yaml", "ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED": "True",
       "ANSIBLE_LOCALHOST_WARNING": "False", "ANSIBLE_INVENTORY_UNPARSED_WARNING": "False",
       "ANSIBLE_NOCOLOR": "1", "ANSIBLE_DEPRECATION_WARNINGS": "False"}


def group_hosts(doc: dict, group: str) -> list[str]:
    """The hosts of `group` and of its children, recursively, in the inventory's order, each once."""
    out: list[str] = []
    seen_groups: set[str] = set()

    def walk(g: str) -> None:
        if g in seen_groups:
            return
        seen_groups.add(g)
        entry = doc.get(g) or {}
        for h in entry.get("hosts") or []:
            if h not in out:
                out.append(h)
        for c in entry.get("children") or []:
            walk(c)

    walk(group)
    return out


def host_entries(doc: dict, source: str, user: str | None = None) -> list[dict]:
    """`ansible-inventory --list`'s JSON as hosts-file entries (pure): the group `testbed`'s hosts when it has
    any, else every host."""
    declared = GROUP in doc or any(GROUP in (g.get("children") or []) for g in doc.values() if isinstance(g, dict))
    if declared:                    # (--list leaves an empty group out, but not from its parent's children)
        names = group_hosts(doc, GROUP)
        if not names:
            raise SpecError(f"{source}: the group {GROUP!r} has no hosts")
    else:
        names = group_hosts(doc, "all")
    if not names:
        raise SpecError(f"{source}: no hosts (give them in a group {GROUP!r}, or anywhere in the inventory)")
    hostvars = (doc.get("_meta") or {}).get("hostvars") or {}
    out = []
    for name in names:
        v = hostvars.get(name) or {}
        e: dict = {"name": name}
        for var, key in VARS.items():
            if var not in v or v[var] in (None, "") or key in e:
                continue
            value = v[var]
            if isinstance(value, str) and "{{" in value:
                raise SpecError(f"{source}: host {name}: {var} is a template ({value!r}); give the value itself")
            e[key] = value if key == "port" else str(value)
        e.setdefault("ssh", name)
        if "address" not in e:
            try:
                e["address"] = str(ipaddress.IPv4Address(e["ssh"]))
            except ValueError:
                raise SpecError(f"{source}: host {name}: no member address: set testbed_address (ansible_host "
                                f"{e['ssh']!r} is not an IPv4 address)") from None
        if "user" not in e and user:
            e["user"] = user
        out.append(e)
    return out


def hosts_from_inventory(doc: dict, source: str, base: Path, user: str | None = None) -> list[Host]:
    """Resolved hosts from `ansible-inventory --list`'s JSON (pure but for the key files' existence)."""
    entries = host_entries(doc, source, user)
    try:
        hf = HostsFile.model_validate({"hosts": entries})
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = err.get("loc") or ()
        name = entries[loc[1]]["name"] if len(loc) > 1 and isinstance(loc[1], int) else "?"
        var = next((k for k, v in VARS.items() if len(loc) > 2 and v == loc[2]), None)
        raise SpecError(f"{source}: host {name}: {var or (loc[2] if len(loc) > 2 else '')}: "
                        f"{err.get('msg')}") from None

    def fail(i: int, h: HostEntry, msg: str, *key: str) -> SpecError:
        for k, var in (("user", "ansible_user"), ("key", "ansible_ssh_private_key_file")):
            msg = msg.replace(f"no `{k}` (set it on the host or in `defaults`)",
                              f"no {var} (set it on the host or in its group's vars)")
        return SpecError(f"{source}: host {h.name}: {msg}")

    return resolve_hosts(hf, base, fail)


def ansible_inventory_list(path: Path) -> dict:
    """`ansible-inventory -i PATH --list` (the venv's), as JSON; SpecError with Ansible's reason when it cannot
    parse the file."""
    exe = Path(sys.executable).parent / "ansible-inventory"
    try:
        r = subprocess.run([str(exe), "-i", str(path), "--list"], capture_output=True, text=True, timeout=120,
                           env={**os.environ, **ENV})
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SpecError(f"{path}: cannot read it as an Ansible inventory: {exc}") from None
    if r.returncode != 0:
        why = " ".join(line.strip() for line in r.stderr.splitlines()
                       if line.strip() and not line.startswith(("<<<", "[WARNING]")))
        raise SpecError(f"{path}: not a hosts file, and Ansible cannot read it as an INI or YAML inventory: "
                        f"{why[:400]}")
    try:
        return json.loads(r.stdout)
    except ValueError:
        raise SpecError(f"{path}: ansible-inventory gave no JSON") from None


def load_inventory(path: str | Path) -> list[Host]:
    """An Ansible inventory's hosts. `ansible-inventory` takes ~0.4 s a call: a file read once in a command (an
    `up --machines` reads its inventory for the CLI's check, the machines' checks and the sharding) is parsed
    once, as long as it has not changed."""
    path = Path(path)
    content = hashlib.sha256(read_input(path, "inventory").encode()).hexdigest()
    return list(_inventory(str(path.resolve()), content, str(path), str(Path.cwd()), getpass.getuser()))


@functools.lru_cache(maxsize=16)
def _inventory(resolved: str, content: str, shown: str, cwd: str, user: str) -> tuple[Host, ...]:
    return tuple(hosts_from_inventory(ansible_inventory_list(Path(shown)), shown, Path(cwd), user))


def load(path: str | Path) -> list[Host]:
    """`--inventory`: a hosts file (orchestrator.hosts.hostsfile) or an Ansible inventory (INI or YAML)."""
    return load_hosts(path) if is_hosts_file(read_input(Path(path), "hosts")) else load_inventory(path)
