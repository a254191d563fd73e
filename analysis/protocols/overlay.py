"""The overlay metrics of seed 003 (HyParView §5), shared by the plug-ins of hyparview, cyclon (and the other
peer-sampling protocols): pure DataFrame transforms over the events table. Not a plug-in itself.

Definitions (times are unix seconds):

- **reliability** of broadcast (origin, seq) (§2.5): the fraction of the correct members that delivered it,
  the origin included: (receivers + 1) / (counted members + 1), where the counted members are the generic
  analysis' (`metrics.receipts`: started before the send, not crashed at or before it, the origin excluded).
- **reliability after a failure**: the broadcasts sent after the first crash, numbered 1, 2, ... in send order,
  with their reliability (Figure 3's curves).
- **cycles to heal** (Figure 4): `cycle` of a broadcast is its sender's membership cycle when it sent it
  (`data_sent.cycle`); the crash's cycle is the median over the live members of the last cycle each had logged
  (`cycle` events) at the crash. The pre-failure reliability is the mean over the broadcasts before the crash;
  the healing broadcast is the first after the crash from which on every broadcast reaches at least the
  pre-failure reliability minus `tol` (0.01); cycles to heal = its cycle minus the crash's cycle (null: never).
- **maximum hops to delivery** (Table 1): per broadcast sent before the crash, the largest `hops` of its
  `data_received` events; the mean over those broadcasts (`hops_to_delivery`).
- **per cycle after the crash** (Figure 4 as §5.3 measures it): the broadcasts after the crash grouped by the
  membership cycles their sender had run since the crash (`since_crash`: its cycle at the send minus its own
  last cycle logged at or before the crash, `member_crash_cycles`; a row without it: its cycle minus the crash's
  median cycle, negative counted as 0 — members' counters drift apart by several cycles on a loaded machine), the
  mean reliability of each group; `cycles_to_heal_mean` = the first cycle c from which the mean over the
  broadcasts of cycles c .. c + `window` - 1 (4: ~8 broadcasts at 4/s and 500 ms cycles, near the paper's 10 per
  cycle; 1 = the per-cycle mean alone) reaches the pre-failure reliability minus `tol` (0: from the crash's own
  cycle on; null: never). `reliability_after_first` is the mean over the broadcasts sent in the `first_s` (1 s:
  2 cycles of 500 ms) after the crash has ended (`first_from`: the crash record's time, when the last target
  was killed; until then targets still forward) — the closest this testbed comes to Figure 2's setting, where every
  broadcast is sent before another membership cycle (here the cycles go on); by time, since on a loaded machine
  the members' cycle counters do not advance together.
"""
from __future__ import annotations

import statistics
from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from analysis.metrics import delivery, receipts


def _raw(field: str, cast: str | None = None):
    col = F.get_json_object(F.col("raw"), f"$.{field}")
    return col.cast(cast) if cast else col


def reliability(events: DataFrame, members: DataFrame, life: DataFrame) -> DataFrame:
    """One row per broadcast: (origin, origin_id, seq, sent_ts, cycle, correct, delivered, reliability)."""
    per = delivery(receipts(events, members, life))
    cycles = (events.where(F.col("event") == "data_sent")
              .select(F.col("node").alias("origin"), "seq", _raw("cycle", "long").alias("cycle"))
              .groupBy("origin", "seq").agg(F.min("cycle").alias("cycle")))
    return (per.join(cycles, ["origin", "seq"], "left")
            .select("origin", "origin_id", "seq", "sent_ts", "cycle",
                    (F.col("members") + 1).alias("correct"), (F.col("received") + 1).alias("delivered"),
                    ((F.col("received") + 1) / (F.col("members") + 1)).alias("reliability"))
            .orderBy("sent_ts"))


