"""The backend interface (DESIGN.md §3). A backend realises a `NetworkPlan` and gives the runner what it needs.

Backends are passed in explicitly (see `get_backend`); they never print: progress goes through a `Progress`
the caller supplies (the CLI draws it with rich).
"""
from __future__ import annotations

import subprocess
from abc import ABC, abstractmethod
from typing import Protocol

from orchestrator.errors import SpecError
from orchestrator.plan import NetworkPlan
from orchestrator.shaping.params import DirParams
from orchestrator.state import LabState


class Progress(Protocol):
    def start(self, step: str, total: int) -> None: ...
    def advance(self, step: str, n: int = 1) -> None: ...
    def note(self, message: str) -> None: ...


class NullProgress:
    def start(self, step: str, total: int) -> None:
        pass

    def advance(self, step: str, n: int = 1) -> None:
        pass

    def note(self, message: str) -> None:
        pass


class Backend(ABC):
    name: str

    @abstractmethod
    def up(self, plan: NetworkPlan, state: LabState, progress: Progress) -> None:
        """Create the network of `plan`, recording in `state` (saved as it goes) everything created."""

    @abstractmethod
    def teardown(self, state: LabState, progress: Progress) -> None:
        """Remove everything `state` records; idempotent, and fine after a crashed orchestrator."""

    @abstractmethod
    def exec(self, state: LabState, node: str, argv: list[str]) -> int:
        """Run `argv` inside `node` with the caller's terminal; return its exit status."""

    @abstractmethod
    def popen(self, state: LabState, node: str, argv: list[str], **kwargs) -> subprocess.Popen:
        """Start `argv` inside `node` and return the process."""

    @abstractmethod
    def set_link(self, state: LabState, plan: NetworkPlan, link_id: str, direction: str,
                 params: DirParams | None) -> None:
        """Change one direction ("up"/"down") of a link live; `params=None` cuts it (drops everything)."""

    @abstractmethod
    def health(self, state: LabState) -> list[str]:
        """Problems with a running lab (missing namespaces, a dead shaper); empty when healthy."""

    @abstractmethod
    def check(self, state: LabState) -> None:
        """Cheap check during a run: raise DelayLineDied when the shaper died or the kernel dropped queued
        packets (the run's link emulation can no longer be trusted)."""

    @abstractmethod
    def shaper_stats(self, state: LabState) -> dict | None:
        """The shaper's own per-link-direction counters, when it keeps any (the delay line does)."""


def get_backend(name: str, **options) -> Backend:
    """The backend called `name`; `options` configure a backend that needs them (hosts: inventory, ...)."""
    if name == "hosts":
        from orchestrator.backends.hosts import HostsBackend

        return HostsBackend(**options)
    if name == "mininet":
        from orchestrator.backends.mininet import MininetBackend

        return MininetBackend()
    raise SpecError(f"unknown backend {name!r}: available: mininet")
