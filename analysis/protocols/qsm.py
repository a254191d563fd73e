"""QSM's analysis plug-in (seed 004, §3's measurements; docs/qsm.md, docs/reproduction-qsm.md).

**The run's numbers** (`run_values`, pure over the run's files: the events, the manifest, the node configs,
tc/delayline.json) — the one definition the report's key metrics, summary.json and the paper script
(analysis/figures_qsm.py, through analysis/figlib.py) read. Times are the events' virtual unix seconds.

- the point: `members` (the configured members), `groups` (G, the QSM groups), `n_senders` (S: the workload's
  senders, else those that sent), `R` (partition_size, 5 by default), `loss` (links.loss as a fraction), `token_s`
  (the token interval), `growth` (λ), `rate_initial` (workload rate_per_s), `shaper`; `sender_names` (who sent).
- **delivery** (`qsm_delivery_ratio` too): receipts logged over receipts expected — each data message at every
  member of its group (`data_sent.group_name`) but its origin and the members the schedule crashed (the paper's
  property is delivery "to all nodes that have not crashed or left the group"; the GMS removes them: docs/qsm.md)
  (the generic delivery ratio counts every member, which is wrong for overlapping groups); a joiner (the
  params' `joiners`) expects an origin's messages from when that origin installed the view that added it
  (`join_cutoffs`: the views the origin multicasts into from then on have the joiner), none before, none if it
  never joined; a crashed member that a view added back after its last crash (a restart: `rejoined_members`)
  expects, as a joiner, what each origin sent from its install of that view on; `crashed`: the members the
  schedule crashed, `rejoined`: those of them added back; `messages` (`qsm_messages` too): the data messages sent.
- **throughput** (Figures 9, 12, 13): data messages per second over the *steady window*, the second half of the
  sending span (first to last send of any sender; the paper ignores warm-up and cool-down); `throughput_all`:
  (messages - 1) / (last send - first send); `delivered_min` / `delivered_mean`: the new packets per second the
  members that did not send logged (`data_received`) in the same window, the slowest and the mean.
- **shares** (Figures 1, 16): per sender and per group the data messages per second in the steady window
  (`sender_throughput`, `group_throughput`: they add up to `throughput`; a configured sender, or a group, without
  a send counts 0), each over `throughput` (`sender_share`, `group_share`), `sender_share_min`,
  `throughput_per_sender` / `throughput_per_group` (the total over S or G), **Jain's index** (Σx)² / (n Σx²) over
  the senders (`sender_jain`) and over the groups (`group_jain`): 1 when all are equal, 1/n when one has all.
- **regions** (Figure 14): `regions`, the most regions one data message went to (`data_sent.regions`; every region
  of a group is its own IP multicast group, so a message is one packet per region); `transmitted`: the data
  packets per second the senders put on the wire in the steady window, one per region of each message (with the
  mcast transport; None with udp, whose copies go member by member, or for logs without `regions`).
- **rate over time** (Figures 17-18): `rate_series`, data messages per whole second since t0 between the first
  and last (partial) seconds of sending (0 for a second without a send); `rate_std` its standard deviation over
  the seconds of the steady window, `rate_cv` over their mean; `rate_std_per_s_mean`: per sender the standard
  deviation of its own 1 s samples (over its own span), mean over the senders; `rate_final`: the last
  `rate_changed` rate at or before the last send; `steps_skipped`: the workload timer's skipped steps.
- **recovery** (Figure 19): `recovered` events (a packet that came by push, pull or retransmission); latency =
  arrival minus when the member first knew it missing: `recovery_latency_s` (`recovery_latency_mean_s` too) the
  mean, `recovery_latency_max_s`, `recovery_latency_rounds` the mean in token rounds (÷ `token_s`); `recovered_by`
  per way; **recovery rate** = recovered / `receipts` (every `data_received`).
- **ACK latency** (Figure 20): Σ latency_sum / Σ acked over the senders' `ack_received` (`ack_latency_s`, also
  `ack_latency_mean_s`; `ack_latency_rounds` in token rounds), `ack_latency_max_s`; `token_rounds`: rounds done.
- **CPU** (`cpu_costs`): `delayline_cpu_s` from tc/delayline.json; with the node processes' CPU seconds
  (`node_cpu_s`, from `benchmarks/bench_qsm.py --watch`'s log: analysis/figures_qsm.py `--cpu`),
  `cpu_us_per_packet` / `cpu_us_per_receipt` and `ceiling_2cores` = 2 / (node + delay line CPU s per packet).
- `duration_s`: as the generic summary's (run end - t0); and the generic values (delivery over every member,
  latency: analysis.protocols.generic_values).

**Spark** (`metrics`: the report's tables, per sender, group, way or region; `summary`: what needs the packets):

- **control overhead**: the QSM messages every member sent (its own capture, direction out; a multicast datagram
  once, though it leaves by mc0 and the tree links), by type: packets and bytes (envelope + length); control =
  every type but DATA (retransmissions and forwards are overhead, as in Figures 10-11); fractions of packets and
  of bytes (`control_packets_fraction`, `control_bytes_fraction_qsm`).
- delivery per (sender, group); throughput per (sender, group) over its own span; 1 s rate samples and their
  variability per sender, the `rate_changed` points (μ_snd); recovery per way (mean, median, p90, max); ACK
  latency per sender and region; token rounds and their duration per region. tests/integration/
  test_qsm_values_spark.py checks that they agree with `run_values` on a real run.
"""
from __future__ import annotations

