"""Cutting the tree into one shard per machine (orchestrator.shard; pure): connected shards, k - 1 cut links, the
heaviest shard as light as any connected split allows (brute force on small trees, networkx for connectivity)."""
from __future__ import annotations

import itertools
import random

import networkx as nx
import pytest

from orchestrator.plan import build_plan
from orchestrator.shard import NAMESPACE, _parts, node_weights, shard_plan, shard_tree
from orchestrator.spec import Experiment


def experiment(nodes: int, degree: int = 3, members="all") -> Experiment:
    return Experiment.model_validate({
        "name": "shard", "topology": {"kind": "tree", "nodes": nodes, "degree": degree, "members": members},
        "links": {"rate": "10mbit", "delay": "1ms"}, "protocol": {"gsgc": {"subgroup": 2, "step": "1s"}},
        "duration": "10s", "seed": 1})


def random_tree(n: int, rng: random.Random):
    order = [f"v{i}" for i in range(n)]
    parent = {"v0": None, **{f"v{i}": f"v{rng.randrange(i)}" for i in range(1, n)}}
    weight = {v: rng.randint(1, 9) for v in order}
    return order, parent, weight


def best_by_brute_force(order, parent, weight, k):
    """The lightest heaviest part over every way to cut at most k - 1 links."""
    edges = [(parent[v], v) for v in order[1:]]
    best = None
    for m in range(k):
        for cut in itertools.combinations(edges, m):
            g = nx.Graph(e for e in edges if e not in cut)
            g.add_nodes_from(order)
            heaviest = max(sum(weight[v] for v in c) for c in nx.connected_components(g))
            best = heaviest if best is None else min(best, heaviest)
    return best


def test_a_hand_worked_tree():
    """      r(1)
           /    \\
         a(4)   b(2)
        /  \\      \\
      c(3) d(3)   e(5)        total 18; two parts: cut a's subtree (10) from r, b, e (8): heaviest 10."""
    order = ["r", "a", "c", "d", "b", "e"]
    parent = {"r": None, "a": "r", "c": "a", "d": "a", "b": "r", "e": "b"}
    weight = {"r": 1, "a": 4, "c": 3, "d": 3, "b": 2, "e": 5}
    assert shard_tree(order, parent, weight, 1) == (18, ["r"])
    assert shard_tree(order, parent, weight, 2) == (10, ["r", "a"])
    # three: cutting c (3) and b's subtree (7) leaves r, a, d (8), or c and a (7) leaves r, b, e (8); every other
    # pair of cuts leaves a part of 10 or more. The greedy pass cuts at a first (a's part, 10, is over 8).
    assert shard_tree(order, parent, weight, 3) == (8, ["r", "a", "c"])
    assert _parts(order, parent, weight, 5) == ["r", "a", "c", "d", "e"]     # every node above 5 alone


def test_the_heaviest_shard_is_the_optimum_on_random_trees():
    rng = random.Random(7)
    for _ in range(60):
        n, k = rng.randint(2, 9), rng.randint(1, 4)
        order, parent, weight = random_tree(n, rng)
        bound, roots = shard_tree(order, parent, weight, k)
        assert len(roots) <= k and roots[0] == "v0"
        assert bound == best_by_brute_force(order, parent, weight, k), (order, parent, weight, k)


def shard_graph_checks(plan, sharding):
    """Every node in one shard, every shard connected in the tree, exactly the cut links join shards."""
    tree = nx.Graph((link.parent, link.child) for link in plan.links)
    tree.add_nodes_from(n.name for n in plan.nodes)
    placed = [v for s in sharding.shards for v in s.nodes]
    assert sorted(placed) == sorted(n.name for n in plan.nodes)
    for s in sharding.shards:
        assert nx.is_connected(tree.subgraph(s.nodes)), s.root
    crossing = {(a, b) for a, b in tree.edges if sharding.machine_of(a) != sharding.machine_of(b)}
    assert {frozenset(e) for e in crossing} == {frozenset((c.parent, c.child)) for c in sharding.cut}
    assert len(sharding.cut) == len(sharding.shards) - 1


