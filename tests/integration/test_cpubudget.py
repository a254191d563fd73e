"""CPU budgets on this machine's real cgroups (orchestrator/cpubudget.py; root): a busy loop in a unit of 0.1 core
uses 0.1 +- 0.01 cores, two busy processes in one unit of 0.2 core (a pack) use 0.2 +- 0.02 together, both
throttled, measured from the unit's own usage over ~3 s -- on an idle machine and with two busy loops outside the
unit keeping both cores busy (the quota bounds from above, the lab's highest weight from below). Nothing of ours is
left in any hierarchy afterwards (the children are killed and the recorded paths removed in the fixture)."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from orchestrator.cpubudget import TOP, Cgroups

pytestmark = [pytest.mark.root]

BUSY = "while True: pass"
WARMUP_S = 0.5          # a few periods after attaching before the window opens
MEASURE_S = 3.0


@pytest.fixture
def budget():
    """(Cgroups, lab name, spawn(n) -> pids, recorded paths); kills every child and removes every recorded path,
    then checks that nothing of the lab is left."""
    cg = Cgroups()
    lab = f"tcpu{os.getpid()}"
    recorded: list = []
    children: list[subprocess.Popen] = []

    def spawn(n: int) -> list[int]:
        for _ in range(n):
            children.append(subprocess.Popen([sys.executable, "-c", BUSY]))
        return [c.pid for c in children[-n:]]

    try:
        yield cg, lab, spawn, recorded
    finally:
        for c in children:
            c.kill()
        for c in children:
            c.wait()
        cg.remove(recorded)
        for d in cg.lab_dirs(lab):
            assert not d.exists(), f"{d} left behind"
        for r in cg.roots:
            top = r / TOP
            assert not (top.exists() and not any(c.is_dir() for c in top.iterdir())), f"empty {top} left behind"


def _measure(cg: Cgroups, paths) -> tuple[float, dict]:
    time.sleep(WARMUP_S)
    s0, t0 = cg.stats(paths), time.monotonic()
    time.sleep(MEASURE_S)
    s1, t1 = cg.stats(paths), time.monotonic()
    return (s1["usage_s"] - s0["usage_s"]) / (t1 - t0), {k: s1[k] - s0[k] for k in s1}


@pytest.mark.parametrize("background", [0, 2], ids=["idle", "two-busy-loops"])
@pytest.mark.parametrize("cores, processes", [(0.1, 1), (0.2, 2)], ids=["one-process", "pack-of-two"])
def test_unit_gets_its_quota(budget, cores, processes, background):
    cg, lab, spawn, recorded = budget
    spawn(background)                                  # outside the lab: the machine's other work
    paths = cg.create(lab, "u", cores, record=recorded.extend)
    for pid in spawn(processes):
        cg.attach(paths, pid)
    used, delta = _measure(cg, paths)
    print(f"{processes} busy process(es) in a unit of {cores} core, {background} busy loops outside: "
          f"{used:.4f} cores, {delta['nr_throttled']} of {delta['nr_periods']} periods throttled")
    assert abs(used - cores) <= 0.1 * cores, f"{used:.4f} cores used, budget {cores}"
    assert delta["nr_throttled"] > 0


def test_remove_moves_live_tasks_out_and_is_idempotent(budget):
    cg, lab, spawn, recorded = budget
    paths = cg.create(lab, "u", 0.1, record=recorded.extend)
    (pid,) = spawn(1)
    cg.attach(paths, pid)
    cg.remove(recorded)                                # the busy child is still running inside
    # the lab's and the unit's directories are gone; the shared `orchestrator` directory stays while other labs
    # (a run beside this test) have theirs in it
    assert not any(os.path.exists(p) for p in recorded if os.path.basename(p) != TOP)
    assert not any(d.exists() for d in cg.lab_dirs(lab))
    with open(f"/proc/{pid}/cgroup") as f:
        assert f"/{TOP}/" not in f.read()              # back in the root cgroup of every hierarchy
    cg.remove(recorded)                                # again: nothing to do, no error
