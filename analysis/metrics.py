"""The metrics every protocol gets (its own are in its plug-in, analysis/protocols/<name>.py), as pure DataFrame
transforms.

Inputs are the PACKETS and EVENTS tables (analysis.schemas), the MEMBERS table and two derived tables:
`crashes` (member, crash_ts) and `lifetimes` (member, started_ts, crashed_ts, end_ts). Times are unix seconds.
Definitions:

- **delivery** of data message (origin, seq), from the generic data events every protocol logs (`data_sent`
  at the origin, `data_received` at each receiver, first arrival): the members counted are the members other
  than the origin that had started by the send and had not crashed at or before it (the members alive at the
  send); the **delivery ratio** is the fraction of them with a `data_received` of (origin, seq), and each such
  receipt's **latency** is its ts minus the send's. A member that crashes after the send counts; if it never
  received the message, the ratio shows it.
- **traffic by message type**: decoded messages each member sent (its own capture, direction out), per protocol
  and type: messages, bytes (the message size: envelope + the rest, what the UDP payload or the TCP stream
  carries) and both per member-second (over the lifetimes of the members with a capture: first
  `node_started` to the crash, else the last `node_stopped`, else the run's end). A multicast datagram counts
  once, at its sender; a TCP message once per connection it was sent on.
- **control overhead**: messages and bytes of the types that carry no application data (wire `Layout.data`
  false) over all messages sent.
- **throughput timeline**: per time bin, data and control messages and bytes sent by all members.
- packet counts per capture (frames, as tshark counts them) and undecodable packets per reason.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from gossipnode import wire

from analysis.rundir import Member
from analysis.schemas import MEMBERS

LATENCY_QUANTILES = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 1.0)


def members_frame(spark: SparkSession, members: Sequence[Member]) -> DataFrame:
    return spark.createDataFrame([(m.id, m.name, m.sender_index, m.local_group) for m in members], MEMBERS)


def crashes(events: DataFrame, t0: float) -> DataFrame:
    """The orchestrator's applied crash operations: (member, crash_ts) with crash_ts = t0 + actual_s."""
    return (events.where((F.col("event") == "action_applied") & (F.col("op") == "crash"))
            .select(F.explode("targets").alias("member"), (F.lit(t0) + F.col("actual_s")).alias("crash_ts")))


def lifetimes(events: DataFrame, members: DataFrame, crash: DataFrame, run_end: float | None) -> DataFrame:
    """(member, started_ts, crashed_ts, end_ts) for every member; started_ts is null if it never started."""
    life = (events.where(F.col("event").isin("node_started", "node_stopped"))
            .groupBy(F.col("node").alias("member"))
            .agg(F.min(F.when(F.col("event") == "node_started", F.col("ts"))).alias("started_ts"),
                 F.max(F.when(F.col("event") == "node_stopped", F.col("ts"))).alias("stopped_ts")))
    first_crash = crash.groupBy("member").agg(F.min("crash_ts").alias("crashed_ts"))
    return (members.select("member")
            .join(life, "member", "left").join(first_crash, "member", "left")
            .select("member", "started_ts", "crashed_ts",
                    F.coalesce("crashed_ts", "stopped_ts", F.lit(run_end)).alias("end_ts")))


def msg_bytes() -> F.Column:
    """A decoded row's message size: the envelope plus the `length` bytes after it."""
    return F.col("length") + F.lit(wire.ENVELOPE_SIZE)


def is_data(data_types: dict[str, Iterable[str]] | None = None) -> F.Column:
    """True for decoded rows whose (protocol, type) carries application data (wire `Layout.data`)."""
    data_types = wire.data_types() if data_types is None else data_types
    cond = F.lit(False)
    for proto, names in sorted(data_types.items()):
        if names:
            cond = cond | ((F.col("protocol_name") == proto) & F.col("type_name").isin(*sorted(names)))
    return cond


# --- delivery -------------------------------------------------------------------------------------------------

