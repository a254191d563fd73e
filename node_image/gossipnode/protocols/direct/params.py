"""`direct`'s parameters: the `protocol:` section of a node config with `name: direct`."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from gossipnode.model import Strict


class DirectParams(Strict):
    name: Literal["direct"]
    transport: Literal["udp", "tcp", "mcast"] = Field(
        default="udp", description="udp: one unicast copy per member; tcp: one copy per member on a connection "
                                   "per peer; mcast: one IP multicast datagram to the group")
    group: str | None = Field(default=None, description="mcast: the multicast group's name (default: the first)")

    def check(self, cfg: "NodeConfig") -> None:  # noqa: F821 - the node config, checked as a whole
        from .wire import MIN_DATA_SIZE

        if cfg.workload is not None and cfg.workload.size_bytes < MIN_DATA_SIZE:
            raise ValueError(f"workload size_bytes {cfg.workload.size_bytes} is below a direct DATA message's "
                             f"headers ({MIN_DATA_SIZE} bytes)")
        if self.transport == "mcast":
            if not cfg.multicast:
                raise ValueError("transport mcast needs a multicast group in the config (`multicast:`)")
            if self.group is not None:
                cfg.group(self.group)

PARAMS = DirectParams
