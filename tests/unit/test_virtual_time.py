"""Virtual time and CPU budgets on the orchestrator's side (issue #33, docs/virtual-time.md), without root: the
dilation's resolution (`auto` hand-worked), the budgets' checks, the shaping rendered at N, the runner's schedule at
N on a fake clock, a whole run on the fake backend, the probe's arithmetic, the judges and the analysis' pcap
times."""
from __future__ import annotations

import json
import struct

import pytest

from gossipnode.vclock import VirtualClock
from orchestrator import fidelity as fid
from orchestrator import lab as labmod
from orchestrator import sweep as sw
from orchestrator.backends import fake
from orchestrator.backends.base import RunContext
from orchestrator.backends.mininet import delayline_queues, node_shaping
from orchestrator.clikit import parse_dilation
from orchestrator.errors import SpecError
from orchestrator.plan import build_plan
from orchestrator.rundir import RunDir
from orchestrator.runner import RunOptions, Runner, run
from orchestrator.schedule import expand, parse_schedule
from orchestrator.shaping.params import DirParams
from orchestrator.shaping.probe import Capabilities
from orchestrator.spec import parse_experiment
from orchestrator.state import LabState
from orchestrator.sweepfit import measured_cpu
from orchestrator.timebase import Measured, check_budgets, resolve_dilation

LINKS = DirParams(rate_bps=30_000, delay_s=0.005, jitter_s=0.001, loss=0.01, queue_pkts=64)


# --- the arithmetic --------------------------------------------------------------------------------------------

def test_dilated_link_parameters():
    d = LINKS.dilated(4)
    assert (d.delay_s, d.jitter_s, d.rate_bps) == (0.02, 0.004, 7500)
    assert (d.loss, d.queue_pkts, d.jitter_dist) == (0.01, 64, "uniform")        # unchanged
    assert LINKS.dilated(1) is LINKS
    assert DirParams().dilated(10) == DirParams()                                  # unlimited stays unlimited
    # serialisation of a 100-byte packet takes N times longer
    assert d.serialisation_s(100) == pytest.approx(4 * LINKS.serialisation_s(100))


def test_shaping_renders_the_dilated_link():
    plan = build_plan(parse_experiment("topology: {kind: tree, nodes: 3, degree: 2}\n"
                                       "links: {rate: 30kbit, delay: 5ms, queue: 64}\n"))
    tc, _ = node_shaping(plan, "h0", "netem", 7)
    assert tc[0].endswith("netem delay 35ms limit 100000") and tc[1].endswith("netem rate 4285.71bit limit 64")
    tc1, _ = node_shaping(plan, "h0", "netem")
    assert tc1[0].endswith("netem delay 5ms limit 100000") and tc1[1].endswith("netem rate 30000bit limit 64")
    assert node_shaping(plan, "h0", "tbf", 3)[0][0].startswith("qdisc add dev h0-eth0 root handle 1: tbf rate "
                                                                "10000bit burst 1600")
    queues = delayline_queues(plan, "lab", 10)
    assert {q.params.delay_s for q in queues} == {0.05} and {q.params.rate_bps for q in queues} == {3000}


# --- auto and the budgets' checks (hand-worked) ----------------------------------------------------------------

def test_auto_from_budgets():
    # 48 members x 1.0 virtual core must fit in 0.8 x 2 - 0.1 = 1.5 real cores: N >= 32
    d = resolve_dilation("auto", 1.0, 48, 1, 2.0)
    assert d.n == 32 and d.requested == "auto"
    assert "N >= 32" in d.reasons[0] and d.reasons[-1] == "auto: N = 32"
    # a pack of 20 members x 1.0 must get at most one real core: N >= 20 (the load needs 200 / 1.5 = 133.3 -> 134)
    assert resolve_dilation("auto", 1.0, 200, 20, 2.0).n == 134
    assert resolve_dilation("auto", 0.05, 200, 40, 2.0).n == 7       # 10 / 1.5 = 6.67 -> 7; the pack: 2
    assert resolve_dilation(4, 1.0, 48, 1, 2.0).n == 4               # a number is itself


