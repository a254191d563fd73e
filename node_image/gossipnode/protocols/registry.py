"""The protocols the node can run, by name: each one's core class, parameter model and wire codec.

Built from `protocols.names()`: a package `protocols/<name>/` with `params.py` (a `Strict` model with
`name: Literal["<name>"]`, exported as `PARAMS`), `wire.py` (its `Codec`, registered under `<name>`) and `core.py`
(a `base.Core`, exported as `CORE`) is a protocol; nothing else lists them. node_image/README.md, "Adding a
protocol", walks through GSGC.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass

from gossipnode import wire

from . import names
from .base import Core


@dataclass(frozen=True)
class ProtocolSpec:
    name: str
    core: type[Core]
    params: type
    codec: wire.Codec


def _spec(name: str) -> ProtocolSpec:
    pkg = f"{__package__}.{name}"
    return ProtocolSpec(name, importlib.import_module(f"{pkg}.core").CORE,
                        importlib.import_module(f"{pkg}.params").PARAMS, wire.BY_NAME[name])


PROTOCOLS: dict[str, ProtocolSpec] = {name: _spec(name) for name in names()}


def get(name: str) -> ProtocolSpec:
    try:
        return PROTOCOLS[name]
    except KeyError:
        raise ValueError(f"unknown protocol {name!r} (available: {', '.join(sorted(PROTOCOLS))})") from None


def create(cfg, now: float) -> Core:
    """Start the configured protocol's core at `now`."""
    return get(cfg.protocol.name).core(cfg, now)
