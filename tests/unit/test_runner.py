"""The Runner without root: the fake backend and driver (orchestrator/backends/fake.py) take a run through a
schedule; the same `orchestrator.runner.run` path as Mininet, Docker and real hosts."""
from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from orchestrator import lab as labmod
from orchestrator.backends import fake
from orchestrator.backends.base import Backend, RunContext
from orchestrator.errors import SpecError
from orchestrator.plan import build_plan
from orchestrator.rundir import RunDir
from orchestrator.runner import RunOptions, Runner, run
from orchestrator.schedule import OpKind, expand, parse_schedule
from orchestrator.shaping.probe import Capabilities
from orchestrator.spec import parse_experiment
from orchestrator.state import LabState

EXP = """
name: fk
topology: {kind: tree, nodes: 7, degree: 2}
links: {rate: 1mbit, delay: 5ms}
protocol: {gsgc: {subgroup: 2, step: 1s}}
workload: {senders: 1, rate_per_s: 5, size_bytes: 64}
duration: 2s
seed: 4
schedule:
  - {at: 0.1s, action: crash, nodes: [h3]}
  - {at: 0.2s, action: restart, crashed: true}
  - {at: 0.3s, action: pause, nodes: [h4], duration: 0.5s}
  - {at: 0.4s, action: link, links: [[h0, h1]], direction: down, set: {delay: 50ms}}
  - {at: 0.5s, action: partition, subtree: h2}
  - {at: 1.0s, action: heal}
  - {at: 1.5s, action: workload, op: stop}
"""


@pytest.fixture(autouse=True)
def state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ORCHESTRATOR_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(labmod, "probe", lambda cache=True: Capabilities("test", False, True, True, True))
    monkeypatch.setattr(labmod, "CTL_ROOT", str(tmp_path / "ctl"))


def fake_backend(monkeypatch, **overrides) -> list:
    """`--backend fake` for `run` (a hidden backend) recording its calls in the list returned; `overrides`
    replace FakeBackend methods (e.g. the base class's isolate, which cannot drop traffic)."""
    calls: list = []
    monkeypatch.setitem(__import__("orchestrator.backends.registry", fromlist=["x"]).HIDDEN, "fake",
                        lambda: type("B", (fake.FakeBackend,), {"__init__": lambda self: fake.FakeBackend.__init__(
                            self, calls), "name": "fake", **overrides}))
    return calls


class FakeClock:
    def __init__(self):
        self.t = 100.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += max(s, 0.01)


def _runner(tmp_path, text=EXP):
    exp = parse_experiment(text)
    plan = build_plan(exp)
    tl = expand(parse_schedule(exp.schedule), plan, exp.duration_s, exp.seed)
    state = LabState(lab="fk", backend="fake", shaper="tbf")
    backend = fake.FakeBackend()
    rd = RunDir(tmp_path / "run")
    first = [m.name for m in plan.members if m.name not in tl.joiners]
    driver = backend.driver(RunContext(exp, plan, state, rd, tmp_path / "ctl", first, labmod.NullProgress()))
    from orchestrator.nodeconfig import node_configs

    driver.configure(node_configs(exp, plan, rd.path, tmp_path / "ctl"))
    clock = FakeClock()
    return Runner(tl, driver, rd, clock=clock, sleep=clock.sleep), backend, driver, state, clock


