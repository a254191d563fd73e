"""pbcast (Bimodal Multicast, seed 001 §3): hand-worked digest exchanges, garbage collection after C log n rounds,
the unicast tree, the wire, and a seeded simulator with loss (bimodal delivery, nothing delivered twice)."""
from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from gossipnode import wire  # noqa: E402
from gossipnode.protocols.base import BadMessage  # noqa: E402
from gossipnode.protocols.pbcast.wire import Data, Digest  # noqa: E402
from pbcast_sim import Sim, make_configs  # noqa: E402


def cores(n=3, **protocol):
    from gossipnode.protocols import registry
    cfgs = make_configs(n, {"name": "pbcast", "first_phase": "none", **protocol}, senders=[0], rate_per_s=1,
                        start_s=1000)
    return [registry.create(c, 0.0) for c in cfgs]


def fields(out, event):
    return [e.fields for e in out.events if e.event == event]


def test_digest_exchange_repairs_a_hole():
    """§3: B holds 1 and 3 of sender 0, A holds 1..3. A's digest 'messages 1-3 from sender 0' makes B solicit 2;
    A retransmits 2 and B delivers it as a repair, once."""
    _s, a, b = cores(mode="pull")
    for seq in (1, 2, 3):
        a.receive(Data(0, 0, 0, 0, seq, b"x%d" % seq), 0.0)
    for seq in (1, 3):
        b.receive(Data(0, 0, 0, 0, seq, b"x%d" % seq), 0.0)
    assert a.layer.digest() == ((0, 1, 3),)
    assert b.layer.digest() == ((0, 1, 1), (0, 3, 3))
    out = b.receive(Digest(1, 5, ((0, 1, 3),)), 0.1)
    assert [(d, m.ranges, m.solicit) for d, m in out.send] == [(1, ((0, 2, 2),), True)]
    reply = a.receive(out.send[0][1], 0.2)
    assert [(d, m.seq, m.payload, m.repair) for d, m in reply.send] == [(2, 2, b"x2", True)]
    got = b.receive(reply.send[0][1], 0.3)
    assert fields(got, "data_received") == [{"origin": 0, "seq": 2, "sender": 1, "repair": True,
                                             "phase": "repair", "round": 0, "via": "udp"}]
    again = b.receive(reply.send[0][1], 0.4)             # a duplicate: counted, not delivered
    assert not fields(again, "data_received") and b.layer.counters["duplicate_repair"] == 1
    assert b.layer.receipts[0].r == 3


def test_push_sends_young_messages_the_digest_lacks():
    _s, a, b = cores(mode="push")
    for seq in (1, 2):
        a.receive(Data(0, 0, 0, 0, seq, b"p"), 0.0)
    out = a.receive(Digest(2, 0, ((0, 1, 1),)), 0.1)       # B has 1 only: A pushes 2, solicits nothing
    assert [(d, m.seq, m.repair) for d, m in out.send] == [(2, 2, True)]


def test_fifo_holds_delivery_until_the_gap_is_repaired():
    _s, _a, b = cores(fifo=True)
    out = b.receive(Data(0, 0, 0, 0, 2, b""), 0.0)
    assert fields(out, "data_received") and not fields(out, "data_delivered")
    out = b.receive(Data(1, 0, 0, 0, 1, b"", True), 0.1)
    assert [f["seq"] for f in fields(out, "data_delivered")] == [1, 2]


def test_gc_after_c_log_n_rounds():
    """n = 4, C = 2: a message is discarded ceil(2 log2 4) = 4 rounds after it arrived, and can no longer be
    retransmitted."""
    _s, a, _b, _c = cores(4, gc_c=2.0, round_s=1.0)
    assert a.layer.gc_rounds == 4
    a.receive(Data(0, 0, 0, 0, 1, b"m"), 0.0)            # arrives in round 0
    t = 0.0
    for rnd in range(1, 5):
        t = a.layer.next_wakeup()
        out = a.tick(t)
        assert a.layer.round == rnd
        assert bool(a.layer.buffer) == (rnd < 4), rnd
        assert len(out.send) == 1 and isinstance(out.send[0][1], Digest)   # fanout 1
    assert fields(out, "gc") == [{"discarded": 1, "buffer_size": 0, "round": 4}]
    reply = a.receive(Digest(2, 0, ((0, 1, 1),), True), t)
    assert reply.send == []


def test_unicast_tree_children():
    s = cores(7, first_phase="tree", tree_fanout=2)
    assert {c.me: c.layer.children(0) for c in s} == {0: [1, 2], 1: [3, 4], 2: [5, 6], 3: [], 4: [], 5: [], 6: []}
    assert s[3].layer.children(3) == [4, 5] and s[5].layer.children(3) == [1, 2]


def test_first_phase_tree_forwards_once():
    s = cores(7, first_phase="tree", tree_fanout=2)
    out = s[1].receive(Data(0, 0, 0, 0, 1, b""), 0.0)
    assert sorted(d for d, _m in out.send) == [3, 4] and all(not m.repair and m.sender == 1 for _d, m in out.send)
    assert s[1].receive(Data(0, 0, 0, 0, 1, b""), 0.0).send == []


def test_bad_messages():
    _s, a, _b = cores()
    with pytest.raises(BadMessage):
        a.receive(Data(0, 0, 2, 2, 1, b""), 0.0)            # origin 2 is not a sender
    with pytest.raises(BadMessage):
        a.receive(Digest(0, 0, ((1, 1, 2),)), 0.0)
    with pytest.raises(BadMessage):
        a.receive(Data(1, 0, 0, 0, 1, b""), 0.0)            # from itself


