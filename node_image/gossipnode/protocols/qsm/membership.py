"""QSM's two-level membership (§2.1, Figure 4) and partitions (§2.3.1), the token's NAK-set algebra (§2.3.3) and
the rate-control formulas (§2.4). Pure: no I/O, no time, no randomness.

- `compute_regions`: group views -> region views. A region is the set of members that belong to exactly the same
  set of groups; every member is in exactly one region; a group is the union of its regions.
- `Region`: a region view split into p = max(1, floor(n / R)) partitions, the k-th member (by id) in partition
  k mod p; a packet with regional sequence number i is cached by partition i mod p. The member with the smallest
  id of a partition leads it; the leader of partition 0 leads the region. The torus (Figure 5): the token goes
  around partition 0's ring (leader first), then to the next partition's leader, ..., back to the region leader.
- Ranges: a NAK set is a sorted tuple of disjoint, non-adjacent inclusive (first, last) ranges.
- `merge_naks`: what a node pushes to / pulls from its ring predecessor, given both NAK sets.
- `caching_prefix`: a node's part of the caching-stable prefix (the sender frees a packet once all its caching
  replicas hold it, §2.3; pulls from outside a packet's partition wait for it, §2.3.3); the token takes the min.
- `receiver_share`, `sender_rate`: μ_rec = min_i μ_rec^(i) / m (1) and μ_snd = max(μ_min, (1+λ)·μ_rec) (2).
"""
from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property

Ranges = tuple[tuple[int, int], ...]
GROUP_NAME = re.compile(r"^[a-z][a-z0-9]{0,7}$")
NAME_MAX = 64           # a multicast group's name (orchestrator/mcast/spec.py: 1-64 characters a-z, 0-9, '-', '_')
MAX_INDEX = 0xFFFF      # groups and regions are u16 indexes on the wire (wire.py)


def region_name(groups: Iterable[str]) -> str:
    """A region's name (its IP multicast group's): `r-` + its sorted group names joined by `-` while that fits in
    NAME_MAX characters; longer, `r--` + the first 24 hex digits of the SHA-256 of the joined names (no joined name
    has `--`: group names are not empty). Every node computes the same name from the same group views."""
    joined = "-".join(sorted(groups))
    name = "r-" + joined
    if len(name) <= NAME_MAX:
        return name
    return "r--" + hashlib.sha256(joined.encode()).hexdigest()[:24]


@dataclass(frozen=True)
class Region:
    """One region view: its index, the groups its members belong to, its members and its partitions."""

    index: int
    groups: tuple[str, ...]            # sorted group names
    members: tuple[int, ...]           # sorted member ids
    partitions: tuple[tuple[int, ...], ...]

    @cached_property
    def name(self) -> str:
        """The region's IP multicast group name (`region_name`)."""
        return region_name(self.groups)

    @property
    def leader(self) -> int:
        """The region leader: the leader of the first partition with a member (partition 0 unless a view change
        removed all its members from an old view, `without`)."""
        return next(part[0] for part in self.partitions if part)

    @property
    def p(self) -> int:
        return len(self.partitions)

    def partition_of(self, member: int) -> int:
        for k, part in enumerate(self.partitions):
            if member in part:
                return k
        raise ValueError(f"member {member} is not in region {self.name}")

    def caching_partition(self, rseq: int) -> int:
        """The partition whose members cache the packet with regional sequence number `rseq`."""
        return rseq % self.p

    def caches(self, member: int, rseq: int) -> bool:
        return self.partition_of(member) == self.caching_partition(rseq)

    def ring(self) -> list[int]:
        """The token's path through the region (Figure 5): each partition's ring from its leader, partitions in
        order; the token goes from the last node back to the region leader."""
        return [m for part in self.partitions for m in part]

    def next_hop(self, member: int) -> tuple[int, str]:
        """Where `member` passes the token: (next member, "intra" | "inter" | "home"). Inside a partition the token
        goes round the partition's ring and back to its leader ("intra"); the leader then passes it to the next
        partition's leader ("inter"), the last partition's leader back to the region leader ("home")."""
        k = self.partition_of(member)
        part = self.partitions[k]
        i = part.index(member)
        if i + 1 < len(part):
            return part[i + 1], "intra"
        if len(part) > 1 and i == len(part) - 1:
            return part[0], "intra"            # back to the partition leader, which then passes it on
        raise AssertionError("unreachable")    # a single-node partition's leader uses leader_hop

    def leader_hop(self, k: int) -> tuple[int, str]:
        """Partition k's leader, done with its own ring: the next partition's leader, or home to the region leader
        (partitions a view change emptied are skipped)."""
        for nxt in self.partitions[k + 1:]:
            if nxt:
                return nxt[0], "inter"
        return self.leader, "home"

    def without(self, dead: Iterable[int]) -> Region:
        """This region view as its survivors finish it after a view change removed `dead` (§2.1, §2.3.2: "A node
        that the GMS considers as dead in the region will be excluded by others from the protocol"): the same index
        and partitions (so the same caching partition for every packet of this view), the dead left out of the
        rings; leaders are the first survivors. A partition may become empty (its packets have no caching replica
        left)."""
        gone = set(dead)
        return Region(self.index, self.groups, tuple(m for m in self.members if m not in gone),
                      tuple(tuple(m for m in part if m not in gone) for part in self.partitions))


