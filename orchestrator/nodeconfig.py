"""The nodes' configuration files, from an experiment and its plan. Pure: no I/O, no randomness but seeded draws.

`node_configs` turns the experiment's `protocol:`, `workload:` and the plan's members into one gossipnode config
per member, validated by the node's own model (`gossipnode.config.NodeConfig`); bad input is a SpecError.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from pydantic import ValidationError

from orchestrator.errors import SpecError
from orchestrator.source import FieldError
from orchestrator.mcast.tree import member_endpoints
from orchestrator.protocols import SECTIONS, Context
from orchestrator.schedule import Timeline, expand, most_down, parse_schedule
from orchestrator.plan import NetworkPlan, choose_senders
from orchestrator.spec import Experiment
from orchestrator.units import parse_time

NODE_PORT = 7000


def node_configs(exp: Experiment, plan: NetworkPlan, run_dir: Path, ctl_dir: Path,
                 check_only: bool = False, timeline: Timeline | None = None) -> dict[str, dict]:
    """Each member's gossipnode config (JSON-ready), validated by the node's own model. Raises SpecError.
    `check_only`: build and validate only the first member's and the first sender's configs (the others differ from
    these only in names, addresses and groups; each validation reads the whole member list): what `prepare` checks
    for `up` and `run` before anything is built. `timeline`: the schedule as the run expanded it (expanded here
    when not given): its joiners and the most members it has down reach the protocol's parameters."""
    from gossipnode.config import NodeConfig

    members = plan.members
    if not members:
        raise SpecError("the topology has no members to run the protocol on")
    if exp.protocol is None:
        raise SpecError(f"protocol: the experiment names no protocol (available: {', '.join(SECTIONS)})")
    if timeline is None:
        timeline = expand(parse_schedule(exp.schedule), plan, exp.duration_s, exp.seed)
    params = exp.protocol.node_params(Context(members=len(members), seed=exp.seed, down=most_down(timeline),
                                              joiners=tuple(timeline.joiners)))
    ids = {m.name: i for i, m in enumerate(members)}
    senders = choose_senders(exp, plan)
    wl = {k: v for k, v in exp.workload.items() if k != "senders"}
    for key in ("start", "stop"):
        if key in wl:
            wl[f"{key}_s"] = parse_time(wl.pop(key))
    member_list = [{"id": ids[m.name], "name": m.name, "addr": f"{m.address}:{NODE_PORT}"} for m in members]
    out = {}
    keep = {members[0].name, *senders[:1]}
    for m in members:
        if check_only and m.name not in keep:
            continue
        cfg = {
            "name": m.name, "id": ids[m.name], "listen": f"{m.address}:{NODE_PORT}", "members": member_list,
            "protocol": params, "senders": [ids[s] for s in senders],
            "workload": wl if senders else None,
            "seed": exp.seed * 100_003 + ids[m.name],
            "event_log": str(run_dir / "events" / f"{m.name}.jsonl"),
            "control": str(ctl_dir / f"{m.name}.sock"),
        }
        groups = [{"name": g["name"], "address": g["address"], "port": g["port"], "ttl": g["ttl"],
                   "send_if": g["send_if"], "join_ifs": g["join_ifs"], "source": g["source"],
                   "may_send": g["sender"], "receive": g["receive"]} for g in member_endpoints(plan, m.name)]
        if groups:
            cfg["multicast"] = groups
        try:
            NodeConfig.model_validate(cfg)
        except ValidationError as exc:       # bad input: the first problem, at the experiment's field
            raise node_config_error(exc, exp) from None
        out[m.name] = cfg
    return out




def node_config_error(exc: ValidationError, exp: Experiment) -> FieldError:
    """A node config the node's model refuses, as a FieldError on the experiment's field (its loader adds the file
    and the line): `protocol.<name>` for the protocol's parameters and checks, `workload` for the workload's."""
    err = exc.errors()[0]
    msg = str(err.get("msg", exc)).removeprefix("Value error, ")
    loc = tuple(err.get("loc") or ())
    name = next(iter(exp.protocol.model_dump(exclude_none=True)), "protocol") if exp.protocol is not None else None
    if loc[:1] == ("workload",):
        return FieldError(("workload",), f"{msg} (the node's {'.'.join(map(str, loc))})")
    where = ("protocol", name) if name else ("protocol",)
    detail = f" (the node's {'.'.join(map(str, loc))})" if len(loc) > 1 else ""
    return FieldError(where, msg + detail)


def with_netns(configs: dict[str, dict], netns_of: Callable[[str], str]) -> dict[str, dict]:
    """The configs with each member's `netns` (the namespace its sockets are opened in: packed members share a
    process but not a namespace, orchestrator/backends/packing.py). Pure: new dicts."""
    return {name: {**cfg, "netns": netns_of(name)} for name, cfg in configs.items()}
