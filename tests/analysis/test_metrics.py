"""The generic and the GSGC metrics against values worked out by hand from tests/analysis/synthetic.py (see the comments)."""
from __future__ import annotations

import json

import pytest
from pyspark.sql import functions as F

from analysis import ingest, metrics
from analysis.protocols import gsgc
from analysis.pcap import CaptureFile
from analysis.rundir import Member
from tests.analysis import synthetic as syn

pytestmark = pytest.mark.spark

MEMBERS = [Member(0, "h0", syn.ADDR["h0"], None, None), Member(1, "h1", syn.ADDR["h1"], 1, None),
           Member(2, "h2", syn.ADDR["h2"], None, None), Member(3, "h3", syn.ADDR["h3"], 0, None)]
RUN_END = syn.T0 + 11.0


def rows(df, *columns):
    return [tuple(r) for r in df.select(*columns).collect()]


def approx_rows(expected):
    return [tuple(pytest.approx(v) if isinstance(v, float) else v for v in row) for row in expected]


@pytest.fixture(scope="module")
def events(spark):
    lines = [(json.dumps(e), f"{node}.jsonl") for node, evs in syn.EVENTS.items() for e in evs]
    df = ingest.parse_events(spark.createDataFrame(lines, "value string, source string"), "r", syn.T0).cache()
    yield df
    df.unpersist()


@pytest.fixture(scope="module")
def members(spark):
    return metrics.members_frame(spark, MEMBERS)


@pytest.fixture(scope="module")
def crash(events):
    return metrics.crashes(events, syn.T0)


@pytest.fixture(scope="module")
def life(events, members, crash):
    return metrics.lifetimes(events, members, crash, RUN_END)


@pytest.fixture(scope="module")
def packets(spark, tmp_path_factory):
    d = syn.make_run(tmp_path_factory.mktemp("run"))
    caps = [CaptureFile(n, "any", str(d / "pcaps" / f"{n}-any.pcap"), f"pcaps/{n}-any.pcap", syn.ADDR[n])
            for n in ("h0", "h1", "h2", "h3")]
    df = ingest.parse_packets(ingest.files_frame(spark, caps), "r", syn.T0, {v: k for k, v in syn.ADDR.items()})
    return df.cache()


def test_crashes_and_lifetimes(crash, life):
    assert rows(crash, "member", "crash_ts") == [("h2", 1004.0)]
    # end: the crash, else the last node_stopped, else the run's end.
    assert sorted(rows(life, "member", "started_ts", "crashed_ts", "end_ts")) == [
        ("h0", 1000.0, None, 1010.0), ("h1", 1000.0, None, 1010.0), ("h2", 1000.25, 1004.0, 1004.0),
        ("h3", 1001.25, None, 1009.0)]


def test_tpr_per_round(events, members):
    # Round 0: first start 1000.0 (h0, h1), first constructed completion h1 at 1002.0 with 2 steps; all four
    # members completed it with tpr_s 2.25, 2.0, 2.25, 1.25 (mean 1.9375) and steps 2, 2, 3, 2 (mean 2.25).
    # Round 1: first start 1002.0 (h1 constructed), first constructed completion h0 at 1005.0 with 3 steps (h3's
    # earlier completion was not a construction); h0, h1, h3 completed it: tpr_s 2.75, 3.5, 2.25 (mean 8.5 / 3),
    # steps 3, 3, 2 (mean 8 / 3). Round 2: first start 1004.75 (h3), never completed.
    got = rows(gsgc.tpr(events, members), "level", "group", "round", "started_ts", "constructed_by", "tpr_s",
               "steps", "members_completed", "member_tpr_mean_s", "steps_mean")
    assert got == approx_rows([
        ("global", None, 0, 1000.0, "h1", 2.0, 2, 4, 1.9375, 2.25),
        ("global", None, 1, 1002.0, "h0", 3.0, 3, 3, 8.5 / 3, 8 / 3),
        ("global", None, 2, 1004.75, None, None, None, 0, None, None),
    ])


