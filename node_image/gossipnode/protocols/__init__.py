"""The protocols the node hosts, one package each (`gsgc/`, `direct/`, ...), found by `names()`.

A protocol is a subpackage holding `params.py` (its parameter model, exported as `PARAMS`), `wire.py` (its
`Codec`, registered with `gossipnode.wire`) and `core.py` (its `base.Core`, exported as `CORE`). Nothing else
lists the protocols: `wires.py`, `config.ProtocolParams` and `registry.PROTOCOLS` are built from `names()`.

Kept free of imports but `pkgutil`, so that `gossipnode.wire` can register the codecs (`wires.py`) without loading
any protocol's logic or pydantic.
"""
from __future__ import annotations

import pkgutil
from pathlib import Path

_PARTS = ("params.py", "wire.py", "core.py")


def names() -> list[str]:
    """Every protocol package's name, sorted (the subpackages that have all of params, wire and core)."""
    here = Path(__file__).parent
    return sorted(m.name for m in pkgutil.iter_modules([str(here)])
                  if m.ispkg and all((here / m.name / part).is_file() for part in _PARTS))
