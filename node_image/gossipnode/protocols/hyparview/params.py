"""HyParView's parameters: the `protocol:` section of a node config with `name: hyparview` (seed 003 §4, §5.1)."""
from __future__ import annotations

import math
from typing import Literal

from pydantic import Field

from gossipnode.model import Strict


def default_active(n: int, c: int = 1) -> int:
    """§4.1: log(n) + c (base 10: 10 000 nodes give 5 with c = 1), at least 1, at most n - 1."""
    return max(1, min(n - 1, math.ceil(math.log10(max(n, 2))) + c))


class HyParViewParams(Strict):
    name: Literal["hyparview"]
    active_size: int | None = Field(default=None, ge=1, le=255,
                                    description="active view size; None: ceil(log10(n)) + c (§4.1)")
    passive_size: int | None = Field(default=None, ge=1, le=255,
                                     description="passive view size; None: k times the active view size")
    c: int = Field(default=1, ge=0, description="§4.1's c")
    k: int = Field(default=6, ge=1, description="§4.1's k")
    arwl: int = Field(default=6, ge=0, le=255, description="active random walk length (FORWARDJOIN time to live)")
    prwl: int = Field(default=3, ge=0, le=255, description="passive random walk length (passive insert at ttl = PRWL)")
    ka: int = Field(default=3, ge=0, le=100, description="active view members in a SHUFFLE")
    kp: int = Field(default=4, ge=0, le=100, description="passive view members in a SHUFFLE")
    shuffle_ttl: int | None = Field(default=None, ge=1, le=255, description="SHUFFLE random walk; None: arwl")
    cycle_s: float = Field(default=1.0, gt=0, description="the membership cycle: one SHUFFLE per member and cycle")
    contact: int = Field(default=0, ge=0, description="the contact node every member JOINs through")
    join_interval_s: float = Field(default=0.0, ge=0, description=(
        "0: every member JOINs at its start (the testbed's common start: all at once); > 0: member i JOINs "
        "i x this after its start, one by one in id order (the paper's PeerSim joins)"))
    backups: int = Field(default=2, ge=0, le=10, description="broadcast slots: stand-in senders (peerview.broadcast)")
    backup_delay_s: float = Field(default=0.5, gt=0, description="delay of each stand-in sender")

    @property
    def uses_tcp(self) -> bool:     # the runtime opens a TCP listener (active view links are TCP connections)
        return True

    def sizes(self, n: int) -> tuple[int, int]:
        active = self.active_size if self.active_size is not None else default_active(n, self.c)
        passive = self.passive_size if self.passive_size is not None else max(1, min(255, self.k * active))
        return active, passive

    def check(self, cfg: "NodeConfig") -> None:  # noqa: F821 - the node config, checked as a whole
        from .wire import MIN_DATA_SIZE

        active, _ = self.sizes(cfg.n)
        if cfg.n > 1 and active > cfg.n - 1:
            raise ValueError(f"active_size {active} is larger than the group allows ({cfg.n} members: at most "
                             f"{cfg.n - 1})")
        if self.contact >= cfg.n:
            raise ValueError(f"contact {self.contact} is not a member id (n = {cfg.n})")
        if self.prwl > self.arwl:
            raise ValueError(f"prwl {self.prwl} exceeds arwl {self.arwl}: no walk would reach it")
        if cfg.workload is not None and cfg.workload.size_bytes < MIN_DATA_SIZE:
            raise ValueError(f"workload size_bytes {cfg.workload.size_bytes} is below a DATA message's headers "
                             f"({MIN_DATA_SIZE} bytes)")

PARAMS = HyParViewParams