@pytest.mark.parametrize("msg", [Data(3, 9, 0, 1, 7, b"abc"), Data(3, 9, 0, 1, 7, b"", True),
                                 Digest(3, 1, ()), Digest(3, 1, ((0, 1, 5), (2, 7, 7)), True)])
def test_wire_round_trip(msg):
    data = wire.encode(msg)
    assert wire.decode(data) == msg and wire.encode(wire.decode(data)) == data
    head = wire.header_fields(data)
    assert head["protocol_name"] == "pbcast" and head["round"] == msg.round


def test_wire_rejects_inconsistent_bodies():
    good = wire.encode(Digest(3, 1, ((0, 1, 5),)))
    with pytest.raises(wire.DecodeError):
        wire.decode(good[:-1])
    bad = bytearray(wire.encode(Digest(3, 1, ((0, 5, 6),))))
    bad[-8:-4] = (9).to_bytes(4, "big")                      # first 9 > last 6
    with pytest.raises(wire.DecodeError):
        wire.decode(bytes(bad))
    with pytest.raises(wire.DecodeError):
        wire.decode(wire.encode(Data(1, 0, 0, 0, 0, b"")))   # seqs start at 1
    assert wire.data_types()["pbcast"] == {"DATA", "REPAIR"}


def delivery_fractions(sim, n):
    got = Counter(e.fields["seq"] for _i, e in sim.of("data_received"))
    return [(got[e.fields["seq"]] + 1) / n for _i, e in sim.of("data_sent")]


def no_duplicates(sim):
    seen = Counter((i, e.fields["origin"], e.fields["seq"]) for i, e in sim.of("data_received"))
    assert seen and max(seen.values()) == 1


def test_sim_repairs_loss_to_everyone():
    """40 members, 5 % loss on every copy and 10 % of first-phase datagrams lost whole at the sender: the
    anti-entropy rounds repair every hole within C log n rounds (each message reaches every member), and nothing
    is delivered twice."""
    n = 40
    sim = Sim(make_configs(n, {"name": "pbcast"}, senders=[0], rate_per_s=50, stop_s=4), loss=0.05,
              mcast_drop=0.1, seed=3)
    sim.run(8)
    fr = delivery_fractions(sim, n)
    assert len(fr) == 200 and all(f == 1.0 for f in fr)
    phases = Counter(e.fields["phase"] for _i, e in sim.of("data_received"))
    assert phases["repair"] > 0.1 * (n - 1) * 20 and phases["first"] > 0   # repair was exercised
    no_duplicates(sim)


def test_sim_bimodal_delivery():
    """With a short buffer life (C = 0.3: 2 rounds) and 30 % loss, a message whose first phase was lost whole
    reaches almost nobody and the others almost everybody: the histogram of the fraction of members that got
    each message has two modes and little in between (Birman et al.'s bimodal guarantee)."""
    n = 40
    sim = Sim(make_configs(n, {"name": "pbcast", "gc_c": 0.3}, senders=[0], rate_per_s=50, stop_s=4), loss=0.3,
              mcast_drop=0.3, seed=3)
    sim.run(8)
    fr = delivery_fractions(sim, n)
    low = sum(f <= 0.2 for f in fr)
    high = sum(f >= 0.8 for f in fr)
    middle = len(fr) - low - high
    assert low >= 0.15 * len(fr) and high >= 0.6 * len(fr) and middle <= 0.1 * len(fr), (low, middle, high)
    no_duplicates(sim)


def test_sim_perturbed_member_catches_up():
    """A member asleep for 100 ms intervals with p = 0.3 still receives every message (the others are not
    slowed: pbcast has no acknowledgements)."""
    n = 20
    sim = Sim(make_configs(n, {"name": "pbcast"}, senders=[0], rate_per_s=100, stop_s=3), loss=0.02, seed=5)
    assert sim.perturb(7, 0.0, 3.0, 0.3) > 3
    sim.run(6)
    assert all(f == 1.0 for f in delivery_fractions(sim, n))
    no_duplicates(sim)


def test_counters_open_and_close_the_multicast_period():
    """Figure 4 counts overhead per multicast: every member logs its layer's counters once when the workload's
    window opens (1 s) and once when it closes (3 s), the sender's multicasts all inside it. Between the two, each
    member's own rounds send one digest each (fanout 1, 100 ms rounds: 20 in 2 s, one either side for the phase),
    and the 8 members' digests sent equal those received with no loss."""
    n = 8
    sim = Sim(make_configs(n, {"name": "pbcast"}, senders=[0], rate_per_s=20, start_s=1.0, stop_s=3.0), seed=5)
    sim.run(5)
    snaps = {}
    for i, e in sim.of("pbcast_counters"):
        assert (i, e.fields["window"]) not in snaps
        snaps[i, e.fields["window"]] = (e.ts, e.fields["counters"])
    assert sorted(snaps) == sorted((i, w) for i in range(n) for w in ("start", "stop"))
    assert all(t == pytest.approx(1.0, abs=0.1) for (_, w), (t, _) in snaps.items() if w == "start")
    assert all(t == pytest.approx(3.0, abs=0.1) for (_, w), (t, _) in snaps.items() if w == "stop")
    sends = [e.ts for _, e in sim.of("data_sent")]
    assert len(sends) >= 35 and all(1.0 <= t <= 3.0 for t in sends)
    sent = {i: snaps[i, "stop"][1].get("sent_digest", 0) - snaps[i, "start"][1].get("sent_digest", 0) for i in range(n)}
    assert all(19 <= v <= 21 for v in sent.values()), sent
    got = sum(snaps[i, "stop"][1].get("recv_digest", 0) - snaps[i, "start"][1].get("recv_digest", 0) for i in range(n))
    assert abs(got - sum(sent.values())) <= n        # digests in flight across either edge