def test_auto_from_a_measurement():
    m = Measured(member_cores_each=0.1, daemon_cores=0.3, source="an earlier run")
    # 48 x 0.1 x 1.25 = 6 virtual cores + 0.3 for the daemons = 6.3 / 1.5 = 4.2 -> 5
    d = resolve_dilation("auto", 1.0, 48, 1, 2.0, m)
    assert d.n == 5 and d.inputs["measured_from"] == "an earlier run"
    # a measured demand above the budget is capped by the budget: 48 x 0.05 + 0.3 = 2.7 / 1.5 = 1.8 -> 2
    assert resolve_dilation("auto", 0.05, 48, 1, 2.0, m).n == 2
    # no budget, nothing measured: the sweep's guess 0.02 per member: 48 x 0.02 = 0.96 / 1.5 -> 1
    assert resolve_dilation("auto", None, 48, 1, 2.0).n == 1
    with pytest.raises(ValueError, match="more than 1000"):
        resolve_dilation("auto", 1.0, 2000, 1, 2.0)


def test_budget_checks():
    assert check_budgets(None, 1.0, 20) is None
    assert check_budgets(1.0, 1.0, 1) is None
    assert "below what CFS" in check_budgets(0.0005, 1.0, 1)
    assert "use a dilation >= 20" in check_budgets(1.0, 10.0, 20)
    assert check_budgets(1.0, 20.0, 20) is None
    assert "even at dilation 1000" in check_budgets(100.0, "auto", 20)
    assert check_budgets(1.0, "auto", 20) is None


def test_bad_input_names_the_file_line_and_field(tmp_path):
    base = "topology: {kind: tree, nodes: 3, degree: 2}\n"
    for text, what in (("time: {dilation: 0}\n", "time.dilation"), ("time: {dilation: fast}\n", "time.dilation"),
                       ("time: {dilation: -2}\n", "time.dilation"), ("nodes: {cpu: 0}\n", "nodes.cpu"),
                       ("nodes: {cpu: -1}\n", "nodes.cpu")):
        f = tmp_path / "x.yaml"
        f.write_text(base + text)
        with pytest.raises(SpecError, match=rf"x.yaml:2: {what}"):
            labmod.prepare(f)
    f.write_text(base + "nodes: {cpu: 1.0, packing: 3}\ntime: {dilation: 2}\n")
    with pytest.raises(SpecError, match=r"x.yaml:2: nodes.cpu: 3 member\(s\) per process x 1 virtual cores / "
                                        r"dilation 2 = 1.5 real cores"):
        labmod.prepare(f)
    f.write_text(base + "nodes: {cpu: 2000}\n")
    with pytest.raises(SpecError, match="x.yaml:2: nodes.cpu: .*even at dilation 1000"):
        labmod.prepare(f)
    assert parse_dilation("auto") == "auto" and parse_dilation("2.5") == 2.5 and parse_dilation(None) is None
    for bad in ("0", "x", "-1", "1001", "nan"):
        with pytest.raises(SpecError, match="--dilation"):
            parse_dilation(bad)


# --- the runner at N -------------------------------------------------------------------------------------------

EXP = """
name: vt
topology: {kind: tree, nodes: 7, degree: 2}
links: {rate: 1mbit, delay: 5ms}
protocol: {gsgc: {subgroup: 2, step: 1s}}
duration: 2s
seed: 4
schedule:
  - {at: 0.5s, action: crash, nodes: [h3]}
  - {at: 1.0s, action: restart, crashed: true}
  - {at: 1.2s, action: pause, nodes: [h4], duration: 0.4s}
"""


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ORCHESTRATOR_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(labmod, "probe", lambda cache=True: Capabilities("test", False, True, True, True))
    monkeypatch.setattr(labmod, "CTL_ROOT", str(tmp_path / "ctl"))


class FakeClock:
    def __init__(self):
        self.t = 100.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += max(s, 0.001)


