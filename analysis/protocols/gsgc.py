"""GSGC's analysis plug-in: the metrics of the GSGC paper (Guo et al. 1997, §4), named as there, and their
report, comparison and sweep sections.

`run_values` (pure Python over the run's files, `gsgc_values`) is THE definition of every per-run number below:
summary.json, the report's key metrics, the sweep analysis (its points.csv columns, `sweep_values`), `orchestrator
tune` (`tune_value`), sweep's validity check and the paper's figures all read it. The Spark transforms (`tpr`,
`time_to_stable`, `failure_detection`, ...) compute the same definitions as tables for the report (per round, per
message, per crash; tests/integration/test_gsgc_values_spark.py checks that they agree with `run_values` on a real
run); the Spark summary adds only what needs the packets (gossip traffic).

Definitions (times are unix seconds; "first"/"last" are over event timestamps):

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
  member sent (its own capture, direction out, decoded), and their bytes (the wire message size), divided by the
  member's lifetime: from its first `node_started` to its crash, else its last `node_stopped`, else the run's
  end.
- **failure-detection latency** of crash c of member x: for every observer — a member started before c and
  not crashed at or before c — the first `declared_failed` of x by the observer after c (and before the
  observer's own crash) minus c. Observers that never declared x have no latency and count as undetected.
- **false declarations**: `declared_failed` events naming a member that had not crashed at that time.

- **steady rounds, round 0** (`run_values`): a run's TPR values are those of its completed rounds that started once
  every member had logged `node_started` (`tpr_values_s`; before the runner started the members together, over a
  minute for 200 processes, the first rounds also measured the start-up); with local gossip (no global rounds) each
  SC round's TPR plus the mean TPR of the local rounds (a local array is made in one local round, then carried to
  the global S by one SC round). The paper's TPR is round 0, from the members' common start to the first S
  (`tpr_first_round_s`; local gossip: from the first local rounds' start to the first global S an SC constructs).
- **queues** (`run_values`, from tc/delayline.json): average queue = over every packet admitted to any link
  direction's serialiser, the packets queued ahead of it (Σ queue_sum / Σ queued); maximum = the largest on any
  direction; overflowed = packets dropped at full queues; the fidelity probe's burst taken out (`queue_stats`).

A member restarted after a crash keeps its first crash as the end of its life (restarts are not modelled).
"""
from __future__ import annotations

import bisect
import json
import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from analysis import figures
from analysis.doc import Doc, Figure, Heading, Para, Table, fmt
from analysis.metrics import msg_bytes
from analysis.protocols import MetricsContext, ProtocolAnalysis, ReportContext, generic_values, register

if TYPE_CHECKING:
    from analysis.rundir import RunDir

# Every GSGC control type (gossip with and without S, the STABLE and LOCAL_STABLE results, LIVE); the wire
# registry is the authority: a test checks this is its non-data types.
GOSSIP_TYPES = ("GOSSIP", "SC_GOSSIP", "STABLE", "LIVE", "GOSSIP_M", "SC_GOSSIP_M", "LOCAL_STABLE")
DATA_TYPES = ("DATA", "REPAIR")


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


