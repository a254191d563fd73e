"""The network plan: pure data computed from a validated experiment (docs/architecture.md §2).

- The tree is balanced and bounded-degree: the root has `degree` children, every other interior node
  `degree - 1` (so interior nodes have `degree` links), filled breadth-first as in the GSGC paper's networks.
- Nodes are numbered depth-first (pre-order), so each subtree is one contiguous index range.
- Addressing is hierarchical: every subtree owns one aligned power-of-two address block (children's blocks
  first, largest first, then the node's own /32), so a node needs one route per child plus a default route to
  its parent: O(degree) routes. Links get a /31 each from a separate pool.
- Deterministic: the same experiment gives the same plan, byte for byte (`to_json`).
"""
from __future__ import annotations

import hashlib
import ipaddress
import json
import random
from dataclasses import asdict, dataclass, field

from orchestrator.errors import PlanError
from orchestrator.source import FieldError
from orchestrator.mcast.tree import Group, build_groups
from orchestrator.shaping.params import DirParams
from orchestrator.models import Experiment, SparseMembers

IFNAMSIZ = 15  # Linux interface names: at most 15 characters


@dataclass(frozen=True)
class Node:
    name: str
    index: int                 # depth-first pre-order position; the root is 0
    role: str                  # "member" or "router"
    address: str               # the node's own /32, on lo
    block: str                 # the subtree's address block (CIDR)
    parent: str | None
    depth: int
    children: tuple[str, ...] = ()


@dataclass(frozen=True)
class Link:
    """The link between `parent` and `child`; `down` shapes parent->child, `up` child->parent."""

    id: str                    # "<parent>-<child>"
    parent: str
    child: str
    parent_if: str
    child_if: str
    parent_addr: str           # /31 on the parent's interface
    child_addr: str
    down: DirParams
    up: DirParams


@dataclass(frozen=True)
class Route:
    dst: str                   # CIDR or "default"
    via: str
    dev: str
    src: str


@dataclass
class NetworkPlan:
    nodes: list[Node]
    links: list[Link]
    routes: dict[str, list[Route]]
    seed: int
    groups: list[Group] = field(default_factory=list)     # multicast groups (orchestrator/mcast/tree.py)
    _by_name: dict[str, Node] = field(default_factory=dict, repr=False, compare=False)
    _links_by_node: dict[str, list[Link]] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._by_name = {n.name: n for n in self.nodes}
        self._links_by_node = {n.name: [] for n in self.nodes}
        for link in self.links:
            self._links_by_node[link.parent].append(link)
            self._links_by_node[link.child].append(link)

    def node(self, name: str) -> Node:
        try:
            return self._by_name[name]
        except KeyError:
            raise PlanError(f"no node named {name!r} in this plan") from None

    @property
    def members(self) -> list[Node]:
        return [n for n in self.nodes if n.role == "member"]

    def link_of(self, a: str, b: str) -> Link:
        for link in self.links_of(a):
            if b in (link.parent, link.child):
                return link
        raise PlanError(f"nodes {a!r} and {b!r} are not linked")

    def links_of(self, name: str) -> list[Link]:
        self.node(name)
        return self._links_by_node[name]

    def access_link(self, name: str) -> Link | None:
        """A member's link towards the rest of the tree (its uplink; for the root, its first child link)."""
        node = self.node(name)
        if node.parent is not None:
            return self.link_of(node.parent, name)
        return self.links_of(name)[0] if node.children else None

    def subtree(self, name: str) -> list[str]:
        node = self.node(name)
        return [n.name for n in self.nodes[node.index: node.index + self._subtree_size(node)]]

    def _subtree_size(self, node: Node) -> int:
        size, stack = 0, [node.name]
        while stack:
            size += 1
            stack.extend(self._by_name[stack.pop()].children)
        return size

    def to_dict(self) -> dict:
        return {
            "seed": self.seed,
            "nodes": [asdict(n) for n in self.nodes],
            "links": [asdict(lk) for lk in self.links],
            "routes": {k: [asdict(r) for r in v] for k, v in self.routes.items()},
            # Only when there are groups: plans without `multicast:` stay byte-identical to older ones.
            **({"groups": [g.to_json() for g in self.groups]} if self.groups else {}),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, indent=1) + "\n"

    def digest(self) -> str:
        return self.digest_of(self.to_json())

    @staticmethod
    def digest_of(plan_json: str) -> str:
        """The digest of a plan from its `to_json()`."""
        return hashlib.sha256(plan_json.encode()).hexdigest()

    @classmethod
    def from_dict(cls, d: dict) -> "NetworkPlan":
        nodes = [Node(**{**n, "children": tuple(n["children"])}) for n in d["nodes"]]
        links = [Link(**{**lk, "down": DirParams.from_json(lk["down"]), "up": DirParams.from_json(lk["up"])})
                 for lk in d["links"]]
        routes = {k: [Route(**r) for r in v] for k, v in d["routes"].items()}
        return cls(nodes=nodes, links=links, routes=routes, seed=d["seed"],
                   groups=[Group.from_json(g) for g in d.get("groups", [])])