def test_the_schedule_runs_at_n_times_its_virtual_times(tmp_path, state_dir):
    exp = parse_experiment(EXP)
    plan = build_plan(exp)
    tl = expand(parse_schedule(exp.schedule), plan, exp.duration_s, exp.seed)
    rd = RunDir(tmp_path / "run")
    driver = fake.FakeBackend().driver(RunContext(exp, plan, LabState(lab="vt", backend="fake", shaper="tbf"), rd,
                                                  tmp_path / "ctl", [m.name for m in plan.members],
                                                  labmod.NullProgress()))
    clock = FakeClock()
    runner = Runner(tl, driver, rd, clock=clock, sleep=clock.sleep, dilation=5.0)
    t0 = clock()
    applied_at = []
    apply = runner.apply
    runner.apply = lambda op: (applied_at.append((op.t, clock() - t0)), apply(op))[1]
    runner.execute(t0, 2.0)
    # every operation at 5 x its (virtual) time, never early, within one sleep step (0.2 s real) of it
    for virtual, real in applied_at:
        assert 5 * virtual <= real < 5 * virtual + 0.21
    assert [a["planned_s"] for a in runner.applied] == [0.5, 1.0, 1.2, 1.6]
    assert all(0 <= a["actual_s"] - a["planned_s"] < 0.21 / 5 for a in runner.applied)     # virtual seconds
    assert clock() - t0 >= 10.0                                                          # 2 s virtual


def _write(tmp_path, text):
    f = tmp_path / "vt.yaml"
    f.write_text(text)
    return f


def test_a_run_at_dilation_3_records_its_clock_everywhere(tmp_path, state_dir, monkeypatch):
    import orchestrator.runner as runner_mod

    monkeypatch.setattr(runner_mod.Runner, "execute", lambda self, t0, d: None)     # no 6 s of waiting
    run_dir = run(_write(tmp_path, EXP + "time: {dilation: 3}\n"), RunOptions(backend="fake", out=tmp_path / "runs"))
    m = json.loads((run_dir / "manifest.json").read_text())
    tm = m["time"]
    assert tm["dilation"] == 3 and tm["requested"] == 3.0 and tm["epoch"] <= m["t0_real_unix"]
    clock = VirtualClock(3, tm["epoch"])
    assert m["t0_unix"] == pytest.approx(clock.to_virtual(m["t0_real_unix"]))
    assert m["t0_unix"] < m["t0_real_unix"]                 # virtual time runs slower from the epoch on
    cfg = json.loads((run_dir / "configs" / "h0.json").read_text())
    assert cfg["clock"] == {"dilation": 3.0, "epoch": tm["epoch"]}
    # the orchestrator's own records are virtual
    rec = [json.loads(x) for x in (run_dir / "events" / "orchestrator.jsonl").read_text().splitlines()]
    assert all(r["ts"] < clock.to_virtual(m["ended_at"]) + 1e-6 for r in rec)
    # --dilation replaces the file's; a reused lab must have the same
    run_dir = run(_write(tmp_path, EXP + "time: {dilation: 3}\n"),
                  RunOptions(backend="fake", out=tmp_path / "runs", dilation=2.0, keep=True, name="vt2"))
    assert json.loads((run_dir / "manifest.json").read_text())["time"]["dilation"] == 2.0
    with pytest.raises(SpecError, match=r"vt.yaml:\d+: time.dilation: lab 'vt2' was built for dilation 2, not 3"):
        run(_write(tmp_path, EXP + "time: {dilation: 3}\n"), RunOptions(backend="fake", out=tmp_path / "runs",
                                                                         lab="vt2"))
    labmod.teardown("vt2")


def test_auto_is_resolved_before_anything_is_built_and_recorded(tmp_path, state_dir, monkeypatch):
    import orchestrator.runner as runner_mod

    monkeypatch.setattr(runner_mod.Runner, "execute", lambda self, t0, d: None)
    monkeypatch.setattr(runner_mod.os, "cpu_count", lambda: 2)
    text = EXP + "time: {dilation: auto}\nnodes: {cpu: 0.5, packing: process}\n"
    run_dir = run(_write(tmp_path, text), RunOptions(backend="fake", out=tmp_path / "runs"))
    tm = json.loads((run_dir / "manifest.json").read_text())["time"]
    # 7 members x 0.5 = 3.5 virtual cores / 1.5 = 2.33 -> 3
    assert tm["dilation"] == 3 and tm["requested"] == "auto" and "N >= 2.33" in tm["reasons"][0]
    run_dir = run(_write(tmp_path, text), RunOptions(backend="fake", out=tmp_path / "runs",
                                                      measured=Measured(0.01, 0.0, "x")))
    assert json.loads((run_dir / "manifest.json").read_text())["time"]["dilation"] == 1