def resolve_members(spec: str | Iterable[int | str], names: Mapping[str, int], n: int, what: str) -> list[int]:
    """A group's `members`/`senders` as member ids: "all", or a list of member ids or member names."""
    if spec == "all":
        return list(range(n))
    if isinstance(spec, str):
        raise ValueError(f"{what}: expected 'all' or a list of members, got {spec!r}")
    out: list[int] = []
    for m in spec:
        if isinstance(m, int) and not isinstance(m, bool):
            if not 0 <= m < n:
                raise ValueError(f"{what}: member id {m} is not a member (ids 0..{n - 1})")
            out.append(m)
        elif isinstance(m, str) and m in names:
            out.append(names[m])
        else:
            raise ValueError(f"{what}: {m!r} is not a member")
    if len(set(out)) != len(out):
        raise ValueError(f"{what}: a member is listed twice")
    return out


def compute_regions(groups: Mapping[str, Iterable[int]], n: int, partition_size: int,
                    absent: Iterable[int] = ()) -> list[Region]:
    """Group views -> region views (§2.1): a region per distinct set of groups, members 0..n-1 but the `absent`
    ones (joiners not in the view yet: they are in no group view). ValueError for a member in no group, an unknown
    member, an empty group, a bad name or partition_size < 1."""
    if partition_size < 1:
        raise ValueError(f"partition_size (R) must be at least 1, got {partition_size}")
    if not groups:
        raise ValueError("no groups")
    if len(groups) > MAX_INDEX + 1:
        raise ValueError(f"{len(groups)} groups: at most {MAX_INDEX + 1} (a u16 index on the wire)")
    away = set(absent)
    of: dict[int, list[str]] = {m: [] for m in range(n) if m not in away}
    for g, members in sorted(groups.items()):
        if not GROUP_NAME.match(g):
            raise ValueError(f"group name {g!r}: 1-8 characters a-z, 0-9, starting with a letter")
        ms = list(members)
        if not ms:
            raise ValueError(f"group {g!r} has no members")
        for m in ms:
            if m not in of:
                raise ValueError(f"group {g!r}: {m!r} is not a member (ids 0..{n - 1})" if m not in away
                                 else f"group {g!r}: {m!r} has not joined yet")
            of[m].append(g)
    lonely = [m for m, gs in of.items() if not gs]
    if lonely:
        raise ValueError(f"members {lonely} belong to no group")
    by_key: dict[tuple[str, ...], list[int]] = {}
    for m, gs in of.items():
        by_key.setdefault(tuple(sorted(gs)), []).append(m)
    regions = [region_view(index, key, by_key[key], partition_size) for index, key in enumerate(sorted(by_key))]
    names = [r.name for r in regions]
    if len(set(names)) != len(names):      # two digests alike: not expected in practice, but never silently
        raise ValueError(f"two regions have the same name: {sorted(n for n in names if names.count(n) > 1)[:2]}")
    return regions


