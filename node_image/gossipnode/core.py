"""What every sans-IO protocol core gives the runtime: messages to send and events to log."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from .wire import Message


class Event(NamedTuple):
    ts: float  # the `now` the core was called with (unix seconds in the runtime)
    event: str
    fields: dict[str, Any]


class BadMessage(ValueError):
    """A well-formed packet that this node cannot accept (unknown sender, wrong array sizes, ...)."""


@dataclass
class Output:
    send: list[tuple[int, Message]] = field(default_factory=list)  # (destination member id, message)
    events: list[Event] = field(default_factory=list)

    def log(self, now: float, event: str, **fields: Any) -> None:
        self.events.append(Event(now, event, fields))
