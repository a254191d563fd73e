"""Rejoin after a healed partition and after a restart (issue #22 item 8; node_image/README.md, GSGC: Rejoin).

The bound: after a heal every member has probed (sent its Live array to) a member it declared failed within
P + 1 of its steps (P = `rejoin_probe_steps`; + 1 for the random point inside a step). A probe that crosses
readmits the prober and every member whose count at the prober is <= K/2 -- its whole side, since within a side
counts stay below the diffusion time D, and K is chosen above 2 D (README: K must exceed D, and readmission
needs a count <= K/2). From there the news is ordinary failure-detection gossip, which reaches every member
within D <= K/2 steps, each way. So one group again within (P + 1) + K steps of the heal, plus one latency.
"""
from __future__ import annotations

import pytest

from gossipnode.protocols.gsgc.core import GsgcNode
from gossipnode.protocols.gsgc.failure import UNKNOWN, FailureDetector
from gossipnode.protocols.gsgc.wire import Gossip, Live, Message, MsgType

from .gsgc_sim import Sim, make_configs
from .test_node_properties import SafetyWatch

K, P, STEP, LATENCY = 12, 4, 1.0, 0.05
BOUND = (P + 1 + K) * STEP + LATENCY


# ---- hand-worked cases ---------------------------------------------------------------------------------------

def test_only_observed_counts_go_on_the_wire():
    fd = FailureDetector(me=0, n=5, fail_k=6, suspect_k=5, scope=range(5), grounded_only=True)
    fd.step()
    fd.step()
    assert list(fd.live) == [0, 2, 2, 2, 2]  # locally Figure 3's counts from 0 ...
    assert fd.wire_live() == bytes([0, UNKNOWN, UNKNOWN, UNKNOWN, UNKNOWN])  # ... but nothing observed yet
    fd.heard_from(3)
    fd.merge(bytes([1, 1, UNKNOWN, 0, 5]))  # 1 observed elsewhere (1 < 2); 4's 5 is no news below our 2
    assert fd.wire_live() == bytes([0, 1, UNKNOWN, 0, UNKNOWN])
    plain = FailureDetector(me=0, n=5, fail_k=6, suspect_k=5, scope=range(5))
    plain.step()
    assert plain.wire_live() == bytes([0, 1, 1, 1, 1])  # without rejoin: Figure 3 as before


def lone_node(n: int = 3, **kw) -> GsgcNode:
    return GsgcNode(make_configs(n, fail_k=4, senders=[0], **kw)[0], 0.0)


def tick_until(node: GsgcNode, until: float) -> list:
    outs = []
    while node.next_wakeup() <= until:
        outs.append(node.tick(node.next_wakeup()))
    return outs


def probes_in(outs) -> list[int]:
    """Destinations of LIVE messages sent without a gossip beside them."""
    return [d for o in outs for d, m in o.send
            if m.type is MsgType.LIVE and not any(x.type is MsgType.GOSSIP for _, x in o.send)]


def test_probes_go_round_robin_to_declared_members_every_p_steps():
    node = lone_node(n=5, rejoin_probe_steps=2)
    outs = tick_until(node, 4.99)  # step k falls in [k - 1, k): nobody heard, all declared at step 4 ...
    assert node.fd.failed == {1, 2, 3, 4}  # ... and probed at once: member 1; from now on no gossip
    assert probes_in(outs) == [1]
    outs = tick_until(node, 12.99)  # steps 6..13: probes at steps 6, 8, 10, 12, round robin
    assert probes_in(outs) == [2, 3, 4, 1]
    probe = next(m for o in outs for _, m in o.send if m.type is MsgType.LIVE)
    assert probe.body.live == bytes([0, UNKNOWN, UNKNOWN, UNKNOWN, UNKNOWN])
    assert node.counters["probes"] == 5


def test_no_probes_without_the_option():
    node = lone_node(n=5)
    tick_until(node, 4.99)
    assert node.fd.failed == {1, 2, 3, 4}
    outs = tick_until(node, 20.0)
    assert outs and not any(m.type is MsgType.LIVE for o in outs for _, m in o.send)


