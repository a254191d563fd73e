"""vsync (virtual synchrony over pbcast with a leader committee, seed 001 §§4-5): hand-worked Gseq ordering with
two senders, the repair sub-protocol, the sender's constant-size buffer, a view change that drops a silent member,
the wire, and seeded simulations checking safety: every member delivers the same messages and views in the same
order (gseq order, no gaps), nothing twice."""
from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from gossipnode import wire  # noqa: E402
from gossipnode.protocols import registry  # noqa: E402
from gossipnode.protocols.base import BadMessage  # noqa: E402
from gossipnode.protocols.vsync.wire import (AckPrefresh, DataItem, GseqAck, GseqReq, Order, OrderAck, PData,  # noqa: E402
                                             PDigest, PrefreshItem, RepairItems, RepairReq, ViewItem, decode_item,
                                             encode_item)
from pbcast_sim import Sim, make_configs  # noqa: E402


def cores(n=4, senders=(2, 3), start_s=1000.0, **protocol):
    cfgs = make_configs(n, {"name": "vsync", **protocol}, senders=senders, rate_per_s=1, start_s=start_s)
    return [registry.create(c, 0.0) for c in cfgs]


def fields(out, event):
    return [e.fields for e in out.events if e.event == event]


def sends(out, kind):
    return [(d, m) for d, m in out.send if isinstance(m, kind)]


def test_gseq_ordering_with_two_senders():
    """Figure 7 with two senders: 2 and 3 each ask the leader (0) to order their first multicast; the leader
    numbers them in arrival order (3's first: gseq 1, 2's: gseq 2). Sender 2 is acknowledged and disseminates
    first, so member 1 receives gseq 2 before gseq 1: it holds 2 (pbcast_received, no delivery) until 1 arrives,
    then delivers 1 and 2 in gseq order — the same order as the leader."""
    leader, m1, s2, s3 = cores(start_s=0.0)
    (_d, req3), = sends(s3.tick(s3.source.due), GseqReq)
    (_d, req2), = sends(s2.tick(s2.source.due), GseqReq)
    assert (req3.lseq, req2.lseq) == (1, 1)
    a = leader.receive(req3, 1.01)
    b = leader.receive(req2, 1.02)
    assert sends(a, GseqAck) == [(3, GseqAck(0, 1, 1, 0))] and sends(b, GseqAck) == [(2, GseqAck(0, 1, 2, 0))]
    assert [(g, o) for g, _k, o, _l in leader.delivered_log] == [(1, 3), (2, 2)]
    out2 = s2.receive(GseqAck(0, 1, 2, 0), 1.03)
    assert [(f["seq"], f["gseq"], f["view"]) for f in fields(out2, "gseq_acked")] == [(1, 2, 0)]
    (group, p2), = out2.mcast                          # the sender disseminates by pbcast's first phase
    assert group == "data" and (p2.origin, p2.seq, decode_item(p2.payload)) == (0, 2, DataItem(2, 1, req2.payload))
    out3 = s3.receive(GseqAck(0, 1, 1, 0), 1.04)
    (_g, p1), = out3.mcast
    got = m1.receive(p2, 1.05)
    assert fields(got, "pbcast_received") == [{"gseq": 2, "phase": "first", "round": 0}]
    assert not fields(got, "data_received")            # held: gseq 1 is missing
    got = m1.receive(p1, 1.06)
    assert [(f["origin"], f["seq"], f["gseq"]) for f in fields(got, "data_received")] == [(3, 1, 1), (2, 1, 2)]
    assert m1.delivered_log == leader.delivered_log
    # a resent request is answered with the same gseq, never a new one
    again = leader.receive(req2, 1.2)
    assert sends(again, GseqAck) == [(2, GseqAck(0, 1, 2, 0))] and leader.next_gseq == 3


def test_committee_of_two_stabilises_before_the_ack():
    leader, c1, s2, _s3 = cores(k=2)
    out = leader.receive(GseqReq(2, 1, b"x"), 0.0)
    assert not sends(out, GseqAck) and sends(out, Order) == [(1, Order(0, 1, encode_item(DataItem(2, 1, b"x"))))]
    ack = c1.receive(sends(out, Order)[0][1], 0.01)
    assert sends(ack, OrderAck) == [(0, OrderAck(1, 1))] and c1.delivered_log == [(1, "data", 2, 1)]
    done = leader.receive(OrderAck(1, 1), 0.02)
    assert sends(done, GseqAck) == [(2, GseqAck(0, 1, 1, 0))]


