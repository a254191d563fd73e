"""analysis.pbcast_model: the epidemic chain of pbcast's anti-entropy (this project's model, its docstring), checked
by hand on 2 and 3 members, its probabilities summing to 1, and its shape at the bimodal experiment's settings."""
from __future__ import annotations

import pytest

from analysis import pbcast_model as pm


def test_gc_rounds_is_pbcasts():
    from gossipnode.protocols.pbcast.params import PbcastParams
    for n in (2, 3, 7, 32, 100):
        for c in (0.3, 0.5, 1.0, 2.0):
            assert pm.gc_rounds(n, c) == PbcastParams(name="pbcast", gc_c=c).gc_rounds(n), (n, c)
    assert pm.gc_rounds(32, 2.0) == 10 and pm.gc_rounds(32, 0.5) == 3


def test_two_members_by_hand():
    # n = 2, fanout 1: the holder's digest always goes to the other member (push: digest, solicitation, repair all
    # arrive: (1 - eps)^3) and the other's digest always to the holder (pull: digest and push: (1 - eps)^2).
    # eps = 0.5: miss = (1 - 0.125)(1 - 0.25) = 0.65625, so p = 0.34375
    assert pm.infection_probability(1, 2, 1, 0.5) == pytest.approx(0.34375)
    assert pm.distribution(2, 1, 1, 0.5) == pytest.approx([0.0, 0.65625, 0.34375])
    # two rounds: still alone only if both rounds missed
    assert pm.distribution(2, 1, 2, 0.5) == pytest.approx([0.0, 0.65625 ** 2, 1 - 0.65625 ** 2])
    # no loss: one round suffices; no rounds: the start
    assert pm.distribution(2, 1, 1, 0.0) == pytest.approx([0.0, 0.0, 1.0])
    assert pm.distribution(2, 1, 0, 0.3) == [0.0, 1.0, 0.0]


def test_three_members_by_hand():
    # n = 3, fanout 1, no loss. From 1 holder: push reaches a given member with probability 1/2 (the holder picks
    # one of the 2 others); pull: the member picks the holder with probability 1/2. Miss 1/4, p(1) = 3/4.
    assert pm.infection_probability(1, 3, 1, 0.0) == pytest.approx(0.75)
    # from 2 holders the remaining member's own digest goes to a holder for sure: p(2) = 1
    assert pm.infection_probability(2, 3, 1, 0.0) == pytest.approx(1.0)
    # one round: both others miss 1/16, exactly one 2 * 3/4 * 1/4 = 6/16, both 9/16
    assert pm.distribution(3, 1, 1, 0.0) == pytest.approx([0.0, 1 / 16, 6 / 16, 9 / 16])
    # two rounds: 1 -> 1 -> 1: 1/256; 1 -> 1 -> 2: 6/256; the rest reach 3: 9/16 + 6/16 + 9/256 = 249/256
    assert pm.distribution(3, 1, 2, 0.0) == pytest.approx([0.0, 1 / 256, 6 / 256, 249 / 256])
    # fanout 2 = everyone: every digest goes to both others, one round reaches all
    assert pm.distribution(3, 2, 1, 0.0) == pytest.approx([0.0, 0.0, 0.0, 1.0])


def test_a_crashed_member_wastes_the_gossip_sent_to_it():
    # n = 3, tau = 1/3: one member crashed, 2 alive. The holder's digest goes to the alive one with probability 1/2,
    # the alive one's digest to the holder with 1/2: miss 1/4.
    assert pm.alive_of(3, 1 / 3) == 2
    assert pm.distribution(3, 1, 1, 0.0, tau=1 / 3) == pytest.approx([0.0, 0.25, 0.75])


