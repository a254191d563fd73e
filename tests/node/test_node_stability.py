"""Stability detection: the paper's Figure 1 example replayed, and every branch of Figure 2."""
from __future__ import annotations

import pytest

from gossipnode.protocols.base import Output
from gossipnode.protocols.gsgc.core import GsgcNode
from gossipnode.protocols.gsgc.stability import Branch, RoundState
from gossipnode.protocols.gsgc.wire import MAX_SEQ, Gossip, Message, MsgType

from .gsgc_sim import make_configs

A, B, C, D = range(4)
# R arrays (one entry per sender; all four members send). A member's own entry is the highest in its column.
R = {A: (3, 1, 4, 2), B: (2, 3, 4, 1), C: (3, 2, 5, 2), D: (1, 2, 4, 3)}
S_EXPECTED = [1, 1, 4, 1]  # element-wise minimum of the four rows, worked out by hand


def bits(*members: int) -> int:
    return sum(1 << m for m in members)


def make_nodes(n=4, **kw) -> dict[int, GsgcNode]:
    nodes = {cfg.id: GsgcNode(cfg, 0.0) for cfg in make_configs(n, senders=range(n), **kw)}
    for i, node in nodes.items():
        for origin, r in zip(node.senders, R.get(i, (0,) * n)):
            for seq in range(1, r + 1):
                node.receipts[origin].add(seq)
    return nodes


def gossip_of(out: Output) -> Message:
    return next(msg for _, msg in out.send if msg.type is MsgType.GOSSIP)


def synchronous_step(nodes, now, targets, order=None):
    """Every member composes its gossip from its state at the start of the step; then the figure's deliveries
    happen (in `order`, a list of (sender, receiver), when given). Returns how each member's round ended."""
    composed = {i: gossip_of(node.step(now)) for i, node in nodes.items()}
    deliveries = order or [(i, t) for i, ts in targets.items() for t in ts]
    assert sorted(deliveries) == sorted((i, t) for i, ts in targets.items() for t in ts)
    ended = {}
    for sender, receiver in deliveries:
        for event in nodes[receiver].receive(composed[sender], now + 0.5).events:
            if event.event == "round_completed":
                ended[receiver] = (event.fields["round"], event.fields["via"], event.fields["steps"])
    return ended


def test_figure_1_stability_after_two_steps():
    """n = 4, b = 2. After step 1, B and C have the stability array, A and D partial information. In step 2 A
    hears D's array from D directly and constructs S; D gets S from B and C. After step 2 all four have S."""
    nodes = make_nodes()
    step1 = {A: [B, C], B: [C, D], C: [B, A], D: [B, C]}
    assert synchronous_step(nodes, 1.0, step1) == {B: (0, "constructed", 1), C: (0, "constructed", 1)}
    assert [nodes[i].snapshot()["S"] for i in (B, C)] == [S_EXPECTED, S_EXPECTED]
    assert nodes[A].snapshot()["S"] == [0, 0, 0, 0] and nodes[A].snapshot()["global"]["W"] == [A, C]
    assert nodes[D].snapshot()["S"] == [0, 0, 0, 0] and nodes[D].snapshot()["global"]["W"] == [B, D]
    assert [nodes[i].main.round for i in range(4)] == [0, 1, 1, 0]

    step2 = {A: [B, C], B: [D, A], C: [D, B], D: [A, C]}
    order = [(D, A), (B, A), (A, B), (A, C), (B, D), (C, D), (C, B), (D, C)]
    ended = synchronous_step(nodes, 2.0, step2, order)
    assert ended == {A: (0, "constructed", 2), D: (0, "next_round", 2)}
    for i in range(4):
        assert nodes[i].snapshot()["S"] == S_EXPECTED, f"member {i}"


# ---- Figure 2, branch by branch, on the round state ------------------------------------------------------------


def state(rnd=3, mins=(5, 9), heard=None, own=0):
    rs = RoundState(own, 2, now=0.0)
    rs.round, rs.min_so_far, rs.heard = rnd, mins, bits(0, 1) if heard is None else heard
    return rs


def test_redundant_message_changes_nothing():
    rs = state()
    branch, done = rs.receive(3, (1, 1), bits(1), now=1.0)
    assert (branch, done) == (Branch.REDUNDANT, None)
    assert (rs.min_so_far, rs.heard) == ((5, 9), bits(0, 1))


def test_equal_w_is_redundant():
    rs = state()
    assert rs.receive(3, (5, 9), bits(0, 1), now=1.0)[0] is Branch.REDUNDANT


def test_more_up_to_date_message_is_adopted():
    rs = state(heard=bits(0))
    branch, _ = rs.receive(3, (4, 2), bits(0, 2, 3), now=1.0)
    assert branch is Branch.MORE_UP_TO_DATE
    assert (rs.min_so_far, rs.heard) == ((4, 2), bits(0, 2, 3))


