"""The pbcast / vsync / tradvsync Spark transforms on hand-made event tables: the report's tables (Figure 1's
throughput windows per member, vsync's Gseq latency, waves and view changes, the load by type). The run's numbers
are run_values' (tests/analysis/test_pbcast_values.py)."""
from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.spark

COLS = "ts node event origin seq action targets raw".split()


def ev(ts, node, event, origin=None, seq=None, action=None, targets=None, **extra):
    raw = {"ts": ts, "node": node, "event": event, **({"origin": origin, "seq": seq} if seq is not None else {}),
           **extra}
    return (float(ts), node, event, origin, seq, action, targets, json.dumps(raw))


def frames(spark, rows, n=4, senders=("h0",)):
    events = spark.createDataFrame(rows, "ts double, node string, event string, origin long, seq long, "
                                         "action string, targets array<string>, raw string")
    members = spark.createDataFrame([(i, f"h{i}", 0 if f"h{i}" in senders else None) for i in range(n)],
                                    "member_id int, member string, sender_index int")
    return events, members


def test_throughput_windows(spark):
    """The report's per-member throughput tables (the numbers are run_values': tests/analysis/test_pbcast_values.py,
    and test_figures_pbcast.py checks the two agree on one log)."""
    from analysis.protocols.pbcast import throughput, throughput_summary, workload_span
    rows = [ev(0, f"h{i}", "node_started") for i in range(4)]
    rows += [ev(1 + s / 10, "h0", "data_sent", seq=s) for s in range(1, 11)]
    for s in range(1, 11):            # 1..8 reach everyone, 9 reaches one member, 10 nobody
        for r in (["h1", "h2", "h3"] if s <= 8 else ["h1"] if s == 9 else []):
            rows.append(ev(1.05 + s / 10, r, "data_received", origin=0, seq=s))
    events, _members = frames(spark, rows)
    assert workload_span(events) == (pytest.approx(1.1), pytest.approx(2.0))
    win = throughput(events, 1.0, 2.0, 0.5).where("node = 'h2'").orderBy("window").collect()
    assert [(r["window"], r["deliveries"], r["rate_per_s"]) for r in win] == [(0, 4, 8.0), (1, 4, 8.0)]
    summ = {r["node"]: r for r in throughput_summary(throughput(events, 1.0, 2.0, 0.5)).collect()}
    # h1 also got seq 9 (at 1.95): 4 + 5 deliveries in the two windows; h0 (the sender) none
    assert summ["h1"]["mean_per_s"] == 9.0 and summ["h1"]["windows"] == 2 and summ["h0"]["mean_per_s"] == 0.0
    assert summ["h2"]["min_per_s"] == summ["h2"]["max_per_s"] == 8.0


def test_vsync_waves_and_views(spark):
    from analysis.protocols.vsync import delivery_waves, gseq_latency, view_changes
    rows = []
    for g in (1, 2):
        rows.append(ev(10 + g, "h0", "data_received", origin=3, seq=g, gseq=g))
        rows.append(ev(10.5 + g, "h1", "pbcast_received", gseq=g))
        rows.append(ev(10.7 + g, "h1", "data_received", origin=3, seq=g, gseq=g))
    rows.append(ev(20, "h0", "view_change_decided", view=1, duration_s=1.0, acks=2, members=3, dropped=[2]))
    rows += [ev(20.1, h, "view_installed", view=1) for h in ("h0", "h1", "h3")]
    events, _members = frames(spark, rows)
    w = {r["node"]: r for r in delivery_waves(events, "h0").collect()}
    assert w["h1"]["lag_leader_mean_s"] == pytest.approx(0.7) and w["h1"]["lag_pbcast_max_s"] == pytest.approx(0.2)
    (v,) = view_changes(events).collect()
    assert (v["view"], v["duration_s"], v["acks"], v["installed_at"], v["dropped"]) == (1, 1.0, 2, 3, "[2]")
    lat = [ev(30, "h3", "own_delivered", seq=s, latency_s=x) for s, x in ((1, 0.002), (2, 0.004), (3, None))]
    lat += [ev(30, "h3", "gseq_acked", seq=1, latency_s=0.001)]
    events, _members = frames(spark, lat)
    g = {r["event"]: r for r in gseq_latency(events).collect()}
    # the multicasts with a latency (own_delivered of seq 3 has none): as run_values' own_n
    assert g["own_delivered"]["messages"] == 2 and g["own_delivered"]["mean_s"] == pytest.approx(0.003)
    assert g["gseq_acked"]["max_s"] == pytest.approx(0.001)


def test_load_by_type_counts_a_datagram_once(spark):
    """A multicast P_DATA leaves h1 by three links (three captured copies, microseconds apart): one sent; two
    distinct digests (different rounds) stay two."""
    from analysis.protocols.pbcast import load_by_type
    cols = ("node string, direction string, ip_src string, ip_dst string, src_port int, dst_port int, "
            "type_name string, sender int, seq long, round long, length int, ts double, decoded boolean")
    base = ("h1", "out", "10.0.0.2", "239.1.8.1", 7000, 7001, "P_DATA", 1, 5, 0, 300)
    rows = [(*base, 100.0 + i * 1e-5, True) for i in range(3)]
    rows += [("h1", "out", "10.0.0.2", "10.0.0.3", 7000, 7000, "P_DIGEST", 1, None, r, 20, 100.2, True)
             for r in (7, 8)]
    packets = spark.createDataFrame(rows, cols)
    life = spark.createDataFrame([("h1", 90.0, 110.0)], "member string, started_ts double, end_ts double")
    got = {r["type_name"]: (r["sent"], r["sent_per_s"]) for r in load_by_type(packets, life).collect()}
    assert got == {"P_DATA": (1, 0.05), "P_DIGEST": (2, 0.1)}