def test_repair_sub_protocol_fills_a_hole_from_the_committee():
    leader, m1, _s2, _s3 = cores()
    for lseq in (1, 2, 3):
        leader.receive(GseqReq(2, lseq, b"%d" % lseq), 0.0)
    m1.receive(PData(2, 0, 0, 2, 3, encode_item(DataItem(2, 3, b"3"))), 0.1)   # gseq 3 only: 1 and 2 missing
    assert m1.next == 1 and m1.repair_at <= 0.1 + 1.0
    out = m1.tick(m1.repair_at)
    (dest, req), = sends(out, RepairReq)
    assert dest == 0 and req.next == 1
    reply = leader.receive(req, m1.repair_at)
    (_d, items), = sends(reply, RepairItems)
    assert [g for g, _ in items.items] == [1, 2, 3] and items.high == 3
    got = m1.receive(items, m1.repair_at + 0.01)
    assert [(f["gseq"], f["repair"]) for f in fields(got, "data_received")] == [(1, True), (2, True), (3, False)]


def test_sender_buffer_is_constant_size():
    cfgs = make_configs(4, {"name": "vsync", "sender_buffer": 2}, senders=[2], rate_per_s=100)
    s = registry.create(cfgs[2], 0.0)
    reqs = []
    for _ in range(5):
        out = s.tick(s.source.due)
        reqs += [m.lseq for _d, m in sends(out, GseqReq)]
    assert reqs == [1, 2] and s.counters["send_blocked"] == 3
    s.receive(GseqAck(0, 1, 1, 0), s.source.due)
    out = s.tick(s.source.due)
    assert [m.lseq for _d, m in sends(out, GseqReq)] == [3]


def test_view_change_drops_a_silent_member():
    """Figure 8: member 3 falls silent at 0.5 s. At 1 s the leader disseminates a Prefreshview; 1 and 2 answer
    (deferred), 3 does not; after the 0.5 s wait the Newview {0, 1, 2} gets the next gseq and every live member
    installs view 1 at the same place in its delivery sequence. The leader held the Gseq Reqs in between."""
    n = 4
    cfgs = make_configs(n, {"name": "vsync", "view_period_s": 1.0, "ack_timeout_s": 0.5, "ack_defer_s": 0.2},
                        senders=[1], rate_per_s=50, stop_s=3)
    sim = Sim(cfgs, loss=0.0, seed=1)
    sim.crash(3, 0.5)
    sim.run(4)
    decided = [e.fields for _i, e in sim.of("view_change_decided")]
    assert decided[0]["view"] == 1 and decided[0]["dropped"] == [3] and decided[0]["acks"] == 2
    assert decided[0]["duration_s"] == pytest.approx(0.5)
    installs = {i: e.fields for i, e in sim.of("view_installed") if e.fields["view"] == 1}
    assert sorted(installs) == [0, 1, 2] and {f["gseq"] for f in installs.values()} == {decided[0]["gseq"]}
    assert all(f["dropped"] == [3] and f["members"] == 3 for f in installs.values())
    started = [e.ts for _i, e in sim.of("view_change_started")]
    assert started[0] == pytest.approx(1.0) and len(started) >= 2
    held = [e.fields["latency_s"] for _i, e in sim.of("gseq_acked") if 1.0 < e.ts < 1.6]
    assert held and max(held) > 0.3                     # requests waited for the view change to end
    logs = [sim.nodes[i].delivered_log for i in (0, 1, 2)]
    assert logs[0] == logs[1] == logs[2] and len(logs[0]) > 100


def test_a_dropped_member_stops():
    leader, m1, _s2, _s3 = cores()
    out = m1.receive(PData(0, 0, 0, 0, 1, encode_item(ViewItem(1, (0, 2, 3)))), 0.0)
    assert fields(out, "dropped") == [{"view": 1, "delivered": 1}] and not m1.active
    assert m1.next_wakeup() == float("inf") and m1.receive(PDigest(0, 0, ()), 0.1).send == []


def test_bad_messages():
    leader, m1, s2, _s3 = cores()
    with pytest.raises(BadMessage):
        m1.receive(GseqReq(2, 1, b""), 0.0)             # not the leader
    with pytest.raises(BadMessage):
        leader.receive(GseqReq(1, 1, b""), 0.0)         # 1 is not a sender
    with pytest.raises(BadMessage):
        s2.receive(GseqAck(1, 1, 1, 0), 0.0)            # not from the leader
    with pytest.raises(BadMessage):
        m1.receive(PData(0, 0, 1, 0, 1, encode_item(DataItem(2, 1, b""))), 0.0)   # stream 1 carries Prefreshviews
    with pytest.raises(BadMessage):
        m1.receive(PData(0, 0, 0, 0, 1, b"\x07junk"), 0.0)