def test_runner_applies_every_operation_through_the_driver_in_time_order(tmp_path):
    runner, backend, driver, state, clock = _runner(tmp_path)
    driver.start_nodes(list(runner.driver.ctx.first))
    backend.calls.clear()
    runner.execute(clock(), 2.0)
    ops = [a["op"] for a in runner.applied]
    assert ops == ["crash", "start", "stop_signal", "link_set", "link_cut", "cont_signal", "link_restore",
                   "workload_stop"]
    assert all(a["actual_s"] >= a["planned_s"] for a in runner.applied)
    calls = [c for c in backend.calls if c[0] in ("signal", "start_nodes", "set_link", "control")]
    assert calls[0] == ("signal", ("h3",), "SIGKILL") and calls[1] == ("start_nodes", ("h3",))
    assert calls[2] == ("signal", ("h4",), "SIGSTOP")
    link_h1 = next(lk.id for lk in runner.driver.ctx.plan.links if lk.child == "h1")
    assert calls[3][:2] == ("set_link", f"{link_h1}/down") and calls[3][2]["delay_s"] == pytest.approx(0.05)
    cut = [c for c in calls if c[0] == "set_link" and c[2] is None]
    assert len(cut) == 2                                     # h2's uplink, both directions
    restored = calls[calls.index(("signal", ("h4",), "SIGCONT")) + 1:]
    # heal restores the three changed directions to the plan (5 ms), not the link action's 50 ms
    assert sorted(c[1] for c in restored if c[0] == "set_link") == sorted([f"{link_h1}/down"] + [c[1] for c in cut])
    assert all(c[2]["delay_s"] == pytest.approx(0.005) for c in restored if c[0] == "set_link")
    senders = [m for m, c in driver.configs.items() if c["id"] in c["senders"]]
    assert calls[-1] == ("control", tuple(senders), "stop") and senders
    assert driver.nodes["h3"] == "running" and driver.nodes["h4"] == "running"
    recorded = [json.loads(x) for x in (tmp_path / "run" / "events" / "orchestrator.jsonl").read_text().splitlines()]
    assert [r["op"] for r in recorded] == ops


SILENT = EXP.split("schedule:")[0] + """schedule:
  - {at: 0.1s, action: crash, nodes: [h3, h5], mode: silent}
  - {at: 0.2s, action: restart, nodes: [h3]}
  - {at: 0.3s, action: crash, nodes: [h4]}
"""


def test_a_silent_crash_cuts_the_members_off_before_the_kill_and_a_restart_or_the_end_reconnects_them(tmp_path):
    runner, backend, driver, state, clock = _runner(tmp_path, SILENT)
    driver.start_nodes(list(runner.driver.ctx.first))
    backend.calls.clear()
    runner.execute(clock(), 2.0)
    assert [(a["op"], a["mode"]) for a in runner.applied if a["op"] == "crash"] == [("crash", "silent"),
                                                                                  ("crash", "kill")]
    calls = [c for c in backend.calls if c[0] in ("isolate", "signal", "start_nodes")]
    assert calls == [("isolate", ("h3", "h5"), True), ("signal", ("h3", "h5"), "SIGKILL"),    # cut, then killed
                     ("isolate", ("h3",), False), ("start_nodes", ("h3",)),                 # back before it starts
                     ("signal", ("h4",), "SIGKILL")]                                        # a kill: no cut
    assert driver.isolated == {"h5"}
    driver.stop()
    assert backend.calls[-2:] == [("isolate", ("h5",), False), ("stop",)] and driver.isolated == set()


def test_a_member_whose_cut_failed_is_still_killed_and_the_error_is_recorded(tmp_path, monkeypatch):
    runner, backend, driver, state, clock = _runner(tmp_path, SILENT)
    driver.start_nodes(list(runner.driver.ctx.first))
    monkeypatch.setattr(fake.FakeBackend, "isolate", lambda self, st, names, on: {"h5": "iptables: no such table"})
    runner.execute(clock(), 0.15)
    crash = runner.applied[0]
    assert crash["errors"] == {"h5": "iptables: no such table"} and driver.nodes["h5"] == "dead"
    assert driver.isolated == {"h3"}


def test_runner_refuses_an_operation_the_driver_does_not_support(tmp_path, monkeypatch):
    runner, *_ = _runner(tmp_path)
    monkeypatch.setattr(fake.FakeDriver, "OPS", frozenset(OpKind) - {OpKind.LINK_CUT})
    with pytest.raises(Exception, match="not supported"):
        runner.apply(next(o for o in runner.timeline.ops if o.kind == OpKind.LINK_CUT))


def _write(tmp_path, text=EXP):
    f = tmp_path / "fk.yaml"
    f.write_text(text)
    return f


