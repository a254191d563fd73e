"""One direction of one link, in SI units (pure data).

Every shaper (netem, delayline, tbf) realises a `DirParams`; the experiment file's strings ("30kbit", "5ms",
"0.1%") are parsed into it by `orchestrator.spec`. Units live in the names.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Literal

JitterDist = Literal["uniform", "normal"]

# Ethernet header counted per packet when serialising at the link rate (what netem's `rate` adds as well).
L2_OVERHEAD_BYTES = 14


@dataclass(frozen=True)
class GilbertElliott:
    """Bursty loss, netem's `loss gemodel p r 1-h 1-k`: p = P(good->bad), r = P(bad->good),
    loss_good = 1-k (loss in the good state), loss_bad = 1-h (loss in the bad state)."""

    p: float
    r: float
    loss_bad: float = 1.0
    loss_good: float = 0.0


@dataclass(frozen=True)
class DirParams:
    rate_bps: float | None = None      # None: unlimited (bits/s; fractional only when dilated)
    delay_s: float = 0.0
    jitter_s: float = 0.0
    jitter_dist: JitterDist = "uniform"
    loss: float = 0.0                  # probability in [0, 1]
    gemodel: GilbertElliott | None = None
    queue_pkts: int | None = None      # None: unbounded (the shaper's largest)
    reorder: float = 0.0               # netem-style: probability a packet skips the delay (sent at once)

    def serialisation_s(self, ip_bytes: int) -> float:
        """Time on the wire of one packet of `ip_bytes` (IP header included) at this rate."""
        if not self.rate_bps:
            return 0.0
        return (ip_bytes + L2_OVERHEAD_BYTES) * 8 / self.rate_bps

    def dilated(self, n: float) -> "DirParams":
        """What the shaper realises at time dilation `n` (docs/virtual-time.md): delay and jitter x n, the rate / n
        (so serialisation takes n times longer); loss, queue limits in packets and reordering unchanged."""
        if n == 1:
            return self
        return replace(self, delay_s=self.delay_s * n, jitter_s=self.jitter_s * n,
                       rate_bps=self.rate_bps / n if self.rate_bps else self.rate_bps)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "DirParams":
        d = dict(d)
        ge = d.pop("gemodel", None)
        return cls(**d, gemodel=GilbertElliott(**ge) if ge else None)

    def is_null(self) -> bool:
        return self == DirParams()


CUT = "cut"  # a link direction that drops everything (partition); healing restores its DirParams


@dataclass(frozen=True)
class LinkShaping:
    """Both directions of a link: `down` is parent -> child, `up` is child -> parent."""

    down: DirParams = field(default_factory=DirParams)
    up: DirParams = field(default_factory=DirParams)
