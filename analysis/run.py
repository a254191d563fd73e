"""Analyse one run directory: ingest (Parquet), metrics (collected as aggregates), metric files.

Layout written under the run directory:
    analysis/packets/    PACKETS, Parquet partitioned by node
    analysis/events/     EVENTS, Parquet partitioned by event
    analysis/metrics/    one CSV per metric table, summary.json (the key numbers and the warnings)
    analysis/figures/    PNGs (analysis.report), report.md, report.html
"""
from __future__ import annotations

import csv
import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from analysis import ingest, metrics, queues
from analysis.rundir import RunDir
from analysis.schemas import CAPTURES, EVENTS, PACKETS

BIN_S = 1.0
CAPTURE_EXTRA = ("tcpdump_captured", "dropped_by_kernel", "decoded", "undecodable")
TIMELINE_EVENTS = ("data_received", "stable", "round_completed", "suspected", "declared_failed")


@dataclass
class RunResult:
    run: RunDir
    captures: list[dict] = field(default_factory=list)
    undecodable: list[dict] = field(default_factory=list)
    tpr: list[dict] = field(default_factory=list)
    tpr_summary: list[dict] = field(default_factory=list)
    tts: list[dict] = field(default_factory=list)
    tts_summary: dict = field(default_factory=dict)
    traffic: list[dict] = field(default_factory=list)
    traffic_by_type: list[dict] = field(default_factory=list)
    traffic_series: list[dict] = field(default_factory=list)
    event_series: list[dict] = field(default_factory=list)
    fd: list[dict] = field(default_factory=list)
    fd_summary: list[dict] = field(default_factory=list)
    false_declarations: list[dict] = field(default_factory=list)
    declarations: list[dict] = field(default_factory=list)
    queues: list[dict] = field(default_factory=list)
    actions: list[dict] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def warnings(self) -> list[str]:
        return self.run.warnings


def _rows(df: DataFrame) -> list[dict]:
    return [r.asDict(recursive=True) for r in df.collect()]


def write_csv(path: Path, rows: list[dict], columns: list[str] | tuple[str, ...] | None = None) -> None:
    """Rows as CSV; lists and dicts as JSON. Columns default to the first row's keys."""
    path.parent.mkdir(parents=True, exist_ok=True)
    columns = list(columns if columns is not None else (rows[0].keys() if rows else []))
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: json.dumps(v) if isinstance(v, (list, dict)) else v for k, v in r.items()})


def _capture_warnings(run: RunDir, scanned: list[dict], counted: dict[str, dict]) -> list[dict]:
    """Join the scan with the manifest's tcpdump counts and the packet table's counts; warn about problems."""
    listed = {c["file"]: c for c in run.manifest.get("captures") or []}
    out = []
    for s in sorted(scanned, key=lambda s: s["file"]):
        m = listed.get(s["file"], {})
        c = counted.get(s["file"], {})
        row = {**s, **dict(zip(CAPTURE_EXTRA, (m.get("captured"), m.get("dropped_by_kernel"),
                                                c.get("decoded", 0), c.get("undecodable", 0))))}
        out.append(row)
        if s["error"]:
            run.warnings.append(f"{s['error']} — analysed {s['packets']} packet(s) before the problem"
                                if s["packets"] else s["error"])
        elif row["tcpdump_captured"] is not None and row["tcpdump_captured"] != s["packets"]:
            run.warnings.append(f"{s['file']}: tcpdump reported {row['tcpdump_captured']} packets captured, "
                                f"the file holds {s['packets']}")
        if row["dropped_by_kernel"]:
            run.warnings.append(f"{s['file']}: the kernel dropped {row['dropped_by_kernel']} packets during the "
                                f"capture (they are missing from the packet counts)")
    return out


def analyze_run(spark: SparkSession, run: RunDir) -> RunResult:
    """Ingest and compute every metric of a loaded run directory (`analysis.rundir.load`)."""
    res = RunResult(run)
    out = run.out
    out.mkdir(parents=True, exist_ok=True)
    status = run.manifest.get("status")
    if status != "completed":
        run.warnings.append(f"manifest.json: the run's status is {status!r}, not 'completed'")

    # Ingest.
    files = ingest.files_frame(spark, run.captures)
    scanned = _rows(ingest.scan_captures(files))
    ingest.write_packets(ingest.parse_packets(files, run.run_id, run.t0, run.addresses(), run.clock_offsets),
                         out / "packets")
    lines = ingest.read_event_lines(spark, run.event_logs)
    ingest.write_events(ingest.parse_events(lines, run.run_id, run.t0, run.clock_offsets), out / "events")
    for m in _rows(ingest.malformed_events(lines)):
        run.warnings.append(f"events/{m['source']}: {m['lines']} line(s) are not JSON event records "
                            f"(e.g. {m['first']!r}); skipped")

    packets = ingest.read_table(spark, out / "packets", PACKETS)
    events = ingest.read_table(spark, out / "events", EVENTS).cache()
    members = metrics.members_frame(spark, run.members).cache()
    crash = metrics.crashes(events, run.t0).cache()
    life = metrics.lifetimes(events, members, crash, run.end).cache()

    # Metrics: only aggregates come back to the driver; each table is also written to metrics/<name>.csv.
    mdir = out / "metrics"

    def table(name: str, df: DataFrame) -> list[dict]:
        rows = [r.asDict(recursive=True) for r in df.collect()]
        write_csv(mdir / f"{name}.csv", rows, df.columns)
        return rows

    counted = {r["file"]: r for r in table("packet_counts", metrics.packet_counts(packets))}
    res.captures = _capture_warnings(run, scanned, counted)
    write_csv(mdir / "captures.csv", res.captures, [*CAPTURES.fieldNames(), *CAPTURE_EXTRA])
    res.undecodable = table("undecodable", metrics.undecodable(packets))
    tpr = metrics.tpr(events, members).cache()
    res.tpr = table("tpr", tpr)
    res.tpr_summary = table("tpr_summary", metrics.tpr_summary(tpr))
    tts = metrics.time_to_stable(events, members, life).cache()
    res.tts = table("time_to_stable", tts)
    res.tts_summary = table("time_to_stable_summary", metrics.time_to_stable_summary(tts))[0]
    res.traffic = table("traffic", metrics.traffic_per_member(packets, life))
    res.traffic_by_type = table("traffic_by_type", metrics.traffic_by_type(packets))
    res.traffic_series = table("traffic_timeseries", metrics.traffic_timeseries(packets, BIN_S))
    res.event_series = table("event_timeseries", metrics.event_timeseries(events, TIMELINE_EVENTS, BIN_S))
    fd = metrics.failure_detection(events, members, crash, life).cache()
    res.fd = table("failure_detection", fd)
    res.fd_summary = table("failure_detection_summary", metrics.failure_detection_summary(fd))
    res.false_declarations = table("false_declarations", metrics.false_declarations(events, members, crash))
    res.declarations = _rows(_declaration_marks(events, members, crash))
    res.actions = table("schedule", events.where(F.col("event") == "action_applied")
                        .select("index", "action", "op", "planned_s", "actual_s", "lag_ms", "targets", "links")
                        .orderBy("actual_s"))
    res.queues = queues.queue_drops(run.plan, run.tc, run.delayline, run.warnings)
    write_csv(mdir / "queue_drops.csv", res.queues, queues.COLUMNS)
    for df in (events, members, crash, life, tpr, tts, fd):
        df.unpersist()

    res.summary = summarize(res)
    write_summary(res)
    return res


