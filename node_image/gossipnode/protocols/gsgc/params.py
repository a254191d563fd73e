"""GSGC's parameters: the `protocol:` section of a node config with `name: gsgc`."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from gossipnode.model import Strict


class LocalGroup(Strict):
    """One local group of §5: its members and its stability controllers (SCs, a subset of the members)."""

    members: list[int] = Field(min_length=1)
    controllers: list[int] = Field(min_length=1)

    @model_validator(mode="after")
    def _controllers_are_members(self) -> LocalGroup:
        if len(set(self.members)) != len(self.members):
            raise ValueError(f"local group {self.members} lists a member twice")
        outside = sorted(set(self.controllers) - set(self.members))
        if outside:
            raise ValueError(f"controllers {outside} are not members of their local group {self.members}")
        if len(set(self.controllers)) != len(self.controllers):
            raise ValueError(f"controllers {self.controllers} list a member twice")
        return self


class GsgcParams(Strict):
    name: Literal["gsgc"]
    subgroup: int = Field(ge=1, description="b: gossip targets per step")
    step_s: float = Field(gt=0, description="step interval")
    fail_k: int | None = Field(
        default=None, ge=4, le=254, description="K: declare a member failed at L[j] >= K; None: no failure detection"
    )
    suspect_k: int | None = Field(default=None, ge=1, description="log `suspected` at L[j] >= this; default ceil(3K/4)")
    rejoin_probe_steps: int | None = Field(
        default=None, ge=1,
        description="rejoin (README, GSGC: Rejoin): every this many steps send the Live array to one member declared "
                    "failed, pass on only observed Live counts, and require a readmitted member in W from the next "
                    "round on; None: none of it (Figure 3 alone: a declared member is never contacted again)")
    local_groups: list[LocalGroup] | None = Field(default=None, description="§5 local gossip; None: global gossip")
    sc_step_s: float | None = Field(default=None, gt=0, description="step interval among SCs; default step_s")
    multicast_stable: bool = Field(
        default=False, description="global gossip: the member that constructs S also sends it to every member"
    )
    stable_via: Literal["unicast", "multicast"] = Field(
        default="unicast",
        description="how a constructed S is announced (STABLE: global gossip with multicast_stable, and every SC "
                    "construction with local gossip): unicast = one copy to each other member (the fallback); "
                    "multicast = one datagram to the IP multicast group `stable_group`",
    )
    stable_group: str | None = Field(
        default=None, description="stable_via multicast: the multicast group's name (every member must be in it); "
                                  "default the config's first group")
    piggyback_stability: bool = Field(
        default=True, description="gossip carries S beside M (Figure 2: GOSSIP, SC_GOSSIP); false: M and W only "
                                  "(GOSSIP_M, SC_GOSSIP_M), S travels in STABLE alone (the paper's optimised scheme)")
    start_phase: Literal["per_step", "fixed"] = Field(
        default="per_step",
        description="where in each step a member gossips (the paper: \"starting points scattered randomly during the "
                    "interval of one step\"): per_step = a new uniformly random point every step; fixed = a random "
                    "phase drawn once per member, the same point in every step",
    )
    gossip_drop_p: float = Field(
        default=0.0, ge=0.0, le=1.0,
        description="drop each GOSSIP at the sender with this probability (the paper's Simulation II sender drops)",
    )

    @model_validator(mode="after")
    def _thresholds(self) -> GsgcParams:
        if self.suspect_k is not None and (self.fail_k is None or not self.fail_k // 2 < self.suspect_k < self.fail_k):
            raise ValueError("suspect_k needs fail_k and must lie between fail_k // 2 and fail_k (exclusive)")
        if self.rejoin_probe_steps is not None and self.fail_k is None:
            raise ValueError("rejoin_probe_steps needs fail_k (failure detection declares the members it probes)")
        if not self.piggyback_stability and self.local_groups is None and not self.multicast_stable:
            raise ValueError("piggyback_stability: false with global gossip needs multicast_stable: true (S would "
                             "stay at the members that construct it)")
        if self.stable_group is not None and self.stable_via != "multicast":
            raise ValueError("stable_group names the multicast group of stable_via: multicast")
        return self

    @property
    def suspect_threshold(self) -> int | None:
        if self.fail_k is None:
            return None
        return self.suspect_k if self.suspect_k is not None else -(-3 * self.fail_k // 4)

    def check(self, cfg: "NodeConfig") -> None:  # noqa: F821 - the node config, checked as a whole
        """What only the whole config can tell (ValueError)."""
        from .wire import MIN_DATA_SIZE

        if cfg.workload is not None and cfg.workload.size_bytes < MIN_DATA_SIZE:
            raise ValueError(f"workload size_bytes {cfg.workload.size_bytes} is below a GSGC DATA message's "
                             f"headers ({MIN_DATA_SIZE} bytes)")
        if self.local_groups is not None:
            grouped = sorted(i for g in self.local_groups for i in g.members)
            if grouped != sorted(m.id for m in cfg.members):
                raise ValueError("local_groups must partition the members (every member in exactly one group)")
        if self.stable_via == "multicast":
            if not cfg.multicast:
                raise ValueError("stable_via multicast needs a multicast group in the config (`multicast:`)")
            group = cfg.group(self.stable_group) if self.stable_group is not None else cfg.multicast[0]
            if self.local_groups is None:
                announces = self.multicast_stable
            else:
                announces = any(cfg.id in g.controllers for g in self.local_groups)
            if announces and not group.may_send:
                raise ValueError(f"stable_via multicast: member {cfg.id} may construct S but may not send to "
                                 f"group {group.name!r}")

PARAMS = GsgcParams
