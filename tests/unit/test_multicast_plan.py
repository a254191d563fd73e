"""Multicast groups in the plan (pure, no root): the `multicast:` section's validation, each group's shared tree
cross-checked with networkx, the (S,G) routes simulated hop by hop as the kernel's ipmr applies them (one copy per
packet on every tree link, away from the sender, none elsewhere; every member delivered exactly once), and plans
without groups unchanged byte for byte."""
from __future__ import annotations

import itertools
import json

import networkx as nx
import pytest

from orchestrator.errors import PlanError, SpecError
from orchestrator.mcast import mrouted
from orchestrator.mcast.realise import ip_lines, render_config, sysctls
from orchestrator.mcast.tree import (MAXVIFS, SEND_IF, expected_copies, member_endpoints, mfc_entries, node_mroute,
                                     vifs)
from orchestrator.plan import NetworkPlan, build_plan
from orchestrator.spec import parse_experiment


def plan_of(text: str) -> NetworkPlan:
    return build_plan(parse_experiment(text))


def graph(plan: NetworkPlan) -> nx.Graph:
    g = nx.Graph()
    g.add_nodes_from(n.name for n in plan.nodes)
    g.add_edges_from((lk.parent, lk.child) for lk in plan.links)
    return g


def reference_tree(plan: NetworkPlan, members: list[str]) -> nx.Graph:
    """The smallest subtree spanning `members`: the union of the tree paths from one member to the others."""
    g = graph(plan)
    t = nx.Graph()
    t.add_node(members[0])
    for m in members[1:]:
        nx.add_path(t, nx.shortest_path(g, members[0], m))
    return t


def simulate(plan: NetworkPlan, group, sender: str, groups=None) -> tuple[dict[str, int], dict[str, int]]:
    """One packet from `sender`, forwarded as ipmr (net/ipv4/ipmr.c: ip_mr_input, ip_mr_forward) does with the
    plan's routes. The packet enters the sender's ipmr as the copy looped back on mc0 (an output route) with the
    group's TTL. Lookup: the exact (S,G); else a (*,G) listing the incoming interface as outgoing or whose
    parent's (*,*) lists it; else the (*,*) whose parent is the incoming interface. Acceptance: a (*,G) whose
    parent's (*,*) lists the incoming interface, or any entry whose parent is it; else dropped (wrong interface).
    Forwarding: to every outgoing interface (a (*,G): but the incoming one) when TTL > 1, decrementing it; a
    (*,*) entry only forwards towards its parent. A copy forwarded onto mc0 is looped back (an output route)
    into ipmr again and delivered locally, since the node joined on mc0; it must not be forwarded further.
    Returns (copies per link direction, deliveries per node). `groups`: the routes of these groups (the plan's
    narrowed to the members present) instead of the plan's."""
    any_ = "0.0.0.0"
    routes = {n.name: mfc_entries(plan, n.name, groups) for n in plan.nodes}
    ifs = {}
    for lk in plan.links:
        ifs[(lk.parent, lk.parent_if)] = (lk.child, lk.child_if, f"{lk.id}/down")
        ifs[(lk.child, lk.child_if)] = (lk.parent, lk.parent_if, f"{lk.id}/up")
    src, grp = plan.node(sender).address, group.address
    copies: dict[str, int] = {}
    delivered: dict[str, int] = {}

    def proxy(node, parent):
        return next((e for e in routes[node] if e.group == any_ and e.origin == any_ and e.iif == parent), None)

    work = [(sender, SEND_IF, group.ttl, True)]        # (node, incoming interface, TTL, looped back from output)
    while work:
        node, iif, ttl, looped = work.pop()
        if looped and iif == SEND_IF and node != sender:
            delivered[node] = delivered.get(node, 0) + 1
        es = routes[node]
        c = next((e for e in es if (e.origin, e.group) == (src, grp)), None)
        if c is None:
            c = next((e for e in es if e.origin == any_ and e.group == grp and (
                iif in e.oifs or ((p := proxy(node, e.iif)) is not None and iif in p.oifs))), None)
        if c is None:
            c = proxy(node, iif)
        if c is None:
            assert looped, f"{node}: a copy from a link without a route (upcall, dropped)"
            continue
        p = proxy(node, c.iif) if c.origin == any_ else None
        if not (p is not None and iif in p.oifs) and c.iif != iif:
            assert looped, f"{node}: a copy arrived on {iif}, the route expects {c.iif} (wrong interface)"
            continue                                   # our own looped-back copy: delivered only
        if c.group == any_:
            assert iif == c.iif, "a (*,*) entry forwarded towards its parent"
            continue
        for oif in c.oifs:
            if (c.origin == any_ and oif == iif) or ttl <= 1:
                continue
            if oif == SEND_IF:
                work.append((node, SEND_IF, ttl - 1, True))
            else:
                peer, peer_if, direction = ifs[(node, oif)]
                copies[direction] = copies.get(direction, 0) + 1
                work.append((peer, peer_if, ttl - 1, False))
    return copies, delivered