def receipts(events: DataFrame, members: DataFrame, life: DataFrame) -> DataFrame:
    """One row per (data message, counted receiver): (origin, origin_id, seq, sent_ts, receiver, received_ts,
    latency_s); received_ts and latency_s are null when the receiver never logged the message."""
    ids = members.select(F.col("member").alias("node"), F.col("member_id"))
    sent = (events.where(F.col("event") == "data_sent").join(ids, "node")
            .groupBy(F.col("node").alias("origin"), F.col("member_id").alias("origin_id"), "seq")
            .agg(F.min("ts").alias("sent_ts")))
    got = (events.where(F.col("event") == "data_received")
           .groupBy(F.col("node").alias("receiver"), F.col("origin").alias("origin_id"), "seq")
           .agg(F.min("ts").alias("received_ts")))
    counted = (sent.crossJoin(life.select(F.col("member").alias("receiver"), "started_ts", "crashed_ts"))
               .where((F.col("receiver") != F.col("origin")) & (F.col("started_ts") <= F.col("sent_ts"))
                      & (F.col("crashed_ts").isNull() | (F.col("crashed_ts") > F.col("sent_ts")))))
    return (counted.join(got, ["receiver", "origin_id", "seq"], "left")
            .select("origin", "origin_id", "seq", "sent_ts", "receiver", "received_ts",
                    (F.col("received_ts") - F.col("sent_ts")).alias("latency_s")))


def delivery(rec: DataFrame) -> DataFrame:
    """One row per data message: (origin, origin_id, seq, sent_ts, members, received, delivery_ratio,
    latency_mean_s, latency_max_s, complete_ts); complete_ts: the last receipt, when every counted member
    received it."""
    return (rec.groupBy("origin", "origin_id", "seq", "sent_ts")
            .agg(F.count("*").alias("members"), F.count("received_ts").alias("received"),
                 F.avg("latency_s").alias("latency_mean_s"), F.max("latency_s").alias("latency_max_s"),
                 F.max("received_ts").alias("last_ts"))
            .select("origin", "origin_id", "seq", "sent_ts", "members", "received",
                    (F.col("received") / F.col("members")).alias("delivery_ratio"),
                    "latency_mean_s", "latency_max_s",
                    F.when(F.col("received") == F.col("members"), F.col("last_ts")).alias("complete_ts"))
            .orderBy("origin_id", "seq"))


def delivery_summary(per_message: DataFrame, rec: DataFrame) -> DataFrame:
    """One row: messages, messages every counted member received, the delivery ratio's mean and min, receipts
    expected and logged, and the latency's mean, median, p90, p99 and max over all receipts."""
    x = F.col("latency_s")
    msgs = per_message.agg(F.count("*").alias("messages"),
                           F.count(F.when(F.col("received") == F.col("members"), 1)).alias("complete"),
                           F.avg("delivery_ratio").alias("delivery_ratio_mean"),
                           F.min("delivery_ratio").alias("delivery_ratio_min"))
    lat = rec.agg(F.count("*").alias("receipts_expected"), F.count(x).alias("receipts"),
                  F.avg(x).alias("latency_mean_s"), F.median(x).alias("latency_median_s"),
                  F.percentile(x, 0.9).alias("latency_p90_s"), F.percentile(x, 0.99).alias("latency_p99_s"),
                  F.max(x).alias("latency_max_s"))
    return msgs.crossJoin(lat)


def latency_quantiles(rec: DataFrame, qs: Sequence[float] = LATENCY_QUANTILES) -> DataFrame:
    """The latency distribution over all receipts: (quantile, latency_s), exact (linear interpolation)."""
    row = rec.agg(F.percentile("latency_s", list(qs)).alias("v"))
    return row.select(F.posexplode("v").alias("i", "latency_s")).select(
        F.element_at(F.array(*[F.lit(float(q)) for q in qs]), F.col("i") + 1).alias("quantile"), "latency_s")


# --- traffic --------------------------------------------------------------------------------------------------

def traffic_by_type(packets: DataFrame) -> DataFrame:
    """(node, direction, type_name, msgs, bytes, ip_bytes) over decoded messages; bytes are message bytes;
    ip_bytes counts each frame's IP length once (at its first message)."""
    return (packets.where(F.col("decoded"))
            .groupBy("node", "direction", "type_name")
            .agg(F.count("*").alias("msgs"), F.sum(msg_bytes()).alias("bytes"),
                 F.sum(F.when(F.col("msg_index") == 0, F.col("ip_len"))).alias("ip_bytes"))
            .orderBy("node", "direction", "type_name"))


def member_seconds(packets: DataFrame, life: DataFrame) -> DataFrame:
    """One row: Σ lifetime (s) of the members that have a capture."""
    captured = packets.select(F.col("node").alias("member")).distinct()
    return (life.join(captured, "member")
            .agg(F.sum(F.col("end_ts") - F.col("started_ts")).alias("member_s")))


