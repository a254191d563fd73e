"""The protocols the node hosts, one package each (`gsgc/`, `direct/`, ...), found by `names()`.

A protocol is a subpackage holding `params.py` (its parameter model, exported as `PARAMS`), `wire.py` (its
`Codec`, registered with `gossipnode.wire`) and `core.py` (its `base.Core`, exported as `CORE`). Nothing else
lists the protocols: `wires.py`, `config.ProtocolParams` and `registry.PROTOCOLS` are built from `names()`.

Kept free of imports but the standard library's, so that `gossipnode.wire` can register the codecs (`wires.py`) without loading
any protocol's logic or pydantic.
"""
from __future__ import annotations

import pkgutil
from importlib import resources

_PARTS = ("params", "wire", "core")


def names() -> list[str]:
    """Every protocol package's name, sorted (the subpackages that have all of params, wire and core). Works
    where the package is a directory and where it is inside a zip (Spark ships the code to workers as one)."""
    here = resources.files(__name__)

    def has(name: str, part: str) -> bool:
        return any(here.joinpath(name, part + ext).is_file() for ext in (".py", ".pyc"))

    return sorted(m.name for m in pkgutil.iter_modules(__path__)
                  if m.ispkg and all(has(m.name, part) for part in _PARTS))
