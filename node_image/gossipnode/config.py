"""The node's configuration file (JSON), one per member, written by the orchestrator."""
from __future__ import annotations

import ipaddress
import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .wire import HEADER_SIZE

MIN_DATA_SIZE = HEADER_SIZE + 2  # header + origin field: a DATA message with an empty payload


def parse_addr(text: str) -> tuple[str, int]:
    """'10.0.0.1:5000' -> ('10.0.0.1', 5000); ValueError if it is not an IPv4 address and a port."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{text!r} is not 'ip:port'")
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        raise ValueError(f"{text!r}: {host!r} is not an IPv4 address") from None
    return host, int(port)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Member(_Strict):
    id: int = Field(ge=0, le=0xFFFE)
    name: str = Field(min_length=1)
    addr: str

    @field_validator("addr")
    @classmethod
    def _addr(cls, v: str) -> str:
        parse_addr(v)
        return v


class LocalGroup(_Strict):
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


class GsgcParams(_Strict):
    subgroup: int = Field(ge=1, description="b: gossip targets per step")
    step_s: float = Field(gt=0, description="step interval")
    fail_k: int | None = Field(
        default=None, ge=4, le=254, description="K: declare a member failed at L[j] >= K; None: no failure detection"
    )
    suspect_k: int | None = Field(default=None, ge=1, description="log `suspected` at L[j] >= this; default ceil(3K/4)")
    local_groups: list[LocalGroup] | None = Field(default=None, description="§5 local gossip; None: global gossip")
    sc_step_s: float | None = Field(default=None, gt=0, description="step interval among SCs; default step_s")
    multicast_stable: bool = Field(
        default=False, description="global gossip: the member that constructs S also sends it to every member"
    )
    gossip_drop_p: float = Field(
        default=0.0, ge=0.0, le=1.0,
        description="drop each GOSSIP at the sender with this probability (the paper's Simulation II sender drops)",
    )

    @model_validator(mode="after")
    def _thresholds(self) -> GsgcParams:
        if self.suspect_k is not None and (self.fail_k is None or not self.fail_k // 2 < self.suspect_k < self.fail_k):
            raise ValueError("suspect_k needs fail_k and must lie between fail_k // 2 and fail_k (exclusive)")
        return self

    @property
    def suspect_threshold(self) -> int | None:
        if self.fail_k is None:
            return None
        return self.suspect_k if self.suspect_k is not None else -(-3 * self.fail_k // 4)


class Workload(_Strict):
    rate_per_s: float = Field(gt=0, description="data messages per second, per sender")
    size_bytes: int = Field(ge=MIN_DATA_SIZE, le=65000, description="UDP payload of one data message (header included)")
    start_s: float = Field(default=0.0, ge=0, description="first send, seconds after the node starts the protocol")
    stop_s: float | None = Field(default=None, gt=0, description="last send before this; None: until stopped")

    @model_validator(mode="after")
    def _window(self) -> Workload:
        if self.stop_s is not None and self.stop_s <= self.start_s:
            raise ValueError(f"workload stop_s {self.stop_s} is not after start_s {self.start_s}")
        return self


class NodeConfig(_Strict):
    name: str = Field(min_length=1)
    id: int = Field(ge=0)
    listen: str
    members: list[Member] = Field(min_length=1)
    protocol: Literal["gsgc"] = "gsgc"
    gsgc: GsgcParams
    senders: list[int] = Field(default_factory=list)
    workload: Workload | None = None
    seed: int = 0
    event_log: Path
    control: Path | None = Field(default=None, description="unix stream socket path of the control endpoint")
    duration_s: float | None = Field(default=None, gt=0)
    wait_for_start: bool = Field(default=False, description="run the protocol only after a control `start`")

    @field_validator("listen")
    @classmethod
    def _listen(cls, v: str) -> str:
        parse_addr(v)
        return v

    @model_validator(mode="after")
    def _consistent(self) -> NodeConfig:
        ids = [m.id for m in self.members]
        if sorted(ids) != list(range(len(ids))):
            raise ValueError(f"member ids must be exactly 0..{len(ids) - 1} (each once), got {sorted(ids)}")
        addrs = [m.addr for m in self.members]
        if len(set(addrs)) != len(addrs):
            raise ValueError("two members share an addr")
        if self.id not in ids:
            raise ValueError(f"id {self.id} is not among the members")
        if len(set(self.senders)) != len(self.senders) or not set(self.senders) <= set(ids):
            raise ValueError(f"senders {self.senders} must be distinct member ids")
        if self.senders and self.workload is None:
            raise ValueError("senders are set but there is no workload")
        if self.gsgc.local_groups is not None:
            grouped = sorted(i for g in self.gsgc.local_groups for i in g.members)
            if grouped != sorted(ids):
                raise ValueError("local_groups must partition the members (every member in exactly one group)")
        return self

    @property
    def n(self) -> int:
        return len(self.members)


def load_config(path: str | Path) -> NodeConfig:
    """Read and validate a node config; ValueError naming the file and the problem."""
    path = Path(path)
    try:
        return NodeConfig.model_validate(json.loads(path.read_text()))
    except (OSError, json.JSONDecodeError, ValidationError) as exc:
        raise ValueError(f"{path}: {exc}") from None
