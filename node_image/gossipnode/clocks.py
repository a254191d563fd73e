"""Timers every protocol needs, pure: a gossip step clock and a fixed-rate send clock. Both skip, never burst.

A clock only computes due times; the core asks `due` and calls `advance(now)` when it fired. A firing more than
an interval late (the process was stopped by SIGSTOP, or starved) skips the missed firings and says how many.
"""
from __future__ import annotations

import math
import random


class StepClock:
    """Steps of `interval` seconds from `origin`; step k fires once at a random point inside [k, k+1): a new point
    every step (`fixed_phase` false, the default), or the same offset in every step, drawn once (`fixed_phase`
    true: step k fires at origin + (k + phase) * interval). The first draw is the same in both, and a fixed phase
    draws nothing after it."""

    def __init__(self, interval: float, origin: float, rng: random.Random, fixed_phase: bool = False) -> None:
        self.interval = interval
        self.origin = origin
        self.rng = rng
        self.index = 0
        self.phase: float | None = rng.random()
        self.due = origin + self.phase * interval
        if not fixed_phase:
            self.phase = None

    def advance(self, now: float) -> int:
        """The step at `due` has fired at `now`: schedule the next one. Returns how many steps were skipped.

        A firing more than a whole interval late (the process was stopped or starved) stands for the step in
        progress; the steps in between are skipped."""
        if now - self.due > self.interval:
            nxt = int((now - self.origin) // self.interval) + 1
        else:
            nxt = self.index + 1
        skipped = nxt - self.index - 1
        self.index = nxt
        offset = self.rng.random() if self.phase is None else self.phase
        self.due = self.origin + (nxt + offset) * self.interval
        return skipped


class RateClock:
    """A fixed-rate send schedule in [start, stop), first send at a random phase within one interval."""

    def __init__(self, interval: float, start: float, stop: float, rng: random.Random) -> None:
        self.interval = interval
        self.stop = stop
        self.due = start + rng.random() * interval
        if self.due >= stop:
            self.due = math.inf

    def advance(self, now: float) -> int:
        nxt = self.due + self.interval
        skipped = 0
        if nxt <= now:
            skipped = int((now - nxt) // self.interval) + 1
            nxt += skipped * self.interval
        self.due = nxt if nxt < self.stop else math.inf
        return skipped
