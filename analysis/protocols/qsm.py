"""QSM's analysis plug-in (seed 004, §3's measurements; docs/qsm.md).

Definitions (times are unix seconds; protocol fields come from the events' `raw` JSON):

- **delivery per group**: for each data message (origin, seq) sent into group g (`data_sent.group_name`), the
  members of g other than the origin are expected to log its `data_received`; per (origin, group): messages,
  receipts expected, receipts logged, delivery ratio. (The generic delivery ratio counts every member, which is
  wrong for overlapping groups.)
- **throughput per sender and group**: data messages sent per second between the sender's first and last send
  into that group.
- **rate over time**: per sender, data messages sent per 1 s bin (the paper's Figure 17 samples) between its
  first and last full second of sending, and the `rate_changed` points (μ_snd); **variability**: the standard
  deviation of the 1 s samples (Figure 18), also relative to their mean.
- **control overhead**: the QSM messages every member sent (its own capture, direction out; a multicast datagram
  once, though it leaves by mc0 and the tree links), by type: packets and bytes (envelope + length); control = every type but DATA (retransmissions and forwards are overhead, as in
  Figures 10-11); fractions of packets and of bytes.
- **recovery**: `recovered` events (a packet that arrived by push, pull or the sender's retransmission):
  latency = arrival minus when the member first knew it was missing (a later packet arrived, or the token's
  cutoff passed it) — mean, median, p90, max per way; **recovery rate** = recovered receipts / all receipts.
- **ACK latency**: at each sender, per packet, the time from its multicast to the collective ACK that covers it
  (`ack_received`: latency_sum / acked); mean and max per sender and region.
- **token**: rounds completed per region and their duration (generation to home).
"""
from __future__ import annotations

import statistics
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from analysis.doc import Doc, Heading, Para, Table, fmt
from analysis.protocols import GENERIC_SWEEP_COLUMNS, MetricsContext, ProtocolAnalysis, ReportContext, register

ENVELOPE = 9


def raw(name: str, kind: str = "double") -> F.Column:
    return F.get_json_object(F.col("raw"), f"$.{name}").cast(kind)


def group_table(spark, params: dict[str, Any], members: list[tuple[int, str]]) -> DataFrame:
    """(group_name, member) for every group of the run's QSM section (members: all, ids or names)."""
    by_id = dict(members)
    names = {n for _, n in members}
    rows = []
    for g in params.get("groups") or []:
        spec = g.get("members", "all")
        ms = list(by_id.values()) if spec == "all" else [by_id.get(m) if isinstance(m, int) else m for m in spec]
        rows += [(g["name"], m) for m in ms if m in names]
    return spark.createDataFrame(rows, "group_name string, member string")


def delivery_per_group(events: DataFrame, groups: DataFrame, members: DataFrame) -> DataFrame:
    ids = members.select(F.col("member_id").alias("origin"), F.col("member").alias("origin_name"))
    sent = (events.where(F.col("event") == "data_sent")
            .select(F.col("node").alias("origin_name"), "seq", raw("group_name", "string").alias("group_name"))
            .join(ids, "origin_name"))
    expected = (sent.join(groups, "group_name").where(F.col("member") != F.col("origin_name")))
    got = (events.where(F.col("event") == "data_received")
           .select(F.col("node").alias("member"), "origin", "seq").distinct().withColumn("hit", F.lit(1)))
    per = expected.join(got, ["member", "origin", "seq"], "left")
    counts = sent.groupBy("origin_name", "group_name").agg(F.count("*").alias("messages"))
    return (per.groupBy("origin_name", "group_name")
            .agg(F.count("*").alias("expected"), F.count("hit").alias("received"))
            .join(counts, ["origin_name", "group_name"])
            .select(F.col("origin_name").alias("sender"), "group_name", "messages", "expected", "received",
                    (F.col("received") / F.col("expected")).alias("delivery_ratio"))
            .orderBy("sender", "group_name"))


