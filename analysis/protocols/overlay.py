"""The overlay numbers of seed 003 (HyParView §5), shared by the plug-ins of hyparview, cyclon, scamp and
cyclonacked: `values(run, view)` is THE definition of every per-run number their analysis, Figures 2-4 and Table 1
use (the plug-ins' `run_values`, pure Python over the run's events, networkx for the graphs). The Spark transforms at
the end compute the same definitions over the Spark events table: the tests compare both (tests/analysis/
test_overlay.py on a simulated log, tests/integration/test_hyparview_values_spark.py on a real run). Not a plug-in.

Definitions (times are virtual unix seconds, `run.events`' `ts`):

- **reliability** of broadcast (origin, seq) (§2.5): the fraction of the correct members that delivered it,
  the origin included: (receivers + 1) / (counted members + 1), where the counted members are the generic
  analysis' (started before the send, not crashed at or before it, the origin excluded).
- **reliability after a failure**: the broadcasts sent after the first crash, numbered 1, 2, ... in send order,
  with their reliability (Figure 3's curves).
- **cycles to heal** (Figure 4): `cycle` of a broadcast is its sender's membership cycle when it sent it
  (`data_sent.cycle`); the crash's cycle is the median over the members of the last cycle each had logged
  (`cycle` events) at the crash. The pre-failure reliability is the mean over the broadcasts before the crash;
  the healing broadcast is the first after the crash from which on every broadcast reaches at least the
  pre-failure reliability minus `tol` (0.01); cycles to heal = its cycle minus the crash's cycle (null: never).
- **maximum hops to delivery** (Table 1): per broadcast sent before the crash (every one without a crash), the
  largest `hops` of its `data_received` events; the mean over those broadcasts (`max_hops_before`).
- **per cycle after the crash** (Figure 4 as §5.3 measures it): the broadcasts after the crash grouped by the
  membership cycles their sender had run since the crash (`since_crash`: its cycle at the send minus its own
  last cycle logged at or before the crash; a row without it: its cycle minus the crash's median cycle, negative
  counted as 0 — members' counters drift apart by several cycles on a loaded machine), the mean reliability of
  each group; `cycles_to_heal_mean` = the first cycle c from which the mean over the broadcasts of cycles
  c .. c + `window` - 1 (4: ~8 broadcasts at 4/s and 500 ms cycles, near the paper's 10 per cycle) reaches the
  pre-failure reliability minus `tol` (0: from the crash's own cycle on; null: never). `reliability_after_first`
  is the mean over the broadcasts sent in the 2 cycles (`cycle_s`) after the crash has ended (the crash record's
  time, when the last target was killed; until then targets still forward) — the closest this testbed comes to
  Figure 2's setting, where every broadcast is sent before another membership cycle.
- **the crash**: `crash_fraction` the schedule's planned fraction (the spec's first crash operation),
  `crash_spread_s` how long after its start the last target was killed; **suspicions**: failure-detector removals
  from the dissemination view (`view_changed` op remove, reason `no_ack` for CyclonAcked, `failed` for HyParView)
  before the first crash (all false: nobody had crashed) and after it.
- **the overlay** at t: the edges member -> peer of the dissemination view (`view`) replayed from `view_changed`
  at or before t (a pair's last change by (ts, change) decides) between the live members (started by t, not
  crashed), no self-loops; `before` 1 ms before the first crash (else the last event), `end` the last event. Its
  members, edges, in-degrees, average clustering coefficient of the undirected graph (fewer than 2 neighbours:
  0), mean undirected and out-degree, average shortest path over the directed graph's reachable ordered pairs, and
  a random graph's yardsticks: clustering degree / (n - 1), shortest path ln n / ln out-degree.
"""
from __future__ import annotations

import math
import statistics
from typing import TYPE_CHECKING, Any

from analysis.protocols import crash_times

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from analysis.rundir import RunDir


# --- pure: the run's numbers (run_values) -------------------------------------------------------------------------

