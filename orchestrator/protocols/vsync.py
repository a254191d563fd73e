"""vsync's orchestrator-side check: the leader committee (members 0..k-1) must fit in the group, known only once
the plan has its members (a SpecError: exit 2 before anything is built)."""
from __future__ import annotations

from typing import Any

from orchestrator.errors import SpecError

from . import Adapter, Context


def _vsync_to_node(params: dict[str, Any], ctx: Context) -> dict[str, Any]:
    k = params.get("k", 1)
    if k > ctx.members:
        raise SpecError(f"protocol.vsync.k: a committee of {k} is larger than the group ({ctx.members} members)")
    return params


ADAPTER = Adapter(to_node=_vsync_to_node)
