"""pbcast's analysis plug-in, and the measures `vsync` and `tradvsync` share (seed 001's measurements).

Every per-run number is defined here once, pure over the run's files (`run_values`; the Spark path keeps only the
report's tables and what needs the packets). Times are virtual unix seconds; `data_received` is the delivery to the
application in all three protocols (pbcast on first arrival, tradvsync and vsync in order).

- **parameters** (`spec_params`): the experiment's as its spec states them: `protocol`, `members` (the configured
  group), `offered_per_s` (`workload.rate_per_s`), `loss` (`links.loss`), `packing` (`process` or `packs of N`,
  the manifest's decision), `p` (the first `perturb` action's probability; 0 without one), `crash_fraction` (the
  first `crash` action's `fraction`); each plug-in adds its protocol's (pbcast: `phase`, `gc_c`).
- **delivery fraction** of a data message: of the members alive at its send (started by it, not crashed at or
  before it, not its origin: analysis.protocols.event_delivery's definition, the generic values'), the fraction
  that logged its `data_received`. `delivery_histogram` counts messages per tenth ("0.0" = [0, 0.1), ...,
  "0.9" = [0.9, 1.0), "1.0" = exactly everyone); `delivered_to_all_fraction` and `delivered_to_few_fraction`
  (< 0.2) are shares of the messages.
- **throughput at a member** (Figure 1): its deliveries per window. Figure 1's value is the mean over successive
  500 ms windows (the paper: "80 successive throughput samples, gathered during a 500 ms period"; each sample one
  window), from one second after the first `data_sent` to the last (at most 80 windows); also per 1 s window to
  the last send. *Unperturbed* members: neither a sender nor the target of a `perturb`, `pause` or `crash`
  action (the orchestrator's `action_applied`); *perturbed*: the targets of `perturb`. The run's values are
  medians over those members (`throughput_unperturbed_per_s`, `..._1s_per_s`, `throughput_perturbed_per_s`).
  The `fig1_` values set apart, at every p, the member the experiment perturbs (the spec's `perturb` targets; at
  p = 0 topologies/pbcast-fig1.yaml has no such action and its target is `FIGURE1_TARGET`), so that every p of
  Figure 1 averages over the same members.
- **the sender**: `sent_per_s` (its `data_sent` per second over Figure 1's windows), `refused` (the `attempts`
  of `send_blocked` events), `refused_counter` (the senders' `send_blocked` counters at `node_stopped`),
  `sender_pkts_per_msg` (the senders' runtime packets in + out at `node_stopped`, per data message sent).
- **pbcast** (`pbcast_values`; Figure 4, the bimodal histogram): see `overhead_values`, `bimodal_values`,
  `first_phase`.
- **load by type** (Spark, the report's table): per member, the decoded messages it sent and received per type,
  per second of its lifetime (its own capture; a datagram captured on several of its interfaces counts once).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from analysis import figures
from analysis.doc import Doc, Figure, Heading, Para, Table, fmt
from analysis.protocols import GENERIC_SWEEP_COLUMNS, MetricsContext, ProtocolAnalysis, ReportContext, register
from analysis.protocols.pbcast_values import FIGURE1_SAMPLES, FIGURE1_WINDOW_S, pbcast_values

if TYPE_CHECKING:
    from analysis.rundir import RunDir

# --- Spark: the report's tables ---------------------------------------------------------------------------------------

def raw(name: str, kind: str = "double") -> F.Column:
    """A protocol-specific field of an event, from the record kept whole in `raw`."""
    return F.get_json_object(F.col("raw"), f"$.{name}").cast(kind)


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
    """The report's per-member tables all three protocols share: throughput per member (Figure 1's 500 ms windows
    and 1 s windows; the same spans as `throughput_values`) and the load by type."""
    events, table = ctx.events, ctx.table
    d: dict[str, Any] = {"fig1": [], "per_s": []}
    first, last = workload_span(events)
    if first is not None:
        start = first + 1.0
        stop = min(last, start + FIGURE1_SAMPLES * FIGURE1_WINDOW_S)
        d["fig1"] = table("throughput_fig1", throughput_summary(throughput(events, start, stop, FIGURE1_WINDOW_S)))
        d["per_s"] = table("throughput_per_s", throughput_summary(throughput(events, start, last, 1.0)))
    d["load"] = table("load_by_type", load_by_type(ctx.packets, ctx.life))
    return d


def common_key_metrics(s: dict[str, Any]) -> list[list[Any]]:
    return [
        ["throughput at unperturbed members, Figure 1's (median of members; min)",
         f"{fmt(s.get('throughput_unperturbed_per_s'))} msgs/s (min {fmt(s.get('throughput_unperturbed_min_per_s'))}"
         f"; {s.get('throughput_unperturbed_windows')} windows of 500 ms)"],
        ["throughput at perturbed members", s.get("throughput_perturbed_per_s")],
        ["messages delivered to every member alive at their send", s.get("delivered_to_all_fraction")],
    ]


def common_report(doc: Doc, ctx: ReportContext) -> None:
    d, s = ctx.data, ctx.summary
    hist = [{"bin": float(b), "messages": n} for b, n in (s.get("delivery_histogram") or {}).items()]
    doc.add(Heading(1, "Delivery distribution"),
            Para("Per data message, the fraction of the members alive at its send (started, not crashed, not its "
                 "origin) that delivered it (pbcast's bimodal histogram: most messages reach almost everyone or "
                 "almost no one)."),
            Table(["fraction of members", "messages"], [[f"{r['bin']:.1f}", r["messages"]] for r in hist]))
    if hist:
        doc.add(Figure(figures.delivery_histogram(hist, ctx.figdir / "delivery_histogram.png"),
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

    def run_values(self, run: RunDir) -> dict[str, Any]:
        return pbcast_values(run)

    def metrics(self, ctx: MetricsContext) -> dict[str, Any]:
        d = common_metrics(ctx)
        rec = ctx.events.where(F.col("event") == "data_received")
        d["phases"] = ctx.table("arrival_phase", rec.groupBy(raw("phase", "string").alias("phase"))
                                .agg(F.count("*").alias("deliveries"), F.avg(raw("round")).alias("round_mean"),
                                     F.max(raw("round")).alias("round_max")))
        return d

    def key_metrics(self, s: dict[str, Any]) -> list[list[Any]]:
        return [*common_key_metrics(s), ["deliveries that came from repair", s.get("repair_fraction")],
                ["overhead messages per member per multicast (digests, solicitations, repairs)", s.get("overhead")]]

    def report(self, doc: Doc, ctx: ReportContext) -> None:
        common_report(doc, ctx)
        doc.add(Heading(1, "First phase and repair"),
                Table(["phase", "deliveries", "round of arrival, mean", "max"],
                      [[r["phase"], r["deliveries"], r["round_mean"], r["round_max"]] for r in ctx.data["phases"]]))


PLUGIN = register(Pbcast())