def broadcasts(events: list[dict], ids: dict[str, int], crashed: dict[str, float]) -> list[dict]:
    """One row per broadcast in send order: (origin, origin_id, seq, sent_ts, cycle, correct, delivered,
    reliability); `ids`: member name -> id, `crashed`: member -> its crash time."""
    started: dict[str, float] = {}
    sent: dict[tuple[str, int], dict] = {}
    got: set[tuple[str, int, int]] = set()
    for e in events:
        ev, node = e.get("event"), e.get("node")
        if ev == "node_started":
            started[node] = min(started.get(node, math.inf), e["ts"])
        elif ev == "data_sent" and node in ids:
            k = (node, int(e["seq"]))
            if k not in sent or e["ts"] < sent[k]["ts"]:
                sent[k] = {"ts": e["ts"], "cycle": e.get("cycle")}
        elif ev == "data_received":
            got.add((node, int(e["origin"]), int(e["seq"])))
    rows = []
    for (origin, seq), s in sent.items():
        oid, ts = ids[origin], s["ts"]
        counted = [m for m in ids if m != origin and started.get(m, math.inf) <= ts and crashed.get(m, math.inf) > ts]
        delivered = sum(1 for m in counted if (m, oid, seq) in got)
        rows.append({"origin": origin, "origin_id": oid, "seq": seq, "sent_ts": ts, "cycle": s["cycle"],
                     "correct": len(counted) + 1, "delivered": delivered + 1,
                     "reliability": (delivered + 1) / (len(counted) + 1)})
    return sorted(rows, key=lambda r: (r["sent_ts"], r["origin_id"], r["seq"]))


def cycles_at(events: list[dict], t: float) -> dict[str, int]:
    """Each member's last `cycle` logged at or before t (member name -> cycle)."""
    last: dict[str, int] = {}
    for e in events:
        if e.get("event") == "cycle" and e.get("cycle") is not None and e["ts"] <= t:
            last[e["node"]] = max(last.get(e["node"], int(e["cycle"])), int(e["cycle"]))
    return last


def since_crash(rel: list[dict], cycles: dict[str, int]) -> list[dict]:
    """`rel` rows with `since_crash` = the row's cycle minus its origin's cycle at the crash (where both exist)."""
    return [{**r, "since_crash": r["cycle"] - cycles[r["origin"]]}
            if r.get("cycle") is not None and r.get("origin") in cycles else r for r in rel]


def by_cycle(after: list[dict], crash_cyc: int | None) -> list[dict[str, Any]]:
    """The broadcasts after the crash grouped by cycles since the crash: [{cycle, broadcasts, reliability}] in
    cycle order (see the module docstring); [] without a crash cycle."""
    groups: dict[int, list[float]] = {}
    for r in after:
        if r.get("since_crash") is not None:
            c = r["since_crash"]
        elif r.get("cycle") is not None and crash_cyc is not None:
            c = r["cycle"] - crash_cyc
        else:
            continue
        groups.setdefault(max(0, c), []).append(r["reliability"])
    return [{"cycle": c, "broadcasts": len(v), "reliability": statistics.fmean(v)} for c, v in sorted(groups.items())]


