"""analysis/table1_hyparview.py (seed 003 Table 1 / Figure 5) on hand-made run directories: the Spark summary's
graph numbers, the plain-Python hops, the random-graph yardsticks, pooling and aggregation."""
from __future__ import annotations

import csv
import json
import math

import pytest

from analysis import table1_hyparview as t1


def make_run(root, name, protocol, seed, summary, events):
    d = root / name
    (d / "events").mkdir(parents=True)
    (d / "analysis" / "metrics").mkdir(parents=True)
    (d / "manifest.json").write_text(json.dumps({"status": "completed", "seed": seed,
                                                 "spec": {"protocol": {protocol: {}}}}))
    (d / "events" / "all.jsonl").write_text("\n".join(json.dumps(e) for e in events) + "\n")
    (d / "analysis" / "metrics" / "summary.json").write_text(json.dumps(summary))
    return d


def events_with_hops(hops_per_broadcast):
    ev = [{"event": "node_started", "node": f"m{i}", "ts": 0.0, "id": i} for i in range(4)]
    for seq, hops in enumerate(hops_per_broadcast):
        ev.append({"event": "data_sent", "node": "m0", "ts": 1.0 + seq, "seq": seq})
        ev += [{"event": "data_received", "node": f"m{j + 1}", "ts": 1.1 + seq, "origin": 0, "seq": seq,
                "hops": h} for j, h in enumerate(hops)]
    return ev


def summary(clustering, path, hops, degree, edges, indeg, n=4):
    return {"clustering_before": clustering, "shortest_path_before": path, "max_hops_before": hops,
            "degree_before": degree, "edges_before": edges, "members_before": n, "indegree_before": indeg}


def test_yardsticks():
    # a random graph of 10 000 members whose members have ~70 undirected neighbours (Cyclon's 35 out + 35 in):
    # clustering ~0.007, the paper's Cyclon value 0.006836
    assert t1.random_clustering(10_000, 70) == pytest.approx(0.0070, abs=1e-4)
    assert t1.random_clustering(1, 3) is None
    assert t1.random_path(10_000, 35) == pytest.approx(math.log(10_000) / math.log(35))
    assert t1.random_path(50, 1.0) is None


def test_runs_to_table_and_figure(tmp_path):
    a = make_run(tmp_path, "a", "hyparview", 1, summary(0.1, 1.5, 2.5, 3.0, 12, [{"indegree": 3, "members": 4}]),
                 events_with_hops([[1, 2, 3], [1, 1, 2]]))
    b = make_run(tmp_path, "b", "hyparview", 2, summary(0.3, 1.7, 3.5, 3.0, 12,
                                                        [{"indegree": 2, "members": 2}, {"indegree": 4, "members": 2}]),
                 events_with_hops([[1, 2, 4], [3, 1, 1]]))
    c = make_run(tmp_path, "c", "cyclon", 1, summary(0.5, 1.2, 2.0, 3.0, 9, [{"indegree": 3, "members": 4}]),
                 events_with_hops([[1, 2, 1]]))
    ra = t1.analyse_run(a)
    assert (ra["max_hops_plain"], ra["clustering_random"], ra["out_degree"]) == (2.5, pytest.approx(1.0), 3.0)
    assert t1.analyse_run(b)["max_hops_plain"] == 3.5
    out = tmp_path / "out"
    assert t1.main([str(a), str(b), str(c), "--out", str(out)]) == 0
    rows = list(csv.DictReader((out / "summary.csv").open()))
    hpv = next(r for r in rows if r["protocol"] == "hyparview")
    assert (hpv["runs"], float(hpv["clustering"]), float(hpv["max_hops"])) == ("2", pytest.approx(0.2), 3.0)
    # the 95 % CI half-width of (0.1, 0.3): t(0.975, 1) x s / sqrt(2) = 12.706 x 0.1414 / 1.414
    assert float(hpv["clustering_ci95"]) == pytest.approx(12.706 * 0.1, rel=1e-3)
    ind = [r for r in csv.DictReader((out / "indegree.csv").open()) if r["protocol"] == "hyparview"]
    assert {(r["indegree"], float(r["fraction"])) for r in ind} == {("2", 0.25), ("3", 0.5), ("4", 0.25)}
    table = (out / "table1.md").read_text()
    assert "| paper, 10000 | 0.0009 | 0.0068 |" in table and "0.2000 ± " in table
    assert (out / "fig5_indegree.png").stat().st_size > 1000


def test_one_by_one_joins_are_their_own_row(tmp_path):
    d = make_run(tmp_path, "q", "hyparview", 1, summary(0.01, 4.0, 6.0, 4.0, 800, [{"indegree": 4, "members": 4}]),
                 events_with_hops([[1, 2, 3]]))
    spec = json.loads((d / "manifest.json").read_text())
    spec["spec"]["protocol"]["hyparview"] = {"join_interval": 0.05}
    (d / "manifest.json").write_text(json.dumps(spec))
    assert t1.analyse_run(d)["protocol"] == t1.SEQUENTIAL
    assert t1.main([str(d), "--out", str(tmp_path / "out")]) == 0
    assert "| members | hyparview, joins one by one |" in (tmp_path / "out" / "table1.md").read_text()


def test_an_unanalysed_run_is_refused_with_the_command_to_run(tmp_path):
    d = make_run(tmp_path, "a", "cyclon", 1, {}, events_with_hops([[1]]))
    (d / "analysis" / "metrics" / "summary.json").unlink()
    with pytest.raises(SystemExit, match="orchestrator analyze"):
        t1.analyse_run(d)
