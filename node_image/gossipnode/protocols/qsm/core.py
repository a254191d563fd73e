"""QSM as a sans-IO core (docs/qsm.md). One member: a receiver in its region (caching the packets of its
partition, taking part in the token torus) and, if it is a workload sender, a sender into its groups' regions.

Token path (§2.3.2, Figure 5): the region leader generates a token every `token_interval_s` (if the previous one
is home); it goes round partition 0's ring (leader first, back to the leader), then to partition 1's leader, ...,
and from the last partition's leader home. At each visit a node, for every origin in the token (§2.3.3):
drops cached packets up to `purge` (stable in the region last round), computes its NAK set (missing packets up to
`cutoff`, the largest seen in the region last round, cached by its partition), compares it with the predecessor's
(push what the predecessor lacks, pull in one request what it lacks itself), intersects it into the partition's
collective NAK, pulls packets cached by other partitions from their leaders once they are stable at their caching
replicas (up to `replicated`, last round's caching-stable prefix; later ones wait: §2.3.3), and folds its largest
seen packet, its contiguous prefix, its caching prefix (`membership.caching_prefix`) and its receive rate into the
token. A partition leader that gets the token back sends the partition's collective NAK to the origin; the region
leader, when the token is home, sends each origin the collective ACK: the region's stable prefix and the
caching-stable prefix (the sender frees its buffer up to the latter: "The sender considers a message to have been
delivered (and stops buffering it) once it has been acknowledged by all caching replicas", §2.3) with
μ_rec = min μ_rec^(i) / m. Control traffic (token, push, pull,
NAK, ACK) goes over the runtime's TCP streams (the paper's "TCP-like reliable unicast"); data by IP multicast
per region (or UDP fan-out).

View changes (§2.1, §2.2, §2.3.2; `view_change`, the GMS's `gms_view` control command): the GMS removes crashed or
departed members. Every region view that loses members is succeeded by a new region view of its survivors (a new
index, its own sequence numbers, partitions and leaders recomputed; `Membership.remove`), which the senders
multicast into from then on; the old view (a `View`) is finished by its survivors with its own partitions, the
removed left out of the token's path, until everything seen in it is stable and its leader retires it. Packets of a
removed sender are recovered among the survivors, from whichever caching replicas hold them.
"""
from __future__ import annotations

import math
from collections import Counter
from typing import Any

from gossipnode.config import NodeConfig
from gossipnode.protocols.base import BadMessage, Core, Output, seeded_rng
from gossipnode.workload import Receipts

from .membership import (
    MovingRate, Region, caching_prefix, count, expand, intersect, merge_naks, normalise, receiver_share,
    sender_rate,
)
from .wire import MIN_DATA_SIZE, NO_RATE, Ack, Data, Entry, MsgType, Nak, Pull, Token

NO_STABLE = 0xFFFFFFFF
SEQ_BITS_PER_INCARNATION = 24   # a restarted sender numbers its messages from incarnation << 24 (seq is a u32)
MAX_GAP_TRACK = 4096     # gaps noted per arrival for recovery latency (bounds the work after a huge jump)


class View:
    """One region view as this member takes part in it (§2.1: "associated with every region is a sequence of what
    we call region views"): its place in the partitions and the torus, the receiver's state per origin, and the
    token when this member leads the view. The current view gets the packets senders multicast now; an old one
    (a view change removed members of it) is finished by its survivors: they keep recovering its packets with its
    partitions, the removed members left out of the rings (`Region.without`), until its leader retires it."""

    def __init__(self, region: Region, me: int, origins: list[int], now: float, interval: float) -> None:
        self.me = me
        self.origins = origins
        self.current = True             # False once the GMS removed members of it (an old view)
        self.quiet = 0                  # an old view: rounds in a row with nothing new (`_maybe_retire`)
        self.last_visit = now           # the token's last visit here (an old view ends here when it stops coming)
        self.last_sig: tuple = ()
        self.recv = {o: Receipts() for o in origins}
        self.max_seen = {o: 0 for o in origins}
        self.cutoff = {o: 0 for o in origins}
        self.purged = {o: 0 for o in origins}
        self.replicated = {o: 0 for o in origins}   # stable at the caching replicas (the token's, last round)
        self.cache: dict[int, dict[int, tuple[int, int, bytes]]] = {o: {} for o in origins}
        self.missing_since: dict[int, dict[int, float]] = {o: {} for o in origins}
        # region leader
        self.round = 0
        self.token_out = False
        self.token_started = now
        self.next_token = math.inf
        self.next_cutoff = {o: 0 for o in origins}
        self.next_purge = {o: 0 for o in origins}
        self.next_replicated = {o: 0 for o in origins}
        self.prev_max = {o: 0 for o in origins}
        self.set_region(region, now, interval)

    @property
    def changed(self) -> bool:
        """The GMS removed members of this view after it was installed (it is an old view)."""
        return not self.current

    def set_region(self, region: Region, now: float, interval: float) -> None:
        """Install `region` (at the start, or this view without removed members): this member's partition and
        leaderships ("Nodes update their status and assume leadership in a distributed manner", §2.3.2)."""
        self.region = region
        self.part = region.partition_of(self.me)
        self.partition = region.partitions[self.part]
        self.is_pleader = self.partition[0] == self.me
        self.is_rleader = region.leader == self.me
        # partitions a view change emptied: their packets have no caching replica left (`QsmNode._visit`)
        self.orphaned = tuple(k for k, part in enumerate(region.partitions) if not part)
        if self.is_rleader and self.next_token == math.inf:
            self.next_token = now + interval
        elif not self.is_rleader:
            self.next_token = math.inf


