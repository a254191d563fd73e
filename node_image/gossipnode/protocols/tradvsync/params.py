"""tradvsync's parameters: the `protocol:` section of a node config with `name: tradvsync`."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from gossipnode.model import Strict


class TradVsyncParams(Strict):
    name: Literal["tradvsync"]
    window: int = Field(default=32, ge=1, description="sender buffer: multicasts awaiting every member's "
                                                      "acknowledgement; when full the sender is blocked")
    transport: Literal["udp", "mcast"] = Field(default="udp", description="udp: a unicast copy per member (Figure 1: "
                                                                          "no hardware multicast); mcast: one IP "
                                                                          "multicast datagram")
    group: str | None = Field(default=None, description="mcast: the multicast group's name (default the first)")
    ack_every: int = Field(default=4, ge=1, description="a receiver acknowledges after this many in-order "
                                                        "messages ...")
    ack_delay_s: float = Field(default=0.01, gt=0, description="... or this long after the first unacknowledged one")
    retransmit_s: float = Field(default=0.2, gt=0, description="the sender resends what a member has not "
                                                              "acknowledged after this long without progress")
    nak_s: float = Field(default=0.05, gt=0, description="a receiver asks again for a gap after this long")
    max_retransmit: int = Field(default=32, ge=1, description="messages resent at once to one member")

    def check(self, cfg: "NodeConfig") -> None:  # noqa: F821 - the node config, checked as a whole
        from .wire import MIN_DATA_SIZE

        if cfg.workload is not None and cfg.workload.size_bytes < MIN_DATA_SIZE:
            raise ValueError(f"workload size_bytes {cfg.workload.size_bytes} is below a tradvsync DATA message's "
                             f"headers ({MIN_DATA_SIZE} bytes)")
        if self.transport == "mcast":
            if not cfg.multicast:
                raise ValueError("transport mcast needs a multicast group in the config (`multicast:`)")
            if self.group is not None:
                cfg.group(self.group)


PARAMS = TradVsyncParams
