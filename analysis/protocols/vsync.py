"""vsync's analysis plug-in: the measures it shares with pbcast and tradvsync (analysis/protocols/pbcast.py:
parameters, delivery distribution, Figure 1's throughput, the sender's numbers) plus seed 001's own, defined once in
`run_values` (pure over the run's files):

- **parameters**: `k`, `buffer` (`sender_buffer`), `ack_defer`, `ack_wait` (default `all`), as the spec states them.
- **latency at the sender** (Table 2), in ms over the multicasts that have one: `own_` = `own_delivered.latency_s`
  (Gseq Req to the sender's own in-order delivery: Table 2's "latency at the sender") mean, max, n, median and p99
  (nearest rank); `gseq_` = `gseq_acked.latency_s` (Gseq Req to Gseq Ack) mean and max.
- **view changes** (Figure 10b): `view_changes` (the leader's `view_change_decided` with a duration),
  `vc_mean_s` / `vc_max_s` (their `duration_s`: Prefreshview to the decision), `vc_install_mean_s` /
  `vc_install_max_s` (`view_installed.duration_s` at the leader: to its installing the Newview), `dropped` (the
  members named by `view_change_decided.dropped` and those that logged `dropped`) and `dropped_n`.

The Spark path keeps the report's tables: the Gseq latency per event, each view change, and the delivery waves
(Figure 13: per member, the lag of its in-order delivery of each gseq behind the leader's, and behind its own
Pbcast arrival of that gseq, `pbcast_received`: mean, p90, max).
"""
from __future__ import annotations

import math
import statistics
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from analysis.doc import Doc, Heading, Para, Table, fmt
from analysis.protocols import GENERIC_SWEEP_COLUMNS, MetricsContext, ProtocolAnalysis, ReportContext, register
from analysis.protocols.pbcast import common_key_metrics, common_metrics, common_report, raw
from analysis.protocols.pbcast_values import common_values, spec_section

if TYPE_CHECKING:
    from analysis.rundir import RunDir


# --- the run's numbers, pure (run_values) ----------------------------------------------------------------------

def _ms(xs: list[float]) -> tuple[float | None, float | None]:
    return (statistics.fmean(xs) * 1000, max(xs) * 1000) if xs else (None, None)


def _quantile_ms(xs: list[float], q: float) -> float | None:
    """The q-quantile (nearest rank) of latencies in seconds, in ms."""
    if not xs:
        return None
    ys = sorted(xs)
    return ys[min(len(ys) - 1, max(0, math.ceil(q * len(ys)) - 1))] * 1000


def vsync_values(run: RunDir) -> dict[str, Any]:
    """Figure 10's and Table 2's values (the module's docstring)."""
    names = {m.id: m.name for m in run.members}
    decided, installed, own, gack = [], [], [], []
    dropped: set[str] = set()
    for e in run.events:
        ev = e.get("event")
        if ev == "view_change_decided":
            if e.get("duration_s") is not None:
                decided.append(float(e["duration_s"]))
            dropped.update(names.get(int(i), f"id{i}") for i in e.get("dropped") or [])
        elif ev == "view_installed" and e.get("duration_s") is not None:
            installed.append(float(e["duration_s"]))
        elif ev == "dropped":
            dropped.add(e["node"])
        elif ev == "own_delivered" and e.get("latency_s") is not None:
            own.append(float(e["latency_s"]))
        elif ev == "gseq_acked" and e.get("latency_s") is not None:
            gack.append(float(e["latency_s"]))
    own_mean, own_max = _ms(own)
    g_mean, g_max = _ms(gack)
    return {"view_changes": len(decided), "vc_mean_s": statistics.fmean(decided) if decided else None,
            "vc_max_s": max(decided, default=None),
            "vc_install_mean_s": statistics.fmean(installed) if installed else None,
            "vc_install_max_s": max(installed, default=None), "dropped": sorted(dropped), "dropped_n": len(dropped),
            "own_mean_ms": own_mean, "own_max_ms": own_max, "own_n": len(own),
            "own_median_ms": _quantile_ms(own, 0.5), "own_p99_ms": _quantile_ms(own, 0.99),
            "gseq_mean_ms": g_mean, "gseq_max_ms": g_max}


# --- Spark: the report's tables ---------------------------------------------------------------------------------------

def gseq_latency(events: DataFrame) -> DataFrame:
    """(event, messages, mean_s, median_s, p90_s, max_s) for gseq_acked and own_delivered."""
    x = raw("latency_s")
    return (events.where(F.col("event").isin("gseq_acked", "own_delivered"))
            .groupBy("event").agg(F.count(x).alias("messages"), F.avg(x).alias("mean_s"),
                                  F.median(x).alias("median_s"), F.percentile(x, 0.9).alias("p90_s"),
                                  F.max(x).alias("max_s")).orderBy("event"))


def view_changes(events: DataFrame) -> DataFrame:
    """Per view: the leader's decision (duration, acks, dropped) and how many members installed it."""
    decided = (events.where(F.col("event") == "view_change_decided")
               .select(raw("view", "long").alias("view"), raw("duration_s").alias("duration_s"),
                       raw("acks", "long").alias("acks"), raw("members", "long").alias("members"),
                       F.get_json_object("raw", "$.dropped").alias("dropped")))
    installed = (events.where(F.col("event") == "view_installed")
                 .groupBy(raw("view", "long").alias("view")).agg(F.countDistinct("node").alias("installed_at")))
    return decided.join(installed, "view", "left").orderBy("view")