def tree_parents(n: int, degree: int) -> list[int | None]:
    """Breadth-first balanced tree: parent of each node in BFS numbering (root: None)."""
    parent: list[int | None] = [None]
    frontier, head = [0], 0
    while len(parent) < n:
        p = frontier[head]
        head += 1
        for _ in range(degree if p == 0 else degree - 1):
            if len(parent) >= n:
                break
            frontier.append(len(parent))
            parent.append(p)
    return parent


def _preorder(children: list[list[int]]) -> list[int]:
    order, stack = [], [0]
    while stack:
        v = stack.pop()
        order.append(v)
        stack.extend(reversed(children[v]))
    return order


def build_plan(exp: Experiment) -> NetworkPlan:
    topo = exp.topology
    n = topo.nodes
    bfs_parent = tree_parents(n, topo.degree)
    bfs_children: list[list[int]] = [[] for _ in range(n)]
    for c in range(1, n):
        bfs_children[bfs_parent[c]].append(c)  # type: ignore[index]
    order = _preorder(bfs_children)            # order[i] = BFS id of the node with pre-order index i
    pos = {b: i for i, b in enumerate(order)}
    parent = [None if bfs_parent[b] is None else pos[bfs_parent[b]] for b in order]
    children = [[pos[c] for c in bfs_children[b]] for b in order]
    depth = [0] * n
    for i in range(1, n):                      # parents precede children in pre-order
        depth[i] = depth[parent[i]] + 1        # type: ignore[index]

    # Membership: dense, or a seeded sample of the nodes.
    if isinstance(topo.members, SparseMembers):
        member_set = set(random.Random(topo.members.seed).sample(range(n), topo.members.count))
    else:
        member_set = set(range(n))
    names = [f"h{i}" if i in member_set else f"r{i}" for i in range(n)]
    for name in names:
        port_count = topo.degree
        longest = f"{name}-eth{port_count}"
        if len(longest) > IFNAMSIZ:
            raise PlanError(f"interface name {longest!r} would exceed {IFNAMSIZ} characters")

    # Address blocks: power-of-two sizes, aligned; children's blocks largest first, the node's own /32 last.
    need = [0] * n
    for i in reversed(range(n)):               # children have larger pre-order indices
        s = sum(need[c] for c in children[i]) + 1
        need[i] = 1 << (s - 1).bit_length()
    node_pool = ipaddress.IPv4Network(exp.addressing.nodes)
    link_pool = ipaddress.IPv4Network(exp.addressing.links)
    if node_pool.overlaps(link_pool):
        raise PlanError(f"addressing.nodes {node_pool} overlaps addressing.links {link_pool}")
    if need[0] > node_pool.num_addresses:
        raise PlanError(f"addressing.nodes {node_pool} is too small: the tree needs a /{33 - need[0].bit_length()}")
    if 2 * (n - 1) > link_pool.num_addresses:
        raise PlanError(f"addressing.links {link_pool} is too small for {n - 1} /31 links")
    base = [0] * n
    addr = [0] * n
    base[0] = int(node_pool.network_address)
    for i in range(n):                         # pre-order: a parent's base is set before its children's
        off = base[i]
        for c in sorted(children[i], key=lambda c: (-need[c], c)):
            base[c] = off
            off += need[c]
        addr[i] = off

    def ip(x: int) -> str:
        return str(ipaddress.IPv4Address(x))

    def block(i: int) -> str:
        return f"{ip(base[i])}/{33 - need[i].bit_length()}"

    nodes = [
        Node(name=names[i], index=i, role="member" if i in member_set else "router", address=ip(addr[i]),
             block=block(i), parent=None if parent[i] is None else names[parent[i]], depth=depth[i],
             children=tuple(names[c] for c in children[i]))
        for i in range(n)
    ]

    # Interfaces: port 0 is the uplink (non-root nodes), then one per child in order.
    def port_of_child(p: int, c: int) -> int:
        return children[p].index(c) + (0 if parent[p] is None else 1)

    base_link = exp.links.resolve(DirParams(), DirParams())
    link_down: dict[int, DirParams] = {c: base_link[0] for c in range(1, n)}
    link_up: dict[int, DirParams] = {c: base_link[1] for c in range(1, n)}
    by_name = {nm: i for i, nm in enumerate(names)}
    for k, ov in enumerate(exp.links.overrides):
        if ov.link is not None:
            a, b = ov.link
            for x in (a, b):
                if x not in by_name:
                    raise PlanError(f"links.overrides[{k}].link: no node named {x!r}")
            ia, ib = by_name[a], by_name[b]
            if parent[ib] == ia:
                targets = [ib]
            elif parent[ia] == ib:
                targets = [ia]
            else:
                raise PlanError(f"links.overrides[{k}].link: {a} and {b} are not neighbours")
        else:
            if ov.subtree not in by_name:
                raise PlanError(f"links.overrides[{k}].subtree: no node named {ov.subtree!r}")
            root = by_name[ov.subtree]  # type: ignore[index]
            targets = [c for c in range(root, root + _size(children, root)) if c != 0]
        for c in targets:
            link_down[c], link_up[c] = ov.resolve(link_down[c], link_up[c])

    links: list[Link] = []
    routes: dict[str, list[Route]] = {nm: [] for nm in names}
    lbase = int(link_pool.network_address)
    for c in range(1, n):
        p = parent[c]
        assert p is not None
        pa, ca = ip(lbase + 2 * (c - 1)), ip(lbase + 2 * (c - 1) + 1)
        p_if, c_if = f"{names[p]}-eth{port_of_child(p, c)}", f"{names[c]}-eth0"
        links.append(Link(id=f"{names[p]}-{names[c]}", parent=names[p], child=names[c], parent_if=p_if,
                          child_if=c_if, parent_addr=pa, child_addr=ca, down=link_down[c], up=link_up[c]))
        routes[names[p]].append(Route(dst=block(c), via=ca, dev=p_if, src=ip(addr[p])))
        routes[names[c]].insert(0, Route(dst="default", via=pa, dev=c_if, src=ip(addr[c])))
    plan = NetworkPlan(nodes=nodes, links=links, routes=routes, seed=exp.seed)
    plan.groups = build_groups(with_protocol_groups(exp, plan), plan)
    return plan


