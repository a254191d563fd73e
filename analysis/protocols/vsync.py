"""vsync's analysis plug-in: the shared throughput, delivery and load measures (analysis/protocols/pbcast.py)
plus seed 001's own:

- **Gseq latency** at the sender (Table 2): `gseq_acked.latency_s` (Gseq Req to Gseq Ack) and
  `own_delivered.latency_s` (Gseq Req to the sender's own in-order delivery, Table 2's "latency at the sender").
- **view changes** (Figure 10b): per view, the leader's `view_change_decided` (duration from Prefreshview to the
  decision, acknowledgements, dropped members) and the members that installed it.
- **delivery waves** (Figure 13): per member, the lag of its in-order (Vsync) delivery of each gseq behind the
  leader's, and behind its own Pbcast arrival of that gseq (`pbcast_received`): mean, p90, max.
"""
from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from analysis.doc import Doc, Heading, Para, Table, fmt
from analysis.protocols import GENERIC_SWEEP_COLUMNS, MetricsContext, ProtocolAnalysis, ReportContext, register
from analysis.protocols.pbcast import common_key_metrics, common_metrics, common_report, common_summary, raw


def gseq_latency(events: DataFrame) -> DataFrame:
    """(event, messages, mean_s, median_s, p90_s, max_s) for gseq_acked and own_delivered."""
    x = raw("latency_s")
    return (events.where(F.col("event").isin("gseq_acked", "own_delivered"))
            .groupBy("event").agg(F.count("*").alias("messages"), F.avg(x).alias("mean_s"),
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
    compare_columns = ("throughput_unperturbed_per_s", "gseq_latency_mean_s", "view_change_mean_s", "dropped")
    sweep_columns = GENERIC_SWEEP_COLUMNS

    def describe(self, run) -> str:
        p = run.params
        return (f"vsync: k {p.get('k')}, sender buffer {p.get('sender_buffer')}, view period "
                f"{p.get('view_period_s')} s, pbcast round {p.get('round_s')} s, first phase {p.get('first_phase')}")

    def metrics(self, ctx: MetricsContext) -> dict[str, Any]:
        d = common_metrics(ctx)
        leader = ctx.members.where(F.col("member_id") == 0).select("member").first()
        d["leader"] = leader["member"] if leader else None
        d["gseq"] = ctx.table("gseq_latency", gseq_latency(ctx.events))
        d["views"] = ctx.table("view_changes", view_changes(ctx.events))
        d["waves"] = ctx.table("delivery_waves", delivery_waves(ctx.events, d["leader"]))
        d["dropped"] = [r.asDict() for r in ctx.events.where(F.col("event") == "dropped")
                        .select("node", raw("view", "long").alias("view"), "t_s").collect()]
        return d

    def summary(self, run, d: dict[str, Any]) -> dict[str, Any]:
        s = common_summary(d)
        g = {r["event"]: r for r in d["gseq"]}
        durations = [r["duration_s"] for r in d["views"] if r["duration_s"] is not None]
        s.update({
            "gseq_latency_mean_s": g.get("gseq_acked", {}).get("mean_s"),
            "gseq_latency_max_s": g.get("gseq_acked", {}).get("max_s"),
            "own_delivery_latency_mean_s": g.get("own_delivered", {}).get("mean_s"),
            "own_delivery_latency_max_s": g.get("own_delivered", {}).get("max_s"),
            "view_changes": len(durations),
            "view_change_mean_s": sum(durations) / len(durations) if durations else None,
            "dropped": sorted(r["node"] for r in d["dropped"]),
        })
        return s

    def key_metrics(self, s: dict[str, Any]) -> list[list[Any]]:
        return [*common_key_metrics(s),
                ["Gseq latency at the sender, mean / max (Req to Ack)",
                 f"{fmt(s.get('gseq_latency_mean_s'))} / {fmt(s.get('gseq_latency_max_s'))} s"],
                ["Req to own delivery, mean / max (Table 2)",
                 f"{fmt(s.get('own_delivery_latency_mean_s'))} / {fmt(s.get('own_delivery_latency_max_s'))} s"],
                ["view changes, mean duration", f"{s.get('view_changes')}, {fmt(s.get('view_change_mean_s'))} s"],
                ["members dropped", ", ".join(s.get("dropped") or []) or "none"]]

    def report(self, doc: Doc, ctx: ReportContext) -> None:
        common_report(doc, ctx)
        d = ctx.data
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
