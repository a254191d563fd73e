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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from analysis import ingest, metrics, protocols, queues
from analysis.protocols import ProtocolAnalysis
from analysis.rundir import RunDir
from analysis.schemas import CAPTURES, EVENTS, PACKETS

BIN_S = 1.0
CAPTURE_EXTRA = ("tcpdump_captured", "dropped_by_kernel", "decoded", "undecodable")


@dataclass
class RunResult:
    run: RunDir
    plugin: ProtocolAnalysis = field(default_factory=lambda: protocols.GENERIC)
    captures: list[dict] = field(default_factory=list)
    undecodable: list[dict] = field(default_factory=list)
    by_transport: list[dict] = field(default_factory=list)      # messages per (node, transport, protocol, type)
    delivery: list[dict] = field(default_factory=list)          # per data message
    delivery_summary: dict = field(default_factory=dict)
    latency_quantiles: list[dict] = field(default_factory=list)
    traffic_types: list[dict] = field(default_factory=list)     # per (protocol, type) sent
    overhead: dict = field(default_factory=dict)
    member_s: float | None = None                               # Σ lifetimes of the members with a capture
    throughput: list[dict] = field(default_factory=list)        # per (t_bin_s, data)
    traffic_by_type: list[dict] = field(default_factory=list)
    traffic_series: list[dict] = field(default_factory=list)
    event_series: list[dict] = field(default_factory=list)
    queues: list[dict] = field(default_factory=list)
    actions: list[dict] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)          # the plug-in's own (ProtocolAnalysis.metrics)
    values: dict[str, Any] = field(default_factory=dict)        # the plug-in's run_values (pure, from the files)
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def warnings(self) -> list[str]:
        return self.run.warnings

    def __getattr__(self, name: str) -> Any:
        """The plug-in's collected tables as attributes (res.tpr, res.fd, ... for GSGC)."""
        data = self.__dict__.get("data") or {}
        if name in data:
            return data[name]
        raise AttributeError(name)


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


def _no_stage(name: str) -> None:
    pass


def analyze_run(spark: SparkSession, run: RunDir, stage: Callable[[str], None] = _no_stage) -> RunResult:
    """Ingest and compute every metric of a loaded run directory (`analysis.rundir.load`): the generic metrics,
    then the protocol plug-in's (analysis.protocols). `stage` is told each stage as it starts (the names of
    analysis.progress.STAGES; the progress display)."""
    plugin = protocols.get(run.protocol)
    res = RunResult(run, plugin)
    out = run.out
    out.mkdir(parents=True, exist_ok=True)
    status = run.manifest.get("status")
    if status != "completed":
        run.warnings.append(f"manifest.json: the run's status is {status!r}, not 'completed'")
    if run.protocol and plugin is protocols.GENERIC:
        run.warnings.append(f"protocol {run.protocol!r} has no analysis plug-in: generic metrics only")

    # Ingest.
    stage("decode pcaps")
    scanned = ingest.ingest_packets(spark, run.captures, run.run_id, run.t0, run.addresses(), out / "packets",
                                    run.clock_offsets, run.ports, run.clock)
    stage("read event logs")
    lines = ingest.read_event_lines(spark, run.event_logs)
    ingest.write_events(ingest.parse_events(lines, run.run_id, run.t0, run.event_offsets), out / "events")
    for m in _rows(ingest.malformed_events(lines)):
        run.warnings.append(f"events/{m['source']}: {m['lines']} line(s) are not JSON event records "
                            f"(e.g. {m['first']!r}); skipped")

    packets = ingest.read_table(spark, out / "packets", PACKETS)
    events = ingest.read_table(spark, out / "events", EVENTS).cache()
    members = metrics.members_frame(spark, run.members).cache()
    crash = metrics.crashes(events, run.t0).cache()
    life = metrics.lifetimes(events, members, crash, run.end).cache()

    stage("generic metrics")
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
    res.by_transport = table("messages_by_type", metrics.messages_by_type(packets))
    rec = metrics.receipts(events, members, life).cache()
    per_msg = metrics.delivery(rec).cache()
    res.delivery = table("delivery", per_msg)
    res.delivery_summary = table("delivery_summary", metrics.delivery_summary(per_msg, rec))[0]
    res.latency_quantiles = table("latency_quantiles", metrics.latency_quantiles(rec))
    res.traffic_types = table("traffic_by_message_type", metrics.traffic_by_message_type(packets, life))
    res.overhead = metrics.control_overhead(res.traffic_types)
    res.member_s = metrics.member_seconds(packets, life).first()["member_s"]
    res.throughput = table("throughput_timeseries", metrics.throughput_timeseries(packets, BIN_S))
    res.traffic_by_type = table("traffic_by_type", metrics.traffic_by_type(packets))
    res.traffic_series = table("traffic_timeseries", metrics.traffic_timeseries(packets, BIN_S))
    res.event_series = table("event_timeseries", metrics.event_timeseries(events, plugin.timeline_events, BIN_S))
    res.actions = table("schedule", events.where(F.col("event") == "action_applied")
                        .select("index", "action", "op", "planned_s", "actual_s", "lag_ms", "targets", "links")
                        .orderBy("actual_s"))
    res.queues = queues.queue_drops(run.plan, run.tc, run.delayline, run.warnings)
    write_csv(mdir / "queue_drops.csv", res.queues, queues.COLUMNS)
    stage("protocol metrics")
    res.data = plugin.metrics(protocols.MetricsContext(spark, run, packets, events, members, crash, life, table,
                                                       BIN_S))
    res.values = plugin.run_values(run)          # the protocol's numbers, defined once (issue #38)
    for df in (events, members, crash, life, rec, per_msg):
        df.unpersist()

    res.summary = summarize(res)
    write_summary(res)
    return res