def choose_senders(exp: Experiment, plan: NetworkPlan) -> list[str]:
    """The workload's senders' names: its list (checked), or a seeded draw of its count."""
    members = [n.name for n in plan.members]
    senders = exp.workload.get("senders", 0)
    if isinstance(senders, list):
        unknown = [s for s in senders if s not in members]
        if unknown:        # a FieldError: the loader says the file and line
            raise FieldError(("workload", "senders"), f"{unknown} are not members")
        return senders
    if not isinstance(senders, int) or senders < 0 or senders > len(members):
        raise FieldError(("workload", "senders"), f"{senders!r} is not a count between 0 and {len(members)} or a list")
    return sorted(random.Random(f"{exp.seed}/senders").sample(members, senders),
                  key=lambda m: plan.node(m).index)


DERIVED_BASE = ipaddress.IPv4Address("239.192.0.1")     # derived groups' addresses (organisation-local scope)


def with_protocol_groups(exp: Experiment, plan: NetworkPlan):
    """The experiment's `multicast:` section plus the groups its protocol needs and it does not declare (the
    protocol adapter's `multicast_groups`: QSM's regions, pbcast's data group), addressed from 239.192.0.1 on,
    skipping the declared addresses. Unchanged when the protocol derives none (so are older plans)."""
    from orchestrator.mcast.spec import GroupSpec, MulticastSpec
    from orchestrator.protocols import ADAPTERS, Adapter, GroupContext

    if exp.protocol is None or ADAPTERS.get(exp.protocol.name, Adapter()).multicast_groups is \
            Adapter.multicast_groups:
        return exp.multicast
    declared = list(exp.multicast.groups) if exp.multicast else []
    ctx = GroupContext(names=[m.name for m in plan.members], senders=choose_senders(exp, plan),
                       declared=[g.name for g in declared])
    extra = exp.protocol.derived_groups(ctx)
    if not extra:
        return exp.multicast
    used = {g.address for g in declared}
    addresses = (a for a in (str(DERIVED_BASE + i) for i in range(1 << 16)) if a not in used)
    try:
        groups = [GroupSpec(name=g["name"], address=next(addresses), members=g["members"],
                            senders=g.get("senders", "all")) for g in extra]
        return MulticastSpec(groups=[*declared, *groups])
    except ValueError as exc:         # pydantic's ValidationError is one: its first error's message
        errors = getattr(exc, "errors", None)
        why = errors()[0]["msg"].removeprefix("Value error, ") if errors else str(exc)
        raise PlanError(f"protocol.{exp.protocol.name}: a multicast group it needs: {why}") from None


