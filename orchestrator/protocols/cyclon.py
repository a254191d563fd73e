"""Cyclon's orchestrator side: the paper's partial view of 35 (and shuffle length 14) capped to what the group
allows when the experiment leaves them at their defaults; an explicit view larger than the group is refused."""
from __future__ import annotations

from typing import Any

from orchestrator.errors import SpecError

from . import Adapter, Context


def to_node(name: str, params: dict[str, Any], ctx: Context) -> dict[str, Any]:
    """(Shared with cyclonacked.)"""
    n = ctx.members
    if n < 2:
        raise SpecError(f"protocol.{name}: a group of {n} member(s) has no overlay to build")
    if "view_size" in params and params["view_size"] > n - 1:
        raise SpecError(f"protocol.{name}.view_size: {params['view_size']} is larger than the group allows "
                        f"({n} members: at most {n - 1})")
    view = params.get("view_size", min(35, n - 1))
    shuffle = params.get("shuffle_length", min(14, view))
    if params.get("contact", 0) >= n:
        raise SpecError(f"protocol.{name}.contact: {params['contact']} is not a member id (0..{n - 1})")
    return {**params, "view_size": view, "shuffle_length": shuffle}


ADAPTER = Adapter(to_node=lambda params, ctx: to_node("cyclon", params, ctx))
