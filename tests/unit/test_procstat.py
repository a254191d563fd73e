"""The members' measured CPU (orchestrator/procstat.py) and its use: fidelity's `member_cores_each`, the sweep's
--parallel fit (sweepfit.check_fit) sized by it instead of the fixed per-member guess. Hand-worked numbers."""
from __future__ import annotations

import os
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from orchestrator import fidelity, procstat, sweepchild, sweepfit, sweeprun, sweepstate
from orchestrator import sweep as sw
from orchestrator.errors import SpecError


def _stat(pid: int, comm: str, utime: int, stime: int, start: int) -> str:
    # fields 3..: state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime cstime
    #             priority nice threads itrealvalue starttime vsize ...
    return (f"{pid} ({comm}) S 1 {pid} {pid} 0 -1 4194560 100 0 0 0 {utime} {stime} 7 8 20 0 1 0 {start} "
            f"12345678 900 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n")


def test_parse_stat_counts_fields_after_the_last_parenthesis():
    # a command name with a space and a ')' of its own must not shift the fields
    assert procstat.parse_stat(_stat(42, "py (x) y", 250, 50, 9000)) == (250, 50, 9000)


def test_summarise_sums_cpu_and_takes_the_oldest_process_age():
    # two processes at 100 ticks/s: 3 s + 1 s of CPU; started at ticks 1000 and 1500, now 2000: ages 10 s and 5 s
    out = procstat.summarise([(250, 50, 1000), (80, 20, 1500)], now_ticks=2000, hz=100)
    assert out == {"processes": 2, "cpu_s": 4.0, "uptime_s": 10.0, "cores": 0.4}
    assert procstat.summarise([], 2000, 100) is None


def test_processes_cpu_reads_a_proc_tree_and_skips_vanished_pids(tmp_path):
    hz = os.sysconf("SC_CLK_TCK")
    (tmp_path / "uptime").write_text("100.00 150.00\n")
    for pid, (u, s, start) in {7: (2 * hz, hz, 80 * hz), 9: (hz, 0, 90 * hz)}.items():
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(_stat(pid, "python", u, s, start))
    out = procstat.processes_cpu([7, 9, 9, 11], proc=tmp_path)      # 9 twice (a pack), 11 gone
    assert out == {"processes": 2, "cpu_s": 4.0, "uptime_s": 20.0, "cores": 0.2}


def test_processes_cpu_of_this_process_is_positive():
    out = procstat.processes_cpu([os.getpid()])
    assert out["processes"] == 1 and out["cpu_s"] > 0 and out["uptime_s"] > 0


def test_member_cores_each_divides_by_the_members():
    assert fidelity.member_cores_each({"member_cpu": {"cores": 0.4}}, 200) == pytest.approx(0.002)
    assert fidelity.member_cores_each({}, 200) is None
    assert fidelity.member_cores_each({"member_cpu": {"cores": 0.4}}, 0) is None


def test_point_need_takes_measured_member_cpu_instead_of_the_guess():
    doc = {"topology": {"nodes": 200, "members": "all"}, "nodes": {"packing": 20}}
    guess = sw.point_need(doc)
    measured = sw.point_need(doc, member_cores=0.002)
    assert guess.cpu_cores == pytest.approx(sw.LAB_CPU + 200 * sw.MEMBER_CPU)
    assert measured.cpu_cores == pytest.approx(sw.LAB_CPU + 0.4)


def test_check_fit_uses_the_largest_member_cpu_measured_in_the_sweep(monkeypatch):
    monkeypatch.setattr(sweepfit, "machine", lambda: (2, 16 * 2 ** 30))
    doc = {"topology": {"nodes": 200, "members": "all"}, "nodes": {"packing": 20}}
    prepared = {f"p{i}": (doc, "d") for i in range(3)}
    todo = [SimpleNamespace(id=f"p{i}") for i in range(3)]
    with pytest.raises(SpecError, match="largest K that fits is 1"):       # the guess: 4.1 cores a point
        sweepfit.check_fit(prepared, todo, 3, {})
    old = {"a": {"fidelity": {"member_cores_each": 0.001}}, "b": {"fidelity": {"member_cores_each": 0.002}},
           "c": {"fidelity": {"member_cores_each": None}}}
    f = sweepfit.check_fit(prepared, todo, 3, old)                          # 3 x (0.1 + 200 x 0.002) = 1.5 cores
    assert f.ok and f.cpu_need == pytest.approx(3 * (sw.LAB_CPU + 0.4))
    old["d"] = {"fidelity": {"member_cores_each": 0.003}}                   # 3 x 0.7 = 2.1 > 1.6: refused
    with pytest.raises(SpecError, match="largest K that fits is 2"):
        sweepfit.check_fit(prepared, todo, 3, old)