def healing(rel: list[dict], crash_ts: float | None, crash_cyc: int | None, tol: float = 0.01,
            first_s: float = 1.0, window: int = 4, first_from: float | None = None) -> dict[str, Any]:
    """Pre-failure reliability, the post-failure series, and cycles to heal (see the module docstring)."""
    before = [r["reliability"] for r in rel if crash_ts is None or r["sent_ts"] < crash_ts]
    after = [r for r in rel if crash_ts is not None and r["sent_ts"] >= crash_ts]
    out: dict[str, Any] = {
        "reliability_before": statistics.fmean(before) if before else None,
        "broadcasts_before": len(before), "broadcasts_after": len(after),
        "reliability_after": statistics.fmean(r["reliability"] for r in after) if after else None,
        "after_failure": [{"k": k + 1, "reliability": r["reliability"], "cycle": r["cycle"]}
                          for k, r in enumerate(after)],
        "crash_cycle": crash_cyc, "cycles_to_heal": None, "heal_broadcast": None,
        "by_cycle": by_cycle(after, crash_cyc), "cycles_to_heal_mean": None,
    }
    t = max(crash_ts, first_from) if first_from is not None and crash_ts is not None else crash_ts
    first = [r["reliability"] for r in after if t <= r["sent_ts"] < t + first_s]
    out["reliability_after_first"] = statistics.fmean(first) if first else None
    out["broadcasts_after_first"] = len(first)
    target = out["reliability_before"]
    if target is None or not after:
        return out
    groups = out["by_cycle"]
    for c in range(groups[-1]["cycle"] + 1 if groups else 0):     # a window may start at a cycle without broadcasts
        win = [x for x in groups if c <= x["cycle"] < c + window]
        n = sum(x["broadcasts"] for x in win)
        if n and sum(x["reliability"] * x["broadcasts"] for x in win) / n >= target - tol:
            out["cycles_to_heal_mean"] = c
            break
    heal = None
    for k in range(len(after) - 1, -1, -1):
        if after[k]["reliability"] >= target - tol:
            heal = k
        else:
            break
    if heal is not None:
        out["heal_broadcast"] = heal + 1
        cyc = after[heal]["cycle"]
        if cyc is not None and crash_cyc is not None:
            out["cycles_to_heal"] = max(0, cyc - crash_cyc)
    return out


def max_hops(events: list[dict], ids: dict[str, int], before_ts: float | None) -> float | None:
    """Table 1's maximum hops to delivery: per broadcast sent before `before_ts` (every one when None), the largest
    `hops` of its `data_received` events; their mean (None: no broadcast logged hops)."""
    sent: dict[tuple[int, int], float] = {}
    most: dict[tuple[int, int], int] = {}
    for e in events:
        ev = e.get("event")
        if ev == "data_sent" and e.get("node") in ids:
            k = (ids[e["node"]], int(e["seq"]))
            sent[k] = min(sent.get(k, math.inf), e["ts"])
        elif ev == "data_received" and e.get("hops") is not None:
            k = (int(e["origin"]), int(e["seq"]))
            most[k] = max(most.get(k, 0), int(e["hops"]))
    vals = [h for k, h in most.items() if k in sent and (before_ts is None or sent[k] < before_ts)]
    return statistics.fmean(vals) if vals else None


def suspicions(events: list[dict], crash_ts: float | None) -> dict[str, int]:
    """Failure-detector removals from the dissemination view before the first crash (all false) and after it."""
    before = after = 0
    for e in events:
        if (e.get("event") == "view_changed" and e.get("op") == "remove" and e.get("view") in ("active", "partial")
                and e.get("reason") in ("no_ack", "failed")):
            if crash_ts is None or e["ts"] < crash_ts:
                before += 1
            else:
                after += 1
    return {"false_suspicions_before": before, "suspicions_after": after}


def overlay_at(events: list[dict], ids: dict[str, int], crashed: dict[str, float], t: float,
               view: str) -> tuple[set[int], set[tuple[int, int]]]:
    """(live members, directed edges) of the overlay at t (member ids; see the module docstring)."""
    started: dict[str, float] = {}
    last: dict[tuple[int, int], tuple[float, float, str]] = {}
    for e in events:
        if e.get("event") == "node_started":
            started[e["node"]] = min(started.get(e["node"], math.inf), e["ts"])
        elif (e.get("event") == "view_changed" and e.get("view") == view and e["ts"] <= t and e.get("node") in ids
              and e.get("peer") is not None):
            k = (ids[e["node"]], int(e["peer"]))
            at = (e["ts"], -math.inf if e.get("change") is None else float(e["change"]), e.get("op"))
            if k not in last or at[:2] >= last[k][:2]:
                last[k] = at
    live = {i for m, i in ids.items() if started.get(m, math.inf) <= t and crashed.get(m, math.inf) > t}
    return live, {(s, d) for (s, d), at in last.items() if at[2] == "add" and s != d and s in live and d in live}


