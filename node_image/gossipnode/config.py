"""The node's configuration file (JSON), one per member, written by the orchestrator.

What every protocol shares sits at the top level (identity, members, senders and workload, transports, seed, log,
control); the protocol's own parameters are the `protocol` section, a union discriminated by `protocol.name`
and validated by that protocol's model (`gossipnode.protocols.registry`).
"""
from __future__ import annotations

import importlib
import ipaddress
import json
from pathlib import Path
from typing import Annotated, Union

from pydantic import Field, ValidationError, field_validator, model_validator

from .model import Strict
from .protocols import names as _protocol_names
from .vclock import MAX_DILATION, VirtualClock

# Every protocol's parameter model (`protocols/<name>/params.py`'s `PARAMS`); `name` is the discriminator.
_PARAMS = tuple(importlib.import_module(f"gossipnode.protocols.{n}.params").PARAMS for n in _protocol_names())
ProtocolParams = Annotated[Union[_PARAMS], Field(discriminator="name")]


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


class Member(Strict):
    id: int = Field(ge=0, le=0xFFFE)
    name: str = Field(min_length=1)
    addr: str

    @field_validator("addr")
    @classmethod
    def _addr(cls, v: str) -> str:
        parse_addr(v)
        return v


class Workload(Strict):
    rate_per_s: float = Field(gt=0, description="data messages per second, per sender")
    size_bytes: int = Field(ge=1, le=65000, description="UDP payload of one data message (headers included)")
    start_s: float = Field(default=0.0, ge=0, description="first send, seconds after the node starts the protocol")
    stop_s: float | None = Field(default=None, gt=0, description="last send before this; None: until stopped")

    @model_validator(mode="after")
    def _window(self) -> Workload:
        if self.stop_s is not None and self.stop_s <= self.start_s:
            raise ValueError(f"workload stop_s {self.stop_s} is not after start_s {self.start_s}")
        return self


class MulticastGroup(Strict):
    """An IP multicast group this member belongs to (the orchestrator's plan routes it across the tree)."""

    name: str = Field(min_length=1)
    address: str
    port: int = Field(ge=1, le=65535)
    ttl: int = Field(default=32, ge=1, le=255, description="hops a packet may travel (the tree's diameter + 1)")
    send_if: str | None = Field(default=None, description="interface to send on (IP_MULTICAST_IF); None: the "
                                                          "route's")
    join_ifs: list[str] = Field(default_factory=list, description="interfaces to join the group on; empty: the "
                                                                  "default one")
    source: str | None = Field(default=None, description="address to send from (the multicast routes are keyed "
                                                          "on the member's address); None: the kernel's choice")
    may_send: bool = Field(default=True, description="the group's routes carry this member's packets")
    receive: bool = Field(default=True, description="join the group; false: a send-only sender (the group's "
                                                    "routes deliver nothing to it)")

    @field_validator("address")
    @classmethod
    def _multicast(cls, v: str) -> str:
        try:
            addr = ipaddress.IPv4Address(v)
        except ValueError:
            raise ValueError(f"{v!r} is not an IPv4 address") from None
        if not addr.is_multicast:
            raise ValueError(f"{v} is not a multicast address (224.0.0.0/4)")
        return v


class TcpOptions(Strict):
    """The TCP transport (a connection per peer pair, to the peer's `addr`): how fast a dead peer is noticed."""

    user_timeout_s: float = Field(default=3.0, gt=0, description="TCP_USER_TIMEOUT: unacknowledged data fails "
                                                                 "the connection after this long")
    keepalive_s: float = Field(default=1.0, gt=0, description="idle time before keepalive probes, and their "
                                                              "interval (3 unanswered probes fail it)")
    connect_timeout_s: float = Field(default=3.0, gt=0)


class ClockConfig(Strict):
    """Virtual time (time dilation, `vclock.py`): one virtual second lasts `dilation` real seconds. The node's
    clock, timers, event timestamps, `duration_s`, the control `start`'s `at` and the TCP timeouts are virtual;
    the defaults are real time."""

    dilation: float = Field(default=1.0, gt=0, le=MAX_DILATION, strict=True, allow_inf_nan=False,
                            description="N: real seconds per virtual second (1: real time)")
    epoch: float = Field(default=0.0, ge=0, strict=True, allow_inf_nan=False,
                         description="E: the real unix time at which virtual and real time coincide "
                                     "(virtual(t) = E + (t - E) / N); the orchestrator chooses one per lab")

    def make(self) -> VirtualClock:
        return VirtualClock(self.dilation, self.epoch)


class NodeConfig(Strict):
    name: str = Field(min_length=1)
    id: int = Field(ge=0)
    listen: str
    members: list[Member] = Field(min_length=1)
    protocol: ProtocolParams
    senders: list[int] = Field(default_factory=list)
    workload: Workload | None = None
    multicast: list[MulticastGroup] = Field(default_factory=list)
    tcp: TcpOptions = TcpOptions()
    clock: ClockConfig = Field(default_factory=ClockConfig, description="virtual time: dilation and epoch")
    seed: int = 0
    event_log: Path
    control: Path | None = Field(default=None, description="unix stream socket path of the control endpoint")
    duration_s: float | None = Field(default=None, gt=0)
    wait_for_start: bool = Field(default=False, description="run the protocol only after a control `start`")
    incarnation: int = Field(default=0, ge=0, description="how many processes of this member ran before this one "
                                                          "(0: its first start; a restart of the schedule: 1, 2, "
                                                          "...): a protocol with a membership service rejoins")
    netns: str | None = Field(default=None, min_length=1,
                              description="network namespace to open the member's sockets in (a name under "
                                          "/run/netns, or an absolute path); None: the process's own. Used when "
                                          "several members share one process (packed members)")

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
        names = [g.name for g in self.multicast]
        if len(set(names)) != len(names):
            raise ValueError(f"multicast groups {names} repeat a name")
        self.protocol.check(self)
        return self

    @property
    def n(self) -> int:
        return len(self.members)

    def group(self, name: str) -> MulticastGroup:
        for g in self.multicast:
            if g.name == name:
                return g
        raise ValueError(f"no multicast group {name!r} in this member's config")


def load_config(path: str | Path) -> NodeConfig:
    """Read and validate a node config; ValueError naming the file and the problem."""
    path = Path(path)
    try:
        return NodeConfig.model_validate(json.loads(path.read_text()))
    except (OSError, json.JSONDecodeError, ValidationError) as exc:
        raise ValueError(f"{path}: {exc}") from None
