"""GSGC's orchestrator-side keys: §5's generated local groups (`local`) and Simulation II's
`sender_drops_per_step`, turned into node fields once the number of members is known."""
from __future__ import annotations

import random
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.errors import SpecError

from . import Adapter, Context


class LocalSpec(BaseModel):
    """GSGC §5's local groups, drawn at random once the number of members is known."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    group_size: int = Field(ge=1)
    controllers: int = Field(default=1, ge=1)
    seed: int | None = None


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


def _gsgc_to_node(params: dict[str, Any], ctx: Context) -> dict[str, Any]:
    local = params.pop("local", None)
    if local is not None:       # generated local groups (§5); `local_groups` lists them explicitly
        params["local_groups"] = local_groups(ctx.members, local, ctx.seed)
    drops = params.pop("sender_drops_per_step", None)
    if drops:                   # Simulation II: this many GOSSIP copies lost at the senders per step, group-wide
        params["gossip_drop_p"] = min(1.0, float(drops) / (ctx.members * int(params.get("subgroup", 1))))
    return params


def _gsgc_schedule_warnings(params: dict[str, Any], comebacks: list[str]) -> list[str]:
    """Figure 3 alone has no way back: a member declared failed is never sent to again, and its own gossip is
    ignored (Figure 3's Live array keeps it at >= K). A schedule that brings members back needs rejoin_probe_steps
    (the README's GSGC: Rejoin), unless failure detection is off (no fail_k: nobody is ever declared)."""
    if params.get("fail_k") is None or params.get("rejoin_probe_steps") is not None:
        return []
    return [f"the schedule {' and '.join(comebacks)}, but protocol.gsgc has fail_k and no rejoin_probe_steps: a "
            f"member declared failed is never contacted again (Figure 3 alone), so members cut off, crashed or "
            f"late stay out of the group for good; rejoin_probe_steps: N lets them back (node_image/README.md, "
            f"GSGC: Rejoin)"]


ADAPTER = Adapter(
    extra_fields={
        "local": (LocalSpec | None, None),
        "sender_drops_per_step": (float | None, Field(default=None, ge=0)),
    },
    to_node=_gsgc_to_node,
    schedule_warnings=_gsgc_schedule_warnings,
)
