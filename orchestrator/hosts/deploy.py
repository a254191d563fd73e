"""What the controller ships and keeps for a hosts lab: the bundle (node package, dependency wheels, agent), the
lab's hosts record in the state directory, and the Ansible context built from them."""
from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import sysconfig
import tarfile
from pathlib import Path

from orchestrator.errors import OrchestratorError
from orchestrator.hosts import render
from orchestrator.hosts.ansible import AnsibleContext
from orchestrator.hosts.hostsfile import Host
from orchestrator.plan import NetworkPlan

REPO = Path(__file__).resolve().parent.parent.parent
NODE_SRC = REPO / "node_image" / "gossipnode"
AGENT = Path(__file__).resolve().parent / "agent.py"
TOOLS = Path(__file__).resolve().parent / "tools"
# The node's only dependency outside the standard library (as node_image/Dockerfile installs it).
NODE_REQUIREMENTS = ["pydantic>=2.6,<3"]
HOSTS_RECORD = "hosts.json"


def wheel_cache() -> Path:
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}-{sysconfig.get_platform()}"
    return Path.home() / ".cache" / "gossip-testbed" / "wheels" / tag


def cached_wheels(d: Path, requirements: list[str], who: str) -> Path:
    """Wheels of `requirements` for this controller's Python and platform in `d` (the far side must match: same
    Python minor version and architecture), downloaded once with pip and cached, and a pip wheel in d/pip to
    install them with (the far side gets a venv without ensurepip: faster). `who` names the far side in errors."""
    stamp = d / "requirements.txt"
    want = "\n".join(requirements) + "\n"
    if stamp.exists() and stamp.read_text() == want and any(d.glob("*.whl")) and any((d / "pip").glob("pip-*.whl")):
        return d
    d.mkdir(parents=True, exist_ok=True)
    for dest, reqs in ((d, requirements), (d / "pip", ["pip"])):
        r = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
                            "--only-binary=:all:", "--no-deps" if dest != d else "--prefer-binary", "--dest",
                            str(dest), *reqs], capture_output=True, text=True)
        if r.returncode != 0:
            raise OrchestratorError(f"cannot download wheels for {who} ({', '.join(reqs)}): "
                                    f"{r.stderr.strip()[-500:]}")
    stamp.write_text(want)
    return d


def node_wheels() -> Path:
    """The node's dependencies' wheels for the hosts."""
    return cached_wheels(wheel_cache(), NODE_REQUIREMENTS, "the hosts")


def build_bundle(dest: Path) -> Path:
    """dest/bundle.tar.gz: src/gossipnode/**/*.py (the package with its protocols/ subpackages), wheels/*.whl +
    requirements.txt, agent.py (one transfer per host)."""
    wheels = node_wheels()
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / "bundle.tar.gz"

    def add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
        info = tarfile.TarInfo(name)
        info.size, info.mode = len(data), 0o644
        tar.addfile(info, io.BytesIO(data))

    with tarfile.open(out, "w:gz") as tar:
        for f in sorted(NODE_SRC.rglob("*.py")):
            tar.add(f, arcname=f"src/gossipnode/{f.relative_to(NODE_SRC).as_posix()}")
        for f in sorted(wheels.glob("*.whl")):
            tar.add(f, arcname=f"wheels/{f.name}")
        add_bytes(tar, "wheels/requirements.txt", ("\n".join(NODE_REQUIREMENTS) + "\n").encode())
        for f in sorted((wheels / "pip").glob("pip-*.whl"))[-1:]:
            tar.add(f, arcname=f"tools/{f.name}")
        for f in sorted(TOOLS.glob("*.py")):
            tar.add(f, arcname=f"tools/{f.name}")
        tar.add(AGENT, arcname="agent.py")
    return out


def stage_tarball(dest: Path, member: str, config: dict, agent_config: dict) -> Path:
    """dest/<member>.tar.gz: a host's fresh run directory (run/configs/<member>.json, run/agent.json and the
    empty directories the node, tcpdump and the pid files write to)."""
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / f"{member}.tar.gz"
    with tarfile.open(out, "w:gz") as tar:
        for sub in ("run", "run/configs", "run/events", "run/logs", "run/pcaps", "run/pids", "run/ctl"):
            info = tarfile.TarInfo(sub)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for name, doc in ((f"run/configs/{member}.json", config), ("run/agent.json", agent_config)):
            data = json.dumps(doc, indent=1).encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return out


def unpack_collected(tarball: Path, run_dir: Path, member: str) -> list[str]:
    """Extract a host's collected files into the run directory: only that member's own files (events/<m>.jsonl,
    logs/<m>.log, logs/<m>-tcpdump.log, pcaps/<m>-*.pcap), nothing outside it. Returns the names extracted."""
    allowed = {f"events/{member}.jsonl", f"logs/{member}.log", f"logs/{member}-tcpdump.log"}
    names = []
    with tarfile.open(tarball, "r:gz") as tar:
        for m in tar.getmembers():
            name = m.name.removeprefix("./")
            ok = name in allowed or (name.startswith(f"pcaps/{member}-") and name.endswith(".pcap")
                                     and "/" not in name[len("pcaps/"):])
            if not ok or not m.isfile():
                continue
            target = run_dir / name
            target.parent.mkdir(parents=True, exist_ok=True)
            with tar.extractfile(m) as src, open(target, "wb") as dst:
                dst.write(src.read())
            names.append(name)
    return names


def save_record(state_dir: Path, record: dict) -> None:
    state_dir.mkdir(parents=True, exist_ok=True)
    tmp = state_dir / (HOSTS_RECORD + ".tmp")
    tmp.write_text(json.dumps(record, indent=1, sort_keys=True))
    tmp.replace(state_dir / HOSTS_RECORD)


def load_record(state_dir: Path) -> dict | None:
    f = state_dir / HOSTS_RECORD
    return json.loads(f.read_text()) if f.exists() else None


def hosts_of(record: dict) -> list[Host]:
    return [Host(**h) for h in record["hosts"]]


def context(record: dict, plan: NetworkPlan, data_dir: Path, with_bundle: bool = True, **extra) -> AnsibleContext:
    """The Ansible context of a lab (inventory from the recorded hosts, extra vars) in `data_dir`. Teardown and
    status need no bundle (`with_bundle=False`: no wheel download either)."""
    hosts = hosts_of(record)
    bundle = build_bundle(data_dir) if with_bundle else Path("")
    ev = render.extravars(record["lab"], record["shaper_request"], record["strict"], bundle, **extra)
    ctx = AnsibleContext(data_dir=data_dir,
                         inventory=render.render_inventory(hosts, record["lab"], plan, record.get("hosts_file", ""),
                                                           record.get("snaplen", 128),
                                                           dilation=record.get("dilation", 1.0)),
                         extravars=ev, known_hosts=Path(record["known_hosts"]),
                         accept_new_host_keys=record["accept_new_host_keys"],
                         users={h.name: h.user for h in hosts})
    ctx.prepare()
    return ctx


def digest_hosts(hosts: list[Host]) -> str:
    return hashlib.sha256(json.dumps([h.model_dump() for h in hosts], sort_keys=True).encode()).hexdigest()[:16]
