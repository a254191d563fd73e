"""Cyclon (the enhanced shuffle of Voulgaris et al., as seed 003 §5.1 configures it) as a sans-IO core, with the
gossip broadcast of seed 003 §5: a message is forwarded, on its first receipt, to `fanout` members drawn at random
from the partial view (not back to the member it came from). Everything travels by UDP: Cyclon has no failure
detector; a crashed member leaves the views only as shuffles age it out.

- join: a new member starts with the introducer (`contact`) in its view and sends it JOIN; the introducer (if its
  view is empty, it just takes the new member and answers with itself) starts view_size random walks WALK(new,
  walk_ttl), each to a random neighbour; a walk's end (ttl 0, or an empty view) swaps a random entry of its view
  for the new member (age 0) and sends the entry it gave up in JOIN_REPLY (with room in its view, it keeps
  everything and sends itself). A member whose view is empty at a cycle JOINs again.
- every cycle: ages + 1; Q = the oldest entry, removed; SHUFFLE([me, age 0] + l - 1 random others) to Q; Q
  answers SHUFFLE_REPLY with l random entries of its own and both merge: entries for themselves or already held
  are skipped, empty slots filled first, then the entries sent to the other are replaced.

Events: `view_changed {view: "partial", op, peer, reason, size}`, `cycle {cycle, view}`, `data_sent`,
`data_received`, `data_duplicate`.
"""
from __future__ import annotations

from collections import Counter
from types import ModuleType
from typing import Any

from gossipnode.clocks import StepClock
from gossipnode.config import NodeConfig
from gossipnode.protocols.base import BadMessage, Core, Output, seeded_rng

from ..peerview.broadcast import BroadcastSlots, PeerBroadcaster
from . import wire as cyclon_wire
from .wire import entry, unpack


