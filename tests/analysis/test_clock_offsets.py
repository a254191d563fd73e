"""Real hosts: per-node clock offsets from manifest.json put every event and packet on the controller's clock."""
from __future__ import annotations

import json

import pytest

from analysis import ingest, rundir
from analysis.pcap import CaptureFile, packet_rows
from tests.analysis import synthetic


def test_packet_rows_subtract_the_hosts_offset(tmp_path):
    f = synthetic.write_pcap(tmp_path / "h1-any.pcap", 113,
                             [(1000.5, synthetic.sll(synthetic.udp("10.0.0.1", "10.0.0.2", synthetic.live(0, 1))))])
    cap = CaptureFile("h1", "any", str(f), "pcaps/h1-any.pcap", "10.0.0.1")
    plain = list(packet_rows(cap, "r", 1000.0, {}))
    shifted = list(packet_rows(cap, "r", 1000.0, {}, clock_offset_s=0.25))
    ts_i = 5                                  # run_id, node, interface, file, n, ts, t_s, ...
    assert plain[0][ts_i] == pytest.approx(1000.5) and plain[0][ts_i + 1] == pytest.approx(0.5)
    assert shifted[0][ts_i] == pytest.approx(1000.25) and shifted[0][ts_i + 1] == pytest.approx(0.25)


def test_rundir_reads_offsets(tmp_path):
    d = synthetic.make_run(tmp_path)
    m = json.loads((d / "manifest.json").read_text())
    assert rundir.load(d).clock_offsets == {}
    m["clock_offsets_s"] = {"h1": 0.5, "h2": -0.25}
    (d / "manifest.json").write_text(json.dumps(m))
    assert rundir.load(d).clock_offsets == {"h1": 0.5, "h2": -0.25}


@pytest.mark.spark
def test_events_are_corrected_per_node(spark):
    lines = spark.createDataFrame([(json.dumps({"ts": 1010.0, "node": n, "event": "node_started"}), f"{n}.jsonl")
                                   for n in ("h1", "h2", "orchestrator")], "value string, source string")
    rows = {r["node"]: r for r in ingest.parse_events(lines, "r", 1000.0, {"h1": 0.5, "h2": -0.25}).collect()}
    assert rows["h1"]["t_s"] == pytest.approx(9.5) and rows["h1"]["ts"] == pytest.approx(1009.5)
    assert rows["h2"]["t_s"] == pytest.approx(10.25)
    assert rows["orchestrator"]["t_s"] == pytest.approx(10.0)          # the controller's own clock
    plain = {r["node"]: r["t_s"] for r in ingest.parse_events(lines, "r", 1000.0).collect()}
    assert plain == {"h1": 10.0, "h2": 10.0, "orchestrator": 10.0}