def graph_values(live: set[int], edges: set[tuple[int, int]]) -> dict[str, Any]:
    """The overlay's graph numbers (networkx; see the module docstring)."""
    import networkx as nx

    g = nx.DiGraph()
    g.add_nodes_from(live)
    g.add_edges_from(edges)
    n = g.number_of_nodes()
    indeg: dict[int, int] = {}
    for _, k in g.in_degree():
        indeg[k] = indeg.get(k, 0) + 1
    total = count = 0
    for _, dist in nx.all_pairs_shortest_path_length(g):
        total += sum(dist.values())
        count += len(dist) - 1
    und = g.to_undirected()
    degree = 2 * und.number_of_edges() / n if n else None
    out_degree = g.number_of_edges() / n if n else None
    return {"members": n, "edges": g.number_of_edges(),
            "indegree": [{"indegree": k, "members": v} for k, v in sorted(indeg.items())],
            "clustering": nx.average_clustering(und) if n else None,
            "degree": degree, "out_degree": out_degree,
            "clustering_random": degree / (n - 1) if n > 1 else None,
            "shortest_path": total / count if count else None,
            "shortest_path_random": math.log(n) / math.log(out_degree) if n > 1 and out_degree > 1 else None,
            "reachable_pairs": count}


def crash_fraction(spec: dict) -> float | None:
    """The planned fraction of the spec's first crash operation (None: no crash by fraction)."""
    for op in spec.get("schedule") or []:
        if isinstance(op, dict) and op.get("action") == "crash":
            return op.get("fraction")
    return None


def values(run: RunDir, view: str) -> dict[str, Any]:
    """Every overlay number of a run (the keys: docs/hyparview.md, "Analysis"; definitions above)."""
    events = run.events
    ids = {m.name: m.id for m in run.members}
    crashed = crash_times(events, run.t0)
    crash_ts = min(crashed.values()) if crashed else None
    ops = [e for e in events if e.get("event") == "action_applied" and e.get("op") == "crash"]
    rel, crash_cyc = broadcasts(events, ids, crashed), None
    if crash_ts is not None:           # each row's cycle since the crash: its sender's own count
        last = cycles_at(events, crash_ts)
        crash_cyc = int(statistics.median(last.values())) if last else None
        rel = since_crash(rel, last)
    h = healing(rel, crash_ts, crash_cyc, first_s=2 * float(run.params.get("cycle_s") or 1.0),
                first_from=max((e["ts"] for e in ops), default=None))
    out: dict[str, Any] = {
        "protocol": run.protocol, "members": len(ids),
        "crash_fraction": crash_fraction(run.manifest.get("spec") or {}),
        "crashed": len(crashed), "survivors": len(ids) - len(crashed),
        "crash_spread_s": max((e["ts"] - (run.t0 + float(e["actual_s"])) for e in ops
                               if e.get("actual_s") is not None), default=None),
        **{k: h[k] for k in ("crash_cycle", "reliability_before", "reliability_after", "reliability_after_first",
                             "broadcasts_before", "broadcasts_after", "broadcasts_after_first", "cycles_to_heal",
                             "cycles_to_heal_mean", "heal_broadcast")},
        "reliability_after_failure": [r["reliability"] for r in h["after_failure"]],
        "reliability_by_cycle": h["by_cycle"],
        **suspicions(events, crash_ts),
        "max_hops_before": max_hops(events, ids, crash_ts),
    }
    end = max((e["ts"] for e in events if isinstance(e.get("ts"), (int, float))), default=None)
    for label, t in (("before", crash_ts - 1e-3 if crash_ts is not None else end), ("end", end)):
        g = graph_values(*overlay_at(events, ids, crashed, t, view)) if t is not None else {}
        out.update({f"{k}_{label}": g.get(k) for k in ("members", "edges", "indegree", "clustering", "degree",
                                                       "out_degree", "clustering_random", "shortest_path",
                                                       "shortest_path_random", "reachable_pairs")})
    return out