def test_normal_merge_takes_min_and_max():
    rs = state(mins=(4, 6), heard=bits(0, 1))
    branch, _ = rs.receive(3, (5, 2), bits(2, 3), now=1.0)
    assert branch is Branch.MERGE
    assert (rs.min_so_far, rs.heard) == ((4, 2), bits(0, 1, 2, 3))


def test_next_round_message_ends_our_round_and_we_add_our_own_array():
    rs = state(rnd=3, heard=bits(0))
    rs.steps = 4
    branch, done = rs.receive(4, (7, 7), bits(1, 2), now=9.0)
    assert branch is Branch.NEXT_ROUND
    assert (done.round, done.via, done.steps, done.array) == (3, "next_round", 4, None)
    assert (rs.round, rs.started, rs.steps) == (4, 9.0, 0)
    assert (rs.min_so_far, rs.heard) == ((7, 7), bits(1, 2))
    assert rs.contribute((6, 8)) and (rs.min_so_far, rs.heard) == ((6, 7), bits(0, 1, 2))
    assert not rs.contribute((1, 1))  # once per round


def test_old_round_message_is_ignored():
    rs = state(rnd=3)
    assert rs.receive(2, (0, 0), bits(0, 1, 2, 3), now=1.0) == (Branch.OLD_ROUND, None)
    assert (rs.round, rs.min_so_far, rs.heard) == (3, (5, 9), bits(0, 1))


def test_message_several_rounds_ahead_is_adopted():
    rs = state(rnd=0)
    branch, done = rs.receive(5, (3, 3), bits(2), now=1.0)
    assert branch is Branch.JUMP and done.round == 0 and rs.round == 5


def test_completion_needs_every_required_member():
    rs = state(heard=bits(0, 1, 2))
    assert rs.complete_if_heard(bits(0, 1, 2, 3), now=5.0) is None
    done = rs.complete_if_heard(bits(0, 1, 2), now=5.0)  # member 3 is not required (declared failed)
    assert (done.round, done.via, done.array) == (3, "constructed", (5, 9))
    assert (rs.round, rs.min_so_far, rs.heard) == (4, (MAX_SEQ, MAX_SEQ), 0)


def test_multicast_stable_ends_the_round_once():
    rs = state(rnd=3)
    assert rs.end_round(2, now=1.0) is None
    done = rs.end_round(3, now=1.0)
    assert done.via == "multicast" and rs.round == 4


# ---- Figure 2 at the member: S piggybacked on gossip --------------------------------------------------------


def gossip(sender, rnd, mins, heard, stability):
    return Message(MsgType.GOSSIP, sender, 1, rnd, Gossip(tuple(mins), tuple(stability), heard, 4))


@pytest.mark.parametrize(
    ("rnd", "mins", "heard", "branch", "s_after"),
    [
        (0, (0, 0, 0, 0), bits(1), "redundant", [2, 1, 1, 1]),
        (0, (2, 1, 4, 1), bits(0, 1, 2), "more_up_to_date", [2, 1, 1, 1]),
        (0, (1, 2, 4, 1), bits(2), "merge", [2, 1, 1, 1]),
        (1, (1, 2, 4, 1), bits(2, 3), "next_round", [2, 1, 1, 1]),
    ],
)
def test_member_takes_the_max_of_s_in_current_and_next_rounds(rnd, mins, heard, branch, s_after):
    nodes = make_nodes()
    a = nodes[A]
    a.step(1.0)  # A starts round 0 with M = R_A, W = {A}
    a.main.heard |= bits(1)  # and has heard from B already
    a.receive(gossip(C, rnd, mins, heard, (2, 1, 1, 1)), 2.0)
    assert a.counters[f"global_{branch}"] == 1
    assert a.snapshot()["S"] == s_after


def test_member_ignores_s_of_old_rounds():
    nodes = make_nodes()
    a = nodes[A]
    a.main.round = 2
    a.receive(gossip(C, 1, (0, 0, 0, 0), bits(0, 1, 2, 3), (2, 1, 1, 1)), 2.0)
    assert a.counters["global_old_round"] == 1
    assert a.snapshot()["S"] == [0, 0, 0, 0]


def test_round_completes_without_members_declared_failed():
    """§3.3: W is checked against the live membership, so a crashed member does not block the round."""
    nodes = make_nodes(fail_k=4)
    a = nodes[A]
    for t in range(1, 4):
        a.step(float(t))
        for other in (B, C):  # B and C keep talking to A; D is silent
            a.receive(gossip(other, a.main.round, R[other], bits(other), (0, 0, 0, 0)), t + 0.5)
    assert a.main.round == 0 and a.snapshot()["global"]["W"] == [A, B, C]
    out = a.step(4.0)  # L[D] reaches K = 4
    assert [e.fields["member"] for e in out.events if e.event == "declared_failed"] == [D]
    assert a.main.round == 1
    assert a.snapshot()["S"] == [2, 1, 4, 1]  # min over A, B, C only