def throughput(events: DataFrame) -> DataFrame:
    sent = events.where(F.col("event") == "data_sent").select("node", "ts", raw("group_name", "string")
                                                              .alias("group_name"))
    return (sent.groupBy(F.col("node").alias("sender"), "group_name")
            .agg(F.count("*").alias("messages"), F.min("ts").alias("first_ts"), F.max("ts").alias("last_ts"))
            .select("sender", "group_name", "messages",
                    F.when(F.col("last_ts") > F.col("first_ts"),
                           (F.col("messages") - 1) / (F.col("last_ts") - F.col("first_ts"))).alias("rate_per_s"))
            .orderBy("sender", "group_name"))


def rate_samples(events: DataFrame) -> DataFrame:
    """(sender, second, messages): data messages per whole second of each sender's sending span (the first and
    last, partial, seconds left out; seconds without a send count 0)."""
    sent = events.where(F.col("event") == "data_sent").select(F.col("node").alias("sender"), "t_s")
    span = sent.groupBy("sender").agg(F.floor(F.min("t_s")).cast("long").alias("a"),
                                      F.floor(F.max("t_s")).cast("long").alias("b"))
    grid = (span.where(F.col("b") - F.col("a") >= 2)
            .select("sender", F.explode(F.sequence(F.col("a") + 1, F.col("b") - 1)).alias("second")))
    counts = sent.groupBy("sender", F.floor("t_s").cast("long").alias("second")).agg(F.count("*").alias("messages"))
    return (grid.join(counts, ["sender", "second"], "left")
            .select("sender", "second", F.coalesce("messages", F.lit(0)).alias("messages"))
            .orderBy("sender", "second"))


def rate_variability(samples: DataFrame) -> DataFrame:
    return (samples.groupBy("sender")
            .agg(F.count("*").alias("seconds"), F.avg("messages").alias("mean_per_s"),
                 F.stddev_samp("messages").alias("std_per_s"))
            .withColumn("cv", F.col("std_per_s") / F.col("mean_per_s")).orderBy("sender"))


def rate_changes(events: DataFrame) -> DataFrame:
    return (events.where(F.col("event") == "rate_changed")
            .select(F.col("node").alias("sender"), "t_s", raw("rate").alias("rate"), raw("mu_rec").alias("mu_rec"),
                    raw("m", "long").alias("m"), raw("region", "string").alias("region"))
            .orderBy("sender", "t_s"))


def overhead(packets: DataFrame) -> DataFrame:
    """(type_name, packets, bytes): QSM messages every member sent (direction out). A multicast datagram leaves
    its sender on mc0 and again on each tree link the kernel forwards it on, all captured on `any`: it counts
    once per (sender node, group address, type, seq, length)."""
    out = packets.where((F.col("protocol_name") == "qsm") & (F.col("direction") == "out") & F.col("decoded"))
    mcast = (out.where(F.col("transport") == "mcast")
             .dropDuplicates(["node", "ip_dst", "type_name", "sender", "seq", "length"]))
    other = out.where(F.col("transport").isNull() | (F.col("transport") != "mcast"))
    return (mcast.unionByName(other)
            .groupBy("type_name").agg(F.count("*").alias("packets"), F.sum(F.col("length") + ENVELOPE)
                                      .alias("bytes"))
            .orderBy("type_name"))


def recovery(events: DataFrame) -> DataFrame:
    lat = raw("latency")
    return (events.where(F.col("event") == "recovered")
            .groupBy(raw("how", "string").alias("how"))
            .agg(F.count("*").alias("recovered"), F.avg(lat).alias("latency_mean_s"),
                 F.median(lat).alias("latency_median_s"), F.percentile(lat, 0.9).alias("latency_p90_s"),
                 F.max(lat).alias("latency_max_s"))
            .orderBy("how"))