class CyclonNode(PeerBroadcaster, Core):
    name = "cyclon"
    W: ModuleType = cyclon_wire

    def __init__(self, cfg: NodeConfig, now: float) -> None:
        p = cfg.protocol
        self.cfg = cfg
        self.me = cfg.id
        self.n = cfg.n
        self.view_size = min(p.view_size, max(1, cfg.n - 1))
        self.l = min(p.shuffle_length, self.view_size)
        self.walk_ttl = p.walk_ttl
        self.fanout = p.fanout
        self.contact = p.contact
        self.rng = seeded_rng(self.name, cfg.seed, cfg.id)
        self.view: dict[int, int] = {}           # member -> age
        self.sent: dict[int, tuple[int, ...]] = {}   # shuffle target -> the members we sent it
        self.seen: set[tuple[int, int]] = set()
        self.slot_seen: set[int] = set()
        self.cycle = 0
        self.changes = 0                          # view changes so far (orders the changes of one timestamp)
        self.clock = StepClock(p.cycle_s, now, self.rng)
        self.counters: Counter[str] = Counter()
        self.slots = BroadcastSlots(self.name, cfg, self.W.MIN_DATA_SIZE, now, self.rng, p.backups,
                                    p.backup_delay_s)
        self.startup = Output()
        self._join(self.startup, now)

    # ---- view -----------------------------------------------------------------------------------------------------

    def _log_view(self, out: Output, now: float, op: str, peer: int, reason: str) -> None:
        self.changes += 1
        out.log(now, "view_changed", change=self.changes,
                view="partial", op=op, peer=peer, reason=reason, size=len(self.view),
                cycle=self.cycle)

    def _add(self, out: Output, now: float, peer: int, age: int, reason: str) -> None:
        self.view[peer] = age
        self._log_view(out, now, "add", peer, reason)

    def _remove(self, out: Output, now: float, peer: int, reason: str) -> None:
        del self.view[peer]
        self._log_view(out, now, "remove", peer, reason)

    def _merge(self, out: Output, now: float, entries: tuple[int, ...], sent: tuple[int, ...]) -> None:
        replaceable = [q for q in sent if q in self.view]
        for e in entries:
            q, age = unpack(e)
            if q == self.me or q in self.view or not 0 <= q < self.n:
                continue
            if len(self.view) < self.view_size:
                self._add(out, now, q, age, "shuffle")
            elif replaceable:
                self._remove(out, now, replaceable.pop(0), "replaced")
                self._add(out, now, q, age, "shuffle")

    # ---- join -----------------------------------------------------------------------------------------------------

    def _join(self, out: Output, now: float) -> None:
        if self.me == self.contact:
            return
        if self.contact not in self.view:
            self._add(out, now, self.contact, 0, "join")
        out.send.append((self.contact, self.W.Join(self.me)))
        self.counters["join_sent"] += 1
        out.log(now, "join_sent", contact=self.contact, cycle=self.cycle)

    def _on_join(self, msg, now: float, out: Output) -> None:
        new = msg.sender
        if not self.view or self.walk_ttl == 0:
            self._end_walk(new, now, out)
            return
        for _ in range(self.view_size):
            out.send.append((self.rng.choice(sorted(self.view)), self.W.Walk(self.me, new, self.walk_ttl)))
            self.counters["walk_sent"] += 1

    def _end_walk(self, new: int, now: float, out: Output) -> None:
        if new in self.view or new == self.me:
            return
        if len(self.view) < self.view_size:
            self._add(out, now, new, 0, "join")
            out.send.append((new, self.W.JoinReply(self.me, (entry(self.me, 0),))))
            return
        victim = self.rng.choice(sorted(self.view))
        age = self.view[victim]
        self._remove(out, now, victim, "join_swap")
        self._add(out, now, new, 0, "join")
        out.send.append((new, self.W.JoinReply(self.me, (entry(victim, age),))))

    def _on_walk(self, msg, now: float, out: Output) -> None:
        ttl = msg.ttl - 1
        onward = sorted(q for q in self.view if q != msg.new)
        if ttl <= 0 or not onward:
            self._end_walk(msg.new, now, out)
        else:
            out.send.append((self.rng.choice(onward), self.W.Walk(self.me, msg.new, ttl)))

    def _on_join_reply(self, msg, now: float, out: Output) -> None:
        for e in msg.entries:
            q, age = unpack(e)
            if q != self.me and q not in self.view and 0 <= q < self.n:
                if len(self.view) >= self.view_size:
                    self._remove(out, now, self.rng.choice(sorted(self.view)), "join_swap")
                self._add(out, now, q, age, "join_reply")

    # ---- shuffle --------------------------------------------------------------------------------------------------

    def _shuffle(self, out: Output, now: float) -> None:
        if not self.view:
            return
        for q in self.view:
            self.view[q] += 1
        target = max(sorted(self.view), key=lambda q: self.view[q])
        self._remove(out, now, target, "shuffle_target")
        others = sorted(self.view)
        chosen = tuple(self.rng.sample(others, min(self.l - 1, len(others))))
        self.sent = {target: chosen}
        entries = (entry(self.me, 0), *(entry(q, self.view[q]) for q in chosen))
        out.send.append((target, self.W.Shuffle(self.me, entries)))
        self.counters["shuffle_sent"] += 1
        out.log(now, "shuffle_sent", peer=target, cycle=self.cycle)

    def _on_shuffle(self, msg, now: float, out: Output) -> None:
        mine = sorted(q for q in self.view if q != msg.sender)
        chosen = tuple(self.rng.sample(mine, min(self.l, len(mine))))
        out.send.append((msg.sender, self.W.ShuffleReply(self.me, tuple(entry(q, self.view[q]) for q in chosen))))
        self.counters["shuffle_answered"] += 1
        self._merge(out, now, msg.entries, chosen)

    def _on_shuffle_reply(self, msg, now: float, out: Output) -> None:
        sent = self.sent.pop(msg.sender, ())
        self._merge(out, now, msg.entries, sent)

    # ---- broadcast ------------------------------------------------------------------------------------------------

    def _targets(self, exclude: tuple[int, ...]) -> list[int]:
        pool = sorted(q for q in self.view if q not in exclude)
        return self.rng.sample(pool, min(self.fanout, len(pool)))

    def _send_data(self, out: Output, now: float, targets: list[int], msg) -> None:
        out.send.extend((q, msg) for q in targets)

    def _broadcast(self, out: Output, now: float, seq: int) -> None:
        self.seen.add((self.me, seq))
        self.slot_seen.add(seq)
        targets = self._targets(())
        self._send_data(out, now, targets, self.W.Data(self.me, self.me, seq, 0, self.slots.payload))
        self.counters["sent_data"] += 1
        out.log(now, "data_sent", seq=seq, size=self.slots.size, fanout=len(targets), cycle=self.cycle)

    def _on_data(self, msg, now: float, out: Output) -> None:
        if not self._first_receipt(msg, now, out):
            return
        fwd = self.W.Data(self.me, msg.origin, msg.seq, min(255, msg.hops + 1), msg.payload)
        self._send_data(out, now, self._targets((msg.sender, msg.origin)), fwd)

    # ---- dispatch -------------------------------------------------------------------------------------------------

    def receive(self, msg: Any, now: float, via: str = "udp") -> Output:
        self._check_ids(msg)
        out = Output()
        kind, W = type(msg), self.W
        if kind is W.Data:
            self._on_data(msg, now, out)
        elif kind is W.Join:
            self._on_join(msg, now, out)
        elif kind is W.Walk:
            self._on_walk(msg, now, out)
        elif kind is W.JoinReply:
            self._on_join_reply(msg, now, out)
        elif kind is W.Shuffle:
            self._on_shuffle(msg, now, out)
        elif kind is W.ShuffleReply:
            self._on_shuffle_reply(msg, now, out)
        else:
            self._receive_other(msg, now, out)
        return out

    def _receive_other(self, msg, now: float, out: Output) -> None:
        raise BadMessage(f"unexpected {type(msg).__name__}")

    def next_wakeup(self) -> float:
        return min(self.clock.due, self.slots.due)

    def tick(self, now: float) -> Output:
        out = Output()
        if now >= self.clock.due:
            skipped = self.clock.advance(now)
            self.cycle += 1 + skipped
            out.log(now, "cycle", cycle=self.cycle, view=sorted(self.view))
            if not self.view:
                self._join(out, now)
            self._shuffle(out, now)
        if now >= self.slots.due:
            for seq in self.slots.fire(now, lambda s: s in self.slot_seen):
                self._broadcast(out, now, seq)
        return out

    def snapshot(self) -> dict[str, Any]:
        return {"id": self.me, "cycle": self.cycle, "view": {str(q): a for q, a in sorted(self.view.items())},
                "counters": dict(sorted(self.counters.items()))}


CORE = CyclonNode