def delivery_waves(events: DataFrame, leader: str | None) -> DataFrame:
    """Per member: lag of its Vsync delivery behind the leader's, and behind its own Pbcast arrival."""
    vs = events.where(F.col("event") == "data_received").select("node", raw("gseq", "long").alias("gseq"),
                                                                 F.col("ts").alias("vs_ts"))
    pb = (events.where(F.col("event") == "pbcast_received")
          .select("node", raw("gseq", "long").alias("gseq"), F.col("ts").alias("pb_ts")))
    lead = vs.where(F.col("node") == F.lit(leader)).select("gseq", F.col("vs_ts").alias("lead_ts"))
    j = vs.join(lead, "gseq", "left").join(pb, ["node", "gseq"], "left")
    behind_leader = F.col("vs_ts") - F.col("lead_ts")
    behind_pbcast = F.col("vs_ts") - F.col("pb_ts")
    return (j.groupBy("node").agg(F.count("*").alias("deliveries"),
                                  F.avg(behind_leader).alias("lag_leader_mean_s"),
                                  F.percentile(behind_leader, 0.9).alias("lag_leader_p90_s"),
                                  F.max(behind_leader).alias("lag_leader_max_s"),
                                  F.avg(behind_pbcast).alias("lag_pbcast_mean_s"),
                                  F.max(behind_pbcast).alias("lag_pbcast_max_s"))
            .orderBy("node"))


class Vsync(ProtocolAnalysis):
    name = "vsync"
    title = "virtual synchrony over pbcast"
    timeline_events = ("data_received", "view_installed", "dropped")
    compare_columns = ("throughput_unperturbed_per_s", "own_mean_ms", "gseq_mean_ms", "vc_mean_s", "dropped_n")
    sweep_columns = GENERIC_SWEEP_COLUMNS

    def describe(self, run) -> str:
        p = run.params
        return (f"vsync: k {p.get('k')}, sender buffer {p.get('sender_buffer')}, view period "
                f"{p.get('view_period_s')} s, pbcast round {p.get('round_s')} s, first phase {p.get('first_phase')}")

    def run_values(self, run: RunDir) -> dict[str, Any]:
        sec = spec_section(run)
        return {**common_values(run), "k": sec.get("k"), "buffer": sec.get("sender_buffer"),
                "ack_defer": sec.get("ack_defer"), "ack_wait": sec.get("ack_wait", "all"), **vsync_values(run)}

    def metrics(self, ctx: MetricsContext) -> dict[str, Any]:
        d = common_metrics(ctx)
        leader = ctx.members.where(F.col("member_id") == 0).select("member").first()
        d["leader"] = leader["member"] if leader else None
        d["gseq"] = ctx.table("gseq_latency", gseq_latency(ctx.events))
        d["views"] = ctx.table("view_changes", view_changes(ctx.events))
        d["waves"] = ctx.table("delivery_waves", delivery_waves(ctx.events, d["leader"]))
        return d

    def key_metrics(self, s: dict[str, Any]) -> list[list[Any]]:
        return [*common_key_metrics(s),
                ["Gseq latency at the sender, mean / max (Req to Ack)",
                 f"{fmt(s.get('gseq_mean_ms'))} / {fmt(s.get('gseq_max_ms'))} ms"],
                ["Req to own delivery, mean / max (Table 2)",
                 f"{fmt(s.get('own_mean_ms'))} / {fmt(s.get('own_max_ms'))} ms"],
                ["view changes, mean duration", f"{s.get('view_changes')}, {fmt(s.get('vc_mean_s'))} s"],
                ["members dropped", ", ".join(s.get("dropped") or []) or "none"],
                ["send attempts refused (sender buffer full)", s.get("refused")]]

    def report(self, doc: Doc, ctx: ReportContext) -> None:
        common_report(doc, ctx)
        d = ctx.data
        doc.add(Heading(1, "Gseq latency at the sender"),
                Table(["event", "multicasts", "mean (s)", "median", "p90", "max"],
                      [[r["event"], r["messages"], r["mean_s"], r["median_s"], r["p90_s"], r["max_s"]]
                       for r in d["gseq"]]))
        doc.add(Heading(1, "View changes"),
                Table(["view", "duration (s)", "acks", "members", "dropped", "installed at"],
                      [[r["view"], r["duration_s"], r["acks"], r["members"], r["dropped"], r["installed_at"]]
                       for r in d["views"]]))
        doc.add(Heading(1, "Delivery waves (Figure 13)"),
                Para(f"Lag of each member's in-order delivery behind the leader ({d.get('leader')}) and behind "
                     "its own Pbcast arrival of the same gseq."),
                Table(["member", "deliveries", "behind leader: mean (s)", "p90", "max", "behind Pbcast: mean",
                       "max"],
                      [[r["node"], r["deliveries"], r["lag_leader_mean_s"], r["lag_leader_p90_s"],
                        r["lag_leader_max_s"], r["lag_pbcast_mean_s"], r["lag_pbcast_max_s"]] for r in d["waves"]]))


PLUGIN = register(Vsync())
