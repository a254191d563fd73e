"""GSGC metrics, named as in the paper (Guo et al. 1997, §4), as pure DataFrame transforms.

Inputs are the PACKETS and EVENTS tables (analysis.schemas), the MEMBERS table and two derived tables:
`crashes` (member, crash_ts) and `lifetimes` (member, started_ts, crashed_ts, end_ts). Definitions (times are
unix seconds; "first"/"last" are over event timestamps):

- **TPR** (time per round) of round r at a gossip level (global; local, per local group; sc): the first
  `round_completed` with via = constructed minus the first `round_started` of round r, over all members — the
  paper's "start of the round until the first member constructs S". Rounds nobody constructed have no TPR.
  Beside it: `steps` (the steps the constructing member took in the round: the paper's number of steps per
  round), and over all members that completed the round, the mean of their own `tpr_s` and `steps`.
- **time to stable** of data message (origin, seq): T − ts(data_sent), where T is the first time at which every
  member that is live knows S[origin] ≥ seq. A member knows it from its first global `stable` event whose array
  has S[origin] ≥ seq (S only grows). Members that started after the send, or crashed before it, do not count;
  a member that crashes later counts until its crash: T = max over members m of min(reached_m, crashed_m). If
  some counted member neither reached it nor crashed, the message never became stable (null).
- **gossip messages and bytes per member per second**: messages of types GOSSIP, SC_GOSSIP, STABLE and LIVE a
  member sent (its own capture, direction out, decoded), and their UDP payload bytes (the wire message size),
  divided by the member's lifetime: from its first `node_started` to its crash, else its last `node_stopped`,
  else the run's end.
- **failure-detection latency** of crash c of member x: for every observer — a member started before c and
  not crashed at or before c — the first `declared_failed` of x by the observer after c (and before the
  observer's own crash) minus c. Observers that never declared x have no latency and count as undetected.
- **false declarations**: `declared_failed` events naming a member that had not crashed at that time.
- queue drops per link (from tc statistics) are in analysis.queues.

A member restarted after a crash keeps its first crash as the end of its life (restarts are not modelled).
"""
from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from analysis.rundir import Member
from analysis.schemas import MEMBERS

GOSSIP_TYPES = ("GOSSIP", "SC_GOSSIP", "STABLE", "LIVE")
DATA_TYPES = ("DATA", "REPAIR")


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


def tpr(events: DataFrame, members: DataFrame) -> DataFrame:
    """One row per (level, group, round) that started: TPR, steps and the members' own view of the round."""
    rounds = (events.where(F.col("event").isin("round_started", "round_completed"))
              .join(members.select(F.col("member").alias("node"), "local_group"), "node", "left")
              .withColumn("group", F.when(F.col("level") == "local", F.col("local_group"))))
    done = F.col("event") == "round_completed"
    constructed = done & (F.col("via") == "constructed")
    agg = (rounds.groupBy("level", "group", "round")
           .agg(F.min(F.when(F.col("event") == "round_started", F.col("ts"))).alias("started_ts"),
                F.min(F.when(constructed, F.struct("ts", "steps", "node"))).alias("first"),
                F.count(F.when(done, 1)).alias("members_completed"),
                F.avg(F.when(done, F.col("tpr_s"))).alias("member_tpr_mean_s"),
                F.avg(F.when(done, F.col("steps"))).alias("steps_mean")))
    return (agg.select("level", "group", "round", "started_ts",
                       F.col("first.ts").alias("constructed_ts"), F.col("first.node").alias("constructed_by"),
                       (F.col("first.ts") - F.col("started_ts")).alias("tpr_s"), F.col("first.steps").alias("steps"),
                       "members_completed", "member_tpr_mean_s", "steps_mean")
            .where(F.col("started_ts").isNotNull())
            .orderBy("level", "group", "round"))


def tpr_summary(rounds: DataFrame) -> DataFrame:
    """Per level: completed rounds, TPR mean and sample standard deviation, steps mean and standard deviation."""
    return (rounds.groupBy("level")
            .agg(F.count("tpr_s").alias("rounds"), F.count("*").alias("rounds_started"),
                 F.avg("tpr_s").alias("tpr_mean_s"), F.stddev_samp("tpr_s").alias("tpr_std_s"),
                 F.min("tpr_s").alias("tpr_min_s"), F.max("tpr_s").alias("tpr_max_s"),
                 F.avg("steps").alias("steps_mean"), F.stddev_samp("steps").alias("steps_std"),
                 F.avg("member_tpr_mean_s").alias("member_tpr_mean_s"))
            .orderBy("level"))