def region_view(index: int, groups: tuple[str, ...], members: Iterable[int], partition_size: int) -> Region:
    """A region view of `members` (§2.3.1): p = max(1, floor(n / R)) partitions, the k-th member (by id) in
    partition k mod p."""
    ms = sorted(members)
    p = max(1, len(ms) // partition_size)
    return Region(index, groups, tuple(ms), tuple(tuple(ms[k::p]) for k in range(p)))


def regions_of_group(regions: Iterable[Region], group: str) -> list[Region]:
    return [r for r in regions if group in r.groups]


# ---- NAK sets ---------------------------------------------------------------------------------------------------

def to_ranges(seqs: Iterable[int]) -> Ranges:
    out: list[list[int]] = []
    for s in sorted(set(seqs)):
        if out and s == out[-1][1] + 1:
            out[-1][1] = s
        else:
            out.append([s, s])
    return tuple((a, b) for a, b in out)


def expand(ranges: Ranges) -> list[int]:
    return [s for a, b in ranges for s in range(a, b + 1)]


def normalise(ranges: Iterable[tuple[int, int]]) -> Ranges:
    out: list[list[int]] = []
    for a, b in sorted(ranges):
        if a > b:
            continue
        if out and a <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return tuple((a, b) for a, b in out)


def intersect(x: Ranges, y: Ranges) -> Ranges:
    out = []
    i = j = 0
    while i < len(x) and j < len(y):
        a, b = max(x[i][0], y[j][0]), min(x[i][1], y[j][1])
        if a <= b:
            out.append((a, b))
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return normalise(out)


def subtract(x: Ranges, y: Ranges) -> Ranges:
    """The seqs in x but not in y."""
    out = []
    for a, b in x:
        lo = a
        for c, d in y:
            if d < lo or c > b:
                continue
            if c > lo:
                out.append((lo, c - 1))
            lo = max(lo, d + 1)
            if lo > b:
                break
        if lo <= b:
            out.append((lo, b))
    return normalise(out)


def count(ranges: Ranges) -> int:
    return sum(b - a + 1 for a, b in ranges)


def merge_naks(predecessor: Ranges, mine: Ranges) -> tuple[Ranges, Ranges]:
    """§2.3.3 at a node that receives the token from its ring predecessor in the same partition:
    (push, pull). "All NAKs reported by the predecessor, but not reported by the successor are to be forwarded
    (push) by the successor to the predecessor. All NAKs reported by the successor, but not the predecessor are to
    be requested (pull) from the predecessor." Seqs both miss are in neither (they go into the partition's
    collective NAK, the running intersection)."""
    return subtract(predecessor, mine), subtract(mine, predecessor)


def caching_prefix(prefix: int, ahead: Iterable[int] | set[int], part: int, p: int) -> int:
    """The largest y such that this node holds every packet up to y that its partition caches: it holds 1..prefix
    and the packets in `ahead`; it is in partition `part` of `p`, which caches rseq i when i mod p == part (§2.3.1).
    The minimum of this over a region's nodes is the region's caching-stable prefix: every packet up to it is held
    by all of its caching replicas ("The sender considers a message to have been delivered (and stops buffering it)
    once it has been acknowledged by all caching replicas", §2.3)."""
    if not 0 <= part < p:
        raise ValueError(f"partition {part} of {p}")
    held = ahead if isinstance(ahead, (set, frozenset)) else set(ahead)
    s = prefix + 1 + (part - (prefix + 1)) % p      # the first packet after the prefix that the partition caches
    while s in held:
        s += p
    return s - 1


# ---- rate control -----------------------------------------------------------------------------------------------

def receiver_share(node_rates: Iterable[float], senders: int) -> float:
    """(1): μ_rec = min_i μ_rec^(i) / m, m the number of senders currently multicasting into the region (>= 1)."""
    rates = list(node_rates)
    if not rates:
        raise ValueError("no receiver rates")
    return min(rates) / max(1, senders)


def sender_rate(mu_rec: float, growth: float, mu_min: float) -> float:
    """(2): μ_snd = max(μ_min, (1 + λ)·μ_rec)."""
    return max(mu_min, (1.0 + growth) * mu_rec)


class MovingRate:
    """A node's μ_rec^(i): new packets per interval Δ, averaged over the last k intervals (§2.4: k = 10, Δ = 1 s).
    Before k intervals have passed, the average is over the intervals so far."""

    def __init__(self, k: int, interval: float, now: float) -> None:
        self.k = k
        self.interval = interval
        self.start = now
        self.current = 0
        self.samples: list[float] = []

    def add(self, now: float, packets: int = 1) -> None:
        self.roll(now)
        self.current += packets

    def roll(self, now: float) -> None:
        while now >= self.start + self.interval:
            self.samples.append(self.current / self.interval)
            self.samples = self.samples[-self.k:]
            self.current = 0
            self.start += self.interval

    def rate(self, now: float) -> float | None:
        """packets/s, or None before the first interval has ended."""
        self.roll(now)
        if not self.samples:
            return None
        return sum(self.samples) / len(self.samples)
