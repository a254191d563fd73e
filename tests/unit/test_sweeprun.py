"""The sweep driver's pieces that need no network: loading, --axis, resumability checks, the tuner's points, and
running points with a fake runner (resume and interruption bookkeeping)."""
from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from orchestrator import sweep as sw
from orchestrator import sweepstate, tunerun
from orchestrator import sweeprun as sr
from orchestrator.errors import OrchestratorError, SpecError

EXP = """\
name: t
topology: {kind: tree, nodes: 8, degree: 4}
protocol: {gsgc: {subgroup: 3, step: 1s, fail_k: null}}
duration: 20s
seed: 3
sweep:
  axes:
    protocol.gsgc.subgroup: [1, 3]
    protocol.gsgc.step: [1s, 2s]
  repetitions: 2
"""


@pytest.fixture
def exp_file(tmp_path):
    f = tmp_path / "e.yaml"
    f.write_text(EXP)
    return f


def test_axis_option_parses_values():
    assert sr.parse_axis_option("protocol.gsgc.step=2s,5s") == ("protocol.gsgc.step", ["2s", "5s"])
    assert sr.parse_axis_option("protocol.gsgc.subgroup=1,3") == ("protocol.gsgc.subgroup", [1, 3])
    with pytest.raises(SpecError):
        sr.parse_axis_option("x")
    with pytest.raises(SpecError):
        sr.parse_axis_option("x=")


