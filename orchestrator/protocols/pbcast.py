"""pbcast's orchestrator-side hook: the first phase by IP multicast (`first_phase: mcast`, the default) needs an IP multicast group (`group`, default the first declared);
when the experiment declares none, the plan derives one named `group` (or `data`) with every member in it."""
from __future__ import annotations

from typing import Any

from . import Adapter, GroupContext


def data_group(params: dict[str, Any], ctx: GroupContext, key: str) -> list[dict[str, Any]]:
    """One group of every member, when the parameters use multicast and the experiment declares no group."""
    if params.get(key) != "mcast" or ctx.declared:
        return []
    return [{"name": params.get("group") or "data", "members": list(ctx.names), "senders": "all"}]


ADAPTER = Adapter(multicast_groups=lambda params, ctx: data_group(params, ctx, "first_phase"))
