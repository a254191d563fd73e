"""QSM's caching replicas (seed 004, issue 34): the sender frees a packet once all its caching replicas hold it, and
a node pulls a packet from outside its own partition only once it is stable at the packet's caching replicas.

The paper (§2.3): "for every message we designate R nodes as caching servers that will buffer the received data
[...] until all nodes in the region have acknowledged it [...] The sender considers a message to have been delivered
(and stops buffering it) once it has been acknowledged by all caching replicas." (§3.10: "packets are considered by
the sender delivered as soon as they are stable at all the caching replicas"). §2.3.3: "requests for a given packet
by nodes outside its caching partition is delayed until it is stable on all of its caching replicas. This [...]
ensured that pull requests can be satisfied immediately".

Hand-worked: the pure caching prefix, the sender's reaction to an ACK, and a 6-member region (R = 3: partitions
{0, 2, 4} and {1, 3, 5}) with two packets, round by round. Seeded simulator: the 24-member, two-group setting with
loss, checking at every step that no packet leaves a sender's buffer before all its caching replicas hold it, with
counts that keep the checks from passing vacuously.
"""
from __future__ import annotations

from collections import Counter

import pytest

from gossipnode import wire
from gossipnode.protocols.qsm.core import QsmNode
from gossipnode.protocols.qsm.membership import caching_prefix
from gossipnode.protocols.qsm.wire import Ack, MsgType

from .qsm_sim import Sim, make_configs
from .test_qsm_sim import GROUPS, assert_delivered, assert_released

# ---- the pure caching prefix -------------------------------------------------------------------------------------


@pytest.mark.parametrize("prefix, ahead, part, p, expected", [
    (0, set(), 0, 1, 0),          # one partition: the contiguous prefix itself
    (5, {7}, 0, 1, 5),            # ... which caches everything: 6 is missing
    (3, set(), 0, 2, 3),          # p = 2, partition 0 caches 2, 4, 6, ...: 4 is its first missing packet
    (3, set(), 1, 2, 4),          # partition 1 caches 1, 3, 5, ...: 5 is missing, 4 is not its business
    (3, {5, 7}, 1, 2, 8),         # 5 and 7 held (ahead), 9 missing
    (3, {5, 8}, 1, 2, 6),         # 7 missing
    (3, {4, 6}, 0, 2, 7),         # 8 missing
    (0, {3, 6}, 0, 3, 8),         # p = 3, partition 0 caches 3, 6, 9: 9 missing
    (0, {3, 6}, 2, 3, 1),         # partition 2 caches 2, 5, 8: 2 missing
    (10, {12}, 1, 3, 12),         # partition 1 caches 13 (missing) after the prefix
])
def test_caching_prefix_hand_worked(prefix, ahead, part, p, expected):
    assert caching_prefix(prefix, ahead, part, p) == expected


def test_caching_prefix_bad_partition():
    with pytest.raises(ValueError):
        caching_prefix(0, set(), 2, 2)


# ---- the sender frees on the caching-stable prefix -------------------------------------------------------------

def test_sender_frees_up_to_the_caching_stable_prefix_not_the_region_stable_one():
    # one group of 6, sender 0 leads the region; the ACK comes from member 2 (as if it led) to exercise receive()
    cfgs = make_configs(6, {"g": list(range(6))}, senders=[0], rate_per_s=10, stop_s=0.4, rate_control=False)
    node = QsmNode(cfgs[0], 0.0)
    t = 0.0
    while node.next_wakeup() < 1.0:
        t = node.next_wakeup()
        node.tick(t)
    assert node.rseq[0] == 4 and sorted(node.buffer[0]) == [1, 2, 3, 4]
    # region-stable 1 (some member lacks 2), caching-stable 3: packets 1-3 are freed, 4 is kept
    out = node.receive(wire.decode(wire.encode(Ack(2, 0, 5, 0, 1, 4, 0xFFFFFFFF, 1, 3))), 1.5)
    assert sorted(node.buffer[0]) == [4] and node.acked[0] == 3
    got = [e.fields for e in out.events if e.event == "ack_received"]
    assert got and got[0]["stable"] == 1 and got[0]["cached"] == 3 and got[0]["acked"] == 3 and got[0]["held"] == 1
    # a later ACK with a larger region-stable prefix but the same caching prefix frees nothing more
    node.receive(Ack(2, 0, 6, 0, 3, 4, 0xFFFFFFFF, 1, 3), 2.5)
    assert sorted(node.buffer[0]) == [4]
    # the caching prefix is clamped to what was sent
    node.receive(Ack(2, 0, 7, 0, 4, 4, 0xFFFFFFFF, 1, 9), 3.5)
    assert node.buffer[0] == {} and node.acked[0] == 4