@pytest.mark.parametrize("msg", [
    PData(1, 3, 0, 2, 9, encode_item(DataItem(2, 4, b"pay"))), PData(1, 3, 1, 0, 2, encode_item(PrefreshItem(2, 40)), True),
    PDigest(1, 3, ((0, 1, 4),)), PDigest(1, 3, ((1, 2, 2),), True), GseqReq(2, 7, b"abc"), GseqAck(0, 7, 9, 1),
    Order(0, 9, encode_item(ViewItem(3, (0, 1, 5)))), OrderAck(1, 9), RepairReq(4, 10, 64),
    RepairItems(0, 12, ((10, b"\x01\x00\x02\x00\x00\x00\x01"), (11, b""))), AckPrefresh(3, 2, 99)])
def test_wire_round_trip(msg):
    data = wire.encode(msg)
    assert wire.decode(data) == msg and wire.header_fields(data)["protocol_name"] == "vsync"


def safety(sim, members):
    """Same messages and views in the same order everywhere (each log a prefix of the longest), gseqs
    consecutive from 1, nothing delivered twice; returns the longest log."""
    logs = {i: sim.nodes[i].delivered_log for i in members}
    ref = max(logs.values(), key=len)
    assert [g for g, *_ in ref] == list(range(1, len(ref) + 1))
    for i, log in logs.items():
        assert log == ref[:len(log)], i
    seen = Counter((i, e.fields["origin"], e.fields["seq"]) for i, e in sim.of("data_received"))
    assert max(seen.values()) == 1
    return ref


def test_sim_safety_with_loss_two_senders_committee_of_two_and_a_crash():
    n = 10
    cfgs = make_configs(n, {"name": "vsync", "k": 2, "view_period_s": 1.5, "ack_timeout_s": 0.4, "ack_defer_s": 0.2},
                        senders=[3, 7], rate_per_s=60, stop_s=5, seed=4)
    sim = Sim(cfgs, loss=0.05, seed=4)
    sim.crash(8, 2.0)
    sim.perturb(5, 0.5, 5.0, 0.3)
    sim.run(7)
    live = [i for i in range(n) if i != 8]
    ref = safety(sim, live)
    views = [o for _g, kind, o, _l in ref if kind == "view"]
    assert views == list(range(1, len(views) + 1)) and len(views) >= 3
    assert any(8 in e.fields["dropped"] for _i, e in sim.of("view_change_decided"))
    data = [(o, q) for _g, kind, o, q in ref if kind == "data"]
    assert len(data) > 300 and {o for o, _q in data} == {3, 7}
    assert all(len(sim.nodes[i].delivered_log) >= len(ref) - 5 for i in live)   # everyone caught up (but the tail)
    assert sum(sim.nodes[i].counters["repaired_items"] for i in live) > 0          # the repair sub-protocol ran
    assert sum(sim.nodes[i].layer.counters["recv_repair"] for i in live) > 0       # and pbcast's anti-entropy


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_sim_safety_seeds(seed):
    n = 8
    cfgs = make_configs(n, {"name": "vsync", "view_period_s": 1.0, "ack_timeout_s": 0.3, "ack_defer_s": 0.1,
                            "first_phase": "tree"}, senders=[2, 5], rate_per_s=40, stop_s=3, seed=seed)
    sim = Sim(cfgs, loss=0.1, seed=seed)
    sim.run(4.5)
    ref = safety(sim, range(n))
    assert sum(kind == "view" for _g, kind, *_ in ref) >= 2 and len(ref) > 100


