"""vsync's parameters: the `protocol:` section of a node config with `name: vsync`. The Pbcast layer's fields
are pbcast's (round_s, fanout, gc_c, mode, first_phase, group, tree_fanout, max_repairs, max_ranges: see
protocols/pbcast/params.py); the rest are the Vsync layer's, with seed 001's values as defaults (§5.2, §6) where the
paper gives one, and the reason for the value where it does not (docs/pbcast.md, "vsync over pbcast")."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from gossipnode.protocols.pbcast.params import PbcastParams


class VsyncParams(PbcastParams):
    name: Literal["vsync"]  # type: ignore[assignment]
    k: int = Field(default=1, ge=1, description="size of the leader committee (at the start members 0..k-1, member "
                                                "0 leading); at most n - 1, so that a failed committee member can "
                                                "be replaced (\"inclusion of some other non-faulty member\", §5.2)")
    sender_buffer: int = Field(default=8, ge=1, description="a sender's constant-size buffer of multicasts "
                                                            "awaiting their Gseq Ack (Table 2); full: blocked")
    gseq_timeout_s: float = Field(default=0.2, gt=0, description="resend a Gseq Req, an ORDER or a CPROBE "
                                                                 "unanswered this long")
    repair_min_s: float = Field(default=0.01, gt=0, description="repair sub-protocol timeout at a high rate")
    repair_max_s: float = Field(default=1.0, gt=0, description="... and when multicasts are infrequent")
    repair_batch: int = Field(default=64, ge=1, description="items one REPAIR_REQ asks for and one answer carries")
    view_period_s: float = Field(default=20.0, gt=0, description="the leader starts a view change this often")
    ack_timeout_s: float = Field(default=1.0, gt=0, description="the leader waits this long for AckPrefreshviews "
                                                                "(and for the committee round's answers)")
    ack_wait: Literal["all", "timeout"] = Field(
        default="all", description="all: the leader decides the view once every member of the view has "
                                   "acknowledged, or at ack_timeout_s (§6.2: the 1 s is the extra time when a member "
                                   "drops out; Figure 10b's duration grows with the group); timeout: it always waits "
                                   "ack_timeout_s (§5.2's \"waits some time for these acknowledgements (1 s)\")")
    ack_defer_s: float = Field(default=0.5, ge=0, description="members defer their AckPrefreshview by a random "
                                                              "time up to this (against an ack implosion)")
    ack_retries: int = Field(default=2, ge=0, description="the leader sends the Prefreshview again, by unicast, to "
                                                          "each member that has not acknowledged it, this many "
                                                          "times within ack_timeout_s (after ack_defer_s)")
    lag_limit_s: float | None = Field(default=None, gt=0, description="the drop rule: a member that acknowledged "
                                      "but whose delivery lags the leader's by more than this (the first gseq it "
                                      "lacks was ordered this long before the Prefreshview) is dropped; None: "
                                      "ack_timeout_s (a member that far behind, answering in order, would have "
                                      "answered after the timeout)")
    leader_timeout_s: float | None = Field(default=None, gt=0, description="a committee member that has heard "
                                           "nothing from the leader for this long (rank r: r times this) takes "
                                           "over; None: ack_timeout_s")
    heartbeat_s: float = Field(default=0.25, gt=0, description="the leader's HEARTBEAT to the committee (epoch, "
                                                               "stable mark) this often")
    vc_block: Literal["all", "repair"] = Field(
        default="all", description="all: from the Prefreshview to the Newview a member blocks the multicast "
                                   "dissemination (Pbcast anti-entropy of the gseqs ordered before the view change, "
                                   "its own acknowledged multicasts) and the repair sub-protocol (§5.2, §6.1); "
                                   "repair: only the repair sub-protocol (pbcast keeps disseminating)")
    rejoin: bool = Field(default=True, description="a dropped member asks to rejoin (JOIN every join_retry_s) "
                                                   "and is admitted, with a state transfer, at the next view change")
    join_retry_s: float = Field(default=1.0, gt=0, description="a dropped member's JOIN is sent again this often")

    @property
    def lag_limit(self) -> float:
        return self.ack_timeout_s if self.lag_limit_s is None else self.lag_limit_s

    @property
    def leader_timeout(self) -> float:
        return self.ack_timeout_s if self.leader_timeout_s is None else self.leader_timeout_s

    @model_validator(mode="after")
    def _vsync_ranges(self) -> VsyncParams:
        if self.repair_min_s > self.repair_max_s:
            raise ValueError(f"repair_min_s {self.repair_min_s} exceeds repair_max_s {self.repair_max_s}")
        if self.ack_defer_s >= self.ack_timeout_s:
            raise ValueError(f"ack_defer_s {self.ack_defer_s} must be below ack_timeout_s {self.ack_timeout_s}")
        if self.heartbeat_s >= self.leader_timeout:
            raise ValueError(f"heartbeat_s {self.heartbeat_s} must be below the leader timeout {self.leader_timeout}")
        return self

    def check(self, cfg: "NodeConfig") -> None:  # noqa: F821 - the node config, checked as a whole
        from .wire import MIN_DATA_SIZE

        if self.k > cfg.n - 1:
            raise ValueError(f"k = {self.k} is larger than the group after the leader's failure ({cfg.n} members, "
                             f"{cfg.n - 1} without it): a failed committee member is replaced by another member "
                             f"(seed 001 §5.2), so k must be at most n - 1")
        if cfg.workload is not None and cfg.workload.size_bytes < MIN_DATA_SIZE:
            raise ValueError(f"workload size_bytes {cfg.workload.size_bytes} is below a vsync P_DATA message's "
                             f"headers ({MIN_DATA_SIZE} bytes)")
        if self.first_phase == "mcast":
            if not cfg.multicast:
                raise ValueError("first_phase mcast needs a multicast group in the config (`multicast:`)")
            if self.group is not None:
                cfg.group(self.group)


PARAMS = VsyncParams
