"""The overlay metrics of seed 003 in Spark (analysis/protocols/overlay.py) against networkx and plain Python on
the same event log: a simulated HyParView and Cyclon run (tests/node/overlay_sim.py) with a crash."""
from __future__ import annotations

import json
import random
import statistics

import networkx as nx
import pytest

from analysis import figures_hyparview
from analysis.protocols import overlay
from tests.node.overlay_sim import OverlaySim, make_configs

pytestmark = pytest.mark.spark

N, CRASH_AT, END = 30, 22.0, 32.0


def simulate(protocol: str, view: str, **params):
    sim = OverlaySim(make_configs(N, protocol, senders=list(range(N)), rate_per_s=3, start_s=15, stop_s=30, seed=7,
                                  **params), seed=7, start_spread=2.0)
    dead = sorted(random.Random(7).sample(range(N), N // 2))
    snaps: dict[float, dict[int, set[int]]] = {}

    def snap(t):
        def f(s):
            snaps[t] = {i: set(s.cores[i].active if view == "active" else s.cores[i].view) for i in s.alive}
        return f

    sim.call(CRASH_AT - 0.5, snap(CRASH_AT - 0.5))
    sim.crash(dead, at=CRASH_AT)
    sim.call(END - 0.01, snap(END - 0.01))
    sim.run(END)
    return sim, dead, snaps


def frames(spark, sim: OverlaySim, dead: list[int]):
    rows = [(0.0 + sim.cores[i].clock.origin, f"m{i}", "node_started", None, None, None,
             json.dumps({"event": "node_started"})) for i in range(N)]
    for i, e in sim.events:
        f = e.fields
        rows.append((e.ts, f"m{i}", e.event, f.get("seq"), f.get("origin"), f.get("op"),
                     json.dumps({"ts": e.ts, "event": e.event, **f})))
    events = spark.createDataFrame(rows, "ts double, node string, event string, seq long, origin long, "
                                         "op string, raw string")
    members = spark.createDataFrame([(i, f"m{i}") for i in range(N)], "member_id int, member string")
    crash = spark.createDataFrame([(f"m{i}", CRASH_AT) for i in dead], "member string, crash_ts double")
    life = spark.createDataFrame([(f"m{i}", sim.cores[i].clock.origin, CRASH_AT if i in dead else None,
                                   CRASH_AT if i in dead else END) for i in range(N)],
                                 "member string, started_ts double, crashed_ts double, end_ts double")
    return events, members, crash, life


def nx_metrics(views: dict[int, set[int]]) -> dict:
    g = nx.DiGraph()
    g.add_nodes_from(views)
    g.add_edges_from((i, j) for i, vs in views.items() for j in vs if j in views)
    lengths = [d for s, targets in nx.all_pairs_shortest_path_length(g) for t, d in targets.items() if s != t]
    indeg: dict[int, int] = {}
    for _, k in g.in_degree():
        indeg[k] = indeg.get(k, 0) + 1
    und = g.to_undirected()
    return {"clustering": nx.average_clustering(und),
            "undirected_degree_mean": 2 * und.number_of_edges() / und.number_of_nodes(),
            "shortest_path_mean": statistics.fmean(lengths) if lengths else None,
            "reachable_pairs": len(lengths), "edges": g.number_of_edges(),
            "indegree": [{"indegree": k, "members": v} for k, v in sorted(indeg.items())]}


@pytest.mark.parametrize("protocol,view,params", [("hyparview", "active", {}),
                                                  ("cyclon", "partial", {"view_size": 6, "shuffle_length": 3})])
def test_graph_metrics_from_spark_equal_networkx_on_the_same_event_log(spark, protocol, view, params):
    sim, dead, snaps = simulate(protocol, view, **params)
    events, members, crash, life = frames(spark, sim, dead)
    for t, views in snaps.items():
        edges = overlay.edges_at(events, members, crash, t, view)
        got = {(r["src"], r["dst"]) for r in edges.collect()}
        assert got == {(i, j) for i, vs in views.items() for j in vs if j in views}    # the replay is exact
        m = overlay.graph_metrics(edges, overlay.live_members(members, crash, life, t))
        want = nx_metrics(views)
        assert m["members"] == len(views) and m["edges"] == want["edges"] > 0
        assert m["clustering"] == pytest.approx(want["clustering"], abs=1e-9)
        assert m["shortest_path_mean"] == pytest.approx(want["shortest_path_mean"], abs=1e-9)
        assert m["reachable_pairs"] == want["reachable_pairs"]
        assert m["undirected_degree_mean"] == pytest.approx(want["undirected_degree_mean"])
        assert m["indegree"] == want["indegree"]
    assert len(snaps) == 2


def test_reliability_per_broadcast_and_healing_match_the_log(spark):
    sim, dead, _ = simulate("hyparview", "active")
    events, members, crash, life = frames(spark, sim, dead)
    rel = [r.asDict() for r in overlay.reliability(events, members, life).collect()]
    got: dict[tuple[int, int], set[int]] = {}
    for i, e in sim.of("data_received"):
        got.setdefault((e.fields["origin"], e.fields["seq"]), set()).add(i)
    sent = {(i, e.fields["seq"]): e for i, e in sim.of("data_sent")}
    assert len(rel) == len(sent) > 20
    for r in rel:
        e = sent[(r["origin_id"], r["seq"])]
        correct = [j for j in range(N) if not (j in dead and CRASH_AT <= e.ts)]
        want = len((got.get((r["origin_id"], r["seq"]), set()) | {r["origin_id"]}) & set(correct)) / len(correct)
        assert r["reliability"] == pytest.approx(want) and r["cycle"] == e.fields["cycle"]
    h = overlay.healing(rel, CRASH_AT, overlay.crash_cycle(events, CRASH_AT))
    assert h["broadcasts_after"] > 5 and h["reliability_before"] == pytest.approx(1.0)
    # analysis.figures_hyparview's plain-Python pass over the same log (what the Figure 2 sweep uses) agrees
    log = [{"event": "run_started", "node": "orchestrator", "ts": 0.0, "members": [f"m{i}" for i in range(N)]},
           {"event": "action_applied", "node": "orchestrator", "op": "crash", "actual_s": CRASH_AT,
            "targets": [f"m{i}" for i in dead]}]
    log += [{"event": "node_started", "node": f"m{i}", "ts": sim.cores[i].clock.origin, "id": i} for i in range(N)]
    log += [{"ts": e.ts, "node": f"m{i}", "event": e.event, **e.fields} for i, e in sim.events]
    plain, plain_crash, plain_cyc, _ = figures_hyparview.run_reliability(log, 0.0)
    assert (plain_crash, plain_cyc) == (CRASH_AT, h["crash_cycle"])
    spark_rows = {(r["origin_id"], r["seq"]): r
                  for r in overlay.since_crash(rel, overlay.member_crash_cycles(events, CRASH_AT))}
    assert {(r["origin_id"], r["seq"]) for r in plain} == set(spark_rows)
    for r in plain:
        s = spark_rows[(r["origin_id"], r["seq"])]
        assert (r["reliability"], r["cycle"], r["sent_ts"], r["since_crash"]) == (
            pytest.approx(s["reliability"]), s["cycle"], pytest.approx(s["sent_ts"]), s["since_crash"])
    # Table 1's maximum hops to delivery: the largest `hops` per broadcast sent before the crash, averaged
    hops: dict[tuple[int, int], int] = {}
    for i, e in sim.of("data_received"):
        k = (e.fields["origin"], e.fields["seq"])
        hops[k] = max(hops.get(k, 0), e.fields["hops"])
    before = [hops[k] for k, e in sent.items() if e.ts < CRASH_AT and k in hops]
    hd = overlay.hops_to_delivery(events, overlay.reliability(events, members, life), CRASH_AT)
    assert hd["broadcasts"] == len(before) > 10 and max(before) >= 2
    assert (hd["max_hops_mean"], hd["max_hops_max"]) == (pytest.approx(statistics.fmean(before)), max(before))
    assert figures_hyparview.max_hops(log, CRASH_AT) == pytest.approx(statistics.fmean(before))
    assert h["crash_cycle"] in range(18, 23) and h["cycles_to_heal"] is not None and h["cycles_to_heal"] <= 2
    # a hand-made series: healed from the third broadcast after the crash, at cycle 12 (crash at cycle 10)
    series = [{"sent_ts": 1.0, "reliability": 1.0, "cycle": 9}, {"sent_ts": 5.0, "reliability": 0.5, "cycle": 10},
              {"sent_ts": 6.0, "reliability": 1.0, "cycle": 11}, {"sent_ts": 7.0, "reliability": 0.9, "cycle": 11},
              {"sent_ts": 8.0, "reliability": 1.0, "cycle": 12}, {"sent_ts": 9.0, "reliability": 0.995, "cycle": 13}]
    h = overlay.healing(series, 4.0, 10)
    assert (h["heal_broadcast"], h["cycles_to_heal"], h["reliability_before"]) == (4, 2, 1.0)
