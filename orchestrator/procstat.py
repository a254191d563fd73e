"""The CPU the member processes of a run used, read from /proc just before they stop: what `sweep --parallel`
sizes its fit with once a point has run (orchestrator/sweepfit.check_fit), instead of its fixed per-member guess.
Linux only; hand-written because it is three fields of /proc/PID/stat (psutil would be a dependency for that).
`parse_stat` and `summarise` are pure."""
from __future__ import annotations

import os
from pathlib import Path


def parse_stat(text: str) -> tuple[int, int, int]:
    """(utime, stime, starttime) in clock ticks from the text of /proc/PID/stat. The command name (field 2) is in
    parentheses and may hold spaces or parentheses itself, so the fields are counted after its last ')'."""
    rest = text[text.rindex(")") + 2:].split()
    # rest[0] is field 3 (state): utime and stime are fields 14 and 15, starttime field 22
    return int(rest[11]), int(rest[12]), int(rest[19])


def summarise(stats: list[tuple[int, int, int]], now_ticks: float, hz: int) -> dict | None:
    """{"processes", "cpu_s" (user + system, summed), "uptime_s" (the longest-running process's age),
    "cores" (cpu_s / uptime_s: the cores the processes used together on average)}, or None for no process."""
    if not stats:
        return None
    cpu_s = sum(u + s for u, s, _ in stats) / hz
    uptime_s = max(now_ticks - start for _, _, start in stats) / hz
    return {"processes": len(stats), "cpu_s": round(cpu_s, 3), "uptime_s": round(uptime_s, 3),
            "cores": round(cpu_s / uptime_s, 4) if uptime_s > 0 else None}


def processes_cpu(pids, proc: Path = Path("/proc")) -> dict | None:
    """`summarise` of the processes `pids` that still exist (each pid once)."""
    hz = os.sysconf("SC_CLK_TCK")
    try:
        now_ticks = float((proc / "uptime").read_text().split()[0]) * hz
    except (OSError, ValueError, IndexError):
        return None
    stats = []
    for pid in sorted(set(pids)):
        try:
            stats.append(parse_stat((proc / str(pid) / "stat").read_text()))
        except (OSError, ValueError, IndexError):
            continue          # gone already (crashed member) or unreadable: not counted
    return summarise(stats, now_ticks, hz)


def cpu_seconds(pids, proc: Path = Path("/proc")) -> dict[int, float]:
    """User + system CPU seconds of each process of `pids` that still exists."""
    hz = os.sysconf("SC_CLK_TCK")
    out = {}
    for pid in set(pids):
        try:
            u, s, _ = parse_stat((proc / str(pid) / "stat").read_text())
        except (OSError, ValueError, IndexError):
            continue
        out[pid] = (u + s) / hz
    return out


def over_run(start: dict[int, float], end: dict[int, float], wall_s: float) -> dict | None:
    """The CPU the processes used between two `cpu_seconds` readings `wall_s` real seconds apart (a process
    started in between counts from 0; one gone by the end is not counted): {"run_cpu_s", "run_wall_s",
    "run_cores"}. Pure."""
    if not end or wall_s <= 0:
        return None
    used = sum(v - start.get(pid, 0.0) for pid, v in end.items())
    return {"run_cpu_s": round(used, 3), "run_wall_s": round(wall_s, 3), "run_cores": round(used / wall_s, 4)}