class QsmNode(Core):
    name = "qsm"

    def __init__(self, cfg: NodeConfig, now: float) -> None:
        p = cfg.protocol
        self.cfg = cfg
        self.p = p
        self.me = cfg.id
        self.ms = p.membership(cfg)
        self.group_names = [g.name for g in p.groups]
        self.rng = seeded_rng("qsm", cfg.seed, cfg.id)
        self.counters: Counter[str] = Counter()
        self.rate: MovingRate | None = None     # μ_rec^(i): sampled from the first packet on (undefined before)
        # receiver: the region views this member takes part in, the current one and old ones it is finishing; a
        # joiner takes part in none until the GMS's view adds it (`joined`), and neither does a restarted member
        # (a new process of a member the GMS removed when it crashed: "if that node is actually not dead, it would
        # need to rejoin the system", §2.3.2): it replays the views, its own removal among them, until one adds it
        self.incarnation = cfg.incarnation
        if self.incarnation >> (32 - SEQ_BITS_PER_INCARNATION):
            raise ValueError(f"qsm: incarnation {self.incarnation}: at most "
                             f"{(1 << (32 - SEQ_BITS_PER_INCARNATION)) - 1} restarts of one member (their "
                             "message numbers share a u32)")
        self.joined = self.me not in self.ms.absent and not self.incarnation
        self.views: dict[int, View] = {}
        if self.joined:
            region = self.ms.region_of[self.me]
            self.cur = View(region, self.me, self.ms.origins_of(region), now, p.token_interval_s)
            self.views[region.index] = self.cur
        self.retired: set[int] = set()
        self.unknown_seen: set[int] = set()
        self.removed_self = False
        # sender
        wl = cfg.workload
        self.sender = wl is not None and self.me in cfg.senders
        self.due = math.inf
        if self.sender:
            assert wl is not None
            self.groups_out = self.ms.sends_to[self.me]
            self.rr = 0
            # a restarted sender's messages are numbered apart from its earlier processes' (the wire's seq is a
            # u32: 2^24 messages per incarnation), so (origin, seq) still names one message
            self.seq = self.incarnation << SEQ_BITS_PER_INCARNATION
            # per region view sent to (old views' too, until their packets are acknowledged)
            self.rseq: dict[int, int] = {}
            self.buffer: dict[int, dict[int, tuple[int, int, bytes, float]]] = {}
            self.acked: dict[int, int] = {}
            self.last_retransmit: dict[int, float] = {}
            self.region_mu: dict[int, float] = {}
            self.mu = min(wl.rate_per_s, p.rate_max) if p.rate_max else wl.rate_per_s
            self.payload = bytes(max(0, wl.size_bytes - MIN_DATA_SIZE))
            self.size = MIN_DATA_SIZE + len(self.payload)
            self.stop = now + wl.stop_s if wl.stop_s is not None else math.inf
            self.start_at = now + wl.start_s + self.rng.random() / self.mu
            if self.joined:
                self._sender_views()
                self.due = self.start_at if self.start_at < self.stop else math.inf
        self.startup = Output()
        if self.joined:
            self._log_membership(now, self.startup, "qsm_membership")
        else:
            self.startup.log(now, "qsm_waiting_to_join", view=self.ms.view,
                             **({"incarnation": self.incarnation} if self.incarnation else {}))

    def _log_membership(self, now: float, out: Output, event: str, **extra: Any) -> None:
        v = self.cur
        out.log(now, event, region=v.region.name, region_index=v.region.index, partition=v.part,
                partitions=v.region.p, region_size=len(v.region.members), partition_leader=v.is_pleader,
                region_leader=v.is_rleader, origins=v.origins, groups=[g for g in v.region.groups], **extra)

    def _sender_views(self) -> None:
        """The region views this sender multicasts into now (its groups' current regions), and the share of its
        messages each gets (its groups take turns)."""
        self.regions_out = sorted({r.index: r for g in self.groups_out for r in self.ms.regions_of[g]}.items())
        for i, _ in self.regions_out:
            if i not in self.rseq:
                self.rseq[i] = 0
                self.buffer[i] = {}
                self.acked[i] = 0
                self.last_retransmit[i] = -math.inf
        current = {i for i, _ in self.regions_out}
        for i in [i for i in self.region_mu if i not in current]:
            del self.region_mu[i]
        self.share = {i: sum(1 for g in self.groups_out if r in self.ms.regions_of[g]) / len(self.groups_out)
                      for i, r in self.regions_out}

    # the current region view, as tests and tools read it
    @property
    def region(self) -> Region:
        return self.cur.region

    @property
    def part(self) -> int:
        return self.cur.part

    # ---- timers ---------------------------------------------------------------------------------------------

    def next_wakeup(self) -> float:
        return min(self.due, min((v.next_token for v in self.views.values()), default=math.inf),
                   self._next_expiry())

    def _retire_rounds(self) -> int:
        """Token rounds with nothing new after which an old view ends (`_maybe_retire`)."""
        return max(3, math.ceil(self.p.retransmit_s / self.p.token_interval_s) + 2)

    def _expiry(self, v: View) -> float:
        """When an old view this member does not lead ends here: it misses nothing it has seen of it, the last
        token that came showed everything it knows of stable in the whole view (`_settled`), and no token has
        come since for two rounds more than its leader waits before retiring it (counted from the view change at
        the earliest: a token that died with a removed leader long before the view says nothing of its end). A
        member must not end a view others still recover in because its tokens were late or lost for a while: it
        leaves a hole in the ring that every later token dies in."""
        if v.current or v.is_rleader or not self._complete(v) or not self._settled(v):
            return math.inf
        return v.last_visit + (self._retire_rounds() + 2) * self.p.token_interval_s

    def _gone(self, member: int, v: View) -> bool:
        """`member`'s process in `v` is gone (removed; or `v` is from before a restarted member's rejoin)."""
        return self.ms.gone_in(member, v.region.index)

    def _settled(self, v: View) -> bool:
        """The last token that visited `v` here purged (was stable region-wide) every packet this member knows of
        in it: the largest any member had seen in the round before, and the largest it has seen itself."""
        return all(self._gone(o, v) or v.purged[o] >= max(v.cutoff[o], v.max_seen[o]) for o in v.origins)

    def _complete(self, v: View) -> bool:
        """This member holds every packet of `v` up to the largest any member of it is known to have (or their
        origin is removed: nothing more of it will come)."""
        return all(self._gone(o, v) or max(v.recv[o].r, v.purged[o]) >= max(v.max_seen[o], v.cutoff[o])
                   for o in v.origins)

    def _next_expiry(self) -> float:
        return min((self._expiry(v) for v in self.views.values() if not v.current), default=math.inf)

    def tick(self, now: float) -> Output:
        out = Output()
        sent = 0
        while now >= self.due and sent < self.p.send_credits:      # the credits the elapsed time gave back
            self._send(now, out)
            sent += 1
        if now >= self.due:            # later than the pool covers: the rest is skipped
            missed = int((now - self.due) * self.mu) + 1
            out.log(now, "steps_skipped", timer="workload", missed=missed)
            self._next_send(now)
        interval = self.p.token_interval_s
        for v in list(self.views.values()):
            if now >= self._expiry(v):
                self._retire(v, now, out, "token stopped")
                continue
            if now < v.next_token:
                continue
            late = now - v.next_token
            v.next_token += interval * (1 + int(late // interval))
            if v.token_out and now - v.token_started < 5 * interval:
                self.counters["token_late"] += 1
                out.log(now, "token_late", round=v.round, outstanding=now - v.token_started)
            else:
                if v.token_out:     # lost with a connection: regenerate
                    out.log(now, "token_regenerated", round=v.round)
                self._generate(v, now, out)
        return out

    # ---- sender ---------------------------------------------------------------------------------------------

    def _send(self, now: float, out: Output) -> None:
        group = self.groups_out[self.rr % len(self.groups_out)]
        self.rr += 1
        self.seq += 1
        gidx = self.group_names.index(group)
        regions = self.ms.regions_of[group]
        for r in regions:
            self.rseq[r.index] += 1
            rseq = self.rseq[r.index]
            self.buffer[r.index][rseq] = (self.seq, gidx, self.payload, now)
            msg = Data(self.me, r.index, self.seq, self.me, gidx, rseq, self.payload)
            self._transmit(r, msg, out)
            if r.index == self.cur.region.index:
                self._accept(self.cur, self.me, rseq, self.seq, gidx, self.payload, now, "own", self.me, "self", out)
        self.counters["sent_data"] += 1
        out.log(now, "data_sent", seq=self.seq, size=self.size, group_name=group,
                regions=[r.name for r in regions], rate=round(self.mu, 3))
        self._next_send(self.due)

    def _next_send(self, after: float) -> None:
        """The next send one interval after `after` (none past the workload's stop)."""
        nxt = after + 1.0 / self.mu
        self.due = nxt if nxt < self.stop else math.inf

    def _transmit(self, region: Region, msg: Data, out: Output) -> None:
        if self.p.transport == "mcast":
            out.mcast.append((region.name, msg))
        else:
            out.send.extend((j, msg) for j in region.members if j != self.me and j not in self.ms.removed)

    def set_workload(self, active: bool, now: float) -> Output:
        if not self.sender:
            raise ValueError(f"member {self.me} is not a sender")
        out = Output()
        if active and self.due == math.inf:
            self.stop = math.inf
            self.due = now
            out.log(now, "workload_started")
        elif not active and self.due != math.inf:
            self.due = math.inf
            out.log(now, "workload_stopped")
        return out

    def _retransmit(self, ridx: int, rseqs: list[int], now: float, reason: str, out: Output) -> None:
        region = self.ms.region(ridx)
        buf = self.buffer[ridx]
        sent = 0
        for s in rseqs[: self.p.pull_limit]:
            held = buf.get(s)
            if held is None:
                continue
            seq, gidx, payload, _ts = held
            self._transmit(region, Data(self.me, ridx, seq, self.me, gidx, s, payload, MsgType.RETRANS), out)
            sent += 1
        self.counters[f"retransmit_{reason}"] += sent
        out.log(now, "retransmit", region=region.name, reason=reason, count=sent,
                first=rseqs[0] if rseqs else None, last=rseqs[-1] if rseqs else None)

    def _on_ack(self, ack: Ack, now: float, out: Output) -> None:
        ridx = ack.region
        if not self.sender or ridx not in self.buffer:
            raise BadMessage(f"ACK for region {ridx}, which this member does not send to")
        buf = self.buffer[ridx]
        # §2.3: "The sender considers a message to have been delivered (and stops buffering it) once it has been
        # acknowledged by all caching replicas"; the region leader's ACK carries that prefix (`cached`)
        stable = min(ack.cached, self.rseq[ridx])
        lat = []
        for s in range(self.acked[ridx] + 1, stable + 1):
            held = buf.pop(s, None)
            if held is not None:
                lat.append(now - held[3])
        self.acked[ridx] = max(self.acked[ridx], stable)
        out.log(now, "ack_received", region=self.ms.region(ridx).name, region_index=ridx, round=ack.round,
                stable=ack.stable, cached=ack.cached, max_seen=ack.max_seen, acked=len(lat), latency_sum=sum(lat),
                latency_max=max(lat, default=None), held=len(buf), **{"from": ack.sender})
        # the lost tail: nobody in the region has seen the last packets for retransmit_s
        first = ack.max_seen + 1
        if first <= self.rseq[ridx] and first in buf and now - buf[first][3] >= self.p.retransmit_s \
                and now - self.last_retransmit[ridx] >= self.p.retransmit_s:
            self.last_retransmit[ridx] = now
            self._retransmit(ridx, list(range(first, self.rseq[ridx] + 1)), now, "timeout", out)
        if self.p.rate_control and ack.rate != NO_RATE and ridx in self.share:     # a current region view
            mu_rec = ack.rate / 1000.0
            # (2) bounds the rate into this region; the sender's message rate is that over the region's share
            self.region_mu[ridx] = sender_rate(mu_rec, self.p.growth, self.p.rate_min) / self.share[ridx]
            new = min(self.region_mu.values())
            if self.p.rate_max is not None:
                new = min(new, self.p.rate_max)
            if abs(new - self.mu) > 0.01 * self.mu:
                out.log(now, "rate_changed", rate=round(new, 3), previous=round(self.mu, 3),
                        region=self.ms.region(ridx).name, mu_rec=round(mu_rec, 3), m=ack.m)
                self.counters["rate_changes"] += 1
                if self.due != math.inf:      # the next send at the new rate
                    self.due = min(self.due, now + 1.0 / new)
                self.mu = new

    # ---- receiver -------------------------------------------------------------------------------------------

    def receive(self, msg: Any, now: float, via: str = "udp") -> Output:
        if not 0 <= msg.sender < self.cfg.n or msg.sender == self.me:
            raise BadMessage(f"sender {msg.sender} is not another member")
        out = Output()
        t = msg.type
        data = t in (MsgType.DATA, MsgType.RETRANS, MsgType.FORWARD)
        if self.removed_self or (not data and self.ms.gone_in(msg.sender, msg.region)):
            # a view change removed the sender (its control traffic still in flight: of the process a restarted
            # member had before, too) or this member
            self.counters["from_removed"] += 1
            return out
        if not self.joined:
            # a joiner before the view that adds it: it takes part in no region view yet (its region's multicast
            # reaches it already); what it misses of the views it joins is recovered in them
            self.counters["before_join"] += 1
            return out
        if msg.region not in self.ms.views:
            # a region view the GMS has not told this member of (yet): its updates reach members at different
            # times (§2.3.2: "updates from GMS may arrive at different times"); the token's recovery brings the
            # packets once this member installs the view. Counted, and logged once per index.
            self.counters["unknown_view"] += 1
            if msg.region not in self.unknown_seen:
                self.unknown_seen.add(msg.region)
                out.log(now, "unknown_region_view", region_index=msg.region, view=self.ms.view, **{"from": msg.sender})
            return out
        if self.ms.gone_in(self.me, msg.region):
            # a region view from before this member's removal: meant for its earlier process (a restart)
            self.counters["for_earlier_process"] += 1
            return out
        if t == MsgType.ACK:
            if msg.origin != self.me:
                raise BadMessage(f"ACK for origin {msg.origin}, not for this member")
            self._on_ack(msg, now, out)
            return out
        if t == MsgType.NAK:
            if msg.origin != self.me or not self.sender or msg.region not in self.buffer:
                raise BadMessage(f"NAK for origin {msg.origin} region {msg.region}: not this member's")
            self.counters["nak_received"] += 1
            self._retransmit(msg.region, expand(msg.ranges), now, "nak", out)
            return out
        v = self.views.get(msg.region)
        if v is None:
            if msg.region in self.retired:
                self.counters["retired_view"] += 1
                return out
            if data and t != MsgType.FORWARD:   # another region's multicast group this sender is in
                self.counters["foreign_region"] += 1
                return out
            raise BadMessage(f"{t.name} for region {msg.region}, which this member is not in")
        if msg.sender not in v.region.members and t not in (MsgType.DATA, MsgType.RETRANS) \
                and not self.ms.gone_in(msg.sender, msg.region):
            raise BadMessage(f"{t.name} from {msg.sender}, who is not in region {v.region.name}")
        if data:
            if msg.origin not in v.recv:
                raise BadMessage(f"data of origin {msg.origin}, who does not send into region {v.region.name}")
            if not 0 <= msg.group < len(self.group_names) or self.group_names[msg.group] not in v.region.groups:
                raise BadMessage(f"data of group {msg.group}, which region {v.region.name} is not in")
            if t != MsgType.FORWARD and msg.sender != msg.origin:
                raise BadMessage(f"{t.name} of origin {msg.origin} from {msg.sender}")
            how = {MsgType.DATA: "data", MsgType.RETRANS: "retransmit"}.get(t) or ("pull" if msg.kind else "push")
            self._accept(v, msg.origin, msg.rseq, msg.seq, msg.group, msg.payload, now, how, msg.sender, via, out)
            return out
        if t == MsgType.PULL:
            if msg.origin not in v.recv:
                raise BadMessage(f"PULL for origin {msg.origin}, unknown in this region")
            self._serve_pull(v, msg, now, out)
            return out
        if t == MsgType.TOKEN:
            unknown = [e.origin for e in msg.entries if e.origin not in v.recv]
            if unknown:
                raise BadMessage(f"TOKEN with origins {unknown} unknown in this region")
            self._handle_token(v, msg, now, out)
            return out
        raise BadMessage(f"unexpected {t.name}")

    def _accept(self, v: View, o: int, rseq: int, seq: int, gidx: int, payload: bytes, now: float, how: str, frm: int,
                via: str, out: Output) -> None:
        r = v.recv[o]
        if rseq <= v.purged[o] or not r.add(rseq):
            self.counters[f"duplicate_{how}"] += 1
            return
        if self.rate is None:
            self.rate = MovingRate(self.p.rate_samples, self.p.rate_interval_s, now)
        self.rate.add(now)
        gaps = v.missing_since[o]
        if rseq > v.max_seen[o]:
            lo = max(v.max_seen[o], r.r) + 1
            for s in range(max(lo, rseq - MAX_GAP_TRACK), rseq):
                if s not in r.ahead:
                    gaps.setdefault(s, now)
            v.max_seen[o] = rseq
        since = gaps.pop(rseq, None)
        if v.region.caches(self.me, rseq):
            v.cache[o][rseq] = (seq, gidx, payload)
        self.counters[f"recv_{how}"] += 1
        if o == self.me:
            return
        out.log(now, "data_received", origin=o, seq=seq, sender=frm, repair=how != "data", via=via, how=how,
                group_name=self.group_names[gidx], region=v.region.name, region_index=v.region.index, rseq=rseq)
        if how != "data":
            out.log(now, "recovered", origin=o, seq=seq, rseq=rseq, how=how, latency=None if since is None
                    else now - since, region=v.region.name, region_index=v.region.index, **{"from": frm})

    def _serve_pull(self, v: View, msg: Pull, now: float, out: Output) -> None:
        cache = v.cache[msg.origin]
        sent = 0
        for s in expand(msg.ranges):
            held = cache.get(s)
            if held is None:
                continue
            seq, gidx, payload = held
            out.stream.append((msg.sender, Data(self.me, v.region.index, seq, msg.origin, gidx, s, payload,
                                                MsgType.FORWARD, 1)))
            sent += 1
            if sent == self.p.pull_limit:
                break
        self.counters["pull_served"] += sent
        out.log(now, "pull_served", origin=msg.origin, to=msg.sender, asked=count(msg.ranges), sent=sent)

    # ---- the token ------------------------------------------------------------------------------------------

    def _generate(self, v: View, now: float, out: Output) -> None:
        v.round += 1
        v.token_out = True
        v.token_started = now
        entries = [Entry(o, cutoff=v.next_cutoff[o], purge=v.next_purge[o], replicated=v.next_replicated[o])
                   for o in v.origins]
        token = Token(self.me, v.region.index, v.round, 0, NO_RATE, entries)
        self.counters["token_generated"] += 1
        self._handle_token(v, token, now, out)

    def _missing(self, v: View, o: int, cutoff: int) -> list[int]:
        r = v.recv[o]
        return [s for s in range(max(r.r, v.purged[o]) + 1, cutoff + 1) if s not in r.ahead]

    def _visit(self, v: View, token: Token, from_pred: bool, now: float, out: Output) -> None:
        """§2.3.3 at this node: purge, NAK set, push/pull with the predecessor, the partition's intersection,
        pulls from other partitions, and this node's contribution to max_seen, stable and the rate."""
        limit = self.p.nak_limit
        pred = token.sender
        for e in token.entries:
            o = e.origin
            if e.purge > v.purged[o]:
                cache = v.cache[o]
                stale = [s for s in cache if s <= e.purge]
                for s in stale:
                    del cache[s]
                v.purged[o] = e.purge
                for s in [s for s in v.missing_since[o] if s <= e.purge]:
                    del v.missing_since[o][s]
                if stale:
                    out.log(now, "cache_released", origin=o, through=e.purge, count=len(stale), held=len(cache))
            v.cutoff[o] = max(v.cutoff[o], e.cutoff)
            v.replicated[o] = max(v.replicated[o], e.replicated)
            missing = self._missing(v, o, v.cutoff[o])
            gaps = v.missing_since[o]
            for s in missing:
                gaps.setdefault(s, now)
            p = v.region.p
            mine = normalise((s, s) for s in missing if s % p == v.part)[:limit]
            if from_pred:
                push, pull = merge_naks(e.prev, mine)
                pushed = 0
                for s in expand(push):
                    held = v.cache[o].get(s)
                    if held is not None and pushed < self.p.pull_limit:
                        seq, gidx, payload = held
                        out.stream.append((pred, Data(self.me, v.region.index, seq, o, gidx, s, payload,
                                                      MsgType.FORWARD, 0)))
                        pushed += 1
                if pushed:
                    self.counters["pushed"] += pushed
                    out.log(now, "push_sent", origin=o, to=pred, count=pushed, round=token.round)
                if pull:
                    out.stream.append((pred, Pull(self.me, v.region.index, o, pull)))
                    self.counters["pull_sent"] += 1
                    out.log(now, "pull_sent", origin=o, to=pred, ranges=len(pull), count=count(pull),
                            partition=v.part, round=token.round)
            e.pnak = mine if token.phase == 0 else intersect(e.pnak, mine)
            e.prev = mine
            # §2.3.3: "requests for a given packet by nodes outside its caching partition is delayed until it is
            # stable on all of its caching replicas" (known from last round's caching-stable prefix). Once per round:
            # not again when the token comes back round the ring to this partition's leader. An origin the GMS
            # removed sends nothing more, so nothing is worth waiting for (a packet no caching replica got would
            # hold the prefix back for good): its packets are pulled from whichever caching replicas have them.
            others: dict[int, list[int]] = {}
            delayed: dict[int, int] = {}
            for s in (missing if not (from_pred and v.is_pleader) else ()):
                if s % p != v.part:
                    if s <= v.replicated[o] or self._gone(o, v):
                        others.setdefault(s % p, []).append(s)
                    else:
                        delayed[s % p] = delayed.get(s % p, 0) + 1
            for k, n in sorted(delayed.items()):
                self.counters["pull_delayed"] += n
                out.log(now, "pull_delayed", origin=o, partition=k, count=n, replicated=v.replicated[o],
                        round=token.round)
            for k, seqs in sorted(others.items()):
                if not v.region.partitions[k]:       # a view change left no caching replica of these
                    self.counters["pull_no_replica"] += len(seqs)
                    continue
                leader = v.region.partitions[k][0]
                ranges = normalise((s, s) for s in seqs)[:limit]
                out.stream.append((leader, Pull(self.me, v.region.index, o, ranges)))
                self.counters["pull_sent"] += 1
                out.log(now, "pull_sent", origin=o, to=leader, ranges=len(ranges), count=count(ranges),
                        partition=k, round=token.round)
            e.max_seen = max(e.max_seen, v.max_seen[o])
            prefix = max(v.recv[o].r, v.purged[o])
            e.stable = min(e.stable, prefix)
            e.cstable = min(e.cstable, caching_prefix(prefix, v.recv[o].ahead, v.part, p))
            # a partition a view change emptied has no caching replica and no leader to send its collective NAK:
            # each survivor that misses some of its packets asks their origin itself (which has them if no replica
            # had acknowledged them; those all its replicas had are lost with them: "it is extremely unlikely that
            # all of them will crash before the message is delivered", §2.3)
            if v.orphaned and not self._gone(o, v):
                orphans = normalise((s, s) for s in missing if s % p in v.orphaned)[:limit]
                if orphans:
                    self.counters["nak_sent_orphaned"] += 1
                    out.log(now, "nak_sent", origin=o, partition=v.orphaned[0], count=count(orphans),
                            round=token.round, orphaned=True)
                    if o == self.me:
                        self._retransmit(v.region.index, expand(orphans), now, "nak", out)
                    else:
                        out.stream.append((o, Nak(self.me, v.region.index, o, v.orphaned[0], orphans)))
        mine_rate = self.rate.rate(now) if self.rate is not None else None
        if mine_rate is not None:
            token.rate = min(token.rate, int(mine_rate * 1000))

    def _handle_token(self, v: View, token: Token, now: float, out: Output) -> None:
        if token.phase == 2:
            if not v.is_rleader or token.round != v.round:
                # a round of the view before the GMS's last change (§2.3.2: "there might occasionally be two
                # self-elected leaders"), or one this leader gave up for lost and generated again (`tick`): it
                # was only late (a TCP connection to a ring neighbour still connecting, its SYN lost)
                if v.changed or (v.is_rleader and token.round < v.round):
                    self.counters["stale_token"] += 1
                    out.log(now, "token_stale", round=token.round, region=v.region.name, current=v.round)
                    return
                raise BadMessage("TOKEN home at a member that does not lead the region" if not v.is_rleader
                                 else f"TOKEN of round {token.round} home in round {v.round}")
            self._round_done(v, token, now, out)
            return
        self.counters["token_visits"] += 1
        v.last_visit = now
        self._visit(v, token, token.phase == 1, now, out)
        if v.is_pleader and (token.phase == 1 or len(v.partition) == 1):
            for e in token.entries:          # the partition's collective NAK to the origin
                if e.pnak:
                    if e.origin != self.me and not self._gone(e.origin, v):
                        out.stream.append((e.origin, Nak(self.me, v.region.index, e.origin, v.part, e.pnak)))
                    self.counters["nak_sent"] += 1
                    out.log(now, "nak_sent", origin=e.origin, partition=v.part, count=count(e.pnak),
                            round=token.round)
                    if e.origin == self.me:
                        self._retransmit(v.region.index, expand(e.pnak), now, "nak", out)
                e.pnak = ()
                e.prev = ()
            nxt, hop = v.region.leader_hop(v.part)
            token.phase = 0 if hop == "inter" else 2
            if nxt == self.me:               # a one-partition region: home already
                self._round_done(v, token, now, out)
                return
        else:
            nxt, hop = v.region.next_hop(self.me)
            token.phase = 1
        sender = token.sender
        token.sender = self.me
        out.stream.append((nxt, token))
        self.counters["token_passed"] += 1
        out.log(now, "token_pass", round=token.round, to=nxt, hop=hop, region=v.region.name, entries=len(
            token.entries), **{"from": sender})

    def _round_done(self, v: View, token: Token, now: float, out: Output) -> None:
        v.token_out = False
        active = sum(1 for e in token.entries if e.max_seen > v.prev_max[e.origin])
        m = max(1, active)
        rate = NO_RATE if token.rate == NO_RATE else int(receiver_share([token.rate], m))
        acks = 0
        for e in token.entries:
            o = e.origin
            v.next_cutoff[o] = e.max_seen
            if e.stable != NO_STABLE:
                v.next_purge[o] = min(e.stable, e.max_seen)
            if e.cstable != NO_STABLE:
                v.next_replicated[o] = max(v.next_replicated[o], min(e.cstable, e.max_seen))
            v.prev_max[o] = e.max_seen
            if e.max_seen == 0:
                continue
            ack = Ack(self.me, v.region.index, token.round, o, v.next_purge[o], e.max_seen, rate, m,
                      v.next_replicated[o])
            acks += 1
            if o == self.me:
                self._on_ack(ack, now, out)
            elif not self._gone(o, v):
                out.stream.append((o, ack))
            out.log(now, "ack_sent", origin=o, round=token.round, stable=ack.stable, cached=ack.cached,
                    max_seen=e.max_seen, rate=None if rate == NO_RATE else rate / 1000.0, m=m)
        self.counters["token_rounds"] += 1
        out.log(now, "token_round", round=token.round, region=v.region.name, duration=now - v.token_started,
                acks=acks, m=m, min_rate=None if token.rate == NO_RATE else token.rate / 1000.0)
        if not v.current:
            self._maybe_retire(v, token, now, out)

    def _maybe_retire(self, v: View, token: Token, now: float, out: Output) -> None:
        """An old region view ends at its leader once its rounds have shown nothing new for long enough that a
        sender's tail retransmission (`retransmit_s`) would have shown: every packet seen in it stable (or its
        origin removed: "receivers in each region recover the message only among themselves", §2.2) and the
        last purge handed round (§2.2: "the system keeps trying to deliver a message until every member of the
        relevant view either has acknowledged it or is dead")."""
        sig = tuple((e.origin, e.max_seen, e.stable) for e in token.entries)
        done = all(e.stable >= e.max_seen or self._gone(e.origin, v) for e in token.entries)
        v.quiet = v.quiet + 1 if done and sig == v.last_sig else 0
        v.last_sig = sig
        if v.quiet >= self._retire_rounds():
            v.next_token = math.inf
            self._retire(v, now, out, "stable")

    def _retire(self, v: View, now: float, out: Output, reason: str) -> None:
        del self.views[v.region.index]
        self.retired.add(v.region.index)
        self.counters["views_retired"] += 1
        out.log(now, "view_retired", region=v.region.name, region_index=v.region.index, rounds=v.round,
                reason=reason, cached=sum(len(c) for c in v.cache.values()))

    # ---- state ----------------------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        if not self.joined:
            return {"id": self.me, "joined": False, "view": {"number": self.ms.view},
                    "counters": dict(sorted(self.counters.items()))}
        v = self.cur
        snap: dict[str, Any] = {
            "id": self.me,
            "region": v.region.name,
            "partition": v.part,
            "R": {str(o): r.r for o, r in v.recv.items()},
            "max_seen": {str(o): x for o, x in v.max_seen.items()},
            "replicated": {str(o): x for o, x in v.replicated.items()},
            # every view's cache, old ones included
            "cached": {str(o): sum(len(w.cache.get(o, ())) for w in self.views.values())
                       for o in sorted({o for w in self.views.values() for o in w.cache})},
            "round": v.round,
            "counters": dict(sorted(self.counters.items())),
        }
        if self.ms.view:
            snap["view"] = {"number": self.ms.view, "removed": sorted(self.ms.removed), "region_index": v.region.index,
                            "old": {str(i): {"round": w.round, "cached": sum(len(c) for c in w.cache.values())}
                                    for i, w in sorted(self.views.items()) if w is not v},
                            "retired": sorted(self.retired)}
        if self.sender:
            def label(i: int) -> str:      # an old region view's name carries its index
                return self.ms.region(i).name + ("" if i in self.share else f"#{i}")

            snap["sender"] = {"seq": self.seq, "rate": self.mu,
                              "buffered": {label(i): len(b) for i, b in self.buffer.items()},
                              "acked": {label(i): a for i, a in self.acked.items()}}
        return snap

    # ---- the GMS's view changes -----------------------------------------------------------------------------

    def control(self, req: dict[str, Any], now: float) -> tuple[dict[str, Any], Output]:
        """{"cmd": "gms_view", "changes": [{"remove": [member ids]} or {"add": [member ids]}, ...]}: the GMS's views
        so far, the k-th making the k-th change (`"removals": [[ids], ...]`, removals only, is the same). This
        member installs the ones it has not, in order (so one that missed a view, paused at the time, catches up
        with the next, and a joiner replays the views made before it joined: everyone computes the same region
        views); a command with nothing new is acknowledged and changes nothing."""
        if req.get("cmd") != "gms_view":
            return super().control(req, now)
        changes = _changes(req)
        out = Output()
        start = self.ms.view
        for kind, ids in changes[start:]:
            out.merge(self.view_change(ids, now) if kind == "remove" else self.view_add(ids, now))
        return {"ok": True, "view": self.ms.view, "installed": self.ms.view - start}, out

    def view_change(self, removed: list[int], now: float) -> Output:
        """Install the GMS's next view, without `removed` (§2.1, §2.3.2). Every region view that loses members
        goes on as an old view of its survivors (same partitions, the removed left out of the rings, leaders
        recomputed; a token that may have died with them is regenerated at the next interval) until its packets
        are stable (`_maybe_retire`); this member's region, if it changed, gets a new current view whose origins
        are its groups' surviving senders, with its own sequence numbers (§2.2: "we assign sequence numbers within
        the relevant regional views"); a sender sends into its groups' current region views from now on and keeps
        the old views' packets until they are acknowledged. A removed member that is still running stops taking
        part ("if that node is actually not dead, it would need to rejoin the system")."""
        return self._install(self.ms.remove(removed), set(removed), set(), now)

    def view_add(self, joined: list[int], now: float) -> Output:
        """Install the GMS's next view, with the joiners `joined` in the groups the params list them in (§2.1:
        "Regions, like groups, experience membership change as nodes join and leave"). The region views they enter,
        and those of the groups a joining sender sends into, are succeeded by new ones (`Membership.change`); the
        old ones are finished by their members as after a removal. A joiner takes part from this view on: it gets
        the packets sent into the new views (from their first sequence number), none of those before."""
        return self._install(self.ms.add(joined), set(), set(joined), now)

    def _install(self, ms: Any, gone: set[int], joined: set[int], now: float) -> Output:
        out = Output()
        self.ms = ms
        interval = self.p.token_interval_s
        self.counters["view_changes"] += 1
        if self.me in gone:
            self.removed_self = True
            self.due = math.inf
            for w in self.views.values():
                w.next_token = math.inf
            out.log(now, "gms_view", view=self.ms.view, removed=sorted(gone), excluded=True)
            return out
        if not self.joined:
            if self.me not in joined:          # a view made before this joiner's: replayed, nothing to take part in
                return out
            self.joined = True
            self.removed_self = False          # a restarted member replayed its own removal: it is back
            if self.sender:
                self.due = max(self.start_at, now) if self.start_at < self.stop else math.inf
        current = {r.index for r in self.ms.regions}
        for w in self.views.values():
            if gone & set(w.region.members):
                w.current = False
                w.last_visit = now       # its end is judged from here on (`_expiry`)
                w.set_region(w.region.without(gone), now, interval)
                if w.token_out:          # it may have been at a removed member: the next interval makes another
                    w.token_out = False
            elif w.current and w.region.index not in current:     # succeeded (a member or a sender joined)
                w.current = False
                w.last_visit = now
        region = self.ms.region_of[self.me]
        if region.index not in self.views:
            self.cur = View(region, self.me, self.ms.origins_of(region), now, interval)
            self.views[region.index] = self.cur
        if self.sender:
            self._sender_views()
        self._log_membership(now, out, "gms_view", view=self.ms.view, removed=sorted(gone),
                             old_views=sorted(i for i, w in self.views.items() if not w.current),
                             **({"added": sorted(joined)} if joined else {}))
        return out


def _changes(req: dict[str, Any]) -> list[tuple[str, list[int]]]:
    """A gms_view command's views as (kind, member ids): its `changes`, or its `removals` (all removals)."""
    def ids(x: Any) -> bool:
        return isinstance(x, list) and bool(x) and all(isinstance(m, int) and not isinstance(m, bool) for m in x)

    if "changes" in req:
        raw = req["changes"]
        if isinstance(raw, list) and all(isinstance(c, dict) and len(c) == 1 and next(iter(c)) in ("remove", "add")
                                         and ids(next(iter(c.values()))) for c in raw):
            return [(next(iter(c)), list(next(iter(c.values())))) for c in raw]
        raise ValueError("gms_view needs changes: a list of views, each {\"remove\": [ids]} or {\"add\": [ids]}")
    removals = req.get("removals")
    if isinstance(removals, list) and all(ids(r) for r in removals):
        return [("remove", list(r)) for r in removals]
    raise ValueError("gms_view needs removals: a list of views, each a non-empty list of member ids")


CORE = QsmNode
