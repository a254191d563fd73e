"""How much work a CPU-second of this machine does, sampled beside a run (docs/virtual-time.md, "What a budget
cannot hold").

A CPU budget (cgroup CFS bandwidth) holds a member's CPU *time* constant, not the work done in it. On a virtual
machine the second depends on what else the physical host runs: a neighbour that streams through memory leaves
our processes the same CPU time but fewer cache hits, and a budgeted Python member then handles fewer packets per
budget (measured: docs/results/host-speed/). So every run samples two fixed Python workloads, timed in the
sampling thread's own CPU time (`time.thread_time`, which excludes waiting for a CPU — the machine being busy is
the budgets' and the cpu_wait judge's business, not this one's):

- `compute`: struct packing, a small dict, a hash: a working set that fits in the core's caches;
- `memory`: random lookups in a dict of 2^18 entries (tens of MB): every lookup misses the caches, as a Python
  process's scattered objects do.

Each is reported as work units per CPU-second (higher = faster), the median of `REPS` timings. The numbers are
this machine's arbitrary units: they compare runs with each other (a sweep's points, morning and night), not
machines. `python -m orchestrator.hostspeed sample FILE [--every S]` appends one JSON line per sample until it is
terminated or its parent exits (the runner starts it beside each local run); `python -m orchestrator.hostspeed`
prints one sample.

Why hand-written: no library measures a host's speed per CPU-second inside a guest (perf counters are not
exposed in this VM)."""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import struct
import sys
import time
from hashlib import blake2b
from pathlib import Path

REPS = 5
TABLE_ENTRIES = 1 << 18
LOOKUPS = 20_000
#: a run whose median memory speed is below this share of the best repetition of its sweep point is judged
#: unfaithful (sweepstate.judge_host_speed)
MIN_SPEED_SHARE = 0.8

_table: dict | None = None
_keys: list[int] = []


def _compute_unit() -> int:
    d: dict = {}
    acc = 0
    for i in range(2000):
        b = struct.pack("!IIHB", i, i * 7, i & 0xFFFF, i & 0xFF)
        a, c, e, f = struct.unpack("!IIHB", b)
        d[a] = (c, e, f)
        acc += len(d) + (f & 3)
    acc += len(blake2b(b"x" * 4096).digest())
    return acc


def _memory_unit() -> int:
    global _table, _keys
    if _table is None:
        rng = random.Random(1)
        _table = {i: (i, str(i)) for i in range(TABLE_ENTRIES)}
        _keys = [rng.randrange(TABLE_ENTRIES) for _ in range(LOOKUPS)]
    acc = 0
    table = _table
    for k in _keys:
        acc += table[k][0]
    return acc


def _speed(unit, units: int, reps: int) -> float:
    per_rep = []
    for _ in range(reps):
        t = time.thread_time()
        for _ in range(units):
            unit()
        per_rep.append(units / max(time.thread_time() - t, 1e-9))
    return statistics.median(per_rep)


def measure(reps: int = REPS) -> dict:
    """One sample: {"ts": unix time, "compute": units/CPU-s, "memory": units/CPU-s} (about 0.1 s of CPU; the first
    call builds the memory workload's table, about 0.2 s and 40 MB)."""
    _memory_unit()
    return {"ts": round(time.time(), 3), "compute": round(_speed(_compute_unit, 10, reps), 1),
            "memory": round(_speed(_memory_unit, 3, reps), 1)}


def summarise(samples: list[dict]) -> dict | None:
    """The run's host speed from its samples (pure): per workload the median and the smallest, and the count; None
    without samples."""
    if not samples:
        return None
    out: dict = {"samples": len(samples), "unit": "work units per CPU-second (this machine's; higher = faster)"}
    for k in ("compute", "memory"):
        xs = [float(s[k]) for s in samples if isinstance(s.get(k), (int, float))]
        if xs:
            out[k] = round(statistics.median(xs), 1)
            out[f"{k}_min"] = round(min(xs), 1)
    return out


def read_samples(path: Path) -> list[dict]:
    """The JSON lines a sampler wrote (a torn last line is skipped)."""
    out = []
    try:
        for line in path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    except OSError:
        pass
    return out


def slower_than(speed: float | None, best: float | None, share: float = MIN_SPEED_SHARE) -> str | None:
    """A reason when a run's memory speed is below `share` of the best of its comparison set (pure), else None."""
    if not isinstance(speed, (int, float)) or not isinstance(best, (int, float)) or best <= 0:
        return None
    if speed < share * best:
        return (f"the host was slower: memory speed {speed:.0f} < {share:.0%} of the best repetition's {best:.0f} "
                f"(a CPU-second did less work; docs/virtual-time.md)")
    return None


def sample_loop(out: Path, every_s: float, parent: int | None = None) -> int:
    """Append a sample every `every_s` real seconds until SIGTERM/SIGINT or the process `parent` (given by the
    starter: read here it could already be init's, the starter gone) is no longer this one's parent."""
    parent = os.getppid() if parent is None else parent
    stop = False

    def on_signal(signum, frame):
        nonlocal stop
        stop = True
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    with out.open("a") as f:
        while not stop and os.getppid() == parent:
            f.write(json.dumps(measure()) + "\n")
            f.flush()
            end = time.monotonic() + every_s
            while not stop and time.monotonic() < end and os.getppid() == parent:
                time.sleep(min(0.2, every_s))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m orchestrator.hostspeed")
    sub = ap.add_subparsers(dest="cmd")
    s = sub.add_parser("sample", help="append a sample to FILE every --every seconds until terminated")
    s.add_argument("file", type=Path)
    s.add_argument("--every", type=float, default=5.0)
    s.add_argument("--parent", type=int, help="the starter's pid: the sampler ends when that process does")
    a = ap.parse_args(argv)
    if a.cmd == "sample":
        return sample_loop(a.file, a.every, a.parent)
    print(json.dumps(measure()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