def test_readmission_is_logged_and_admits_the_member_to_w_at_the_next_round():
    node = lone_node(n=3, rejoin_probe_steps=100)
    tick_until(node, 4.99)
    assert node.fd.failed == {1, 2}
    rnd = node.main.round  # alone, node 0 constructs a round at every step
    out = node.receive(Message(MsgType.LIVE, 2, 1, rnd, Live(bytes([UNKNOWN, 1, 0]))), 5.5)
    readmitted = [e for e in out.events if e.event == "readmitted"]
    assert [(e.fields["member"], e.fields["via"]) for e in readmitted] == [(2, "heard"), (1, "live")]
    for e in readmitted:
        assert e.fields["declared_ts"] < 5.0 and e.fields["after_s"] == pytest.approx(5.5 - e.fields["declared_ts"])
    assert node.fd.failed == set()
    # Round `rnd` was under way: it completes on W = {0} (the readmitted do not stall it) ...
    out = node.tick(node.next_wakeup())
    done = [e.fields for e in out.events if e.event == "round_completed"]
    assert [(d["round"], d["via"]) for d in done] == [(rnd, "constructed")]
    assert sorted(e.fields["member"] for e in out.events if e.event == "admitted") == [1, 2]
    assert all(e.fields["round"] == rnd + 1 for e in out.events if e.event == "admitted")
    # ... the next one waits for both readmitted members' bits (§3.3: the join window at a round's start).
    out = node.tick(node.next_wakeup())
    assert not [e for e in out.events if e.event == "round_completed"] and node.main.round == rnd + 1
    gossip = Gossip((5,), (0,), 0b110, 3)
    out = node.receive(Message(MsgType.GOSSIP, 1, 2, rnd + 1, gossip), node.next_wakeup() - 0.5)
    assert [(e.fields["round"], e.fields["via"]) for e in out.events if e.event == "round_completed"] == \
        [(rnd + 1, "constructed")]


def test_the_option_needs_failure_detection():
    with pytest.raises(ValueError, match="rejoin_probe_steps needs fail_k"):
        make_configs(3, rejoin_probe_steps=4)


# ---- the seeded simulator ------------------------------------------------------------------------------------

N, CUT, PART_AT, HEAL_AT = 16, frozenset(range(10, 16)), 20.0, 50.0


def partition_run(seed: int, probes: int | None = P) -> tuple[Sim, SafetyWatch]:
    sim = Sim(make_configs(N, subgroup=2, step_s=STEP, fail_k=K, rejoin_probe_steps=probes, senders=[0, 12],
                           rate_per_s=2.0), loss=0.05, latency=(0.005, LATENCY), seed=seed)
    watch = SafetyWatch(sim)
    sim.partition(CUT, PART_AT)
    sim.heal(HEAL_AT)
    return sim, watch


def cross(i: int, j: int) -> bool:
    return (i in CUT) != (j in CUT)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_healed_partition_is_one_group_again_within_the_bound(seed):
    sim, watch = partition_run(seed)
    sim.run(HEAL_AT)
    declared = {(i, e.fields["member"]) for i, e in sim.of("declared_failed")}
    assert declared == {(i, j) for i in range(N) for j in range(N) if cross(i, j)}  # each side, all the other
    assert not sim.of("readmitted")
    s_at_heal = {i: sim.nodes[i].stability for i in sim.nodes}
    sim.run(HEAL_AT + BOUND)
    for i in sim.nodes:
        assert sim.nodes[i].fd.failed == set(), f"member {i} still counts {sorted(sim.nodes[i].fd.failed)} failed"
    readmitted = {(i, e.fields["member"]): e for i, e in sim.of("readmitted")}
    assert set(readmitted) == declared  # every member readmitted every member of the other side, once ...
    for e in readmitted.values():  # ... after the heal, with how long it had been out
        assert HEAL_AT <= e.ts <= HEAL_AT + BOUND
        assert e.fields["after_s"] >= HEAL_AT - PART_AT - K * STEP - 2
    assert sum(node.counters["probes"] for node in sim.nodes.values()) > 0
    sim.run(HEAL_AT + BOUND + 20)  # stability detection runs over the whole group again
    rounds = [node.main.round for node in sim.nodes.values()]
    assert max(rounds) - min(rounds) <= 1
    assert len(sim.of("admitted")) == len(declared)
    for i, node in sim.nodes.items():
        assert node.fd.failed == set()
        assert all(a > b for a, b in zip(node.stability, s_at_heal[i])), f"S at {i} did not rise after the heal"
    assert watch.checks > 1000 and watch.max_s > 0  # S never passed a protected member's receipts


def test_without_probes_the_partition_stays_split():
    """The issue's symptom, kept as the option's off state: a declared member is sent nothing."""
    sim, _ = partition_run(1, probes=None)
    sim.run(HEAL_AT + 3 * BOUND)
    assert not sim.of("readmitted")
    assert all(node.fd.failed == {j for j in range(N) if cross(i, j)} for i, node in sim.nodes.items())


def restart_run(probes: int | None) -> Sim:
    sim = Sim(make_configs(N, subgroup=2, step_s=STEP, fail_k=K, rejoin_probe_steps=probes, senders=[0, 5],
                           rate_per_s=2.0), loss=0.05, latency=(0.005, LATENCY), seed=7)
    sim.crash(7, 10.0)  # for good
    sim.crash(5, 20.0)
    sim.restart(5, 45.0)
    return sim


