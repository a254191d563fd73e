"""The GSGC core around Figures 2 and 3: timers, workload, R, repair, garbage collection, validation."""
from __future__ import annotations

import statistics

import pytest

from gossipnode.protocols.base import BadMessage
from gossipnode.protocols.gsgc.core import GsgcNode
from gossipnode.protocols.gsgc.wire import Data, Gossip, Live, Message, MsgType, Nak, Stable
from gossipnode.workload import Receipts

from .gsgc_sim import Sim, make_configs


def node(i=0, n=5, **kw) -> GsgcNode:
    return GsgcNode(make_configs(n, **kw)[i], 0.0)


def run_ticks(core: GsgcNode, until: float):
    """Drive one core's timers alone; returns [(now, Output)] of every tick."""
    ticks = []
    while core.next_wakeup() <= until:
        now = core.next_wakeup()
        ticks.append((now, core.tick(now)))
    return ticks


def gossip_times(ticks):
    return [now for now, out in ticks if any(m.type is MsgType.GOSSIP for _, m in out.send)]


def test_one_gossip_per_step_at_a_random_point_inside_the_step():
    times = gossip_times(run_ticks(node(step_s=0.5), 100.0))
    assert [int(t // 0.5) for t in times] == list(range(200))  # exactly one in each step
    offsets = [t % 0.5 / 0.5 for t in times]
    assert 0.2 < statistics.pstdev(offsets) < 0.4  # uniform on [0, 1) has 0.29
    other = gossip_times(run_ticks(node(1, step_s=0.5), 100.0))
    assert [round(t, 6) for t in other] != [round(t, 6) for t in times]  # members are not in lockstep


def test_gossip_goes_to_b_distinct_other_members():
    ticks = run_ticks(node(n=6, subgroup=3), 50.0)
    for _, out in ticks:
        targets = [d for d, m in out.send if m.type is MsgType.GOSSIP]
        assert len(targets) == len(set(targets)) == 3 and 0 not in targets


def test_a_stall_skips_missed_steps_and_sends_no_burst():
    core = node(senders=[0], rate_per_s=10.0, step_s=1.0)
    ticks = run_ticks(core, 10.0)
    last_step = int(gossip_times(ticks)[-1] // 1.0)
    out = core.tick(30.5)  # the process was stopped from ~10 s to 30.5 s (SIGSTOP/SIGCONT)
    kinds = [m.type for _, m in out.send]
    assert kinds.count(MsgType.GOSSIP) == 2  # one step, to b = 2 targets
    assert kinds.count(MsgType.DATA) == 4  # one data message, to the 4 other members
    skipped = {e.fields["timer"]: e.fields["missed"] for e in out.events if e.event == "steps_skipped"}
    assert skipped["step"] == 30 - last_step - 1
    assert skipped["workload"] >= 200
    assert 30.5 < core.next_wakeup() < 32.0


def test_a_step_fired_a_little_late_skips_nothing():
    core = node(step_s=1.0)
    due = core.next_wakeup()
    out = core.tick(due + 0.9)  # loop latency, not a stall
    assert not [e for e in out.events if e.event == "steps_skipped"]
    assert 1.0 <= core.next_wakeup() < 2.0  # the next step is still step 1


def test_receipts_track_r_gaps_and_skips():
    r = Receipts()
    assert [r.add(s) for s in (2, 1, 1, 5, 7)] == [True, True, False, True, True]
    assert r.r == 2 and r.missing(10) == [(3, 4), (6, 6)] and r.missing(1) == [(3, 4)]
    assert r.skip_to(6) == 3  # 3, 4 and 6 never arrived
    assert r.r == 7 and r.missing(10) == [] and not r.add(4)


def test_workload_sends_at_the_rate_with_consecutive_seqs():
    core = node(senders=[0], rate_per_s=5.0, stop_s=4.0)
    sends = [(now, e.fields) for now, out in run_ticks(core, 10.0) for e in out.events if e.event == "data_sent"]
    assert [f["seq"] for _, f in sends] == list(range(1, 21))
    gaps = [b[0] - a[0] for a, b in zip(sends, sends[1:])]
    assert all(g == pytest.approx(0.2) for g in gaps)
    assert sends[-1][0] < 4.0 and all(f["size"] == 40 and f["fanout"] == 4 for _, f in sends)
    assert core.snapshot()["R"] == [20] and core.buffer.count == 20


def data(origin, seq, sender=None, repair=False):
    return Message(MsgType.REPAIR if repair else MsgType.DATA, origin if sender is None else sender, seq, 0,
                   Data(origin, b"x" * 10))


def test_gaps_are_repaired_from_the_senders_buffer():
    sender, receiver = node(0, senders=[0]), node(2, senders=[0])
    for seq in (1, 2, 3, 4, 5):
        sender.buffer.put(0, seq, b"x" * 10)
    for seq in (1, 3, 5):
        receiver.receive(data(0, seq), 1.0)
    assert receiver.snapshot()["R"] == [1]
    naks = [(d, m) for d, m in receiver.step(1.5).send if m.type is MsgType.NAK]
    assert [(d, m.body) for d, m in naks] == [(0, Nak(0, ((2, 2), (4, 4))))]
    repairs = sender.receive(naks[0][1], 2.0).send
    assert [(d, m.type, m.seq) for d, m in repairs] == [(2, MsgType.REPAIR, 2), (2, MsgType.REPAIR, 4)]
    for _, m in repairs:
        events = receiver.receive(m, 2.5).events
        assert [(e.event, e.fields["repair"]) for e in events] == [("data_received", True)]
    assert receiver.snapshot()["R"] == [5]


def test_stability_collects_the_buffer():
    core = node(2, senders=[0])
    for seq in range(1, 6):
        core.receive(data(0, seq), 1.0)
    assert core.buffer.count == 5
    events = core.receive(Message(MsgType.STABLE, 1, 1, 0, Stable((3,))), 2.0).events
    assert [(e.event, e.fields) for e in events if e.event in ("stable", "gc")] == [
        ("stable", {"level": "global", "via": "multicast", "round": 0, "s": [3]}),
        ("gc", {"discarded": 3, "buffer_size": 2, "buffer_bytes": 20}),
    ]
    assert [(e.fields["round"], e.fields["via"]) for e in events if e.event == "round_completed"] == [(0, "multicast")]
    assert core.snapshot()["R"] == [5]


def test_s_above_r_skips_what_can_no_longer_be_repaired():
    """Only a member that was left out of S (declared failed, restarted) can see S above its R."""
    core = node(2, senders=[0])
    core.receive(data(0, 1), 1.0)
    core.receive(data(0, 4), 1.0)
    events = core.receive(Message(MsgType.STABLE, 1, 1, 0, Stable((5,))), 2.0).events
    assert ("data_skipped", {"origin": 0, "through": 5, "missing": 3}) in [(e.event, e.fields) for e in events]
    assert core.snapshot()["R"] == [5] and core.buffer.count == 0


def test_a_restarted_sender_continues_above_the_stable_seqs():
    core = node(0, senders=[0], rate_per_s=1.0)
    core.receive(Message(MsgType.STABLE, 1, 1, 0, Stable((7,))), 0.1)
    sent = [e.fields["seq"] for _, out in run_ticks(core, 2.0) for e in out.events if e.event == "data_sent"]
    assert sent[0] == 8


@pytest.mark.parametrize(
    ("msg", "reason"),
    [
        (Message(MsgType.GOSSIP, 9, 1, 0, Gossip((0,), (0,), 1, 5)), "sender 9 is not another member"),
        (Message(MsgType.GOSSIP, 2, 1, 0, Gossip((0,), (0,), 1, 5)), "sender 2 is not another member"),
        (Message(MsgType.GOSSIP, 1, 1, 0, Gossip((0, 0), (0, 0), 1, 5)), "with 2 senders, this group has 1"),
        (Message(MsgType.GOSSIP, 1, 1, 0, Gossip((0,), (0,), 1, 7)), "W has 7 bits, expected 5"),
        (Message(MsgType.DATA, 1, 1, 0, Data(0, b"")), "DATA from 1 claims origin 0"),
        (Message(MsgType.DATA, 3, 1, 0, Data(3, b"")), "origin 3 is not a sender"),
        (Message(MsgType.REPAIR, 1, 0, 0, Data(0, b"")), "data seq 0"),
        (Message(MsgType.LIVE, 1, 1, 0, Live(bytes(4))), "LIVE with 4 entries, the group has 5"),
        (Message(MsgType.SC_GOSSIP, 1, 1, 0, Gossip((0,), (0,), 1, 1)), "both must be stability controllers"),
    ],
)
def test_unacceptable_messages_are_refused_before_any_state_changes(msg, reason):
    core = node(2, senders=[0], fail_k=8)
    core.step(1.0)
    before = core.snapshot()
    with pytest.raises(BadMessage, match=reason):
        core.receive(msg, 2.0)
    assert core.snapshot() == before  # in particular L[sender] was not reset


def test_multicast_stable_ends_the_round_everywhere():
    sim = Sim(make_configs(12, subgroup=2, multicast_stable=True), seed=2)
    sim.run(30.0)
    completions = [e.fields for _, e in sim.of("round_completed")]
    constructed = [c for c in completions if c["via"] == "constructed"]
    assert constructed and any(c["via"] == "multicast" for c in completions)
    stables = sum(n.counters["sent_stable"] for n in sim.nodes.values())
    assert stables == len(constructed)
    rounds = {n.main.round for n in sim.nodes.values()}
    assert max(rounds) - min(rounds) <= 1


def test_snapshot_is_plain_data():
    core = node(senders=[0], fail_k=8)
    core.step(0.5)
    snap = core.snapshot()
    assert set(snap) == {"id", "level", "senders", "R", "S", "global", "buffer", "counters", "failed", "suspected",
                         "L"}
    assert snap["global"]["W"] == [0] and snap["global"]["M"] == [0] and snap["L"] == [0, 1, 1, 1, 1]


def _with_drop(p: float, n: int = 6, subgroup: int = 3) -> GsgcNode:
    cfg = make_configs(n, subgroup=subgroup)[0]
    cfg = cfg.model_copy(update={"protocol": cfg.protocol.model_copy(update={"gossip_drop_p": p})})
    return GsgcNode(cfg, 0.0)


def test_sender_drops_lose_that_fraction_of_gossip_copies_and_count_them():
    core = _with_drop(0.25)
    ticks = run_ticks(core, 2000.0)  # no senders: every tick is one step to b = 3 targets
    sent = sum(1 for _, out in ticks for _, m in out.send if m.type is MsgType.GOSSIP)
    dropped = core.counters["gossip_dropped"]
    assert sent + dropped == 3 * len(ticks)
    assert 0.20 < dropped / (sent + dropped) < 0.30


def test_no_sender_drops_by_default_and_the_rng_stream_is_unchanged():
    plain = run_ticks(node(n=6, subgroup=3), 50.0)
    zero = run_ticks(_with_drop(0.0), 50.0)
    assert [(t, [(d, m.type) for d, m in o.send]) for t, o in plain] == \
        [(t, [(d, m.type) for d, m in o.send]) for t, o in zero]
