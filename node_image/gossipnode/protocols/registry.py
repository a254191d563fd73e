"""The protocols the node can run, by name: each one's core class, parameter model and wire codec.

Adding a protocol: a package `protocols/<name>/` with `params.py` (a `Strict` model with `name: Literal[...]` and
`check(cfg)`), `wire.py` (its `Codec`, registered), `core.py` (a `base.Core`); one line in `wires.py`, one entry
in `ProtocolParams` (config.py) and one here. node_image/README.md, "Adding a protocol", walks through GSGC.
"""
from __future__ import annotations

from dataclasses import dataclass

from gossipnode import wire

from .base import Core
from .direct.core import DirectNode
from .direct.params import DirectParams
from .gsgc.core import GsgcNode
from .gsgc.params import GsgcParams


@dataclass(frozen=True)
class ProtocolSpec:
    name: str
    core: type[Core]
    params: type
    codec: wire.Codec


PROTOCOLS: dict[str, ProtocolSpec] = {
    spec.name: spec for spec in (
        ProtocolSpec("gsgc", GsgcNode, GsgcParams, wire.BY_NAME["gsgc"]),
        ProtocolSpec("direct", DirectNode, DirectParams, wire.BY_NAME["direct"]),
    )
}


def get(name: str) -> ProtocolSpec:
    try:
        return PROTOCOLS[name]
    except KeyError:
        raise ValueError(f"unknown protocol {name!r} (available: {', '.join(sorted(PROTOCOLS))})") from None


def create(cfg, now: float) -> Core:
    """Start the configured protocol's core at `now`."""
    return get(cfg.protocol.name).core(cfg, now)
