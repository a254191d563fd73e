"""Data messages, shared by every protocol that carries them. Pure.

- `DataSource`: a sender's side of the workload (rate, size, per-sender sequence numbers from 1, start/stop).
- `Receipts`: what a member has received from one sender (R: 1..r all arrived; what is ahead of the gap).
- `MessageBuffer`: what a member keeps for retransmission until it may be discarded.
- `nak_ranges` / `serve_nak`: NAK repair (ask for the gaps a later arrival revealed; answer from the buffer).

The events every protocol logs for its data (so the generic analysis measures delivery and latency for all):
`data_sent {seq, size, ...}` at the origin and `data_received {origin, seq, sender, repair, ...}` at each member
on first receipt.
"""
from __future__ import annotations

import math
import random
from collections.abc import Iterator
from typing import TYPE_CHECKING

from .clocks import RateClock

if TYPE_CHECKING:
    from .config import Workload


class DataSource:
    """The workload of one sender: fixed-rate sends in the configured window, sequence numbers from 1, a payload
    of `size_bytes - overhead` zero bytes (`overhead`: the protocol's headers before the payload)."""

    def __init__(self, workload: Workload, overhead: int, now: float, rng: random.Random) -> None:
        stop = now + workload.stop_s if workload.stop_s is not None else math.inf
        self.rng = rng
        self.clock = RateClock(1.0 / workload.rate_per_s, now + workload.start_s, stop, rng)
        self.payload = bytes(max(0, workload.size_bytes - overhead))
        self.size = overhead + len(self.payload)
        self.seq = 0

    @property
    def due(self) -> float:
        return self.clock.due

    def next(self, now: float, floor: int = 0) -> tuple[int, int]:
        """The send due now: (its seq, sends skipped because the timer fired late). `floor`: a seq already known
        to the group (a restarted sender continues above what its group holds as stable)."""
        self.seq = max(self.seq, floor) + 1
        return self.seq, self.clock.advance(now)

    def set_active(self, active: bool, now: float) -> str | None:
        """Start (until stopped, whatever `stop_s` said) or stop sending now; the event to log, if anything
        changed."""
        if active and self.clock.due == math.inf:
            self.clock = RateClock(self.clock.interval, now, math.inf, self.rng)
            return "workload_started"
        if not active and self.clock.due != math.inf:
            self.clock.due = math.inf
            return "workload_stopped"
        return None


class Receipts:
    """One sender's sequence space at one member. `r` is R[j]: every seq in 1..r has arrived (0: none yet)."""

    def __init__(self) -> None:
        self.r = 0
        self.ahead: set[int] = set()  # arrived, above r + 1

    def add(self, seq: int) -> bool:
        """Record an arrival; False if it is a duplicate (or was skipped as stable)."""
        if seq <= self.r or seq in self.ahead:
            return False
        if seq == self.r + 1:
            self.r = seq
            self._advance()
        else:
            self.ahead.add(seq)
        return True

    def _advance(self) -> None:
        while self.r + 1 in self.ahead:
            self.r += 1
            self.ahead.remove(self.r)

    def skip_to(self, seq: int) -> int:
        """Treat 1..seq as received (they are stable elsewhere and can no longer be repaired).
        Returns how many of them had not arrived."""
        if seq <= self.r:
            return 0
        missing = seq - self.r - sum(1 for s in self.ahead if s <= seq)
        self.ahead = {s for s in self.ahead if s > seq}
        self.r = seq
        self._advance()
        return missing

    def missing(self, limit: int) -> list[tuple[int, int]]:
        """Up to `limit` inclusive ranges of seqs known to exist (something later arrived) that have not arrived."""
        ranges: list[tuple[int, int]] = []
        low = self.r + 1
        for s in sorted(self.ahead):
            if s > low:
                ranges.append((low, s - 1))
                if len(ranges) == limit:
                    break
            low = s + 1
        return ranges


class MessageBuffer:
    """Data messages kept for retransmission until they are stable: origin -> seq -> payload."""

    def __init__(self, origins: list[int]) -> None:
        self._by_origin: dict[int, dict[int, bytes]] = {o: {} for o in origins}
        self.count = 0
        self.bytes = 0

    def put(self, origin: int, seq: int, payload: bytes) -> None:
        held = self._by_origin[origin]
        if seq not in held:
            held[seq] = payload
            self.count += 1
            self.bytes += len(payload)

    def held(self, origin: int, first: int, last: int) -> Iterator[tuple[int, bytes]]:
        """Buffered (seq, payload) of `origin` within first..last, in seq order."""
        held = self._by_origin[origin]
        if last - first + 1 <= len(held):
            for seq in range(first, last + 1):
                if seq in held:
                    yield seq, held[seq]
        else:
            for seq in sorted(s for s in held if first <= s <= last):
                yield seq, held[seq]

    def discard_through(self, origin: int, seq: int) -> int:
        """Drop every message of `origin` with a sequence number <= seq; returns how many."""
        held = self._by_origin[origin]
        stale = [s for s in held if s <= seq]
        for s in stale:
            self.bytes -= len(held.pop(s))
        self.count -= len(stale)
        return len(stale)


def nak_ranges(receipts: Receipts, limit: int) -> list[tuple[int, int]]:
    """The gaps to ask a sender (or a peer) for: up to `limit` inclusive ranges."""
    return receipts.missing(limit)


def serve_nak(buffer: MessageBuffer, origin: int, ranges: tuple[tuple[int, int], ...],
              limit: int) -> list[tuple[int, bytes]]:
    """What to retransmit in answer to a NAK: the buffered (seq, payload) in its ranges, at most `limit`."""
    found: list[tuple[int, bytes]] = []
    for first, last in ranges:
        for item in buffer.held(origin, first, last):
            found.append(item)
            if len(found) == limit:
                return found
    return found
