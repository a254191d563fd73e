"""Ingest jobs: pcaps → packets table, event logs → events table (Parquet under `<run>/analysis/`).

The pcaps are opened and parsed on the executors, one task per file; the driver only handles the list of files
and the per-file summary (`scan_captures`). Each job is a pure `DataFrame -> DataFrame` function; `read_*` and
`write_*` are the thin I/O around them.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from analysis.pcap import CaptureFile, Ports, packet_rows, scan
from analysis.schemas import CAPTURES, EVENT_JSON, EVENTS, PACKETS

# The list of pcaps as a (small) DataFrame: one row per CaptureFile.
FILES = StructType([StructField(name, StringType(), name == "address")
                    for name in ("node", "interface", "path", "file", "address")])


def files_frame(spark: SparkSession, captures: Sequence[CaptureFile]) -> DataFrame:
    return spark.createDataFrame([(c.node, c.interface, c.path, c.file, c.address) for c in captures], FILES)


def _one_file_per_task(files: DataFrame):
    """The files as an RDD of CaptureFile with exactly one file per partition (a pcap is read by one task)."""
    n = files.count()
    return (files.rdd.zipWithIndex()
            .map(lambda row_i: (row_i[1], CaptureFile(**row_i[0].asDict())))
            .partitionBy(max(n, 1), lambda i: i)
            .values())


def scan_captures(files: DataFrame) -> DataFrame:
    """FILES → CAPTURES: per pcap, its link type, readable packets and bytes, time span and error (if any)."""
    return files.sparkSession.createDataFrame(_one_file_per_task(files).map(scan), CAPTURES)


def parse_packets(files: DataFrame, run_id: str, t0: float, names: dict[str, str],
                  clock_offsets: dict[str, float] | None = None, ports: Ports | None = None) -> DataFrame:
    """FILES → PACKETS: every readable frame of every pcap. `names` maps addresses to plan node names.
    `clock_offsets` (node → its host's clock minus the controller's, real hosts) put `ts` on one clock.
    `ports`: where the nodes' packets are (node port, multicast group ports; default 7000, 7001)."""
    offs = dict(clock_offsets or {})
    ports = ports or Ports()
    rows = _one_file_per_task(files).flatMap(lambda cap: packet_rows(cap, run_id, t0, names,
                                                                      offs.get(cap.node, 0.0), ports))
    return files.sparkSession.createDataFrame(rows, PACKETS, verifySchema=False)


def read_event_lines(spark: SparkSession, logs: Sequence[Path]) -> DataFrame:
    """The event logs' non-empty lines: (value, source) with source the log's file name."""
    if not logs:
        return spark.createDataFrame([], "value string, source string")
    return (spark.read.text([p.resolve().as_uri() for p in logs])
            .select("value", F.regexp_extract(F.col("_metadata.file_path"), r"([^/]+)$", 1).alias("source"))
            .where(F.trim("value") != ""))


def _parsed(lines: DataFrame) -> DataFrame:
    e = F.from_json("value", EVENT_JSON)
    return lines.select("value", "source", e.alias("e"))


def _valid(e) -> F.Column:
    return e.isNotNull() & e["ts"].isNotNull() & e["node"].isNotNull() & e["event"].isNotNull()


def parse_events(lines: DataFrame, run_id: str, t0: float, clock_offsets: dict[str, float] | None = None) -> DataFrame:
    """(value, source) → EVENTS. Lines that are not event records are left out: `malformed_events` counts them.
    `clock_offsets` (node → its host's clock minus the controller's, real hosts) are subtracted from `ts`."""
    df = _parsed(lines)
    e = F.col("e")
    off = F.lit(0.0)
    if clock_offsets:
        pairs = [x for node, o in sorted(clock_offsets.items()) for x in (F.lit(node), F.lit(float(o)))]
        off = F.coalesce(F.element_at(F.create_map(*pairs), e["node"]), F.lit(0.0))
    cols = []
    for f in EVENTS.fields:
        if f.name == "run_id":
            cols.append(F.lit(run_id).alias("run_id"))
        elif f.name == "source":
            cols.append(F.col("source"))
        elif f.name == "t_s":
            cols.append((e["ts"] - off - F.lit(t0)).alias("t_s"))
        elif f.name == "ts":
            cols.append((e["ts"] - off).alias("ts"))
        elif f.name == "raw":
            cols.append(F.col("value").alias("raw"))
        else:
            cols.append(e[f.name].alias(f.name))
    return df.where(_valid(e)).select(*cols)


def malformed_events(lines: DataFrame) -> DataFrame:
    """(value, source) → (source, lines, first): lines that are not JSON event records, per log file."""
    df = _parsed(lines)
    return (df.where(~_valid(F.col("e")))
            .groupBy("source").agg(F.count("*").alias("lines"), F.min(F.substring("value", 1, 80)).alias("first"))
            .orderBy("source"))


def write_packets(packets: DataFrame, out: Path) -> None:
    packets.write.mode("overwrite").partitionBy("node").parquet(out.resolve().as_uri())


def write_events(events: DataFrame, out: Path) -> None:
    events.write.mode("overwrite").partitionBy("event").parquet(out.resolve().as_uri())


def read_table(spark: SparkSession, path: Path, schema: StructType) -> DataFrame:
    """A table written by write_packets / write_events, columns in the schema's order."""
    return spark.read.schema(schema).parquet(path.resolve().as_uri()).select(*schema.fieldNames())