def test_run_on_the_fake_backend_writes_a_complete_run_directory(tmp_path, monkeypatch):
    calls = fake_backend(monkeypatch)
    run_dir = run(_write(tmp_path), RunOptions(backend="fake", out=tmp_path / "runs"))
    m = json.loads((run_dir / "manifest.json").read_text())
    assert m["status"] == "completed" and m["backend"] == "fake" and m["schedule"]["applied_ops"] == 8
    assert m["t0_unix"] and m["versions"]["python"]
    assert (run_dir / "plan.json").exists() and len(list((run_dir / "configs").glob("*.json"))) == 7
    # the first members waited for the common start; h3, restarted by the schedule, runs at once from then on
    assert json.loads((run_dir / "configs" / "h1.json").read_text())["wait_for_start"] is True
    assert json.loads((run_dir / "configs" / "h3.json").read_text())["wait_for_start"] is False
    kinds = [c[0] for c in calls]
    assert kinds[0] == "up" and kinds.index("start_nodes") < kinds.index("await_ready") < kinds.index(
        "start_protocol") < kinds.index("signal") < kinds.index("stop") < kinds.index("teardown")
    events = [json.loads(x)["event"] for x in (run_dir / "events" / "orchestrator.jsonl").read_text().splitlines()]
    assert events[0] == "run_started" and events[-1] == "run_stopped" and events.count("action_applied") == 8
    assert labmod.list_labs() == []                          # torn down
    # the host-speed sampler ran beside it (its file) and did not outlive it
    samplers = []
    for proc in Path("/proc").iterdir():
        try:
            if str(run_dir) in (proc / "cmdline").read_bytes().decode(errors="replace"):
                samplers.append(proc.name)
        except OSError:
            continue
    assert samplers == []


def test_an_unsupported_action_is_one_error_before_anything_is_built(tmp_path, monkeypatch):
    calls = fake_backend(monkeypatch)
    monkeypatch.setattr(fake.FakeDriver, "OPS", frozenset(OpKind) - {OpKind.LINK_CUT})
    with pytest.raises(SpecError, match=r"schedule\[4\]: partition at 0.5s: not supported on the fake backend") as e:
        run(_write(tmp_path), RunOptions(backend="fake", out=tmp_path / "runs"))
    assert e.value.exit_code == 2
    assert calls == [] and not (tmp_path / "runs").exists() and labmod.list_labs() == []


def test_a_silent_crash_on_a_backend_that_cannot_drop_traffic_is_one_error_before_anything_is_built(
        tmp_path, monkeypatch):
    calls = fake_backend(monkeypatch, isolate=Backend.isolate)
    f = _write(tmp_path, SILENT)
    with pytest.raises(SpecError, match=r"fk.yaml:\d+: schedule\[0\]\.mode: crash at 0.1s: mode silent is not "
                                        r"supported on the fake backend") as e:
        run(f, RunOptions(backend="fake", out=tmp_path / "runs"))
    assert e.value.exit_code == 2
    assert calls == [] and not (tmp_path / "runs").exists() and labmod.list_labs() == []


def test_an_interrupted_run_stops_collects_and_tears_down(tmp_path, monkeypatch):
    calls = fake_backend(monkeypatch)

    def boom(self, names, timeout_s):
        raise KeyboardInterrupt

    monkeypatch.setattr(fake.FakeDriver, "await_ready", boom)
    with pytest.raises(KeyboardInterrupt):
        run(_write(tmp_path), RunOptions(backend="fake", out=tmp_path / "runs"))
    run_dir = next((tmp_path / "runs").iterdir())
    m = json.loads((run_dir / "manifest.json").read_text())
    assert m["status"].startswith("interrupted") and m["ended_at"]
    assert [c[0] for c in calls][-2:] == ["stop", "teardown"] and labmod.list_labs() == []
    assert signal.getsignal(signal.SIGTERM) is not None