def test_load_base_validates_the_experiment(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text(EXP.replace("nodes: 8", "nodes: 1"))
    with pytest.raises(SpecError, match="nodes"):
        sr.load_base(f)
    with pytest.raises(SpecError, match="no such experiment file"):
        sr.load_base(tmp_path / "missing.yaml")


def test_sweep_spec_applies_overrides(exp_file):
    base = sr.load_base(exp_file)
    spec = sr.sweep_spec(base, sr.SweepOptions(axes={"protocol.gsgc.step": ["500ms"]}, repetitions=1), "e")
    assert [p.id for p in sw.expand(spec, base)] == ["subgroup-1_step-500ms_r0", "subgroup-3_step-500ms_r0"]


def test_tune_points_scale_the_duration():
    base = {"duration": "30s", "seed": 1, "protocol": {"gsgc": {"step": "1s"}}}
    pts = tunerun.tune_points(base, tunerun.TuneOptions(steps_per_run=25, reps=2), 2.0)
    assert [p.id for p in pts] == ["step-2s_r0", "step-2s_r1"]
    assert dict(pts[0].sets) == {"protocol.gsgc.step": "2s", "seed": 1, "duration": "50s"}
    assert dict(tunerun.tune_points(base, tunerun.TuneOptions(steps_per_run=25), 0.5)[0].sets)["duration"] == "30s"


class FakeRunner:
    """Stands in for orchestrator.runner.run: writes a run directory with a manifest."""

    def __init__(self, fail_on: str | None = None, interrupt_on: str | None = None):
        self.calls: list[str] = []
        self.fail_on, self.interrupt_on = fail_on, interrupt_on

    def __call__(self, exp_file, opts, progress=None, variables=None):
        pid = Path(exp_file).parent.name
        self.calls.append(pid)
        d = _run_dir(Path(opts.out) / f"t-{uuid.uuid4().hex[:8]}", {"h0": 99.0, "h1": 100.0})  # a valid run
        status = "completed"
        if pid == self.interrupt_on:
            (d / "manifest.json").write_text(json.dumps({"status": "interrupted (Ctrl-C)"}))
            raise KeyboardInterrupt
        if pid == self.fail_on:
            (d / "manifest.json").write_text(json.dumps({"status": "failed: boom"}))
            raise OrchestratorError("boom")
        (d / "manifest.json").write_text(json.dumps({"status": status}))
        return d.resolve()


def test_points_are_skipped_when_finished_and_rerun_when_interrupted(exp_file, tmp_path, monkeypatch):
    import orchestrator.runner as runner

    root = tmp_path / "sw"
    fake = FakeRunner(interrupt_on="subgroup-1_step-2s_r0")
    monkeypatch.setattr(runner, "run", fake)
    with pytest.raises(KeyboardInterrupt):
        sr.run_sweep(exp_file, sr.SweepOptions(out=root))
    data = json.loads((root / "sweep.json").read_text())
    assert [data["points"][p]["status"] for p in data["points"]] == ["completed", "completed", "interrupted"]
    assert data["points"]["subgroup-1_step-2s_r0"]["run_dir"].startswith("points/subgroup-1_step-2s_r0/t-")

    fake2 = FakeRunner(fail_on="subgroup-3_step-1s_r1")
    monkeypatch.setattr(runner, "run", fake2)
    seen = []
    _, data = sr.run_sweep(exp_file, sr.SweepOptions(out=root), on_point=lambda *a: seen.append(a))
    assert fake2.calls[0] == "subgroup-1_step-2s_r0" and len(fake2.calls) == 6      # 2 finished points skipped
    assert seen[0][4] == "2 finished before, skipped" and seen[-1][:2] == (8, 8) and seen[-1][2] == 0.0
    assert data["points"]["subgroup-3_step-1s_r1"]["status"] == "failed"
    assert data["points"]["subgroup-3_step-1s_r1"]["error"] == "boom"

    # a changed experiment is not "finished": its points run again
    exp_file.write_text(EXP.replace("duration: 20s", "duration: 25s"))
    fake3 = FakeRunner()
    monkeypatch.setattr(runner, "run", fake3)
    sr.run_sweep(exp_file, sr.SweepOptions(out=root, only=["subgroup=1", "step=1s"]))
    assert fake3.calls == ["subgroup-1_step-1s_r0", "subgroup-1_step-1s_r1"]
    assert (root / "points" / "subgroup-1_step-1s_r0" / "experiment.yaml").read_text().count("25s") == 1


def test_a_bad_point_is_rejected_before_anything_runs(exp_file, tmp_path, monkeypatch):
    import orchestrator.runner as runner

    fake = FakeRunner()
    monkeypatch.setattr(runner, "run", fake)
    with pytest.raises(SpecError, match="sweep point subgroup-1_step-1s_nodes-1_r0: .*topology.nodes"):
        sr.run_sweep(exp_file, sr.SweepOptions(out=tmp_path / "x", axes={"topology.nodes": [1]}))
    assert fake.calls == [] and not (tmp_path / "x").exists()


def test_tune_runs_the_search_on_measured_points(exp_file, tmp_path, monkeypatch):
    import orchestrator.runner as runner

    monkeypatch.setattr(runner, "run", FakeRunner())

    def measure(root, entries):
        x = float(entries[0]["coords"]["step"].rstrip("s"))
        return [30 + (x - 9) ** 2 / 4]

    root, res = tunerun.run_tune(exp_file, tunerun.TuneOptions(out=tmp_path / "tn", a0=0, b0=20, g=2, e=0.1, p=1), measure)
    assert 7 <= res.s <= 11 and res.s1 < res.s < res.s2
    saved = json.loads((root / "tune.json").read_text())
    assert saved["result"]["window"] == [res.s1, res.s2]
    assert len(saved["evaluations"]) == len(res.evaluations)


def test_tune_hands_each_step_intervals_repetitions_to_the_runner_at_once(exp_file, tmp_path, monkeypatch):
    """`tune --parallel K`: the --reps runs of one f(x) go to run_points in one call with the options, so up to K
    of them run at once (run_points' --parallel; the fit and --measure-first are its own, tested with it)."""
    calls = []

    def fake_run_points(base, points, root, header, opts, progress=None, on_point=None, where="sweep"):
        calls.append(([p.id for p in points], opts.parallel, opts.measure_first))
        return {"points": {p.id: {"id": p.id, "coords": dict(p.coords), "status": "completed"} for p in points}}

    monkeypatch.setattr(tunerun, "run_points", fake_run_points)

    def measure(root, entries):
        return [30 + (float(e["coords"]["step"].rstrip("s")) - 9) ** 2 / 4 for e in entries]

    opts = tunerun.TuneOptions(out=tmp_path / "tn", a0=0, b0=20, g=2, e=0.1, p=1, reps=5, parallel=3, measure_first=True)
    root, res = tunerun.run_tune(exp_file, opts, measure)
    assert len(calls) == len(res.evaluations) >= 5
    for ids, parallel, first in calls:
        assert len(ids) == 5 and len({i.rsplit("_r", 1)[0] for i in ids}) == 1     # 5 runs of one step interval
        assert (parallel, first) == (3, True)


def _run_dir(tmp_path: Path, starts: dict[str, float | None], rounds: list[tuple[float, float]] = ((110, 115),),
             common_start: bool = False) -> Path:
    """A run directory: members started at `starts` (None: never), global rounds (started, constructed)."""
    d = tmp_path / "run"
    (d / "configs").mkdir(parents=True)
    (d / "events").mkdir()
    (d / "manifest.json").write_text(json.dumps({"status": "completed", "t0_unix": 100.0}))
    (d / "plan.json").write_text(json.dumps({"nodes": [{"name": n, "role": "member"} for n in starts]}))
    members = [{"id": i, "name": n, "addr": f"10.0.0.{i + 1}:7000"} for i, n in enumerate(starts)]
    for i, (name, ts) in enumerate(starts.items()):
        (d / "configs" / f"{name}.json").write_text(json.dumps({"name": name, "id": i, "gsgc": {"subgroup": 1},
                                                                "members": members,
                                                                "wait_for_start": common_start}))
        lines = []
        if ts is not None:
            lines.append({"ts": ts, "node": name, "event": "node_started"})
        if i == 0:
            for r, (a, b) in enumerate(rounds):
                lines += [{"ts": a, "node": name, "event": "round_started", "level": "global", "round": r},
                          {"ts": b, "node": name, "event": "round_completed", "level": "global", "round": r,
                           "via": "constructed", "steps": 2}]
        (d / "events" / f"{name}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return d


def test_runs_whose_members_did_not_run_are_invalid(tmp_path):
    assert sweepstate.run_problem(_run_dir(tmp_path / "a", {"h0": 99.0, "h1": 104.0})) is None
    assert "1 of 2 members never started" in sweepstate.run_problem(_run_dir(tmp_path / "b", {"h0": 99.0, "h1": None}))
    late = sweepstate.run_problem(_run_dir(tmp_path / "c", {"h0": 99.0, "h1": 117.0}))
    assert "no round completed after every member was running (the last started 18.0 s after" in late
    # the members waited for the runner's common start and no round completed within the run: a measurement
    # (the TPR exceeds the run), not a problem; the same without a common start is
    assert sweepstate.run_problem(_run_dir(tmp_path / "d", {"h0": 99.0, "h1": 117.0}, rounds=(), common_start=True)) is None
    assert "no round completed" in sweepstate.run_problem(_run_dir(tmp_path / "e", {"h0": 99.0, "h1": 117.0}, rounds=()))


def test_an_invalid_run_is_run_again(exp_file, tmp_path, monkeypatch):
    import orchestrator.runner as runner

    calls = []

    def flaky(exp, opts, progress=None, variables=None):
        calls.append(1)
        d = _run_dir(Path(opts.out) / f"a{len(calls)}", {"h0": 99.0, "h1": None if len(calls) == 1 else 100.0})
        return d.resolve()

    monkeypatch.setattr(runner, "run", flaky)
    _, data = sr.run_sweep(exp_file, sr.SweepOptions(out=tmp_path / "sw", only=["subgroup=1", "step=1s", "rep=0"]))
    e = data["points"]["subgroup-1_step-1s_r0"]
    assert len(calls) == 2 and e["status"] == "completed" and e["attempt"] == 1 and "a2" in e["run_dir"]


def test_tune_duration_replaces_the_experiments_before_steps_per_run():
    base = {"duration": "360s", "seed": 1, "protocol": {"gsgc": {"step": "9s"}}}
    assert dict(tunerun.tune_points(base, tunerun.TuneOptions(duration=60), 2.0)[0].sets)["duration"] == "60s"
    opts = tunerun.TuneOptions(duration=60, steps_per_run=8)
    assert dict(tunerun.tune_points(base, opts, 5.0)[0].sets)["duration"] == "60s"
    assert dict(tunerun.tune_points(base, opts, 12.5)[0].sets)["duration"] == "100s"
    assert "duration" not in dict(tunerun.tune_points(base, tunerun.TuneOptions(), 2.0)[0].sets)


def test_tune_fix_sets_a_path_in_every_run_and_refuses_the_tuned_one(tmp_path, exp_file):
    base = {"duration": "30s", "seed": 1, "protocol": {"gsgc": {"step": "1s"}}}
    pts = tunerun.tune_points(base, tunerun.TuneOptions(reps=2, axes={"nodes.packing": [20]}), 3.0)
    assert [dict(p.sets) for p in pts] == [{"protocol.gsgc.step": "3s", "seed": s, "nodes.packing": 20}
                                           for s in (1, 2)]
    for axes in ({"protocol.gsgc.step": ["2s"]}, {"duration": ["60s"]}, {"nodes.packing": [10, 20]}):
        with pytest.raises(SpecError, match="--fix"):
            tunerun.run_tune(exp_file, tunerun.TuneOptions(out=tmp_path / "tn", axes=axes), lambda root, entries: [])
