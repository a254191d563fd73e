"""Cutting a lab's tree into one shard per machine (issue #35's first step; pure).

A shard is a contiguous piece of the tree: a subtree, less the subtrees cut off below it. Every cut link joins two
shards, so a tree cut into k connected shards has exactly k - 1 cut links, the fewest any k-way split can have;
what remains to choose is the balance. Each node weighs its namespace plus, for a member, its CPU (`node_weights`),
and the split minimises the heaviest shard:

- For a bound B, the fewest connected parts of weight <= B come from one bottom-up pass (Kundu and Misra, "A
  linear tree partitioning algorithm", SIAM J. Comput. 6(1), 1977): at each node add the children's remaining
  weights to its own and, while the sum exceeds B, cut off the heaviest child's part.
- The smallest B that needs at most k parts is found by bisection over the integer weights (the pass is linear:
  O(n log W) in all).

No library does this: networkx partitions graphs by modularity or by Kernighan-Lin bisection, neither of which
keeps pieces connected and balanced by a bound on a tree (the tests cross-check connectivity and the optimum with
networkx and brute force on small trees).

A small lab gets fewer shards than machines: `min_nodes` nodes at least per shard, and a split that does not
lower the heaviest shard is not made (the bisection's bound with fewer parts is as good).
"""
from __future__ import annotations

from dataclasses import dataclass

from orchestrator.plan import NetworkPlan

NAMESPACE = 1000           # a node's namespace, in weight units
CPU_UNIT = 1000            # one core of a member's CPU budget (a member without a budget counts one core)


@dataclass(frozen=True)
class Shard:
    machine: str
    root: str                      # the shard's topmost node
    nodes: tuple[str, ...]         # in the plan's order (pre-order)
    weight: int
    members: int


@dataclass(frozen=True)
class CutLink:
    parent: str
    child: str                     # the root of the child's shard
    parent_machine: str
    child_machine: str


@dataclass(frozen=True)
class Sharding:
    shards: tuple[Shard, ...]      # the root's shard first, then by their roots' plan order
    cut: tuple[CutLink, ...]

    def machine_of(self, node: str) -> str:
        for s in self.shards:
            if node in s.nodes:
                return s.machine
        raise KeyError(node)

    def to_json(self) -> dict:
        return {"shards": [{"machine": s.machine, "root": s.root, "nodes": list(s.nodes), "weight": s.weight,
                            "members": s.members} for s in self.shards],
                "cut_links": [{"parent": c.parent, "child": c.child, "parent_machine": c.parent_machine,
                               "child_machine": c.child_machine} for c in self.cut]}


def node_weights(plan: NetworkPlan, cpu_cores: float | None = None) -> dict[str, int]:
    """A router weighs its namespace, a member its namespace and its CPU budget in cores (`cpu_cores`; one core
    when the experiment gives none)."""
    cpu = 1.0 if cpu_cores is None else cpu_cores
    return {n.name: NAMESPACE + (round(CPU_UNIT * cpu) if n.role == "member" else 0) for n in plan.nodes}


def _parts(order: list[str], parent: dict[str, str | None], weight: dict[str, int], bound: int) -> list[str]:
    """Kundu-Misra: the roots of the fewest connected parts of weight <= bound (every weight <= bound), the root's
    first. `order` is a pre-order (parents before children)."""
    rest = dict(weight)                           # a node's part so far: itself and its uncut children's parts
    pos = {v: i for i, v in enumerate(order)}
    kids: dict[str, list[str]] = {v: [] for v in order}
    for v in order:
        if parent[v] is not None:
            kids[parent[v]].append(v)
    roots: list[str] = []
    for v in reversed(order):                     # children before parents
        held = sorted(kids[v], key=lambda c: (-rest[c], pos[c]))
        total = weight[v] + sum(rest[c] for c in held)
        for c in held:                            # cut the heaviest first: fewest cuts to get under the bound
            if total <= bound:
                break
            total -= rest[c]
            roots.append(c)
        rest[v] = total
    roots.append(order[0])
    return sorted(roots, key=pos.__getitem__)


def shard_tree(order: list[str], parent: dict[str, str | None], weight: dict[str, int],
               k: int) -> tuple[int, list[str]]:
    """The smallest bound whose fewest parts are at most `k`, and those parts' roots (pure)."""
    if k < 1:
        raise ValueError("at least one shard")
    lo, hi = max(weight[v] for v in order), sum(weight[v] for v in order)
    while lo < hi:
        mid = (lo + hi) // 2
        if len(_parts(order, parent, weight, mid)) <= k:
            hi = mid
        else:
            lo = mid + 1
    return lo, _parts(order, parent, weight, lo)


