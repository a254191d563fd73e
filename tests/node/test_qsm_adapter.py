"""The orchestrator's QSM adapter: groups given as member ids are checked against the number of members (names
are left to the node model, which knows them: tests/integration/test_qsm.py's bad-input cases)."""
from __future__ import annotations

import pytest

from orchestrator.errors import SpecError
from orchestrator.protocols import Context
from orchestrator.protocols.qsm import ADAPTER


def test_ids_are_checked():
    ctx = Context(members=4, seed=1)
    ok = {"groups": [{"name": "a", "members": [0, 1, 2]}, {"name": "b", "members": [2, 3]}], "partition_size": 2}
    assert ADAPTER.to_node(dict(ok), ctx) == ok
    with pytest.raises(SpecError, match=r"protocol.qsm: members \[3\] belong to no group"):
        ADAPTER.to_node({"groups": [{"name": "a", "members": [0, 1, 2]}]}, ctx)
    with pytest.raises(SpecError, match="not a member"):
        ADAPTER.to_node({"groups": [{"name": "a", "members": "all"}, {"name": "b", "members": [7]}]}, ctx)


def test_the_schedules_joiners_become_the_nodes_and_may_not_be_given_otherwise():
    params = {"groups": [{"name": "a", "members": "all"}]}
    ctx = Context(members=4, seed=1, joiners=("h2", "h3"))
    assert ADAPTER.to_node(dict(params), ctx) == {**params, "joiners": ["h2", "h3"]}
    assert ADAPTER.to_node({**params, "joiners": ["h3", "h2"]}, ctx)["joiners"] == ["h2", "h3"]
    assert ADAPTER.to_node(dict(params), Context(members=4, seed=1)) == params
    with pytest.raises(SpecError, match=r"protocol.qsm.joiners: set from the schedule's `join` actions \(h2, h3\)"):
        ADAPTER.to_node({**params, "joiners": ["h2"]}, ctx)
    # the derived multicast groups are the regions once everyone joined (a joiner's region may be new)
    from orchestrator.protocols import GroupContext
    names = ["h0", "h1", "h2", "h3"]
    two = {"groups": [{"name": "a", "members": "all"}, {"name": "b", "members": ["h3"]}], "joiners": ["h3"]}
    assert [g["name"] for g in ADAPTER.multicast_groups(two, GroupContext(names, ["h0"], []))] == ["r-a", "r-a-b"]


def test_names_are_left_to_the_node_model():
    params = {"groups": [{"name": "a", "members": ["h0", "h9"]}]}
    assert ADAPTER.to_node(dict(params), Context(members=4, seed=1)) == params


@pytest.mark.parametrize("schedule", [
    "[{at: 2s, action: crash, nodes: [h3]}]",           # the GMS's view follows (schedule.with_gms)
    "[{at: 2s, action: crash, nodes: [h3]}, {at: 4s, action: restart, crashed: true}]",   # and one takes it back
    "[{at: 2s, action: join, nodes: [h3]}]",            # the GMS's view adds it (schedule.with_gms)
    "[{at: 2s, action: partition, subtree: h2}, {at: 4s, action: heal}]",     # nobody leaves the group
    "[]",
])
def test_a_schedule_that_brings_members_back_needs_no_warning(schedule):
    # The orchestrator's GMS removes crashed members, adds joiners and takes a restarted member back: nothing to
    # warn about (the warnings would be in the run's manifest and report: runner, protocol.schedule_warnings).
    from orchestrator.spec import parse_experiment
    exp = parse_experiment("topology: {kind: tree, nodes: 6, degree: 2}\nprotocol:\n  qsm:\n"
                           "    groups: [{name: a, members: all}]\n    partition_size: 2\n"
                           f"workload: {{senders: [h0], rate_per_s: 5}}\nduration: 8s\nschedule: {schedule}\n")
    assert exp.protocol.schedule_warnings([a["action"] for a in exp.schedule]) == []


def test_a_qsm_join_of_an_unknown_member_exits_2_with_its_line(tmp_path):
    # the bad input the issue names: exit 2 (a SpecError), file:line, before anything is built
    from orchestrator.errors import SpecError
    from orchestrator.spec import load_experiment

    f = tmp_path / "q.yaml"
    f.write_text("topology: {kind: tree, nodes: 6, degree: 2}\nprotocol:\n  qsm:\n"
                 "    groups: [{name: a, members: all}]\n    partition_size: 2\n"
                 "workload: {senders: [h0], rate_per_s: 5}\nduration: 8s\nschedule:\n"
                 "  - {at: 2s, action: join, nodes: [h99]}\n")
    with pytest.raises(SpecError, match=rf"{f}:9: schedule\[0\]\.nodes\[0\]: join at 2s: unknown node 'h99'"):
        load_experiment(f)
