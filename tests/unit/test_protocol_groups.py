"""Protocol adapters derive the IP multicast groups their protocol needs and the experiment does not declare
(orchestrator.plan.with_protocol_groups): QSM's regions, the pbcast family's data group. Pure: plans and node
configs only."""
from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.errors import PlanError
from orchestrator.nodeconfig import node_configs
from orchestrator.plan import build_plan
from orchestrator.source import render_template
from orchestrator.spec import parse_experiment

REPO = Path(__file__).resolve().parents[2]


# the `multicast:` section qsm-small declared by hand before the plan derived QSM's regions
BY_HAND = ("multicast:\n  groups:\n"
           "    - {name: r-a, address: 239.1.0.1, members: [h0, h1, h2, h3, h4, h5, h6, h7], senders: [h0]}\n"
           "    - {name: r-a-b, address: 239.1.0.2, members: [h0, h20, h8, h9, h10, h11, h12, h13, h14, h15], "
           "senders: [h0, h20]}\n"
           "    - {name: r-b, address: 239.1.0.3, members: [h16, h17, h18, h19, h20, h21, h22, h23], senders: [h20]}\n")


def qsm_small(extra: str = "") -> str:
    """topologies/qsm-small.yaml (which names only its groups), rendered, with `extra` before its duration."""
    text = render_template((REPO / "topologies" / "qsm-small.yaml").read_text(), "qsm-small.yaml")
    assert "multicast:" not in text
    head, _, rest = text.partition("duration:")
    return head + extra + "duration:" + rest


def test_qsm_regions_are_derived_as_the_file_declares_them_with_send_only_senders(tmp_path):
    declared = {g.name: g for g in build_plan(parse_experiment(qsm_small(BY_HAND), "q.yaml")).groups}
    exp = parse_experiment(qsm_small(), "q.yaml")
    plan = build_plan(exp)
    assert [(g.name, g.address) for g in plan.groups] == [("r-a", "239.192.0.1"), ("r-a-b", "239.192.0.2"),
                                                         ("r-b", "239.192.0.3")]
    for g in plan.groups:
        d = declared[g.name]
        assert g.senders == d.senders
        # by hand, the senders were listed among the members of the regions they send into (they received and
        # dropped those packets); derived, they send only
        assert set(d.members) - set(g.members) == ({"h0", "h20"} if g.name == "r-a-b" else set())
        assert set(g.members) <= set(d.members)
    cfgs = node_configs(exp, plan, tmp_path / "run", tmp_path / "ctl")      # the node's own QSM check passes
    assert [(m["name"], m["may_send"], m["receive"]) for m in cfgs["h0"]["multicast"]] == \
        [("r-a", True, True), ("r-a-b", True, False)]
    assert [(m["name"], m["receive"]) for m in cfgs["h9"]["multicast"]] == [("r-a-b", True)]


def test_declared_groups_win_and_addresses_skip_them():
    decl = "multicast:\n  groups:\n    - {name: r-b, address: 239.192.0.1, members: [h16, h17, h18, h19, h20, h21, " \
           "h22, h23], senders: [h20]}\n"
    plan = build_plan(parse_experiment(qsm_small(decl), "q.yaml"))
    assert [(g.name, g.address) for g in plan.groups] == [("r-b", "239.192.0.1"), ("r-a", "239.192.0.2"),
                                                         ("r-a-b", "239.192.0.3")]
    udp = qsm_small().replace("partition_size: 3", "partition_size: 3\n    transport: udp")
    assert build_plan(parse_experiment(udp, "q.yaml")).groups == []


PB = ("topology: {{kind: tree, nodes: 6, degree: 2}}\nprotocol: {{{proto}: {{{params}}}}}\n"
      "workload: {{senders: [h1], rate_per_s: 5, size_bytes: 64}}\nduration: 5s\n{extra}")


@pytest.mark.parametrize("proto, params, groups", [
    ("pbcast", "", [("data", 6)]),                          # first_phase mcast is pbcast's default
    ("pbcast", "group: feed", [("feed", 6)]),
    ("pbcast", "first_phase: tree", []),
    ("vsync", "k: 2", [("data", 6)]),
    ("tradvsync", "transport: mcast", [("data", 6)]),
    ("tradvsync", "", []),                                   # unicast by default
])
def test_pbcast_family_data_group(tmp_path, proto, params, groups):
    exp = parse_experiment(PB.format(proto=proto, params=params, extra=""), "p.yaml")
    plan = build_plan(exp)
    assert [(g.name, len(g.members)) for g in plan.groups] == groups
    node_configs(exp, plan, tmp_path / "run", tmp_path / "ctl", check_only=True)
    mine = "multicast: {groups: [{name: own, address: 239.1.2.3}]}\n"
    plan = build_plan(parse_experiment(PB.format(proto=proto, params=params, extra=mine), "p.yaml"))
    assert [g.name for g in plan.groups] == ["own"]          # a declared group: nothing derived


def test_a_derived_group_the_plan_cannot_make_is_one_located_error():
    with pytest.raises(PlanError) as exc:          # at parse time: the experiment's check builds the plan
        parse_experiment(PB.format(proto="pbcast", params="group: Bad!", extra=""), "p.yaml")
    assert str(exc.value).startswith("p.yaml:2: protocol.pbcast: a multicast group it needs: group name 'Bad!' is "
                                     "invalid"), str(exc.value)