def test_a_1000_node_tree_over_3_machines():
    plan = build_plan(experiment(1000, degree=4, members={"count": 200, "seed": 7}))      # as the GSGC 1000s
    s = shard_plan(plan, ["m1", "m2", "m3"])
    shard_graph_checks(plan, s)
    assert [x.machine for x in s.shards] == ["m1", "m2", "m3"] and s.shards[0].root == plan.nodes[0].name
    weights = [x.weight for x in s.shards]
    total = sum(node_weights(plan).values())
    # the root's four subtrees of ~250 nodes: no connected 3-way split comes nearer a third than ~11 %
    assert sum(weights) == total and max(weights) <= total / 3 * 1.15, weights
    assert sum(x.members for x in s.shards) == len(plan.members)
    doc = s.to_json()
    assert [c["parent_machine"] != c["child_machine"] for c in doc["cut_links"]] == [True, True]


def test_cpu_budgets_and_namespaces_both_weigh():
    plan = build_plan(experiment(40))
    light = node_weights(plan, 0.25)
    assert set(light.values()) == {NAMESPACE + 250}
    heavy = dict(light)
    heavy.update({m.name: NAMESPACE + 4000 for m in plan.members[-8:]})     # eight members with four cores each
    s = shard_plan(plan, ["a", "b"], heavy)
    shard_graph_checks(plan, s)
    order = [n.name for n in plan.nodes]
    parent = {n.name: n.parent for n in plan.nodes}
    assert max(x.weight for x in s.shards) == best_by_brute_force(order, parent, heavy, 2)
    plain = shard_plan(plan, ["a", "b"], light)         # the split by namespaces alone is heavier by CPU
    assert max(sum(heavy[v] for v in x.nodes) for x in plain.shards) > max(x.weight for x in s.shards)


def test_a_small_lab_uses_fewer_machines():
    plan = build_plan(experiment(4))
    s = shard_plan(plan, ["m1", "m2", "m3"], min_nodes=2)
    assert len(s.shards) == 2
    assert len(shard_plan(plan, ["m1", "m2", "m3", "m4", "m5"]).shards) == 4     # one node each at most
    assert len(shard_plan(plan, ["m1"]).shards) == 1 and shard_plan(plan, ["m1"]).cut == ()
    with pytest.raises(ValueError, match="twice"):
        shard_plan(plan, ["m1", "m1"])


def test_cut_links_become_a_vxlan_pair_each():
    from orchestrator.shard import VXLAN_PORT, Part, part_of, tunnel_ip_lines, tunnels, vni_of

    plan = build_plan(experiment(40))
    s = shard_plan(plan, ["m1", "m2", "m3"])
    underlay = {"m1": "10.250.0.1", "m2": "10.250.0.2", "m3": "10.250.0.3"}
    ts = tunnels(plan, s, underlay, "lab")
    assert len(ts) == 2 * len(s.cut) == 4
    for down, up in zip(ts[::2], ts[1::2]):
        link = next(lk for lk in plan.links if lk.id == down.link)
        assert (down.node, down.dev, down.direction) == (link.parent, link.parent_if, "down")
        assert (up.node, up.dev, up.direction) == (link.child, link.child_if, "up")
        assert down.vni == up.vni and (down.local, down.remote) == (up.remote, up.local)
        assert down.local == underlay[s.machine_of(link.parent)] and up.local == underlay[s.machine_of(link.child)]
    assert len({t.vni for t in ts}) == len(s.cut)
    assert tunnel_ip_lines(ts[0], "lab-h0") == [
        f"link add {ts[0].dev} netns lab-h0 mtu 1500 type vxlan id {ts[0].vni} local {ts[0].local} "
        f"remote {ts[0].remote} dstport {VXLAN_PORT} nolearning df unset"]
    parts = [part_of(plan, s, m, underlay, "lab") for m in underlay]
    inner = [lk.id for p in parts for lk in plan.links if p.has_link(lk.parent, lk.child)]
    assert sorted(inner + [t.link for t in ts[::2]]) == sorted(lk.id for lk in plan.links)    # each link once
    mine = [t for p in parts for t in p.tunnels]
    assert len(mine) == len(ts) and set(mine) == set(ts)                             # each side on its machine
    assert all(t.machine == p.machine for p in parts for t in p.tunnels)
    assert Part.from_json(parts[1].to_json()) == parts[1]
    assert vni_of("lab", ts[0].link, set()) != vni_of("lab2", ts[0].link, set())        # labs apart
    first = vni_of("lab", "x", set())
    taken = {first}
    assert vni_of("lab", "x", taken) == (first + 1) & 0xFFFFFF and taken == {first, (first + 1) & 0xFFFFFF}
    with pytest.raises(ValueError, match="m3"):
        tunnels(plan, s, {"m1": "10.250.0.1", "m2": "10.250.0.2"}, "lab")
