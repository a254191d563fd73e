"""Figure 2 of the GSGC paper: one member's round state (r, M, W) at one gossip level.

Pure: no time source, no randomness, no I/O. The stability array S is kept by the caller, because with local
gossip (§5) the array a local round constructs is not the global S.

Where this follows the paper's intent rather than its pseudo-code (each is tested):
- "W_i > W" / "W_i < W" compare sets of members heard from: a message is redundant when its W is a subset
  of ours (it cannot lower M), more up-to-date when ours is a proper subset of its W (its M is then already
  below ours). The literal element-wise "<" on bitmaps can never hold, since W_i[i] = 1.
- A member that enters a round by adopting a message (the next-round branch) adds its own R and sets its own
  W bit. The pseudo-code adopts M and W only; the member's bit would then never be set and the round could not
  complete. Likewise a member that has nothing to contribute yet (an SC before its first local round) merges
  what it hears and contributes later.
- A message more than one round ahead (the pseudo-code's "error") is adopted like a next-round message: it
  happens when a member restarts, or rejoins after others had declared it failed.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from .wire import MAX_SEQ


class Branch(Enum):
    REDUNDANT = "redundant"
    MORE_UP_TO_DATE = "more_up_to_date"
    MERGE = "merge"
    NEXT_ROUND = "next_round"
    JUMP = "jump"
    OLD_ROUND = "old_round"


def array_min(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...]:
    return tuple(map(min, a, b))


def array_max(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...]:
    return tuple(map(max, a, b))


@dataclass(frozen=True)
class Completion:
    """A round this member left: constructed (W covered everyone required) or ended by a later round's news."""

    round: int
    via: str  # "constructed" | "next_round" | "jump" | "multicast"
    array: tuple[int, ...] | None  # M at construction; None when the round ended otherwise
    steps: int
    started: float


class RoundState:
    def __init__(self, own_bit: int, m: int, now: float) -> None:
        self.own = 1 << own_bit
        self.m = m
        self.round = 0
        self.started = now
        self.steps = 0  # gossip steps this member took in the current round
        self._reset()

    def _reset(self) -> None:
        self.min_so_far: tuple[int, ...] = (MAX_SEQ,) * self.m
        self.heard = 0

    def _enter(self, rnd: int, now: float, via: str, array: tuple[int, ...] | None) -> Completion:
        done = Completion(self.round, via, array, self.steps, self.started)
        self.round, self.started, self.steps = rnd, now, 0
        self._reset()
        return done

    def contribute(self, array: Sequence[int]) -> bool:
        """Add this member's own array (R, or an SC's local stability array) once per round."""
        if self.heard & self.own:
            return False
        self.min_so_far = array_min(self.min_so_far, array)
        self.heard |= self.own
        return True

    def receive(
        self, rnd: int, min_so_far: tuple[int, ...], heard: int, now: float
    ) -> tuple[Branch, Completion | None]:
        """Apply one gossip (M, W, r). Returns the branch taken and, when the message ended our round, that round."""
        if rnd < self.round:
            return Branch.OLD_ROUND, None
        if rnd == self.round:
            if heard & ~self.heard == 0:
                return Branch.REDUNDANT, None
            if self.heard & ~heard == 0:
                self.min_so_far, self.heard = min_so_far, heard
                return Branch.MORE_UP_TO_DATE, None
            self.min_so_far = array_min(self.min_so_far, min_so_far)
            self.heard |= heard
            return Branch.MERGE, None
        branch = Branch.NEXT_ROUND if rnd == self.round + 1 else Branch.JUMP
        done = self._enter(rnd, now, branch.value, None)
        self.min_so_far, self.heard = min_so_far, heard
        return branch, done

    def complete_if_heard(self, required: int, now: float) -> Completion | None:
        """Construct the stability array when W covers every required (live) member, and start the next round."""
        if required & ~self.heard:
            return None
        return self._enter(self.round + 1, now, "constructed", self.min_so_far)

    def end_round(self, completed: int, now: float, via: str = "multicast") -> Completion | None:
        """Someone else constructed the array of round `completed` (a STABLE, or with local gossip a
        LOCAL_STABLE): move past it if we are not yet."""
        if completed < self.round:
            return None
        return self._enter(completed + 1, now, via, None)
