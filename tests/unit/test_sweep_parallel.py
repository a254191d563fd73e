"""`sweep --parallel K` without a network: the slots' lab names and address pools, the fit decision, and the
parent's scheduling of child processes (a fake launcher stands in for `python -m orchestrator.sweepchild`)."""
from __future__ import annotations

import ipaddress
import json
import signal
from pathlib import Path

import pytest

from orchestrator import sweep as sw
from orchestrator import sweepchild, sweepfit, sweepstate
from orchestrator import sweeprun as sr
from orchestrator.errors import SpecError
from orchestrator.spec import NAME_RE

from .test_sweeprun import EXP, _run_dir

GiB = 2 ** 30


# --- slots ----------------------------------------------------------------------------------------------------------

def test_slot_names_are_valid_distinct_lab_names():
    names = [sw.slot_name("sweep-small", s) for s in range(12)]
    assert names[:2] == ["sweep-small-k0", "sweep-small-k1"]
    assert len(set(names)) == 12 and all(NAME_RE.match(n) for n in names)
    long = [sw.slot_name("a-very-long-name", s) for s in (0, 9, 10)]
    assert long == ["a-very-long-n-k0", "a-very-long-n-k9", "a-very-long-k10"]   # 16 characters, no "--"
    assert all(NAME_RE.match(n) and len(n) <= 16 for n in long)


def test_slot_pools_never_overlap():
    k = 8
    pools = [sw.slot_addressing("10.0.0.0/16", "10.128.0.0/15", s, k) for s in range(k)]
    assert pools[0] == ("10.0.0.0/16", "10.128.0.0/15")
    nets = [ipaddress.IPv4Network(x) for pair in pools for x in pair]
    assert all(not a.overlaps(b) for i, a in enumerate(nets) for b in nets[i + 1:])
    # the prefix lengths (what the plan needs) are kept
    assert all(ipaddress.IPv4Network(n).prefixlen == 16 and ipaddress.IPv4Network(li).prefixlen == 15
               for n, li in pools)


def test_slot_pools_refuse_what_cannot_be_separated():
    with pytest.raises(SpecError, match="overlaps"):
        sw.slot_addressing("10.0.0.0/16", "10.128.0.0/15", 0, 65)     # slot 64's nodes would be slot 0's links
    with pytest.raises(SpecError, match="do not fit"):
        sw.slot_addressing("250.0.0.0/8", "251.0.0.0/8", 0, 8)


def test_slot_experiment_changes_only_the_name_and_the_pools():
    doc = {"name": "sw", "seed": 1, "topology": {"nodes": 8}}
    out = sw.slot_experiment(doc, 1, 2, "file")
    assert out == {"name": "sw-k1", "seed": 1, "topology": {"nodes": 8},
                   "addressing": {"nodes": "10.2.0.0/16", "links": "10.130.0.0/15"}}
    assert doc == {"name": "sw", "seed": 1, "topology": {"nodes": 8}}             # not changed in place
    assert sw.slot_experiment({"seed": 1}, 0, 2, "file")["name"] == "file-k0"
    custom = sw.slot_experiment({"name": "x", "addressing": {"nodes": "10.0.0.0/24", "links": "10.1.0.0/24"}},
                                1, 3, "f")
    assert custom["addressing"] == {"nodes": "10.0.1.0/24", "links": "10.1.1.0/24"}


# --- needs and the fit decision ---------------------------------------------------------------------------------------

def test_point_need_counts_member_processes_memory_and_the_delay_line():
    dense = sw.point_need({"topology": {"nodes": 16, "members": "all"}})
    assert (dense.members, dense.processes) == (16, 16)
    assert dense.mem_bytes == sw.LAB_MEM_BYTES + 16 * sw.MEMBER_MEM_BYTES
    assert dense.cpu_cores == pytest.approx(sw.LAB_CPU + 16 * sw.MEMBER_CPU) and dense.delayline_cores is None
    sparse = sw.point_need({"topology": {"nodes": 100, "members": {"count": 10, "seed": 1}}})
    assert sparse.members == 10
    rate = sw.point_need({"topology": {"nodes": 16}}, pkt_hops_per_s=10_000)
    assert rate.delayline_cores == pytest.approx(10_000 * sw.DELAYLINE_S_PER_HOP)
    assert rate.cpu_cores == pytest.approx(dense.cpu_cores + rate.delayline_cores)
    measured = sw.point_need({"topology": {"nodes": 16}}, pkt_hops_per_s=10_000, delayline_cores=0.05)
    assert measured.delayline_cores == 0.05                     # a measurement beats the estimate
    packed = sw.point_need({"topology": {"nodes": 100}, "nodes": {"packing": 50}})
    assert packed.processes == 2 and packed.mem_bytes < sw.point_need({"topology": {"nodes": 100}}).mem_bytes


