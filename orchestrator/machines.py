"""One lab over several machines (`--machines INVENTORY`, issue #35): the checks before anything is built, and
the commands the controller sends each machine (pure; the SSH side is orchestrator/backends/machines.py).

Every machine runs this same orchestrator: the controller installs its own code there (backends/machinesinstall.py)
unless the inventory's `testbed_orchestrator` names the Python of a checkout of the same commit. The controller
asks each machine, before anything is built anywhere, for `orchestrator machine-check`: the code's digest, whether
it runs as root, the kernel features a part needs (network namespaces, veth, VXLAN) and the shaper it would
choose; any machine that fails is named with its reason and nothing is built (exit 2).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from orchestrator.hosts.hostsfile import Host

REPO = Path(__file__).resolve().parent.parent
CODE_ROOTS = (REPO / "orchestrator", REPO / "node_image" / "gossipnode")
FEATURES = ("netns", "veth", "vxlan")
NOT_UP = "is up (see `orchestrator status`)"        # the end of LabNotFound's message: a part already removed


def code_digest(roots: tuple[Path, ...] = CODE_ROOTS) -> str:
    """sha256 over the orchestrator's and the node's Python sources (paths and contents): two machines with the
    same digest plan and build a lab the same way."""
    h = hashlib.sha256()
    for root in roots:
        for f in sorted(root.rglob("*.py")):
            h.update(f"{root.name}/{f.relative_to(root)}".encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def inventory_problems(hosts: list[Host], nodes: int) -> dict[str, str]:
    """What is wrong with the inventory itself, per machine (pure): a machine given twice (the same SSH
    endpoint), no underlay address shared, more machines than the tree has nodes."""
    problems: dict[str, str] = {}
    seen: dict[tuple[str, int], str] = {}
    for h in hosts:
        key = (h.ssh_host, h.ssh_port)
        if key in seen:
            problems[h.name] = f"the same machine as {seen[key]} ({h.ssh_host}:{h.ssh_port}): a duplicate host"
        seen.setdefault(key, h.name)
    if len(hosts) > nodes:
        for h in hosts[nodes:]:
            problems.setdefault(h.name, f"more machines ({len(hosts)}) than the tree can use: it has {nodes} "
                                        "node(s), at least one per machine")
    return problems


def remote_argv(host: Host, args: list[str], default_python: str) -> list[str]:
    """`orchestrator ARGS` on `host` as root (sudo -n when the SSH user is not root), with the machine's own
    state directory when the inventory gives one."""
    env = ["NO_COLOR=1", "COLUMNS=200"] + ([f"ORCHESTRATOR_STATE_DIR={host.state_dir}"] if host.state_dir else [])
    argv = ["env", *env, host.orchestrator or default_python, "-m", "orchestrator.cli", *args]
    return (["sudo", "-n", "--"] if host.become else []) + argv


def put_argv(host: Host, directory: str, name: str) -> list[str]:
    """Write stdin to DIRECTORY/NAME on `host` (made if missing, root's only)."""
    argv = ["sh", "-c", 'umask 077 && mkdir -p "$1" && cat > "$1/$2"', "sh", directory, name]
    return (["sudo", "-n", "--"] if host.become else []) + argv


def remove_argv(host: Host, directory: str) -> list[str]:
    argv = ["rm", "-rf", "--", directory]
    return (["sudo", "-n", "--"] if host.become else []) + argv


def check_verdict(host: Host, rc: int, stdout: str, stderr: str, digest: str, shaper: str) -> tuple[str | None, dict]:
    """A machine's `machine-check` answer as (its problem or None, its report) (pure)."""
    tail = " ".join(stderr.strip().splitlines()[-3:])[:300]
    if rc != 0:
        if "password is required" in stderr or "sudo:" in stderr:
            return (f"no root: user {host.user} is not root and `sudo -n` refuses ({tail})", {})
        if rc == 127 or "No such file" in stderr:
            return (f"no orchestrator at {host.orchestrator} ({tail}): give testbed_orchestrator the Python of a "
                    "checkout of the controller's commit there, or leave it out (the controller installs its own)", {})
        return (f"machine-check failed (exit {rc}): {tail}", {})
    try:
        report = json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return (f"machine-check gave no report: {stdout.strip()[-200:]} {tail}", {})
    if report.get("uid") != 0:
        return (f"no root: the orchestrator runs as uid {report.get('uid')} there", report)
    if report.get("digest") != digest:
        return (f"its orchestrator is another version (code digest {report.get('digest')}, the controller's "
                f"{digest}): install the controller's commit there", report)
    missing = [f for f in FEATURES if not (report.get("features") or {}).get(f, False)]
    if missing:
        why = "; ".join(f"{f}: {(report.get('errors') or {}).get(f, 'missing')}" for f in missing)
        return (f"missing kernel feature(s) {', '.join(missing)} ({why})", report)
    if report.get("shaper_error"):
        return (f"cannot shape with {shaper}: {report['shaper_error']}", report)
    return None, report