DENSE = "topology: {kind: tree, nodes: 40, degree: 4}\nmulticast: {groups: [{name: data, address: 239.1.0.1}]}\n"


def sparse(nodes: int, degree: int, count: int, seed: int, extra: str = "") -> str:
    return (f"topology: {{kind: tree, nodes: {nodes}, degree: {degree}, members: {{count: {count}, seed: {seed}}}}}\n"
            f"multicast:\n  groups:\n    - {{name: data, address: 239.1.0.1, members: all}}\n{extra}")


@pytest.mark.parametrize("text", [
    DENSE,
    sparse(60, 3, 8, 1), sparse(60, 3, 8, 2), sparse(120, 4, 5, 7), sparse(30, 2, 2, 3), sparse(200, 5, 20, 11),
])
def test_tree_copies_and_deliveries_for_every_sender(text):
    plan = plan_of(text)
    (group,) = plan.groups
    members = [m.name for m in plan.members]
    ref = reference_tree(plan, members)
    assert set(group.nodes) == set(ref.nodes)
    assert {tuple(sorted(lid.split("-"))) for lid in group.links} == {tuple(sorted(e)) for e in ref.edges}
    # TTL: the tree's diameter (networkx) + 2 (the last forward is onto mc0).
    assert group.ttl == (nx.diameter(ref) if len(ref) > 1 else 0) + 2
    for s in group.senders:
        copies, delivered = simulate(plan, group, s)
        # Exactly one copy per packet on every tree link, in the direction away from the sender; none elsewhere.
        want = {}
        for a, b in nx.bfs_edges(ref, s):
            lk = plan.link_of(a, b)
            want[f"{lk.id}/{'down' if lk.parent == a else 'up'}"] = 1
        assert copies == want == expected_copies(plan, group, s)
        assert delivered == {m: 1 for m in members if m != s}


def test_sparse_trees_include_routers_and_skip_unneeded_branches():
    plan = plan_of(sparse(60, 3, 8, 1))
    (group,) = plan.groups
    routers_on = [n for n in group.nodes if plan.node(n).role == "router"]
    assert routers_on, "a sparse group's tree passes through routers"
    off = [n.name for n in plan.nodes if n.name not in group.nodes]
    assert off, "branches without members are not on the tree"
    for n in off:
        assert node_mroute(plan, n) is None
    for r in routers_on:
        assert SEND_IF not in vifs(plan, r) and ip_lines(plan, r) == []


def test_subset_groups_senders_and_ports():
    text = ("topology: {kind: tree, nodes: 40, degree: 4}\nmulticast:\n  groups:\n"
            "    - {name: a, address: 239.1.0.1}\n"
            "    - {name: b, address: 239.2.0.9, members: [h39, h5, h21], senders: [h21], port: 7100}\n")
    plan = plan_of(text)
    a, b = plan.groups
    assert (a.port, b.port) == (7001, 7100)
    assert b.members == ("h5", "h21", "h39") and b.senders == ("h21",)
    copies, delivered = simulate(plan, b, "h21")
    assert delivered == {"h5": 1, "h39": 1}
    # O(groups) routes per node: (*,G) per group on its tree, (self,G) where it may send, one (*,*).
    for n in plan.nodes:
        entries = mfc_entries(plan, n.name)
        for g in (a, b):
            want = (n.name in g.nodes) + (n.name in g.senders and len(g.members) > 1)
            assert sum(e.group == g.address for e in entries) == want, (n.name, g.name)
        assert sum(e.group == "0.0.0.0" for e in entries) == 1
    copies, delivered = simulate(plan, b, "h5")      # not a sender: delivered to nobody else, forwarded nowhere
    assert copies == {} and delivered == {}
    ep = member_endpoints(plan, "h21")
    assert [e["name"] for e in ep] == ["a", "b"]
    assert ep[1] == {"name": "b", "address": "239.2.0.9", "port": 7100, "ttl": b.ttl, "send_if": "mc0",
                     "join_ifs": ["mc0"], "source": plan.node("h21").address, "sender": True, "receive": True}
    assert member_endpoints(plan, "h5")[1]["sender"] is False
    assert [e["name"] for e in member_endpoints(plan, "h1")] == ["a"]


