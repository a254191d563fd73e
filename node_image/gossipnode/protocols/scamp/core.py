"""Scamp (Ganesh, Kermarrec, Massoulié; seed 003 §2.4 and §5.1) as a sans-IO core, with the gossip broadcast of
fanout 4 over the PartialView (UDP). Scamp is reactive: views change on (re-)subscriptions and lease expiries only.

- subscription: a member sends SUBSCRIBE(me, indirection_ttl) to the contact and starts with the contact in its
  PartialView (all at once through `contact`, or with `join_interval_s` one by one, each through a random member
  already in the overlay, as seed 003 §5 initialised Scamp); the SUBSCRIBE walks indirection_ttl random hops over
  PartialViews (indirection: the subscription's effective contact is a random member), and the member where it
  ends forwards FORWARD_SUB(new) to every member of
  its PartialView and c more to random ones (c = 4).
- a FORWARD_SUB(new) is kept with probability 1 / (1 + |PartialView|) (always after `forward_limit` hops), unless
  `new` is the receiver or already in its PartialView; the keeper adds `new` and sends it KEPT (the new member adds
  the keeper to its InView); otherwise it goes on to a random PartialView member.
- leases: every entry expires `lease_s` after it was added (the member removes it); every member re-subscribes
  once per lease (a fresh SUBSCRIBE through a random PartialView member, through the contact if it has none), so
  its id is spread again while expired copies — and the ids of crashed members — disappear.
- isolation recovery (Scamp's heartbeats, simplified): a member that no one has told KEPT (empty InView: its
  subscription was lost, e.g. the contact was not up yet) subscribes again through the contact every 2 cycles.
- every cycle (`cycle_s`): expired entries removed, the re-subscription if due, `cycle` logged.

Events: `view_changed {view: partial|in, op, peer, reason, size}`, `cycle {cycle, view, in}`, `data_*`.
"""
from __future__ import annotations

from collections import Counter
from typing import Any

from gossipnode.clocks import StepClock
from gossipnode.config import NodeConfig
from gossipnode.protocols.base import Core, Output, seeded_rng

from ..peerview.broadcast import BroadcastSlots, PeerBroadcaster
from .wire import MIN_DATA_SIZE, Data, ForwardSub, Kept, Subscribe