# --- Spark: the same definitions over the Spark events table (the tests' other path) ----------------------------

def _raw(field: str, cast: str | None = None):
    from pyspark.sql import functions as F

    col = F.get_json_object(F.col("raw"), f"$.{field}")
    return col.cast(cast) if cast else col


def reliability(events: DataFrame, members: DataFrame, life: DataFrame) -> DataFrame:
    """One row per broadcast with a counted receiver: (origin, origin_id, seq, sent_ts, cycle, correct, delivered,
    reliability), from the generic analysis' receipts."""
    from pyspark.sql import functions as F

    from analysis.metrics import delivery, receipts

    per = delivery(receipts(events, members, life))
    cycles = (events.where(F.col("event") == "data_sent")
              .select(F.col("node").alias("origin"), "seq", _raw("cycle", "long").alias("cycle"))
              .groupBy("origin", "seq").agg(F.min("cycle").alias("cycle")))
    return (per.join(cycles, ["origin", "seq"], "left")
            .select("origin", "origin_id", "seq", "sent_ts", "cycle",
                    (F.col("members") + 1).alias("correct"), (F.col("received") + 1).alias("delivered"),
                    ((F.col("received") + 1) / (F.col("members") + 1)).alias("reliability"))
            .orderBy("sent_ts", "origin_id", "seq"))     # broadcasts' order, ties as in `broadcasts` (CI met one)


def hops_to_delivery(events: DataFrame, rel: DataFrame, before_ts: float | None) -> dict[str, Any]:
    """`max_hops` over `reliability`'s broadcasts: mean and largest of the per-broadcast largest hops."""
    from pyspark.sql import functions as F

    got = (events.where(F.col("event") == "data_received")
           .select(_raw("origin", "int").alias("origin_id"), "seq", _raw("hops", "int").alias("hops"))
           .groupBy("origin_id", "seq").agg(F.max("hops").alias("max_hops")))
    sent = rel.select("origin_id", "seq", "sent_ts")
    if before_ts is not None:
        sent = sent.where(F.col("sent_ts") < before_ts)
    r = sent.join(got, ["origin_id", "seq"]).agg(F.avg("max_hops").alias("mean"), F.max("max_hops").alias("max"),
                                                 F.count("*").alias("broadcasts")).first()
    return {"max_hops_mean": r["mean"], "max_hops_max": r["max"], "broadcasts": r["broadcasts"]}


def member_crash_cycles(events: DataFrame, crash_ts: float) -> dict[str, int]:
    """`cycles_at` in Spark: each member's last `cycle` logged at or before `crash_ts`."""
    from pyspark.sql import functions as F

    rows = (events.where((F.col("event") == "cycle") & (F.col("ts") <= crash_ts))
            .groupBy("node").agg(F.max(_raw("cycle", "long")).alias("cycle")).collect())
    return {r["node"]: r["cycle"] for r in rows if r["cycle"] is not None}


def crash_cycle(events: DataFrame, crash_ts: float) -> int | None:
    """The median over members of the last `cycle` each logged at or before `crash_ts`."""
    cycles = list(member_crash_cycles(events, crash_ts).values())
    return int(statistics.median(cycles)) if cycles else None