def test_fit_names_the_largest_k_that_fits():
    small = sw.point_need({"topology": {"nodes": 12}})          # 0.34 cores
    f = sw.fit([small] * 8, 4, cores=2, mem_available=8 * GiB)  # budget 1.6 cores: 4 x 0.34 fit, 5 do not
    assert f.ok and f.max_k == 4
    f = sw.fit([small] * 8, 6, cores=2, mem_available=8 * GiB)
    assert not f.ok and f.max_k == 4
    assert "--parallel 6 would oversubscribe" in f.message() and "the largest K that fits is 4" in f.message()


def test_fit_takes_the_largest_points_and_memory_into_account():
    big = sw.point_need({"topology": {"nodes": 200}})            # 4.1 cores, ~8 GB
    small = sw.point_need({"topology": {"nodes": 12}})
    f = sw.fit([small, big, small], 2, cores=16, mem_available=10 * GiB)
    assert not f.ok and f.max_k == 1                             # two at once may be big + small: > 8 GiB
    assert sw.fit([small, big, small], 2, cores=16, mem_available=64 * GiB).ok
    assert sw.fit([big], 1, cores=1, mem_available=GiB).ok       # one at a time is never refused
    assert sw.fit([big], 8, cores=1, mem_available=GiB).ok       # nor a single point
    assert sw.fit([small] * 2, 8, cores=8, mem_available=8 * GiB).ok   # K beyond the points: the points
    f = sw.fit([big] * 3, 8, cores=2, mem_available=64 * GiB)
    assert not f.ok and f.max_k == 1 and "would oversubscribe this machine: 3 points at once need" in f.message()


# --- the parent: children, slots, resume, interruption ----------------------------------------------------------------

class FakeProc:
    """A child that finishes after `polls` polls, writing a run directory and its result like child_main."""

    def __init__(self, job: dict, polls: int, outcome: str, log: list):
        self.job, self.polls, self.outcome, self.log = job, polls, outcome, log
        self.code: int | None = None
        self.signals: list[int] = []

    def _finish(self, outcome: str) -> None:
        out = Path(self.job["out"])
        run = _run_dir(out / f"r{len(list(out.iterdir()))}", {"h0": 99.0, "h1": 100.0})
        if outcome == "interrupted":
            (run / "manifest.json").write_text(json.dumps({"status": "interrupted (Ctrl-C)"}))
        Path(self.job["result"]).write_text(json.dumps(
            {"run_dir": str(run.resolve()), "outcome": outcome, "error": "boom" if outcome == "failed" else None}))
        self.code = {"returned": 0, "failed": 1, "interrupted": 130}[outcome]
        self.log.append(("end", Path(self.job["out"]).name, outcome))

    def poll(self):
        if self.code is None:
            if self.outcome == "ctrl-c":
                raise KeyboardInterrupt
            self.polls -= 1
            if self.polls <= 0:
                self._finish(self.outcome)
        return self.code

    def send_signal(self, sig):
        self.signals.append(sig)
        if self.code is None:       # "done-at-signal": the run had ended, the child was writing its result
            self._finish("returned" if self.outcome == "done-at-signal" else "interrupted")

    def kill(self):
        self.code = -9

    def wait(self, timeout=None):
        return self.code


@pytest.fixture
def parallel(tmp_path, monkeypatch):
    """Runs a sweep with --parallel through fake children; returns (run, log of launches and ends, procs)."""
    f = tmp_path / "e.yaml"
    f.write_text(EXP)
    log: list = []
    procs: dict[str, FakeProc] = {}
    plan = {"polls": {}, "outcome": {}}
    monkeypatch.setattr(sweepfit, "machine", lambda: (64, 64 * GiB))
    monkeypatch.setattr(sr.time, "sleep", lambda s: None)
    monkeypatch.setattr(sweepchild, "_warm_probe", lambda opts: None)

    def launch(job, job_file, log_file):
        job_file.write_text(json.dumps(job))
        pid = Path(job["out"]).name
        exp = json.loads(json.dumps(__import__("yaml").safe_load(Path(job["experiment"]).read_text())))
        log.append(("start", pid, exp["name"], exp["addressing"]["nodes"]))
        outcome = plan["outcome"].get(pid, "returned")
        if isinstance(outcome, list):
            outcome = outcome.pop(0) if len(outcome) > 1 else outcome[0]
        procs[pid] = FakeProc(job, plan["polls"].get(pid, 2), outcome, log)
        return procs[pid]

    monkeypatch.setattr(sweepchild, "launch_child", launch)

    def run(k=2, **kw):
        return sr.run_sweep(f, sr.SweepOptions(out=tmp_path / "sw", parallel=k, **kw))

    return run, log, procs, plan, f


