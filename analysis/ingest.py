"""Ingest jobs: pcaps → packets table, event logs → events table (Parquet under `<run>/analysis/`).

The pcaps are opened and parsed on the executors (a task per core, the files balanced by bytes), in one pass:
`parse_packets` decodes each file into Arrow record batches of the PACKETS schema with numpy over the file's bytes
(`analysis.pcapvec`; the per-packet decoder `analysis.pcap.packet_rows` is the reference it equals), handed to the
JVM as they are (`DataFrame.mapInArrow`, no Python rows) and, when given a `ScanSink`, reports what the read found
about the file (the CAPTURES row `scan_captures` gives) through a Spark accumulator, so the file is not read a
second time for it.
`ingest_packets` writes the packets table itself: each task decodes its file into the same batches and writes them
as the table's Parquet file for that capture (pyarrow, the layout `write_packets` gives), and returns only the
file's CAPTURES row; the JVM never turns the packets into rows (that conversion and Spark's Parquet writer were
most of the ingest's time once the decode was vectorised). The driver only handles the list of files and the
per-file summary. Each job is a pure `DataFrame -> DataFrame` function; `read_*`, `write_*` and `ingest_packets`
are the thin I/O around them.
"""
from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from pathlib import Path

from pyspark.accumulators import AccumulatorParam
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from analysis.pcap import CaptureFile, CaptureScan, Ports, scan
from analysis.pcapvec import packet_batches
from analysis.schemas import CAPTURES, EVENT_JSON, EVENTS, PACKETS
from gossipnode.vclock import VirtualClock

# The list of pcaps as a (small) DataFrame: one row per CaptureFile.
FILES = StructType([StructField(name, StringType(), name == "address")
                    for name in ("node", "interface", "path", "file", "address")])
BATCH_ROWS = 8192   # rows per Arrow record batch a task hands to the JVM
ROW_GROUP_ROWS = 1 << 17   # rows per Parquet row group of the packets table (`ingest_packets`)


def file_bins(sizes: Sequence[int], bins: int) -> list[int]:
    """The bin of each file when `len(sizes)` files go to `bins` tasks: largest first to the least loaded bin (by
    bytes), so the tasks end together."""
    load = [0] * max(1, min(bins, len(sizes)))
    out = [0] * len(sizes)
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        b = min(range(len(load)), key=lambda b: (load[b], b))
        out[i] = b
        load[b] += sizes[i]
    return out


def files_frame(spark: SparkSession, captures: Sequence[CaptureFile]) -> DataFrame:
    """The files in as many partitions as Spark has cores (`defaultParallelism`), balanced by bytes: a task per
    file cost ~0.1 s of task start each, more than decoding a 65 536-packet pcap (16 files on 2 cores: 2.5-2.9 s
    in 16 tasks, 1.2-1.3 s in 2; 2026-11-28). A size the driver cannot see (executors on other machines) counts 0."""
    rows = [(c.node, c.interface, c.path, c.file, c.address) for c in captures]

    def size(path: str) -> int:
        try:
            return os.path.getsize(path)
        except OSError:
            return 0

    n = max(1, min(len(rows), spark.sparkContext.defaultParallelism))
    bins = file_bins([size(c.path) for c in captures], n)
    tasks = [[r for r, b in zip(rows, bins) if b == k] for k in range(n)]
    return spark.createDataFrame(spark.sparkContext.parallelize(tasks, n).flatMap(lambda t: t), FILES)


def scan_captures(files: DataFrame) -> DataFrame:
    """FILES → CAPTURES: per pcap, its link type, readable packets and bytes, time span and error (if any), from
    reading the records only (`ingest_packets` gets the same rows while it decodes)."""
    def scan_all(batches: Iterator) -> Iterator:
        schema = arrow_schema(CAPTURES)
        for b in batches:
            rows = [scan(CaptureFile(**f)) for f in b.to_pylist()]
            if rows:
                yield to_batch(rows, schema)

    return files.mapInArrow(scan_all, CAPTURES)


