"""The GSGC paper's adaptive method (§4.3, Figures 10 and 11), pure: `f` is injected.

Part I (Figure 10) narrows [a0, b0] by the golden ratio until it is at most g wide; s is the middle of the last
interval. Part II (Figure 11) grows a window [s1, s2] around s by doubling steps of p, then refines with halving
steps, keeping every x whose f(x) is within e of f(s). The paper states e as a fraction ("TPR in the range from
(1 - e) f(s) to (1 + e) f(s)") and writes the test as |f(x) - f(s)| < e; here the test is |f(x) - f(s)| < e·f(s).

Followed literally, with two guards the figures lack: every x is rounded to `resolution` (so the golden-ratio
points the paper re-measures, e.g. a + 0.382·0.618·d vs a + 0.618·d, hit the same measurement), and Part II never
goes below max(a0, resolution) nor above `upper` (default b0), where the figure would search on (or below 0).
Each distinct x is evaluated once (f is memoised), so "iterations" and "evaluations" differ; both are reported.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

GOLD_LO, GOLD_HI = 0.382, 0.618


@dataclass
class Evaluation:
    x: float
    fx: float
    phase: str      # "part1", "s", "part2-lower", "part2-upper"
    order: int      # evaluation order (0-based)


@dataclass
class TuneResult:
    s: float
    fs: float
    s1: float
    s2: float
    part1_iterations: int
    part2_iterations: int
    evaluations: list[Evaluation] = field(default_factory=list)
    lower_clamped: bool = False   # Part II stopped at the lower guard, not because f left the band
    upper_clamped: bool = False

    def to_json(self) -> dict:
        """JSON-ready; an infinite f (no round completed at that x) is null."""
        return {"s": self.s, "f_s": finite(self.fs), "window": [self.s1, self.s2],
                "part1_iterations": self.part1_iterations, "part2_iterations": self.part2_iterations,
                "lower_clamped": self.lower_clamped, "upper_clamped": self.upper_clamped,
                "evaluations": [{**vars(e), "fx": finite(e.fx)} for e in self.evaluations]}


def finite(v: float) -> float | None:
    return v if math.isfinite(v) else None


class _Memo:
    def __init__(self, f: Callable[[float], float], resolution: float):
        self.f, self.res = f, resolution
        self.seen: dict[float, float] = {}
        self.log: list[Evaluation] = []

    def r(self, x: float) -> float:
        return round(round(x / self.res) * self.res, 9)

    def __call__(self, x: float, phase: str) -> float:
        x = self.r(x)
        if x not in self.seen:
            self.seen[x] = float(self.f(x))
            self.log.append(Evaluation(x, self.seen[x], phase, len(self.log)))
        return self.seen[x]


def golden_section(f: Callable[[float], float], a0: float, b0: float, g: float,
                   memo: _Memo | None = None) -> tuple[float, int]:
    """Figure 10. Returns (s, iterations)."""
    if not b0 > a0:
        raise ValueError(f"the search interval [{a0}, {b0}] is empty")
    if g <= 0:
        raise ValueError("g (the stopping width) must be positive")
    fm = memo or _Memo(f, 1e-9)
    a, b, it = a0, b0, 0
    while b - a > g:
        d = b - a
        m1, m2 = a + GOLD_LO * d, a + GOLD_HI * d
        if fm(m1, "part1") >= fm(m2, "part1"):
            a = m1
        else:
            b = m2
        it += 1
    return fm.r((a + b) / 2), it


def window(f: Callable[[float], float], s: float, fs: float, e: float, p: float, lower: float, upper: float,
           memo: _Memo | None = None) -> tuple[float, float, int, bool, bool]:
    """Figure 11. Returns (s1, s2, iterations, lower_clamped, upper_clamped)."""
    if p <= 0 or e <= 0:
        raise ValueError("p and e must be positive")
    fm = memo or _Memo(f, 1e-9)
    band = e * abs(fs)
    it = 0

    def inside(x: float, phase: str) -> bool:
        return abs(fm(x, phase) - fs) < band

    def edge(sign: int, bound: float, phase: str) -> tuple[float, bool]:
        """Walk from s in direction `sign` by doubling steps of p while f stays inside the band, then halve the
        steps back down; returns (the edge, whether `bound` stopped the walk)."""
        nonlocal it

        def beyond(x: float) -> bool:
            return x < bound if sign < 0 else x > bound

        x0, k, clamped = s, 1, False
        while True:
            x = x0 + sign * k * p
            if beyond(x):
                clamped = True
                break
            it += 1
            if not inside(x, phase):
                break
            x0, k = x, 2 * k
        k //= 2
        while k >= 1 and not beyond(x0 + sign * k * p):
            it += 1
            if not inside(x0 + sign * k * p, phase):
                break
            x0, k = x0 + sign * k * p, k // 2
        return x0, clamped

    s1, lo_clamp = edge(-1, lower, "part2-lower")
    s2, hi_clamp = edge(+1, upper, "part2-upper")
    return fm.r(s1), fm.r(s2), it, lo_clamp, hi_clamp


def tune(f: Callable[[float], float], a0: float, b0: float, g: float, e: float, p: float,
         resolution: float = 0.01, upper: float | None = None) -> TuneResult:
    """Part I then Part II. `f(x)` is the measured mean TPR at step interval x."""
    memo = _Memo(f, resolution)
    s, it1 = golden_section(f, a0, b0, g, memo)
    fs = memo(s, "s")
    lower = max(a0, resolution)
    s1, s2, it2, lc, uc = window(f, s, fs, e, p, lower, b0 if upper is None else upper, memo)
    return TuneResult(s, fs, s1, s2, it1, it2, memo.log, lc, uc)
