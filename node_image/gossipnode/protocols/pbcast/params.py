"""pbcast's parameters: the `protocol:` section of a node config with `name: pbcast`.

Defaults: one anti-entropy round every 100 ms with one digest to one random member (Birman et al., "Bimodal
Multicast", TOCS 1999, whose §3 seed 001 summarises; seed 001 itself gives no values: its Table 1 lists the
back-of-the-envelope analysis' symbols n, s, T, mu, p_ml, B), garbage collection after ceil(C * log2 n) rounds
with C = 2, push-pull repair, first phase by IP multicast."""
from __future__ import annotations

import math
from typing import Literal

from pydantic import Field

from gossipnode.model import Strict


class PbcastParams(Strict):
    name: Literal["pbcast"]
    round_s: float = Field(default=0.1, gt=0, description="anti-entropy round length (each member's own clock, "
                                                          "not synchronised: a random point inside each round)")
    fanout: int = Field(default=1, ge=1, description="members sent a digest each round, chosen at random")
    gc_c: float = Field(default=2.0, gt=0, description="C: a message is garbage collected ceil(C log2 n) rounds "
                                                       "after it arrived")
    mode: Literal["push", "pull", "push_pull"] = Field(
        default="push_pull", description="pull: solicit what a digest lists and we lack; push: send what we hold "
                                         "and a digest lacks (young messages only); push_pull: both (§3)")
    first_phase: Literal["mcast", "tree", "none"] = Field(
        default="mcast", description="mcast: one IP multicast datagram (hardware multicast); tree: unicast down a "
                                     "tree of `tree_fanout` rooted at the sender (the paper's unicast fallback); "
                                     "none: anti-entropy only")
    group: str | None = Field(default=None, description="mcast: the multicast group's name (default the first)")
    tree_fanout: int = Field(default=3, ge=1, description="tree: children per member of the unicast tree")
    fifo: bool = Field(default=False, description="deliver to the application in FIFO order per sender (held "
                                                  "until the gap is repaired) instead of on arrival")
    max_repairs: int = Field(default=64, ge=1, description="retransmissions sent in answer to one digest or "
                                                           "solicitation")
    max_ranges: int = Field(default=500, ge=1, le=6000, description="ranges in one digest (the newest kept)")

    def gc_rounds(self, n: int) -> int:
        return max(1, math.ceil(self.gc_c * math.log2(max(2, n))))

    def check(self, cfg: "NodeConfig") -> None:  # noqa: F821 - the node config, checked as a whole
        from .wire import MIN_DATA_SIZE

        if cfg.workload is not None and cfg.workload.size_bytes < MIN_DATA_SIZE:
            raise ValueError(f"workload size_bytes {cfg.workload.size_bytes} is below a pbcast DATA message's "
                             f"headers ({MIN_DATA_SIZE} bytes)")
        if self.first_phase == "mcast":
            if not cfg.multicast:
                raise ValueError("first_phase mcast needs a multicast group in the config (`multicast:`)")
            if self.group is not None:
                cfg.group(self.group)


PARAMS = PbcastParams
