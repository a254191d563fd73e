"""The backend interface (docs/architecture.md §3). A backend realises a `NetworkPlan` and gives the runner what it needs.

Backends are passed in explicitly (see `get_backend`); they never print: progress goes through a `Progress`
the caller supplies (the CLI draws it with rich).
"""
from __future__ import annotations

import subprocess
import sys
from abc import ABC, abstractmethod
from pathlib import Path
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

    # --- the protocol node (the runner's view; defaults: a host process inside the node's namespace) ---------
    def node_config(self, state: LabState, node: str, config: dict) -> dict:
        """The node's config as it must be given to the node: backends that run it elsewhere (a container)
        rewrite its file paths (`event_log`, `control`); the runner then reaches `control` at the new path."""
        return config

    def start_node(self, state: LabState, node: str, config: dict, run_dir: Path):
        """Start the protocol node on `node`; return a `subprocess.Popen`-like handle (poll, wait,
        send_signal, terminate, kill, pid). Its files end up in `run_dir` (see `collect_node_files`)."""
        log = open(run_dir / "logs" / f"{node}.log", "ab")
        try:
            return self.popen(state, node, [sys.executable, "-m", "gossipnode", "--config",
                                            str(run_dir / "configs" / f"{node}.json")],
                              stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        finally:
            log.close()

    def collect_node_files(self, state: LabState, node: str, run_dir: Path) -> None:
        """Copy what the node wrote somewhere else (event log, stdout) into `run_dir`, after it stopped."""


def get_backend(name: str, **options) -> Backend:
    """The backend called `name`; `options` configure a backend that needs them (hosts: inventory, ...)."""
    if name == "hosts":
        from orchestrator.backends.hosts import HostsBackend

        return HostsBackend(**options)
    if name == "mininet":
        from orchestrator.backends.mininet import MininetBackend

        return MininetBackend()
    if name == "docker":
        from orchestrator.backends.docker import DockerBackend

        return DockerBackend()
    raise SpecError(f"unknown backend {name!r}: available: mininet, docker, hosts")
