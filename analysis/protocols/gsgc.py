"""GSGC's analysis plug-in: the metrics of the GSGC paper (Guo et al. 1997, §4), named as there, and their
report, comparison and sweep sections.

`run_values` (pure Python over the run's files: `gsgc_values` of analysis/protocols/gsgc_values.py, whose docstring
defines TPR, time to stable, failure-detection latency, false declarations, steady rounds, round 0 and the queues)
is THE definition of every per-run number: summary.json, the report's key metrics, the sweep analysis (its
points.csv columns, `sweep_values`), `orchestrator tune` (`tune_value`), sweep's validity check and the paper's
figures all read it. The Spark transforms here (`tpr`, `time_to_stable`, `failure_detection`, ...) compute the same
definitions as tables for the report (per round, per message, per crash; tests/integration/
test_gsgc_values_spark.py checks that they agree with `run_values` on a real run); the Spark summary adds only what
needs the packets:

- **gossip messages and bytes per member per second**: messages of types GOSSIP, SC_GOSSIP, STABLE and LIVE a
  member sent (its own capture, direction out, decoded), and their bytes (the wire message size), divided by the
  member's lifetime: from its first `node_started` to its crash, else its last `node_stopped`, else the run's
  end.
"""
from __future__ import annotations

import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from analysis import figures
from analysis.doc import Doc, Figure, Heading, Para, Table, fmt
from analysis.metrics import msg_bytes
from analysis.protocols import MetricsContext, ProtocolAnalysis, ReportContext, register
from analysis.protocols.gsgc_values import _fmean, gsgc_values, pooled

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
