"""The overlay numbers of seed 003 (analysis/protocols/overlay.py) on a simulated HyParView and Cyclon run with a
crash (tests/node/overlay_sim.py) written as a run directory: run_values (pure Python, networkx) against the
simulated cores' own views and the log; and the Spark transforms of the same definitions, over the run directory's
events ingested as `orchestrator analyze` does, against run_values (marked spark)."""
from __future__ import annotations

import random
import statistics

import networkx as nx
import pytest

from analysis.protocols import overlay
from analysis.protocols.cyclon import PLUGIN as CYCLON
from analysis.protocols.hyparview import PLUGIN as HYPARVIEW
from analysis.rundir import load
from tests.analysis.test_hyparview_values import T0, make_run
from tests.node.overlay_sim import OverlaySim, make_configs

N, CRASH_AT, END = 30, 22.0, 32.0
CASES = [("hyparview", "active", {}), ("cyclon", "partial", {"view_size": 6, "shuffle_length": 3})]


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


def write_run(tmp_path, protocol: str, sim: OverlaySim, dead: list[int]):
    """The simulated log as a run directory (members h0.., t0 = T0, the crash at t0 + CRASH_AT)."""
    ev = {f"h{i}": [{"ts": T0 + sim.cores[i].clock.origin, "event": "node_started", "id": i}] for i in range(N)}
    for i, e in sim.events:
        ev[f"h{i}"].append({"ts": T0 + e.ts, "event": e.event, **e.fields})
    ev["orchestrator"] = [{"ts": T0 + CRASH_AT, "event": "action_applied", "op": "crash", "actual_s": CRASH_AT,
                           "targets": [f"h{i}" for i in dead]},
                          {"ts": T0 + END, "event": "run_stopped", "reason": "completed"}]
    return load(make_run(tmp_path, protocol, protocol, ev, n=N, fraction=0.5))


def same(a, b) -> bool:
    """Equal, floats within 1e-9 (dicts and lists compared element by element)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and abs(a - b) <= 1e-9
    return a == b


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
            "degree": 2 * und.number_of_edges() / und.number_of_nodes(),
            "shortest_path": statistics.fmean(lengths) if lengths else None,
            "reachable_pairs": len(lengths), "edges": g.number_of_edges(),
            "indegree": [{"indegree": k, "members": v} for k, v in sorted(indeg.items())]}


@pytest.mark.parametrize("protocol,view,params", CASES)
def test_the_replayed_overlay_is_the_cores_views(tmp_path, protocol, view, params):
    sim, dead, snaps = simulate(protocol, view, **params)
    run = write_run(tmp_path, protocol, sim, dead)
    ids = {m.name: m.id for m in run.members}
    crashed = {f"h{i}": T0 + CRASH_AT for i in dead}
    for t, views in snaps.items():
        live, edges = overlay.overlay_at(run.events, ids, crashed, T0 + t, view)
        assert live == set(views)
        assert edges == {(i, j) for i, vs in views.items() for j in vs if j in views}    # the replay is exact
        g, want = overlay.graph_values(live, edges), nx_metrics(views)
        assert g["members"] == len(views) and g["edges"] == want["edges"] > 0
        assert same({k: g[k] for k in want}, want)
    v = (HYPARVIEW if protocol == "hyparview" else CYCLON).run_values(run)
    before = overlay.graph_values(*overlay.overlay_at(run.events, ids, crashed, T0 + CRASH_AT - 1e-3, view))
    assert {k: v[f"{k}_before"] for k in before} == before and v["members_end"] == N - len(dead)


def test_reliability_per_broadcast_healing_and_hops_match_the_log(tmp_path):
    sim, dead, _ = simulate("hyparview", "active")
    run = write_run(tmp_path, "hyparview", sim, dead)
    ids = {m.name: m.id for m in run.members}
    rel = overlay.broadcasts(run.events, ids, {f"h{i}": T0 + CRASH_AT for i in dead})
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
    v = HYPARVIEW.run_values(run)
    assert v["broadcasts_after"] > 5 and v["reliability_before"] == pytest.approx(1.0)
    assert v["crash_cycle"] in range(18, 23) and v["cycles_to_heal"] is not None and v["cycles_to_heal"] <= 2
    # Table 1's maximum hops to delivery: the largest `hops` per broadcast sent before the crash, averaged
    hops: dict[tuple[int, int], int] = {}
    for i, e in sim.of("data_received"):
        k = (e.fields["origin"], e.fields["seq"])
        hops[k] = max(hops.get(k, 0), e.fields["hops"])
    before = [hops[k] for k, e in sent.items() if e.ts < CRASH_AT and k in hops]
    assert len(before) > 10 and max(before) >= 2 and v["max_hops_before"] == pytest.approx(statistics.fmean(before))
    # a hand-made series: healed from the third broadcast after the crash, at cycle 12 (crash at cycle 10)
    series = [{"sent_ts": 1.0, "reliability": 1.0, "cycle": 9}, {"sent_ts": 5.0, "reliability": 0.5, "cycle": 10},
              {"sent_ts": 6.0, "reliability": 1.0, "cycle": 11}, {"sent_ts": 7.0, "reliability": 0.9, "cycle": 11},
              {"sent_ts": 8.0, "reliability": 1.0, "cycle": 12}, {"sent_ts": 9.0, "reliability": 0.995, "cycle": 13}]
    h = overlay.healing(series, 4.0, 10)
    assert (h["heal_broadcast"], h["cycles_to_heal"], h["reliability_before"]) == (4, 2, 1.0)


# --- Spark: the same definitions over the ingested events, against run_values --------------------------------------

def spark_frames(spark, run):
    """The run's events, members, crash and life tables as `orchestrator analyze` makes them (analysis/run.py)."""
    from analysis import ingest, metrics

    events = ingest.parse_events(ingest.read_event_lines(spark, run.event_logs), run.run_id, run.t0,
                                 run.event_offsets).cache()
    members = metrics.members_frame(spark, run.members)
    crash = metrics.crashes(events, run.t0)
    return events, members, crash, metrics.lifetimes(events, members, crash, run.end)


