"""The metrics every protocol gets (analysis.metrics), on the synthetic `direct` runs and the GSGC run, against
values worked out by hand from tests/analysis/synthetic.py; the whole application on a direct run; a comparison
of runs of two protocols."""
from __future__ import annotations

import csv
import json

import pytest
from pyspark.sql import functions as F

from analysis import ingest, metrics
from analysis.cli import main
from analysis.rundir import load
from tests.analysis import synthetic as syn

pytestmark = pytest.mark.spark


def approx_rows(expected):
    return [tuple(pytest.approx(v) if isinstance(v, float) else v for v in row) for row in expected]


def tables(spark, run):
    packets = ingest.parse_packets(ingest.files_frame(spark, run.captures), run.run_id, run.t0, run.addresses(),
                                   ports=run.ports)
    lines = ingest.read_event_lines(spark, run.event_logs)
    events = ingest.parse_events(lines, run.run_id, run.t0)
    members = metrics.members_frame(spark, run.members)
    crash = metrics.crashes(events, run.t0)
    life = metrics.lifetimes(events, members, crash, run.end)
    return packets, events, members, life


@pytest.fixture(scope="module")
def direct_udp(spark, tmp_path_factory):
    run = load(syn.make_direct_run(tmp_path_factory.mktemp("d"), "udp"))
    packets, events, members, life = tables(spark, run)
    return run, packets.cache(), events.cache(), members, life.cache()


def test_delivery_per_message(direct_udp):
    _, _, events, members, life = direct_udp
    rec = metrics.receipts(events, members, life)
    got = [tuple(r) for r in metrics.delivery(rec).select(
        "origin", "seq", "members", "received", "delivery_ratio", "latency_mean_s", "latency_max_s").collect()]
    # h0/1 at 1001.0: h3 (started 1001.2) does not count: h1, h2 received. h0/2: h1, h2 of h1, h2, h3. h0/3 at
    # 1003.0: h2 crashed at 1002.75 and does not count. h1's: h0, h2, h3 each time.
    assert got == approx_rows([
        ("h0", 1, 2, 2, 1.0, 0.015, 0.020), ("h0", 2, 3, 2, 2 / 3, 0.030, 0.050), ("h0", 3, 2, 2, 1.0, 0.025, 0.040),
        ("h1", 1, 3, 3, 1.0, 0.020, 0.030), ("h1", 2, 3, 3, 1.0, 0.110 / 3, 0.060)])


def test_delivery_summary_and_latency_distribution(direct_udp):
    _, _, events, members, life = direct_udp
    rec = metrics.receipts(events, members, life)
    (s,) = [r.asDict() for r in metrics.delivery_summary(metrics.delivery(rec), rec).collect()]
    # 12 latencies: 0.01 x4, 0.02 x3, 0.03 x2, 0.04, 0.05, 0.06 (sum 0.31); median (idx 5.5) 0.02, p90 (idx 9.9)
    # 0.04 + 0.9 * 0.01, p99 (idx 10.89) 0.05 + 0.89 * 0.01. Ratios 1, 2/3, 1, 1, 1.
    assert s == pytest.approx({"messages": 5, "complete": 4, "delivery_ratio_mean": 14 / 15,
                               "delivery_ratio_min": 2 / 3, "receipts_expected": 13, "receipts": 12,
                               "latency_mean_s": 0.31 / 12, "latency_median_s": 0.02, "latency_p90_s": 0.049,
                               "latency_p99_s": 0.0589, "latency_max_s": 0.06})
    q = {r["quantile"]: r["latency_s"] for r in metrics.latency_quantiles(rec).collect()}
    assert q[0.0] == pytest.approx(0.01) and q[0.5] == pytest.approx(0.02) and q[1.0] == pytest.approx(0.06)
    assert q[0.25] == pytest.approx(0.01) and q[0.75] == pytest.approx(0.0325)   # idx 2.75; 8.25: .03 + .25 * .01


@pytest.mark.parametrize("transport, messages", [("udp", 15), ("tcp", 15), ("mcast", 5)])
def test_traffic_by_message_type_of_direct(spark, tmp_path, transport, messages):
    run = load(syn.make_direct_run(tmp_path, transport))
    packets, _, _, life = tables(spark, run)
    rows = [r.asDict() for r in metrics.traffic_by_message_type(packets, life).collect()]
    # sent (direction out): h0 3 and h1 2 messages of 50 bytes, a copy per other member (udp, tcp) or one
    # datagram each (mcast); lifetimes 10 + 10 + 2.75 (h2, crashed) + 8.8 (h3, started at 1001.2) = 31.55 s
    assert rows == [pytest.approx({"protocol_name": "direct", "type_name": "DATA", "data": True,
                                   "messages": messages, "bytes": 50 * messages,
                                   "msgs_per_member_s": messages / 31.55, "bytes_per_member_s": 50 * messages / 31.55})]
    assert metrics.control_overhead(rows) == {"messages": messages, "bytes": 50 * messages, "control_messages": 0,
                                              "control_bytes": 0, "control_msgs_fraction": 0.0,
                                              "control_bytes_fraction": 0.0}


