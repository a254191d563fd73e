"""Figure 3 of the GSGC paper: gossip-style failure detection with the "Live" array L. Pure.

Each step a member adds 1 to L[j] for every other member j it watches; hearing anything from j sets L[j] = 0;
a received L' is merged element-wise with min. L[j] reaching K declares j failed; reaching `suspect_k` (below K)
marks it suspected. Both are lifted only when L[j] falls back to K // 2 or less (hysteresis): a lagging
neighbour's count one step behind does not undo a declaration, but fresh news does -- j itself was heard from
(a paused member resumed, a crashed one restarted) or a merge shows j was heard from recently (the declaration
was premature). Entries are saturating bytes; members outside `scope` (with local gossip, members of other local
groups) stay at UNKNOWN, which a min-merge never takes.

`grounded_only` (rejoin, node_image/README.md): Figure 3 starts every L at 0, i.e. "heard from everyone just
now". That is true when the whole group starts together, false for a member that starts late (a restart, a
join): its zeros would readmit members that died while it was away. With `grounded_only` an entry is *grounded*
once it carries real news (j was heard from, or a merge took a lower count from someone else); the Live array
sent on the wire (`wire_live`) carries ungrounded entries as UNKNOWN (no information), so a member only passes
on what it or someone else observed. Locally the count still rises from 0, so a member never heard of is
declared K steps after the start, as before.
"""
from __future__ import annotations

from collections.abc import Iterable

UNKNOWN = 0xFF


class FailureDetector:
    def __init__(self, me: int, n: int, fail_k: int, suspect_k: int, scope: Iterable[int],
                 grounded_only: bool = False) -> None:
        self.me = me
        self.grounded_only = grounded_only
        self.fail_k = fail_k
        self.suspect_k = suspect_k
        self.low = fail_k // 2
        self.scope = sorted(set(scope) - {me})
        self._in_scope = set(self.scope)
        self.live = bytearray([UNKNOWN] * n)
        for j in self.scope:
            self.live[j] = 0
        self.live[me] = 0
        self.suspected: set[int] = set()
        self.failed: set[int] = set()
        self.grounded = bytearray(n)  # 1: the entry carries real news (only kept with grounded_only)
        self.grounded[me] = 1

    def _set(self, j: int, value: int, out: list[tuple[str, int, int]]) -> None:
        self.live[j] = value
        if value >= self.fail_k:
            if j not in self.failed:
                self.failed.add(j)
                self.suspected.discard(j)
                out.append(("declared_failed", j, value))
        elif value >= self.suspect_k:
            if j not in self.suspected and j not in self.failed:
                self.suspected.add(j)
                out.append(("suspected", j, value))
        elif value <= self.low:
            if j in self.failed:
                self.failed.discard(j)
                out.append(("readmitted", j, value))
            elif j in self.suspected:
                self.suspected.discard(j)
                out.append(("suspicion_cleared", j, value))

    def step(self) -> list[tuple[str, int, int]]:
        """One gossip step: L[j] += 1 for every watched j. Returns (event, member, L[j]) transitions."""
        out: list[tuple[str, int, int]] = []
        live, suspect_k = self.live, self.suspect_k
        for j in self.scope:
            value = min(live[j] + 1, UNKNOWN - 1)
            if value >= suspect_k:  # below it, a rising count changes no state
                self._set(j, value, out)
            else:
                live[j] = value
        return out

    def heard_from(self, j: int) -> list[tuple[str, int, int]]:
        """Any valid message from j: L[j] = 0."""
        out: list[tuple[str, int, int]] = []
        if j in self._in_scope:
            self.grounded[j] = 1
            self._set(j, 0, out)
        return out

    def merge(self, other: bytes) -> list[tuple[str, int, int]]:
        """L = ArrayMin(L, L') over watched members."""
        out: list[tuple[str, int, int]] = []
        live = self.live
        for j in self.scope:
            if other[j] < live[j]:
                self.grounded[j] = 1
                self._set(j, other[j], out)
        return out

    def wire_live(self) -> bytes:
        """L as sent in a LIVE message: with `grounded_only`, entries with no real news are UNKNOWN."""
        if not self.grounded_only:
            return bytes(self.live)
        return bytes(v if g else UNKNOWN for v, g in zip(self.live, self.grounded))

    def is_failed(self, j: int) -> bool:
        return j in self.failed
