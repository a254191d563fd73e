"""Clock offsets between the controller and a host, from request/response round trips (NTP's method). Pure.

A sample is (t_send, t_remote, t_recv): the controller's clock when it sent the request, the host's clock when
it answered, the controller's clock when the answer arrived. If the two legs take equally long,
offset = t_remote - (t_send + t_recv) / 2 ("remote time - midpoint"), with an error of at most rtt / 2. The sample
with the smallest round trip bounds the error best, so it is the estimate.
"""
from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Offset:
    offset_s: float        # host clock - controller clock
    rtt_s: float           # round trip of the chosen sample
    error_s: float         # bound on the error of offset_s (rtt / 2)
    samples: int
    spread_s: float        # max - min of the per-sample offsets (how noisy the path was)
    median_offset_s: float

    def to_json(self) -> dict:
        return asdict(self)


def sample_offset(t_send: float, t_remote: float, t_recv: float) -> tuple[float, float]:
    """(offset, rtt) of one sample."""
    if t_recv < t_send:
        raise ValueError("a round trip cannot end before it starts")
    return t_remote - (t_send + t_recv) / 2, t_recv - t_send


def estimate(samples: list[tuple[float, float, float]]) -> Offset:
    if not samples:
        raise ValueError("no clock samples")
    pairs = [sample_offset(*s) for s in samples]
    best = min(pairs, key=lambda p: p[1])
    offs = [p[0] for p in pairs]
    return Offset(offset_s=best[0], rtt_s=best[1], error_s=best[1] / 2, samples=len(samples),
                  spread_s=max(offs) - min(offs), median_offset_s=statistics.median(offs))


def measure(ask, n: int = 15, now=None) -> Offset:
    """`n` round trips: `ask()` returns the remote clock's reading; `now` is this clock (time.time)."""
    import time

    now = now or time.time
    samples = []
    for _ in range(n):
        t1 = now()
        t_remote = ask()
        samples.append((t1, t_remote, now()))
    return estimate(samples)


def to_controller_time(t_host: float, offset_s: float) -> float:
    """A host's timestamp on the controller's clock."""
    return t_host - offset_s
