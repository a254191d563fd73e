"""tradvsync (seed 001 §2.1): the sender's fixed buffer and flow control, in-order delivery with NAK repair,
retransmission to a member that does not acknowledge, and a seeded simulation: every member delivers every
message once and in order, and one perturbed member lowers the throughput at the unperturbed ones."""
from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from gossipnode import wire  # noqa: E402
from gossipnode.protocols import registry  # noqa: E402
from gossipnode.protocols.base import BadMessage  # noqa: E402
from gossipnode.protocols.tradvsync.wire import Ack, Data, Nak  # noqa: E402
from pbcast_sim import Sim, make_configs  # noqa: E402


def cores(n=3, **protocol):
    cfgs = make_configs(n, {"name": "tradvsync", **protocol}, senders=[0], rate_per_s=100)
    return [registry.create(c, 0.0) for c in cfgs]


def fields(out, event):
    return [e.fields for e in out.events if e.event == event]


def test_full_window_blocks_the_sender_until_every_member_acknowledges():
    s, _a, _b = cores(window=2)
    sent = []
    t = 0.0
    for _ in range(4):
        t = s.next_wakeup()
        out = s.tick(t)
        sent += [m.seq for _d, m in out.send if isinstance(m, Data)]
    assert sorted(set(sent)) == [1, 2] and s.counters["send_blocked"] == 2
    s.receive(Ack(1, 0, 2), t)                  # member 1 has everything, member 2 nothing: still blocked
    out = s.tick(s.source.due)
    assert not out.send and s.counters["send_blocked"] == 3
    s.receive(Ack(2, 0, 1), t)                  # now 1 is stable at everyone: one slot frees
    assert s.stable == 1 and s.buffer.count == 1
    out = s.tick(s.source.due)
    assert sorted((d, m.seq) for d, m in out.send) == [(1, 3), (2, 3)]


def test_in_order_delivery_nak_and_cumulative_ack():
    _s, a, _b = cores(ack_every=2)
    out = a.receive(Data(0, 2, b""), 0.0)        # 1 missing: nothing delivered, a NAK for 1..1
    assert not fields(out, "data_received")
    assert [(d, m) for d, m in out.send] == [(0, Nak(1, 0, 1, 1))]
    out = a.receive(Data(0, 1, b"", True), 0.01)
    assert [(f["seq"], f["repair"]) for f in fields(out, "data_received")] == [(1, True), (2, False)]
    assert [(d, m) for d, m in out.send] == [(0, Ack(1, 0, 2))]
    out = a.receive(Data(0, 3, b""), 0.02)       # one more: the ACK waits ack_delay_s
    assert not out.send and a.next_wakeup() == pytest.approx(0.03)
    assert [(d, m) for d, m in a.tick(0.03).send] == [(0, Ack(1, 0, 3))]
    assert not fields(a.receive(Data(0, 3, b""), 0.04), "data_received")   # a duplicate


def test_sender_retransmits_to_a_member_without_progress():
    s, _a, _b = cores(retransmit_s=0.2)
    t = 0.0
    while s.source.seq < 3:
        t = s.next_wakeup()
        s.tick(t)
    s.set_workload(False, t)
    s.receive(Ack(1, 0, 3), t)
    out = s.tick(s.next_wakeup())
    while not any(m.retrans for _d, m in out.send if isinstance(m, Data)):
        out = s.tick(s.next_wakeup())
    again = [(d, m.seq) for d, m in out.send if isinstance(m, Data) and m.retrans]
    assert sorted(again) == [(2, 1), (2, 2), (2, 3)] and s.next_wakeup() - t >= 0.2


def test_bad_ack_and_wire():
    s, a, _b = cores()
    with pytest.raises(BadMessage):
        s.receive(Ack(1, 0, 5), 0.0)            # nothing sent yet
    with pytest.raises(BadMessage):
        a.receive(Nak(2, 0, 1, 1), 0.0)         # a is no sender
    for msg in (Data(1, 5, b"ab"), Data(1, 5, b"", True), Ack(2, 1, 9), Nak(2, 1, 3, 4)):
        assert wire.decode(wire.encode(msg)) == msg
    with pytest.raises(wire.DecodeError):
        wire.decode(wire.encode(Ack(2, 1, 9))[:-1])


def run(n, p, window=16, seed=3):
    sim = Sim(make_configs(n, {"name": "tradvsync", "window": window}, senders=[0], rate_per_s=200, stop_s=6),
              loss=0.01, seed=seed)
    if p:
        sim.perturb(5, 0.0, 6.0, p)
    sim.run(8)
    return sim


def test_sim_every_member_delivers_every_message_once_in_order():
    sim = run(12, 0.3)
    sent = [e.fields["seq"] for _i, e in sim.of("data_sent")]
    assert len(sent) > 300
    for member in range(1, 12):
        got = [e.fields["seq"] for _i, e in sim.of("data_received", member)]
        assert got == sent, member
    repaired = sum(e.fields["repair"] for _i, e in sim.of("data_received"))
    assert repaired > 0 and sim.lost > 0           # loss happened and was repaired


def test_sim_a_perturbed_member_slows_the_whole_group():
    def rate(sim):
        return len([e for _i, e in sim.of("data_received", 3) if 1 <= e.ts < 6]) / 5
    calm, perturbed = rate(run(12, 0.0)), rate(run(12, 0.5))
    assert calm >= 190 and perturbed < 0.75 * calm, (calm, perturbed)