def test_parallel_points_run_in_slots_with_their_own_labs(parallel, tmp_path):
    run, log, procs, plan, _ = parallel
    plan["polls"] = {"subgroup-1_step-1s_r0": 5}          # the first point is slow: the others pass it
    root, data = run(k=3)
    starts = [x for x in log if x[0] == "start"]
    assert [x[2] for x in starts[:3]] == ["t-k0", "t-k1", "t-k2"]
    assert {x[3] for x in starts[:3]} == {"10.0.0.0/16", "10.2.0.0/16", "10.4.0.0/16"}
    running_at_once = max(sum(1 for y in log[:i + 1] if y[0] == "start") - sum(1 for y in log[:i + 1] if y[0] == "end")
                          for i in range(len(log)))
    assert running_at_once == 3
    assert len(starts) == 8 and {data["points"][p]["status"] for p in data["selected"]} == {"completed"}
    slow = data["points"]["subgroup-1_step-1s_r0"]
    assert slow["slot"] == 0 and slow["lab"] == "t-k0" and slow["run_dir"].startswith("points/subgroup-1_step-1s_r0/")
    # a freed slot is reused, and no two running points ever share one
    busy: dict[int, str] = {}
    for x in log:
        if x[0] == "start":
            slot = int(x[2].rsplit("k", 1)[1])
            assert slot not in busy
            busy[slot] = x[1]
        else:
            del busy[next(s for s, p in busy.items() if p == x[1])]
    # every point's experiment.yaml is the point's own (what its digest names), the slot's file what ran
    pdir = root / "points" / "subgroup-1_step-1s_r0"
    assert "name: t\n" in (pdir / "experiment.yaml").read_text()
    assert "name: t-k0" in (pdir / "experiment.k0.yaml").read_text()
    assert all(data["points"][p]["fidelity"]["verdict"] in ("faithful", "unjudged") for p in data["selected"])

    # resume: nothing left to run
    log.clear()
    run(k=3)
    assert [x for x in log if x[0] == "start"] == []


def test_parallel_failures_and_invalid_runs(parallel):
    run, log, procs, plan, _ = parallel
    plan["outcome"] = {"subgroup-3_step-2s_r1": "failed"}
    _, data = run(k=2, only=["subgroup=3"])
    assert data["points"]["subgroup-3_step-2s_r1"]["status"] == "failed"
    assert data["points"]["subgroup-3_step-2s_r1"]["error"] == "boom"
    assert data["points"]["subgroup-3_step-1s_r0"]["status"] == "completed"


def test_parallel_ctrl_c_stops_every_child_and_resume_skips_finished_points(parallel, tmp_path):
    run, log, procs, plan, _ = parallel
    plan["polls"] = {"subgroup-1_step-1s_r0": 1, "subgroup-1_step-1s_r1": 10**6, "subgroup-1_step-2s_r0": 10**6}
    plan["outcome"] = {"subgroup-1_step-2s_r1": "ctrl-c",       # its poll raises as a Ctrl-C would
                       "subgroup-1_step-2s_r0": "done-at-signal"}
    with pytest.raises(KeyboardInterrupt):
        run(k=3)
    root = tmp_path / "sw"
    data = json.loads((root / "sweep.json").read_text())
    pts = data["points"]
    assert pts["subgroup-1_step-1s_r0"]["status"] == "completed"
    assert pts["subgroup-1_step-1s_r1"]["status"] == "interrupted"
    assert pts["subgroup-1_step-2s_r1"]["status"] == "interrupted"
    assert pts["subgroup-1_step-2s_r0"]["status"] == "completed"          # finished as the signal came: kept
    assert pts["subgroup-1_step-2s_r0"]["fidelity"]["verdict"] in ("faithful", "unjudged")
    assert procs["subgroup-1_step-1s_r1"].signals == [signal.SIGINT]       # one SIGINT each, nothing more
    assert procs["subgroup-1_step-2s_r1"].signals == [signal.SIGINT]
    assert set(pts) == {"subgroup-1_step-1s_r0", "subgroup-1_step-1s_r1", "subgroup-1_step-2s_r0",
                        "subgroup-1_step-2s_r1"}

    plan["polls"], plan["outcome"] = {}, {}
    log.clear()
    _, data = run(k=2)
    started = [x[1] for x in log if x[0] == "start"]
    assert "subgroup-1_step-1s_r0" not in started and "subgroup-1_step-2s_r0" not in started and len(started) == 6
    assert {data["points"][p]["status"] for p in data["selected"]} == {"completed"}