def test_send_only_senders_are_on_the_tree_and_receive_nothing():
    """A sender outside the group's members (QSM's sender into a region it is not in): the tree spans it, it has
    mc0 and a (self,G) route, its packets reach every member once; the group's packets, its own and the other
    senders', are delivered to no send-only sender. `senders` left out means the group's members, not everyone."""
    text = ("topology: {kind: tree, nodes: 40, degree: 4}\nmulticast:\n  groups:\n"
            "    - {name: r, address: 239.3.0.1, members: [h5, h21], senders: [h5, h39, h2]}\n"
            "    - {name: s, address: 239.3.0.2, members: [h5, h21]}\n")
    plan = plan_of(text)
    r, s = plan.groups
    assert r.members == ("h5", "h21") and r.senders == ("h2", "h5", "h39")
    assert s.senders == ("h5", "h21")
    assert {"h2", "h39"} <= set(r.nodes)
    ref = reference_tree(plan, ["h2", "h5", "h21", "h39"])
    assert {tuple(sorted(lid.split("-"))) for lid in r.links} == {tuple(sorted(e)) for e in ref.edges}
    for sender in r.senders:
        copies, delivered = simulate(plan, r, sender)
        assert delivered == {m: 1 for m in ("h5", "h21") if m != sender}, sender
        assert copies == expected_copies(plan, r, sender)
    for n in ("h2", "h39"):
        assert SEND_IF in vifs(plan, n) and ip_lines(plan, n)
        entries = [e for e in mfc_entries(plan, n) if e.group == r.address]
        assert any(e.origin == plan.node(n).address and e.iif == SEND_IF for e in entries)
        assert all(SEND_IF not in e.oifs for e in entries)            # nothing delivered to it
    (ep,) = member_endpoints(plan, "h39")
    assert ep["sender"] is True and ep["receive"] is False and ep["join_ifs"] == []
    assert member_endpoints(plan, "h5")[0]["receive"] is True


def test_plans_without_groups_are_unchanged_byte_for_byte():
    # Digests of the plan code before multicast existed (same experiments).
    text = "topology: {kind: tree, nodes: 40, degree: 4}\nlinks: {rate: 30kbit, delay: 5ms, queue: 64}\n"
    assert plan_of(text).digest() == "15d87819cf30f08484e75060199199389f9fb4a320dc8168279629f5a4f2f2c1"
    text = "topology: {kind: tree, nodes: 200, degree: 5, members: {count: 50, seed: 3}}\n"
    plan = plan_of(text)
    assert plan.digest() == "3db2e7a7397362bed5d34f71e6052bc1fac04216d663e780f82cb49993beb18b"
    assert "groups" not in plan.to_dict() and plan.groups == []


def test_plan_with_groups_round_trips_and_is_deterministic():
    plan = plan_of(sparse(60, 3, 8, 1))
    again = plan_of(sparse(60, 3, 8, 1))
    assert plan.to_json() == again.to_json()
    back = NetworkPlan.from_dict(json.loads(plan.to_json()))
    assert back.groups == plan.groups and back.to_json() == plan.to_json()


@pytest.mark.parametrize("group, message", [
    ("{name: d, address: 10.0.0.1}", "multicast.groups[0].address: 10.0.0.1 is not a multicast address"),
    ("{name: d, address: 224.0.0.5}", "multicast.groups[0].address: 224.0.0.5 is link-local multicast"),
    ("{name: d, address: 239.1.0.300}", "multicast.groups[0].address: '239.1.0.300' is not an IPv4 address"),
    ("{name: d, address: 239.1.0.1, port: 0}", "multicast.groups[0].port: Input should be greater"),
    ("{name: d, address: 239.1.0.1, members: []}", "multicast.groups[0].members: an empty list"),
    ("{name: d, address: 239.1.0.1, members: [h1], senders: [h2, h2]}", "senders: ['h2'] listed twice"),
    ("{name: D!, address: 239.1.0.1}", "multicast.groups[0].name: group name 'D!' is invalid"),
    ("{name: d, address: 239.1.0.1, color: red}", "multicast.groups[0].color: unknown key"),
])
def test_bad_groups_name_the_file_line_and_field(group, message):
    text = f"topology: {{kind: tree, nodes: 5, degree: 3}}\nmulticast:\n  groups:\n    - {group}\n"
    with pytest.raises(SpecError) as exc:
        parse_experiment(text, "x.yaml")
    first = str(exc.value).splitlines()[0]
    assert first.startswith("x.yaml:4: ") and message in first, first


def test_duplicate_groups_and_empty_section_are_rejected():
    text = ("topology: {kind: tree, nodes: 5, degree: 3}\nmulticast:\n  groups:\n    - {name: d, address: 239.1.0.1}\n"
            "    - {name: e, address: 239.1.0.1}\n")
    with pytest.raises(SpecError, match="two groups have the address '239.1.0.1'"):
        parse_experiment(text, "x.yaml")
    with pytest.raises(SpecError, match="x.yaml:2: multicast.groups"):
        parse_experiment("topology: {kind: tree, nodes: 5, degree: 3}\nmulticast: {groups: []}\n", "x.yaml")