def shard_plan(plan: NetworkPlan, machines: list[str], weights: dict[str, int] | None = None,
               min_nodes: int = 1) -> Sharding:
    """The plan's tree over `machines` (in their order: the root's shard on the first): at most one shard per
    machine and `min_nodes` nodes per shard, the heaviest shard as light as a connected split allows."""
    if not machines:
        raise ValueError("no machines")
    if len(set(machines)) != len(machines):
        raise ValueError(f"a machine appears twice: {machines}")
    order = [n.name for n in sorted(plan.nodes, key=lambda n: n.index)]
    parent = {n.name: n.parent for n in plan.nodes}
    w = weights or node_weights(plan)
    k = max(1, min(len(machines), len(order) // max(1, min_nodes)))
    _, roots = shard_tree(order, parent, w, k)
    owner: dict[str, str] = {}
    for v in order:                               # pre-order: a node's parent is placed before it
        owner[v] = v if v in roots else owner[parent[v]]
    machine = {r: machines[i] for i, r in enumerate(roots)}
    role = {n.name: n.role for n in plan.nodes}
    shards = tuple(Shard(machine=machine[r], root=r, nodes=tuple(v for v in order if owner[v] == r),
                         weight=sum(w[v] for v in order if owner[v] == r),
                         members=sum(1 for v in order if owner[v] == r and role[v] == "member")) for r in roots)
    cut = tuple(CutLink(parent=parent[r], child=r, parent_machine=machine[owner[parent[r]]],
                        child_machine=machine[r]) for r in roots[1:])
    return Sharding(shards=shards, cut=cut)


# --- cut links as tunnels ---------------------------------------------------------------------------------------
VXLAN_PORT = 4789          # IANA's VXLAN port
VXLAN_OVERHEAD = 50        # outer IPv4 + UDP + VXLAN + inner Ethernet headers


@dataclass(frozen=True)
class Tunnel:
    """One side of a cut link: a VXLAN device in `node`'s namespace under the link's interface name, so the node
    sees the link as it would a veth, with its underlay socket in `machine`'s own namespace (where its underlay
    address is): the kernel opens it in the namespace of the request that made the device."""

    link: str                  # the plan's link id
    vni: int
    machine: str
    node: str                  # the lab node on this side
    dev: str                   # the link's interface name at `node`
    local: str                 # this machine's underlay address
    remote: str                # the other machine's
    direction: str             # the link direction this side sends: "down" (parent side) or "up"


def vni_of(lab: str, link: str, taken: set[int]) -> int:
    """A 24-bit VXLAN id from the lab and the link (so two labs between the same machines differ), never 0 nor
    one already `taken`."""
    import hashlib

    v = int.from_bytes(hashlib.sha256(f"{lab}/{link}".encode()).digest()[:3], "big")
    while v == 0 or v in taken:
        v = (v + 1) & 0xFFFFFF
    taken.add(v)
    return v


def tunnels(plan: NetworkPlan, sharding: Sharding, underlay: dict[str, str], lab: str) -> list[Tunnel]:
    """Both sides of every cut link (pure): the parent's side sends down, the child's up; one VNI per link."""
    missing = sorted({m for c in sharding.cut for m in (c.parent_machine, c.child_machine)} - set(underlay))
    if missing:
        raise ValueError(f"no underlay address for machine(s) {missing}")
    out: list[Tunnel] = []
    taken: set[int] = set()
    for c in sharding.cut:
        link = plan.link_of(c.parent, c.child)
        vni = vni_of(lab, link.id, taken)
        a, b = underlay[c.parent_machine], underlay[c.child_machine]
        out.append(Tunnel(link.id, vni, c.parent_machine, c.parent, link.parent_if, a, b, "down"))
        out.append(Tunnel(link.id, vni, c.child_machine, c.child, link.child_if, b, a, "up"))
    return out


def tunnel_ip_lines(t: Tunnel, netns: str, mtu: int = 1500) -> list[str]:
    """The `ip -batch` line, run in the machine's own namespace (pure): the device is made straight into the
    node's `netns` (the node's own lines give it its /31 and bring it up, as a veth), its underlay socket in the
    namespace the line runs in; one line, so a failure leaves no half-made device behind. `df unset`: an outer
    packet bigger than the underlay's MTU is fragmented there rather than dropped, so the lab's links all keep
    `mtu`."""
    return [f"link add {t.dev} netns {netns} mtu {mtu} type vxlan id {t.vni} local {t.local} remote {t.remote} "
            f"dstport {VXLAN_PORT} nolearning df unset"]


@dataclass(frozen=True)
class Part:
    """What one machine builds of the lab: its shard's nodes, the links inside it (veths, as on one machine) and
    its side of each cut link (a tunnel). The netns backend builds a Part as it builds a whole plan."""

    machine: str
    nodes: frozenset[str]
    tunnels: tuple[Tunnel, ...]

    def has_link(self, parent: str, child: str) -> bool:
        return parent in self.nodes and child in self.nodes

    def to_json(self) -> dict:
        return {"machine": self.machine, "nodes": sorted(self.nodes),
                "tunnels": [t.__dict__ for t in self.tunnels]}

    @classmethod
    def from_json(cls, doc: dict) -> "Part":
        return cls(machine=doc["machine"], nodes=frozenset(doc["nodes"]),
                   tunnels=tuple(Tunnel(**t) for t in doc["tunnels"]))


def part_of(plan: NetworkPlan, sharding: Sharding, machine: str, underlay: dict[str, str], lab: str) -> Part:
    """`machine`'s Part of the sharded plan (pure)."""
    nodes = frozenset(v for s in sharding.shards if s.machine == machine for v in s.nodes)
    if not nodes:
        raise ValueError(f"machine {machine!r} has no shard")
    return Part(machine=machine, nodes=nodes,
                tunnels=tuple(t for t in tunnels(plan, sharding, underlay, lab) if t.machine == machine))