def _declaration_marks(events: DataFrame, members: DataFrame, crash: DataFrame) -> DataFrame:
    """(member, observer, t_s, crashed) for every declared_failed: crashed = the member had crashed by then."""
    decl = (events.where(F.col("event") == "declared_failed")
            .join(members.select(F.col("member_id").alias("member"), F.col("member").alias("name")), "member")
            .select(F.col("name").alias("member"), F.col("node").alias("observer"), "ts", "t_s"))
    crashed = crash.select(F.col("member").alias("c_member"), "crash_ts")
    return (decl.join(crashed, (F.col("c_member") == F.col("member")) & (F.col("crash_ts") <= F.col("ts")), "left")
            .groupBy("member", "observer", "t_s").agg((F.count("crash_ts") > 0).alias("crashed"))
            .orderBy("t_s"))


def summarize(res: RunResult) -> dict[str, Any]:
    """The run's key numbers (JSON-ready), also the row of a comparison."""
    run = res.run
    spec = run.manifest.get("spec") or {}
    g = next((r for r in res.tpr_summary if r["level"] == "global"), {})
    rates = [r["gossip_msgs_per_s"] for r in res.traffic if r["gossip_msgs_per_s"] is not None]
    brates = [r["gossip_bytes_per_s"] for r in res.traffic if r["gossip_bytes_per_s"] is not None]
    lat = [r["latency_s"] for r in res.fd if r["latency_s"] is not None]
    rounds = [r for r in res.tpr if r["level"] == "global" and r["tpr_s"] is not None]
    return {
        "run_id": run.run_id, "name": spec.get("name"), "status": run.manifest.get("status"),
        "backend": run.manifest.get("backend"), "shaper": run.manifest.get("shaper"),
        "members": len(run.members), "senders": sum(1 for m in run.members if m.sender_index is not None),
        "subgroup": run.gsgc.get("subgroup"), "step_s": run.gsgc.get("step_s"), "fail_k": run.gsgc.get("fail_k"),
        "duration_s": (run.end - run.t0) if run.end else None,
        "packets": sum(c["packets"] for c in res.captures),
        "undecodable": sum(c["undecodable"] for c in res.captures),
        "tpr_rounds": g.get("rounds", 0), "tpr_mean_s": g.get("tpr_mean_s"), "tpr_std_s": g.get("tpr_std_s"),
        "steps_mean": g.get("steps_mean"), "steps_std": g.get("steps_std"),
        "member_tpr_mean_s": g.get("member_tpr_mean_s"),
        "tpr_values_s": [r["tpr_s"] for r in rounds], "steps_values": [r["steps"] for r in rounds],
        "tts_messages": res.tts_summary.get("messages", 0), "tts_stable": res.tts_summary.get("stable", 0),
        "tts_median_s": res.tts_summary.get("median_s"), "tts_mean_s": res.tts_summary.get("mean_s"),
        "tts_p90_s": res.tts_summary.get("p90_s"), "tts_max_s": res.tts_summary.get("max_s"),
        "gossip_msgs_per_member_s": statistics.fmean(rates) if rates else None,
        "gossip_bytes_per_member_s": statistics.fmean(brates) if brates else None,
        "crashes": len(res.fd_summary), "fd_observers": len(res.fd), "fd_detected": len(lat),
        "fd_latency_median_s": statistics.median(lat) if lat else None,
        "fd_latency_max_s": max(lat) if lat else None,
        "false_declarations": sum(r["declarations"] for r in res.false_declarations),
        "queue_drops": queues.total_drops(res.queues),
        "warnings": list(run.warnings),
    }


def write_summary(res: RunResult) -> None:
    (res.run.out / "metrics" / "summary.json").write_text(
        json.dumps({**res.summary, "time_to_stable": res.tts_summary}, indent=1))