def time_to_stable(events: DataFrame, members: DataFrame, life: DataFrame) -> DataFrame:
    """One row per data message sent: (origin, origin_id, seq, sent_ts, members, members_reached, stable_ts,
    time_to_stable_s); stable_ts and time_to_stable_s are null for a message that never became stable."""
    senders = members.where(F.col("sender_index").isNotNull())
    sent = (events.where(F.col("event") == "data_sent")
            .join(senders.select(F.col("member").alias("node"), "member_id", "sender_index"), "node")
            .select(F.col("node").alias("origin"), F.col("member_id").alias("origin_id"),
                    F.col("sender_index").alias("pos"), "seq", F.col("ts").alias("sent_ts")))
    # S entries above what was ever sent cannot name a message; capping them keeps the expansion below finite.
    max_seq = sent.groupBy("pos").agg(F.max("seq").alias("max_seq"))
    entries = (events.where((F.col("event") == "stable") & (F.col("level") == "global"))
               .select(F.col("node").alias("member"), "ts", F.posexplode("s").alias("pos", "value"))
               .join(max_seq, "pos")
               .withColumn("value", F.least("value", "max_seq")))
    before = Window.partitionBy("member", "pos").orderBy("ts").rowsBetween(Window.unboundedPreceding, -1)
    rises = (entries.withColumn("prev", F.coalesce(F.max("value").over(before), F.lit(0)))
             .where(F.col("value") > F.col("prev")))
    reached = (rises.select("member", "pos", F.explode(F.sequence(F.col("prev") + 1, F.col("value"))).alias("seq"),
                            "ts")
               .groupBy("member", "pos", "seq").agg(F.min("ts").alias("reached_ts")))
    counted = (sent.crossJoin(life.select("member", "started_ts", "crashed_ts"))
               .where((F.col("started_ts") <= F.col("sent_ts"))
                      & (F.col("crashed_ts").isNull() | (F.col("crashed_ts") > F.col("sent_ts")))))
    per_member = (counted.join(reached, ["member", "pos", "seq"], "left")
                  .withColumn("done_ts", F.least("reached_ts", "crashed_ts")))  # least() skips nulls
    return (per_member.groupBy("origin", "origin_id", "seq", "sent_ts")
            .agg(F.count("*").alias("members"), F.count("done_ts").alias("members_reached"),
                 F.max("done_ts").alias("last_ts"))
            .select("origin", "origin_id", "seq", "sent_ts", "members", "members_reached",
                    F.when(F.col("members") == F.col("members_reached"), F.col("last_ts")).alias("stable_ts"))
            .withColumn("time_to_stable_s", F.col("stable_ts") - F.col("sent_ts"))
            .orderBy("origin_id", "seq"))


def time_to_stable_summary(tts: DataFrame) -> DataFrame:
    """One row: messages sent, how many became stable, and the time to stable's mean, median, p90 and max."""
    x = F.col("time_to_stable_s")
    return tts.agg(F.count("*").alias("messages"), F.count(x).alias("stable"), F.avg(x).alias("mean_s"),
                   F.median(x).alias("median_s"), F.percentile(x, 0.9).alias("p90_s"), F.max(x).alias("max_s"))


def traffic_by_type(packets: DataFrame) -> DataFrame:
    """(node, direction, type_name, msgs, bytes, ip_bytes) over decoded packets; bytes are UDP payload bytes."""
    return (packets.where(F.col("decoded"))
            .groupBy("node", "direction", "type_name")
            .agg(F.count("*").alias("msgs"), F.sum("payload_len").alias("bytes"), F.sum("ip_len").alias("ip_bytes"))
            .orderBy("node", "direction", "type_name"))


def traffic_per_member(packets: DataFrame, life: DataFrame) -> DataFrame:
    """Per capturing node: lifetime, gossip and data messages/bytes it sent, per second of its lifetime, and
    what it received."""
    out = (F.col("direction") == "out") & F.col("decoded")
    gossip = out & F.col("type_name").isin(*GOSSIP_TYPES)
    data = out & F.col("type_name").isin(*DATA_TYPES)
    inbound = (F.col("direction") == "in") & F.col("decoded")
    per_node = (packets.groupBy("node")
                .agg(F.count(F.when(gossip, 1)).alias("gossip_msgs"),
                     F.coalesce(F.sum(F.when(gossip, F.col("payload_len"))), F.lit(0)).alias("gossip_bytes"),
                     F.count(F.when(data, 1)).alias("data_msgs"),
                     F.coalesce(F.sum(F.when(data, F.col("payload_len"))), F.lit(0)).alias("data_bytes"),
                     F.count(F.when(out, 1)).alias("sent_msgs"),
                     F.count(F.when(inbound, 1)).alias("received_msgs"),
                     F.count(F.when(~F.col("decoded"), 1)).alias("undecodable")))
    lifetime = F.col("end_ts") - F.col("started_ts")
    return (per_node.join(life.select(F.col("member").alias("node"), lifetime.alias("lifetime_s")), "node", "left")
            .select("node", "lifetime_s", "gossip_msgs", "gossip_bytes",
                    (F.col("gossip_msgs") / F.col("lifetime_s")).alias("gossip_msgs_per_s"),
                    (F.col("gossip_bytes") / F.col("lifetime_s")).alias("gossip_bytes_per_s"),
                    "data_msgs", "data_bytes", "sent_msgs", "received_msgs", "undecodable")
            .orderBy("node"))