# ---- a region of 6, two packets, round by round -----------------------------------------------------------------

def test_six_members_two_packets_who_frees_and_who_pulls_when():
    """Members 0-5, R = 3: p = 2, partition 0 = {0, 2, 4} caches even rseqs, partition 1 = {1, 3, 5} odd ones.
    Sender 0 (the region leader) multicasts rseq 1 and 2 before the first token (t = 1 s, one round a second).
    rseq 2's copies to member 1 (outside its partition) and to member 4 (one of its caching replicas) are lost.

    round 1: cutoff 0. caching prefixes: 0, 2 -> 3; 4 (lacks 2) -> 1; 1 (lacks 2, not its own) -> 2; 3, 5 -> 2.
             caching-stable = 1, region-stable = 1: the ACK frees rseq 1.
    round 2: cutoff 2, replicated 1. Member 4 misses 2 (its partition's): it pulls it from its predecessor 2, and
             its successor 0 pushes it (§2.3.3: "it is possible for a node to pull a packet from a predecessor,
             and at the same time have it forwarded by a successor on the ring"); member 1 misses 2 (another
             partition's), 2 > replicated: its pull is delayed. Member 4 had not got 2 at its visit:
             caching-stable stays 1, the sender keeps 2.
    round 3: replicated 1: member 1 still waits. Member 4 holds 2 now: caching-stable 2 while region-stable is 1
             (member 1): the ACK frees rseq 2, before member 1 has it.
    round 4: replicated 2: member 1 pulls 2 from partition 0's leader, 0, which answers in full.
    round 5: region-stable 2; round 6: the caches purge it."""
    cfgs = make_configs(6, {"g": list(range(6))}, senders=[0], rate_per_s=10, stop_s=0.2, rate_control=False,
                        token_interval_s=1.0, retransmit_s=30)
    sim = Sim(cfgs, seed=2)
    sim.drop = lambda src, dst, msg: msg.type == MsgType.DATA and msg.rseq == 2 and dst in (1, 4)
    region = sim.nodes[0].region
    assert region.partitions == ((0, 2, 4), (1, 3, 5))
    holds = {}

    def watch(s: Sim) -> None:      # who holds rseq 2 when the sender frees it
        if s.nodes[0].rseq[0] >= 2 and 2 not in s.nodes[0].buffer[0] and "free2" not in holds:
            holds["free2"] = {m: 2 in n.cur.cache[0] or n.cur.recv[0].r >= 2 for m, n in s.nodes.items()}
    sim.after = watch
    sim.run_until(8.5)

    acks = {e.fields["round"]: e.fields for i, e in sim.of("ack_received") if i == 0}
    assert [(r, acks[r]["stable"], acks[r]["cached"], acks[r]["acked"]) for r in (1, 2, 3, 4, 5)] == [
        (1, 1, 1, 1), (2, 1, 1, 0), (3, 1, 2, 1), (4, 1, 2, 0), (5, 2, 2, 0)]
    # when the sender let go of rseq 2, all its caching replicas (partition 0) held it and member 1 did not
    assert holds["free2"] == {0: True, 2: True, 4: True, 1: False, 3: True, 5: True}

    delayed = [(i, e.fields["round"], e.fields["partition"], e.fields["count"], e.fields["replicated"])
               for i, e in sim.of("pull_delayed")]
    assert delayed == [(1, 2, 0, 1, 1), (1, 3, 0, 1, 1)]
    pulls = [(i, e.fields["round"], e.fields["to"], e.fields["count"]) for i, e in sim.of("pull_sent")]
    assert pulls == [(4, 2, 2, 1), (1, 4, 0, 1)]
    served = [(i, e.fields["to"], e.fields["asked"], e.fields["sent"]) for i, e in sim.of("pull_served")]
    assert served == [(2, 4, 1, 1), (0, 1, 1, 1)]
    pushes = [(i, e.fields["round"], e.fields["to"], e.fields["count"]) for i, e in sim.of("push_sent")]
    assert pushes == [(0, 2, 4, 1)]
    rec = sorted((i, e.fields["rseq"], e.fields["how"], e.fields["from"]) for i, e in sim.of("recovered"))
    assert rec[0] == (1, 2, "pull", 0) and rec[1:] in ([(4, 2, "pull", 2)], [(4, 2, "push", 0)])
    assert not sim.of("nak_sent") and not sim.of("retransmit")
    released = sorted((i, e.fields["through"]) for i, e in sim.of("cache_released"))
    assert released == [(0, 2), (1, 1), (2, 2), (3, 1), (4, 2), (5, 1)]
    assert_delivered(sim, {"g": list(range(6))})
    assert_released(sim)