def hops_to_delivery(events: DataFrame, rel: DataFrame, before_ts: float | None) -> dict[str, Any]:
    """Table 1's "maximum hops to delivery": per broadcast sent before `before_ts` (every one when None), the
    largest `hops` of its `data_received` events (the overlay hops its last receiver's copy travelled); their
    mean over those broadcasts, the largest, and how many broadcasts."""
    got = (events.where(F.col("event") == "data_received")
           .select(_raw("origin", "int").alias("origin_id"), "seq", _raw("hops", "int").alias("hops"))
           .groupBy("origin_id", "seq").agg(F.max("hops").alias("max_hops")))
    sent = rel.select("origin_id", "seq", "sent_ts")
    if before_ts is not None:
        sent = sent.where(F.col("sent_ts") < before_ts)
    r = sent.join(got, ["origin_id", "seq"]).agg(F.avg("max_hops").alias("mean"), F.max("max_hops").alias("max"),
                                                 F.count("*").alias("broadcasts")).first()
    return {"max_hops_mean": r["mean"], "max_hops_max": r["max"], "broadcasts": r["broadcasts"]}


def crash_cycle(events: DataFrame, crash_ts: float) -> int | None:
    """The median over members of the last `cycle` each logged at or before `crash_ts`."""
    rows = (events.where((F.col("event") == "cycle") & (F.col("ts") <= crash_ts))
            .groupBy("node").agg(F.max(_raw("cycle", "long")).alias("cycle")).collect())
    cycles = [r["cycle"] for r in rows if r["cycle"] is not None]
    return int(statistics.median(cycles)) if cycles else None


def member_crash_cycles(events: DataFrame, crash_ts: float) -> dict[str, int]:
    """Each member's last `cycle` logged at or before `crash_ts` (member name -> cycle)."""
    rows = (events.where((F.col("event") == "cycle") & (F.col("ts") <= crash_ts))
            .groupBy("node").agg(F.max(_raw("cycle", "long")).alias("cycle")).collect())
    return {r["node"]: r["cycle"] for r in rows if r["cycle"] is not None}


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


def edges_at(events: DataFrame, members: DataFrame, crash: DataFrame, t: float, view: str) -> DataFrame:
    """Directed edges (src, dst) (member ids) of the overlay at time t (see the module docstring)."""
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
    dead = crash.where(F.col("crash_ts") <= t).select("member").distinct()
    started = life.where(F.col("started_ts").isNotNull() & (F.col("started_ts") <= t)).select("member")
    return (members.join(started, "member").join(dead, "member", "left_anti")
            .select(F.col("member_id").alias("v")))


def graph_metrics(edges: DataFrame, nodes: DataFrame, max_hops: int = 64) -> dict[str, Any]:
    """In-degree distribution, average clustering coefficient and average shortest path of a directed graph
    (edges: src, dst; nodes: v) in Spark (see the module docstring)."""
    e = edges.join(nodes.withColumnRenamed("v", "src"), "src").join(nodes.withColumnRenamed("v", "dst"), "dst") \
        .where(F.col("src") != F.col("dst")).select("src", "dst").distinct().cache()
    n = nodes.count()
    indeg = (nodes.join(e.groupBy(F.col("dst").alias("v")).agg(F.count("*").alias("indegree")), "v", "left")
             .fillna(0, ["indegree"]).groupBy("indegree").agg(F.count("*").alias("members"))
             .orderBy("indegree").collect())
    # undirected adjacency: (v, w) both ways
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
    # all-pairs BFS on the directed graph: frontier (s, v, d), visited pairs grow until nothing new
    # (each hop's result is checkpointed: the plan of a union grown over many hops would not fit the heap)
    visited = nodes.select(F.col("v").alias("s"), F.col("v").alias("v")).localCheckpoint()
    frontier = visited
    total, count = 0, 0
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
        "clustering": clustering,
        # a random graph of this many members and this mean undirected degree has clustering ~ degree / (n - 1):
        # the yardstick that separates a protocol's clustering from its group size (Table 1 at 50 vs 10 000)
        "undirected_degree_mean": (und.count() / n) if n else None,
        "shortest_path_mean": total / count if count else None,
        "reachable_pairs": count, "pairs": n * (n - 1),
    }
