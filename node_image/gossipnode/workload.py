"""Data messages: what a member has received from each sender (R) and what it buffers until stable. Pure."""
from __future__ import annotations

from collections.abc import Iterator


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