def spark_values(run, view: str, events, members, crash, life, graphs: bool = True) -> dict:
    """overlay's Spark transforms over a run's tables, as run_values' keys (the plug-in's Spark metrics before
    issue #38); with `graphs`, the overlay's graph metrics too (about 15 s of Spark jobs per graph). Shared with
    tests/integration/test_hyparview_values_spark.py."""
    from pyspark.sql import functions as F

    crash_ts = crash.agg(F.min("crash_ts")).first()[0]
    crash_end = (events.where((F.col("event") == "action_applied") & (F.col("op") == "crash"))
                 .agg(F.max("ts")).first()[0])
    end = events.agg(F.max("ts")).first()[0]
    rel = [r.asDict() for r in overlay.reliability(events, members, life).collect()]
    crash_cyc = None
    if crash_ts is not None:
        rel = overlay.since_crash(rel, overlay.member_crash_cycles(events, crash_ts))
        crash_cyc = overlay.crash_cycle(events, crash_ts)
    h = overlay.healing(rel, crash_ts, crash_cyc, first_s=2 * float(run.params.get("cycle_s") or 1.0),
                        first_from=crash_end)
    out = {k: h[k] for k in ("reliability_before", "reliability_after", "reliability_after_first",
                             "broadcasts_after_first", "crash_cycle", "cycles_to_heal", "cycles_to_heal_mean",
                             "heal_broadcast")}
    out["reliability_by_cycle"] = h["by_cycle"]
    out["reliability_after_failure"] = [r["reliability"] for r in h["after_failure"]]
    out["max_hops_before"] = overlay.hops_to_delivery(events, overlay.reliability(events, members, life),
                                                      crash_ts)["max_hops_mean"]
    for label, t in (("before", crash_ts - 1e-3 if crash_ts is not None else end), ("end", end)) if graphs else ():
        g = overlay.graph_metrics(overlay.edges_at(events, members, crash, t, view),
                                  overlay.live_members(members, crash, life, t))
        out.update({f"members_{label}": g["members"], f"edges_{label}": g["edges"],
                    f"indegree_{label}": g["indegree"], f"clustering_{label}": g["clustering"],
                    f"degree_{label}": g["undirected_degree_mean"], f"shortest_path_{label}": g["shortest_path_mean"],
                    f"reachable_pairs_{label}": g["reachable_pairs"]})
    return out


def differences(s: dict, v: dict) -> dict:
    return {k: (s[k], v.get(k)) for k in s if not same(s[k], v.get(k))}


@pytest.mark.spark
@pytest.mark.parametrize("protocol,view,params", CASES)
def test_the_spark_transforms_equal_run_values(spark, tmp_path, protocol, view, params):
    sim, dead, _ = simulate(protocol, view, **params)
    run = write_run(tmp_path, protocol, sim, dead)
    v = (HYPARVIEW if protocol == "hyparview" else CYCLON).run_values(run)
    s = spark_values(run, view, *spark_frames(spark, run))
    assert s["edges_before"] > 0 and s["reliability_by_cycle"] and s["broadcasts_after_first"] > 0
    assert differences(s, v) == {}
