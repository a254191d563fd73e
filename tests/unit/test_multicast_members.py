"""Multicast routes that follow the members (pure, no root): the plan's groups narrowed to the members present
(orchestrator.mcast.tree.narrowed), simulated hop by hop as the kernel's ipmr applies them (the simulator of
test_multicast_plan.py): each present member delivered once, copies only on the tree spanning the present ones;
the changes the daemon gets (mfc_changes) take any earlier state to the new one; who is present when
(runner.GroupMembers); and the runner handing the changes over on the fake backend."""
from __future__ import annotations

import json
import random

import networkx as nx
import pytest

from orchestrator.mcast.tree import mfc_changes, mfc_entries, narrowed, vifs
from orchestrator.runner import GroupMembers, RunOptions, run
from orchestrator.schedule import Op, OpKind
from tests.unit.test_multicast_plan import DENSE, plan_of, reference_tree, simulate, sparse
from tests.unit.test_runner import _write, fake_backend, state_dir  # noqa: F401  (the state directory fixture)


@pytest.mark.parametrize("text", [DENSE, sparse(60, 3, 8, 1), sparse(120, 4, 5, 7), sparse(200, 5, 20, 11)])
def test_narrowed_routes_reach_exactly_the_members_present(text):
    plan = plan_of(text)
    (group,) = plan.groups
    rng = random.Random(5)
    everyone = set(group.members)
    assert [mfc_entries(plan, n.name, narrowed(plan, everyone)) for n in plan.nodes] == \
        [mfc_entries(plan, n.name) for n in plan.nodes]
    for k in range(6):
        present = set(rng.sample(sorted(everyone), max(2, len(everyone) * (k + 1) // 7)))
        (ng,) = narrowed(plan, present)
        order = sorted(present, key=lambda x: plan.node(x).index)
        ref = reference_tree(plan, order)
        assert set(ng.nodes) == set(ref.nodes) and set(ng.members) == present
        for s in ng.senders:
            copies, delivered = simulate(plan, ng, s, [ng])
            want = {}
            for a, b in nx.bfs_edges(ref, s):
                lk = plan.link_of(a, b)
                want[f"{lk.id}/{'down' if lk.parent == a else 'up'}"] = 1
            assert copies == want                     # nothing towards an absent member's branch
            assert delivered == {m: 1 for m in present if m != s}


def daemon_apply(held: dict[str, dict], changes: dict[str, dict]) -> None:
    """What mrouted.Router.change does to a node's routes, keyed (group, origin): delete (a missing one is no
    error), then add or replace."""
    for node, c in changes.items():
        for d in c["delete"]:
            held[node].pop((d["group"], d["origin"]), None)
        for e in c["set"]:
            held[node][(e["group"], e["origin"])] = e


def test_the_changes_take_the_daemon_from_any_narrowing_to_any_other():
    plan = plan_of(sparse(120, 4, 12, 3))
    (group,) = plan.groups
    everyone = set(group.members)
    held = {n.name: {(e.group, e.origin): e.to_json() for e in mfc_entries(plan, n.name)}
            for n in plan.nodes if vifs(plan, n.name)}
    rng = random.Random(9)
    now = everyone
    for present in [set(rng.sample(sorted(everyone), 6)), set(rng.sample(sorted(everyone), 3)), everyone,
                    set(rng.sample(sorted(everyone), 10)), set(), everyone]:
        changes = mfc_changes(plan, narrowed(plan, now), narrowed(plan, present))
        daemon_apply(held, changes)
        want = {n: {(e.group, e.origin): e.to_json() for e in mfc_entries(plan, n, narrowed(plan, present))}
                for n in held}
        assert held == want
        assert set(changes) <= set(held)       # only nodes the daemon holds routes of
        now = present
    assert mfc_changes(plan, narrowed(plan, now), narrowed(plan, now)) == {}


def view(t: float, changes) -> Op:
    return Op(t=t, seq=0, kind=OpKind.GMS_VIEW, index=0, targets=(), params=(changes, ()))


def test_who_is_routed_to_with_and_without_a_membership_service():
    plan = plan_of(DENSE)
    names = [m.name for m in plan.members]
    first = frozenset(names) - {"h5"}
    start = Op(t=1, seq=0, kind=OpKind.START, index=0, targets=("h5",))
    leave = Op(t=2, seq=1, kind=OpKind.CRASH, index=1, targets=("h3",), params="leave")
    kill = Op(t=2, seq=1, kind=OpKind.CRASH, index=1, targets=("h4",))
    # without one: a process's start joins it, a leave takes it out, a crash leaves its branch
    g = GroupMembers(plan, first, gms=False)
    assert g.after(start) == first | {"h5"}
    assert g.after(leave) == first - {"h3"} and g.after(kill) == first
    # with one: only its views change it (cumulative: every change so far)
    g = GroupMembers(plan, first, gms=True)
    assert g.after(start) == first and g.after(leave) == first
    i = names.index
    assert g.after(view(1.5, (("add", (i("h5"),)),))) == first | {"h5"}
    assert g.after(view(2.0, (("add", (i("h5"),)), ("remove", (i("h3"), i("h4")))))) == (first | {"h5"}) - {"h3", "h4"}


def test_the_runner_hands_the_route_changes_over_and_gives_the_plans_back_at_the_end(tmp_path, monkeypatch):
    calls = fake_backend(monkeypatch)
    text = ("name: fk\ntopology: {kind: tree, nodes: 13, degree: 3}\nlinks: {delay: 5ms}\n"
            "protocol: {qsm: {groups: [{name: a, members: all}], partition_size: 2, failure_detection: 0.3s}}\n"
            "workload: {senders: [h0], rate_per_s: 5, size_bytes: 64}\nduration: 2s\nseed: 4\n"
            "schedule:\n  - {at: 0.2s, action: join, nodes: [h7]}\n"
            "  - {at: 1.0s, action: leave, nodes: [h3]}\n")
    run_dir = run(_write(tmp_path, text), RunOptions(backend="fake", out=tmp_path / "runs"))
    routes = [c[1] for c in calls if c[0] == "multicast_routes"]
    assert len(routes) == 4          # h7 out at the start, in at its view (0.5 s), h3 out at 1.0 s, all back at the end
    on_path = [set(r) for r in routes]
    assert "h7" in on_path[0] and "h7" in on_path[1] and "h3" in on_path[2] and "h3" in on_path[3]

    def delivers(changes, node):       # its (*,G) routes forward onto mc0: copies are delivered to it
        return any("mc0" in e["oifs"] for e in changes[node]["set"] if e["group"] != "0.0.0.0")
    assert not delivers(routes[0], "h7") and delivers(routes[1], "h7")
    assert not delivers(routes[2], "h3") and delivers(routes[3], "h3")
    events = [json.loads(x) for x in (run_dir / "events" / "orchestrator.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events if e["event"] == "multicast_routes"] == ["multicast_routes"]
    applied = {(e["op"], e["planned_s"]): e.get("multicast_routes") for e in events if e["event"] == "action_applied"}
    assert applied[("gms_view", 0.5)]["nodes"] >= 1 and applied[("gms_view", 1.0)]["nodes"] >= 1
    assert applied[("start", 0.2)] is None and applied[("crash", 1.0)] is None