import math
import statistics
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from analysis.doc import Doc, Heading, Para, Table, fmt
from analysis.protocols import (GENERIC_SWEEP_COLUMNS, MetricsContext, ProtocolAnalysis, ReportContext,
                                generic_values, register)

if TYPE_CHECKING:
    from analysis.rundir import RunDir

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


def delivery_per_group(events: DataFrame, groups: DataFrame, members: DataFrame,
                       joiners: list[str] | None = None) -> DataFrame:
    ids = members.select(F.col("member_id").alias("origin"), F.col("member").alias("origin_name"))
    sent = (events.where(F.col("event") == "data_sent")
            .select(F.col("node").alias("origin_name"), "seq", "ts",
                    raw("group_name", "string").alias("group_name"))
            .join(ids, "origin_name"))
    crashes = (events.where((F.col("event") == "action_applied") & (raw("op", "string") == "crash"))
               .select(F.explode(F.from_json(F.get_json_object("raw", "$.targets"), "array<string>"))
                       .alias("member"), "ts"))
    views = [(r["node"], r["ts"], r["view"], r["added"]) for r in events.where(F.col("event") == "gms_view")
             .select("node", "ts", raw("view", "int").alias("view"),
                     F.from_json(F.get_json_object("raw", "$.added"), "array<int>").alias("added")).collect()]
    id_of = {r["member"]: r["member_id"] for r in members.collect()}
    back = rejoined_members([(r["member"], r["ts"]) for r in crashes.collect()], views, id_of)
    crashed = crashes.select("member").distinct().where(~F.col("member").isin(sorted(back)))
    expected = (sent.join(groups, "group_name").where(F.col("member") != F.col("origin_name"))
                .join(crashed, "member", "left_anti"))     # run_values' rule: crashed members expect nothing
    joiners = sorted(set(joiners or ()) | back)
    if joiners:     # run_values' rule: a joiner (or a member added back) expects an origin's messages from that
        # origin's view with it on
        cut = join_cutoffs(views, set(joiners), id_of)
        rows = [(j, o, cut[j].get(o, NEVER)) for j in sorted(cut) for o in sorted(id_of)]
        since = events.sparkSession.createDataFrame(rows, "member string, origin_name string, since double")
        expected = (expected.join(since, ["member", "origin_name"], "left")
                    .where(F.col("since").isNull() | (F.col("ts") >= F.col("since"))).drop("since"))
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
            .agg(F.count("*").alias("recovered"), F.count(lat).alias("timed"), F.avg(lat).alias("latency_mean_s"),
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


# --- the run's numbers, from its files (pure; the module docstring defines them) ------------------------------------

def seconds(v: Any) -> float | None:
    """'1s', '500ms', '100us', 0.5 -> seconds."""
    if v is None:
        return None
    if isinstance(v, (int, float)):
        return float(v)
    s = str(v).strip()
    for unit, k in (("ms", 1e-3), ("us", 1e-6), ("s", 1.0)):
        if s.endswith(unit):
            return float(s[: -len(unit)]) * k
    return float(s)


def percent(v: Any) -> float:
    """'1%' -> 0.01; None -> 0."""
    if v is None:
        return 0.0
    s = str(v).strip()
    return float(s[:-1]) / 100 if s.endswith("%") else float(s)


def group_members(params: dict[str, Any], ids: dict[str, int]) -> dict[str, set[str]]:
    """group name -> member names (`all`, names or ids), as `group_table`."""
    by_id = {i: n for n, i in ids.items()}
    out = {}
    for g in params.get("groups") or []:
        spec = g.get("members", "all")
        ms = list(ids) if spec == "all" else [by_id.get(m) if isinstance(m, int) else m for m in spec]
        out[g["name"]] = {m for m in ms if m in ids}
    return out


def jain(xs: list[float]) -> float | None:
    """Jain's fairness index (Σx)² / (n Σx²): 1 when all are equal, 1/n when one has all; None for no values or all
    zero."""
    sq = sum(x * x for x in xs)
    return sum(xs) ** 2 / (len(xs) * sq) if xs and sq > 0 else None


def window_rates(ts_by_key: dict[str, list[float]], start: float, end: float) -> dict[str, float]:
    """key -> its timestamps in [start, end] per second (`end` > `start`)."""
    return {k: sum(1 for t in ts if start <= t <= end) / (end - start) for k, ts in ts_by_key.items()}


def second_counts(ts: list[float]) -> list[tuple[int, int]]:
    """(second, sends) for every whole second between the first and last (partial) seconds of `ts` (seconds since
    t0), as the Spark `rate_samples`: a second without a send counts 0; none when the span covers < 2 s."""
    if not ts:
        return []
    a, b = math.floor(min(ts)), math.floor(max(ts))
    counts: dict[int, int] = {}
    for t in ts:
        counts[math.floor(t)] = counts.get(math.floor(t), 0) + 1
    return [(s, counts.get(s, 0)) for s in range(a + 1, b)] if b - a >= 2 else []


def cpu_costs(messages: int | None, receipts: int | None, node_cpu_s: float | None,
              delayline_cpu_s: float | None) -> dict[str, Any]:
    """The run's CPU per packet: the node processes' CPU seconds over the data packets sent and over the receipts,
    and the packets/s two idle cores would carry at that cost with the delay line's: 2 x packets / (node + delay
    line CPU s). None without a node CPU reading."""
    out: dict[str, Any] = {"node_cpu_s": node_cpu_s, "delayline_cpu_s": delayline_cpu_s, "cpu_us_per_packet": None,
                           "cpu_us_per_receipt": None, "ceiling_2cores": None}
    if node_cpu_s and messages:
        out["cpu_us_per_packet"] = 1e6 * node_cpu_s / messages
        out["cpu_us_per_receipt"] = 1e6 * node_cpu_s / receipts if receipts else None
        out["ceiling_2cores"] = 2.0 * messages / (node_cpu_s + (delayline_cpu_s or 0.0))
    return out


NEVER = 1e30       # a joiner's cutoff for an origin whose view with it never came


def join_cutoffs(views: list[tuple[str, float, int | None, list[int] | None]], joiners: set[str],
                 ids: dict[str, int]) -> dict[str, dict[str, float]]:
    """joiner -> origin -> the time from which the origin's messages are expected at the joiner: when the origin
    installed the (last) view that added the joiner (its `gms_view` names the joiner in `added`; every member logs
    the view number it installs). `views`: (node, ts, view, added) of every `gms_view` event. An origin missing:
    never (the joiner never joined, or the origin never installed that view). Pure."""
    names = {i: n for n, i in ids.items()}
    added_in: dict[str, int] = {}
    for _, _, view, added in views:
        for j in added or ():
            if names.get(j) in joiners and view is not None:
                added_in[names[j]] = max(view, added_in.get(names[j], view))
    out: dict[str, dict[str, float]] = {j: {} for j in joiners}
    for j, v in added_in.items():
        for node, ts, view, _ in views:
            if view is not None and view >= v:
                out[j][node] = min(out[j].get(node, math.inf), ts)
    return out


def rejoined_members(crashes: list[tuple[str, float]], views: list[tuple[str, float, int | None, list[int] | None]],
                     ids: dict[str, int]) -> set[str]:
    """The crashed members a GMS view added back after their last crash (restarted: QSM §2.3.2, "it would need to
    rejoin the system"). `crashes`: (member, ts) of each crash action's targets; `views` as `join_cutoffs`'s. Pure."""
    names = {i: n for n, i in ids.items()}
    last_crash: dict[str, float] = {}
    for m, ts in crashes:
        last_crash[m] = max(ts, last_crash.get(m, ts))
    return {names[j] for _, ts, _, added in views for j in added or ()
            if names.get(j) in last_crash and ts > last_crash[names[j]]}


def qsm_values(run: RunDir) -> dict[str, Any]:
    """QSM's numbers of a run (the module docstring defines each)."""
    spec = run.manifest.get("spec") or {}
    wl = spec.get("workload") or {}
    p = run.params
    token_s = seconds(p.get("token_interval_s", p.get("token_interval"))) or 1.0
    ids = {m.name: m.id for m in sorted(run.members, key=lambda m: m.id)}
    groups = group_members(p, ids)
    sent: dict[str, list[tuple[float, int, str | None]]] = {}
    copies: list[tuple[float, int]] = []                  # (ts, regions) of each data_sent that names its regions
    received: dict[str, list[float]] = {m: [] for m in ids}
    got: set[tuple[str, int, int]] = set()
    recovered, acks, rates, skipped, rounds = [], [], [], 0, 0
    crashed: set[str] = set()
    crashes: list[tuple[str, float]] = []
    views: list[tuple[str, float, int | None, list[int] | None]] = []
    for e in run.events:
        ev = e.get("event")
        if ev == "data_sent":
            sent.setdefault(e["node"], []).append((e["ts"], int(e["seq"]), e.get("group_name")))
            if isinstance(e.get("regions"), list):
                copies.append((e["ts"], len(e["regions"])))
        elif ev == "data_received":
            received.setdefault(e["node"], []).append(e["ts"])
            got.add((e["node"], int(e["origin"]), int(e["seq"])))
        elif ev == "recovered":
            recovered.append(e)
        elif ev == "ack_received":
            acks.append(e)
        elif ev == "rate_changed":
            rates.append(e)
        elif ev == "steps_skipped" and e.get("timer") == "workload":
            skipped += int(e.get("missed") or 0)
        elif ev == "token_round":
            rounds += 1
        elif ev == "action_applied" and e.get("op") == "crash":
            crashed.update(e.get("targets") or ())
            crashes.extend((m, e["ts"]) for m in e.get("targets") or ())
        elif ev == "gms_view":
            views.append((e["node"], e["ts"], e.get("view"), e.get("added")))
    wl_senders = wl.get("senders")
    configured = [s for s in wl_senders if isinstance(s, str)] if isinstance(wl_senders, list) else []
    n_groups = len(p.get("groups") or []) or None
    n_senders = (len(wl_senders) if isinstance(wl_senders, list) else wl_senders
                 if isinstance(wl_senders, int) and not isinstance(wl_senders, bool) else None) or len(sent)
    out: dict[str, Any] = {
        "members": len(ids), "groups": n_groups, "n_senders": n_senders, "R": p.get("partition_size", 5),
        "loss": percent((spec.get("links") or {}).get("loss")), "token_s": token_s, "growth": p.get("growth"),
        "rate_initial": wl.get("rate_per_s"), "shaper": run.manifest.get("shaper"), "sender_names": sorted(sent),
        "steps_skipped": skipped, "token_rounds": rounds, "crashed": sorted(crashed),
        "regions": max((k for _, k in copies), default=None)}
    all_ts = sorted(t for s in sent.values() for t, _, _ in s)
    expected = logged = 0
    by_id = {i: n for n, i in ids.items()}
    back = rejoined_members(crashes, views, ids)
    out["rejoined"] = sorted(back)
    crashed -= back                      # a member added back expects what a joiner does, from that view on
    joiners = {j if isinstance(j, str) else by_id.get(j, str(j)) for j in p.get("joiners") or ()} | back
    cut = join_cutoffs(views, joiners, ids) if joiners else {}
    for origin, msgs in sent.items():
        if origin not in ids:
            continue
        for ts, seq, g in msgs:
            for m in groups.get(g, ()):
                if m != origin and m not in crashed and (m not in cut or ts >= cut[m].get(origin, NEVER)):
                    expected += 1
                    logged += (m, ids[origin], seq) in got
    out["messages"] = out["qsm_messages"] = len(all_ts)
    out["delivery"] = out["qsm_delivery_ratio"] = logged / expected if expected else None
    out.update(throughput_all=None, throughput=None, sender_throughput={}, group_throughput={},
               delivered_min=None, delivered_mean=None, rate_series=[], rate_std=None, rate_cv=None,
               transmitted=None)
    if len(all_ts) >= 2:
        first, last = all_ts[0], all_ts[-1]
        mid = (first + last) / 2
        window = last - mid
        out["throughput_all"] = (len(all_ts) - 1) / (last - first)
        by_sender: dict[str, list[float]] = {s: [] for s in configured}
        by_group: dict[str, list[float]] = {g: [] for g in groups}
        for origin, msgs in sent.items():
            by_sender.setdefault(origin, []).extend(t for t, _, _ in msgs)
            for t, _, g in msgs:
                by_group.setdefault(g, []).append(t)
        if window > 0:
            out["throughput"] = sum(1 for t in all_ts if t >= mid) / window
            if copies and len(copies) == len(all_ts) and p.get("transport", "mcast") == "mcast":
                out["transmitted"] = sum(k for t, k in copies if t >= mid) / window
            out["sender_throughput"] = window_rates(by_sender, mid, last)
            out["group_throughput"] = window_rates(by_group, mid, last)
            rx = [sum(1 for t in ts if mid <= t <= last) / window for m, ts in received.items() if m not in sent]
            if rx:
                out["delivered_min"], out["delivered_mean"] = min(rx), statistics.fmean(rx)
        samples = second_counts([t - run.t0 for t in all_ts])
        steady = [c for s, c in samples if s >= mid - run.t0]
        out["rate_series"] = [c for _, c in samples]
        out["rate_std"] = statistics.stdev(steady) if len(steady) >= 2 else None
        out["rate_cv"] = out["rate_std"] / statistics.fmean(steady) if out["rate_std"] is not None and \
            statistics.fmean(steady) else None
    st, gt, tp = out["sender_throughput"], out["group_throughput"], out["throughput"]
    out["sender_share"] = {k: v / tp if tp else None for k, v in st.items()}
    out["group_share"] = {k: v / tp if tp else None for k, v in gt.items()}
    out["sender_jain"], out["group_jain"] = jain(list(st.values())), jain(list(gt.values()))
    out["sender_share_min"] = min(st.values()) / tp if st and tp else None
    out["throughput_per_sender"] = tp / n_senders if tp is not None and n_senders else None
    out["throughput_per_group"] = tp / n_groups if tp is not None and n_groups else None
    stds = [statistics.stdev(c) for s in sent.values()
            if len(c := [n for _, n in second_counts([t - run.t0 for t, _, _ in s])]) >= 2]
    out["rate_std_per_s_mean"] = statistics.fmean(stds) if stds else None
    before = [e for e in rates if all_ts and e["ts"] <= all_ts[-1]]
    out["rate_final"] = max(before, key=lambda e: e["ts"])["rate"] if before else None
    receipts = sum(len(v) for v in received.values())
    lat = [float(e["latency"]) for e in recovered if e.get("latency") is not None]
    out["recovered"] = len(recovered)
    out["recovery_rate"] = len(recovered) / receipts if receipts else None
    out["recovery_latency_s"] = out["recovery_latency_mean_s"] = statistics.fmean(lat) if lat else None
    out["recovery_latency_max_s"] = max(lat) if lat else None
    out["recovery_latency_rounds"] = out["recovery_latency_s"] / token_s if lat else None
    hows = [str(e.get("how")) for e in recovered]
    out["recovered_by"] = {h: hows.count(h) for h in sorted(set(hows))}
    acked = sum(int(e.get("acked") or 0) for e in acks)
    ack_s = sum(float(e.get("latency_sum") or 0) for e in acks) / acked if acked else None
    out["ack_latency_s"] = out["ack_latency_mean_s"] = ack_s
    out["ack_latency_rounds"] = ack_s / token_s if ack_s is not None else None
    out["ack_latency_max_s"] = max((float(e["latency_max"]) for e in acks if e.get("latency_max") is not None),
                                   default=None)
    out["receipts"] = receipts
    out.update(cpu_costs(out["messages"], receipts, None, (run.delayline or {}).get("cpu_s")))
    out["duration_s"] = run.end - run.t0 if run.end is not None else None
    return out


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
        joiners = [j if isinstance(j, str) else dict(members).get(j, str(j))
                   for j in ctx.run.params.get("joiners") or ()]
        d["delivery"] = table("qsm_delivery_per_group", delivery_per_group(events, groups, ctx.members, joiners))
        d["throughput"] = table("qsm_throughput", throughput(events))
        samples = rate_samples(events).cache()
        d["rate_samples"] = table("qsm_rate_samples", samples)
        d["variability"] = table("qsm_rate_variability", rate_variability(samples))
        samples.unpersist()
        d["rate_changes"] = table("qsm_rate_changes", rate_changes(events))
        d["overhead"] = table("qsm_overhead_by_type", overhead(ctx.packets))
        d["recovery"] = table("qsm_recovery", recovery(events))
        d["ack"] = table("qsm_ack_latency", ack_latency(events))
        d["token"] = table("qsm_token_rounds", token_rounds(events))
        return d

    def run_values(self, run: RunDir) -> dict[str, Any]:
        """The generic values and QSM's (`qsm_values`; the module docstring defines each)."""
        return {**generic_values(run), **qsm_values(run)}

    def summary(self, run, data: dict[str, Any]) -> dict[str, Any]:
        """What needs the packets: the control overhead (every other key number is `run_values`')."""
        ov = data.get("overhead") or []
        pk = sum(r["packets"] for r in ov)
        by = sum(r["bytes"] for r in ov)
        ctl = [r for r in ov if r["type_name"] != "DATA"]
        return {"control_packets_fraction": sum(r["packets"] for r in ctl) / pk if pk else None,
                "control_bytes_fraction_qsm": sum(r["bytes"] for r in ctl) / by if by else None}

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
