"""HyParView (seed 003 §4, Algorithm 1) as a sans-IO core, with flood broadcast over the active view.

Views: `active` (at most active_size, symmetric, every member on a TCP connection: `Output.stream`) and `passive`
(at most passive_size). Everything below follows Algorithm 1 and §§4.2-4.5; the few choices the paper leaves open
are marked "(choice)" and listed in docs/hyparview.md.

- init: a member other than the contact sends JOIN to the contact and counts the contact as an active neighbour
  (the TCP connection it opened is the link). The contact adds the new node (dropping a random one if full, who
  gets DISCONNECT) and sends FORWARD_JOIN(new, ARWL) to every other active neighbour.
- FORWARD_JOIN(new, ttl) from s: if ttl = 0 or no active neighbour but s and new is left to forward to (the
  prose's "active view of one", Algorithm 1's "empty"), add `new` to the active view and tell it with JOIN_REPLY
  (the paper's implicit TCP connection); otherwise, at ttl = PRWL add `new` to the passive view, and forward
  FORWARD_JOIN(new, ttl - 1) to a random active neighbour other than s.
- failure detector: `on_connection(peer, "failed")` (RST, EOF, timeout, failed write). A failed active neighbour
  is removed and the reactive repair starts: a random passive member q is asked NEIGHBOR(high if the active view
  is empty, else low); a failed connection to q removes q from the passive view and the next one is tried;
  a rejection keeps q and tries the next; an acceptance moves q to the active view. The repair stops when every
  passive member was tried once; it resumes every cycle while the active view is not full (choice).
- every cycle (the node's own timer, `cycle_s`): log `cycle`, resume the repair, and SHUFFLE: [me] + ka active +
  kp passive to a random active neighbour, a random walk of shuffle_ttl; where it stops (ttl 0, or an active view
  of one) the receiver answers SHUFFLE_REPLY with as many random passive members (on a temporary TCP connection,
  closed once answered) and both integrate what they received into their passive views, evicting first the ids
  they sent to the other, then random ones. A member whose views are both empty JOINs again (choice).
- a message that needs the active link (DATA, FORWARD_JOIN, SHUFFLE) from a member not in the active view is
  answered with DISCONNECT (choice: heals an asymmetric link left by crossing messages).
- connections: a member closes its connection to a peer that is in neither its active view nor the NEIGHBOR
  request under way (the temporary connections of §4.3 and §4.4).
- broadcast: DATA(origin, seq) is forwarded on first receipt to every active neighbour but the one it came from;
  duplicates are counted and logged (`data_duplicate`). Slots and senders: `peerview.broadcast`.

Events: `view_changed {view, op, peer, reason, size}`, `cycle {cycle, active, passive}`, `neighbor_request`,
`neighbor_reply`, `join_sent`, `shuffle_sent`, `data_sent`, `data_received`, `data_duplicate`, and the base's
`connection_up` / `connection_failed`.
"""
from __future__ import annotations

from collections import Counter
from typing import Any

from gossipnode.clocks import StepClock
from gossipnode.config import NodeConfig
from gossipnode.protocols.base import BadMessage, Core, Output, seeded_rng

from ..peerview.broadcast import BroadcastSlots, PeerBroadcaster
from .wire import (MIN_DATA_SIZE, Data, Disconnect, ForwardJoin, Join, JoinReply, Neighbor, NeighborReply, Shuffle,
                   ShuffleReply)

HIGH, LOW = 1, 0