def _size(children: list[list[int]], i: int) -> int:
    size, stack = 0, [i]
    while stack:
        size += 1
        stack.extend(children[stack.pop()])
    return size


def next_hop(plan: NetworkPlan, at: str, dst_addr: str) -> str | None:
    """Follow the plan's routes one hop (longest prefix match, as the kernel does). None: delivered locally."""
    node = plan.node(at)
    if node.address == dst_addr:
        return None
    target = ipaddress.IPv4Address(dst_addr)
    best: tuple[int, Route] | None = None
    for r in plan.routes[at]:
        net = ipaddress.IPv4Network("0.0.0.0/0" if r.dst == "default" else r.dst)
        if target in net and (best is None or net.prefixlen > best[0]):
            best = (net.prefixlen, r)
    if best is None:
        raise PlanError(f"{at} has no route to {dst_addr}")
    via = best[1].via
    for link in plan.links_of(at):
        if via in (link.parent_addr, link.child_addr):
            return link.child if via == link.child_addr else link.parent
    raise PlanError(f"{at}: next hop {via} is not on any of its links")


def path(plan: NetworkPlan, src: str, dst: str, limit: int | None = None) -> list[str]:
    """The node sequence a packet from `src` to `dst`'s address takes under the plan's routes."""
    hops, at, addr = [src], src, plan.node(dst).address
    limit = limit or 2 * len(plan.nodes)
    while (nxt := next_hop(plan, at, addr)) is not None:
        hops.append(nxt)
        at = nxt
        if len(hops) > limit:
            raise PlanError(f"routing loop from {src} to {dst}: {hops[:10]}...")
    return hops
