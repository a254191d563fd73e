"""Backends by name (containerlab's `Register` + `runtime/all`, Mininet's dicts in `bin/mn`): the CLI resolves
`--backend NAME` here; nothing else names a concrete backend. A backend's module is imported only when it is
asked for (Mininet's and Docker's libraries are not needed to use the others)."""
from __future__ import annotations

from typing import Callable

from orchestrator.backends.base import Backend, NodeDriver
from orchestrator.errors import SpecError


def _mininet() -> type[Backend]:
    from orchestrator.backends.mininet import MininetBackend

    return MininetBackend


def _docker() -> type[Backend]:
    from orchestrator.backends.docker import DockerBackend

    return DockerBackend


def _hosts() -> type[Backend]:
    from orchestrator.backends.hosts import HostsBackend

    return HostsBackend


def _machines() -> type[Backend]:
    from orchestrator.backends.machines import MachinesBackend

    return MachinesBackend


def _fake() -> type[Backend]:
    from orchestrator.backends.fake import FakeBackend

    return FakeBackend


BACKENDS: dict[str, Callable[[], type[Backend]]] = {"mininet": _mininet, "docker": _docker, "hosts": _hosts}
# Not offered by --backend: fake (unit tests only), machines (`up --machines INVENTORY`).
HIDDEN: dict[str, Callable[[], type[Backend]]] = {"fake": _fake, "machines": _machines}


def names() -> list[str]:
    return list(BACKENDS)


def backend_class(name: str) -> type[Backend]:
    factory = BACKENDS.get(name) or HIDDEN.get(name)
    if factory is None:
        raise SpecError(f"unknown backend {name!r}: available: {', '.join(BACKENDS)}")
    return factory()


def driver_class(name: str) -> type[NodeDriver]:
    return backend_class(name).driver_class


def get_backend(name: str, **options) -> Backend:
    """The backend called `name`; `options` configure a backend that needs them (hosts: inventory, ...)."""
    cls = backend_class(name)
    return cls(**options) if options else cls()
