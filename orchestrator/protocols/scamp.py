"""Scamp's orchestrator side: the checks that need the group (a contact that is not a member, a group of one)."""
from __future__ import annotations

from typing import Any

from orchestrator.errors import SpecError

from . import Adapter, Context


def _to_node(params: dict[str, Any], ctx: Context) -> dict[str, Any]:
    if ctx.members < 2:
        raise SpecError(f"protocol.scamp: a group of {ctx.members} member(s) has no overlay to build")
    if params.get("contact", 0) >= ctx.members:
        raise SpecError(f"protocol.scamp.contact: {params['contact']} is not a member id (0..{ctx.members - 1})")
    return params


ADAPTER = Adapter(to_node=_to_node)
