"""QSM's pure pieces against hand-worked cases: regions of overlap (§2.1, Figure 4), partitions and the torus
(§2.3.1, Figure 5), the token's NAK-set merge (§2.3.3) and the rate-control formulas (§2.4)."""
from __future__ import annotations

import pytest

import hashlib
import re

from gossipnode.protocols.qsm.membership import (
    NAME_MAX, MovingRate, compute_regions, count, intersect, merge_naks, normalise, receiver_share, region_name,
    resolve_members, sender_rate, subtract, to_ranges,
)

MCAST_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")     # orchestrator/mcast/spec.py's GROUP_NAME_RE


def test_two_overlapping_groups_make_three_regions():
    # A = {0..5}, B = {4..9}: members 0-3 only in A, 4-5 in both, 6-9 only in B.
    regions = compute_regions({"a": range(0, 6), "b": range(4, 10)}, 10, 2)
    assert [(r.groups, r.members) for r in regions] == [
        (("a",), (0, 1, 2, 3)), (("a", "b"), (4, 5)), (("b",), (6, 7, 8, 9))]
    assert [r.name for r in regions] == ["r-a", "r-a-b", "r-b"]
    # Every member in exactly one region; every group is the union of its regions.
    assert sorted(m for r in regions for m in r.members) == list(range(10))


def test_three_groups_irregular_overlap():
    # Figure 4's shape: groups share some regions. A={0,1,2,3}, B={2,3,4}, C={3,4,5}.
    regions = compute_regions({"a": [0, 1, 2, 3], "b": [2, 3, 4], "c": [3, 4, 5]}, 6, 1)
    got = {r.groups: r.members for r in regions}
    assert got == {("a",): (0, 1), ("a", "b"): (2,), ("a", "b", "c"): (3,), ("b", "c"): (4,), ("c",): (5,)}
    # Regions of B: {2}, {3}, {4}.
    assert sorted(m for r in regions if "b" in r.groups for m in r.members) == [2, 3, 4]


def test_partitions_round_robin_and_leaders():
    # 11 members, R = 3: p = floor(11/3) = 3 partitions, k-th member in partition k mod 3.
    (region,) = compute_regions({"g": range(11)}, 11, 3)
    assert region.partitions == ((0, 3, 6, 9), (1, 4, 7, 10), (2, 5, 8))
    assert region.leader == 0
    assert [region.caching_partition(i) for i in (1, 2, 3, 4)] == [1, 2, 0, 1]
    assert region.caches(4, 7) and not region.caches(0, 7)
    # The torus: each partition's ring, then the next leader, back home.
    assert region.next_hop(0) == (3, "intra") and region.next_hop(9) == (0, "intra")
    assert region.leader_hop(0) == (1, "inter") and region.leader_hop(2) == (0, "home")
    # Fewer members than R: one partition.
    (small,) = compute_regions({"g": range(2)}, 2, 5)
    assert small.partitions == ((0, 1),)


@pytest.mark.parametrize("groups, n, r, message", [
    ({"a": [0, 1]}, 3, 2, "belong to no group"),
    ({"a": [0, 1, 2]}, 3, 0, "at least 1"),
    ({"a": [0, 1, 7]}, 3, 1, "not a member"),
    ({"a": []}, 1, 1, "no members"),
    ({"A!": [0]}, 1, 1, "group name"),
])
def test_bad_membership(groups, n, r, message):
    with pytest.raises(ValueError, match=message):
        compute_regions(groups, n, r)


def test_resolve_members():
    names = {"h0": 0, "h1": 1, "h2": 2}
    assert resolve_members("all", names, 3, "g") == [0, 1, 2]
    assert resolve_members(["h2", 0], names, 3, "g") == [2, 0]
    with pytest.raises(ValueError, match="'h9' is not a member"):
        resolve_members(["h9"], names, 3, "g")
    with pytest.raises(ValueError, match="listed twice"):
        resolve_members([1, "h1"], names, 3, "g")