def test_oversubscription_is_refused_before_anything_runs(parallel, monkeypatch, tmp_path):
    run, log, procs, plan, _ = parallel
    monkeypatch.setattr(sweepfit, "machine", lambda: (2, 8 * GiB))
    with pytest.raises(SpecError, match=r"--parallel 8 would oversubscribe .* the largest K that fits is 6"):
        run(k=8)
    assert log == [] and not (tmp_path / "sw").exists()
    run(k=6)
    assert len([x for x in log if x[0] == "start"]) == 8


def test_unfaithful_points_are_flagged_and_rerun_on_request(parallel, tmp_path):
    run, log, procs, plan, _ = parallel
    _, data = run(k=2, only=["subgroup=1", "step=1s"])
    root = tmp_path / "sw"
    # the run of r1 turns out to have had a late delay line
    rd = root / data["points"]["subgroup-1_step-1s_r1"]["run_dir"]
    (rd / "tc").mkdir(exist_ok=True)
    (rd / "tc" / "delayline.json").write_text(json.dumps({"hold_error": {"count": 100, "p99_s": 0.004}}))
    idx = json.loads((root / "sweep.json").read_text())
    entry = idx["points"]["subgroup-1_step-1s_r1"]
    sweepstate.judge(entry, rd, sr.SweepOptions())
    assert entry["unfaithful"] and "hold error p99 4.00 ms > 1 ms" in entry["fidelity"]["reasons"][0]
    (root / "sweep.json").write_text(json.dumps(idx))
    log.clear()
    run(k=2, only=["subgroup=1", "step=1s"])
    assert [x for x in log if x[0] == "start"] == []            # flagged, not rerun by default
    _, data = run(k=2, only=["subgroup=1", "step=1s"], rerun_unfaithful=True)
    assert [x[1] for x in log if x[0] == "start"] == ["subgroup-1_step-1s_r1"]
    assert data["points"]["subgroup-1_step-1s_r1"]["unfaithful"] is False


def test_child_main_runs_one_point_and_reports(tmp_path, monkeypatch):
    import orchestrator.runner as runner

    def fake_run(exp, opts, progress=None, variables=None):
        d = _run_dir(Path(opts.out) / Path(exp).stem, {"h0": 99.0})
        opts.on_run_dir(d)
        assert json.loads((tmp_path / "res.json").read_text())["run_dir"] == str(d.resolve())
        if "interrupt" in str(exp):
            raise KeyboardInterrupt
        return d

    monkeypatch.setattr(runner, "run", fake_run)
    job = {"experiment": "e.yaml", "out": str(tmp_path), "result": str(tmp_path / "res.json"), "backend": "mininet",
           "shaper": "auto", "strict": False, "probe_links": 1, "probe_paths": 1}
    (tmp_path / "job.json").write_text(json.dumps(job))
    assert sweepchild.child_main(tmp_path / "job.json") == 0
    assert json.loads((tmp_path / "res.json").read_text())["outcome"] == "returned"
    (tmp_path / "job.json").write_text(json.dumps({**job, "experiment": "interrupt.yaml"}))
    assert sweepchild.child_main(tmp_path / "job.json") == 130
    assert json.loads((tmp_path / "res.json").read_text())["outcome"] == "interrupted"


def test_parallel_needs_a_local_backend(parallel):
    run, log, *_ = parallel
    with pytest.raises(SpecError, match="--parallel 2: the hosts backend's labs share the same machines"):
        run(k=2, backend="hosts")
    assert log == []


def test_the_fit_check_uses_the_delay_line_load_measured_by_earlier_points(monkeypatch):
    monkeypatch.setattr(sweepfit, "machine", lambda: (2, 8 * GiB))
    doc = {"topology": {"nodes": 8}}
    pts = [sw.Point(f"p{i}", (), 0) for i in range(4)]
    prepared = {p.id: (doc, "d") for p in pts}
    assert sweepfit.check_fit(prepared, pts, 3, {}).ok                       # 3 x 0.26 cores
    old = {"p0": {"fidelity": {"delayline_cores": 0.5, "delayline_pkts_per_s": 2000.0}}, "p1": {"fidelity": None}}
    with pytest.raises(SpecError, match=r"the largest K that fits is 2 .*delay line 0.50"):
        sweepfit.check_fit(prepared, pts, 3, old)                             # 3 x 0.76 cores > 1.6
    # only a packet rate known: 20 000 packet-hops/s x 56 us = 1.12 cores per point
    with pytest.raises(SpecError, match=r"the largest K that fits is 1 "):
        sweepfit.check_fit(prepared, pts, 2, {"p0": {"fidelity": {"delayline_pkts_per_s": 20000.0}}})
