"""The pbcast / vsync / tradvsync analysis transforms on hand-made event tables (Spark): the delivery histogram,
Figure 1's throughput windows, the unperturbed / perturbed split, vsync's waves and view changes."""
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


def test_delivery_histogram_and_throughput(spark):
    from analysis.protocols.pbcast import (common_summary, delivery_fractions, delivery_histogram, disturbed,
                                           throughput, throughput_summary)
    rows = [ev(0, f"h{i}", "node_started") for i in range(4)]
    rows += [ev(1 + s / 10, "h0", "data_sent", seq=s) for s in range(1, 11)]
    for s in range(1, 11):            # 1..8 reach everyone, 9 reaches one member, 10 nobody
        for r in (["h1", "h2", "h3"] if s <= 8 else ["h1"] if s == 9 else []):
            rows.append(ev(1.05 + s / 10, r, "data_received", origin=0, seq=s))
    rows.append(ev(1.5, "orchestrator", "action_applied", action="perturb", targets=["h3"]))
    events, members = frames(spark, rows)
    hist = {float(r["bin"]): r["messages"] for r in delivery_histogram(delivery_fractions(events, members)).collect()}
    assert hist == {1.0: 8, 0.3: 1, 0.0: 1}
    assert [r.asDict() for r in disturbed(events).collect()] == [{"member": "h3", "action": "perturb"}]
    win = throughput(events, 1.0, 2.0, 0.5).where("node = 'h2'").orderBy("window").collect()
    assert [(r["window"], r["deliveries"], r["rate_per_s"]) for r in win] == [(0, 4, 8.0), (1, 4, 8.0)]
    summ = [r.asDict() for r in throughput_summary(throughput(events, 1.0, 2.0, 0.5)).collect()]
    d = {"disturbed": [{"member": "h3", "action": "perturb"}], "senders": ["h0"], "fig1": summ, "per_s": summ,
         "histogram": [{"bin": b, "messages": m} for b, m in hist.items()]}
    s = common_summary(d)
    assert s["unperturbed_members"] == ["h1", "h2"] and s["perturbed_members"] == ["h3"]
    assert s["throughput_unperturbed_per_s"] == 8.5          # median of h1 (9/s: it also got seq 9) and h2 (8/s)
    assert s["delivered_to_all_fraction"] == 0.8


def test_vsync_waves_and_views(spark):
    from analysis.protocols.vsync import delivery_waves, view_changes
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
