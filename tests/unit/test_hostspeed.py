"""The host-speed sampler (orchestrator.hostspeed), its summary in the manifest and the sweep's judge on it."""
from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from orchestrator import fidelity as fid
from orchestrator import hostspeed, runner
from orchestrator.rundir import RunDir
from orchestrator.sweepstate import judge_host_speed


def test_a_sample_times_both_workloads_in_cpu_time():
    s = hostspeed.measure(reps=1)
    assert set(s) == {"ts", "compute", "memory"}
    assert s["compute"] > 0 and s["memory"] > 0
    assert abs(s["ts"] - time.time()) < 60


def test_the_summary_is_the_median_and_the_smallest_per_workload():
    samples = [{"ts": 1, "compute": 100, "memory": 30}, {"ts": 2, "compute": 90, "memory": 10},
               {"ts": 3, "compute": 110, "memory": 20}, {"ts": 4, "compute": "x"}]
    s = hostspeed.summarise(samples)
    assert s["samples"] == 4
    assert (s["compute"], s["compute_min"]) == (100, 90)
    assert (s["memory"], s["memory_min"]) == (20, 10)
    assert hostspeed.summarise([]) is None


def test_a_torn_last_line_is_skipped(tmp_path):
    f = tmp_path / "s.jsonl"
    f.write_text('{"ts": 1, "compute": 5, "memory": 2}\n{"ts": 2, "comp')
    assert hostspeed.read_samples(f) == [{"ts": 1, "compute": 5, "memory": 2}]
    assert hostspeed.read_samples(tmp_path / "none.jsonl") == []


def test_slower_than_the_best_by_more_than_the_share_is_a_reason():
    assert hostspeed.slower_than(79, 100) is not None and "79 < 80%" in hostspeed.slower_than(79, 100)
    assert hostspeed.slower_than(80, 100) is None
    assert hostspeed.slower_than(None, 100) is None and hostspeed.slower_than(50, None) is None


def test_the_sampler_writes_samples_until_stopped_and_the_run_gets_their_summary(tmp_path):
    rd = RunDir(tmp_path / "run", tmp_path)
    rd.path.mkdir(parents=True, exist_ok=True)
    start = time.time()
    proc = runner.start_host_speed(rd)
    f = rd.path / "hostspeed.jsonl"
    deadline = time.monotonic() + 120                   # a mechanism bound: the first sample, however busy
    while time.monotonic() < deadline and not hostspeed.read_samples(f):
        time.sleep(0.1)
    summary = runner.stop_host_speed(proc, rd, start, time.time())
    assert proc.returncode is not None                  # terminated, waited for: nothing outlives the run
    assert summary["samples"] >= 1 and summary["memory"] > 0 and summary["compute"] > 0
    # samples outside the run's window are left out, unless none fell in it
    assert runner.stop_host_speed(None, rd, start, start) is None


def test_the_sampler_ends_when_its_parent_does(tmp_path):
    """A killed orchestrator leaves no sampler behind: the loop checks its parent."""
    import subprocess
    import sys
    code = ("import os, subprocess, sys; p = subprocess.Popen([sys.executable, '-m', 'orchestrator.hostspeed', "
            f"'sample', {str(tmp_path / 's.jsonl')!r}, '--every', '0.2', '--parent', str(os.getpid())]); "
            "print(p.pid, flush=True)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    pid = int(out.stdout)

    def running() -> bool:
        try:
            return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
        except OSError:
            return False
    deadline = time.monotonic() + 120                   # a mechanism bound: it checks every 0.2 s
    try:
        while time.monotonic() < deadline and running():
            time.sleep(0.1)
        assert not running()
    finally:
        if running():
            os.kill(pid, signal.SIGKILL)


def test_the_judges_carry_the_runs_host_speed(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    (d / "manifest.json").write_text(json.dumps({"status": "completed",
                                                 "host_speed": {"samples": 3, "compute": 1500, "memory": 350}}))
    j = fid.run_judges(d)
    assert (j["host_speed_memory"], j["host_speed_compute"]) == (350, 1500)
    (d / "manifest.json").write_text(json.dumps({"status": "completed"}))
    assert fid.run_judges(d)["host_speed_memory"] is None


def _entry(memory, verdict="faithful", status="completed", coords=None, budget_bound=1):
    return {"status": status, "unfaithful": verdict == "unfaithful", "coords": coords or {"k": 1},
            "fidelity": {"verdict": verdict, "reasons": [], "host_speed_memory": memory,
                         "budget_bound": budget_bound}}


def test_a_run_no_budget_bound_is_not_flagged_however_slow_its_host():
    """Its result did not wait on the CPU (nor do runs without budgets: budget_bound None)."""
    points = {"a": _entry(300), "b": _entry(90, budget_bound=0), "c": _entry(90, budget_bound=None)}
    assert judge_host_speed(points) == []
    assert points["b"]["fidelity"]["host_speed_best"] == 300 and points["b"]["fidelity"]["host_speed_reason"] is None


def test_the_sweep_flags_the_repetitions_whose_host_was_slower_than_the_best_one():
    points = {"a": _entry(360), "b": _entry(150), "c": _entry(300), "d": _entry(None),
              "e": _entry(100, verdict="unfaithful"), "f": {"status": "failed", "fidelity": None},
              # another point: its lab's own work takes cache from the sampler; judged against its own repetitions
              "g": _entry(120, coords={"k": 8}), "h": _entry(110, coords={"k": 8}), "i": _entry(60, coords={"k": 8})}
    assert judge_host_speed(points) == ["b", "i"]       # e was unfaithful already
    assert [p for p, e in points.items() if e.get("unfaithful")] == ["b", "e", "i"]
    assert "150 < 80% of the best repetition's 360" in points["b"]["fidelity"]["host_speed_reason"]
    assert points["c"]["fidelity"]["host_speed_reason"] is None and points["a"]["fidelity"]["host_speed_best"] == 360
    assert points["h"]["fidelity"]["host_speed_best"] == 120 and not points["h"]["unfaithful"]
    assert judge_host_speed(points) == []               # idempotent
    assert points["b"]["unfaithful"] and not points["a"]["unfaithful"]


@pytest.mark.parametrize("speeds", [[], [None, None]])
def test_a_sweep_without_host_speeds_flags_nothing(speeds):
    points = {str(i): _entry(v) for i, v in enumerate(speeds)}
    assert judge_host_speed(points) == []
    assert not any(e["unfaithful"] for e in points.values())


def test_the_sweep_table_shows_the_host_speed_and_a_host_flag():
    from rich.console import Console

    from orchestrator.cli_sweep import points_table
    points = {"a": _entry(360), "b": _entry(150)}
    judge_host_speed(points)
    console = Console(record=True, width=200)
    console.print(points_table({"selected": ["a", "b"], "points": points}))
    text = console.export_text()
    row_a, row_b = (next(line for line in text.splitlines() if f" {p} " in line) for p in "ab")
    assert "360" in row_a and "faithful" in row_a and "unfaithful" not in row_a
    assert "150" in row_b and "unfaithful (host)" in row_b
