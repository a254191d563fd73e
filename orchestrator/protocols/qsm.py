"""QSM's experiment-side checks (docs/qsm.md). The experiment file is QSM's static group membership service:

    protocol:
      qsm: {groups: [{name: a, members: [h0, ...]}, {name: b, members: all, senders: [h20]}], partition_size: 5}

The node derives regions, partitions and leaders from the groups (`gossipnode.protocols.qsm.membership`) and its
parameter model checks them against the member names when the node configs are written (before anything is
built: a member in no group, an unknown member, R = 0, a sender outside its group, a missing region multicast
group all exit 2). What can be checked here, with only the number of members known (`Context`), is checked here
too: group members given as ids, and the regions they make."""
from __future__ import annotations

from typing import Any

from orchestrator.errors import SpecError

from . import Adapter, Context


def _qsm_to_node(params: dict[str, Any], ctx: Context) -> dict[str, Any]:
    from gossipnode.protocols.qsm.membership import compute_regions

    groups = params.get("groups") or []
    ids: dict[str, list[int]] = {}
    for g in groups:
        ms = g.get("members", "all")
        if ms == "all":
            ids[g["name"]] = list(range(ctx.members))
        elif all(isinstance(m, int) for m in ms):
            ids[g["name"]] = list(ms)
        else:                  # member names: resolved and checked by the node's model (it knows the names)
            return params
    try:
        compute_regions(ids, ctx.members, int(params.get("partition_size", 5)))
    except ValueError as exc:
        raise SpecError(f"protocol.qsm: {exc}") from None
    return params


ADAPTER = Adapter(to_node=_qsm_to_node)
