"""pbcast's analysis plug-in, and the transforms `vsync` and `tradvsync` share (seed 001's measurements).

Definitions (times are unix seconds; `data_received` is the delivery to the application in all three protocols:
pbcast on first arrival, tradvsync and vsync in order):

- **delivery distribution** (pbcast's bimodal histogram): for each data message sent, the fraction of the other
  members that logged its `data_received`; the histogram counts messages per tenth (0.0-0.1, ..., 0.9-<1.0, and
  exactly 1.0 on its own).
- **throughput at a member**: its deliveries per window. Figure 1's value is the mean over 80 successive 500 ms
  windows (the paper: "80 successive throughput samples, gathered during a 500 ms period"; we read each sample as
  one 500 ms window); we take the windows that start one second after the first `data_sent` (fewer than 80 when
  the workload is shorter) and end at the last `data_sent`. Also per second over the same span.
  *Unperturbed* members: neither a sender nor the target of a `perturb`, `pause` or `crash` action (read from the
  orchestrator's `action_applied` records); *perturbed*: the targets of `perturb`.
- **load by type**: per member, the decoded messages it sent and received per message type, per second of its
  lifetime (from its own capture; a datagram captured on several of its interfaces counts once).
"""
from __future__ import annotations

import statistics
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from analysis import figures
from analysis.doc import Doc, Figure, Heading, Para, Table, fmt
from analysis.protocols import GENERIC_SWEEP_COLUMNS, MetricsContext, ProtocolAnalysis, ReportContext, register

FIGURE1_WINDOW_S = 0.5
FIGURE1_SAMPLES = 80


def raw(name: str, kind: str = "double") -> F.Column:
    """A protocol-specific field of an event, from the record kept whole in `raw`."""
    return F.get_json_object(F.col("raw"), f"$.{name}").cast(kind)


def disturbed(events: DataFrame) -> DataFrame:
    """(member, action) for every member targeted by a perturb, pause or crash action."""
    return (events.where((F.col("event") == "action_applied") & F.col("action").isin("perturb", "pause", "crash"))
            .select(F.explode("targets").alias("member"), "action").distinct())


def delivery_fractions(events: DataFrame, members: DataFrame) -> DataFrame:
    """One row per data message sent: (origin, seq, receivers, fraction) over the other members."""
    n = members.count()
    ids = members.select(F.col("member").alias("node"), F.col("member_id").alias("origin_id"))
    sent = (events.where(F.col("event") == "data_sent").join(ids, "node")
            .select(F.col("origin_id").alias("origin"), "seq").distinct())
    got = (events.where(F.col("event") == "data_received")
           .groupBy("origin", "seq").agg(F.countDistinct("node").alias("receivers")))
    return (sent.join(got, ["origin", "seq"], "left")
            .select("origin", "seq", F.coalesce("receivers", F.lit(0)).alias("receivers"),
                    (F.coalesce("receivers", F.lit(0)) / F.lit(max(1, n - 1))).alias("fraction"))
            .orderBy("origin", "seq"))


def delivery_histogram(fractions: DataFrame) -> DataFrame:
    """(bin, messages): bins 0.0, 0.1, ..., 0.9 are [b, b + 0.1); bin 1.0 is exactly everyone."""
    b = F.when(F.col("fraction") >= 1.0, F.lit(1.0)).otherwise(F.floor(F.col("fraction") * 10) / 10)
    return fractions.groupBy(b.alias("bin")).agg(F.count("*").alias("messages")).orderBy("bin")


def workload_span(events: DataFrame) -> tuple[float | None, float | None]:
    row = events.where(F.col("event") == "data_sent").agg(F.min("ts").alias("a"), F.max("ts").alias("b")).first()
    return (row["a"], row["b"]) if row and row["a"] is not None else (None, None)


