"""The broadcast workload of seed 003: messages sent "from random correct members".

The experiment's `workload` (rate_per_s, size_bytes, start_s, stop_s) is read as the *group's* broadcast rate:
broadcast slot i (i = 1, 2, ...) falls every 1/rate_per_s seconds from each member's start + start_s, and its
designated sender is drawn from `senders` by a sequence every member computes alike
(`random.Random("<protocol>/<seed>/slot/<i>")`). Only the designated sender sends slot i, as data message
(origin = itself, seq = i), so seqs are global slot numbers and (origin, seq) names a broadcast everywhere.

A crashed designated sender sends nothing: with `backups` > 0 the next `backups` members of the slot's draw
(a seeded permutation of the senders) stand in, the k-th one `k * backup_delay_s` later, each only if it has not
delivered slot i by then (they do not know who crashed; a backup that fires while the slot is still on its way
sends a second copy under its own origin: the slot's second broadcast, measured as such).
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

from gossipnode.clocks import RateClock
from gossipnode.protocols.base import BadMessage, Output


@dataclass
class Slot:
    seq: int
    rank: int          # 0: the designated sender; k: the k-th backup


class BroadcastSlots:
    def __init__(self, protocol: str, cfg, overhead: int, now: float, rng: random.Random,
                 backups: int = 0, backup_delay_s: float = 0.5) -> None:
        wl = cfg.workload
        self.protocol = protocol
        self.seed = cfg.seed
        self.me = cfg.id
        self.senders = sorted(cfg.senders)
        self.backups = min(backups, max(0, len(self.senders) - 1))
        self.backup_delay = backup_delay_s
        self.active = wl is not None and self.me in self.senders
        self.rng = rng
        self.clock = None
        self.payload = b""
        self.size = overhead
        self.slot = 0
        self.waiting: list[tuple[float, int]] = []      # (due, seq) backup sends this member may have to make
        if wl is not None and self.active:
            stop = now + wl.stop_s if wl.stop_s is not None else math.inf
            self.clock = RateClock(1.0 / wl.rate_per_s, now + wl.start_s, stop, rng)
            self.payload = bytes(max(0, wl.size_bytes - overhead))
            self.size = overhead + len(self.payload)

    def rank_of(self, seq: int) -> int | None:
        """This member's rank in slot `seq`'s draw (0: designated), None beyond the backups."""
        order = random.Random(f"{self.protocol}/{self.seed}/slot/{seq}").sample(self.senders, self.backups + 1)
        return order.index(self.me) if self.me in order else None

    @property
    def due(self) -> float:
        due = self.clock.due if self.clock is not None else math.inf
        return min([due] + [d for d, _ in self.waiting[:1]])

    def fire(self, now: float, delivered) -> list[int]:
        """The slots this member sends now (`delivered(seq)`: it already has that broadcast)."""
        sends: list[int] = []
        while self.waiting and self.waiting[0][0] <= now:
            _, seq = self.waiting.pop(0)
            if not delivered(seq):
                sends.append(seq)
        if self.clock is not None and self.clock.due <= now:
            skipped = self.clock.advance(now)
            self.slot += skipped + 1
            rank = self.rank_of(self.slot)
            if rank == 0:
                sends.append(self.slot)
            elif rank is not None:
                self.waiting.append((now + rank * self.backup_delay, self.slot))
                self.waiting.sort()
        return sends

    def set_active(self, active: bool, now: float) -> str | None:
        if self.clock is None:
            raise ValueError(f"member {self.me} is not a sender")
        if active and self.clock.due == math.inf:
            self.clock = RateClock(self.clock.interval, now, math.inf, self.rng)
            return "workload_started"
        if not active and self.clock.due != math.inf:
            self.clock.due = math.inf
            return "workload_stopped"
        return None


class PeerBroadcaster:
    """What HyParView, Cyclon and Scamp share as broadcast members: the member-id check of every message, the
    first-receipt bookkeeping of a data message (duplicate suppression, counters, events) and the workload
    switch. The core provides `me`, `n`, `seen`, `slot_seen`, `counters`, `cycle`, `slots` and `DATA_VIA` (the
    transport its data travels on); it forwards a first receipt itself (flood or gossip)."""

    DATA_VIA = "udp"

    def _check_ids(self, msg) -> None:
        if not 0 <= msg.sender < self.n or msg.sender == self.me:
            raise BadMessage(f"sender {msg.sender} is not another member (n={self.n}, me={self.me})")
        for field in ("new", "origin"):
            v = getattr(msg, field, None)
            if v is not None and not 0 <= v < self.n:
                raise BadMessage(f"{field} {v} is not a member (n={self.n})")

    def _first_receipt(self, msg, now: float, out) -> bool:
        """Record a data message; False (a duplicate, counted and logged) if it was seen before."""
        key = (msg.origin, msg.seq)
        if key in self.seen:
            self.counters["data_duplicate"] += 1
            out.log(now, "data_duplicate", origin=msg.origin, seq=msg.seq, sender=msg.sender)
            return False
        self.seen.add(key)
        self.slot_seen.add(msg.seq)
        self.counters["recv_data"] += 1
        out.log(now, "data_received", origin=msg.origin, seq=msg.seq, sender=msg.sender, repair=False,
                via=self.DATA_VIA, hops=msg.hops + 1, cycle=self.cycle)
        return True

    def set_workload(self, active: bool, now: float) -> Output:
        out = Output()
        event = self.slots.set_active(active, now)
        if event is not None:
            out.log(now, event)
        return out