def edges_at(events: DataFrame, members: DataFrame, crash: DataFrame, t: float, view: str) -> DataFrame:
    """Directed edges (src, dst) (member ids) of the overlay at time t (`overlay_at`)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    ids = members.select(F.col("member").alias("node"), F.col("member_id").alias("src"))
    changes = (events.where((F.col("event") == "view_changed") & (F.col("ts") <= t)
                            & (_raw("view") == view))
               .join(ids, "node")
               .select("src", _raw("peer", "int").alias("dst"), "ts", _raw("change", "long").alias("change"), "op"))
    last = Window.partitionBy("src", "dst").orderBy(F.col("ts").desc(), F.col("change").desc())
    present = (changes.withColumn("k", F.row_number().over(last)).where((F.col("k") == 1) & (F.col("op") == "add"))
               .select("src", "dst"))
    dead = (crash.where(F.col("crash_ts") <= t).join(members, "member")
            .select(F.col("member_id").alias("dead")).distinct())
    return (present.join(dead, present.src == dead.dead, "left_anti")
            .join(dead, present.dst == dead.dead, "left_anti").distinct())


def live_members(members: DataFrame, crash: DataFrame, life: DataFrame, t: float) -> DataFrame:
    """(v): the members started at or before t that had not crashed by t."""
    from pyspark.sql import functions as F

    dead = crash.where(F.col("crash_ts") <= t).select("member").distinct()
    started = life.where(F.col("started_ts").isNotNull() & (F.col("started_ts") <= t)).select("member")
    return (members.join(started, "member").join(dead, "member", "left_anti")
            .select(F.col("member_id").alias("v")))


def graph_metrics(edges: DataFrame, nodes: DataFrame, max_hops: int = 64) -> dict[str, Any]:
    """`graph_values` in Spark (edges: src, dst; nodes: v): in-degree distribution, average clustering coefficient
    and average shortest path (all-pairs BFS, each hop checkpointed: a union grown over many hops would not fit
    the heap)."""
    from pyspark.sql import functions as F

    e = edges.join(nodes.withColumnRenamed("v", "src"), "src").join(nodes.withColumnRenamed("v", "dst"), "dst") \
        .where(F.col("src") != F.col("dst")).select("src", "dst").distinct().cache()
    n = nodes.count()
    indeg = (nodes.join(e.groupBy(F.col("dst").alias("v")).agg(F.count("*").alias("indegree")), "v", "left")
             .fillna(0, ["indegree"]).groupBy("indegree").agg(F.count("*").alias("members"))
             .orderBy("indegree").collect())
    und = e.select(F.col("src").alias("v"), F.col("dst").alias("w")).union(
        e.select(F.col("dst").alias("v"), F.col("src").alias("w"))).distinct().cache()
    deg = und.groupBy("v").agg(F.count("*").alias("k"))
    pairs = (und.alias("a").join(und.alias("b"), F.col("a.v") == F.col("b.v"))
             .where(F.col("a.w") < F.col("b.w"))
             .select(F.col("a.v").alias("v"), F.col("a.w").alias("x"), F.col("b.w").alias("y")))
    link = und.select(F.col("v").alias("x"), F.col("w").alias("y"))
    closed = pairs.join(link, ["x", "y"]).groupBy("v").agg(F.count("*").alias("links"))
    cc = (nodes.join(deg, "v", "left").join(closed, "v", "left").fillna(0, ["k", "links"])
          .select(F.when(F.col("k") >= 2, F.col("links") / (F.col("k") * (F.col("k") - 1) / 2))
                  .otherwise(F.lit(0.0)).alias("c")))
    clustering = cc.agg(F.avg("c")).first()[0]
    visited = nodes.select(F.col("v").alias("s"), F.col("v").alias("v")).localCheckpoint()
    frontier, total, count = visited, 0, 0
    for hop in range(1, max_hops + 1):
        step = (frontier.join(e, frontier.v == e.src).select("s", F.col("dst").alias("v"))
                .distinct().join(visited, ["s", "v"], "left_anti").localCheckpoint())
        found = step.count()
        if found == 0:
            break
        total += found * hop
        count += found
        visited = visited.union(step).localCheckpoint()
        frontier = step
    return {
        "members": n, "edges": e.count(),
        "indegree": [{"indegree": r["indegree"], "members": r["members"]} for r in indeg],
        "clustering": clustering, "undirected_degree_mean": (und.count() / n) if n else None,
        "shortest_path_mean": total / count if count else None,
        "reachable_pairs": count, "pairs": n * (n - 1),
    }