def test_a_restarted_member_runs_at_once_instead_of_waiting_for_the_common_start(tmp_path):
    """The first members wait for the common start; a START of the schedule (a restart) comes after it, so the
    restarted member's config (the driver's and the run directory's record) no longer waits."""
    runner, backend, driver, state, clock = _runner(tmp_path)
    for c in driver.configs.values():
        c["wait_for_start"] = True
    (runner.run.path / "configs").mkdir(parents=True, exist_ok=True)
    runner.run.write_configs(driver.configs)
    driver.start_nodes(list(runner.driver.ctx.first))
    runner.execute(clock(), 2.0)
    assert driver.configs["h3"]["wait_for_start"] is False
    assert json.loads((runner.run.path / "configs" / "h3.json").read_text())["wait_for_start"] is False
    assert all(c["wait_for_start"] for n, c in driver.configs.items() if n != "h3")
    # and its process is the member's second (its protocol can tell: QSM's rejoins); a joiner's first start is
    # its first, a later one its second
    assert driver.configs["h3"]["incarnation"] == 1
    assert json.loads((runner.run.path / "configs" / "h3.json").read_text())["incarnation"] == 1
    assert driver.run_at_once(["h3"]) and driver.configs["h3"]["incarnation"] == 2
    driver.ctx.first.remove("h5")                 # as if h5 were a joiner
    driver.run_at_once(["h5"])
    assert "incarnation" not in driver.configs["h5"]
    driver.run_at_once(["h5"])
    assert driver.configs["h5"]["incarnation"] == 1


def test_the_manifest_is_written_once_per_state_and_only_with_schema_keys(tmp_path, monkeypatch):
    """starting, running, the end: three writes, every key declared by orchestrator.runschema (the reader's schema
    too); the plan written as planned, the configs once."""
    from orchestrator import runschema
    from orchestrator.rundir import RunDir as RD

    writes, configs = [], []
    real_write, real_configs = RD.write_manifest, RD.write_configs
    monkeypatch.setattr(RD, "write_manifest", lambda self, **kw: (writes.append(dict(kw)), real_write(self, **kw))[1])
    monkeypatch.setattr(RD, "write_configs", lambda self, c: (configs.append(len(c)), real_configs(self, c))[1])
    run_dir = run(_write(tmp_path), RunOptions(backend="fake", out=tmp_path / "runs"))
    assert [w.get("status") for w in writes] == ["starting", "running", "completed"]
    assert len(configs) == 1
    m = json.loads((run_dir / "manifest.json").read_text())
    assert set(m) <= set(runschema.MANIFEST_KEYS)
    planned = json.loads(json.dumps(build_plan(parse_experiment(EXP)).to_dict()))
    assert json.loads((run_dir / "plan.json").read_text()) == planned
    with pytest.raises(ValueError, match="not in the run directory's schema"):
        RD(tmp_path / "x").write_manifest(colour="blue")


PARTITION_HEAL = "[{at: 0.5s, action: partition, subtree: h2}, {at: 1s, action: heal}]"


@pytest.mark.parametrize("gsgc,schedule,warned", [
    ("fail_k: 8", PARTITION_HEAL, "heals a partition"),
    ("fail_k: 8", "[{at: 0.5s, action: crash, nodes: [h3]}, {at: 1s, action: restart, crashed: true}]",
     "restarts members"),
    ("fail_k: 8, rejoin_probe_steps: 4", PARTITION_HEAL, None),         # a way back: nothing to say
    ("subgroup: 2", PARTITION_HEAL, None),                              # no failure detection: nobody is declared
    ("fail_k: 8", "[{at: 1s, action: heal}, {at: 1.5s, action: partition, subtree: h2}]", None),  # heals nothing
])
def test_a_gsgc_schedule_that_brings_members_back_without_rejoin_is_warned_about_in_the_manifest(
        tmp_path, monkeypatch, gsgc, schedule, warned):
    text = (EXP.split("schedule:")[0].replace("{gsgc: {subgroup: 2, step: 1s}}", f"{{gsgc: {{step: 1s, {gsgc}}}}}")
            + f"schedule: {schedule}\n")
    if "subgroup" not in gsgc:
        text = text.replace("{step: 1s, ", "{step: 1s, subgroup: 2, ")
    monkeypatch.setitem(__import__("orchestrator.backends.registry", fromlist=["x"]).HIDDEN, "fake", lambda: fake.FakeBackend)
    run_dir = run(_write(tmp_path, text), RunOptions(backend="fake", out=tmp_path / "runs"))
    warnings = json.loads((run_dir / "manifest.json").read_text()).get("warnings", [])  # the report lists these
    log = (run_dir / "orchestrator.log").read_text()
    if warned is None:
        assert warnings == [] and "rejoin_probe_steps" not in log
    else:
        assert len(warnings) == 1 and warned in warnings[0] and "no rejoin_probe_steps" in warnings[0]
        assert f"WARNING: {warnings[0]}" in log