def test_a_restarted_member_is_readmitted_within_the_bound_and_resurrects_nobody():
    sim = restart_run(P)
    watch = SafetyWatch(sim)
    sim.run(45.0)
    assert all(sim.nodes[i].fd.failed == {5, 7} for i in sim.live() if i != 5)
    sim.run(45.0 + BOUND)
    for i in sim.live():
        if i != 5:
            assert sim.nodes[i].fd.failed == {7}, f"member {i}"
    assert {i for i, e in sim.of("readmitted") if e.fields["member"] == 5} == set(sim.live()) - {5}
    assert not [e for _, e in sim.of("readmitted") if e.fields["member"] == 7]
    # The restarted member declares the dead one on its own count, K steps after its start.
    assert sim.nodes[5].fd.failed == {7}
    sim.run(80.0)
    assert abs(sim.nodes[5].main.round - sim.nodes[0].main.round) <= 1
    assert sim.nodes[5].stability == sim.nodes[0].stability and sim.nodes[5].stability[1] > 0
    assert watch.checks > 1000


def test_without_the_option_a_restarted_members_zeros_resurrect_the_dead():
    """Why only observed counts go on the wire: Figure 3's initial L = 0 at a member that starts late claims it
    heard everyone just now, and readmits a member that died meanwhile."""
    sim = restart_run(None)
    sim.run(80.0)
    assert [e for _, e in sim.of("readmitted") if e.fields["member"] == 7]


@pytest.mark.parametrize(("n", "k", "loss"), [(12, 12, 0.0), (12, 12, 0.1), (30, 12, 0.05), (12, 8, 0.1)])
def test_the_option_changes_no_event_while_nobody_is_declared(n, k, loss):
    """GSGC's measured behaviour without declarations is the same with rejoin on: same events (suspicions
    included), same times; only LIVE bytes differ (unobserved counts travel as UNKNOWN)."""
    runs = []
    for probes in (None, P):
        sim = Sim(make_configs(n, subgroup=2, fail_k=k, rejoin_probe_steps=probes, senders=[0, 3]), loss=loss,
                  seed=3)
        sim.run(60.0)
        assert not sim.of("declared_failed")
        runs.append([(i, e.ts, e.event, e.fields) for i, e in sim.events])
    assert runs[0] == runs[1] and len(runs[0]) > 1000


def test_with_local_gossip_a_cut_across_both_groups_heals_too():
    """§5: failure detection watches the local group and, at SCs, every SC; a cut through both local groups
    (and their SCs) heals within the same bound, and S keeps rising for everyone afterwards."""
    from .test_node_properties import local_groups

    sim = Sim(make_configs(N, subgroup=2, step_s=STEP, fail_k=K, rejoin_probe_steps=P, senders=[0, 12],
                           local_groups=local_groups(N, 2)), loss=0.05, latency=(0.005, LATENCY), seed=2)
    watch = SafetyWatch(sim)
    sim.partition(range(5, 11), PART_AT)
    sim.heal(HEAL_AT)
    sim.run(HEAL_AT)
    assert len(sim.of("declared_failed")) > N
    s_at_heal = {i: sim.nodes[i].stability for i in sim.nodes}
    sim.run(HEAL_AT + BOUND)
    assert all(node.fd.failed == set() for node in sim.nodes.values())
    sim.run(HEAL_AT + BOUND + 20)
    for i, node in sim.nodes.items():
        assert node.fd.failed == set()
        assert all(a > b for a, b in zip(node.stability, s_at_heal[i])), f"S at {i} did not rise after the heal"
    assert watch.checks > 1000 and watch.max_s > 0


def test_a_member_that_joins_late_is_admitted():
    """The schedule's `join`: a member held back at the start (crashed before its first step) starts at 30 s,
    after everyone declared it; it is readmitted by all within the bound and then contributes to W."""
    sim = Sim(make_configs(N, subgroup=2, step_s=STEP, fail_k=K, rejoin_probe_steps=P, senders=[0]),
              latency=(0.005, LATENCY), seed=8)
    sim.crash(9, 0.0)
    sim.restart(9, 30.0)
    sim.run(29.9)
    assert all(sim.nodes[i].fd.failed == {9} for i in sim.live())
    sim.run(30.0 + BOUND)
    assert all(node.fd.failed == set() for node in sim.nodes.values())
    assert {i for i, e in sim.of("admitted") if e.fields["member"] == 9} == set(sim.nodes) - {9}
    sim.run(60.0)
    assert abs(sim.nodes[9].main.round - sim.nodes[0].main.round) <= 1
    assert sim.nodes[9].stability == sim.nodes[0].stability and sim.nodes[9].stability[0] > 0