def test_traffic_by_message_type_and_overhead_of_gsgc(spark, tmp_path):
    run = load(syn.make_run(tmp_path))
    packets, _, _, life = tables(spark, run)
    rows = [(r["type_name"], r["data"], r["messages"], r["bytes"], r["msgs_per_member_s"])
            for r in metrics.traffic_by_message_type(packets, life).collect()]
    # decoded sends: h0 4 GOSSIP (38 B) + 2 LIVE (23 B); h1 2 DATA (49 B) + 3 GOSSIP; h2 1 LIVE + 1 GOSSIP. h3 has
    # no capture: member-seconds of h0, h1, h2 = 10 + 10 + 3.75.
    assert rows == approx_rows([("DATA", True, 2, 98, 2 / 23.75), ("GOSSIP", False, 8, 304, 8 / 23.75),
                                ("LIVE", False, 3, 69, 3 / 23.75)])
    o = metrics.control_overhead([dict(zip(("type_name", "data", "messages", "bytes"), r)) for r in rows])
    assert (o["control_messages"], o["messages"], o["control_bytes"], o["bytes"]) == (11, 13, 373, 471)
    series = metrics.throughput_timeseries(packets, 1.0).select("t_bin_s", "data", "msgs", "bytes").collect()
    # t = 1.1, 1.2, 1.3 (h1's DATA), 1.6 | 2.1, 2.2, 2.3 | 3.1, 3.2, 3.3 (DATA) | 4.1, 4.2, 4.3 (h1's GOSSIPs)
    assert [tuple(r) for r in series] == [(1.0, False, 3, 99), (1.0, True, 1, 49), (2.0, False, 3, 99),
                                          (3.0, False, 2, 61), (3.0, True, 1, 49), (4.0, False, 3, 114)]


def test_a_direct_run_end_to_end_and_a_comparison_of_two_protocols(spark, tmp_path, capsys):
    direct = syn.make_direct_run(tmp_path, "tcp")
    gsgc = syn.make_run(tmp_path)
    cmp = tmp_path / "cmp"
    assert main([str(direct), str(gsgc), "--out", str(cmp)]) == 0
    s = json.loads((direct / "analysis" / "metrics" / "summary.json").read_text())
    assert (s["protocol"], s["transport"], s["members"], s["data_messages"], s["delivered_complete"]) == (
        "direct", "tcp", 4, 5, 4)
    assert s["delivery_ratio_mean"] == pytest.approx(14 / 15) and s["latency_median_s"] == pytest.approx(0.02)
    assert (s["control_bytes_fraction"], s["messages_sent"], s["bytes_sent"]) == (0.0, 15, 750)
    assert "tpr_mean_s" not in s
    report = (direct / "report.md").read_text()
    assert "direct: transport tcp" in report and "## Delivery" in report and "## Time per round" not in report
    assert sorted(p.name for p in (direct / "analysis" / "figures").glob("*.png")) == ["messages.png",
                                                                                      "timeline.png"]
    g = json.loads((gsgc / "analysis" / "metrics" / "summary.json").read_text())
    assert g["protocol"] == "gsgc" and g["tpr_mean_s"] == 2.5          # old-format configs: still GSGC
    with open(cmp / "comparison.csv") as f:
        rows = {r["run_id"]: r for r in csv.DictReader(f)}
    assert {k: r["protocol"] for k, r in rows.items()} == {direct.name: "direct", gsgc.name: "gsgc"}
    assert rows[direct.name]["transport"] == "tcp" and rows[gsgc.name]["tpr_mean_s"] == "2.5"
    text = (cmp / "report.md").read_text()
    assert "the runs used different protocols (direct, gsgc)" in text and "TPR against the step interval" in text
    assert (cmp / "tpr_vs_step.csv").exists()


def test_gsgc_gossip_types_are_the_wires_control_types():
    from gossipnode import wire

    from analysis.protocols.gsgc import DATA_TYPES, GOSSIP_TYPES

    codec = wire.BY_NAME["gsgc"]
    assert set(DATA_TYPES) == wire.data_types()["gsgc"]
    assert set(GOSSIP_TYPES) | set(DATA_TYPES) == {t.name for t in codec.types} - {"NAK"}
