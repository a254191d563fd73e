"""QSM's analysis transforms on hand-made event rows: every expected number is worked out in the comments."""
from __future__ import annotations

import json
import statistics

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
        # h1 crashed at the end (after its receipts): none is expected of it (run_values' rule too)
        ev("orchestrator", "action_applied", 1001.5, op="crash", targets=["h1"], actual_s=1.5),
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
    # a: h1 crashed, so only h2's two receipts are expected, of which it logged 1
    assert rows[("h0", "a")] == {"sender": "h0", "group_name": "a", "messages": 2, "expected": 2, "received": 1,
                                 "delivery_ratio": 0.5}
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


def spark_numbers(data: dict) -> dict:
    """The numbers run_values also gives, from the plug-in's Spark tables (`metrics`' collected rows: delivery,
    variability, recovery, ack, token) — what its summary computed before issue #38. Shared with
    tests/integration/test_qsm_values_spark.py."""
    dl, rec, ack = data.get("delivery") or [], data.get("recovery") or [], data.get("ack") or []
    exp, n_rec, timed = (sum(r["expected"] for r in dl), sum(r["recovered"] for r in rec),
                         sum(r["timed"] for r in rec))
    acked = sum(r["acked"] or 0 for r in ack)
    stds = [r["std_per_s"] for r in data.get("variability") or [] if r["std_per_s"] is not None]
    return {
        "qsm_delivery_ratio": sum(r["received"] for r in dl) / exp if exp else None,
        "qsm_messages": sum(r["messages"] for r in dl), "recovered": n_rec,
        "recovered_by": {r["how"]: r["recovered"] for r in rec},
        "recovery_latency_mean_s": sum(r["latency_mean_s"] * r["timed"] for r in rec if r["timed"]) / timed
        if timed else None,
        "recovery_latency_max_s": max((r["latency_max_s"] for r in rec if r["latency_max_s"] is not None),
                                      default=None),
        "ack_latency_mean_s": sum(r["latency_mean_s"] * r["acked"] for r in ack if r["acked"]) / acked
        if acked else None,
        "ack_latency_max_s": max((r["latency_max_s"] for r in ack if r["latency_max_s"] is not None), default=None),
        "rate_std_per_s_mean": statistics.fmean(stds) if stds else None,
        "token_rounds": sum(r["rounds"] for r in data.get("token") or []),
    }


def assert_same(ours: dict, theirs: dict) -> None:
    for k, v in theirs.items():
        if isinstance(v, float):
            assert ours[k] == pytest.approx(v, rel=1e-9, abs=1e-12), k
        else:
            assert ours[k] == v, k


def frames_of(spark, log: list[dict], run):
    """A run directory's log (test_qsm_values.py's) as the Spark frames the transforms take: events, members,
    groups."""
    from tests.analysis.test_qsm_values import T0

    rows = [(x["node"], x["event"], x["ts"], x["ts"] - T0, x.get("seq"), x.get("origin"), json.dumps(x)) for x in log]
    events = spark.createDataFrame(rows, "node string, event string, ts double, t_s double, seq long, "
                                         "origin long, raw string")
    members = spark.createDataFrame([(m.id, m.name, None, None) for m in run.members],
                                    "member_id int, member string, sender_index int, local_group int")
    return events, members, qsm.group_table(spark, run.params, [(m.id, m.name) for m in run.members])


def test_run_values_equal_the_spark_tables_on_one_log(spark, tmp_path):
    """The hand-made log of test_qsm_values.py as a run directory (run_values) and as Spark rows (the transforms)."""
    from analysis.rundir import load
    from tests.analysis.test_qsm_values import one_sender_log, qsm_run

    log = one_sender_log()
    run = load(qsm_run(tmp_path, log))
    ours = qsm.PLUGIN.run_values(run)
    events, members, groups = frames_of(spark, log, run)
    samples = qsm.rate_samples(events)
    data = {k: [r.asDict() for r in df.collect()] for k, df in (
        ("delivery", qsm.delivery_per_group(events, groups, members)), ("variability", qsm.rate_variability(samples)),
        ("recovery", qsm.recovery(events)), ("ack", qsm.ack_latency(events)), ("token", qsm.token_rounds(events)))}
    assert_same(ours, spark_numbers(data))
    # one sender into one group: its (n - 1) / span and its 1 s samples are run_values' over all sends
    (tp,) = qsm.throughput(events).collect()
    assert ours["throughput_all"] == pytest.approx(tp["rate_per_s"])
    assert ours["rate_series"] == [r["messages"] for r in samples.collect()]


def test_a_joiners_delivery_is_the_same_in_spark(spark, tmp_path):
    """test_qsm_values.joiners_log (joiners h2 and h3, h2 added by view 1): the Spark delivery table expects what
    run_values expects, 5 of 6."""
    from analysis.rundir import load
    from tests.analysis.test_qsm_values import joiners_log, qsm_run

    log = joiners_log()
    run = load(qsm_run(tmp_path, log, n=4, joiners=["h2", "h3"]))
    events, members, groups = frames_of(spark, log, run)
    (row,) = qsm.delivery_per_group(events, groups, members, ["h2", "h3"]).collect()
    assert (row["expected"], row["received"]) == (6, 5)
    assert row["delivery_ratio"] == pytest.approx(qsm.PLUGIN.run_values(run)["delivery"])


def test_a_restarted_members_delivery_is_the_same_in_spark(spark, tmp_path):
    """test_qsm_values.rejoin_log (h2 crashed, restarted and added back by view 2; h3 added back, then crashed
    again): the Spark delivery table expects what run_values expects, 8 of 9."""
    from analysis.rundir import load
    from tests.analysis.test_qsm_values import qsm_run, rejoin_log

    log = rejoin_log()
    run = load(qsm_run(tmp_path, log, n=4))
    events, members, groups = frames_of(spark, log, run)
    (row,) = qsm.delivery_per_group(events, groups, members).collect()
    assert (row["expected"], row["received"]) == (9, 8)
    assert row["delivery_ratio"] == pytest.approx(qsm.PLUGIN.run_values(run)["delivery"])


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
