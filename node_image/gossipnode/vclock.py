"""Virtual time (time dilation, docs/virtual-time.md): one virtual second lasts `dilation` real seconds.

A lab runs with a dilation N and an epoch E (a real unix time the orchestrator chose before anything started).
Virtual time is a unix time too, so event logs stay readable and comparable across members:

    virtual(t) = E + (t - E) / N          real(v) = E + (v - E) * N

At N = 1 both are the identity, exactly. Everything the testbed controls waits and stamps in virtual time: the
node's clock, timers and TCP timeouts, the schedule, the delay line (delay x N, rate / N), the probe's
expectation, the run's duration. The kernel does not (pcap timestamps, TCP retransmission timers): the analysis
converts pcap timestamps through the run manifest's `time` ({dilation, epoch}).

Pure, no dependencies: the node and the orchestrator import this one definition.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

MAX_DILATION = 1000.0


@dataclass(frozen=True)
class VirtualClock:
    dilation: float = 1.0
    epoch: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.dilation, (int, float)) or isinstance(self.dilation, bool) \
                or not 0 < self.dilation <= MAX_DILATION:
            raise ValueError(f"dilation {self.dilation!r} is not a number in (0, {MAX_DILATION:g}]")

    @property
    def identity(self) -> bool:
        return self.dilation == 1

    def to_virtual(self, real: float) -> float:
        """A real unix time as virtual time."""
        if self.dilation == 1:
            return real
        return self.epoch + (real - self.epoch) / self.dilation

    def to_real(self, virtual: float) -> float:
        """A virtual unix time as real time."""
        if self.dilation == 1:
            return virtual
        return self.epoch + (virtual - self.epoch) * self.dilation

    def real_s(self, virtual_s: float) -> float:
        """A virtual duration in real seconds."""
        return virtual_s * self.dilation

    def virtual_s(self, real_s: float) -> float:
        """A real duration in virtual seconds."""
        return real_s / self.dilation

    def now(self) -> float:
        """Virtual unix time now."""
        return self.to_virtual(time.time())

    def to_json(self) -> dict:
        return {"dilation": self.dilation, "epoch": self.epoch}