def test_view_change_drops_a_member_too_far_behind():
    """A member that acknowledges the Prefreshview but has delivered more than `max_lag` gseqs less than the
    leader is dropped like a silent one; one within the lag stays."""
    leader, m1, s2, s3 = cores(max_lag=2, view_period_s=1.0, ack_timeout_s=0.5, ack_defer_s=0.1,
                               ack_wait="timeout")
    for lseq in range(1, 6):
        leader.receive(GseqReq(2, lseq, b""), 0.1)                # gseqs 1..5 at the leader
    out = leader.tick(1.0)
    assert fields(out, "view_change_started") == [{"view": 1, "high": 5, "members": 4}]
    (_g, pre), = out.mcast
    assert (pre.origin, pre.seq, decode_item(pre.payload)) == (1, 1, PrefreshItem(1, 5))
    held = leader.receive(GseqReq(3, 1, b""), 1.1)               # held during the view change
    assert not sends(held, GseqAck)
    leader.receive(AckPrefresh(1, 1, 1), 1.2)                    # 4 behind: too far
    leader.receive(AckPrefresh(2, 1, 5), 1.2)
    leader.receive(AckPrefresh(3, 1, 3), 1.3)                    # 2 behind: within max_lag
    out = leader.tick(1.5)
    (decided,) = fields(out, "view_change_decided")
    assert decided["dropped"] == [1] and decided["members"] == 3 and decided["gseq"] == 6
    assert [f["dropped"] for f in fields(out, "view_installed")] == [[1]]
    assert sends(out, GseqAck) == [(3, GseqAck(0, 1, 7, 1))]    # the held request, ordered after the Newview


def test_view_change_ends_at_the_last_ack_or_at_the_timeout():
    """ack_wait all (the default): the leader decides when the last member of the view acknowledges (duration =
    that moment - the Prefreshview), not at the timeout; with one member silent it waits the whole timeout and
    drops it; ack_wait timeout always waits the timeout."""
    leader, *_ = cores(view_period_s=1.0, ack_timeout_s=0.5, ack_defer_s=0.1)
    leader.tick(1.0)
    assert not fields(leader.receive(AckPrefresh(1, 1, 0), 1.05), "view_change_decided")
    assert not fields(leader.receive(AckPrefresh(2, 1, 0), 1.10), "view_change_decided")
    (decided,) = fields(leader.receive(AckPrefresh(3, 1, 0), 1.125), "view_change_decided")
    assert decided["dropped"] == [] and decided["acks"] == 3 and decided["duration_s"] == pytest.approx(0.125)
    assert not fields(leader.tick(1.5), "view_change_decided")                # nothing left at the timeout

    leader, *_ = cores(view_period_s=1.0, ack_timeout_s=0.5, ack_defer_s=0.1)
    leader.tick(1.0)
    leader.receive(AckPrefresh(1, 1, 0), 1.05)
    leader.receive(AckPrefresh(3, 1, 0), 1.10)                               # member 2 silent
    assert not fields(leader.tick(1.49), "view_change_decided")
    (decided,) = fields(leader.tick(1.5), "view_change_decided")
    assert decided["dropped"] == [2] and decided["duration_s"] == pytest.approx(0.5)

    leader, *_ = cores(view_period_s=1.0, ack_timeout_s=0.5, ack_defer_s=0.1, ack_wait="timeout")
    leader.tick(1.0)
    for j in (1, 2, 3):
        assert not fields(leader.receive(AckPrefresh(j, 1, 0), 1.0 + j / 100), "view_change_decided")
    (decided,) = fields(leader.tick(1.5), "view_change_decided")
    assert decided["dropped"] == [] and decided["duration_s"] == pytest.approx(0.5)


def test_decoders_never_raise_anything_but_decode_errors():
    import random
    from gossipnode.protocols.pbcast.wire import Data as PbData, Digest as PbDigest
    from gossipnode.protocols.tradvsync.wire import Ack, Data as TvData, Nak
    samples = [PbData(1, 2, 0, 1, 3, b"abc"), PbDigest(1, 2, ((0, 1, 4), (1, 2, 2))), TvData(1, 4, b"xy"),
               Ack(2, 1, 5), Nak(2, 1, 3, 4), PData(1, 3, 0, 2, 9, encode_item(DataItem(2, 4, b"p"))),
               RepairItems(0, 12, ((10, encode_item(ViewItem(2, (0, 1)))),)), GseqAck(0, 1, 2, 3)]
    rng = random.Random(7)
    tried = 0
    for msg in samples:
        good = wire.encode(msg)
        for _ in range(300):
            bad = bytearray(good)
            if rng.random() < 0.5:
                bad = bad[:rng.randrange(len(bad))]
            else:
                for _k in range(rng.randint(1, 3)):
                    bad[rng.randrange(9, len(bad))] = rng.randrange(256)
            tried += 1
            try:
                wire.decode(bytes(bad))
            except wire.DecodeError:
                pass
    assert tried == 300 * len(samples)