def ack_latency(events: DataFrame) -> DataFrame:
    return (events.where(F.col("event") == "ack_received")
            .groupBy(F.col("node").alias("sender"), raw("region", "string").alias("region"))
            .agg(F.sum(raw("acked", "long")).alias("acked"), F.sum(raw("latency_sum")).alias("latency_sum"),
                 F.max(raw("latency_max")).alias("latency_max_s"), F.count("*").alias("acks"))
            .select("sender", "region", "acks", "acked", (F.col("latency_sum") / F.col("acked")).alias(
                "latency_mean_s"), "latency_max_s")
            .orderBy("sender", "region"))


def token_rounds(events: DataFrame) -> DataFrame:
    return (events.where(F.col("event") == "token_round")
            .groupBy(raw("region", "string").alias("region"))
            .agg(F.count("*").alias("rounds"), F.avg(raw("duration")).alias("duration_mean_s"),
                 F.max(raw("duration")).alias("duration_max_s"))
            .orderBy("region"))


def _weighted(rows: list[dict], value: str, weight: str) -> float | None:
    total = sum(r[weight] or 0 for r in rows)
    if not total:
        return None
    return sum((r[value] or 0) * (r[weight] or 0) for r in rows) / total


class Qsm(ProtocolAnalysis):
    name = "qsm"
    title = "QSM"
    timeline_events = ("data_received", "recovered", "token_round")
    compare_columns = ("qsm_delivery_ratio", "recovery_rate", "recovery_latency_mean_s", "ack_latency_mean_s",
                       "control_packets_fraction", "control_bytes_fraction_qsm")
    sweep_columns = GENERIC_SWEEP_COLUMNS

    def describe(self, run) -> str:
        p = run.params
        groups = ", ".join(g.get("name", "?") for g in p.get("groups") or [])
        return (f"qsm: groups {groups}; R = {p.get('partition_size', 5)}, token every "
                f"{p.get('token_interval_s', 1.0)} s, rate control {p.get('rate_control', True)}")

    def metrics(self, ctx: MetricsContext) -> dict[str, Any]:
        events, table = ctx.events, ctx.table
        members = [(r["member_id"], r["member"]) for r in ctx.members.collect()]
        groups = group_table(ctx.spark, ctx.run.params, members)
        d: dict[str, Any] = {}
        d["delivery"] = table("qsm_delivery_per_group", delivery_per_group(events, groups, ctx.members))
        d["throughput"] = table("qsm_throughput", throughput(events))
        samples = rate_samples(events).cache()
        d["rate_samples"] = table("qsm_rate_samples", samples)
        d["variability"] = table("qsm_rate_variability", rate_variability(samples))
        samples.unpersist()
        d["rate_changes"] = table("qsm_rate_changes", rate_changes(events))
        d["overhead"] = table("qsm_overhead_by_type", overhead(ctx.packets))
        d["recovery"] = table("qsm_recovery", recovery(events))
        d["receipts"] = events.where(F.col("event") == "data_received").count()
        d["ack"] = table("qsm_ack_latency", ack_latency(events))
        d["token"] = table("qsm_token_rounds", token_rounds(events))
        return d

    def summary(self, run, data: dict[str, Any]) -> dict[str, Any]:
        dl = data.get("delivery") or []
        exp = sum(r["expected"] for r in dl)
        rec = data.get("recovery") or []
        n_rec = sum(r["recovered"] for r in rec)
        ov = data.get("overhead") or []
        pk = sum(r["packets"] for r in ov)
        by = sum(r["bytes"] for r in ov)
        ctl = [r for r in ov if r["type_name"] != "DATA"]
        ack = data.get("ack") or []
        acked = sum(r["acked"] or 0 for r in ack)
        stds = [r["std_per_s"] for r in data.get("variability") or [] if r["std_per_s"] is not None]
        return {
            "qsm_delivery_ratio": sum(r["received"] for r in dl) / exp if exp else None,
            "qsm_messages": sum(r["messages"] for r in dl),
            "recovered": n_rec,
            "recovery_rate": n_rec / data["receipts"] if data.get("receipts") else None,
            "recovery_latency_mean_s": _weighted(rec, "latency_mean_s", "recovered"),
            "recovery_latency_max_s": max((r["latency_max_s"] for r in rec if r["latency_max_s"] is not None),
                                          default=None),
            "ack_latency_mean_s": sum(r["latency_mean_s"] * r["acked"] for r in ack if r["acked"]) / acked
            if acked else None,
            "ack_latency_max_s": max((r["latency_max_s"] for r in ack if r["latency_max_s"] is not None),
                                     default=None),
            "control_packets_fraction": sum(r["packets"] for r in ctl) / pk if pk else None,
            "control_bytes_fraction_qsm": sum(r["bytes"] for r in ctl) / by if by else None,
            "rate_std_per_s_mean": statistics.fmean(stds) if stds else None,
            "token_rounds": sum(r["rounds"] for r in data.get("token") or []),
        }

    def key_metrics(self, s: dict[str, Any]) -> list[list[Any]]:
        return [["QSM delivery ratio (per group)", s.get("qsm_delivery_ratio")],
                ["recovery rate", s.get("recovery_rate")],
                ["recovery latency mean (s)", s.get("recovery_latency_mean_s")],
                ["ACK latency mean (s)", s.get("ack_latency_mean_s")],
                ["control packets fraction", s.get("control_packets_fraction")],
                ["control bytes fraction", s.get("control_bytes_fraction_qsm")]]

    def report(self, doc: Doc, ctx: ReportContext) -> None:
        d = ctx.data
        doc.add(Heading(1, "Delivery per group"),
                Para("Each message is expected at the members of its group other than its sender."),
                Table(["sender", "group", "messages", "expected", "received", "ratio"],
                      [[r["sender"], r["group_name"], r["messages"], r["expected"], r["received"],
                        fmt(r["delivery_ratio"])] for r in d.get("delivery") or []]))
        doc.add(Heading(1, "Throughput and rate"),
                Table(["sender", "group", "messages", "msgs/s"],
                      [[r["sender"], r["group_name"], r["messages"], fmt(r["rate_per_s"])]
                       for r in d.get("throughput") or []]),
                Para("Rate samples per 1 s (Figures 17-18): mean, standard deviation and their ratio."),
                Table(["sender", "seconds", "mean/s", "std/s", "cv"],
                      [[r["sender"], r["seconds"], fmt(r["mean_per_s"]), fmt(r["std_per_s"]), fmt(r["cv"])]
                       for r in d.get("variability") or []]),
                Para(f"{len(d.get('rate_changes') or [])} rate changes (qsm_rate_changes.csv)."))
        doc.add(Heading(1, "Control overhead"),
                Table(["type", "packets", "bytes"], [[r["type_name"], r["packets"], r["bytes"]]
                                                     for r in d.get("overhead") or []]))
        doc.add(Heading(1, "Recovery and acknowledgement"),
                Table(["how", "recovered", "mean (s)", "median (s)", "p90 (s)", "max (s)"],
                      [[r["how"], r["recovered"], fmt(r["latency_mean_s"]), fmt(r["latency_median_s"]),
                        fmt(r["latency_p90_s"]), fmt(r["latency_max_s"])] for r in d.get("recovery") or []]),
                Table(["sender", "region", "ACKs", "packets acked", "ACK latency mean (s)", "max (s)"],
                      [[r["sender"], r["region"], r["acks"], r["acked"], fmt(r["latency_mean_s"]),
                        fmt(r["latency_max_s"])] for r in d.get("ack") or []]),
                Table(["region", "token rounds", "duration mean (s)", "max (s)"],
                      [[r["region"], r["rounds"], fmt(r["duration_mean_s"]), fmt(r["duration_max_s"])]
                       for r in d.get("token") or []]))


PLUGIN = register(Qsm())