def test_range_algebra():
    assert to_ranges([5, 1, 2, 3, 7, 8]) == ((1, 3), (5, 5), (7, 8))
    assert normalise([(4, 6), (1, 3), (9, 8)]) == ((1, 6),)
    assert intersect(((1, 10),), ((3, 4), (8, 12))) == ((3, 4), (8, 10))
    assert subtract(((1, 10),), ((3, 4), (8, 12))) == ((1, 2), (5, 7))
    assert count(((1, 2), (5, 7))) == 5


def test_token_nak_merge_figure_7():
    # Predecessor misses 2, 5-6, 9; this node misses 5, 8-9 (up to the cutoff 10).
    pred = to_ranges([2, 5, 6, 9])
    mine = to_ranges([5, 8, 9])
    push, pull = merge_naks(pred, mine)
    assert push == ((2, 2), (6, 6))     # the predecessor lacks them, this node has them: forward
    assert pull == ((8, 8),)            # this node lacks it, the predecessor has it: one pull request
    # 5 and 9 are missed by both: they stay in the partition's collective NAK (the running intersection).
    assert intersect(pred, mine) == ((5, 5), (9, 9))
    assert merge_naks((), ()) == ((), ())


def test_rate_formulas():
    # (1): the slowest receiver's rate, shared among m senders.
    assert receiver_share([120.0, 80.0, 100.0], 2) == 40.0
    assert receiver_share([50.0], 0) == 50.0            # no active sender counted: m is at least 1
    # (2): slightly above the fair share, never below the minimum.
    assert sender_rate(40.0, 0.1, 5.0) == pytest.approx(44.0)
    assert sender_rate(2.0, 0.1, 5.0) == 5.0
    # The combined form: max(μ_min, (1+λ)·min μ_rec / m).
    assert sender_rate(receiver_share([90.0, 60.0], 3), 0.5, 1.0) == pytest.approx(30.0)


def test_moving_rate():
    r = MovingRate(k=3, interval=1.0, now=0.0)
    assert r.rate(0.5) is None
    for t in (0.1, 0.2, 0.3, 0.4):
        r.add(t)
    assert r.rate(1.0) == 4.0
    r.add(1.5, 2)
    assert r.rate(2.0) == 3.0             # (4 + 2) / 2
    assert r.rate(4.0) == pytest.approx(2 / 3)   # last 3 intervals: 2, 0, 0
    assert r.rate(5.0) == 0.0


def test_region_names_without_the_length_limit():
    # while "r-" + the joined names fits in 64 characters it is the name; longer, "r--" + 24 hex digits of a digest
    assert region_name(["b", "a"]) == "r-a-b"
    fits = [f"g{i:02d}" for i in range(20)]                 # 2 + 20 * 4 - 1 = 81 > 64
    assert len("r-" + "-".join(fits)) == 81
    assert region_name(fits) == "r--" + hashlib.sha256("-".join(fits).encode()).hexdigest()[:24]
    exact = [f"abcdefg{c}" for c in "abcdefg"]               # 2 + 7 * 9 - 1 = 64: still joined
    assert region_name(exact) == "r-" + "-".join(exact) and len(region_name(exact)) == NAME_MAX
    assert region_name(exact + ["z"]).startswith("r--")
    # 300 groups; member m is in the 30 groups g(m mod 300) ... g(m mod 300 + 29) (mod 300): 300 regions of 2
    # members and 30 groups each, every name a valid, distinct multicast group name, more than 256 regions (u16
    # indexes on the wire)
    groups = {f"g{k}": [m for m in range(600) if (k - m) % 300 < 30] for k in range(300)}
    regions = compute_regions(groups, 600, 3)
    assert len(regions) == 300 and {len(r.groups) for r in regions} == {30} and {len(r.members) for r in regions} == {2}
    names = [r.name for r in regions]
    assert len(set(names)) == len(names) and all(MCAST_NAME.match(x) and x.startswith("r--") for x in names)