def traffic_by_message_type(packets: DataFrame, life: DataFrame,
                            data_types: dict[str, Iterable[str]] | None = None) -> DataFrame:
    """(protocol_name, type_name, data, messages, bytes, msgs_per_member_s, bytes_per_member_s): decoded
    messages the members sent (direction out), per member-second of the captured members' lifetimes."""
    sent = (packets.where((F.col("direction") == "out") & F.col("decoded"))
            .groupBy("protocol_name", "type_name")
            .agg(F.first(is_data(data_types)).alias("data"), F.count("*").alias("messages"),
                 F.sum(msg_bytes()).alias("bytes")))
    return (sent.crossJoin(member_seconds(packets, life))
            .select("protocol_name", "type_name", "data", "messages", "bytes",
                    (F.col("messages") / F.col("member_s")).alias("msgs_per_member_s"),
                    (F.col("bytes") / F.col("member_s")).alias("bytes_per_member_s"))
            .orderBy("protocol_name", "type_name"))


def control_overhead(by_type: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """From traffic_by_message_type's rows: messages and bytes sent, the control (non-data) share of each."""
    msgs = sum(r["messages"] for r in by_type)
    size = sum(r["bytes"] or 0 for r in by_type)
    cmsgs = sum(r["messages"] for r in by_type if not r["data"])
    cbytes = sum(r["bytes"] or 0 for r in by_type if not r["data"])
    return {"messages": msgs, "bytes": size, "control_messages": cmsgs, "control_bytes": cbytes,
            "control_msgs_fraction": cmsgs / msgs if msgs else None,
            "control_bytes_fraction": cbytes / size if size else None}


def throughput_timeseries(packets: DataFrame, bin_s: float,
                          data_types: dict[str, Iterable[str]] | None = None) -> DataFrame:
    """(t_bin_s, data, msgs, bytes): decoded messages all members sent per time bin, data and control apart."""
    t_bin = (F.floor(F.col("t_s") / bin_s) * bin_s).alias("t_bin_s")
    return (packets.where((F.col("direction") == "out") & F.col("decoded"))
            .groupBy(t_bin, is_data(data_types).alias("data"))
            .agg(F.count("*").alias("msgs"), F.sum(msg_bytes()).alias("bytes"))
            .orderBy("t_bin_s", "data"))


def traffic_timeseries(packets: DataFrame, bin_s: float) -> DataFrame:
    """(node, t_bin_s, msgs, bytes): decoded messages each node sent per time bin (t_bin_s = bin start)."""
    t_bin = (F.floor(F.col("t_s") / bin_s) * bin_s).alias("t_bin_s")
    return (packets.where((F.col("direction") == "out") & F.col("decoded"))
            .groupBy("node", t_bin).agg(F.count("*").alias("msgs"), F.sum(msg_bytes()).alias("bytes"))
            .orderBy("node", "t_bin_s"))


def event_timeseries(events: DataFrame, names: Sequence[str], bin_s: float) -> DataFrame:
    """(event, t_bin_s, count) for the given event names, over all members."""
    t_bin = (F.floor(F.col("t_s") / bin_s) * bin_s).alias("t_bin_s")
    return (events.where(F.col("event").isin(*names))
            .groupBy("event", t_bin).agg(F.count("*").alias("count"))
            .orderBy("event", "t_bin_s"))


# --- captures -------------------------------------------------------------------------------------------------

def packet_counts(packets: DataFrame) -> DataFrame:
    """Per pcap: (node, interface, file, packets, bytes, decoded, undecodable); packets and bytes count frames
    (tshark's frame count and frame.len), decoded counts messages, undecodable the rows that are not."""
    frame = F.col("msg_index") == 0
    return (packets.groupBy("node", "interface", "file")
            .agg(F.count(F.when(frame, 1)).alias("packets"), F.sum(F.when(frame, F.col("frame_len"))).alias("bytes"),
                 F.count(F.when(F.col("decoded"), 1)).alias("decoded"),
                 F.count(F.when(~F.col("decoded"), 1)).alias("undecodable"))
            .orderBy("node", "interface"))


def undecodable(packets: DataFrame) -> DataFrame:
    """(node, error, packets) for every row that is not a decoded message."""
    return (packets.where(~F.col("decoded")).groupBy("node", "error").agg(F.count("*").alias("packets"))
            .orderBy("node", F.desc("packets")))


def messages_by_type(packets: DataFrame) -> DataFrame:
    """(node, transport, protocol_name, type_name, messages): every decoded message in each capture (what tshark
    with the generated dissector counts per type)."""
    return (packets.where(F.col("decoded"))
            .groupBy("node", "transport", "protocol_name", "type_name").agg(F.count("*").alias("messages"))
            .orderBy("node", "transport", "protocol_name", "type_name"))