# --- the probe's arithmetic ------------------------------------------------------------------------------------

def _plan():
    return build_plan(parse_experiment("topology: {kind: tree, nodes: 3, degree: 2}\n"
                                       "links: {rate: 30kbit, delay: 5ms, queue: 64}\n"))


class FakeProc:
    def __init__(self, out):
        self.out = out

    def communicate(self, timeout=None):
        return self.out, ""


def test_the_probe_converts_real_rtts_to_virtual():
    plan = _plan()
    probes = fid.plan_hop_probes(plan, "delayline", 1)
    p = probes[0]
    expected = 2 * (5 + 114 * 8 / 30)                 # 2 x (delay + serialisation of 100 + 14 bytes): ms
    assert p.expected_rtt_ms == pytest.approx(expected)
    assert p.min_gap_ms == pytest.approx(2 * 114 * 8 / 30)
    assert fid.ping_interval_s(p, 1) == 0.2                                  # as ever at N = 1
    assert fid.ping_interval_s(p, 10) == pytest.approx(0.608, abs=1e-3)     # pings must not queue at N = 10
    seen = {}

    def popen(node, argv, **kw):
        seen["argv"] = argv
        real = expected * 10
        return FakeProc("".join(f"64 bytes: icmp_seq={i} ttl=64 time={real:.3f} ms\n" for i in range(4)))

    fid.measure(probes, plan, popen, count=4, dilation=10)
    assert p.rtt_ms == [pytest.approx(expected, abs=1e-3)] * 4
    assert seen["argv"][seen["argv"].index("-i") + 1] == "0.608"
    s = fid.plan_rate_sample(plan, "delayline", dilation=10)
    assert s.configured_bps == 30_000 and s.real_bps == 3000
    assert s.payload == 64                      # 3 kbit/s x 1.5 s / 8 / 30 packets is less than the floor


def test_judges_in_virtual_time(tmp_path):
    d = tmp_path / "run"
    (d / "tc").mkdir(parents=True)
    (d / "tc" / "delayline.json").write_text(json.dumps({"hold_error": {"p99_s": 0.004, "count": 100},
                                                         "cpu_s": 10.0, "uptime_s": 100.0, "packets": 1000}))
    (d / "manifest.json").write_text(json.dumps({"time": {"dilation": 8, "epoch": 0},
                                                 "member_cpu": {"cores": 0.4, "run_cores": 0.2}}))
    (d / "configs").mkdir()
    for i in range(4):
        (d / "configs" / f"h{i}.json").write_text("{}")
    j = fid.run_judges(d)
    assert j["hold_p99_ms"] == pytest.approx(0.5)          # 4 ms real at N = 8
    assert j["verdict"] == "faithful" and j["dilation"] == 8
    assert j["member_cores_each"] == pytest.approx(0.05)   # over the run, per member, real
    assert j["member_virtual_cores_each"] == pytest.approx(0.4)
    assert j["delayline_virtual_cores"] == pytest.approx(0.8)
    m = measured_cpu({"a": {"fidelity": j}, "b": {"fidelity": {"member_cores_each": 0.5}}})
    assert (m.member_cores_each, m.daemon_cores) == (pytest.approx(0.5), pytest.approx(0.8))


