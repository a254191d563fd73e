"""vsync's orchestrator-side check: the leader committee (members 0..k-1 at the start) must fit in the group with
a member left to replace a failed one (the node's own check, protocols/vsync/params.py), and in the group left
when the schedule has the most members down at once (crashed, not restarted yet: a failed committee member is
replaced from the live ones), known only once the plan and the schedule are (a SpecError: exit 2 before anything
is built). Its first phase by IP multicast gets a derived
group as pbcast's (orchestrator/protocols/pbcast.py)."""
from __future__ import annotations

from typing import Any

from orchestrator.errors import SpecError

from . import Adapter, Context
from .pbcast import data_group


def _vsync_to_node(params: dict[str, Any], ctx: Context) -> dict[str, Any]:
    k = params.get("k", 1)
    gone = max(1, ctx.down)
    if k > ctx.members - gone:
        after = "after a member's failure" if gone == 1 else \
            f"with the {gone} members the schedule has down at once"
        raise SpecError(f"protocol.vsync.k: a committee of {k} is larger than the group ({ctx.members} members) "
                        f"{after}: k must be at most {ctx.members - gone}")
    return params


ADAPTER = Adapter(to_node=_vsync_to_node,
                  multicast_groups=lambda params, ctx: data_group(params, ctx, "first_phase"))