def traffic_timeseries(packets: DataFrame, bin_s: float) -> DataFrame:
    """(node, t_bin_s, msgs, bytes): decoded messages each node sent per time bin (t_bin_s = bin start)."""
    t_bin = (F.floor(F.col("t_s") / bin_s) * bin_s).alias("t_bin_s")
    return (packets.where((F.col("direction") == "out") & F.col("decoded"))
            .groupBy("node", t_bin).agg(F.count("*").alias("msgs"), F.sum("payload_len").alias("bytes"))
            .orderBy("node", "t_bin_s"))


def event_timeseries(events: DataFrame, names: Sequence[str], bin_s: float) -> DataFrame:
    """(event, t_bin_s, count) for the given event names, over all members."""
    t_bin = (F.floor(F.col("t_s") / bin_s) * bin_s).alias("t_bin_s")
    return (events.where(F.col("event").isin(*names))
            .groupBy("event", t_bin).agg(F.count("*").alias("count"))
            .orderBy("event", "t_bin_s"))


def failure_detection(events: DataFrame, members: DataFrame, crash: DataFrame, life: DataFrame) -> DataFrame:
    """One row per (crash, observer): (member, member_id, crash_ts, observer, declared_ts, latency_s)."""
    crashed = crash.join(members.select("member", "member_id"), "member")
    observers = life.select(F.col("member").alias("observer"), F.col("started_ts").alias("obs_started"),
                            F.col("crashed_ts").alias("obs_crashed"))
    pairs = (crashed.crossJoin(observers)
             .where((F.col("observer") != F.col("member")) & (F.col("obs_started") <= F.col("crash_ts"))
                    & (F.col("obs_crashed").isNull() | (F.col("obs_crashed") > F.col("crash_ts")))))
    decl = (events.where(F.col("event") == "declared_failed")
            .select(F.col("node").alias("d_node"), F.col("member").alias("d_member"), F.col("ts").alias("d_ts")))
    cond = ((F.col("d_node") == F.col("observer")) & (F.col("d_member") == F.col("member_id"))
            & (F.col("d_ts") >= F.col("crash_ts"))
            & (F.col("obs_crashed").isNull() | (F.col("d_ts") < F.col("obs_crashed"))))
    return (pairs.join(decl, cond, "left")
            .groupBy("member", "member_id", "crash_ts", "observer")
            .agg(F.min("d_ts").alias("declared_ts"))
            .withColumn("latency_s", F.col("declared_ts") - F.col("crash_ts"))
            .orderBy("crash_ts", "member", "observer"))


def failure_detection_summary(fd: DataFrame) -> DataFrame:
    """Per crash: observers, how many declared the member failed, and the latency's min, median, mean, max."""
    x = F.col("latency_s")
    return (fd.groupBy("member", "member_id", "crash_ts")
            .agg(F.count("*").alias("observers"), F.count(x).alias("detected"), F.min(x).alias("min_s"),
                 F.median(x).alias("median_s"), F.avg(x).alias("mean_s"), F.max(x).alias("max_s"))
            .orderBy("crash_ts", "member"))


def false_declarations(events: DataFrame, members: DataFrame, crash: DataFrame) -> DataFrame:
    """(member, declarations, observers): declared_failed of a member that had not crashed at that time."""
    decl = (events.where(F.col("event") == "declared_failed")
            .join(members.select(F.col("member_id").alias("member"), F.col("member").alias("name")), "member")
            .select("name", F.col("node").alias("observer"), "ts"))
    before = crash.select(F.col("member").alias("c_member"), "crash_ts")
    return (decl.join(before, (F.col("c_member") == F.col("name")) & (F.col("crash_ts") <= F.col("ts")), "left_anti")
            .groupBy(F.col("name").alias("member"))
            .agg(F.count("*").alias("declarations"), F.countDistinct("observer").alias("observers"))
            .orderBy("member"))


def packet_counts(packets: DataFrame) -> DataFrame:
    """Per pcap: (node, interface, file, packets, bytes, decoded, undecodable); bytes as tshark's frame.len."""
    return (packets.groupBy("node", "interface", "file")
            .agg(F.count("*").alias("packets"), F.sum("frame_len").alias("bytes"),
                 F.count(F.when(F.col("decoded"), 1)).alias("decoded"),
                 F.count(F.when(~F.col("decoded"), 1)).alias("undecodable"))
            .orderBy("node", "interface"))


def undecodable(packets: DataFrame) -> DataFrame:
    """(node, error, packets) for every packet that was not decoded."""
    return (packets.where(~F.col("decoded")).groupBy("node", "error").agg(F.count("*").alias("packets"))
            .orderBy("node", F.desc("packets")))