def test_cpu_judges_hand_worked():
    # a: waited 1.5 s, 0.5 s of it throttled, ran 500 times at N = 4 -> (1.5 - 0.5) / 500 / 4 = 0.5 ms virtual
    # b: throttled in 90 of 100 periods -> bound; waited 8 s, all throttled, 1000 times -> 0 ms
    # c: no scheduler reading (Docker) -> no wait
    budget = {"enforced": True, "dilation": 4, "units": {
        "a": {"real_cores": 0.2, "run": {"wall_s": 10, "usage_s": 1.2, "run_delay_s": 1.5, "throttled_s": 0.5,
                                          "timeslices": 500, "nr_periods": 100, "nr_throttled": 10}},
        "b": {"real_cores": 0.2, "run": {"wall_s": 10, "usage_s": 2.0, "run_delay_s": 8.0, "throttled_s": 8.0,
                                          "timeslices": 1000, "nr_periods": 100, "nr_throttled": 90}},
        "c": {"real_cores": 0.2, "run": {"wall_s": 10, "usage_s": 2.0, "nr_periods": 100, "nr_throttled": 0}}}}
    j = fid.cpu_judges(budget)
    assert j["cpu_wait_ms"] == pytest.approx(0.5) and j["cpu_wait_unit"] == "a"
    assert j["budget_bound"] == 1 and j["throttled_share_max"] == pytest.approx(0.9)
    budget["dilation"] = 1                                   # the same wait in real time: 2 ms > 1 ms -> unfaithful
    assert fid.cpu_judges(budget)["cpu_wait_ms"] == pytest.approx(2.0)
    assert fid.cpu_judges({"enforced": False})["cpu_wait_ms"] is None
    assert fid.cpu_judges(None)["budget_bound"] is None


def test_sweep_fit_divides_by_the_dilation():
    doc = {"topology": {"kind": "tree", "nodes": 48, "degree": 3}, "time": {"dilation": 10}}
    need = sw.point_need(doc, member_cores=0.5, delayline_cores=0.4)
    assert need.cpu_cores == pytest.approx(sw.LAB_CPU + (48 * 0.5 + 0.4) / 10)
    doc["nodes"] = {"cpu": 0.1}                                   # the budget caps what a member can use
    assert sw.point_need(doc, member_cores=0.5).cpu_cores == pytest.approx(sw.LAB_CPU + 48 * 0.1 / 10)
    doc["time"]["dilation"] = "auto"
    assert sw.point_need(doc, share=0.8).cpu_cores == 0.8


# --- the analysis: pcap times become virtual -------------------------------------------------------------------

def _pcap(path, stamps):
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for ts in stamps:
            frame = b"\x00" * 12 + b"\x08\x06" + b"\x00" * 28              # an ARP frame: not decoded, timed
            f.write(struct.pack("<IIII", int(ts), int(round((ts % 1) * 1e6)), len(frame), len(frame)) + frame)


def test_pcap_times_become_virtual(tmp_path):
    from analysis.pcap import CaptureFile, packet_rows
    from analysis.rundir import load as load_run

    f = tmp_path / "h0-any.pcap"
    _pcap(f, [1000.0, 1004.0])
    clock = VirtualClock(4, 900.0)
    rows = list(packet_rows(CaptureFile("h0", "eth0", str(f), "pcaps/h0-any.pcap", "10.0.0.1"), "r", 925.0, {},
                            clock=clock))
    assert [r[5] for r in rows] == [925.0, 926.0] and [r[6] for r in rows] == [0.0, 1.0]
    # the run directory's clock comes from the manifest; its end (real) becomes virtual
    rd = tmp_path / "run"
    (rd / "configs").mkdir(parents=True)
    (rd / "manifest.json").write_text(json.dumps({"time": {"dilation": 4, "epoch": 900.0}, "t0_unix": 925.0,
                                                  "ended_at": 1100.0}))
    (rd / "plan.json").write_text(json.dumps({"nodes": [], "links": []}))
    info = load_run(rd)
    assert info.clock == clock and info.t0 == 925.0 and info.end == 950.0


def test_auto_counts_the_wait_of_members_woken_together():
    # 64 members measured at 0.037 virtual cores each: the load alone needs 64 x 0.046 / 1.5 = 1.97 -> 2; but they
    # waited 3.9 ms real for a CPU per wakeup (a multicast wakes them all): 3.9 / 0.5 -> N = 8
    m = Measured(0.037, 0.0, "a pilot", cpu_wait_real_ms=3.9)
    d = resolve_dilation("auto", 1.0, 64, 1, 2.0, m)
    assert d.n == 8 and "waited 3.9 ms (real)" in d.reasons[-2]
    assert resolve_dilation("auto", 1.0, 64, 1, 2.0, Measured(0.037, 0.0, "x")).n == 2
    j = {"member_cores_each": 0.01, "dilation": 8, "cpu_wait_ms": 0.49}      # a judged point: 0.49 ms at N = 8
    assert measured_cpu({"p": {"fidelity": j}}).cpu_wait_real_ms == pytest.approx(3.92)