class ScampNode(PeerBroadcaster, Core):
    name = "scamp"

    def __init__(self, cfg: NodeConfig, now: float) -> None:
        p = cfg.protocol
        self.cfg = cfg
        self.me, self.n = cfg.id, cfg.n
        self.c, self.fanout, self.ttl, self.limit = p.c, p.fanout, p.indirection_ttl, p.forward_limit
        self.lease = p.lease_s
        self.contact = p.contact
        self.rng = seeded_rng(self.name, cfg.seed, cfg.id)
        self.partial: dict[int, float] = {}      # member -> lease expiry
        self.inview: set[int] = set()
        self.seen: set[tuple[int, int]] = set()
        self.slot_seen: set[int] = set()
        self.cycle = 0
        self.changes = 0
        self.clock = StepClock(p.cycle_s, now, self.rng)
        self.resubscribe_at = now + self.lease * (0.5 + self.rng.random())   # spread the members' renewals
        self.counters: Counter[str] = Counter()
        self.slots = BroadcastSlots(self.name, cfg, MIN_DATA_SIZE, now, self.rng, p.backups, p.backup_delay_s)
        self.startup = Output()
        # one by one (join_interval_s > 0): member i subscribes i intervals after its start, through a random
        # member already in the overlay (seed 003 §5); member 0 starts it. Else every member at once through
        # `contact`.
        self.join_due: float | None = None
        if p.join_interval_s > 0:
            self.contact = self.rng.randrange(self.me) if self.me else self.me
            self.join_due = now + self.me * p.join_interval_s if self.me else None
        elif self.me != self.contact:
            self._subscribe(self.startup, now)

    def _subscribe(self, out: Output, now: float) -> None:
        """The first subscription: the contact in the PartialView, SUBSCRIBE to it (its walk starts there)."""
        self._add(out, now, self.contact, "subscribe")
        out.send.append((self.contact, Subscribe(self.me, self.me, self.ttl)))
        self.counters["subscribe_sent"] += 1

    def _log(self, out: Output, now: float, view: str, op: str, peer: int, reason: str) -> None:
        self.changes += 1
        size = len(self.partial) if view == "partial" else len(self.inview)
        out.log(now, "view_changed", change=self.changes, view=view, op=op, peer=peer, reason=reason, size=size,
                cycle=self.cycle)

    def _add(self, out: Output, now: float, peer: int, reason: str) -> None:
        fresh = peer not in self.partial
        self.partial[peer] = now + self.lease
        if fresh:
            self._log(out, now, "partial", "add", peer, reason)

    def _on_subscribe(self, msg: Subscribe, now: float, out: Output) -> None:
        pool = sorted(q for q in self.partial if q != msg.new)
        if msg.ttl > 0 and pool:
            out.send.append((self.rng.choice(pool), Subscribe(self.me, msg.new, msg.ttl - 1)))
            return
        if msg.new == self.me:
            return
        targets = sorted(q for q in self.partial if q != msg.new)
        if not targets:                          # the first subscription to a lone contact: keep it
            self._keep(msg.new, now, out, "subscription")
            return
        for q in targets:
            out.send.append((q, ForwardSub(self.me, msg.new, 0)))
        for _ in range(self.c):
            out.send.append((self.rng.choice(targets), ForwardSub(self.me, msg.new, 0)))
        self.counters["subscriptions_handled"] += 1

    def _keep(self, new: int, now: float, out: Output, reason: str) -> None:
        self._add(out, now, new, reason)
        out.send.append((new, Kept(self.me)))

    def _on_forward(self, msg: ForwardSub, now: float, out: Output) -> None:
        new = msg.new
        if new != self.me and new not in self.partial and (
                msg.hops >= self.limit or self.rng.random() < 1.0 / (1 + len(self.partial))):
            self._keep(new, now, out, "forwarded_subscription")
            return
        pool = sorted(q for q in self.partial if q != new)
        if pool:
            out.send.append((self.rng.choice(pool), ForwardSub(self.me, new, min(255, msg.hops + 1))))
        elif new != self.me and new not in self.partial:
            self._keep(new, now, out, "forwarded_subscription")

    def _on_kept(self, msg: Kept, now: float, out: Output) -> None:
        if msg.sender not in self.inview:
            self.inview.add(msg.sender)
            self._log(out, now, "in", "add", msg.sender, "kept")

    def _targets(self, exclude: tuple[int, ...]) -> list[int]:
        pool = sorted(q for q in self.partial if q not in exclude)
        return self.rng.sample(pool, min(self.fanout, len(pool)))

    def _broadcast(self, out: Output, now: float, seq: int) -> None:
        self.seen.add((self.me, seq))
        self.slot_seen.add(seq)
        targets = self._targets(())
        msg = Data(self.me, self.me, seq, 0, self.slots.payload)
        out.send.extend((q, msg) for q in targets)
        self.counters["sent_data"] += 1
        out.log(now, "data_sent", seq=seq, size=self.slots.size, fanout=len(targets), cycle=self.cycle)

    def _on_data(self, msg: Data, now: float, out: Output) -> None:
        if not self._first_receipt(msg, now, out):
            return
        fwd = Data(self.me, msg.origin, msg.seq, min(255, msg.hops + 1), msg.payload)
        out.send.extend((q, fwd) for q in self._targets((msg.sender, msg.origin)))

    def receive(self, msg: Any, now: float, via: str = "udp") -> Output:
        self._check_ids(msg)
        out = Output()
        kind = type(msg)
        if kind is Data:
            self._on_data(msg, now, out)
        elif kind is Subscribe:
            self._on_subscribe(msg, now, out)
        elif kind is ForwardSub:
            self._on_forward(msg, now, out)
        elif kind is Kept:
            self._on_kept(msg, now, out)
        return out

    def next_wakeup(self) -> float:
        return min(self.clock.due, self.slots.due, self.join_due if self.join_due is not None else float("inf"))

    def tick(self, now: float) -> Output:
        out = Output()
        if self.join_due is not None and now >= self.join_due:
            self.join_due = None
            self._subscribe(out, now)
        if now >= self.clock.due:
            skipped = self.clock.advance(now)
            self.cycle += 1 + skipped
            for q in sorted(q for q, exp in self.partial.items() if exp <= now):
                del self.partial[q]
                self._log(out, now, "partial", "remove", q, "lease")
            isolated = (not self.inview and self.me != self.contact and self.join_due is None
                        and self.cycle % 2 == 0)
            if (now >= self.resubscribe_at and self.join_due is None) or isolated:
                self.resubscribe_at = now + self.lease
                via = self.rng.choice(sorted(self.partial)) if self.partial and not isolated else self.contact
                if via != self.me:
                    out.send.append((via, Subscribe(self.me, self.me, self.ttl)))
                    self.counters["resubscribe_sent"] += 1
            out.log(now, "cycle", cycle=self.cycle, view=sorted(self.partial), **{"in": len(self.inview)})
        if now >= self.slots.due:
            for seq in self.slots.fire(now, lambda s: s in self.slot_seen):
                self._broadcast(out, now, seq)
        return out

    def snapshot(self) -> dict[str, Any]:
        return {"id": self.me, "cycle": self.cycle, "partial": sorted(self.partial), "in": sorted(self.inview),
                "counters": dict(sorted(self.counters.items()))}


CORE = ScampNode