class HyParViewNode(PeerBroadcaster, Core):
    name = "hyparview"
    DATA_VIA = "tcp"  # data floods over the active view's TCP connections

    def __init__(self, cfg: NodeConfig, now: float) -> None:
        p = cfg.protocol
        self.cfg = cfg
        self.me = cfg.id
        self.n = cfg.n
        self.active_size, self.passive_size = p.sizes(cfg.n)
        self.arwl, self.prwl, self.ka, self.kp = p.arwl, p.prwl, p.ka, p.kp
        self.shuffle_ttl = p.shuffle_ttl if p.shuffle_ttl is not None else p.arwl
        self.contact = p.contact
        self.rng = seeded_rng(self.name, cfg.seed, cfg.id)
        self.active: list[int] = []
        self.passive: list[int] = []
        self.pending: int | None = None           # the passive member asked NEIGHBOR, awaiting its reply
        self.tried: set[int] = set()              # passive members asked in the current repair
        self.shuffle_sent: tuple[int, ...] = ()   # the ids of our last SHUFFLE (evicted first on its reply)
        self.seen: set[tuple[int, int]] = set()
        self.slot_seen: set[int] = set()
        self.cycle = 0
        self.changes = 0                          # view changes so far (orders the changes of one timestamp)
        self.clock = StepClock(p.cycle_s, now, self.rng)
        self.counters: Counter[str] = Counter()
        self.slots = BroadcastSlots(self.name, cfg, MIN_DATA_SIZE, now, self.rng, p.backups, p.backup_delay_s)
        self.startup = Output()
        # one by one (join_interval_s > 0): member i JOINs i intervals after its start, and not before
        self.join_due: float | None = now + cfg.id * p.join_interval_s if p.join_interval_s > 0 else None
        if self.join_due is None:
            self._join(self.startup, now)

    # ---- views (Algorithm 1's primitives) ---------------------------------------------------------------------

    def _log_view(self, out: Output, now: float, view: str, op: str, peer: int, reason: str) -> None:
        size = len(self.active) if view == "active" else len(self.passive)
        self.changes += 1
        out.log(now, "view_changed", change=self.changes,
                view=view, op=op, peer=peer, reason=reason, size=size, cycle=self.cycle)

    def _drop_random_active(self, out: Output, now: float, reason: str) -> None:
        peer = self.rng.choice(self.active)
        self.active.remove(peer)
        self._log_view(out, now, "active", "remove", peer, reason)
        out.stream.append((peer, Disconnect(self.me)))
        out.close.append(peer)
        self.counters["disconnect_sent"] += 1
        self._add_passive(out, now, peer, "disconnected")

    def _add_active(self, out: Output, now: float, node: int, reason: str) -> bool:
        if node == self.me or node in self.active:
            return False
        if len(self.active) >= self.active_size:
            self._drop_random_active(out, now, "dropped")
        if node in self.passive:
            self.passive.remove(node)
            self._log_view(out, now, "passive", "remove", node, "promoted")
        self.active.append(node)
        self._log_view(out, now, "active", "add", node, reason)
        if len(self.active) >= self.active_size:
            self.tried.clear()
        return True

    def _add_passive(self, out: Output, now: float, node: int, reason: str,
                     evict_first: tuple[int, ...] = ()) -> bool:
        if node == self.me or node in self.active or node in self.passive:
            return False
        if len(self.passive) >= self.passive_size:
            preferred = [q for q in self.passive if q in evict_first]
            victim = self.rng.choice(preferred or self.passive)
            self.passive.remove(victim)
            self._log_view(out, now, "passive", "remove", victim, "evicted")
        self.passive.append(node)
        self._log_view(out, now, "passive", "add", node, reason)
        return True

    def _remove_active(self, out: Output, now: float, peer: int, reason: str) -> None:
        self.active.remove(peer)
        self._log_view(out, now, "active", "remove", peer, reason)

    def _close_if_unused(self, out: Output, peer: int) -> None:
        if peer not in self.active and peer != self.pending and peer not in out.close:
            out.close.append(peer)

    # ---- join ---------------------------------------------------------------------------------------------------

    def _join(self, out: Output, now: float) -> None:
        if self.me == self.contact or self.contact in self.active:
            return
        out.stream.append((self.contact, Join(self.me)))
        self.counters["join_sent"] += 1
        out.log(now, "join_sent", contact=self.contact, cycle=self.cycle)
        self._add_active(out, now, self.contact, "join")

    def _on_join(self, msg: Join, now: float, out: Output) -> None:
        new = msg.sender
        self._add_active(out, now, new, "join")
        for peer in self.active:
            if peer != new:
                out.stream.append((peer, ForwardJoin(self.me, new, self.arwl)))
                self.counters["forward_join_sent"] += 1

    def _on_forward_join(self, msg: ForwardJoin, now: float, out: Output) -> None:
        new, ttl = msg.new, msg.ttl
        if new == self.me:
            return
        onward = [q for q in self.active if q not in (msg.sender, new)]
        if ttl == 0 or not onward:
            if self._add_active(out, now, new, "forward_join"):
                out.stream.append((new, JoinReply(self.me)))
            return
        if ttl == self.prwl:
            self._add_passive(out, now, new, "forward_join")
        out.stream.append((self.rng.choice(onward), ForwardJoin(self.me, new, ttl - 1)))
        self.counters["forward_join_sent"] += 1

    # ---- active view repair (§4.3) ------------------------------------------------------------------------------

    def _repair(self, out: Output, now: float) -> None:
        if self.pending is not None or len(self.active) >= self.active_size:
            return
        candidates = [q for q in self.passive if q not in self.tried]
        if not candidates:
            self.tried.clear()          # every passive member was asked: wait for the next cycle
            return
        q = self.rng.choice(candidates)
        self.tried.add(q)
        self.pending = q
        priority = HIGH if not self.active else LOW
        out.stream.append((q, Neighbor(self.me, priority)))
        self.counters["neighbor_sent"] += 1
        out.log(now, "neighbor_request", peer=q, priority="high" if priority else "low", cycle=self.cycle)

    def _on_neighbor(self, msg: Neighbor, now: float, out: Output) -> None:
        p = msg.sender
        accept = p in self.active or msg.priority == HIGH or len(self.active) < self.active_size
        if accept:
            self._add_active(out, now, p, "neighbor_high" if msg.priority == HIGH else "neighbor_low")
        else:
            self.counters["neighbor_rejected"] += 1
        out.stream.append((p, NeighborReply(self.me, int(accept))))
        out.log(now, "neighbor_answer", peer=p, priority="high" if msg.priority else "low", accepted=accept)
        self._close_if_unused(out, p)

    def _on_neighbor_reply(self, msg: NeighborReply, now: float, out: Output) -> None:
        q = msg.sender
        out.log(now, "neighbor_reply", peer=q, accepted=bool(msg.accepted))
        if q == self.pending:
            self.pending = None
        if msg.accepted:
            if len(self.active) < self.active_size or q in self.active:
                self._add_active(out, now, q, "neighbor")
            else:                       # a late acceptance we no longer have room for: undo it on q's side
                out.stream.append((q, Disconnect(self.me)))
                self._add_passive(out, now, q, "neighbor_late")
        self._close_if_unused(out, q)
        self._repair(out, now)

    def _on_disconnect(self, msg: Disconnect, now: float, out: Output) -> None:
        peer = msg.sender
        if peer in self.active:
            self._remove_active(out, now, peer, "disconnect")
            self._add_passive(out, now, peer, "disconnect")
        self._close_if_unused(out, peer)

    def on_connection(self, peer: int, event: str, now: float, reason: str = "") -> Output:
        out = super().on_connection(peer, event, now, reason)
        self.counters[f"connection_{event}"] += 1
        if event != "failed":
            return out
        if peer in self.active:
            self._remove_active(out, now, peer, "failed")
        if peer in self.passive:
            self.passive.remove(peer)
            self._log_view(out, now, "passive", "remove", peer, "failed")
        if peer == self.pending:
            self.pending = None
        self._repair(out, now)
        return out

    # ---- passive view (§4.4) ------------------------------------------------------------------------------------

    def _shuffle(self, out: Output, now: float) -> None:
        if not self.active:
            return
        target = self.rng.choice(self.active)
        others = [q for q in self.active if q != target]
        ids = (self.me, *self.rng.sample(others, min(self.ka, len(others))),
               *self.rng.sample(self.passive, min(self.kp, len(self.passive))))
        self.shuffle_sent = ids
        out.stream.append((target, Shuffle(self.me, self.me, self.shuffle_ttl, ids)))
        self.counters["shuffle_sent"] += 1
        out.log(now, "shuffle_sent", peer=target, ids=list(ids), cycle=self.cycle)

    def _integrate(self, out: Output, now: float, ids: tuple[int, ...], sent: tuple[int, ...]) -> None:
        for q in ids:
            self._add_passive(out, now, q, "shuffle", evict_first=sent)

    def _on_shuffle(self, msg: Shuffle, now: float, out: Output) -> None:
        ttl = msg.ttl - 1
        onward = [q for q in self.active if q != msg.sender]
        if ttl > 0 and len(self.active) > 1 and onward:
            out.stream.append((self.rng.choice(onward), Shuffle(self.me, msg.origin, ttl, msg.ids)))
            self.counters["shuffle_forwarded"] += 1
            return
        if msg.origin == self.me:
            return
        reply = tuple(self.rng.sample(self.passive, min(len(msg.ids), len(self.passive))))
        out.stream.append((msg.origin, ShuffleReply(self.me, reply)))
        self.counters["shuffle_answered"] += 1
        self._integrate(out, now, msg.ids, reply)
        self._close_if_unused(out, msg.origin)

    def _on_shuffle_reply(self, msg: ShuffleReply, now: float, out: Output) -> None:
        self._integrate(out, now, msg.ids, self.shuffle_sent)
        self._close_if_unused(out, msg.sender)

    # ---- broadcast ----------------------------------------------------------------------------------------------

    def _broadcast(self, out: Output, now: float, seq: int) -> None:
        self.seen.add((self.me, seq))
        self.slot_seen.add(seq)
        msg = Data(self.me, self.me, seq, 0, self.slots.payload)
        out.stream.extend((q, msg) for q in self.active)
        self.counters["sent_data"] += 1
        out.log(now, "data_sent", seq=seq, size=self.slots.size, fanout=len(self.active), cycle=self.cycle)

    def _on_data(self, msg: Data, now: float, out: Output) -> None:
        if not self._first_receipt(msg, now, out):
            return
        fwd = Data(self.me, msg.origin, msg.seq, min(255, msg.hops + 1), msg.payload)
        out.stream.extend((q, fwd) for q in self.active if q != msg.sender and q != msg.origin)

    # ---- dispatch -----------------------------------------------------------------------------------------------

    def receive(self, msg: Any, now: float, via: str = "tcp") -> Output:
        self._check_ids(msg)
        for q in getattr(msg, "ids", ()):
            if not 0 <= q < self.n:
                raise BadMessage(f"id {q} is not a member (n={self.n})")
        out = Output()
        kind = type(msg)
        if kind in (Data, ForwardJoin, Shuffle) and msg.sender not in self.active:
            self.counters["not_neighbour"] += 1
            out.stream.append((msg.sender, Disconnect(self.me)))
            out.log(now, "not_neighbour", peer=msg.sender, type=kind.__name__)
        if kind is Data:
            self._on_data(msg, now, out)
        elif kind is Join:
            self._on_join(msg, now, out)
        elif kind is ForwardJoin:
            self._on_forward_join(msg, now, out)
        elif kind is JoinReply:
            self._add_active(out, now, msg.sender, "join_reply")
        elif kind is Neighbor:
            self._on_neighbor(msg, now, out)
        elif kind is NeighborReply:
            self._on_neighbor_reply(msg, now, out)
        elif kind is Disconnect:
            self._on_disconnect(msg, now, out)
        elif kind is Shuffle:
            self._on_shuffle(msg, now, out)
        elif kind is ShuffleReply:
            self._on_shuffle_reply(msg, now, out)
        if kind in (Data, ForwardJoin, Shuffle) and msg.sender not in self.active:
            self._close_if_unused(out, msg.sender)
        return out

    def next_wakeup(self) -> float:
        return min(self.clock.due, self.slots.due, self.join_due if self.join_due is not None else float("inf"))

    def tick(self, now: float) -> Output:
        out = Output()
        if self.join_due is not None and now >= self.join_due:
            self.join_due = None
            self._join(out, now)
        if now >= self.clock.due:
            skipped = self.clock.advance(now)
            self.cycle += 1 + skipped
            out.log(now, "cycle", cycle=self.cycle, active=sorted(self.active), passive=len(self.passive))
            if skipped:
                out.log(now, "steps_skipped", timer="cycle", missed=skipped)
            if not self.active and not self.passive and self.pending is None and self.join_due is None:
                self._join(out, now)
            else:
                self._repair(out, now)
            self._shuffle(out, now)
        if now >= self.slots.due:
            for seq in self.slots.fire(now, lambda s: s in self.slot_seen):
                self._broadcast(out, now, seq)
        return out

    def snapshot(self) -> dict[str, Any]:
        return {
            "id": self.me,
            "cycle": self.cycle,
            "active": sorted(self.active),
            "passive": sorted(self.passive),
            "active_size": self.active_size,
            "passive_size": self.passive_size,
            "pending": self.pending,
            "counters": dict(sorted(self.counters.items())),
        }


CORE = HyParViewNode
