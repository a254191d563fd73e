"""The sweep analysis without Spark: confidence intervals, aggregation, figures and the report of a synthetic sweep
directory (each run's numbers from its plug-in's run_values: GSGC's TPR from the event logs and queue statistics
from the delay line, tested here through the sweep and in test_gsgc_values.py), and its tables mode."""
from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

import pytest

from analysis import stats
from analysis import sweep as sa
from analysis.protocols import gsgc, gsgc_values


def test_mean_ci_uses_student_t():
    m, ci = stats.mean_ci([10.0, 12.0])
    assert m == 11.0 and ci == pytest.approx(12.7062 * math.sqrt(2) / math.sqrt(2), rel=1e-4)
    assert stats.mean_ci([5.0]) == (5.0, None) and stats.mean_ci([]) == (None, None)
    assert stats.mean_ci([1.0, None, float("inf"), 3.0])[0] == 2.0



@pytest.mark.parametrize("df, q", [(1, 12.7062), (2, 4.3027), (10, 2.2281), (30, 2.0423), (31, 2.0395),
                                   (40, 2.0211), (60, 2.0003), (100, 1.9840), (120, 1.9799), (1000, 1.9623)])
def test_t975_is_the_student_t_quantile_above_30_df_too(df, q):
    """Printed tables (e.g. NIST/SEMATECH e-Handbook 1.3.6.7.2, 4 decimals): above 30 degrees of freedom the
    quantile is still above the normal's 1.96, so a fixed 1.96 made the intervals of 31..∞ repetitions too narrow."""
    assert stats.t975(df) == pytest.approx(q, abs=6e-5)
    assert stats.t975(df) > 1.959964


def test_t975_rejects_no_degrees_of_freedom():
    with pytest.raises(ValueError):
        stats.t975(0)


def test_mean_ci_of_many_repetitions_uses_t_not_196():
    xs = [float(i % 7) for i in range(41)]                  # 40 degrees of freedom
    m, ci = stats.mean_ci(xs)
    assert ci == pytest.approx(2.0211 * statistics.stdev(xs) / math.sqrt(41), rel=1e-4)


def test_queue_stats_pool_every_direction():
    dl = {"queues": {"a/down": {"max_queue": 3, "queue_sum": 10, "queued": 10, "overflowed": 1},
                     "a/up": {"max_queue": 7, "queue_sum": 30, "queued": 10, "overflowed": 2}}}
    assert gsgc_values.queue_stats(dl) == {"avg_queue": 2.0, "max_queue": 7, "overflowed": 3}
    old = {"queues": {"a/down": {"max_queue": 3}}}          # a delay line without queue_sum
    assert gsgc_values.queue_stats(old)["avg_queue"] is None and gsgc_values.queue_stats(None)["max_queue"] is None


def ev(ts, node, event, **kw):
    return {"ts": ts, "node": node, "event": event, **kw}


def test_event_rounds_follow_the_metrics_definition():
    events = [ev(0.0, "a", "round_started", level="global", round=0), ev(0.5, "b", "round_started", level="global",
                                                                          round=0),
              ev(4.0, "b", "round_completed", level="global", round=0, via="constructed", steps=3),
              ev(3.0, "a", "round_completed", level="global", round=0, via="next_round", steps=2),
              ev(5.0, "a", "round_completed", level="global", round=0, via="constructed", steps=4),
              ev(4.0, "b", "round_started", level="global", round=1),
              ev(9.0, "b", "round_completed", level="global", round=1, via="gossip", steps=9)]
    rows = gsgc_values.event_rounds(events, {})
    assert [(r["round"], r["tpr_s"], r["steps"], r["constructed_by"]) for r in rows] == [
        (0, 4.0, 3, "b"), (1, None, None, None)]


def test_a_runs_sweep_values_are_its_run_values():
    """points.csv's columns of a GSGC run: TPR and steps the means over its steady rounds (a round without steps
    left out of the steps), the round-0 TPR and steps, the queues (the delay line's overflows as queue_drops)."""
    v = {"subgroup": 3, "step_s": 2.0, "tpr_values_s": [10.0, 4.0, 6.0], "steps_values": [5, None, 3],
         "tpr_all_values_s": [20.0, 10.0, 4.0, 6.0], "tpr_first_round_s": 10.0, "steps_first_round": 5,
         "avg_queue": 1.5, "max_queue": 7, "queue_overflowed": 2, "queue_drops": 99}
    got = gsgc.PLUGIN.sweep_values(v, {})
    assert got == {"subgroup": 3, "step_s": 2.0, "tpr_s": pytest.approx(20 / 3), "tpr_round0_s": 10.0,
                   "steps_round0": 5, "steps": 4.0, "rounds": 3, "tpr_all_s": 10.0, "avg_queue": 1.5,
                   "max_queue": 7, "queue_drops": 2}
    assert list(got) == ["subgroup", "step_s", "tpr_s", "tpr_round0_s", "steps_round0", "steps", "rounds",
                         "tpr_all_s", "avg_queue", "max_queue", "queue_drops"]      # points.csv's order
    empty = gsgc.PLUGIN.sweep_values({}, {})
    assert (empty["tpr_s"], empty["steps"], empty["rounds"], empty["queue_drops"]) == (None, None, 0, None)