def test_tpr_summary(events, members):
    # TPR 2.0 and 3.0: mean 2.5, sample std sqrt(0.5); steps 2 and 3 likewise; members' mean of the rounds'
    # means (1.9375 + 8.5 / 3) / 2.
    (got,) = rows(gsgc.tpr_summary(gsgc.tpr(events, members)), "level", "rounds", "rounds_started",
                  "tpr_mean_s", "tpr_std_s", "tpr_min_s", "tpr_max_s", "steps_mean", "steps_std",
                  "member_tpr_mean_s")
    assert got == approx_rows([("global", 2, 3, 2.5, 0.5 ** 0.5, 2.0, 3.0, 2.5, 0.5 ** 0.5, (1.9375 + 8.5 / 3) / 2)])[0]


def test_tpr_of_local_groups_is_per_group(spark):
    evs = []
    for node, group_start, done_at in (("h0", 10.0, 12.0), ("h1", 10.5, 13.0), ("h2", 20.0, 21.0),
                                       ("h3", 20.25, 22.0)):
        evs += [{"ts": group_start, "node": node, "event": "round_started", "level": "local", "round": 0},
                {"ts": done_at, "node": node, "event": "round_completed", "level": "local", "round": 0,
                 "via": "constructed", "steps": 1, "tpr_s": done_at - group_start}]
    events = ingest.parse_events(spark.createDataFrame([(json.dumps(e), "x") for e in evs], "value string, source "
                                                       "string"), "r", 0.0)
    groups = [Member(m.id, m.name, m.address, m.sender_index, 0 if m.id < 2 else 1) for m in MEMBERS]
    got = rows(gsgc.tpr(events, metrics.members_frame(spark, groups)), "level", "group", "round", "tpr_s")
    # group 0: 12.0 - 10.0; group 1: 21.0 - 20.0 (pooled, it would be 12.0 - 10.0 for one round).
    assert got == [("local", 0, 0, 2.0), ("local", 1, 0, 1.0)]


def test_time_to_stable(events, members, life):
    # h1 seq 1 (S[1]), sent 1001.0: h3 started later and does not count; h0, h1, h2 reached it at 1002.0,
    #   1002.25, 1002.5 -> 1.5 s. (h1's local array at 1003.0 is not global S.)
    # h1 seq 2, sent 1003.0: h0 1005.0, h1 1005.5, h3 1005.25; h2 never, but it crashed at 1004.0 -> 2.5 s.
    # h1 seq 3, sent 1006.0: h2 crashed before and does not count; nobody reached 3 -> never stable.
    # h3 seq 1 (S[0]), sent 1001.5: h0 1005.0, h1 1005.5, h2 1002.5, h3 1005.25 -> 4.0 s.
    tts = gsgc.time_to_stable(events, members, life)
    assert rows(tts, "origin", "origin_id", "seq", "sent_ts", "members", "members_reached", "stable_ts",
                "time_to_stable_s") == approx_rows([
                    ("h1", 1, 1, 1001.0, 3, 3, 1002.5, 1.5),
                    ("h1", 1, 2, 1003.0, 4, 4, 1005.5, 2.5),
                    ("h1", 1, 3, 1006.0, 3, 0, None, None),
                    ("h3", 3, 1, 1001.5, 4, 4, 1005.5, 4.0)])
    # 1.5, 2.5, 4.0: mean 8/3, median 2.5, p90 (linear) 2.5 + 0.8 * 1.5 = 3.7.
    (summary,) = rows(gsgc.time_to_stable_summary(tts), "messages", "stable", "mean_s", "median_s", "p90_s",
                      "max_s")
    assert summary == approx_rows([(4, 3, 8 / 3, 2.5, 3.7, 4.0)])[0]


def test_failure_detection(events, members, crash, life):
    # h2 crashed at 1004.0. Observers h0, h1, h3. h0's declaration at 1003.0 came before the crash; its next at
    # 1006.0 (2.0 s). h1 at 1006.5 (2.5 s; its second at 1007.0 is not the first). h3 never declared h2.
    fd = gsgc.failure_detection(events, members, crash, life)
    assert rows(fd, "member", "member_id", "crash_ts", "observer", "declared_ts", "latency_s") == approx_rows([
        ("h2", 2, 1004.0, "h0", 1006.0, 2.0), ("h2", 2, 1004.0, "h1", 1006.5, 2.5),
        ("h2", 2, 1004.0, "h3", None, None)])
    assert rows(gsgc.failure_detection_summary(fd), "member", "observers", "detected", "min_s", "median_s",
                "mean_s", "max_s") == approx_rows([("h2", 3, 2, 2.0, 2.25, 2.25, 2.5)])


