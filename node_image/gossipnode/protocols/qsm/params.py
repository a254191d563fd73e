"""QSM's parameters: the `protocol:` section of a node config with `name: qsm`.

The groups are the group membership service's initial views (docs/qsm.md): every member computes the same regions,
partitions and leaders from them (`membership.compute_regions`), and the same next views from the GMS's removals
and additions (`Membership.change`).
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from pydantic import Field

from gossipnode.model import Strict

from .membership import MAX_INDEX, Region, compute_regions, region_view, regions_of_group, resolve_members


class GroupSpec(Strict):
    name: str = Field(description="1-8 characters a-z, 0-9, starting with a letter")
    members: Literal["all"] | list[int | str] = Field(default="all", description="member ids or names, or all")
    senders: Literal["all"] | list[int | str] | None = Field(
        default=None, description="who multicasts into this group (members of the group, and workload senders); "
                                  "None: every workload sender that is a member")


class QsmParams(Strict):
    name: Literal["qsm"]
    groups: list[GroupSpec] = Field(min_length=1, description="the initial group views")
    partition_size: int = Field(default=5, ge=1, description="R: caching replicas per packet; partitions of a "
                                                               "region: max(1, floor(n / R))")
    token_interval_s: float = Field(default=1.0, gt=0, description="the region leader generates a token this often "
                                                                    "(§2.3.3: once per second)")
    transport: Literal["mcast", "udp"] = Field(
        default="mcast", description="mcast: one IP multicast datagram per region (the group `r-<groups>` must be "
                                     "in the config); udp: one unicast copy per region member")
    nak_limit: int = Field(default=16, ge=1, le=255, description="NAK ranges a node reports per sender and token")
    pull_limit: int = Field(default=64, ge=1, description="packets forwarded in answer to one pull request")
    retransmit_s: float = Field(default=3.0, gt=0, description="the sender re-multicasts the packets no region "
                                                               "member has seen after this long (the lost tail)")
    rate_control: bool = Field(default=True, description="§2.4; false: send at the workload's rate_per_s")
    growth: float = Field(default=0.05, ge=0, description="λ, the growth coefficient of (2)")
    rate_min: float = Field(default=1.0, gt=0, description="μ_min, packets/s, the floor of (2)")
    rate_max: float | None = Field(default=None, gt=0, description="a cap on μ_snd (packets/s); None: none")
    send_credits: int = Field(
        default=32, ge=1, description="C, the sender's credit pool (§2.4: \"Sending a message consumes a credit out "
                                      "of a fixed pool of size C ... we increase the number of credits by ΔT μ_snd, "
                                      "where ΔT is the actual amount of time that has elapsed\"): a workload timer "
                                      "that fires late sends every send due since, up to C at once, and skips the "
                                      "rest. The paper gives no C; 32 covers a timer 3 ms late at 10 000/s")
    rate_samples: int = Field(default=10, ge=1, description="k: the receivers' moving average window")
    rate_interval_s: float = Field(default=1.0, gt=0, description="Δ: the receivers' rate sampling interval")
    joiners: list[int | str] = Field(
        default_factory=list, description="members outside the initial views: each joins the groups it is listed in "
                                          "when the GMS's view adds it (the orchestrator sets this from the "
                                          "schedule's `join` actions)")
    failure_detection_s: float = Field(
        default=1.0, ge=0, description="the GMS (the orchestrator) announces the view without crashed members this "
                                       "long after the crash (its failure detector's delay), and the view with "
                                       "joiners this long after they start (this project's choice; the paper gives "
                                       "none)")
    view_batch_s: float = Field(
        default=0.0, ge=0, description="the GMS \"groups requests in batches and performs changes at a predefined "
                                       "maximum rate\" (§2.1): views at least this far apart, the changes due "
                                       "before the next one's announcement joining it; 0: a view per change, as "
                                       "soon as it is due (the paper gives no rate)")

    @property
    def uses_tcp(self) -> bool:
        """The runtime opens its TCP listener: the token, forwards, pulls, NAKs and ACKs go on TCP streams."""
        return True

    def membership(self, cfg: "NodeConfig") -> Membership:  # noqa: F821
        return Membership.build(self, cfg)

    def check(self, cfg: "NodeConfig") -> None:  # noqa: F821 - the node config, checked as a whole
        from .wire import MIN_DATA_SIZE

        ms = self.membership(cfg)
        if cfg.workload is not None and cfg.workload.size_bytes < MIN_DATA_SIZE:
            raise ValueError(f"workload size_bytes {cfg.workload.size_bytes} is below a QSM DATA message's headers "
                             f"({MIN_DATA_SIZE} bytes)")
        if self.transport == "mcast":
            # the regions once every joiner has joined (the initial views' regions are among them)
            assert ms.configured is not None
            full = compute_regions(ms.configured, cfg.n, self.partition_size) if ms.absent else ms.regions
            mine = next(r for r in full if cfg.id in r.members)
            need = {mine.name: False}
            for g in ms.sends_to.get(cfg.id, []):
                for r in regions_of_group(full, g):
                    need[r.name] = True
            for name, send in sorted(need.items()):
                try:
                    group = cfg.group(name)
                except ValueError:
                    raise ValueError(f"qsm: member {cfg.name} needs the multicast group {name!r} (its region's, or "
                                     f"one it sends to): declare it in `multicast:` with this member") from None
                if send and not group.may_send:
                    raise ValueError(f"qsm: member {cfg.name} sends to multicast group {name!r} but is not among "
                                     f"its senders")


@dataclass(frozen=True)
class Membership:
    """The group and region views every member derives from the params (§2.1), and the GMS's next views."""

    groups: dict[str, list[int]]          # group -> member ids (the current group views)
    senders: dict[str, list[int]]         # group -> sender ids in the view
    regions: list[Region]                 # the current region views
    region_of: dict[int, Region]          # member -> its region
    regions_of: dict[str, list[Region]]   # group -> its regions
    sends_to: dict[int, list[str]]        # sender -> the groups it multicasts into (round robin)
    partition_size: int = 1
    view: int = 0                         # the GMS's view number: how many view changes made this membership
    removed: frozenset[int] = frozenset()  # members the GMS has removed (crashed or departed)
    views: dict[int, Region] | None = None  # every region view by index, the old ones as they were installed
    absent: frozenset[int] = frozenset()  # joiners the GMS has not added yet (in no view)
    configured: dict[str, list[int]] | None = None          # group -> its members once all joined (the params')
    configured_senders: dict[str, list[int]] | None = None  # group -> its senders once all joined
    n: int = 0                            # members configured (ids 0..n-1)
    # member -> the first region view index made after its latest removal: the views before it lost that member's
    # process for good, even once a restarted process of it is added back (`gone_in`)
    lost: dict[int, int] | None = None

    def gone_in(self, member: int, index: int) -> bool:
        """`member`'s process that took part in region view `index` is gone: the GMS removed it (crashed or
        departed), and if it was added back since (a restart), `index` is a view from before that removal."""
        return member in self.removed or index < (self.lost or {}).get(member, 0)

    def region(self, index: int) -> Region:
        """The region view with this index, current or old (KeyError if this membership never had it)."""
        assert self.views is not None
        return self.views[index]

    @classmethod
    def build(cls, p: QsmParams, cfg: "NodeConfig") -> Membership:  # noqa: F821
        n = cfg.n
        names = {m.name: m.id for m in cfg.members}
        configured: dict[str, list[int]] = {}
        senders: dict[str, list[int]] = {}
        for g in p.groups:
            if g.name in configured:
                raise ValueError(f"qsm: group {g.name!r} is defined twice")
            configured[g.name] = resolve_members(g.members, names, n, f"qsm group {g.name!r} members")
        absent = frozenset(resolve_members(p.joiners, names, n, "qsm joiners"))
        lonely = sorted(m for m in absent if not any(m in ms for ms in configured.values()))
        if lonely:
            raise ValueError(f"qsm joiners: {lonely} are in no group (a joiner joins the groups it is listed in)")
        groups = {g: [m for m in ms if m not in absent] for g, ms in configured.items()}
        empty = sorted(g for g, ms in groups.items() if not ms)
        if empty:
            raise ValueError(f"qsm: groups {empty} have only joiners: a group starts with a member")
        regions = compute_regions(groups, n, p.partition_size, absent)
        for g in p.groups:
            if g.senders is None:
                senders[g.name] = [s for s in cfg.senders if s in configured[g.name]]
                continue
            listed = resolve_members(g.senders, names, n, f"qsm group {g.name!r} senders")
            if g.senders == "all":
                listed = [s for s in listed if s in cfg.senders]
            bad = [s for s in listed if s not in configured[g.name] or s not in cfg.senders]
            if bad:
                raise ValueError(f"qsm group {g.name!r}: senders {bad} are not both members of the group and "
                                 f"workload senders")
            senders[g.name] = listed
        sends_to = {s: [g for g in configured if s in senders[g]] for s in cfg.senders}
        idle = [s for s, gs in sends_to.items() if not gs]
        if idle:
            raise ValueError(f"qsm: workload senders {idle} send to no group")
        region_of = {m: r for r in regions for m in r.members}
        current = {g: [s for s in ss if s not in absent] for g, ss in senders.items()}
        return cls(groups, current, regions, region_of, {g: regions_of_group(regions, g) for g in groups},
                   sends_to, p.partition_size, 0, frozenset(), {r.index: r for r in regions}, absent, configured,
                   senders, n)

    def remove(self, dead: Iterable[int]) -> Membership:
        """The next view after the GMS removed `dead` (crashed or departed members; §2.1: "Regions, like groups,
        experience membership change as nodes join and leave or crash, hence associated with every region is a
        sequence of what we call region views"): `change`. ValueError for a member that is unknown, already
        removed or not in the view yet."""
        gone = set(dead)
        bad = sorted(m for m in gone if not 0 <= m < self.n or m in self.removed or m in self.absent)
        if bad or not gone:
            raise ValueError(f"qsm view change: members {bad} are unknown or already removed" if bad
                             else "qsm view change: no member to remove")
        return self.change(gone, set())

    def add(self, joined: Iterable[int]) -> Membership:
        """The next view after the GMS added `joined` (joiners, into the groups the params list them in; or
        members it removed that run again, a restart: "if that node is actually not dead, it would need to rejoin
        the system", §2.3.2): `change`. ValueError for a member that is neither waiting to join nor removed."""
        new = set(joined)
        bad = sorted(m for m in new if m not in self.absent and m not in self.removed)
        if bad or not new:
            raise ValueError(f"qsm view change: members {bad} are neither joiners waiting to join nor removed "
                             f"members rejoining" if bad else "qsm view change: no member to add")
        return self.change(set(), new)

    def change(self, gone: set[int], joined: set[int]) -> Membership:
        """The next view: `gone` out, `joined` in (§2.1; "we construct partitions and the structures built on top of
        them based solely on the membership information, and every node does it independently"). A region view
        whose members change, or that gains a sender (a joiner sending into one of its groups), is succeeded by a
        new one with the next free index (the current views in order, then regions new to the view by their group
        sets) and partitions recomputed (§2.3.1); one that keeps its members and senders stays; one left with none
        ends. Every member computes the same views from the same sequence of changes."""
        assert self.views is not None and self.configured is not None and self.configured_senders is not None
        groups = {g: [m for m in self.configured[g] if m in joined or (m in ms and m not in gone)]
                  for g, ms in self.groups.items()}
        present = {m for ms in groups.values() for m in ms}
        senders = {g: [s for s in ss if s in present] for g, ss in self.configured_senders.items()}
        by_key: dict[tuple[str, ...], list[int]] = {}
        for m in sorted(present):
            by_key.setdefault(tuple(g for g in sorted(groups) if m in groups[g]), []).append(m)

        def origins(key: tuple[str, ...], of: dict[str, list[int]]) -> set[int]:
            return {s for g in key for s in of[g]}

        nxt = max(self.views) + 1
        regions: list[Region] = []
        views = dict(self.views)

        def successor(key: tuple[str, ...], members: list[int]) -> None:
            nonlocal nxt
            if nxt > MAX_INDEX:
                raise ValueError(f"qsm view change: more than {MAX_INDEX + 1} region views (a u16 on the wire)")
            regions.append(region_view(nxt, key, members, self.partition_size))
            views[nxt] = regions[-1]
            nxt += 1

        for r in self.regions:
            members = by_key.pop(r.groups, [])
            if tuple(members) == r.members and origins(r.groups, senders) <= origins(r.groups, self.senders):
                regions.append(r)
            elif members:
                successor(r.groups, members)
        for key in sorted(by_key):
            successor(key, by_key[key])
        region_of = {m: r for r in regions for m in r.members}
        sends_to = {s: gs for s, gs in self.sends_to.items() if s not in gone}
        for s in sorted(joined & self.removed):            # a sender rejoining sends into its groups again
            gs = [g for g in self.configured if s in self.configured_senders[g]]
            if gs:
                sends_to[s] = gs
        first_new = max(self.views) + 1
        lost = {**(self.lost or {}), **{m: first_new for m in gone}}
        return Membership(groups, senders, regions, region_of, {g: regions_of_group(regions, g) for g in groups},
                          sends_to, self.partition_size, self.view + 1, (self.removed | gone) - joined, views,
                          self.absent - joined, self.configured, self.configured_senders, self.n, lost)

    def origins_of(self, region: Region) -> list[int]:
        """The senders that multicast into `region` (its groups' senders), sorted."""
        return sorted({s for g in region.groups for s in self.senders[g]})


PARAMS = QsmParams
