"""QSM's analysis transforms on hand-made event rows: every expected number is worked out in the comments."""
from __future__ import annotations

import json

import pytest

from analysis.protocols import qsm

pytestmark = pytest.mark.spark


def ev(node: str, event: str, ts: float, seq=None, origin=None, **fields):
    rec = {"ts": ts, "node": node, "event": event, **fields}
    if seq is not None:
        rec["seq"] = seq
    if origin is not None:
        rec["origin"] = origin
    return (node, event, ts, ts - 1000.0, seq, origin, json.dumps(rec))


@pytest.fixture
def frames(spark):
    # groups: a = h0, h1, h2; b = h2, h3. h0 sends 2 messages into a, h3 sends 1 into b.
    rows = [
        ev("h0", "data_sent", 1000.2, 1, group_name="a"), ev("h0", "data_sent", 1001.2, 2, group_name="a"),
        ev("h3", "data_sent", 1000.5, 1, group_name="b"),
        # a: h1 gets both, h2 only seq 1 -> 3 of 4; b: h2 gets it -> 1 of 1
        ev("h1", "data_received", 1000.3, 1, 0), ev("h1", "data_received", 1001.3, 2, 0),
        ev("h2", "data_received", 1000.3, 1, 0), ev("h2", "data_received", 1000.6, 1, 3),
        # h1 recovered seq 2 by pull after 0.4 s; h2 recovered h3's 1 by push after 0.2 s
        ev("h1", "recovered", 1001.3, 2, 0, how="pull", latency=0.4),
        ev("h2", "recovered", 1000.6, 1, 3, how="push", latency=0.2),
        # h0's ACKs: 2 packets, latencies 0.5 + 0.7; h3: 1 packet, 0.3
        ev("h0", "ack_received", 1002.0, region="r-a", acked=2, latency_sum=1.2, latency_max=0.7),
        ev("h3", "ack_received", 1002.0, region="r-b", acked=1, latency_sum=0.3, latency_max=0.3),
        ev("h0", "ack_received", 1003.0, region="r-a", acked=0, latency_sum=0.0, latency_max=None),
        ev("h0", "token_round", 1002.0, region="r-a", duration=0.1),
        ev("h0", "token_round", 1003.0, region="r-a", duration=0.3),
    ]
    events = spark.createDataFrame(rows, "node string, event string, ts double, t_s double, seq long, "
                                         "origin long, raw string")
    members = spark.createDataFrame([(i, f"h{i}", None, None) for i in range(4)],
                                    "member_id int, member string, sender_index int, local_group int")
    groups = qsm.group_table(spark, {"groups": [{"name": "a", "members": ["h0", "h1", 2]},
                                                {"name": "b", "members": ["h2", "h3"]}]},
                             [(i, f"h{i}") for i in range(4)])
    return events, members, groups


def test_delivery_per_group(frames):
    events, members, groups = frames
    rows = {(r["sender"], r["group_name"]): r.asDict()
            for r in qsm.delivery_per_group(events, groups, members).collect()}
    assert rows[("h0", "a")] == {"sender": "h0", "group_name": "a", "messages": 2, "expected": 4, "received": 3,
                                 "delivery_ratio": 0.75}
    assert rows[("h3", "b")]["expected"] == 1 and rows[("h3", "b")]["received"] == 1


def test_throughput_recovery_ack_and_token(frames):
    events, _, _ = frames
    tp = {r["sender"]: r.asDict() for r in qsm.throughput(events).collect()}
    assert tp["h0"]["messages"] == 2 and tp["h0"]["rate_per_s"] == pytest.approx(1.0)   # 1 interval in 1 s
    assert tp["h3"]["rate_per_s"] is None
    rec = {r["how"]: r.asDict() for r in qsm.recovery(events).collect()}
    assert rec["pull"]["recovered"] == 1 and rec["pull"]["latency_mean_s"] == pytest.approx(0.4)
    assert rec["push"]["latency_max_s"] == pytest.approx(0.2)
    ack = {r["sender"]: r.asDict() for r in qsm.ack_latency(events).collect()}
    assert ack["h0"]["acked"] == 2 and ack["h0"]["latency_mean_s"] == pytest.approx(0.6)
    assert ack["h0"]["latency_max_s"] == pytest.approx(0.7) and ack["h0"]["acks"] == 2
    tok = qsm.token_rounds(events).collect()
    assert tok[0]["rounds"] == 2 and tok[0]["duration_mean_s"] == pytest.approx(0.2)


