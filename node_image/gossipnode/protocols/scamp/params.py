"""Scamp's parameters: the `protocol:` section of a node config with `name: scamp` (seed 003 §5.1: c = 4)."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from gossipnode.model import Strict


class ScampParams(Strict):
    name: Literal["scamp"]
    c: int = Field(default=4, ge=0, le=64, description="extra copies of a new subscription the contact forwards")
    fanout: int = Field(default=4, ge=1, le=255, description="gossip broadcast: targets per first receipt")
    indirection_ttl: int = Field(default=5, ge=0, le=255, description="a new subscription's random walk before "
                                                                       "it reaches its contact (indirection)")
    forward_limit: int = Field(default=50, ge=1, le=255, description="hops after which a forwarded subscription "
                                                                     "is kept regardless (bounds the walk)")
    lease_s: float = Field(default=60.0, gt=0, description="a subscription's lease: entries expire after it, and "
                                                          "every member re-subscribes once per lease")
    cycle_s: float = Field(default=1.0, gt=0, description="the periodic step (lease checks, the cycle counter)")
    contact: int = Field(default=0, ge=0, description="the member every new member subscribes through (joins at "
                                                      "once; with join_interval > 0 a random earlier member is)")
    join_interval_s: float = Field(default=0.0, ge=0, description=(
        "0: every member subscribes at its start through `contact` (the testbed's common start: all at once); > 0: "
        "member i subscribes i x this after its start, one by one in id order, through a random member already in "
        "the overlay (an id below its own): seed 003 §5, 'Scamp was initiated by using a random node already in "
        "the overlay as the contact point'"))
    backups: int = Field(default=2, ge=0, le=10, description="broadcast slots: stand-in senders (peerview.broadcast)")
    backup_delay_s: float = Field(default=0.5, gt=0, description="delay of each stand-in sender")

    def check(self, cfg: "NodeConfig") -> None:  # noqa: F821
        from .wire import MIN_DATA_SIZE

        if self.contact >= cfg.n:
            raise ValueError(f"contact {self.contact} is not a member id (n = {cfg.n})")
        if cfg.workload is not None and cfg.workload.size_bytes < MIN_DATA_SIZE:
            raise ValueError(f"workload size_bytes {cfg.workload.size_bytes} is below a DATA message's headers "
                             f"({MIN_DATA_SIZE} bytes)")

PARAMS = ScampParams
