"""Failure detection (Figure 3): the Live array, and detection times in simulated groups."""
from __future__ import annotations

import pytest

from gossipnode.protocols.gsgc.failure import UNKNOWN, FailureDetector

from .gsgc_sim import Sim, make_configs


def detector(**kw):
    args = {"me": 0, "n": 5, "fail_k": 6, "suspect_k": 5, "scope": range(4)}
    return FailureDetector(**{**args, **kw})


def test_step_counts_up_every_watched_member_but_me():
    fd = detector()
    fd.step()
    fd.step()
    assert list(fd.live) == [0, 2, 2, 2, UNKNOWN]  # member 4 is outside the scope (another local group)


def test_suspected_then_declared_once_each():
    fd = detector()
    events = [e for _ in range(8) for e in fd.step()]
    assert [(e, j) for e, j, _ in events if j == 1] == [("suspected", 1), ("declared_failed", 1)]
    assert [v for e, j, v in events if j == 1] == [5, 6]
    assert fd.failed == {1, 2, 3} and fd.suspected == set()


def test_hearing_from_a_member_resets_it_and_readmits_it():
    fd = detector()
    for _ in range(6):
        fd.step()
    assert fd.heard_from(2) == [("readmitted", 2, 0)]
    assert fd.live[2] == 0 and not fd.is_failed(2) and fd.is_failed(1)
    assert fd.heard_from(4) == []  # outside the scope: not watched


def test_merge_takes_the_minimum():
    fd = detector()
    for _ in range(5):
        fd.step()
    assert fd.suspected == {1, 2, 3}
    events = fd.merge(bytes([9, 1, 4, 200, 0]))
    assert list(fd.live) == [0, 1, 4, 5, UNKNOWN]  # own entry and out-of-scope entries are not merged
    assert events == [("suspicion_cleared", 1, 1)]  # 4 is not yet back at K // 2 = 3


def test_a_lagging_count_does_not_undo_a_declaration_but_fresh_news_does():
    fd = detector()
    for _ in range(6):
        fd.step()
    assert fd.merge(bytes([0, 5, 4, 6, 0])) == []  # neighbours one or two steps behind: still failed
    assert fd.failed == {1, 2, 3}
    assert fd.merge(bytes([0, 3, 6, 6, 0])) == [("readmitted", 1, 3)]  # heard from 3 steps ago: premature


def test_counts_saturate():
    fd = detector()
    for _ in range(300):
        fd.step()
    assert fd.live[1] == UNKNOWN - 1


# ---- in a group ------------------------------------------------------------------------------------------------

CRASH_AT = 20.3


@pytest.mark.parametrize("loss", [0.0, 0.1])
def test_crashed_member_is_declared_by_every_live_member_within_k_steps(loss):
    """After a crash every count of the crashed member rises by one per step everywhere (messages carry counts
    at most one latency old), so every member reaches K within K + 2 of its own steps (a step's random offset
    can delay a member's step by up to one interval) plus one latency."""
    k, step_s, latency = 12, 1.0, 0.05
    sim = Sim(make_configs(30, subgroup=2, fail_k=k, step_s=step_s), loss=loss, latency=(0.005, latency), seed=4)
    sim.crash(7, CRASH_AT)
    sim.run(CRASH_AT)
    assert not sim.of("declared_failed")
    bound = CRASH_AT + (k + 2) * step_s + latency
    sim.run(bound)
    for i in sim.live():
        assert sim.nodes[i].fd.is_failed(7), f"member {i} has not declared 7 failed by {bound}"
    sim.run(bound + 20)
    for i in sim.live():
        assert sim.nodes[i].fd.failed == {7}, f"member {i}"
    if loss == 0.0:
        assert {e.fields["member"] for _, e in sim.of("declared_failed")} == {7}
        assert len(sim.of("declared_failed")) == 29


def test_no_live_member_is_declared_failed_in_a_loss_free_run():
    """K = 16 is well above the diffusion time of push gossip with b = 2 in 40 members (log2 n + ln n ~ 9)."""
    sim = Sim(make_configs(40, subgroup=2, fail_k=16), seed=5)
    sim.run(100.0)
    assert sim.of("declared_failed") == []
    assert sim.of("suspected") == []
    assert all(node.main.round >= 10 for node in sim.nodes.values())


def test_paused_member_is_declared_then_readmitted_when_it_speaks_again():
    k = 6
    sim = Sim(make_configs(10, subgroup=2, fail_k=k), seed=6)
    sim.pause(3, at=10.0, duration=k + 4)
    sim.run(10.0 + k + 4 - 0.01)
    assert all(sim.nodes[i].fd.is_failed(3) for i in sim.live() if i != 3)
    sim.run(10.0 + k + 4 + 15)
    for i in sim.live():
        assert sim.nodes[i].fd.failed == set(), f"member {i}"
    assert {i for i, _ in sim.of("readmitted")} == set(sim.live()) - {3}
    # The resumed member skipped the steps it missed (it did not count them, nor declare anyone failed) ...
    skipped = [e.fields for _, e in sim.of("steps_skipped", 3)]
    assert skipped and skipped[0]["timer"] == "step" and skipped[0]["missed"] >= k + 2
    assert sim.of("declared_failed", 3) == []
    # ... and rejoined the rounds of the others.
    assert abs(sim.nodes[3].main.round - sim.nodes[0].main.round) <= 1