def traffic_per_member(packets: DataFrame, life: DataFrame) -> DataFrame:
    """Per capturing node: lifetime, gossip and data messages/bytes it sent, per second of its lifetime, and
    what it received."""
    out = (F.col("direction") == "out") & F.col("decoded")
    gossip = out & F.col("type_name").isin(*GOSSIP_TYPES)
    data = out & F.col("type_name").isin(*DATA_TYPES)
    inbound = (F.col("direction") == "in") & F.col("decoded")
    per_node = (packets.groupBy("node")
                .agg(F.count(F.when(gossip, 1)).alias("gossip_msgs"),
                     F.coalesce(F.sum(F.when(gossip, msg_bytes())), F.lit(0)).alias("gossip_bytes"),
                     F.count(F.when(data, 1)).alias("data_msgs"),
                     F.coalesce(F.sum(F.when(data, msg_bytes())), F.lit(0)).alias("data_bytes"),
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


def declaration_marks(events: DataFrame, members: DataFrame, crash: DataFrame) -> DataFrame:
    """(member, observer, t_s, crashed) for every declared_failed: crashed = the member had crashed by then."""
    decl = (events.where(F.col("event") == "declared_failed")
            .join(members.select(F.col("member_id").alias("member"), F.col("member").alias("name")), "member")
            .select(F.col("name").alias("member"), F.col("node").alias("observer"), "ts", "t_s"))
    crashed = crash.select(F.col("member").alias("c_member"), "crash_ts")
    return (decl.join(crashed, (F.col("c_member") == F.col("member")) & (F.col("crash_ts") <= F.col("ts")), "left")
            .groupBy("member", "observer", "t_s").agg((F.count("crash_ts") > 0).alias("crashed"))
            .orderBy("t_s"))


# --- the run's numbers, pure over its files (issue #38): the one definition of each ----------------------------

def queue_stats(delayline: dict | None, probe: dict | None = None) -> dict[str, Any]:
    """avg_queue (Σ queue_sum / Σ queued), max_queue (max over directions), overflowed (Σ) of tc/delayline.json.

    `probe` is fidelity.json's `rate` sample (`link`, `direction`, `count`): the fidelity probe sends `count`
    back-to-back packets over that link direction before the protocol starts, which the counters include. Its
    contribution is taken out: the burst meets queues 0..count-1, and that direction's max_queue counts only if it
    exceeds the burst's (else the protocol's own maximum there is unknown and the other directions decide)."""
    queues = (delayline or {}).get("queues") if isinstance(delayline, dict) else None
    if not isinstance(queues, dict) or not queues:
        return {"avg_queue": None, "max_queue": None, "overflowed": None}
    burst_key = f"{probe.get('link')}/{probe.get('direction')}" if isinstance(probe, dict) else None
    burst = int(probe.get("count") or 0) if burst_key in queues else 0
    total_sum = total_queued = 0
    maxima = []
    has_sum = False
    for key, q in queues.items():
        if not isinstance(q, dict):
            continue
        qsum, queued, mq = q.get("queue_sum") or 0, q.get("queued") or 0, q.get("max_queue") or 0
        has_sum = has_sum or "queue_sum" in q
        if key == burst_key and burst:
            qsum, queued = max(0, qsum - burst * (burst - 1) // 2), max(0, queued - burst)
            mq = mq if mq > burst else 0
        total_sum, total_queued = total_sum + qsum, total_queued + queued
        maxima.append(mq)
    return {"avg_queue": total_sum / total_queued if has_sum and total_queued else None,
            "max_queue": max(maxima, default=None),
            "overflowed": sum(q.get("overflowed") or 0 for q in queues.values() if isinstance(q, dict))}


def _first_key(ts: float, steps: Any, node: Any) -> tuple:
    """Spark's order of struct(ts, steps, node): field by field, nulls first."""
    return (ts, (0,) if steps is None else (1, steps), (0,) if node is None else (1, node))


def event_rounds(events: list[dict], group_of: dict[str, int | None]) -> list[dict]:
    """`tpr` over plain event dicts, one row per (level, group, round) that started: started_ts (the first
    `round_started`), the first `round_completed` with via = constructed (constructed_ts, constructed_by, its
    steps) and TPR = the difference; over every member's `round_completed`: members_completed and the means of
    their own tpr_s and steps."""
    acc: dict[tuple, dict] = {}
    for e in events:
        ev = e.get("event")
        if ev not in ("round_started", "round_completed"):
            continue
        level = e.get("level")
        key = (level, group_of.get(e.get("node")) if level == "local" else None, e.get("round"))
        a = acc.setdefault(key, {"started_ts": None, "first": None, "done": 0, "tprs": [], "steps": []})
        ts = e.get("ts")
        if ev == "round_started":
            if a["started_ts"] is None or ts < a["started_ts"]:
                a["started_ts"] = ts
            continue
        a["done"] += 1
        if e.get("tpr_s") is not None:
            a["tprs"].append(e["tpr_s"])
        if e.get("steps") is not None:
            a["steps"].append(e["steps"])
        if e.get("via") == "constructed":
            k = _first_key(ts, e.get("steps"), e.get("node"))
            if a["first"] is None or k < _first_key(*a["first"]):
                a["first"] = (ts, e.get("steps"), e.get("node"))
    rows = []
    order = sorted(acc, key=lambda k: ("" if k[0] is None else k[0], -1 if k[1] is None else k[1], k[2] or 0))
    for level, group, rnd in order:
        a = acc[(level, group, rnd)]
        if a["started_ts"] is None:
            continue
        first = a["first"]
        rows.append({"level": level, "group": group, "round": rnd, "started_ts": a["started_ts"],
                     "constructed_ts": first[0] if first else None, "constructed_by": first[2] if first else None,
                     "tpr_s": first[0] - a["started_ts"] if first else None, "steps": first[1] if first else None,
                     "members_completed": a["done"], "member_tpr_mean_s": _fmean(a["tprs"]),
                     "steps_mean": _fmean(a["steps"])})
    return rows


def _fmean(xs: list[float]) -> float | None:
    return statistics.fmean(xs) if xs else None


def _stdev(xs: list[float]) -> float | None:
    return statistics.stdev(xs) if len(xs) >= 2 else None


def _quantile(xs: list[float], p: float) -> float | None:
    """The exact quantile with linear interpolation (Spark's `percentile`, `median`)."""
    if not xs:
        return None
    xs = sorted(xs)
    k = (len(xs) - 1) * p
    lo = int(k)
    return xs[lo] + (xs[min(lo + 1, len(xs) - 1)] - xs[lo]) * (k - lo)


def lives(run: RunDir, crashes: list[tuple[str, float]] | None = None) -> dict[str, dict[str, float | None]]:
    """member -> started_ts (first `node_started`, None if it never started) and crashed_ts (its first crash;
    `crashes`: `crash_list`, computed when None)."""
    out = {m.name: {"started_ts": None, "crashed_ts": None} for m in run.members}
    for e in run.events:
        if e.get("event") == "node_started" and e.get("node") in out and e.get("ts") is not None:
            life = out[e["node"]]
            life["started_ts"] = e["ts"] if life["started_ts"] is None else min(life["started_ts"], e["ts"])
    for member, ts in crash_list(run) if crashes is None else crashes:
        if member in out and (out[member]["crashed_ts"] is None or ts < out[member]["crashed_ts"]):
            out[member]["crashed_ts"] = ts
    return out


def crash_list(run: RunDir) -> list[tuple[str, float]]:
    """(member, crash_ts) of every applied crash operation: t0 + its `actual_s` (analysis.metrics.crashes)."""
    return sorted({(m, run.t0 + float(e["actual_s"])) for e in run.events
                   if e.get("event") == "action_applied" and e.get("op") == "crash" and e.get("actual_s") is not None
                   for m in e.get("targets") or []}, key=lambda c: (c[1], c[0]))


def stable_messages(run: RunDir, life: dict[str, dict]) -> list[dict]:
    """`time_to_stable` over plain events: one row per data message a sender sent (origin, seq, sent_ts, members
    counted, members reached, stable_ts and time_to_stable_s, None when it never became stable)."""
    pos_of = {m.name: m.sender_index for m in run.members if m.sender_index is not None}
    # per (member, S position): global `stable` arrays in time order -> the running maximum, for a bisection
    seen: dict[tuple[str, int], list[tuple[float, int]]] = {}
    sent = []
    for e in run.events:
        ev = e.get("event")
        if ev == "data_sent" and e.get("node") in pos_of and e.get("seq") is not None:
            sent.append((e["node"], e["seq"], e["ts"]))
        elif ev == "stable" and e.get("level") == "global" and isinstance(e.get("s"), list):
            for pos, v in enumerate(e["s"]):
                if v is not None:
                    seen.setdefault((e["node"], pos), []).append((e["ts"], v))
    reach: dict[tuple[str, int], tuple[list[float], list[float]]] = {}
    for key, entries in seen.items():
        entries.sort(key=lambda x: x[0])
        ts_list, highs, high = [], [], None
        for ts, v in entries:
            high = v if high is None else max(high, v)
            ts_list.append(ts)
            highs.append(high)
        reach[key] = (ts_list, highs)

    def reached(member: str, pos: int, seq: int) -> float | None:
        ts_list, highs = reach.get((member, pos), ([], []))
        i = bisect.bisect_left(highs, seq)
        return ts_list[i] if seq >= 1 and i < len(highs) else None

    rows = []
    for origin, seq, sent_ts in sorted(sent, key=lambda s: (pos_of[s[0]], s[1], s[2])):
        counted = [m for m, lf in life.items() if lf["started_ts"] is not None and lf["started_ts"] <= sent_ts
                   and (lf["crashed_ts"] is None or lf["crashed_ts"] > sent_ts)]
        done = []
        for m in counted:
            r, c = reached(m, pos_of[origin], seq), life[m]["crashed_ts"]
            if r is not None or c is not None:
                done.append(min(x for x in (r, c) if x is not None))
        stable = max(done) if counted and len(done) == len(counted) else None
        rows.append({"origin": origin, "seq": seq, "sent_ts": sent_ts, "members": len(counted),
                     "members_reached": len(done), "stable_ts": stable,
                     "time_to_stable_s": stable - sent_ts if stable is not None else None})
    return rows


def detections(run: RunDir, life: dict[str, dict], crashes: list[tuple[str, float]] | None = None) -> list[dict]:
    """`failure_detection` over plain events: per (crash, observer) the first `declared_failed` of the crashed
    member after the crash and before the observer's own crash, and its latency (None: never declared)."""
    ids = {m.name: m.id for m in run.members}
    decl: dict[tuple[str, Any], list[float]] = {}
    for e in run.events:
        if e.get("event") == "declared_failed":
            decl.setdefault((e.get("node"), e.get("member")), []).append(e["ts"])
    rows = []
    for member, crash_ts in crash_list(run) if crashes is None else crashes:
        if member not in ids:
            continue
        for obs, lf in sorted(life.items()):
            if obs == member or lf["started_ts"] is None or lf["started_ts"] > crash_ts \
                    or (lf["crashed_ts"] is not None and lf["crashed_ts"] <= crash_ts):
                continue
            times = [t for t in decl.get((obs, ids[member]), []) if t >= crash_ts
                     and (lf["crashed_ts"] is None or t < lf["crashed_ts"])]
            first = min(times, default=None)
            rows.append({"member": member, "crash_ts": crash_ts, "observer": obs, "declared_ts": first,
                         "latency_s": first - crash_ts if first is not None else None})
    return rows


def false_declaration_count(run: RunDir, crashes: list[tuple[str, float]] | None = None) -> int:
    """`declared_failed` events naming a member that had not crashed at that time (`false_declarations`)."""
    names = {m.id: m.name for m in run.members}
    crashes = crash_list(run) if crashes is None else crashes
    return sum(1 for e in run.events if e.get("event") == "declared_failed" and e.get("member") in names
               and not any(m == names[e["member"]] and ts <= e["ts"] for m, ts in crashes))


def round_values(rounds: list[dict], all_started: float | None) -> dict[str, Any]:
    """A run's TPR numbers from its rounds (`event_rounds`): the global rounds' (every completed one: the report's
    key metrics), the TPR values per round (every completed round, and the steady ones: those that started once
    every member was running; local gossip: each SC round plus the mean local round, the two phases in sequence)
    and the paper's round-0 TPR."""
    done = [r for r in rounds if r["tpr_s"] is not None]
    glob = [r for r in done if r["level"] == "global"]
    tprs, steps = [r["tpr_s"] for r in glob], [r["steps"] for r in glob if r["steps"] is not None]
    members = [r["member_tpr_mean_s"] for r in rounds if r["level"] == "global" and r["member_tpr_mean_s"] is not None]

    def values(rows: list[dict]) -> tuple[list[float], list[Any]]:
        g = [r for r in rows if r["level"] == "global"]
        if g:
            return [r["tpr_s"] for r in g], [r["steps"] for r in g]
        local = [r["tpr_s"] for r in rows if r["level"] == "local"]
        sc = [r for r in rows if r["level"] == "sc"]
        if not local:
            return [], []
        lm = statistics.fmean(local)
        return [r["tpr_s"] + lm for r in sc], [r["steps"] for r in sc]

    all_tprs, all_steps = values(done)
    steady = [r for r in done if all_started is not None and r["started_ts"] >= all_started]
    steady_tprs, steady_steps = values(steady)
    # the paper's TPR proper: from a common start of the protocol to the first S (round 0, when every member was
    # running when it started, which `run` guarantees by starting the members together)
    first = next((r for r in steady if r["level"] == "global" and r["round"] == 0), None)
    first_tpr, first_steps = (first["tpr_s"], first["steps"]) if first else (None, None)
    local0 = [r["started_ts"] for r in steady if r["level"] == "local" and r["round"] == 0]
    sc_done = sorted((r["started_ts"] + r["tpr_s"], r["steps"]) for r in done if r["level"] == "sc")
    if first is None and local0 and sc_done:
        # local gossip (§5): from the common start (the local rounds 0) to the first global S an SC constructs;
        # its steps are that SC round's (SC steps)
        first_tpr, first_steps = sc_done[0][0] - min(local0), sc_done[0][1]
    return {"tpr_rounds": len(tprs), "tpr_mean_s": _fmean(tprs), "tpr_std_s": _stdev(tprs),
            "steps_mean": _fmean(steps), "steps_std": _stdev(steps), "member_tpr_mean_s": _fmean(members),
            "tpr_values_s": steady_tprs, "steps_values": steady_steps,
            "tpr_all_values_s": all_tprs, "steps_all_values": all_steps,
            "tpr_first_round_s": first_tpr, "steps_first_round": first_steps,
            "rounds_completed": {lvl: sum(1 for r in done if r["level"] == lvl) for lvl in ("global", "local", "sc")}}


def _configs(run: RunDir) -> list[dict]:
    out = []
    for f in sorted((run.path / "configs").glob("*.json")):
        try:
            cfg = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(cfg, dict):
            out.append(cfg)
    return out


def gsgc_values(run: RunDir) -> dict[str, Any]:
    """Every per-run number of GSGC (the plug-in's `run_values`; the module's docstring defines them)."""
    p = run.params
    starts: dict[str, float] = {}
    for e in run.events:
        if e.get("event") == "node_started" and e.get("node") is not None and e.get("ts") is not None:
            starts[e["node"]] = min(e["ts"], starts.get(e["node"], e["ts"]))
    members = {m.name for m in run.members}
    started = {n: ts for n, ts in starts.items() if n in members}
    all_started = max(started.values()) if members and len(started) == len(members) else None
    configs = _configs(run)
    rounds = event_rounds(run.events, {m.name: m.local_group for m in run.members})
    crashes = crash_list(run)
    life = lives(run, crashes)
    tts = [r["time_to_stable_s"] for r in stable_messages(run, life)]
    stable = [x for x in tts if x is not None]
    fd = detections(run, life, crashes)
    lat = [r["latency_s"] for r in fd if r["latency_s"] is not None]
    q = queue_stats(run.delayline, (run.fidelity or {}).get("rate"))
    return {
        **generic_values(run),
        "subgroup": p.get("subgroup"), "step_s": p.get("step_s"), "fail_k": p.get("fail_k"),
        "local_groups": len(p.get("local_groups") or []) or None,
        "members": len(run.members), "members_started": len(started), "all_started_ts": all_started,
        "start_spread_s": all_started - min(started.values()) if all_started is not None else None,
        # the members waited for the runner's common start of the protocol (runs since commit 8ab3d07)
        "common_start": bool(configs) and all(c.get("wait_for_start") for c in configs),
        **round_values(rounds, all_started),
        "tts_messages": len(tts), "tts_stable": len(stable), "tts_mean_s": _fmean(stable),
        "tts_median_s": _quantile(stable, 0.5), "tts_p90_s": _quantile(stable, 0.9),
        "tts_max_s": max(stable, default=None),
        "crashes": len({(r["member"], r["crash_ts"]) for r in fd}), "fd_observers": len(fd),
        "fd_detected": len(lat), "fd_latency_median_s": statistics.median(lat) if lat else None,
        "fd_latency_max_s": max(lat, default=None), "false_declarations": false_declaration_count(run, crashes),
        "avg_queue": q["avg_queue"], "max_queue": q["max_queue"], "queue_overflowed": q["overflowed"],
    }


TUNE_METRICS = ("rounds", "round0")


def tune_value(values: dict, metric: str) -> float | None:
    """The TPR `orchestrator tune` averages into f(x) for one run (its `run_values`): "rounds" = the mean over the
    run's steady rounds (`tpr_values_s`); "round0" = the paper's TPR, from the members' common start to the first
    S (`tpr_first_round_s`, None when round 0 did not complete or started before every member ran)."""
    if metric == "round0":
        return values.get("tpr_first_round_s")
    if metric == "rounds":
        return _fmean(values.get("tpr_values_s") or [])
    raise ValueError(f"metric {metric!r}: one of {', '.join(TUNE_METRICS)}")


# --- the comparison of several runs ---------------------------------------------------------------------------

def pooled(summaries: list[dict]) -> list[dict]:
    """Per (members, sub-group size, step interval): TPR and steps pooled over the rounds of all its runs (each
    run's `tpr_values_s`: its rounds that started once every member ran)."""
    groups: dict[tuple, list[dict]] = {}
    for s in summaries:
        groups.setdefault((s.get("members"), s.get("subgroup"), s.get("step_s")), []).append(s)
    out = []
    for (n, b, step), runs in sorted(groups.items(), key=lambda kv: tuple((x is None, x) for x in kv[0])):
        tprs = [v for r in runs for v in r.get("tpr_values_s") or []]
        steps = [v for r in runs for v in r.get("steps_values") or [] if v is not None]
        out.append({"members": n, "subgroup": b, "step_s": step, "runs": len(runs), "rounds": len(tprs),
                    "tpr_mean_s": _mean(tprs), "tpr_std_s": _std(tprs),
                    "steps_mean": _mean(steps), "steps_std": _std(steps)})
    return out


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _std(xs: list[float]) -> float | None:
    if len(xs) < 2:
        return None
    m = sum(xs) / len(xs)
    return (sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) ** 0.5


# --- the plug-in ----------------------------------------------------------------------------------------------

TPR_DEF = ("TPR of round r: the first `round_completed` with via = constructed minus the first `round_started` of "
           "r, over all members (the paper's start of the round until the first member constructs S). Steps: the "
           "constructing member's steps in the round. The members' own mean `tpr_s` and steps are shown beside.")
TTS_DEF = ("Time to stable of data message (origin, seq): from its `data_sent` to the first time at which every "
           "live member's global S[origin] ≥ seq (from the members' `stable` events). Members started after the "
           "send or crashed before it do not count; a member that crashes later counts until its crash.")
TRAFFIC_DEF = ("Gossip = GOSSIP, SC_GOSSIP, STABLE and LIVE messages a member sent (its own capture, decoded), bytes "
               "= the wire message. Rates are per second of the member's lifetime: its first "
               "`node_started` to its crash, else its `node_stopped`, else the end of the run.")
FD_DEF = ("Failure-detection latency: from the orchestrator's crash (t0 + `actual_s`) to each observer's first "
          "`declared_failed` of the crashed member. Observers: members started before the crash and not crashed "
          "at or before it; a declaration must come before the observer's own crash.")
MAX_ROWS = 40


def _limit(rows: list[list[Any]], what: str, csv_name: str) -> tuple[list[list[Any]], str | None]:
    if len(rows) <= MAX_ROWS:
        return rows, None
    return rows[:MAX_ROWS], f"first {MAX_ROWS} of {len(rows)} {what}; all in analysis/metrics/{csv_name}"


class Gsgc(ProtocolAnalysis):
    name = "gsgc"
    title = "GSGC"
    timeline_events = ("data_received", "stable", "round_completed", "suspected", "declared_failed")
    compare_columns = ("subgroup", "step_s", "fail_k", "tpr_rounds", "tpr_mean_s", "tpr_std_s", "steps_mean",
                       "tts_median_s", "gossip_msgs_per_member_s", "gossip_bytes_per_member_s",
                       "fd_latency_median_s", "false_declarations")
    sweep_columns = (("tpr_s", "TPR (s)"), ("steps", "steps/round"), ("avg_queue", "avg queue"),
                     ("max_queue", "max queue"), ("queue_drops", "queue drops"), ("tpr_round0_s", "round-0 TPR (s)"),
                     ("steps_round0", "round-0 steps"))
    # the sweep analysis (analysis/sweep.py): the point's parameters carried into summary.csv, the value whose runs
    # are counted (column, noun) and the note under the table
    sweep_point_keys = ("subgroup", "step_s")
    sweep_measured = ("runs_with_tpr", "TPR")
    sweep_note = ("Round-0 TPR: from the members' common start to the first S, the paper's TPR (each of its runs "
                  "starts the protocol once). TPR: mean over a run's completed global rounds that started once every "
                  "member was running; per point the mean over the repetitions ± the half-width of the 95 % "
                  "confidence interval (Student t). Queue sizes from the delay line: average = mean queue length met "
                  "by an admitted packet, max over all link directions.")

    def describe(self, run) -> str:
        p = run.params
        return f"GSGC: sub-group b = {p.get('subgroup')}, step = {fmt(p.get('step_s'))} s, K = {p.get('fail_k')}"

    def metrics(self, ctx: MetricsContext) -> dict[str, Any]:
        events, members, crash, life, table = ctx.events, ctx.members, ctx.crash, ctx.life, ctx.table
        d: dict[str, Any] = {}
        rounds = tpr(events, members).cache()
        d["tpr"] = table("tpr", rounds)
        d["tpr_summary"] = table("tpr_summary", tpr_summary(rounds))
        tts = time_to_stable(events, members, life).cache()
        d["tts"] = table("time_to_stable", tts)
        d["tts_summary"] = table("time_to_stable_summary", time_to_stable_summary(tts))[0]
        d["traffic"] = table("traffic", traffic_per_member(ctx.packets, life))
        fd = failure_detection(events, members, crash, life).cache()
        d["fd"] = table("failure_detection", fd)
        d["fd_summary"] = table("failure_detection_summary", failure_detection_summary(fd))
        d["false_declarations"] = table("false_declarations", false_declarations(events, members, crash))
        d["declarations"] = [r.asDict() for r in declaration_marks(events, members, crash).collect()]
        for df in (rounds, tts, fd):
            df.unpersist()
        return d

    def summary(self, run, d: dict[str, Any]) -> dict[str, Any]:
        """What needs the packets: gossip traffic per member per second (the rest of the key numbers are
        `run_values`', which analysis.run merges after this)."""
        rates = [r["gossip_msgs_per_s"] for r in d["traffic"] if r["gossip_msgs_per_s"] is not None]
        brates = [r["gossip_bytes_per_s"] for r in d["traffic"] if r["gossip_bytes_per_s"] is not None]
        return {"gossip_msgs_per_member_s": statistics.fmean(rates) if rates else None,
                "gossip_bytes_per_member_s": statistics.fmean(brates) if brates else None}

    def run_values(self, run: RunDir) -> dict[str, Any]:
        return gsgc_values(run)

    def key_metrics(self, s: dict[str, Any]) -> list[list[Any]]:
        has_rounds = s.get("tpr_rounds") or s.get("tpr_mean_s") is not None
        return [
            ["TPR, mean ± std (global rounds)",
             f"{fmt(s['tpr_mean_s'])} ± {fmt(s['tpr_std_s'])} s over {s['tpr_rounds']} rounds" if has_rounds else None],
            ["steps per round, mean ± std", f"{fmt(s['steps_mean'])} ± {fmt(s['steps_std'])}" if has_rounds else None],
            ["time to stable, median / p90 / max",
             f"{fmt(s['tts_median_s'])} / {fmt(s['tts_p90_s'])} / {fmt(s['tts_max_s'])} s "
             f"({s['tts_stable']} of {s['tts_messages']} messages stable)"],
            ["gossip messages per member per second (mean)", s["gossip_msgs_per_member_s"]],
            ["gossip bytes per member per second (mean)", s["gossip_bytes_per_member_s"]],
            ["failure-detection latency, median / max",
             f"{fmt(s['fd_latency_median_s'])} / {fmt(s['fd_latency_max_s'])} s "
             f"({s['fd_detected']} of {s['fd_observers']} observations, {s['crashes']} crashes)"],
            ["declarations of members that had not crashed", s["false_declarations"]],
        ]

    def report(self, doc: Doc, ctx: ReportContext) -> None:
        run, d, figdir = ctx.run, ctx.data, ctx.figdir
        doc.add(Heading(1, "Time per round (TPR)"), Para(TPR_DEF))
        if d["tpr_summary"]:
            doc.add(Table(["level", "rounds (started)", "TPR mean (s)", "std", "min", "max", "steps mean",
                           "steps std", "members' own TPR mean (s)"],
                          [[r["level"], f"{r['rounds']} ({r['rounds_started']})", r["tpr_mean_s"], r["tpr_std_s"],
                            r["tpr_min_s"], r["tpr_max_s"], r["steps_mean"], r["steps_std"], r["member_tpr_mean_s"]]
                           for r in d["tpr_summary"]]))
            rows = [[r["level"] if r["group"] is None else f"{r['level']} {r['group']}", r["round"],
                     r["started_ts"] - run.t0, r["constructed_by"], r["tpr_s"], r["steps"], r["members_completed"],
                     r["member_tpr_mean_s"], r["steps_mean"]] for r in d["tpr"]]
            rows, note = _limit(rows, "rounds", "tpr.csv")
            doc.add(Table(["level", "round", "started (s)", "constructed by", "TPR (s)", "steps",
                           "members completed", "members' TPR mean (s)", "members' steps mean"], rows, note))
            doc.add(Figure(figures.tpr_per_round(d["tpr"], figdir / "tpr.png"), "Steps and TPR per global round"))
        else:
            doc.add(Para("No rounds in the event logs."))

        doc.add(Heading(1, "Time to stable"), Para(TTS_DEF))
        if d["tts"]:
            t = d["tts_summary"]
            doc.add(Table(["messages", "stable", "mean (s)", "median (s)", "p90 (s)", "max (s)"],
                          [[t["messages"], t["stable"], t["mean_s"], t["median_s"], t["p90_s"], t["max_s"]]]))
            doc.add(Figure(figures.time_to_stable(d["tts"], run.t0, figdir / "time_to_stable.png"),
                           "Time to stable of each data message"))
        else:
            doc.add(Para("No data messages were sent (or the senders are unknown)."))

        doc.add(Heading(1, "Gossip traffic per member"), Para(TRAFFIC_DEF))
        rows = [[r["node"], r["lifetime_s"], r["gossip_msgs"], r["gossip_msgs_per_s"], r["gossip_bytes_per_s"],
                 r["data_msgs"], r["sent_msgs"], r["received_msgs"], r["undecodable"]]
                for r in sorted(d["traffic"], key=lambda r: figures.natural(r["node"]))]
        rows, note = _limit(rows, "members", "traffic.csv")
        doc.add(Table(["member", "lifetime (s)", "gossip msgs", "gossip msgs/s", "gossip bytes/s", "data msgs sent",
                       "msgs sent", "msgs received", "undecodable"], rows, note))

        doc.add(Heading(1, "Failure detection"), Para(FD_DEF))
        if d["fd_summary"]:
            doc.add(Table(["crashed", "id", "crash (s)", "observers", "detected", "min (s)", "median (s)",
                           "mean (s)", "max (s)"],
                          [[r["member"], r["member_id"], r["crash_ts"] - run.t0, r["observers"], r["detected"],
                            r["min_s"], r["median_s"], r["mean_s"], r["max_s"]] for r in d["fd_summary"]]))
        else:
            doc.add(Para("No member was crashed."))
        if d["false_declarations"]:
            doc.add(Para("Declared failed while it had not crashed (paused or slow members, or K too small):"),
                    Table(["member", "declarations", "observers"],
                          [[r["member"], r["declarations"], r["observers"]] for r in d["false_declarations"]]))

    def timeline_marks(self, d: dict[str, Any]) -> list[dict]:
        return [{"member": m["member"], "t_s": m["t_s"], "label": f"declared failed ({kind})",
                 "color": "tab:red" if m["crashed"] else "tab:orange"}
                for m in d.get("declarations", []) for kind in ["crashed" if m["crashed"] else "alive"]]

    def compare(self, summaries: list[dict], doc: Doc, out: Path) -> None:
        from analysis.run import write_csv

        points = pooled(summaries)
        write_csv(out / "tpr_vs_step.csv", points)
        doc.add(Heading(1, "TPR against the step interval"),
                Para("The rounds of all runs with the same group size, sub-group size b and step interval, pooled "
                     "(each run's rounds that started once every member ran; mean ± sample standard deviation): "
                     "the shape of the GSGC paper's Figure 6."),
                Table(["members", "b", "step (s)", "runs", "rounds", "TPR mean (s)", "TPR std", "steps mean",
                       "steps std"],
                      [[p["members"], p["subgroup"], p["step_s"], p["runs"], p["rounds"], p["tpr_mean_s"],
                        p["tpr_std_s"], p["steps_mean"], p["steps_std"]] for p in points]))
        drawable = [p for p in points if p["tpr_mean_s"] is not None and p["step_s"] is not None]
        if drawable:
            doc.add(Figure(figures.tpr_vs_step(drawable, out / "figures" / "tpr_vs_step.png"),
                           "Steps per round and TPR against the step interval, one line per sub-group size"))

    def sweep_values(self, values: dict[str, Any], queue: dict[str, Any]) -> dict[str, Any]:
        """points.csv's columns from a run's `run_values` (`queue` is unused: the queues are run values): the
        parameters, TPR and steps (the mean over the steady rounds), the round-0 TPR and steps, the number of
        steady rounds, the mean TPR over every completed round, the queues."""
        tprs, every = values.get("tpr_values_s") or [], values.get("tpr_all_values_s") or []
        steps = [x for x in values.get("steps_values") or [] if x is not None]
        return {"subgroup": values.get("subgroup"), "step_s": values.get("step_s"),
                "tpr_s": _fmean(tprs), "tpr_round0_s": values.get("tpr_first_round_s"),
                "steps_round0": values.get("steps_first_round"), "steps": _fmean(steps), "rounds": len(tprs),
                "tpr_all_s": _fmean(every), "avg_queue": values.get("avg_queue"),
                "max_queue": values.get("max_queue"), "queue_drops": values.get("queue_overflowed")}

    def sweep_figures(self, index: dict, agg: list[dict], figdir: Path) -> list[tuple[str, Path]]:
        """Steps and TPR, queues against the step interval (Figures 6 / 8, 5 / 7); TPR against the group size
        (Figures 12 / 13)."""
        from analysis import sweep

        made = []
        if len({r["step_s"] for r in agg if r.get("step_s") is not None}) >= 2:
            lines = sweep.series(agg, "step_s", sweep.axis_named(index, (".step", "step")))
            made.append(("Steps per round and TPR vs step interval (paper Figures 6 and 8)", sweep.pair_figure(
                lines, "step_s", "step interval (s)", ("steps", "steps", "(A) number of steps needed in a round"),
                ("tpr_s", "seconds", "(B) time per round (TPR)"), figdir / "tpr_steps_vs_step.png")))
            made.append(("Average and maximum queue size vs step interval (paper Figures 5 and 7)", sweep.pair_figure(
                lines, "step_s", "step interval (s)", ("avg_queue", "packets", "(A) average queue size"),
                ("max_queue", "packets", "(B) maximum queue size"), figdir / "queues_vs_step.png")))
        if len({r["members"] for r in agg if r.get("members") is not None}) >= 2:
            lines = sweep.series(agg, "members", sweep.axis_named(index, ("members.count", "count", "topology.nodes")))
            made.append(("TPR vs group size (paper Figures 12 and 13)", sweep.line_figure(
                lines, "members", "tpr_s", "group size n", "seconds",
                "TPR vs group size (each point at its step interval)", figdir / "tpr_vs_group_size.png")))
        return made


PLUGIN = register(Gsgc())