def throughput(events: DataFrame, start: float, stop: float, window_s: float) -> DataFrame:
    """(node, window, deliveries, rate_per_s) for every member that delivered something, every window of
    `window_s` in [start, stop) (windows without deliveries count as 0)."""
    nwin = max(0, int((stop - start) // window_s))
    if nwin == 0:
        return events.limit(0).select("node", F.lit(0).alias("window"), F.lit(0).alias("deliveries"),
                                      F.lit(0.0).alias("rate_per_s"))
    got = (events.where((F.col("event") == "data_received") & (F.col("ts") >= start)
                        & (F.col("ts") < start + nwin * window_s))
           .select("node", F.floor((F.col("ts") - start) / window_s).cast("int").alias("window"))
           .groupBy("node", "window").agg(F.count("*").alias("deliveries")))
    nodes = events.where(F.col("event") == "node_started").select("node").distinct()
    grid = nodes.crossJoin(events.sparkSession.range(nwin).select(F.col("id").cast("int").alias("window")))
    return (grid.join(got, ["node", "window"], "left")
            .select("node", "window", F.coalesce("deliveries", F.lit(0)).alias("deliveries"),
                    (F.coalesce("deliveries", F.lit(0)) / F.lit(window_s)).alias("rate_per_s"))
            .orderBy("node", "window"))


def throughput_summary(windows: DataFrame) -> DataFrame:
    """Per node: windows, mean, min, max and standard deviation of the rate."""
    r = F.col("rate_per_s")
    return (windows.groupBy("node").agg(F.count("*").alias("windows"), F.avg(r).alias("mean_per_s"),
                                        F.min(r).alias("min_per_s"), F.max(r).alias("max_per_s"),
                                        F.stddev_samp(r).alias("std_per_s")).orderBy("node"))


def load_by_type(packets: DataFrame, life: DataFrame) -> DataFrame:
    """(node, type_name, sent, received, sent_per_s, received_per_s) from each member's own capture. A datagram
    captured more than once at a node (a multicast leaves its sender by every tree link; a router sees the copy it
    receives and those it forwards; `any` and a named interface) counts once: copies are the same (direction,
    addresses, ports, type, sender, seq, round, length) within the same 50 ms."""
    key = ["node", "direction", "ip_src", "ip_dst", "src_port", "dst_port", "type_name", "sender", "seq", "round",
           "length", "bucket"]
    dec = (packets.where(F.col("decoded")).withColumn("bucket", F.floor(F.col("ts") / 0.05))
           .dropDuplicates(key))
    agg = (dec.groupBy("node", "type_name")
           .agg(F.count(F.when(F.col("direction") == "out", 1)).alias("sent"),
                F.count(F.when(F.col("direction") == "in", 1)).alias("received")))
    lifetime = (F.col("end_ts") - F.col("started_ts")).alias("lifetime_s")
    return (agg.join(life.select(F.col("member").alias("node"), lifetime), "node", "left")
            .select("node", "type_name", "sent", "received", (F.col("sent") / F.col("lifetime_s")).alias("sent_per_s"),
                    (F.col("received") / F.col("lifetime_s")).alias("received_per_s"))
            .orderBy("node", "type_name"))


def common_metrics(ctx: MetricsContext) -> dict[str, Any]:
    """What all three protocols report: delivery distribution, throughput (Figure 1's and per second) at every
    member with the unperturbed / perturbed split, and the load by type."""
    events, table = ctx.events, ctx.table
    d: dict[str, Any] = {}
    fr = delivery_fractions(events, ctx.members).cache()
    d["fractions"] = table("delivery_fractions", fr)
    d["histogram"] = table("delivery_histogram", delivery_histogram(fr))
    fr.unpersist()
    d["disturbed"] = [r.asDict() for r in disturbed(events).collect()]
    senders = {r["member"] for r in ctx.members.where(F.col("sender_index").isNotNull()).collect()}
    d["senders"] = sorted(senders)
    first, last = workload_span(events)
    d["span"] = [first, last]
    d["fig1"], d["per_s"] = [], []
    if first is not None:
        start = first + 1.0
        stop = min(last, start + FIGURE1_SAMPLES * FIGURE1_WINDOW_S)
        d["fig1"] = table("throughput_fig1", throughput_summary(throughput(events, start, stop, FIGURE1_WINDOW_S)))
        d["per_s"] = table("throughput_per_s", throughput_summary(throughput(events, start, last, 1.0)))
    d["load"] = table("load_by_type", load_by_type(ctx.packets, ctx.life))
    return d


def common_summary(d: dict[str, Any]) -> dict[str, Any]:
    bad = {r["member"] for r in d["disturbed"]}
    perturbed = {r["member"] for r in d["disturbed"] if r["action"] == "perturb"}
    calm = [r for r in d["fig1"] if r["node"] not in bad and r["node"] not in d["senders"]]
    pert = [r for r in d["fig1"] if r["node"] in perturbed]
    calm_s = [r for r in d["per_s"] if r["node"] not in bad and r["node"] not in d["senders"]]
    hist = {float(r["bin"]): r["messages"] for r in d["histogram"]}
    total = sum(hist.values())
    return {
        "throughput_unperturbed_per_s": statistics.median(r["mean_per_s"] for r in calm) if calm else None,
        "throughput_unperturbed_min_per_s": min(r["mean_per_s"] for r in calm) if calm else None,
        "throughput_unperturbed_windows": calm[0]["windows"] if calm else 0,
        "throughput_perturbed_per_s": statistics.median(r["mean_per_s"] for r in pert) if pert else None,
        "throughput_unperturbed_1s_per_s": statistics.median(r["mean_per_s"] for r in calm_s) if calm_s else None,
        "unperturbed_members": sorted(r["node"] for r in calm),
        "perturbed_members": sorted(perturbed),
        "messages": total,
        "delivered_to_all_fraction": hist.get(1.0, 0) / total if total else None,
        "delivered_to_few_fraction": sum(v for b, v in hist.items() if b < 0.2) / total if total else None,
        "delivery_histogram": {f"{b:.1f}": v for b, v in sorted(hist.items())},
    }


def common_key_metrics(s: dict[str, Any]) -> list[list[Any]]:
    return [
        ["throughput at unperturbed members, Figure 1's (median of members; min)",
         f"{fmt(s.get('throughput_unperturbed_per_s'))} msgs/s (min {fmt(s.get('throughput_unperturbed_min_per_s'))}"
         f"; {s.get('throughput_unperturbed_windows')} windows of 500 ms)"],
        ["throughput at perturbed members", s.get("throughput_perturbed_per_s")],
        ["messages delivered to every member", s.get("delivered_to_all_fraction")],
    ]


def common_report(doc: Doc, ctx: ReportContext) -> None:
    d, s = ctx.data, ctx.summary
    doc.add(Heading(1, "Delivery distribution"),
            Para("Per data message, the fraction of the other members that delivered it (pbcast's bimodal "
                 "histogram: most messages reach almost everyone or almost no one)."),
            Table(["fraction of members", "messages"], [[f"{float(r['bin']):.1f}", r["messages"]]
                                                       for r in d["histogram"]]))
    if d["histogram"]:
        doc.add(Figure(figures.delivery_histogram(d["histogram"], ctx.figdir / "delivery_histogram.png"),
                       "Messages per delivered fraction (log scale)"))
    doc.add(Heading(1, "Throughput per member"),
            Para(f"Deliveries per second, mean over successive 500 ms windows (Figure 1's measure) and over 1 s "
                 f"windows. Unperturbed: {', '.join(s.get('unperturbed_members') or []) or 'none'}; perturbed: "
                 f"{', '.join(s.get('perturbed_members') or []) or 'none'}."),
            Table(["member", "500 ms windows", "mean (msgs/s)", "min", "max", "std", "1 s mean"],
                  [[r["node"], r["windows"], r["mean_per_s"], r["min_per_s"], r["max_per_s"], r["std_per_s"],
                    next((x["mean_per_s"] for x in d["per_s"] if x["node"] == r["node"]), None)]
                   for r in d["fig1"]]))
    if d["fig1"]:
        doc.add(Figure(figures.throughput_per_member(d["fig1"], s.get("unperturbed_members") or [],
                                                     s.get("perturbed_members") or [],
                                                     ctx.figdir / "throughput_per_member.png"),
                       "Throughput per member (Figure 1's 500 ms windows; bars: the windows' min-max)"))
    doc.add(Heading(1, "Message load by type"),
            Table(["member", "type", "sent", "received", "sent/s", "received/s"],
                  [[r["node"], r["type_name"], r["sent"], r["received"], r["sent_per_s"], r["received_per_s"]]
                   for r in d["load"]]))


class Pbcast(ProtocolAnalysis):
    name = "pbcast"
    title = "pbcast (Bimodal Multicast)"
    timeline_events = ("data_received", "gc")
    compare_columns = ("throughput_unperturbed_per_s", "delivered_to_all_fraction", "repair_fraction")
    sweep_columns = GENERIC_SWEEP_COLUMNS

    def describe(self, run) -> str:
        p = run.params
        return (f"pbcast: round {p.get('round_s')} s, fanout {p.get('fanout')}, C {p.get('gc_c')}, "
                f"{p.get('mode')}, first phase {p.get('first_phase')}")

    def metrics(self, ctx: MetricsContext) -> dict[str, Any]:
        d = common_metrics(ctx)
        rec = ctx.events.where(F.col("event") == "data_received")
        d["phases"] = ctx.table("arrival_phase", rec.groupBy(raw("phase", "string").alias("phase"))
                                .agg(F.count("*").alias("deliveries"), F.avg(raw("round")).alias("round_mean"),
                                     F.max(raw("round")).alias("round_max")))
        return d

    def summary(self, run, d: dict[str, Any]) -> dict[str, Any]:
        s = common_summary(d)
        by = {r["phase"]: r["deliveries"] for r in d["phases"]}
        total = sum(by.values())
        s["repair_fraction"] = by.get("repair", 0) / total if total else None
        return s

    def key_metrics(self, s: dict[str, Any]) -> list[list[Any]]:
        return [*common_key_metrics(s), ["deliveries that came from repair", s.get("repair_fraction")]]

    def report(self, doc: Doc, ctx: ReportContext) -> None:
        common_report(doc, ctx)
        doc.add(Heading(1, "First phase and repair"),
                Table(["phase", "deliveries", "round of arrival, mean", "max"],
                      [[r["phase"], r["deliveries"], r["round_mean"], r["round_max"]] for r in ctx.data["phases"]]))


PLUGIN = register(Pbcast())