def test_the_sender_crashing_mid_multicast_by_hand():
    # n = 3, the sender and nobody else crashes (crashed = 1, alive 2). Gossiped 1 round among all three before the
    # crash: [0, 1/16, 6/16, 9/16] holders (the sender included); at the crash the sender's holding is lost and
    # the others are all survivors: 0, 1, 2 survivors hold it with 1/16, 6/16, 9/16; no rounds are left (rounds 1).
    assert pm.crash_after(3, 1, 1, 0.0, 1, 1) == pytest.approx([1 / 16, 6 / 16, 9 / 16])
    # crashing before its first gossip: nobody else ever holds it (the "almost none" mode)
    assert pm.crash_after(32, 1, 10, 0.05, 9, 0) == pytest.approx([1.0] + [0.0] * 23)
    # n = 4, the sender and one other crash (alive 2): after 0 rounds nobody; the mixture of before = 0 and 1 is the
    # mean of the two
    a0, a1 = pm.crash_after(4, 1, 2, 0.1, 2, 0), pm.crash_after(4, 1, 2, 0.1, 2, 1)
    assert pm.crash_mixture(4, 1, 2, 0.1, 2, 2) == pytest.approx([(x + y) / 2 for x, y in zip(a0, a1)])
    # from 1: the messages put on the wire (gossiped at least once) only
    assert pm.crash_mixture(4, 1, 2, 0.1, 2, 2, first=1) == pytest.approx(a1)
    with pytest.raises(ValueError):
        pm.crash_mixture(4, 1, 2, 0.1, 2, 2, first=2)


@pytest.mark.parametrize("n,f,r,eps,tau", [(2, 1, 3, 0.2, 0.0), (5, 2, 4, 0.05, 0.2), (32, 1, 10, 0.05, 9 / 32),
                                           (32, 1, 3, 0.05, 9 / 32), (17, 3, 5, 0.5, 0.1), (10, 1, 0, 0.0, 0.0)])
def test_probabilities_sum_to_one(n, f, r, eps, tau):
    d = pm.distribution(n, f, r, eps, tau)
    assert sum(d) == pytest.approx(1.0) and min(d) >= -1e-15 and len(d) == pm.alive_of(n, tau) + 1
    crashed = max(1, n - pm.alive_of(n, tau))
    for b in (0, 1, r // 2, r):
        c = pm.crash_after(n, f, r, eps, crashed, b)
        assert sum(c) == pytest.approx(1.0) and len(c) == n - crashed + 1
    assert sum(pm.fraction_histogram(d)) == pytest.approx(1.0)
    for i in range(pm.alive_of(n, tau) + 1):
        assert sum(pm.transition(i, pm.alive_of(n, tau), n, f, eps)) == pytest.approx(1.0)


def test_fraction_histogram_bins():
    # 4 alive: fractions 0, .25, .5, .75, 1 -> bins 0, 5, 10, 15, 19 of 0.05
    h = pm.fraction_histogram([0.1, 0.2, 0.3, 0.15, 0.25])
    assert h[0] == 0.1 and h[5] == 0.2 and h[10] == 0.3 and h[15] == 0.15 and h[19] == 0.25 and sum(h) == 1.0


def test_bimodal_at_the_experiments_settings_and_lost_when_gc_is_early():
    # topologies/pbcast-bimodal.yaml: 32 members, fanout 1, 5 % loss, the sender + 8 crash (23 alive), the last
    # second = 10 rounds of 100 ms. C = 2 (10 rounds): almost none or almost all, nothing between to 1 %
    m = pm.model_histogram(32, 1, 2.0, 0.05, 9, 10)
    last = m["last"]
    assert m["rounds"] == 10 and m["alive"] == 23
    assert last[0] > 0.1 and last[-1] > 0.8 and sum(last[1:-1]) < 0.01
    # a message one survivor holds reaches all of them with probability > 0.99
    assert m["from_one"][-1] > 0.99 and m["from_one"][0] < 1e-3
    # C = 0.5 (3 rounds): most of the mass between (the bimodality lost, as measured)
    e = pm.model_histogram(32, 1, 0.5, 0.05, 9, 10)
    assert e["rounds"] == 3 and sum(e["last"][1:-1]) > 0.5 and e["last"][-1] < 0.05 and e["last"][0] > 0.1
    # and the spread grows with the rounds: P(all) from one holder is increasing in C
    ps = [pm.model_histogram(32, 1, c, 0.05, 9, 10)["from_one"][-1] for c in (0.5, 1.0, 1.5, 2.0)]
    assert ps == sorted(ps) and ps[0] < 0.01


def test_bad_input():
    with pytest.raises(ValueError):
        pm.distribution(4, 1, 2, 0.1, start=5)
    with pytest.raises(ValueError):
        pm.distribution(4, 0, 2, 0.1)
    with pytest.raises(ValueError):
        pm.crash_after(4, 1, 2, 0.1, 0, 1)