def write_run(d: Path, configs: dict[str, dict], events: list[dict], **files: Any) -> Path:
    """A run directory analysis.rundir can load: manifest, plan (every config a member), node configs with the
    member list, each member's events in events/<name>.jsonl (the orchestrator's in orchestrator.jsonl), and any
    further files (relative path -> JSON)."""
    (d / "events").mkdir(parents=True)
    (d / "configs").mkdir()
    (d / "manifest.json").write_text(json.dumps({"run_id": d.name, "status": "completed", "t0_unix": 0.0}))
    names = list(configs)
    (d / "plan.json").write_text(json.dumps({"nodes": [{"name": n, "role": "member", "address": f"10.0.0.{i + 1}"}
                                                       for i, n in enumerate(names)], "links": []}))
    members = [{"id": c["id"], "name": n, "addr": f"10.0.0.{i + 1}:7000"} for i, (n, c) in enumerate(configs.items())]
    for n, c in configs.items():
        (d / "configs" / f"{n}.json").write_text(json.dumps({"name": n, "members": members, **c}))
    for n in [*names, "orchestrator"]:
        (d / "events" / f"{n}.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events if e["node"] == n))
    for rel, doc in files.items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text(json.dumps(doc))
    return d


def make_run(root: Path, rel: str, b: int, step: float, tprs: list[float], local: bool = False) -> str:
    groups = [{"members": [0, 1], "controllers": [0]}, {"members": [2, 3], "controllers": [2]}] if local else None
    configs = {f"h{i}": {"id": i, "gsgc": {"subgroup": b, "step_s": step, "local_groups": groups}} for i in range(4)}
    # h3 starts late: round 0 (started at 0) began before every member ran and is left out
    lines, t = [ev(-1.0 if i < 3 else 0.5, f"h{i}", "node_started") for i in range(4)], 0.0
    level = "sc" if local else "global"
    for r, tpr in enumerate(tprs):
        lines += [ev(t, "h0", "round_started", level=level, round=r),
                  ev(t + tpr, "h0", "round_completed", level=level, round=r, via="constructed",
                     steps=round(tpr / step))]
        if local:
            lines += [ev(t, "h1", "round_started", level="local", round=r),
                      ev(t + 1.0, "h1", "round_completed", level="local", round=r, via="constructed", steps=1)]
        t += tpr
    delayline = {"queues": {"l0/up": {"max_queue": int(10 / step), "queue_sum": 20, "queued": 10, "overflowed": 0}}}
    write_run(root / rel, configs, lines, **{"tc/delayline.json": delayline})
    return rel


def values_of(d: Path) -> dict:
    """The run's record as the sweep's events engine reads it (protocol, members, the plug-in's run_values)."""
    return sa.run_record(d)


def test_run_values_of_local_gossip_add_the_two_phases(tmp_path):
    rel = make_run(tmp_path, "r", 1, 0.5, [3.0, 2.0, 4.0], local=True)
    s = values_of(tmp_path / rel)
    assert s["tpr_all_values_s"] == [4.0, 3.0, 5.0] and s["local_groups"] == 2 and s["members"] == 4
    assert s["tpr_values_s"] == [3.0, 5.0] and s["start_spread_s"] == 1.5   # round 0 began before h3 ran


def test_a_synthetic_sweep_gives_one_point_per_b_and_step_with_ci(tmp_path):
    points, selected = {}, []
    for b in (1, 3):
        for step in (1, 2, 4):
            for rep in (0, 1):
                pid = f"subgroup-{b}_step-{step}s_r{rep}"
                rel = make_run(tmp_path, f"points/{pid}/run", b, float(step),
                               [20.0, 10.0 * step / b + rep, 10.0 * step / b + rep])
                points[pid] = {"id": pid, "group": f"subgroup-{b}_step-{step}s", "rep": rep, "status": "completed",
                               "coords": {"subgroup": str(b), "step": f"{step}s"}, "run_dir": rel}
                selected.append(pid)
    points["subgroup-1_step-9s_r0"] = {"id": "subgroup-1_step-9s_r0", "status": "failed", "run_dir": None}
    (tmp_path / "sweep.json").write_text(json.dumps({
        "experiment_file": "x.yaml", "repetitions": 2, "selected": selected, "points": points,
        "axes": [{"name": "subgroup", "key": "protocol.gsgc.subgroup", "values": ["1", "3"]},
                 {"name": "step", "key": "protocol.gsgc.step", "values": ["1s", "2s", "4s"]}]}))
    md = sa.analyze_sweep(tmp_path, engine="events")
    out = tmp_path / "analysis"
    assert md == out / "sweep.md" and (out / "sweep.html").exists()
    for f in ("tpr_steps_vs_step.png", "queues_vs_step.png"):
        assert (out / "figures" / f).stat().st_size > 1000
    rows = (out / "summary.csv").read_text().splitlines()
    assert len(rows) == 1 + 6                                   # one row per (b, step)
    import csv
    agg = list(csv.DictReader((out / "summary.csv").open()))
    one = next(r for r in agg if r["c.subgroup"] == "3" and r["c.step"] == "4s")
    assert float(one["tpr_s_mean"]) == pytest.approx(40 / 3 + 0.5)      # round 0 left out; reps 0 and 1
    assert float(one["tpr_s_ci95"]) == pytest.approx(12.7062 * math.sqrt(0.5) / math.sqrt(2), rel=1e-4)
    assert float(one["max_queue_mean"]) == 2 and float(one["avg_queue_mean"]) == 2
    assert len(list(csv.DictReader((out / "points.csv").open()))) == 12
    # points.csv keeps its columns (analysis/figures_gsgc.py and the committed copies read them)
    assert next(csv.reader((out / "points.csv").open())) == [
        "point", "group", "c.subgroup", "c.step", "rep", "status", "run_dir", "unfaithful", "fidelity", "members",
        "subgroup", "step_s", "tpr_s", "tpr_round0_s", "steps_round0", "steps", "rounds", "tpr_all_s", "avg_queue",
        "max_queue", "queue_drops"]
    text = md.read_text()
    assert "| subgroup | step |" in text and "tpr_steps_vs_step.png" in text
    # the tables mode: the same summary.csv and sweep.md from points.csv and sweep_context.json alone
    again = tmp_path / "again"
    assert sa.main(["tables", str(out), "--out", str(again)]) == 0
    for f in ("points.csv", "summary.csv", "sweep.md"):
        assert (again / f).read_text() == (out / f).read_text(), f
    assert "Sweep " + tmp_path.name in (again / "sweep.md").read_text()


def test_group_size_figure_when_members_vary(tmp_path):
    agg = [{"group": f"scheme-{s}_n-{n}", "c.scheme": s, "c.n": str(n), "members": n, "subgroup": 1, "step_s": 1.0,
            "tpr_s_mean": n / (10 if s == "local" else 2), "tpr_s_ci95": 1.0}
           for s in ("global", "local") for n in (50, 100)]
    lines = sa.series(agg, "members", "n")
    assert sorted(lines) == ["scheme=global", "scheme=local"]
    made = sa.figures({"axes": [{"name": "n", "key": "n"}]}, agg, tmp_path)
    assert [p.name for _, p in made] == ["tpr_vs_group_size.png"]
    # as the sweep analysis calls it: the named axis `n` is not found by name, a one-valued axis is in every row;
    # neither may split the lines (one line per scheme, its points over n)
    agg = [{**r, "c.duration": "120s"} for r in agg]
    lines = sa.series(agg, "members", None)
    assert sorted(lines) == ["scheme=global", "scheme=local"]
    assert [r["members"] for r in lines["scheme=local"]] == [50, 100]


def test_step_figure_lines_are_per_subgroup():
    agg = [{"c.subgroup": str(b), "c.step": st, "step_s": v, "tpr_s_mean": 1.0}
           for b in (1, 3) for st, v in (("500ms", 0.5), ("2s", 2.0))]
    lines = sa.series(agg, "step_s", None)
    assert sorted(lines) == ["subgroup=1", "subgroup=3"] and [r["step_s"] for r in lines["subgroup=3"]] == [0.5, 2.0]


def test_not_a_sweep_directory(tmp_path):
    from analysis.rundir import AnalysisError
    with pytest.raises(AnalysisError, match="sweep.json"):
        sa.analyze_sweep(tmp_path, engine="events")


def test_the_fidelity_probe_burst_is_taken_out_of_the_queue_statistics():
    dl = {"queues": {"a/down": {"max_queue": 30, "queue_sum": 435 + 10, "queued": 30 + 10, "overflowed": 0},
                     "b/up": {"max_queue": 4, "queue_sum": 10, "queued": 10, "overflowed": 0}}}
    probe = {"link": "a", "direction": "down", "count": 30}
    assert gsgc_values.queue_stats(dl, probe) == {"avg_queue": 1.0, "max_queue": 4, "overflowed": 0}
    dl["queues"]["a/down"]["max_queue"] = 50        # the protocol's own queue went beyond the burst
    assert gsgc_values.queue_stats(dl, probe)["max_queue"] == 50


def test_round_0_is_the_papers_tpr_when_every_member_ran_at_the_start(tmp_path):
    rel = make_run(tmp_path, "late", 3, 1.0, [20.0, 10.0])          # h3 started after round 0 began
    assert values_of(tmp_path / rel)["tpr_first_round_s"] is None
    d = tmp_path / make_run(tmp_path, "sync", 3, 1.0, [20.0, 10.0])
    f = d / "events" / "h3.jsonl"
    f.write_text(f.read_text().replace('"ts": 0.5, "node": "h3"', '"ts": -0.5, "node": "h3"'))
    s = values_of(d)
    assert s["tpr_first_round_s"] == 20.0 and s["tpr_values_s"] == [20.0, 10.0]


def test_tune_value_picks_the_metric():
    s = {"tpr_values_s": [20.0, 10.0], "steps_values": [4, 2], "tpr_first_round_s": 20.0}
    assert gsgc_values.tune_value(s, "rounds") == 15.0
    assert gsgc_values.tune_value(s, "round0") == 20.0
    assert gsgc_values.tune_value({**s, "tpr_first_round_s": None}, "round0") is None
    assert gsgc_values.tune_value({}, "rounds") is None
    with pytest.raises(ValueError, match="metric 'x'"):
        gsgc_values.tune_value(s, "x")


def test_a_sweep_of_another_protocol_takes_its_plug_ins_values(tmp_path):
    from tests.analysis import synthetic as syn

    points, selected = {}, []
    for transport in ("udp", "tcp"):
        for rep in (0, 1):
            pid = f"transport-{transport}_r{rep}"
            d = syn.make_direct_run(tmp_path / "points" / pid, transport, run_id="run")
            points[pid] = {"id": pid, "group": f"transport-{transport}", "rep": rep, "status": "completed",
                           "coords": {"transport": transport}, "run_dir": str(d.relative_to(tmp_path)),
                           "unfaithful": transport == "tcp" and rep == 1}      # a sweep's fidelity judges' flag
            selected.append(pid)
    (tmp_path / "sweep.json").write_text(json.dumps({
        "experiment_file": "direct.yaml", "repetitions": 2, "selected": selected, "points": points,
        "axes": [{"name": "transport", "key": "protocol.direct.transport", "values": ["udp", "tcp"]}]}))
    md = sa.analyze_sweep(tmp_path, engine="events")
    import csv
    agg = {r["c.transport"]: r for r in csv.DictReader((tmp_path / "analysis" / "summary.csv").open())}
    # the synthetic direct run's delivery (tests/analysis/test_generic_metrics.py): ratios 1, 2/3, 1, 1, 1; the
    # latency median over its 12 receipts 0.02 s, p90 0.049 s
    assert float(agg["udp"]["delivery_ratio_mean"]) == pytest.approx(14 / 15)
    assert float(agg["tcp"]["latency_median_s_mean"]) == pytest.approx(0.02)
    assert float(agg["tcp"]["latency_p90_s_mean"]) == pytest.approx(0.049)
    assert agg["udp"]["runs_measured"] == "2" and "tpr_s_mean" not in agg["udp"]
    assert (agg["udp"]["runs_unfaithful"], agg["tcp"]["runs_unfaithful"]) == ("0", "1")
    rows = {r["point"]: r for r in csv.DictReader((tmp_path / "analysis" / "points.csv").open())}
    assert rows["transport-tcp_r1"]["unfaithful"] == "True" and rows["transport-udp_r0"]["unfaithful"] == "False"
    text = md.read_text()
    assert "(protocol direct)" in text and "| transport | runs (measured) | delivery ratio | latency median (s) |" in text


def test_a_sweep_over_several_protocols_takes_the_values_they_share():
    from analysis.protocols import GENERIC

    overlay = sa.sweep_plugin({"a": {"protocol": "hyparview"}, "b": {"protocol": "cyclon"},
                               "c": {"protocol": "scamp"}, "d": {"protocol": "cyclonacked"}})
    assert "reliability_after" in dict(overlay.sweep_columns)
    assert sa.sweep_plugin({"a": {"protocol": "hyparview"}, "b": {"protocol": "gsgc"}}) is GENERIC
    assert sa.sweep_plugin({}).name == "gsgc" and sa.sweep_plugin({"a": {}}).name == "gsgc"
