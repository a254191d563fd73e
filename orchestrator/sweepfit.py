"""How many points of a sweep fit this machine at once (`--parallel K`), and what `time: {dilation: auto}` sizes the
next points with: the machine's cores and memory, the CPU the finished points measured (their judges), the fit check
(sweep.fit, pure) that refuses K points that would not fit (exit 2)."""
from __future__ import annotations

import json
import os
from pathlib import Path

from orchestrator import fidelity as fid
from orchestrator import sweep as sw
from orchestrator.errors import SpecError
from orchestrator.sweepstate import INDEX
from orchestrator.timebase import Measured


def machine() -> tuple[int, int]:
    """(usable cores, MemAvailable bytes) of this machine."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    mem = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                mem = int(line.split()[1]) * 1024
    except OSError:
        pass
    return cores, mem


def measured(points: dict) -> bool:
    """Has any point of this sweep measured its members' CPU (fidelity `member_cores_each`)?"""
    return any(isinstance(e.get("fidelity"), dict) and e["fidelity"].get("member_cores_each") is not None
               for e in points.values())


def _virtual(j: dict, key: str) -> float | None:
    """A judge's CPU figure in virtual cores (runs from before virtual time: the real figure, dilation 1)."""
    v = j.get(f"{key.replace('_cores', '_virtual_cores')}")
    if v is None and j.get(key) is not None:
        v = j[key] * (j.get("dilation") or 1.0)
    return v


def measured_cpu(points: dict) -> Measured | None:
    """What the finished points of this sweep measured, in virtual cores (the largest of each): the members' CPU
    per member and the delay line's. `time: {dilation: auto}` sizes the next points with it."""
    judged = [e["fidelity"] for e in points.values() if isinstance(e.get("fidelity"), dict)]
    each = [v for j in judged if (v := _virtual(j, "member_cores_each")) is not None]
    dl = [v for j in judged if (v := _virtual(j, "delayline_cores")) is not None]
    waits = [j["cpu_wait_ms"] * (j.get("dilation") or 1.0) for j in judged if j.get("cpu_wait_ms") is not None]
    if not each and not dl:
        return None
    return Measured(max(each) if each else None, max(dl) if dl else None,
                    f"the largest of {len(judged)} finished point(s) of this sweep", max(waits) if waits else None)


def measured_from(path: str | Path) -> Measured:
    """`--cpu-from`: what a finished run directory (its judges) or sweep directory (its points' judges) measured,
    for `time: {dilation: auto}`. SpecError when it measured nothing."""
    p = Path(path)
    if (p / INDEX).exists():
        m = measured_cpu(json.loads((p / INDEX).read_text()).get("points", {}))
    elif (p / "manifest.json").exists():
        m = measured_cpu({"run": {"fidelity": fid.run_judges(p)}})
    else:
        raise SpecError(f"--cpu-from {path}: not a run directory (manifest.json) nor a sweep directory ({INDEX})")
    if m is None or m.member_cores_each is None:
        raise SpecError(f"--cpu-from {path}: it measured no member CPU (a run of this version on a local backend "
                        f"measures it)")
    return Measured(m.member_cores_each, m.daemon_cores, f"--cpu-from {path}", m.cpu_wait_real_ms)


def check_fit(prepared: dict[str, tuple[dict, str]], todo: list[sw.Point], k: int, old_points: dict) -> sw.Fit:
    """Refuse (SpecError, exit 2) K points at once that would not fit this machine. The delay line's load and the
    members' CPU are taken from the points of this sweep that ran before (their tc/delayline.json and the
    manifest's member_cpu; the largest of each, in virtual cores), when there are any."""
    judged = [e["fidelity"] for e in old_points.values() if isinstance(e.get("fidelity"), dict)]
    rates = [j["delayline_pkts_per_s"] * (j.get("dilation") or 1.0) for j in judged
             if j.get("delayline_pkts_per_s") is not None]
    m = measured_cpu(old_points)
    cores, mem = machine()
    needs = [sw.point_need(prepared[p.id][0], pkt_hops_per_s=max(rates) if rates else None,
                           delayline_cores=m.daemon_cores if m else None,
                           member_cores=m.member_cores_each if m else None,
                           share=cores * sw.CPU_HEADROOM / k) for p in todo]
    f = sw.fit(needs, k, cores, mem)
    if not f.ok:
        worst = max(needs, key=lambda n: n.cpu_cores)
        raise SpecError(f"{f.message()} (the largest point: {worst.describe()}; this machine: {cores} cores, "
                        f"{mem / 2 ** 30:.1f} GiB available)")
    return f