def test_names_are_checked_against_the_plan():
    base = "topology: {kind: tree, nodes: 13, degree: 3, members: {count: 4, seed: 3}}\nmulticast:\n  groups:\n"
    with pytest.raises(PlanError, match=r"multicast.groups\[0\].members: no node named 'h99'"):
        plan_of(base + "    - {name: d, address: 239.1.0.1, members: [h99]}\n")
    with pytest.raises(PlanError, match=r"multicast.groups\[0\].members: 'r0' is a router"):
        plan_of(base + "    - {name: d, address: 239.1.0.1, members: [r0]}\n")


def test_more_interfaces_than_the_kernel_allows_is_a_plan_error():
    text = "topology: {kind: tree, nodes: 40, degree: 39}\nmulticast: {groups: [{name: d, address: 239.1.0.1}]}\n"
    with pytest.raises(PlanError, match=f"the kernel allows {MAXVIFS}"):
        plan_of(text)


def test_daemon_config_structs_and_sysctls():
    plan = plan_of(sparse(30, 3, 5, 2))
    cfg = render_config(plan, lambda n: f"/run/netns/x-{n}", "/tmp/s")
    assert [ns["node"] for ns in cfg["namespaces"]] == list(plan.groups[0].nodes)
    for ns in cfg["namespaces"]:
        assert ns["vifs"] == vifs(plan, ns["node"]) and len(ns["vifs"]) <= MAXVIFS
        assert all(e["iif"] in ns["vifs"] and set(e["oifs"]) <= set(ns["vifs"]) for e in ns["mfc"])
        assert sysctls(plan, ns["node"])["net.ipv4.conf.all.rp_filter"] == "0"
    # include/uapi/linux/mroute.h: struct vifctl is 16 bytes, struct mfcctl 60.
    assert len(mrouted.vifctl(3, 7)) == 16
    raw = mrouted.mfcctl("10.0.0.1", "239.1.0.1", 2, [0, 5])
    assert len(raw) == 60 and raw[10] == 1 and raw[15] == 1 and raw[11] == 0 and raw[8:10] == b"\x02\x00"


def test_a_machines_daemon_routes_only_its_own_part():
    """A lab over several machines: each machine's daemon gets its part's nodes, with the plan's vifs and routes
    (a cut link's tunnel has the link's interface name), and together they are the whole lab's config."""
    plan = plan_of(sparse(30, 3, 5, 2))
    whole = render_config(plan, lambda n: f"/run/netns/x-{n}", "/tmp/s")
    nodes = [ns["node"] for ns in whole["namespaces"]]
    a, b = frozenset(nodes[: len(nodes) // 2]), frozenset(nodes[len(nodes) // 2:])
    parts = [render_config(plan, lambda n: f"/run/netns/x-{n}", "/tmp/s", only) for only in (a, b)]
    assert [ns["node"] for ns in parts[0]["namespaces"]] == [n for n in nodes if n in a]
    assert parts[0]["namespaces"] + parts[1]["namespaces"] == whole["namespaces"]


def test_dense_1000_entries_scale_with_senders():
    text = ("topology: {kind: tree, nodes: 1000, degree: 4}\n"
            "multicast: {groups: [{name: d, address: 239.1.0.1, senders: [h0, h999]}]}\n")
    plan = plan_of(text)
    total = sum(len(mfc_entries(plan, n.name)) for n in plan.nodes)
    assert total == 1000 + 2 + 1000          # (*,G) and (*,*) everywhere, (self,G) at the two senders
    for s in ("h0", "h999"):
        copies, delivered = simulate(plan, plan.groups[0], s)
        assert len(copies) == 999 and len(delivered) == 999
    assert list(itertools.islice(member_endpoints(plan, "h5")[0]["join_ifs"], 1)) == ["mc0"]


def test_real_hosts_refuse_groups_before_anything_is_deployed(tmp_path, monkeypatch):
    from orchestrator import lab as labmod

    monkeypatch.setenv("ORCHESTRATOR_STATE_DIR", str(tmp_path / "state"))
    f = tmp_path / "m.yaml"
    f.write_text("topology: {kind: tree, nodes: 3, degree: 2}\nmulticast: {groups: [{name: d, address: 239.1.0.1}]}\n")
    prep = labmod.prepare(f, "mh")
    with pytest.raises(SpecError, match="groups need the mininet, docker or --machines backend"):
        labmod.up(prep, "hosts", backend_options={"inventory": tmp_path / "none.yml"})
    assert not (tmp_path / "state").exists()
