"""Ingest jobs on a local SparkSession: packets and events tables against hand-computed rows."""
from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from analysis import ingest
from analysis.pcap import CaptureFile
from analysis.schemas import EVENTS, PACKETS
from tests.analysis import synthetic as syn

pytestmark = pytest.mark.spark

NAMES = {syn.ADDR[n]: n for n in syn.ADDR}


def captures(run_dir) -> list[CaptureFile]:
    return [CaptureFile(n, "any", str(run_dir / "pcaps" / f"{n}-any.pcap"), f"pcaps/{n}-any.pcap", syn.ADDR[n])
            for n in ("h0", "h1", "h2", "h3")]


def test_packets_table(spark, run_dir):
    files = ingest.files_frame(spark, captures(run_dir))
    packets = ingest.parse_packets(files, "r1", syn.T0, NAMES)
    assert packets.schema == PACKETS
    per_node = {r["node"]: (r["n"], r["bytes"], r["decoded"]) for r in packets.groupBy("node").agg(
        F.count("*").alias("n"), F.sum("frame_len").alias("bytes"),
        F.count(F.when(F.col("decoded"), 1)).alias("decoded")).collect()}
    # h0: 12 frames, 924 bytes, 3 undecodable (ICMP, ARP, UDP/53); h1: 13 frames, 1036 bytes, 2 undecodable
    # (foreign magic, VLAN-cut header); h2: the 2 whole records of 3 (67 + 82 bytes); h3: no file.
    assert per_node == {"h0": (12, 924, 9), "h1": (13, 1036, 11), "h2": (2, 149, 2)}
    h2 = packets.where(F.col("node") == "h2").orderBy("frame").select(
        "frame", "direction", "dst_node", "type_name", "sender", "seq", "payload_len").collect()
    assert [tuple(r) for r in h2] == [(1, "out", "h0", "LIVE", 2, 1, 23), (2, "out", "h0", "GOSSIP", 2, 2, 38)]


def test_scan_reports_missing_and_truncated_files(spark, run_dir):
    rows = {r["file"]: r for r in ingest.scan_captures(ingest.files_frame(spark, captures(run_dir))).collect()}
    assert {f: (r["link_type"], r["packets"], r["bytes"]) for f, r in rows.items()} == {
        "pcaps/h0-any.pcap": (276, 12, 924), "pcaps/h1-any.pcap": (1, 13, 1036),
        "pcaps/h2-any.pcap": (113, 2, 149), "pcaps/h3-any.pcap": (None, 0, 0)}
    assert rows["pcaps/h0-any.pcap"]["error"] is None
    assert rows["pcaps/h2-any.pcap"]["error"].startswith("pcaps/h2-any.pcap: truncated packet 3 at byte 205")
    assert rows["pcaps/h3-any.pcap"]["error"] == "pcaps/h3-any.pcap: file not found"


def test_write_and_read_back_partitioned(spark, run_dir, tmp_path):
    files = ingest.files_frame(spark, captures(run_dir)[:1])
    ingest.write_packets(ingest.parse_packets(files, "r1", syn.T0, NAMES), tmp_path / "packets")
    assert (tmp_path / "packets" / "node=h0").is_dir()
    back = ingest.read_table(spark, tmp_path / "packets", PACKETS)
    assert back.columns == list(PACKETS.fieldNames())
    assert back.where(F.col("decoded")).count() == 9


def test_events_table(spark, run_dir):
    lines = ingest.read_event_lines(spark, sorted((run_dir / "events").glob("*.jsonl")))
    events = ingest.parse_events(lines, "r1", syn.T0)
    assert [(f.name, f.dataType) for f in events.schema] == [(f.name, f.dataType) for f in EVENTS]
    assert events.count() == sum(len(v) for v in syn.EVENTS.values())
    crash = events.where(F.col("op") == "crash").select("source", "node", "t_s", "actual_s", "targets").collect()
    assert [tuple(r) for r in crash] == [("orchestrator.jsonl", "orchestrator", 4.0, 4.0, ["h2"])]
    rc = events.where((F.col("event") == "round_completed") & (F.col("node") == "h1") & (F.col("round") == 0))
    assert [tuple(r) for r in rc.select("level", "via", "steps", "tpr_s", "started_ts").collect()] == [
        ("global", "constructed", 2, 2.0, 1000.0)]
    big = events.where((F.col("event") == "stable") & (F.col("ts") == 1007.0)).select("s").first()
    assert big["s"] == [2**32 - 1, 2]
    bad = [tuple(r) for r in ingest.malformed_events(lines).collect()]
    assert bad == [("h2.jsonl", 1, syn.H2_PARTIAL_LINE)]


def _tasks_of(spark, group: str) -> int:
    st = spark.sparkContext.statusTracker()
    return sum(st.getStageInfo(s).numTasks for j in st.getJobIdsForGroup(group) for s in st.getJobInfo(j).stageIds
               if st.getStageInfo(s) is not None)


def test_ingest_reads_each_pcap_once_and_returns_the_scan(spark, run_dir, tmp_path):
    """One pass: the packets table and the per-file scan come from the same read (one job of a task per core, each
    reading its share of the pcaps once; before, a scan job and a parse job each read every file), and the scan is
    `scan_captures`'."""
    caps = captures(run_dir)
    scanned = [r.asDict() for r in ingest.scan_captures(ingest.files_frame(spark, caps)).collect()]
    spark.sparkContext.setJobGroup("h7-one-pass", "ingest")
    try:
        rows = ingest.ingest_packets(spark, caps, "r1", syn.T0, NAMES, tmp_path / "packets")
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    assert _tasks_of(spark, "h7-one-pass") == min(len(caps), spark.sparkContext.defaultParallelism)
    assert rows == sorted(scanned, key=lambda r: [c.file for c in caps].index(r["file"]))
    assert [r["packets"] for r in rows] == [12, 13, 2, 0]
    back = ingest.read_table(spark, tmp_path / "packets", PACKETS)
    assert back.count() == 27


def test_packets_are_decoded_into_arrow_batches(spark, run_dir):
    """The pcaps are decoded on the executors into Arrow record batches (mapInArrow), not Python rows turned into
    a DataFrame."""
    packets = ingest.parse_packets(ingest.files_frame(spark, captures(run_dir)), "r1", syn.T0, NAMES)
    plan = packets._jdf.queryExecution().executedPlan().toString()
    assert "MapInArrow" in plan and "ExistingRDD" not in plan.split("MapInArrow")[0]


def test_tables_open_in_pandas(spark, run_dir, tmp_path):
    """pyarrow and pandas are in the venv: a user opens the Parquet tables as they are written."""
    import pandas as pd  # a dependency (pyproject.toml): failing to import it is a failure
    ingest.ingest_packets(spark, captures(run_dir), "r1", syn.T0, NAMES, tmp_path / "packets")
    df = pd.read_parquet(tmp_path / "packets")
    assert set(df.columns) == set(PACKETS.fieldNames()) and len(df) == 27
    assert df.groupby("node", observed=True).size().to_dict() == {"h0": 12, "h1": 13, "h2": 2}


def test_file_bins_balance_bytes_over_the_tasks():
    assert ingest.file_bins([10, 1, 1, 1, 9], 2) == [0, 1, 0, 1, 1]        # 10+1 | 9+1+1: 11 and 11 bytes
    assert ingest.file_bins([5] * 4, 2) == [0, 1, 0, 1]
    assert ingest.file_bins([3], 4) == [0] and ingest.file_bins([], 2) == []
