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