# ---- the seeded simulator with loss ----------------------------------------------------------------------------

class FreeWatch:
    """At every step of the simulator: the packets a sender has just let go of (its `acked` prefix advanced) must be
    held by every one of their caching replicas (in the cache, or purged as stable in the whole region)."""

    def __init__(self, sim: Sim) -> None:
        self.last = {(i, r): 0 for i, n in sim.nodes.items() if n.sender for r in n.acked}
        self.frees = 0
        self.early = 0          # freed while some member of the region (not a caching replica) still lacked it
        self.violations: list[tuple[int, int, int, int]] = []

    def __call__(self, sim: Sim) -> None:
        for (i, ridx), last in self.last.items():
            node = sim.nodes[i]
            now = node.acked[ridx]
            if now == last:
                continue
            region = node.ms.regions[ridx]
            for rseq in range(last + 1, now + 1):
                assert rseq not in node.buffer[ridx]
                self.frees += 1
                for c in region.partitions[region.caching_partition(rseq)]:
                    rep = sim.nodes[c]
                    if rseq not in rep.cur.cache[i] and rseq > rep.cur.purged[i]:
                        self.violations.append((i, rseq, c, ridx))
                if any(rseq > sim.nodes[m].cur.recv[i].r and rseq not in sim.nodes[m].cur.recv[i].ahead
                       for m in region.members):
                    self.early += 1
            self.last[(i, ridx)] = now


@pytest.mark.parametrize("loss, seed", [(0.05, 21), (0.2, 22)])
def test_sim_with_loss_frees_only_what_the_caching_replicas_hold_and_delays_foreign_pulls(loss, seed):
    cfgs = make_configs(24, GROUPS, senders=[0, 20], rate_per_s=20, stop_s=10, token_interval_s=0.5,
                        rate_control=False)
    sim = Sim(cfgs, loss=loss, seed=seed)
    watch = FreeWatch(sim)
    sim.after = watch
    sim.run_until(40)
    assert assert_delivered(sim, GROUPS) == 400          # every member, every packet of its groups, exactly once
    assert_released(sim)                                 # caches and buffers empty in the end
    assert watch.violations == []
    assert watch.frees == 2 * 200 + 2 * 200              # each sender's packets in both regions of its group
    assert watch.early > 0                               # the caching-replica ACK freed some before region stability
    delayed = sum(n.counters["pull_delayed"] for n in sim.nodes.values())
    assert delayed > 0 and len(sim.of("pull_delayed")) > 0
    # a pull across partitions is sent only for packets stable at their caching replicas: answered in full
    cross = Counter()
    for i, e in sim.of("pull_served"):
        f, node = e.fields, sim.nodes[i]
        if node.region.partition_of(f["to"]) != node.part:
            cross["pulls"] += 1
            cross["short"] += f["sent"] < min(f["asked"], node.p.pull_limit)
    assert cross["pulls"] > 0 and cross["short"] == 0, cross
    # ACKs: the caching-stable prefix is never behind the region-stable one
    assert all(e.fields["cached"] >= e.fields["stable"] for _, e in sim.of("ack_sent"))
