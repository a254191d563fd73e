"""One lab over several machines (`--machines INVENTORY`, issue #35): the checks before anything is built, and
the commands the controller sends each machine (pure; the SSH side is orchestrator/backends/machines.py).

Every machine runs this same orchestrator: the controller installs its own code there (backends/machinesinstall.py)
unless the inventory's `testbed_orchestrator` names the Python of a checkout of the same commit. The controller
asks each machine, before anything is built anywhere, for `orchestrator machine-check`: the code's digest, whether
it runs as root, the kernel features a part needs (network namespaces, veth, VXLAN) and the shaper it would
choose; any machine that fails is named with its reason and nothing is built (exit 2).
"""
from __future__ import annotations

import json
import re

from orchestrator.hosts.hostsfile import Host

FEATURES = ("netns", "veth", "vxlan")
NOT_UP = "is up (see `orchestrator status`)"        # the end of LabNotFound's message: a part already removed


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


def remote_argv(host: Host, args: list[str], default_python: str, module: str = "orchestrator.cli") -> list[str]:
    """`orchestrator ARGS` (`python -m MODULE ARGS`) on `host` as root (sudo -n when the SSH user is not root),
    with the machine's own state directory when the inventory gives one."""
    env = ["NO_COLOR=1", "COLUMNS=200"] + ([f"ORCHESTRATOR_STATE_DIR={host.state_dir}"] if host.state_dir else [])
    argv = ["env", *env, host.orchestrator or default_python, "-m", module, *args]
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


# --- a run over several machines: what comes back from each ------------------------------------------------------
def collected_name(name: str, nodes: set[str], machine: str) -> str | None:
    """Where a file of a machine's run directory goes in the controller's (pure): its own nodes' events, logs,
    pcaps and tc statistics under their names, its delay line's statistics and its log under the machine's
    name; None for anything else (another machine's node, a path that leaves the directory)."""
    from orchestrator import runschema as schema

    name = name.removeprefix("./")
    parts = name.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return None
    if parts == [schema.LOG]:
        return f"machines/{machine}-{schema.LOG}"
    if len(parts) != 2:
        return None
    sub, base = parts
    if sub == "tc" and base == "delayline.json":
        return f"tc/delayline-{machine}.json"
    if sub == "logs" and re.fullmatch(r"pack-\d+\.log", base):      # a pack of members' process (its own numbering)
        return f"logs/{machine}-{base}"
    stem = {"events": base.removesuffix(".jsonl") if base.endswith(".jsonl") else None,
            "logs": base.removesuffix(".log") if base.endswith(".log") else None,
            "tc": base.removesuffix(".json") if base.endswith(".json") else None,
            "pcaps": base if base.endswith(".pcap") else None}.get(sub)
    if stem is None:
        return None
    if sub == "pcaps":                   # <node>-<interface>.pcap, the interface's name may hold '-' too
        return name if any(stem.startswith(f"{n}-") for n in nodes) else None
    owner = stem.removesuffix("-tcpdump") if sub == "logs" else stem
    return name if owner in nodes else None


def merge_member_cpu(reports: list[dict | None]) -> dict | None:
    """The machines' `member_cpu` as one (pure): processes and CPU seconds add up, the ages and walls are the
    longest, the cores are the sums over the machines."""
    rs = [r for r in reports if r]
    if not rs:
        return None
    out: dict = {"processes": sum(r.get("processes", 0) for r in rs),
                 "cpu_s": round(sum(r.get("cpu_s", 0.0) for r in rs), 3),
                 "uptime_s": max(r.get("uptime_s", 0.0) for r in rs)}
    out["cores"] = round(out["cpu_s"] / out["uptime_s"], 4) if out["uptime_s"] > 0 else None
    if all("run_cpu_s" in r for r in rs):
        out.update(run_cpu_s=round(sum(r["run_cpu_s"] for r in rs), 3), run_wall_s=max(r["run_wall_s"] for r in rs),
                   run_cores=round(sum(r["run_cores"] for r in rs), 4))
    out["machines"] = len(rs)
    return out


def merge_budgets(reports: dict[str, dict | None]) -> dict | None:
    """The machines' `cpu_budget` reports (machine -> report) as one (pure): the same budget everywhere, the units
    of all; a unit of a machine's own (a pack of members: `pack-K` on every machine) named after its machine."""
    rs = {m: r for m, r in reports.items() if r}
    if not rs:
        return None
    out = {k: v for k, v in next(iter(rs.values())).items() if k != "units"}
    out["units"] = {(f"{m}-{u}" if u.startswith("pack-") else u): v
                    for m, r in rs.items() for u, v in (r.get("units") or {}).items()}
    out["enforced"] = all(r.get("enforced") for r in rs.values())
    return out


def merge_packing(decisions: dict[str, dict]) -> dict:
    """How the machines run their members (`nodes.packing`, decided by each machine's agent for its own members,
    memory and cores; machine -> PackingDecision.manifest()) as the run's `packing` (pure): packed if any machine
    packs, the processes of all, the largest pack, each machine's decision under `machines`."""
    ds = {m: d for m, d in sorted(decisions.items()) if d}
    if not ds:
        return {}
    packed = any(d.get("mode") == "packed" for d in ds.values())
    return {"mode": "packed" if packed else "process",
            "members_per_process": max(d.get("members_per_process", 1) for d in ds.values()),
            "processes": sum(d.get("processes", 0) for d in ds.values()),
            "reason": "decided on each machine: " + "; ".join(f"{m}: {d.get('reason')}" for m, d in ds.items()),
            "machines": ds}


def clock_warnings(start: dict[str, dict], end: dict[str, dict], bound_s: float) -> list[str]:
    """Warnings for a run whose machine clocks could not be trusted to `bound_s` (pure): an offset measured with
    an error over the bound, a machine with no offset at the end, or one that drifted more than the bound."""
    out = []
    for name, s in sorted(start.items()):
        if s["error_s"] > bound_s:
            out.append(f"clock of {name}: offset {s['offset_s'] * 1e3:+.3f} ms known only to ±{s['error_s'] * 1e3:.3f}"
                       f" ms (bound {bound_s * 1e3:g} ms)")
        e = end.get(name)
        if e is None:
            out.append(f"clock of {name}: not measured at the end of the run (drift unknown)")
        elif abs(e["offset_s"] - s["offset_s"]) > bound_s:
            out.append(f"clock of {name}: drifted {(e['offset_s'] - s['offset_s']) * 1e3:+.3f} ms over the run "
                       f"(bound {bound_s * 1e3:g} ms)")
    return out
