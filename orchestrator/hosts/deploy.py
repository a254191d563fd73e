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
# The node's only dependency outside the standard library (as node_image/Dockerfile installs it).
NODE_REQUIREMENTS = ["pydantic>=2.6,<3"]
HOSTS_RECORD = "hosts.json"


def wheel_cache() -> Path:
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}-{sysconfig.get_platform()}"
    return Path.home() / ".cache" / "gossip-testbed" / "wheels" / tag


def node_wheels() -> Path:
    """Wheels of the node's dependencies for this controller's Python and platform (the hosts must match:
    same Python minor version and architecture), downloaded once with pip and cached."""
    d = wheel_cache()
    stamp = d / "requirements.txt"
    want = "\n".join(NODE_REQUIREMENTS) + "\n"
    if stamp.exists() and stamp.read_text() == want and any(d.glob("pydantic-*.whl")):
        return d
    d.mkdir(parents=True, exist_ok=True)
    r = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
                        "--only-binary=:all:", "--dest", str(d), *NODE_REQUIREMENTS],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise OrchestratorError(f"cannot download the node's dependency wheels ({', '.join(NODE_REQUIREMENTS)}): "
                                f"{r.stderr.strip()[-500:]}")
    stamp.write_text(want)
    return d


def build_bundle(dest: Path) -> Path:
    """dest/bundle.tar.gz: src/gossipnode/*.py, wheels/*.whl + requirements.txt, agent.py (one transfer per
    host)."""
    wheels = node_wheels()
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / "bundle.tar.gz"

    def add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
        info = tarfile.TarInfo(name)
        info.size, info.mode = len(data), 0o644
        tar.addfile(info, io.BytesIO(data))

    with tarfile.open(out, "w:gz") as tar:
        for f in sorted(NODE_SRC.glob("*.py")):
            tar.add(f, arcname=f"src/gossipnode/{f.name}")
        for f in sorted(wheels.glob("*.whl")):
            tar.add(f, arcname=f"wheels/{f.name}")
        add_bytes(tar, "wheels/requirements.txt", ("\n".join(NODE_REQUIREMENTS) + "\n").encode())
        tar.add(AGENT, arcname="agent.py")
    return out


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


def context(record: dict, plan: NetworkPlan, data_dir: Path, **extra) -> AnsibleContext:
    """The Ansible context of a lab (inventory from the recorded hosts, extra vars) in `data_dir`."""
    hosts = hosts_of(record)
    bundle = build_bundle(data_dir)
    ev = render.extravars(record["lab"], record["shaper_request"], record["strict"], bundle, **extra)
    ctx = AnsibleContext(data_dir=data_dir,
                         inventory=render.render_inventory(hosts, record["lab"], plan, record.get("hosts_file", ""),
                                                           record.get("snaplen", 128)),
                         extravars=ev, known_hosts=Path(record["known_hosts"]),
                         accept_new_host_keys=record["accept_new_host_keys"],
                         users={h.name: h.user for h in hosts})
    ctx.prepare()
    return ctx


def digest_hosts(hosts: list[Host]) -> str:
    return hashlib.sha256(json.dumps([h.model_dump() for h in hosts], sort_keys=True).encode()).hexdigest()[:16]
