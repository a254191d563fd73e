"""Node configs for the GSGC reproductions: generated local groups (§5) and Simulation II's sender drops."""
from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.errors import SpecError
from orchestrator.plan import build_plan
from orchestrator.nodeconfig import node_configs
from orchestrator.protocols.gsgc import local_groups
from orchestrator.spec import parse_experiment

EXP = """
name: t
topology: {kind: tree, nodes: 40, degree: 4, members: {count: 30, seed: 3}}
protocol: {gsgc: %s}
workload: {senders: 5, rate_per_s: 0.001, size_bytes: 64, start_s: 1000000}
seed: 4
"""


def configs(gsgc: str) -> dict:
    exp = parse_experiment(EXP % gsgc)
    return node_configs(exp, build_plan(exp), Path("/tmp/r"), Path("/tmp/c"))


def test_local_groups_partition_the_members_with_controllers_inside():
    groups = local_groups(120, {"group_size": 50, "controllers": 5}, 1)
    assert len(groups) == 2 and sorted(i for g in groups for i in g["members"]) == list(range(120))
    assert all(len(g["controllers"]) == 5 and set(g["controllers"]) <= set(g["members"]) for g in groups)
    assert groups == local_groups(120, {"group_size": 50, "controllers": 5}, 1)       # seeded
    assert groups != local_groups(120, {"group_size": 50, "controllers": 5, "seed": 2}, 1)
    assert len(local_groups(500, {"group_size": 50, "controllers": 5}, 1)) == 10
    assert len(local_groups(30, {"group_size": 50, "controllers": 5}, 1)) == 1


@pytest.mark.parametrize("spec", [{"controllers": 5}, {"group_size": 0}, {"group_size": 5, "sc": 1}])
def test_bad_local_specs_are_errors(spec):
    with pytest.raises(SpecError, match="protocol.gsgc.local"):
        local_groups(10, spec, 1)


def test_node_configs_expand_local_and_drops():
    cfgs = configs("{subgroup: 2, step: 1s, local: {group_size: 10, controllers: 2}, sc_step: 500ms, "
                   "sender_drops_per_step: 2}")
    g = next(iter(cfgs.values()))["protocol"]
    assert "local" not in g and len(g["local_groups"]) == 3 and g["sc_step_s"] == 0.5
    assert g["gossip_drop_p"] == pytest.approx(2 / (30 * 2))


def test_global_gossip_without_drops_is_unchanged():
    g = next(iter(configs("{subgroup: 3, step: 9s, fail_k: null}").values()))["protocol"]
    assert g == {"name": "gsgc", "subgroup": 3, "step_s": 9.0, "fail_k": None}
