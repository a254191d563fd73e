"""The network plan: tree shape, routing (walked hop by hop), address blocks, determinism, shaping overrides."""
import ipaddress
import random

import pytest

from orchestrator.errors import PlanError
from orchestrator.plan import IFNAMSIZ, build_plan, path, tree_parents
from orchestrator.spec import parse_experiment


def plan_of(nodes, degree=4, members="all", links="", extra=""):
    text = f"topology: {{kind: tree, nodes: {nodes}, degree: {degree}, members: {members}}}\n"
    if links:
        text += f"links:\n{links}"
    return build_plan(parse_experiment(text + extra))


def test_tree_is_balanced_and_bounded():
    parents = tree_parents(1000, 4)
    degree = {i: 0 for i in range(1000)}
    for c, p in enumerate(parents):
        if p is not None:
            degree[c] += 1
            degree[p] += 1
    assert max(degree.values()) == 4 and degree[0] == 4
    # Balanced: leaf depths differ by at most one.
    depth = [0] * 1000
    for c in range(1, 1000):
        depth[c] = depth[parents[c]] + 1
    leaf_depths = {depth[i] for i in range(1000) if degree[i] == 1 and i != 0}
    assert max(leaf_depths) - min(leaf_depths) <= 1


def _walk_all(plan, pairs):
    for a, b in pairs:
        hops = path(plan, a, b)
        assert hops[0] == a and hops[-1] == b
        # The path the routes take is the unique tree path: no node twice, each step along a link.
        assert len(set(hops)) == len(hops)
        for x, y in zip(hops, hops[1:]):
            plan.link_of(x, y)


def test_every_node_reaches_every_other_small():
    plan = plan_of(40)
    names = [n.name for n in plan.nodes]
    _walk_all(plan, [(a, b) for a in names for b in names if a != b])


def test_every_node_reaches_every_other_sparse_1000_sampled():
    plan = plan_of(1000, members="{count: 200, seed: 7}")
    names = [n.name for n in plan.nodes]
    rng = random.Random(3)
    _walk_all(plan, [tuple(rng.sample(names, 2)) for _ in range(3000)])
    # ... and root <-> every node, which crosses every route of every node on the way down.
    _walk_all(plan, [(names[0], b) for b in names[1:]] + [(b, names[0]) for b in names[1:]])


def test_routes_are_o_degree():
    plan = plan_of(1000, degree=4)
    assert max(len(r) for r in plan.routes.values()) <= 4   # default + 3 children, or 4 children at the root


def test_address_blocks_nest_and_never_overlap():
    plan = plan_of(1000)
    by = {n.name: n for n in plan.nodes}
    addrs = [n.address for n in plan.nodes]
    assert len(set(addrs)) == len(addrs)
    for n in plan.nodes:
        block = ipaddress.IPv4Network(n.block)
        assert ipaddress.IPv4Address(n.address) in block
        kids = [ipaddress.IPv4Network(by[c].block) for c in n.children]
        for i, k in enumerate(kids):
            assert k.subnet_of(block)
            assert ipaddress.IPv4Address(n.address) not in k
            for other in kids[i + 1:]:
                assert not k.overlaps(other)
        # The block holds exactly the subtree's addresses, nothing of anyone else.
        inside = {x.name for x in plan.nodes if ipaddress.IPv4Address(x.address) in block}
        assert inside == set(plan.subtree(n.name))
    links = [ipaddress.IPv4Address(a) for lk in plan.links for a in (lk.parent_addr, lk.child_addr)]
    assert len(set(links)) == len(links)
    node_pool = ipaddress.IPv4Network("10.0.0.0/16")
    assert not any(a in node_pool for a in links)


def test_interface_names_fit_and_are_unique_per_node():
    plan = plan_of(1000)
    seen = {}
    for lk in plan.links:
        for node, ifname in ((lk.parent, lk.parent_if), (lk.child, lk.child_if)):
            assert len(ifname) <= IFNAMSIZ
            assert ifname not in seen.setdefault(node, set())
            seen[node].add(ifname)


def test_deterministic_byte_for_byte():
    a = plan_of(300, members="{count: 60, seed: 5}").to_json()
    b = plan_of(300, members="{count: 60, seed: 5}").to_json()
    c = plan_of(300, members="{count: 60, seed: 6}").to_json()
    assert a == b and a != c


def test_sparse_membership():
    plan = plan_of(1000, members="{count: 200, seed: 7}")
    assert len(plan.members) == 200
    assert sum(1 for n in plan.nodes if n.role == "router") == 800
    assert all(n.name.startswith("h") == (n.role == "member") for n in plan.nodes)


def test_plan_round_trips_through_json():
    import json

    from orchestrator.plan import NetworkPlan

    plan = plan_of(30, links="  rate: 30kbit\n  delay: 5ms\n  queue: 64\n")
    again = NetworkPlan.from_dict(json.loads(plan.to_json()))
    assert again.to_json() == plan.to_json()


def test_link_defaults_directions_and_overrides():
    links = ("  rate: 30kbit\n  delay: 5ms\n  queue: 64\n  up: {loss: 1%}\n"
             "  overrides:\n    - {subtree: h1, delay: 20ms}\n    - {link: [h0, h14], down: {rate: 1mbit}}\n")
    plan = plan_of(40, links=links)
    sub = set(plan.subtree("h1"))
    for lk in plan.links:
        assert lk.up.loss == pytest.approx(0.01) and lk.down.loss == 0
        assert lk.down.queue_pkts == 64 == lk.up.queue_pkts
        expected_delay = 0.020 if lk.child in sub else 0.005
        assert lk.down.delay_s == pytest.approx(expected_delay) and lk.up.delay_s == pytest.approx(expected_delay)
        assert lk.down.rate_bps == (1_000_000 if lk.id == "h0-h14" else 30_000)
        assert lk.up.rate_bps == 30_000


def test_override_errors():
    with pytest.raises(PlanError, match="not neighbours"):
        plan_of(40, extra="links:\n  overrides:\n    - {link: [h2, h30], delay: 1ms}\n")
    with pytest.raises(PlanError, match="no node named"):
        plan_of(40, extra="links:\n  overrides:\n    - {subtree: h99, delay: 1ms}\n")


def test_address_pool_too_small():
    with pytest.raises(PlanError, match="too small"):
        plan_of(300, extra="addressing: {nodes: 10.0.0.0/24}\n")