def test_false_declarations(events, members, crash):
    # h0 declared h2 at 1003.0 (h2 crashed at 1004.0); h3 declared h1, which never crashed.
    assert rows(gsgc.false_declarations(events, members, crash), "member", "declarations", "observers") == [
        ("h1", 1, 1), ("h2", 1, 1)]


def test_traffic_per_member(packets, life):
    # h0 sent 4 GOSSIP (38 B) + 2 LIVE (23 B) = 6 msgs, 198 B in 10 s; received 2 DATA + 1 GOSSIP; 3 undecodable.
    # h1 sent 2 DATA (49 B) + 3 GOSSIP (114 B) in 10 s; received 4 GOSSIP + 2 LIVE; 2 undecodable.
    # h2 sent LIVE + GOSSIP (61 B) in 3.75 s (1000.25 to its crash at 1004.0). h3 has no capture.
    got = rows(gsgc.traffic_per_member(packets, life), "node", "lifetime_s", "gossip_msgs", "gossip_bytes",
               "gossip_msgs_per_s", "gossip_bytes_per_s", "data_msgs", "data_bytes", "sent_msgs", "received_msgs",
               "undecodable")
    assert got == approx_rows([
        ("h0", 10.0, 6, 198, 0.6, 19.8, 0, 0, 6, 3, 3),
        ("h1", 10.0, 3, 114, 0.3, 11.4, 2, 98, 5, 6, 2),
        ("h2", 3.75, 2, 61, 2 / 3.75, 61 / 3.75, 0, 0, 2, 0, 0)])


def test_traffic_by_type_and_timeseries(packets):
    by_type = metrics.traffic_by_type(packets).where(F.col("node") == "h0")
    assert rows(by_type, "direction", "type_name", "msgs", "bytes", "ip_bytes") == [
        ("in", "DATA", 2, 98, 2 * 77), ("in", "GOSSIP", 1, 38, 66), ("out", "GOSSIP", 4, 152, 4 * 66),
        ("out", "LIVE", 2, 46, 2 * 51)]
    # h0's decoded sends at t = 1.1, 1.2, 1.6 | 2.1 | 3.1, 3.2 s.
    series = metrics.traffic_timeseries(packets, 1.0).where(F.col("node") == "h0")
    assert rows(series, "t_bin_s", "msgs", "bytes") == [(1.0, 3, 99), (2.0, 1, 38), (3.0, 2, 61)]


def test_packet_counts_and_undecodable(packets):
    assert rows(metrics.packet_counts(packets), "file", "packets", "bytes", "decoded", "undecodable") == [
        ("pcaps/h0-any.pcap", 12, 924, 9, 3), ("pcaps/h1-any.pcap", 13, 1036, 11, 2),
        ("pcaps/h2-any.pcap", 2, 149, 2, 0)]
    assert sorted(rows(metrics.undecodable(packets), "node", "error", "packets")) == [
        ("h0", "UDP not to or from port 7000", 1), ("h0", "not IPv4 (ethertype 0x0806)", 1),
        ("h0", "not UDP (ICMP)", 1), ("h1", "foreign packet: magic b'XX', expected b'GS'", 1),
        ("h1", "protocol header not captured (snaplen)", 1)]


def test_event_timeseries(events):
    # declared_failed at 1003.0, 1004.5 | 1006.0, 1006.5 | 1007.0 -> t 3.0, 4.5, 6.0, 6.5, 7.0.
    got = rows(metrics.event_timeseries(events, ["declared_failed"], 1.0), "event", "t_bin_s", "count")
    assert got == [("declared_failed", 3.0, 1), ("declared_failed", 4.0, 1), ("declared_failed", 6.0, 2),
                   ("declared_failed", 7.0, 1)]
