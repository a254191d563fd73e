"""Cyclon's parameters: the `protocol:` section of a node config with `name: cyclon` (seed 003 §5.1)."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from gossipnode.model import Strict


class CyclonParams(Strict):
    name: Literal["cyclon"]
    view_size: int = Field(default=35, ge=1, le=255, description="partial view entries (capped at n - 1)")
    shuffle_length: int = Field(default=14, ge=1, le=255, description="entries exchanged in a shuffle (l)")
    walk_ttl: int = Field(default=5, ge=0, le=255, description="time to live of a join's random walks")
    fanout: int = Field(default=4, ge=1, le=255, description="gossip broadcast: targets per first receipt")
    cycle_s: float = Field(default=1.0, gt=0, description="the membership cycle: one shuffle per member and cycle")
    contact: int = Field(default=0, ge=0, description="the introducer every member joins through")
    backups: int = Field(default=2, ge=0, le=10, description="broadcast slots: stand-in senders (peerview.broadcast)")
    backup_delay_s: float = Field(default=0.5, gt=0, description="delay of each stand-in sender")

    def check(self, cfg: "NodeConfig") -> None:  # noqa: F821
        from .wire import MIN_DATA_SIZE

        if self.contact >= cfg.n:
            raise ValueError(f"contact {self.contact} is not a member id (n = {cfg.n})")
        if cfg.n > 1 and self.view_size > cfg.n - 1:
            raise ValueError(f"view_size {self.view_size} is larger than the group allows ({cfg.n} members: at "
                             f"most {cfg.n - 1})")
        if self.shuffle_length > self.view_size:
            raise ValueError(f"shuffle_length {self.shuffle_length} exceeds view_size {self.view_size}")
        if cfg.workload is not None and cfg.workload.size_bytes < MIN_DATA_SIZE:
            raise ValueError(f"workload size_bytes {cfg.workload.size_bytes} is below a DATA message's headers "
                             f"({MIN_DATA_SIZE} bytes)")

PARAMS = CyclonParams
