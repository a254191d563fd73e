"""The nodes' configuration files, from an experiment and its plan. Pure: no I/O, no randomness but seeded draws.

`node_configs` turns the experiment's `protocol:`, `workload:` and the plan's members into one gossipnode config
per member, validated by the node's own model (`gossipnode.config.NodeConfig`); bad input is a SpecError.
"""
from __future__ import annotations

import random
from pathlib import Path

from orchestrator.errors import SpecError
from orchestrator.plan import NetworkPlan
from orchestrator.spec import Experiment
from orchestrator.units import parse_time

NODE_PORT = 7000


def choose_senders(exp: Experiment, plan: NetworkPlan) -> list[str]:
    members = [n.name for n in plan.members]
    senders = exp.workload.get("senders", 0)
    if isinstance(senders, list):
        unknown = [s for s in senders if s not in members]
        if unknown:
            raise SpecError(f"workload.senders: {unknown} are not members")
        return senders
    if not isinstance(senders, int) or senders < 0 or senders > len(members):
        raise SpecError(f"workload.senders: {senders!r} is not a count between 0 and {len(members)} or a list")
    return sorted(random.Random(f"{exp.seed}/senders").sample(members, senders),
                  key=lambda m: plan.node(m).index)


def local_groups(n: int, spec: dict, seed: int) -> list[dict]:
    """§5's local groups, drawn at random: members 0..n-1 shuffled, cut into round(n / group_size) groups of
    near-equal size, the first `controllers` of each group its stability controllers. `spec`: `{group_size,
    controllers, seed (default: the experiment's)}`."""
    extra = set(spec) - {"group_size", "controllers", "seed"}
    size, scs = spec.get("group_size"), spec.get("controllers", 1)
    if extra or not isinstance(size, int) or size < 1 or not isinstance(scs, int) or scs < 1:
        raise SpecError(f"protocol.gsgc.local: expected {{group_size: N >= 1, controllers: N >= 1, seed: N}}, "
                        f"got {spec!r}")
    ids = list(range(n))
    random.Random(f"{spec.get('seed', seed)}/local-groups").shuffle(ids)
    k = max(1, round(n / size))
    groups = [ids[i * n // k:(i + 1) * n // k] for i in range(k)]
    return [{"members": sorted(g), "controllers": sorted(g[:scs])} for g in groups]


def node_configs(exp: Experiment, plan: NetworkPlan, run_dir: Path, ctl_dir: Path) -> dict[str, dict]:
    """Each member's gossipnode config (JSON-ready), validated by the node's own model. Raises SpecError."""
    from gossipnode.config import NodeConfig

    members = plan.members
    if not members:
        raise SpecError("the topology has no members to run the protocol on")
    proto = dict(exp.protocol)
    if set(proto) - {"gsgc"}:
        raise SpecError(f"protocol: unknown protocol(s) {sorted(set(proto) - {'gsgc'})} (available: gsgc)")
    gsgc = dict(proto.get("gsgc") or {})
    if "step" in gsgc:
        gsgc["step_s"] = parse_time(gsgc.pop("step"))
    if "sc_step" in gsgc:
        gsgc["sc_step_s"] = parse_time(gsgc.pop("sc_step"))
    local = gsgc.pop("local", None)
    if local is not None:       # generated local groups (§5); `local_groups` lists them explicitly
        gsgc["local_groups"] = local_groups(len(members), local if isinstance(local, dict) else {}, exp.seed)
    drops = gsgc.pop("sender_drops_per_step", None)
    if drops:                   # Simulation II: this many GOSSIP copies lost at the senders per step, group-wide
        gsgc["gossip_drop_p"] = min(1.0, float(drops) / (len(members) * int(gsgc.get("subgroup", 1))))
    ids = {m.name: i for i, m in enumerate(members)}
    senders = choose_senders(exp, plan)
    wl = {k: v for k, v in exp.workload.items() if k != "senders"}
    for key in ("start", "stop"):
        if key in wl:
            wl[f"{key}_s"] = parse_time(wl.pop(key))
    member_list = [{"id": ids[m.name], "name": m.name, "addr": f"{m.address}:{NODE_PORT}"} for m in members]
    out = {}
    for m in members:
        cfg = {
            "name": m.name, "id": ids[m.name], "listen": f"{m.address}:{NODE_PORT}", "members": member_list,
            "protocol": "gsgc", "gsgc": gsgc, "senders": [ids[s] for s in senders],
            "workload": wl if senders else None,
            "seed": exp.seed * 100_003 + ids[m.name],
            "event_log": str(run_dir / "events" / f"{m.name}.jsonl"),
            "control": str(ctl_dir / f"{m.name}.sock"),
        }
        try:
            NodeConfig.model_validate(cfg)
        except Exception as exc:  # pydantic's ValidationError: report it as bad input
            first = str(exc).splitlines()
            raise SpecError(f"protocol/workload for the node: {' '.join(first[1:3]) or first[0]}") from None
        out[m.name] = cfg
    return out


