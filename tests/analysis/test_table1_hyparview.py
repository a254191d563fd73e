"""analysis/table1_hyparview.py (seed 003 Table 1 / Figure 5) on hand-made run directories: the rows are the overlay
plug-ins' run_values (graph before the first crash, hops, random-graph yardsticks), one-by-one joins their own row,
pooled in-degrees, aggregation, and the tables from runs.csv alone (the committed ones byte for byte)."""
from __future__ import annotations

import csv
from pathlib import Path

import pytest

from analysis import table1_hyparview as t1
from tests.analysis.test_hyparview_values import T0, make_run

REPO = Path(__file__).resolve().parents[2]


def overlay_log(edges: list[tuple[int, int]], hops_per_broadcast: list[list[int]], view: str = "partial",
                n: int = 4) -> dict[str, list[dict]]:
    """n members, the overlay `edges` (added at t0 + 1), broadcasts of h0 whose receipts carry these hops."""
    ev: dict[str, list[dict]] = {f"h{i}": [{"ts": T0, "event": "node_started", "id": i}] for i in range(n)}
    for k, (s, d) in enumerate(edges):
        ev[f"h{s}"].append({"ts": T0 + 1, "event": "view_changed", "view": view, "change": k, "op": "add", "peer": d})
    for seq, hops in enumerate(hops_per_broadcast):
        ev["h0"].append({"ts": T0 + 2 + seq, "event": "data_sent", "seq": seq})
        ev.update({f"h{j + 1}": ev[f"h{j + 1}"] + [{"ts": T0 + 2.1 + seq, "event": "data_received", "origin": 0,
                                                     "seq": seq, "hops": h}] for j, h in enumerate(hops)})
    return ev


RING = [(0, 1), (1, 2), (2, 3), (3, 0)]                         # clustering 0, shortest path 2, in-degree 1 each
FULL = [(i, j) for i in range(4) for j in range(4) if i != j]    # clustering 1, shortest path 1, in-degree 3 each


def test_rows_are_the_plugins_values(tmp_path):
    make_run(tmp_path / "runs", "a", "hyparview", overlay_log(RING, [[1, 2, 3], [1, 1, 2]], "active"), seed=1)
    rows = t1.collect([tmp_path / "runs"])
    r = rows[0]
    assert (r["protocol"], r["members"], r["seed"], r["excluded"]) == ("hyparview", 4, 1, None)
    assert (r["clustering"], r["shortest_path"], r["max_hops"], r["degree"], r["out_degree"]) == (0.0, 2.0, 2.5, 2.0,
                                                                                                   1.0)
    # yardsticks: a random graph's clustering k / (n - 1), its shortest path ln n / ln d (none for d = 1)
    assert (r["clustering_random"], r["shortest_path_random"]) == (pytest.approx(2 / 3), None)
    assert r["indegree"] == [{"indegree": 1, "members": 4}]


def test_runs_to_table_and_figure(tmp_path):
    runs = tmp_path / "runs"
    make_run(runs, "a", "hyparview", overlay_log(RING, [[1, 2, 3], [1, 1, 2]], "active"), seed=1)
    make_run(runs, "b", "hyparview", overlay_log(FULL, [[1, 2, 4], [3, 1, 1]], "active"), seed=2)
    make_run(runs, "c", "cyclon", overlay_log(FULL, [[1, 2, 1]]), seed=1)
    make_run(runs, "d", "cyclon", overlay_log(FULL, [[1]]), seed=2, status="failed")
    out = tmp_path / "out"
    assert t1.main([str(runs), "--out", str(out)]) == 0
    rows = list(csv.DictReader((out / "summary.csv").open()))
    hpv = next(r for r in rows if r["protocol"] == "hyparview")
    assert (hpv["runs"], float(hpv["clustering"]), float(hpv["max_hops"])) == ("2", 0.5, 3.0)
    # the 95 % CI half-width of (0, 1): t(0.975, 1) x s / sqrt(2), s = 1 / sqrt(2)
    assert float(hpv["clustering_ci95"]) == pytest.approx(12.706 * 0.5, rel=1e-3)
    assert next(r for r in rows if r["protocol"] == "cyclon")["runs"] == "1"       # the failed run is not counted
    runs_csv = {r["run"]: r for r in csv.DictReader((out / "runs.csv").open())}
    assert runs_csv["d"]["excluded"] == "not completed (failed)"
    ind = [r for r in csv.DictReader((out / "indegree.csv").open()) if r["protocol"] == "hyparview"]
    assert {(r["indegree"], float(r["fraction"])) for r in ind} == {("1", 0.5), ("3", 0.5)}
    table = (out / "table1.md").read_text()
    assert "| paper, 10000 | 0.0009 | 0.0068 |" in table and "| 4 | 0.5000 ± 6.3531 [0.8333] (2) |" in table
    assert (out / "fig5_indegree.png").stat().st_size > 1000
    again = tmp_path / "again"
    assert t1.main(["tables", str(out), "--out", str(again)]) == 0
    for f in ("summary.csv", "indegree.csv", "table1.md"):
        assert (again / f).read_bytes() == (out / f).read_bytes(), f


def test_one_by_one_joins_are_their_own_row(tmp_path):
    make_run(tmp_path / "runs", "q", "hyparview", overlay_log(FULL, [[1, 2, 3]], "active"),
             params={"join_interval_s": 0.05})
    out = tmp_path / "out"
    assert t1.main([str(tmp_path / "runs"), "--out", str(out)]) == 0
    assert "| members | hyparview, joins one by one |" in (out / "table1.md").read_text()


def test_the_committed_tables_regenerate_from_the_committed_runs_csv(tmp_path):
    committed = REPO / "docs" / "results" / "hyparview-table1"
    assert t1.main(["tables", str(committed), "--out", str(tmp_path)]) == 0
    for f in ("summary.csv", "table1.md"):
        assert (tmp_path / f).read_bytes() == (committed / f).read_bytes(), f
    assert not (tmp_path / "indegree.csv").exists()     # the committed runs.csv predates its `indegree` column
