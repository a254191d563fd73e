"""The interface every sans-IO protocol core implements, and what it gives the runtime back.

A core is a state machine. The runtime (`gossipnode.runtime`) owns sockets, timers and the clock; it calls

    core = Core(cfg, now)          start the protocol at `now`; `core.startup` is an Output to emit first
    core.receive(msg, now, via)    a decoded message of this protocol from member `msg.sender`
                                   (via: "udp", "mcast" or "tcp")
    core.tick(now)                 when `core.next_wakeup()` has come (run every timer due, each at most once)
    core.on_connection(peer, event, now, reason)
                                   a TCP connection to `peer` is "up" (connected or accepted) or "failed"
                                   (RST, EOF without the core having asked to close, timeout, a failed write:
                                   `reason` says which); a close the core asked for produces no event
    core.set_workload(active, now) the control command `workload start|stop` (ValueError: not a sender)
    core.control(req, now)         any other control command: (reply dict, Output); ValueError: unknown
    core.snapshot()                the state as plain JSON data (control `state`, the final `node_stopped`)

Every call returns an `Output`: messages to send (UDP unicast, IP multicast to a configured group, or a TCP
stream to a member — connected on first use), TCP connections to close, and events to log. Time comes only from
the `now` arguments, randomness only from a `random.Random` seeded from the config (`seeded_rng`), so a core
driven by the same inputs does the same thing: the unit tests and the simulators drive cores directly.

A core raises `BadMessage` (before changing any state) for a well-formed message it cannot accept.
"""
from __future__ import annotations

import random
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple


class Event(NamedTuple):
    ts: float  # the `now` the core was called with (unix seconds in the runtime)
    event: str
    fields: dict[str, Any]


class BadMessage(ValueError):
    """A well-formed packet that this node cannot accept (unknown sender, wrong array sizes, ...)."""


@dataclass
class Output:
    send: list[tuple[int, Any]] = field(default_factory=list)    # UDP: (destination member id, message)
    events: list[Event] = field(default_factory=list)
    mcast: list[tuple[str, Any]] = field(default_factory=list)   # IP multicast: (group name, message)
    stream: list[tuple[int, Any]] = field(default_factory=list)  # TCP: (destination member id, message)
    close: list[int] = field(default_factory=list)               # TCP connections to close, by member id

    def log(self, now: float, event: str, **fields: Any) -> None:
        self.events.append(Event(now, event, fields))

    def merge(self, other: Output) -> Output:
        self.send.extend(other.send)
        self.events.extend(other.events)
        self.mcast.extend(other.mcast)
        self.stream.extend(other.stream)
        self.close.extend(other.close)
        return self


CONNECTION_EVENTS = ("up", "failed")


def seeded_rng(protocol: str, seed: int, member: int) -> random.Random:
    """The only source of randomness of a core: one stream per (protocol, experiment seed, member)."""
    return random.Random(f"{protocol}/{seed}/{member}")


class Core(ABC):
    """Base class of the protocol cores (see the module docstring for the calling convention)."""

    name: ClassVar[str]
    startup: Output

    @abstractmethod
    def receive(self, msg: Any, now: float, via: str = "udp") -> Output: ...

    @abstractmethod
    def tick(self, now: float) -> Output: ...

    @abstractmethod
    def next_wakeup(self) -> float: ...

    @abstractmethod
    def snapshot(self) -> dict[str, Any]: ...

    def on_connection(self, peer: int, event: str, now: float, reason: str = "") -> Output:
        out = Output()
        out.log(now, f"connection_{event}", peer=peer, reason=reason)
        return out

    def set_workload(self, active: bool, now: float) -> Output:
        """Start (until stopped, whatever `stop_s` says) or stop this sender's data messages now. Cores whose
        senders keep a `workload.DataSource` in `self.source` get this as it is."""
        source = getattr(self, "source", None)
        if source is None:
            raise ValueError(f"member {getattr(self, 'me', '?')} is not a sender")
        out = Output()
        event = source.set_active(active, now)
        if event is not None:
            out.log(now, event)
        return out

    def control(self, req: dict[str, Any], now: float) -> tuple[dict[str, Any], Output]:
        raise ValueError(f"unknown command {req.get('cmd')!r}")