def arrow_schema(schema: StructType):
    """The Arrow schema of a Spark one (pyarrow.Schema)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema)


def to_batch(rows: Sequence[tuple], schema):
    """Row tuples (in the schema's column order) → one pyarrow.RecordBatch."""
    import pyarrow as pa

    cols = list(zip(*rows)) if rows else [()] * len(schema)
    return pa.RecordBatch.from_arrays([pa.array(c, type=f.type) for c, f in zip(cols, schema)], schema=schema)


def to_batches(rows: Iterable[tuple], schema, size: int = BATCH_ROWS) -> Iterator:
    """Row tuples → pyarrow.RecordBatches of at most `size` rows (none for no rows)."""
    it = iter(rows)
    while chunk := list(islice(it, size)):
        yield to_batch(chunk, schema)


class _ScanParam(AccumulatorParam):
    """file → CAPTURES row; merged by file, so a task that is run again replaces its own entry."""

    def zero(self, value: dict) -> dict:
        return {}

    def addInPlace(self, a: dict, b: dict) -> dict:
        a.update(b)
        return a


class ScanSink:
    """Collects the CAPTURES rows of the files `parse_packets` reads (a Spark accumulator), available on the
    driver once an action over the packets (e.g. `write_packets`) has run."""

    def __init__(self, spark: SparkSession) -> None:
        self._acc = spark.sparkContext.accumulator({}, _ScanParam())

    def rows(self, files: Sequence[CaptureFile]) -> list[dict]:
        got = self._acc.value
        missing = [c.file for c in files if c.file not in got]
        if missing:
            raise RuntimeError(f"no scan result came back for {', '.join(missing)} (was the packets table "
                               f"computed?)")
        return [dict(zip(CAPTURES.fieldNames(), got[c.file])) for c in files]


def parse_packets(files: DataFrame, run_id: str, t0: float, names: dict[str, str],
                  clock_offsets: dict[str, float] | None = None, ports: Ports | None = None,
                  sink: ScanSink | None = None, clock: VirtualClock | None = None) -> DataFrame:
    """FILES → PACKETS: every readable frame of every pcap, decoded on the executors into Arrow batches.
    `names` maps addresses to plan node names. `clock_offsets` (node → its host's clock minus the controller's,
    real hosts) put `ts` on one clock. `ports`: where the nodes' packets are (node port, multicast group ports;
    default 7000, 7001). `sink`: also collect each file's CAPTURES row while reading it (see `ScanSink`).
    `clock`: the run's virtual time; the packets' `ts` become virtual as the events' (docs/virtual-time.md)."""
    offs = dict(clock_offsets or {})
    ports = ports or Ports()
    acc = sink._acc if sink is not None else None

    def decode(batches: Iterator) -> Iterator:
        schema = arrow_schema(PACKETS)
        for b in batches:
            for f in b.to_pylist():
                cap = CaptureFile(**f)
                found = CaptureScan(cap) if acc is not None else None
                yield from packet_batches(cap, run_id, t0, names, offs.get(cap.node, 0.0), ports, found, clock,
                                          BATCH_ROWS, schema)
                if acc is not None:
                    acc.add({cap.file: found.row()})

    return files.mapInArrow(decode, PACKETS)


def ingest_packets(spark: SparkSession, captures: Sequence[CaptureFile], run_id: str, t0: float,
                   names: dict[str, str], out: Path, clock_offsets: dict[str, float] | None = None,
                   ports: Ports | None = None, clock: VirtualClock | None = None) -> list[dict]:
    """Decode every pcap once: write the PACKETS table to `out` (Parquet, replacing what is there) and return the
    CAPTURES rows (dicts, in the order of `captures`). The table is the one `write_packets(parse_packets(...))`
    writes (same rows, partitioned by `node`, snappy), but each task writes its capture's file itself (pyarrow)
    from the decoded batches, so only one CAPTURES row per file goes through the JVM. `out` must be where the
    executors see it (a local Spark, or a filesystem shared with the executors: as the pcaps are)."""
    out = out.resolve()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    offs = dict(clock_offsets or {})
    ports = ports or Ports()
    where = str(out)

    def write(batches: Iterator) -> Iterator:
        schema = arrow_schema(CAPTURES)
        for b in batches:
            rows = [write_capture(CaptureFile(**f), where, run_id, t0, names, offs.get(f["node"], 0.0), ports, clock)
                    for f in b.to_pylist()]
            if rows:
                yield to_batch(rows, schema)

    got = {r["file"]: r.asDict() for r in files_frame(spark, captures).mapInArrow(write, CAPTURES).collect()}
    (out / "_SUCCESS").touch()
    return [got[c.file] for c in captures]


# Spark's escaping of partition values in directory names (ExternalCatalogUtils.escapePathName)
_ESCAPED = set(map(chr, range(1, 32))) | set('"#%\'*/:=?\\\x7f{[]^')


def partition_dir(column: str, value: str) -> str:
    """The directory of a partition (`node=h0`), named as Spark names it."""
    return column + "=" + "".join(f"%{ord(c):02X}" if c in _ESCAPED else c for c in value)


def write_capture(cap: CaptureFile, out: str, run_id: str, t0: float, names: dict[str, str],
                  clock_offset_s: float = 0.0, ports: Ports | None = None, clock: VirtualClock | None = None) -> tuple:
    """One capture's part of the packets table under `out` (`node=<node>/part-<hash of the file>.snappy.parquet`,
    written under a hidden name and renamed when complete: a task run again replaces it) and its CAPTURES row.
    Nothing is written for a file without readable frames.

    The writer gets the string columns dictionary-encoded as the decoder holds them (no strings built, no
    dictionary to compute); the file records no Arrow schema, so every reader sees plain strings, as in Spark's
    files. Dictionary pages for the strings only, min/max statistics for the other columns: string statistics
    and dictionaries of numbers cost a third of the writing, and string min/max would hardly ever let a reader
    skip a row group (each holds nearly every type and reason)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = arrow_schema(PACKETS)
    found = CaptureScan(cap)
    node = schema.get_field_index("node")
    strings = [f.name for f in schema if pa.types.is_string(f.type) and f.name != "node"]
    others = [f.name for f in schema if not pa.types.is_string(f.type)]
    directory = os.path.join(out, partition_dir("node", cap.node))
    name = f"part-{hashlib.sha1(cap.file.encode()).hexdigest()[:20]}.snappy.parquet"
    partial = os.path.join(directory, f".{name}.partial")
    writer = None
    pending: list = []

    def flush() -> None:
        nonlocal writer, pending
        if writer is None:
            os.makedirs(directory, exist_ok=True)
            writer = pq.ParquetWriter(partial, pending[0].schema, compression="snappy", use_dictionary=strings,
                                      write_statistics=others, store_schema=False)
        table = pa.Table.from_batches(pending)
        writer.write_table(table, row_group_size=table.num_rows)
        pending = []

    try:
        for batch in packet_batches(cap, run_id, t0, names, clock_offset_s, ports, found, clock, BATCH_ROWS, schema,
                                    dictionary=True):
            pending.append(batch.remove_column(node))     # the partition's value is its directory's name
            if sum(p.num_rows for p in pending) >= ROW_GROUP_ROWS:
                flush()
        if pending:
            flush()
    finally:
        if writer is not None:
            writer.close()
    if writer is not None:
        os.replace(partial, os.path.join(directory, name))
    return found.row()


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