def test_rate_samples_leave_out_partial_seconds(spark):
    # h0 sends at t_s 0.5, 1.1, 1.6, 3.2, 4.9: whole seconds 1..3 -> 2, 0, 1 (seconds 0 and 4 are partial)
    rows = [ev("h0", "data_sent", 1000.0 + t, i + 1, group_name="a") for i, t in enumerate((0.5, 1.1, 1.6, 3.2, 4.9))]
    events = spark.createDataFrame(rows, "node string, event string, ts double, t_s double, seq long, "
                                         "origin long, raw string")
    samples = qsm.rate_samples(events)
    assert [(r["second"], r["messages"]) for r in samples.collect()] == [(1, 2), (2, 0), (3, 1)]
    (v,) = qsm.rate_variability(samples).collect()
    assert v["mean_per_s"] == pytest.approx(1.0) and v["std_per_s"] == pytest.approx(1.0)


def test_summary_weights():
    data = {"delivery": [{"expected": 4, "received": 3, "messages": 2}, {"expected": 1, "received": 1,
                                                                          "messages": 1}],
            "recovery": [{"recovered": 1, "latency_mean_s": 0.4, "latency_max_s": 0.4},
                         {"recovered": 3, "latency_mean_s": 0.2, "latency_max_s": 0.3}],
            "receipts": 8,
            "overhead": [{"type_name": "DATA", "packets": 6, "bytes": 600},
                         {"type_name": "TOKEN", "packets": 2, "bytes": 100},
                         {"type_name": "FORWARD", "packets": 2, "bytes": 300}],
            "ack": [{"acked": 2, "latency_mean_s": 0.6, "latency_max_s": 0.7}], "variability": [], "token": []}
    s = qsm.Qsm().summary(None, data)
    assert s["qsm_delivery_ratio"] == pytest.approx(0.8)
    assert s["recovery_rate"] == pytest.approx(0.5)
    assert s["recovery_latency_mean_s"] == pytest.approx((0.4 + 0.6) / 4)
    assert s["control_packets_fraction"] == pytest.approx(0.4)
    assert s["control_bytes_fraction_qsm"] == pytest.approx(0.4)
    assert s["ack_latency_mean_s"] == pytest.approx(0.6)


def test_overhead_counts_a_multicast_datagram_once(spark):
    # h0 multicasts DATA seq 1 to 239.1.0.1: captured leaving by mc0 and by h0-eth0 (2 frames, 1 message);
    # the same seq to 239.1.0.2 (another region): 1 more; a TOKEN over TCP twice (two rounds), a PULL; h1 forwards
    # the DATA (direction fwd: not counted)
    rows = [("h0", "out", "mcast", "239.1.0.1", "DATA", 0, 1, 91), ("h0", "out", "mcast", "239.1.0.1", "DATA", 0, 1, 91),
            ("h0", "out", "mcast", "239.1.0.2", "DATA", 0, 1, 91), ("h0", "out", "tcp", "10.0.0.2", "TOKEN", 0, None, 40),
            ("h0", "out", "tcp", "10.0.0.2", "TOKEN", 0, None, 40), ("h1", "out", "tcp", "10.0.0.1", "PULL", 1, None, 16),
            ("h1", "fwd", "mcast", "239.1.0.1", "DATA", 0, 1, 91)]
    packets = spark.createDataFrame(
        [(n, d, t, dst, ty, snd, seq, ln, "qsm", True) for n, d, t, dst, ty, snd, seq, ln in rows],
        "node string, direction string, transport string, ip_dst string, type_name string, sender int, seq long, "
        "length int, protocol_name string, decoded boolean")
    got = {r["type_name"]: (r["packets"], r["bytes"]) for r in qsm.overhead(packets).collect()}
    assert got == {"DATA": (2, 200), "TOKEN": (2, 98), "PULL": (1, 25)}
