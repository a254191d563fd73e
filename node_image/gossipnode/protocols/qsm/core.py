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
MAX_GAP_TRACK = 4096     # gaps noted per arrival for recovery latency (bounds the work after a huge jump)


class QsmNode(Core):
    name = "qsm"

    def __init__(self, cfg: NodeConfig, now: float) -> None:
        p = cfg.protocol
        self.cfg = cfg
        self.p = p
        self.me = cfg.id
        self.ms = p.membership(cfg)
        self.group_names = [g.name for g in p.groups]
        self.region: Region = self.ms.region_of[self.me]
        self.part = self.region.partition_of(self.me)
        self.partition = self.region.partitions[self.part]
        self.is_pleader = self.partition[0] == self.me
        self.is_rleader = self.region.leader == self.me
        self.origins = self.ms.origins_of(self.region)
        self.rng = seeded_rng("qsm", cfg.seed, cfg.id)
        self.counters: Counter[str] = Counter()
        # receiver, per origin of the region
        self.recv = {o: Receipts() for o in self.origins}
        self.max_seen = {o: 0 for o in self.origins}
        self.cutoff = {o: 0 for o in self.origins}
        self.purged = {o: 0 for o in self.origins}
        self.replicated = {o: 0 for o in self.origins}   # stable at the caching replicas (the token's, last round)
        self.cache: dict[int, dict[int, tuple[int, int, bytes]]] = {o: {} for o in self.origins}
        self.missing_since: dict[int, dict[int, float]] = {o: {} for o in self.origins}
        self.rate: MovingRate | None = None     # μ_rec^(i): sampled from the first packet on (undefined before)
        # region leader
        self.round = 0
        self.token_out = False
        self.token_started = now
        self.next_token = now + p.token_interval_s if self.is_rleader else math.inf
        self.next_cutoff = {o: 0 for o in self.origins}
        self.next_purge = {o: 0 for o in self.origins}
        self.next_replicated = {o: 0 for o in self.origins}
        self.prev_max = {o: 0 for o in self.origins}
        # sender
        wl = cfg.workload
        self.sender = wl is not None and self.me in cfg.senders
        self.due = math.inf
        if self.sender:
            assert wl is not None
            self.groups_out = self.ms.sends_to[self.me]
            self.regions_out = sorted({r.index: r for g in self.groups_out for r in self.ms.regions_of[g]}.items())
            self.rr = 0
            self.seq = 0
            self.rseq = {i: 0 for i, _ in self.regions_out}
            self.buffer: dict[int, dict[int, tuple[int, int, bytes, float]]] = {i: {} for i, _ in self.regions_out}
            self.acked = {i: 0 for i, _ in self.regions_out}
            self.last_retransmit = {i: -math.inf for i, _ in self.regions_out}
            self.region_mu: dict[int, float] = {}
            # the share of this sender's messages that go into each region (its groups take turns)
            self.share = {i: sum(1 for g in self.groups_out if r in self.ms.regions_of[g]) / len(self.groups_out)
                          for i, r in self.regions_out}
            self.mu = min(wl.rate_per_s, p.rate_max) if p.rate_max else wl.rate_per_s
            self.payload = bytes(max(0, wl.size_bytes - MIN_DATA_SIZE))
            self.size = MIN_DATA_SIZE + len(self.payload)
            self.stop = now + wl.stop_s if wl.stop_s is not None else math.inf
            self.due = now + wl.start_s + self.rng.random() / self.mu
            if self.due >= self.stop:
                self.due = math.inf
        self.startup = Output()
        self.startup.log(now, "qsm_membership", region=self.region.name, region_index=self.region.index,
                         partition=self.part, partitions=self.region.p, region_size=len(self.region.members),
                         partition_leader=self.is_pleader, region_leader=self.is_rleader, origins=self.origins,
                         groups=[g for g in self.region.groups])

    # ---- timers ---------------------------------------------------------------------------------------------

    def next_wakeup(self) -> float:
        return min(self.due, self.next_token)

    def tick(self, now: float) -> Output:
        out = Output()
        if now >= self.due:
            self._send(now, out)
        if now >= self.next_token:
            interval = self.p.token_interval_s
            late = now - self.next_token
            self.next_token += interval * (1 + int(late // interval))
            if self.token_out and now - self.token_started < 5 * interval:
                self.counters["token_late"] += 1
                out.log(now, "token_late", round=self.round, outstanding=now - self.token_started)
            else:
                if self.token_out:     # lost with a connection: regenerate
                    out.log(now, "token_regenerated", round=self.round)
                self._generate(now, out)
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
            if r.index == self.region.index:
                self._accept(self.me, rseq, self.seq, gidx, self.payload, now, "own", self.me, "self", out)
        self.counters["sent_data"] += 1
        out.log(now, "data_sent", seq=self.seq, size=self.size, group_name=group,
                regions=[r.name for r in regions], rate=round(self.mu, 3))
        nxt = self.due + 1.0 / self.mu
        if nxt <= now:
            missed = int((now - nxt) * self.mu) + 1
            out.log(now, "steps_skipped", timer="workload", missed=missed)
            nxt = now + 1.0 / self.mu
        self.due = nxt if nxt < self.stop else math.inf

    def _transmit(self, region: Region, msg: Data, out: Output) -> None:
        if self.p.transport == "mcast":
            out.mcast.append((region.name, msg))
        else:
            out.send.extend((j, msg) for j in region.members if j != self.me)

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
        region = self.ms.regions[ridx]
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
        out.log(now, "ack_received", region=self.ms.regions[ridx].name, round=ack.round, stable=ack.stable,
                cached=ack.cached, max_seen=ack.max_seen, acked=len(lat), latency_sum=sum(lat),
                latency_max=max(lat, default=None), held=len(buf), **{"from": ack.sender})
        # the lost tail: nobody in the region has seen the last packets for retransmit_s
        first = ack.max_seen + 1
        if first <= self.rseq[ridx] and first in buf and now - buf[first][3] >= self.p.retransmit_s \
                and now - self.last_retransmit[ridx] >= self.p.retransmit_s:
            self.last_retransmit[ridx] = now
            self._retransmit(ridx, list(range(first, self.rseq[ridx] + 1)), now, "timeout", out)
        if self.p.rate_control and ack.rate != NO_RATE:
            mu_rec = ack.rate / 1000.0
            # (2) bounds the rate into this region; the sender's message rate is that over the region's share
            self.region_mu[ridx] = sender_rate(mu_rec, self.p.growth, self.p.rate_min) / self.share[ridx]
            new = min(self.region_mu.values())
            if self.p.rate_max is not None:
                new = min(new, self.p.rate_max)
            if abs(new - self.mu) > 0.01 * self.mu:
                out.log(now, "rate_changed", rate=round(new, 3), previous=round(self.mu, 3),
                        region=self.ms.regions[ridx].name, mu_rec=round(mu_rec, 3), m=ack.m)
                self.counters["rate_changes"] += 1
                if self.due != math.inf:      # the next send at the new rate
                    self.due = min(self.due, now + 1.0 / new)
                self.mu = new

    # ---- receiver -------------------------------------------------------------------------------------------

    def receive(self, msg: Any, now: float, via: str = "udp") -> Output:
        if not 0 <= msg.sender < self.cfg.n or msg.sender == self.me:
            raise BadMessage(f"sender {msg.sender} is not another member")
        if not 0 <= msg.region < len(self.ms.regions):
            raise BadMessage(f"region {msg.region} does not exist ({len(self.ms.regions)} regions)")
        out = Output()
        t = msg.type
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
        if msg.region != self.region.index:
            if t in (MsgType.DATA, MsgType.RETRANS):   # another region's multicast group this sender is in
                self.counters["foreign_region"] += 1
                return out
            raise BadMessage(f"{t.name} for region {msg.region}, this member is in {self.region.index}")
        if msg.sender not in self.region.members and t != MsgType.DATA and t != MsgType.RETRANS:
            raise BadMessage(f"{t.name} from {msg.sender}, who is not in region {self.region.name}")
        if t in (MsgType.DATA, MsgType.RETRANS, MsgType.FORWARD):
            if msg.origin not in self.recv:
                raise BadMessage(f"data of origin {msg.origin}, who does not send into region {self.region.name}")
            if not 0 <= msg.group < len(self.group_names) or self.group_names[msg.group] not in self.region.groups:
                raise BadMessage(f"data of group {msg.group}, which region {self.region.name} is not in")
            if t != MsgType.FORWARD and msg.sender != msg.origin:
                raise BadMessage(f"{t.name} of origin {msg.origin} from {msg.sender}")
            how = {MsgType.DATA: "data", MsgType.RETRANS: "retransmit"}.get(t) or ("pull" if msg.kind else "push")
            self._accept(msg.origin, msg.rseq, msg.seq, msg.group, msg.payload, now, how, msg.sender, via, out)
            return out
        if t == MsgType.PULL:
            if msg.origin not in self.recv:
                raise BadMessage(f"PULL for origin {msg.origin}, unknown in this region")
            self._serve_pull(msg, now, out)
            return out
        if t == MsgType.TOKEN:
            unknown = [e.origin for e in msg.entries if e.origin not in self.recv]
            if unknown:
                raise BadMessage(f"TOKEN with origins {unknown} unknown in this region")
            self._handle_token(msg, now, out)
            return out
        raise BadMessage(f"unexpected {t.name}")

    def _accept(self, o: int, rseq: int, seq: int, gidx: int, payload: bytes, now: float, how: str, frm: int,
                via: str, out: Output) -> None:
        r = self.recv[o]
        if rseq <= self.purged[o] or not r.add(rseq):
            self.counters[f"duplicate_{how}"] += 1
            return
        if self.rate is None:
            self.rate = MovingRate(self.p.rate_samples, self.p.rate_interval_s, now)
        self.rate.add(now)
        gaps = self.missing_since[o]
        if rseq > self.max_seen[o]:
            lo = max(self.max_seen[o], r.r) + 1
            for s in range(max(lo, rseq - MAX_GAP_TRACK), rseq):
                if s not in r.ahead:
                    gaps.setdefault(s, now)
            self.max_seen[o] = rseq
        since = gaps.pop(rseq, None)
        if self.region.caches(self.me, rseq):
            self.cache[o][rseq] = (seq, gidx, payload)
        self.counters[f"recv_{how}"] += 1
        if o == self.me:
            return
        out.log(now, "data_received", origin=o, seq=seq, sender=frm, repair=how != "data", via=via, how=how,
                group_name=self.group_names[gidx], region=self.region.name, rseq=rseq)
        if how != "data":
            out.log(now, "recovered", origin=o, seq=seq, rseq=rseq, how=how, latency=None if since is None
                    else now - since, region=self.region.name, **{"from": frm})

    def _serve_pull(self, msg: Pull, now: float, out: Output) -> None:
        cache = self.cache[msg.origin]
        sent = 0
        for s in expand(msg.ranges):
            held = cache.get(s)
            if held is None:
                continue
            seq, gidx, payload = held
            out.stream.append((msg.sender, Data(self.me, self.region.index, seq, msg.origin, gidx, s, payload,
                                                MsgType.FORWARD, 1)))
            sent += 1
            if sent == self.p.pull_limit:
                break
        self.counters["pull_served"] += sent
        out.log(now, "pull_served", origin=msg.origin, to=msg.sender, asked=count(msg.ranges), sent=sent)

    # ---- the token ------------------------------------------------------------------------------------------

    def _generate(self, now: float, out: Output) -> None:
        self.round += 1
        self.token_out = True
        self.token_started = now
        entries = [Entry(o, cutoff=self.next_cutoff[o], purge=self.next_purge[o], replicated=self.next_replicated[o])
                   for o in self.origins]
        token = Token(self.me, self.region.index, self.round, 0, NO_RATE, entries)
        self.counters["token_generated"] += 1
        self._handle_token(token, now, out)

    def _missing(self, o: int, cutoff: int) -> list[int]:
        r = self.recv[o]
        return [s for s in range(max(r.r, self.purged[o]) + 1, cutoff + 1) if s not in r.ahead]

    def _visit(self, token: Token, from_pred: bool, now: float, out: Output) -> None:
        """§2.3.3 at this node: purge, NAK set, push/pull with the predecessor, the partition's intersection,
        pulls from other partitions, and this node's contribution to max_seen, stable and the rate."""
        limit = self.p.nak_limit
        pred = token.sender
        for e in token.entries:
            o = e.origin
            if e.purge > self.purged[o]:
                cache = self.cache[o]
                stale = [s for s in cache if s <= e.purge]
                for s in stale:
                    del cache[s]
                self.purged[o] = e.purge
                for s in [s for s in self.missing_since[o] if s <= e.purge]:
                    del self.missing_since[o][s]
                if stale:
                    out.log(now, "cache_released", origin=o, through=e.purge, count=len(stale), held=len(cache))
            self.cutoff[o] = max(self.cutoff[o], e.cutoff)
            self.replicated[o] = max(self.replicated[o], e.replicated)
            missing = self._missing(o, self.cutoff[o])
            gaps = self.missing_since[o]
            for s in missing:
                gaps.setdefault(s, now)
            p = self.region.p
            mine = normalise((s, s) for s in missing if s % p == self.part)[:limit]
            if from_pred:
                push, pull = merge_naks(e.prev, mine)
                pushed = 0
                for s in expand(push):
                    held = self.cache[o].get(s)
                    if held is not None and pushed < self.p.pull_limit:
                        seq, gidx, payload = held
                        out.stream.append((pred, Data(self.me, self.region.index, seq, o, gidx, s, payload,
                                                      MsgType.FORWARD, 0)))
                        pushed += 1
                if pushed:
                    self.counters["pushed"] += pushed
                    out.log(now, "push_sent", origin=o, to=pred, count=pushed, round=token.round)
                if pull:
                    out.stream.append((pred, Pull(self.me, self.region.index, o, pull)))
                    self.counters["pull_sent"] += 1
                    out.log(now, "pull_sent", origin=o, to=pred, ranges=len(pull), count=count(pull),
                            partition=self.part, round=token.round)
            e.pnak = mine if token.phase == 0 else intersect(e.pnak, mine)
            e.prev = mine
            # §2.3.3: "requests for a given packet by nodes outside its caching partition is delayed until it is
            # stable on all of its caching replicas" (known from last round's caching-stable prefix). Once per round:
            # not again when the token comes back round the ring to this partition's leader.
            others: dict[int, list[int]] = {}
            delayed: dict[int, int] = {}
            for s in (missing if not (from_pred and self.is_pleader) else ()):
                if s % p != self.part:
                    if s <= self.replicated[o]:
                        others.setdefault(s % p, []).append(s)
                    else:
                        delayed[s % p] = delayed.get(s % p, 0) + 1
            for k, n in sorted(delayed.items()):
                self.counters["pull_delayed"] += n
                out.log(now, "pull_delayed", origin=o, partition=k, count=n, replicated=self.replicated[o],
                        round=token.round)
            for k, seqs in sorted(others.items()):
                leader = self.region.partitions[k][0]
                ranges = normalise((s, s) for s in seqs)[:limit]
                out.stream.append((leader, Pull(self.me, self.region.index, o, ranges)))
                self.counters["pull_sent"] += 1
                out.log(now, "pull_sent", origin=o, to=leader, ranges=len(ranges), count=count(ranges),
                        partition=k, round=token.round)
            e.max_seen = max(e.max_seen, self.max_seen[o])
            prefix = max(self.recv[o].r, self.purged[o])
            e.stable = min(e.stable, prefix)
            e.cstable = min(e.cstable, caching_prefix(prefix, self.recv[o].ahead, self.part, p))
        mine_rate = self.rate.rate(now) if self.rate is not None else None
        if mine_rate is not None:
            token.rate = min(token.rate, int(mine_rate * 1000))

    def _handle_token(self, token: Token, now: float, out: Output) -> None:
        if token.phase == 2:
            if not self.is_rleader:
                raise BadMessage("TOKEN home at a member that does not lead the region")
            self._round_done(token, now, out)
            return
        self.counters["token_visits"] += 1
        self._visit(token, token.phase == 1, now, out)
        if self.is_pleader and (token.phase == 1 or len(self.partition) == 1):
            for e in token.entries:          # the partition's collective NAK to the origin
                if e.pnak:
                    if e.origin != self.me:
                        out.stream.append((e.origin, Nak(self.me, self.region.index, e.origin, self.part, e.pnak)))
                    self.counters["nak_sent"] += 1
                    out.log(now, "nak_sent", origin=e.origin, partition=self.part, count=count(e.pnak),
                            round=token.round)
                    if e.origin == self.me:
                        self._retransmit(self.region.index, expand(e.pnak), now, "nak", out)
                e.pnak = ()
                e.prev = ()
            nxt, hop = self.region.leader_hop(self.part)
            token.phase = 0 if hop == "inter" else 2
            if nxt == self.me:               # a one-partition region: home already
                self._round_done(token, now, out)
                return
        else:
            nxt, hop = self.region.next_hop(self.me)
            token.phase = 1
        sender = token.sender
        token.sender = self.me
        out.stream.append((nxt, token))
        self.counters["token_passed"] += 1
        out.log(now, "token_pass", round=token.round, to=nxt, hop=hop, region=self.region.name, entries=len(
            token.entries), **{"from": sender})

    def _round_done(self, token: Token, now: float, out: Output) -> None:
        self.token_out = False
        active = sum(1 for e in token.entries if e.max_seen > self.prev_max[e.origin])
        m = max(1, active)
        rate = NO_RATE if token.rate == NO_RATE else int(receiver_share([token.rate], m))
        acks = 0
        for e in token.entries:
            o = e.origin
            self.next_cutoff[o] = e.max_seen
            if e.stable != NO_STABLE:
                self.next_purge[o] = min(e.stable, e.max_seen)
            if e.cstable != NO_STABLE:
                self.next_replicated[o] = max(self.next_replicated[o], min(e.cstable, e.max_seen))
            self.prev_max[o] = e.max_seen
            if e.max_seen == 0:
                continue
            ack = Ack(self.me, self.region.index, token.round, o, self.next_purge[o], e.max_seen, rate, m,
                      self.next_replicated[o])
            acks += 1
            if o == self.me:
                self._on_ack(ack, now, out)
            else:
                out.stream.append((o, ack))
            out.log(now, "ack_sent", origin=o, round=token.round, stable=ack.stable, cached=ack.cached,
                    max_seen=e.max_seen, rate=None if rate == NO_RATE else rate / 1000.0, m=m)
        self.counters["token_rounds"] += 1
        out.log(now, "token_round", round=token.round, region=self.region.name, duration=now - self.token_started,
                acks=acks, m=m, min_rate=None if token.rate == NO_RATE else token.rate / 1000.0)

    # ---- state ----------------------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        snap: dict[str, Any] = {
            "id": self.me,
            "region": self.region.name,
            "partition": self.part,
            "R": {str(o): r.r for o, r in self.recv.items()},
            "max_seen": {str(o): v for o, v in self.max_seen.items()},
            "replicated": {str(o): v for o, v in self.replicated.items()},
            "cached": {str(o): len(c) for o, c in self.cache.items()},
            "round": self.round,
            "counters": dict(sorted(self.counters.items())),
        }
        if self.sender:
            snap["sender"] = {"seq": self.seq, "rate": self.mu,
                              "buffered": {self.ms.regions[i].name: len(b) for i, b in self.buffer.items()},
                              "acked": {self.ms.regions[i].name: a for i, a in self.acked.items()}}
        return snap


CORE = QsmNode
