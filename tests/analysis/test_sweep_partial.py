"""The sweep analysis of a sweep still running (or stopped half way): selected points not run yet have no entry
in sweep.json; they are listed as not run, not aggregated into a group of their own."""
from __future__ import annotations

import csv
import json

from analysis import sweep as sa

from .test_sweep_analysis import make_run


def test_a_partly_run_sweep_is_analysed_and_names_the_points_not_run(tmp_path):
    pid = "subgroup-3_step-4s_r0"
    rel = make_run(tmp_path, f"points/{pid}/run", 3, 4.0, [20.0, 12.0, 12.0])
    points = {pid: {"id": pid, "group": "subgroup-3_step-4s", "rep": 0, "status": "completed",
                    "coords": {"subgroup": "3", "step": "4s"}, "run_dir": rel},
              "subgroup-3_step-6s_r0": {"id": "subgroup-3_step-6s_r0", "status": "running", "run_dir": None,
                                        "group": "subgroup-3_step-6s", "coords": {"subgroup": "3", "step": "6s"}}}
    selected = [pid, "subgroup-3_step-6s_r0", "subgroup-3_step-9s_r0"]      # the last: no entry yet
    (tmp_path / "sweep.json").write_text(json.dumps({
        "experiment_file": "x.yaml", "repetitions": 1, "selected": selected, "points": points,
        "axes": [{"name": "subgroup", "key": "protocol.gsgc.subgroup", "values": ["3"]},
                 {"name": "step", "key": "protocol.gsgc.step", "values": ["4s", "6s", "9s"]}]}))
    text = sa.analyze_sweep(tmp_path, engine="events").read_text()
    agg = list(csv.DictReader((tmp_path / "analysis" / "summary.csv").open()))
    assert [(r["c.step"], r["runs"], r["runs_with_tpr"]) for r in agg] == [("4s", "1", "1"), ("6s", "1", "0")]
    assert "subgroup-3_step-9s_r0 (not run)" in text and "subgroup-3_step-6s_r0 (running)" in text


def test_round_0_of_local_gossip_runs_from_the_common_start_to_the_first_global_s(tmp_path):
    """§5: the paper's TPR of the local scheme is from the start of the protocol (every local group's round 0) to
    the first S an SC constructs: here local rounds 0 start at 10.0 and 10.2, the first SC round (started 13.0
    by h0) completes at 17.5, a later one at 16.0 by another SC (its own round 0 started at 12.5): 16.0 - 10.0."""
    from .test_sweep_analysis import ev, write_run

    groups = [{"members": [0, 1], "controllers": [0]}, {"members": [2, 3], "controllers": [2]}]
    configs = {f"h{i}": {"id": i, "wait_for_start": True,
                         "gsgc": {"subgroup": 1, "step_s": 0.7, "local_groups": groups}} for i in range(4)}
    lines = [ev(9.0, f"h{i}", "node_started") for i in range(4)]
    lines += [ev(10.0, "h1", "round_started", level="local", round=0),
              ev(10.2, "h3", "round_started", level="local", round=0),
              ev(12.0, "h1", "round_completed", level="local", round=0, via="constructed", steps=3),
              ev(12.4, "h3", "round_completed", level="local", round=0, via="constructed", steps=3),
              ev(13.0, "h0", "round_started", level="sc", round=0),
              ev(12.5, "h2", "round_started", level="sc", round=0),
              ev(16.0, "h2", "round_completed", level="sc", round=0, via="constructed", steps=5),
              ev(17.5, "h0", "round_completed", level="sc", round=0, via="constructed", steps=6)]
    s = sa.run_record(write_run(tmp_path / "r", configs, lines))
    assert s["tpr_first_round_s"] == 16.0 - 10.0 and s["steps_first_round"] == 5
    assert s["rounds_completed"] == {"global": 0, "local": 2, "sc": 1}
    assert s["common_start"] and s["local_groups"] == 2