def test_local_driver_measures_its_running_processes_only():
    import subprocess
    import sys
    import time

    from orchestrator.backends.local import LocalDriver

    # spins until it has used 0.2 s of CPU (however fast the machine, however busy), then sleeps
    busy = subprocess.Popen([sys.executable, "-c",
                             "import time\nwhile time.process_time() < 0.2: pass\ntime.sleep(60)"])
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        done.wait(timeout=60)
        drv = LocalDriver.__new__(LocalDriver)
        drv.nodes = {"h0": busy, "h1": busy, "h2": done, "h3": SimpleNamespace(pid=1, poll=lambda: None)}
        deadline = time.monotonic() + 120
        out = drv._member_cpu()
        while out["cpu_s"] < 0.05 and time.monotonic() < deadline:    # until the busy loop has run a little
            time.sleep(0.2)
            out = drv._member_cpu()
        # one process: the pack-like duplicate counted once, the ended one and the non-Popen handle not at all
        assert out["processes"] == 1 and out["cpu_s"] >= 0.05
    finally:
        busy.kill()
        busy.wait()


def test_measure_first_runs_one_point_alone_then_fits_on_its_measurement(tmp_path, monkeypatch):
    """--parallel 3 on 2 cores: refused on the guess (with the hint), but with --measure-first one point runs
    alone, its members' measured CPU (here 0.001 cores each) sizes the fit, and the rest run 3 at once."""
    import json

    import yaml

    from orchestrator import runner

    f = tmp_path / "e.yaml"
    f.write_text("name: t\ntopology: {kind: tree, nodes: 100, degree: 4}\n"
                 "protocol: {gsgc: {subgroup: 3, step: 1s, fail_k: null}}\nduration: 20s\nseed: 3\n"
                 "sweep:\n  axes:\n    protocol.gsgc.step: [1s, 2s]\n  repetitions: 2\n")
    monkeypatch.setattr(sweepfit, "machine", lambda: (2, 64 * 2 ** 30))
    monkeypatch.setattr(sweepchild, "_warm_probe", lambda opts: None)
    with pytest.raises(SpecError, match="--measure-first runs one point alone"):
        sweeprun.run_sweep(f, sweeprun.SweepOptions(out=tmp_path / "sw", parallel=3, analyze=False))

    alone = []

    def fake_run(exp, opts, progress=None, variables=None):       # the sequential point, in this process
        rd = Path(opts.out) / "t-run"
        (rd / "configs").mkdir(parents=True)
        for i in range(100):
            (rd / "configs" / f"h{i}.json").write_text("{}")
        (rd / "manifest.json").write_text(json.dumps({"status": "completed", "member_cpu": {"cores": 0.1}}))
        alone.append(rd)
        return rd

    launched = []

    def launch(job, job_file, log_file):                           # the parallel ones: not run, only counted
        launched.append(yaml.safe_load(Path(job["experiment"]).read_text())["name"])
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "run", fake_run)
    monkeypatch.setattr(sweepstate, "run_problem", lambda rd: None)
    monkeypatch.setattr(sweepchild, "launch_child", launch)
    with pytest.raises(KeyboardInterrupt):
        sweeprun.run_sweep(f, sweeprun.SweepOptions(out=tmp_path / "sw", parallel=3, analyze=False,
                                                    measure_first=True))
    assert len(alone) == 1 and launched == ["t-k0"]
    data = json.loads((tmp_path / "sw" / "sweep.json").read_text())
    first = [e for e in data["points"].values() if e.get("status") == "completed"]
    assert len(first) == 1 and first[0]["fidelity"]["member_cores_each"] == pytest.approx(0.001)


def test_cpu_over_the_run_counts_from_the_common_start():
    from orchestrator.procstat import over_run

    # pid 1 used 2 s before and 5 s at the end; pid 2 started after the start (from 0); pid 3 is gone by the end
    out = over_run({1: 2.0, 3: 1.0}, {1: 5.0, 2: 1.5}, 10.0)
    assert out == {"run_cpu_s": 4.5, "run_wall_s": 10.0, "run_cores": 0.45}
    assert over_run({}, {}, 10.0) is None and over_run({1: 0.0}, {1: 1.0}, 0.0) is None


def test_start_requests_go_out_together_and_all_arrive():
    import threading

    from orchestrator.backends.local import LocalDriver

    drv = LocalDriver.__new__(LocalDriver)
    seen, lock, inflight, most = [], threading.Lock(), [0], [0]

    def request(name, req, timeout=5.0):
        with lock:
            inflight[0] += 1
            most[0] = max(most[0], inflight[0])
        time.sleep(0.05)
        with lock:
            inflight[0] -= 1
            seen.append((name, req["at"]))
        return {"ok": True}

    drv._request = request
    names = [f"h{i}" for i in range(40)]
    drv.start_protocol(names, 123.0)
    assert sorted(seen) == sorted((n, 123.0) for n in names)
    assert most[0] > 1                      # not one after another