QSM_FAKE = ("name: fk\ntopology: {kind: tree, nodes: 7, degree: 2}\nlinks: {delay: 5ms}\n"
            "protocol: {qsm: {groups: [{name: a, members: all}], partition_size: 2, transport: udp, "
            "failure_detection: 0.5s}}\n"
            "workload: {senders: [h0], rate_per_s: 5, size_bytes: 64}\nduration: 2s\nseed: 4\n")


def test_a_crash_in_a_qsm_run_is_followed_by_the_gms_view_to_the_running_members(tmp_path, monkeypatch):
    # the orchestrator plays QSM's GMS: failure_detection_s after the crash every running member gets the view
    # without the crashed one (schedule.with_gms; the node installs it: tests/node/test_qsm_views.py)
    calls = fake_backend(monkeypatch)
    text = QSM_FAKE + "schedule:\n  - {at: 0.5s, action: crash, nodes: [h3]}\n"
    run_dir = run(_write(tmp_path, text), RunOptions(backend="fake", out=tmp_path / "runs"))
    applied = [json.loads(x) for x in (run_dir / "events" / "orchestrator.jsonl").read_text().splitlines()
               if json.loads(x)["event"] == "action_applied"]
    assert [(a["op"], a["planned_s"], a["targets"]) for a in applied] == [("crash", 0.5, ["h3"]),
                                                                          ("gms_view", 1.0, ["h3"])]
    (sent,) = [c for c in calls if c[0] == "control_members"]
    assert sent[2] == "gms_view" and "h3" not in sent[1] and len(sent[1]) == 6
    m = json.loads((run_dir / "manifest.json").read_text())
    assert not [w for w in m.get("warnings", []) if "QSM" in w]


def test_the_view_that_adds_joiners_waits_until_they_are_running(tmp_path, monkeypatch):
    # a view announced while a joiner's process is still starting never reaches it (make test, a busy machine:
    # h5 and h12 came up 1 s after their start, 20 ms after the view): the runner waits for the joiners it adds
    calls = fake_backend(monkeypatch)
    text = QSM_FAKE + ("schedule:\n  - {at: 0.5s, action: join, nodes: [h3, h4]}\n"
                       "  - {at: 1.2s, action: crash, nodes: [h5]}\n")
    run_dir = run(_write(tmp_path, text), RunOptions(backend="fake", out=tmp_path / "runs"))
    k = next(i for i, c in enumerate(calls) if c[0] == "control_members")
    assert calls[k - 1] == ("await_ready", ("h3", "h4")) and calls[k][2] == "gms_view"
    assert [c for c in calls[k + 1:] if c[0] == "await_ready"] == []     # the crash's view adds nobody
    applied = [json.loads(x) for x in (run_dir / "events" / "orchestrator.jsonl").read_text().splitlines()
               if json.loads(x)["event"] == "action_applied" and json.loads(x)["op"] == "gms_view"]
    assert [("joiners_ready_ms" in a, a["targets"]) for a in applied] == [(True, ["h3", "h4"]), (False, ["h5"])]


