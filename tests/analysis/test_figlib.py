"""The reproductions' shared layer (analysis/figlib.py) and the generic run_values, without Spark: hand-worked rows,
every run kept (excluded ones with the reason), aggregates with their CIs, tables regenerated from the CSV."""
from __future__ import annotations

import json
import math

import pytest

from analysis import figlib
from analysis.protocols import GENERIC
from analysis.rundir import load
from tests.analysis.synthetic import DIRECT_RECEIPTS, make_direct_run


def test_generic_run_values_from_the_events(tmp_path):
    run = load(make_direct_run(tmp_path, "udp"))
    v = GENERIC.run_values(run)
    # h2 crashed at t0 + 2.75: h0's seq 3 (t0 + 3.0) is expected at h1 and h3 only; h3 started at t0 + 1.2, so
    # h0's seq 1 (t0 + 1.0) is expected at h1 and h2 only
    assert v["data_messages"] == 5
    expected = {("h0", 1): 2, ("h1", 1): 3, ("h0", 2): 3, ("h1", 2): 3, ("h0", 3): 2}
    ratios = [len(DIRECT_RECEIPTS[k]) / n for k, n in expected.items()]
    assert v["delivery_ratio_mean"] == pytest.approx(sum(ratios) / len(ratios))
    lat = sorted(x for r in DIRECT_RECEIPTS.values() for x in r.values())
    assert v["latency_max_s"] == pytest.approx(max(lat))


def _sweep(tmp_path, n_runs: int = 3, bad: int | None = None):
    """A sweep directory with one point x of `n_runs` repetitions (copies of the synthetic direct run)."""
    root = tmp_path / "sw"
    points = {}
    for i in range(n_runs):
        pid = f"x-1_r{i}"
        d = make_direct_run(root / "points" / pid, "udp", run_id=f"run{i}")
        m = json.loads((d / "manifest.json").read_text())
        m["seed"] = i + 1
        if i == bad:
            m["status"] = "failed: boom"
        (d / "manifest.json").write_text(json.dumps(m))
        (d / "judges.json").write_text(json.dumps({"verdict": "unfaithful" if i == 0 else "faithful",
                                                   "reasons": ["timer lag p99 60 ms > 50 ms"] if i == 0 else [],
                                                   **({"budget_bound": 1, "throttled_share_max": 0.9}
                                                      if i == 1 else {})}))
        points[pid] = {"id": pid, "coords": {"x": "1"}, "rep": i, "status": "completed",
                       "run_dir": f"points/{pid}/run{i}"}
    (root / "sweep.json").write_text(json.dumps({"points": points}))
    return root


def test_collect_keeps_every_run_and_says_why_one_is_left_out(tmp_path):
    root = _sweep(tmp_path, 3, bad=2)
    seen = []

    def values(run):
        seen.append(run.path.name)
        if run.path.name == "run1":
            return {"v": 2.0}
        return {"v": 4.0}

    rows = figlib.collect([root], values, point=("c.x",))
    assert [r["run"] for r in rows] == ["run0", "run1", "run2"]
    assert [r["excluded"] for r in rows] == [None, None, "not completed (failed: boom)"]
    assert rows[0]["verdict"] == "unfaithful" and rows[0]["judged"] == "timer lag p99 60 ms > 50 ms"
    assert rows[0]["c.x"] == "1" and rows[0]["point"] == "x-1_r0" and seen == ["run0", "run1"]
    # a run with CPU budgets: how many members ran at theirs (judges.json); none said for a run without
    assert (rows[1]["budget_bound"], rows[1]["throttled_share_max"]) == (1, 0.9) and "budget_bound" not in rows[0]
    strict = figlib.collect([root], values, point=("c.x",), faithful_only=True)
    assert strict[0]["excluded"] == "unfaithful: timer lag p99 60 ms > 50 ms"

    agg = figlib.aggregate(rows, ("c.x",), ("v",))
    # (4 + 2) / 2 = 3; sd = sqrt(2); CI half-width = t(0.975, 1) x sqrt(2) / sqrt(2) = 12.706
    assert agg == [{"c.x": "1", "runs": 2, "excluded": 1, "v": 3.0, "v_ci95": pytest.approx(12.7062, abs=1e-3),
                    "v_n": 2}]


def test_an_exclusion_from_the_values_function(tmp_path):
    root = _sweep(tmp_path, 2)

    def values(run):
        raise figlib.Exclude("no round completed")

    rows = figlib.collect([root], values)
    assert {r["excluded"] for r in rows} == {"no round completed"}
    assert figlib.aggregate(rows, (), ("v",))[0]["runs"] == 0


def test_tables_regenerate_from_the_csv(tmp_path):
    rows = [{"n": 8, "v": 1.0}, {"n": 8, "v": 3.0}, {"n": 16, "v": 5.0, "note": [1, 2]}]
    agg = figlib.aggregate(rows, ("n",), ("v",))
    figlib.write_csv(tmp_path / "s.csv", agg)
    again = figlib.read_csv(tmp_path / "s.csv")
    cols = [figlib.Col("n"), figlib.Col("v", "v (mean ± 95 % CI)", ci=True)]
    assert figlib.md_table(agg, cols) == figlib.md_table(again, cols)
    assert figlib.md_table(agg, cols).splitlines()[2].startswith("| 8 | 2 ± 12.7")
    figlib.write_csv(tmp_path / "r.csv", rows)
    assert figlib.read_csv(tmp_path / "r.csv")[2]["note"] == [1, 2]
    assert math.isnan(float("nan")) and figlib.number(float("nan")) is None


def test_line_figure(tmp_path):
    agg = figlib.aggregate([{"n": n, "v": n * 2.0, "s": s} for n in (1, 2, 3) for s in ("a", "b")], ("n", "s"),
                           ("v",))
    assert figlib.line_figure(agg, "n", "v", tmp_path / "f.png", series=("s",), paper=[(1, 2), (3, 6)]).exists()
    assert figlib.line_figure(agg, "n", "missing", tmp_path / "g.png") is None
