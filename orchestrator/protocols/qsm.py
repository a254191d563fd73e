"""QSM's experiment-side checks (docs/qsm.md). The experiment file gives QSM's initial group views:

    protocol:
      qsm: {groups: [{name: a, members: [h0, ...]}, {name: b, members: all, senders: [h20]}], partition_size: 5}

The node derives regions, partitions and leaders from the groups (`gossipnode.protocols.qsm.membership`) and its
parameter model checks them against the member names when the node configs are written (before anything is
built: a member in no group, an unknown member, R = 0, a sender outside its group, a missing region multicast
group all exit 2). What can be checked here, with only the number of members known (`Context`), is checked here
too: group members given as ids, and the regions they make.

With `transport: mcast` (the default) each region needs an IP multicast group; the ones the experiment's
`multicast:` section does not declare are derived here (`_qsm_groups`), so a QSM experiment file need only name its
groups."""
from __future__ import annotations

from typing import Any

from orchestrator.errors import SpecError
from orchestrator.source import FieldError

from . import Adapter, Context, GroupContext


def _qsm_to_node(params: dict[str, Any], ctx: Context) -> dict[str, Any]:
    """The schedule's joiners become the node's `joiners` (outside the initial views until the GMS adds them:
    `schedule.with_gms`); group members given as ids are checked here."""
    from gossipnode.protocols.qsm.membership import compute_regions

    given = params.get("joiners")
    if given is not None and sorted(map(str, given)) != sorted(ctx.joiners):
        raise SpecError("protocol.qsm.joiners: set from the schedule's `join` actions "
                        f"({', '.join(ctx.joiners) or 'none'}); leave it out")
    if ctx.joiners:
        params = {**params, "joiners": list(ctx.joiners)}
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
        raise FieldError(("protocol", "qsm"), str(exc)) from None
    return params


def _gms_detect_s(params: dict[str, Any]) -> float:
    """QSM's GMS is played by the orchestrator: a crash's view comes `failure_detection_s` after it, and a
    joiner's, or a restarted member's, `failure_detection_s` after it starts (schedule.with_gms)."""
    from gossipnode.protocols.qsm.params import QsmParams

    return QsmParams.model_validate({"name": "qsm", **params}).failure_detection_s


def _gms_batch_s(params: dict[str, Any]) -> float:
    """QSM's GMS batches the changes: a view at most every `view_batch_s` (0: none)."""
    from gossipnode.protocols.qsm.params import QsmParams

    return QsmParams.model_validate({"name": "qsm", **params}).view_batch_s


def _qsm_groups(params: dict[str, Any], ctx: GroupContext) -> list[dict[str, Any]]:
    """transport mcast: one IP multicast group per region, named as the node looks it up (the region's name), its
    members the region's and its senders those who multicast into one of the region's groups (all its members when
    nobody does) — a sender outside the region sends only (docs/multicast.md). The node's own membership computes
    the regions (one rule)."""
    from types import SimpleNamespace

    from gossipnode.protocols.qsm.params import QsmParams

    if params.get("transport", "mcast") != "mcast":
        return []
    ids = {name: i for i, name in enumerate(ctx.names)}
    cfg = SimpleNamespace(n=len(ctx.names), members=[SimpleNamespace(name=m, id=i) for m, i in ids.items()],
                          senders=[ids[s] for s in ctx.senders if s in ids])
    full = {k: v for k, v in params.items() if k != "joiners"}      # the regions once every joiner has joined
    try:
        ms = QsmParams.model_validate({"name": "qsm", **full}).membership(cfg)
    except ValueError as exc:
        raise FieldError(("protocol", "qsm"), str(exc)) from None
    return [{"name": r.name, "members": [ctx.names[m] for m in r.members],
             "senders": [ctx.names[m] for m in ms.origins_of(r)] or "all"}
            for r in ms.regions if r.name not in ctx.declared]


ADAPTER = Adapter(to_node=_qsm_to_node, multicast_groups=_qsm_groups,
                  gms_detect_s=_gms_detect_s, gms_batch_s=_gms_batch_s)
