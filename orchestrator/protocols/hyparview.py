"""HyParView's orchestrator side: the view sizes the paper computes from n (§4.1: active log(n) + c, passive
k(log(n) + c)) written into the node config explicitly, and the checks that need the group's size (an active view
larger than the group, a contact that is not a member) refused before anything is built."""
from __future__ import annotations

from typing import Any

from gossipnode.protocols.hyparview.params import default_active
from orchestrator.errors import SpecError

from . import Adapter, Context


def _to_node(params: dict[str, Any], ctx: Context) -> dict[str, Any]:
    n = ctx.members
    active = params.get("active_size") or default_active(n, params.get("c", 1))
    if n < 2:
        raise SpecError(f"protocol.hyparview: a group of {n} member(s) has no overlay to build")
    if active > n - 1:
        raise SpecError(f"protocol.hyparview.active_size: {active} is larger than the group allows ({n} members: "
                        f"at most {n - 1})")
    passive = params.get("passive_size") or min(255, params.get("k", 6) * active)
    if params.get("contact", 0) >= n:
        raise SpecError(f"protocol.hyparview.contact: {params['contact']} is not a member id (0..{n - 1})")
    return {**params, "active_size": active, "passive_size": passive}


ADAPTER = Adapter(to_node=_to_node)