def test_joiners_of_a_view_are_its_targets_its_last_change_adds_and_not_down():
    from orchestrator.runner import joiners_of
    from orchestrator.schedule import Op, OpKind

    names = [f"h{i}" for i in range(6)]
    view = lambda targets, changes, down=(): Op(t=1.0, seq=0, kind=OpKind.GMS_VIEW, index=0,  # noqa: E731
                                                 targets=tuple(targets), params=(tuple(changes), tuple(down)))
    assert joiners_of(view(["h3", "h4"], [("add", (3, 4))]), names) == ["h3", "h4"]
    assert joiners_of(view(["h3", "h4"], [("add", (3, 4))], down=["h4"]), names) == ["h3"]
    assert joiners_of(view(["h2"], [("add", (3, 4)), ("remove", (2,))]), names) == []
    assert joiners_of(view(["h1"], [("add", (3, 4))]), names) == []       # a resumed member's view again


@pytest.mark.parametrize("protocol, gms", [
    ("qsm: {groups: [{name: a, members: all}], partition_size: 2, transport: udp, failure_detection: 0.5s}", True),
    ("direct: {transport: udp}", False),
])
def test_a_leave_is_announced_at_once_or_refused_without_a_membership_service(tmp_path, monkeypatch, protocol, gms):
    calls = fake_backend(monkeypatch)
    text = ("name: fk\ntopology: {kind: tree, nodes: 7, degree: 2}\nlinks: {delay: 5ms}\n"
            f"protocol: {{{protocol}}}\n"
            "workload: {senders: [h0], rate_per_s: 5, size_bytes: 64}\nduration: 2s\nseed: 4\n"
            "schedule:\n  - {at: 0.5s, action: leave, nodes: [h3]}\n")
    f = _write(tmp_path, text)
    if not gms:
        with pytest.raises(SpecError, match=r":9: schedule\[0\]\.action: leave at 0.5s: direct has no membership"):
            run(f, RunOptions(backend="fake", out=tmp_path / "runs"))
        assert calls == [] and not (tmp_path / "runs").exists()
        return
    run_dir = run(f, RunOptions(backend="fake", out=tmp_path / "runs"))
    applied = [json.loads(x) for x in (run_dir / "events" / "orchestrator.jsonl").read_text().splitlines()
               if json.loads(x)["event"] == "action_applied"]
    assert [(a["op"], a["planned_s"], a["targets"], a.get("mode")) for a in applied] == [
        ("crash", 0.5, ["h3"], "leave"), ("gms_view", 0.5, ["h3"], None)]


def test_qsm_view_batch_makes_one_view_of_the_crashes_due_in_a_batch(tmp_path, monkeypatch):
    # `view_batch: 1s` (QSM §2.1: the GMS "groups requests in batches"): crashes at 0.5 and 0.7 s (due at 0.8 and
    # 1.0 s with failure_detection 0.3 s): the first view at 0.8 s, the second batch at 1.8 s with the other crash
    calls = fake_backend(monkeypatch)
    text = ("name: fk\ntopology: {kind: tree, nodes: 7, degree: 2}\nlinks: {delay: 5ms}\n"
            "protocol: {qsm: {groups: [{name: a, members: all}], partition_size: 2, transport: udp, "
            "failure_detection: 0.3s, view_batch: 1s}}\n"
            "workload: {senders: [h0], rate_per_s: 5, size_bytes: 64}\nduration: 3s\nseed: 4\n"
            "schedule:\n  - {at: 0.5s, action: crash, nodes: [h3]}\n  - {at: 0.7s, action: crash, nodes: [h4]}\n"
            "  - {at: 0.75s, action: crash, nodes: [h5]}\n")
    run_dir = run(_write(tmp_path, text), RunOptions(backend="fake", out=tmp_path / "runs"))
    applied = [json.loads(x) for x in (run_dir / "events" / "orchestrator.jsonl").read_text().splitlines()
               if json.loads(x)["event"] == "action_applied" and json.loads(x)["op"] == "gms_view"]
    assert [(round(a["planned_s"], 3), a["targets"]) for a in applied] == [(0.8, ["h3"]), (1.8, ["h4", "h5"])]
    assert len([c for c in calls if c[0] == "control_members"]) == 2      # two views, not three