def summarize(res: RunResult) -> dict[str, Any]:
    """The run's key numbers (JSON-ready), also the row of a comparison: the generic ones, then the plug-in's."""
    run = res.run
    spec = run.manifest.get("spec") or {}
    d, o = res.delivery_summary, res.overhead
    rate = o["messages"] / res.member_s if res.member_s and o.get("messages") is not None else None
    generic = {
        "run_id": run.run_id, "name": spec.get("name"), "status": run.manifest.get("status"),
        "protocol": run.protocol or res.plugin.name or None,
        "backend": run.manifest.get("backend"), "shaper": run.manifest.get("shaper"),
        "members": len(run.members), "senders": sum(1 for m in run.members if m.sender_index is not None),
        "duration_s": (run.end - run.t0) if run.end else None,
        "packets": sum(c["packets"] for c in res.captures),
        "undecodable": sum(c["undecodable"] for c in res.captures),
        "data_messages": d.get("messages", 0), "delivered_complete": d.get("complete", 0),
        "delivery_ratio_mean": d.get("delivery_ratio_mean"), "delivery_ratio_min": d.get("delivery_ratio_min"),
        "receipts": d.get("receipts", 0), "receipts_expected": d.get("receipts_expected", 0),
        "latency_mean_s": d.get("latency_mean_s"), "latency_median_s": d.get("latency_median_s"),
        "latency_p90_s": d.get("latency_p90_s"), "latency_p99_s": d.get("latency_p99_s"),
        "latency_max_s": d.get("latency_max_s"),
        "messages_sent": o.get("messages"), "bytes_sent": o.get("bytes"), "msgs_per_member_s": rate,
        "control_msgs_fraction": o.get("control_msgs_fraction"),
        "control_bytes_fraction": o.get("control_bytes_fraction"),
        "queue_drops": queues.total_drops(res.queues),
    }
    return {**generic, **res.plugin.summary(run, res.data), **res.values, "warnings": list(run.warnings)}


def write_summary(res: RunResult) -> None:
    (res.run.out / "metrics" / "summary.json").write_text(json.dumps(res.summary, indent=1))
