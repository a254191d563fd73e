"""Multicast groups in the plan (pure): each group's static shared tree, the kernel routes realising it, and what
each member's node must do to send and receive (`member_endpoints`).

The tree rule. A group's tree is the smallest subtree of the topology tree that spans the group's members: the
link (parent, child) is on it iff the child's subtree holds some but not all of the group's members. Every node
on it (routers that are not members included) forwards a group packet once on every tree link except the one it
came from; a packet therefore crosses each tree link once, away from its sender, and no other link.

How the kernel does it (docs/multicast.md has what was measured): every node on a tree runs the kernel's
multicast forwarding (ipmr) with a (*,G) entry per group (bidirectional, as PIM-BIDIR uses it: a (*,*) "proxy"
entry makes every tree link an accepted incoming interface, and a (*,G) packet goes out of every tree link but
the one it came in on), see `mfc_entries`. A member also has `mc0`, a veth whose peer `mc0p` stays down (so
nothing is ever transmitted on it, and it is never shaped): its node sends on it (IP_MULTICAST_IF) and joins the
group on it. The kernel loops a member's own packet back through mc0 into ipmr (entry (self, G) with incoming
interface mc0), which forwards it onto the tree links, each copy shaped once by the link's egress. A packet from
elsewhere is forwarded onto mc0 too (the (*,G) entry of a member lists mc0 among its outgoing interfaces); the
kernel delivers that copy locally (looped back, never transmitted) exactly once, whatever link it came in on.
Members never join on the links: a copy forwarded out of a link the node has joined on is looped back through
that link's output path and delivered a second time (and, while the delay line's rules were in POSTROUTING,
queued a second time too).
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from orchestrator.errors import PlanError

if TYPE_CHECKING:  # plan.py imports this module
    from orchestrator.mcast.spec import MulticastSpec
    from orchestrator.plan import NetworkPlan

SEND_IF = "mc0"          # the member's local multicast interface (a veth; its peer stays down)
SEND_IF_PEER = "mc0p"
MAXVIFS = 32             # the kernel's ipmr limit on interfaces per namespace (include/linux/mroute_base.h)


@dataclass(frozen=True)
class Group:
    name: str
    address: str
    port: int
    ttl: int                    # the senders' TTL: the tree's diameter in hops + 2 (the last hop is into mc0)
    members: tuple[str, ...]    # pre-order
    senders: tuple[str, ...]    # pre-order; each gets an (S,G) route; those outside `members` only send
    nodes: tuple[str, ...]      # the tree's nodes, pre-order (members and the routers between them)
    links: tuple[str, ...]      # the tree's link ids, in plan order

    def to_json(self) -> dict:
        return {"name": self.name, "address": self.address, "port": self.port, "ttl": self.ttl,
                "members": list(self.members), "senders": list(self.senders), "nodes": list(self.nodes),
                "links": list(self.links)}

    @classmethod
    def from_json(cls, d: dict) -> "Group":
        return cls(name=d["name"], address=d["address"], port=int(d["port"]), ttl=int(d["ttl"]),
                   members=tuple(d["members"]), senders=tuple(d["senders"]), nodes=tuple(d["nodes"]),
                   links=tuple(d["links"]))


def _names(plan: "NetworkPlan", value, what: str) -> list[str]:
    members = [n.name for n in plan.members]
    if value == "all":
        return members
    for x in value:
        try:
            node = plan.node(x)
        except PlanError:
            raise PlanError(f"{what}: no node named {x!r}") from None
        if node.role != "member":
            raise PlanError(f"{what}: {x!r} is a router, not a member (members are h<i>)")
    return sorted(value, key=lambda x: plan.node(x).index)


def _spans(plan: "NetworkPlan") -> dict[str, tuple[int, int]]:
    """Each node's subtree as a pre-order index range [lo, hi) (computed once per plan)."""
    spans = getattr(plan, "_mc_spans", None)
    if spans is None:
        size = [1] * len(plan.nodes)
        for n in reversed(plan.nodes):             # children follow their parent in pre-order
            for c in n.children:
                size[n.index] += size[plan.node(c).index]
        spans = {n.name: (n.index, n.index + size[n.index]) for n in plan.nodes}
        object.__setattr__(plan, "_mc_spans", spans)
    return spans


def _below(plan: "NetworkPlan", node: str, root: str) -> bool:
    lo, hi = _spans(plan)[root]
    return lo <= plan.node(node).index < hi


def steiner_links(plan: "NetworkPlan", members: list[str]) -> list[str]:
    """Link ids of the smallest subtree spanning `members`: the link to child c is on it iff c's subtree holds
    some but not all of them (pre-order: a subtree is one index range)."""
    idx = sorted(plan.node(m).index for m in members)
    total = len(idx)
    out = []
    spans = _spans(plan)
    for lk in plan.links:
        lo, hi = spans[lk.child]
        inside = _count_between(idx, lo, hi)
        if 0 < inside < total:
            out.append(lk.id)
    return out


def _count_between(sorted_xs: list[int], lo: int, hi: int) -> int:
    import bisect

    return bisect.bisect_left(sorted_xs, hi) - bisect.bisect_left(sorted_xs, lo)


def _diameter(adj: dict[str, list[str]], start: str) -> int:
    def farthest(src: str) -> tuple[str, int]:
        dist, frontier = {src: 0}, [src]
        while frontier:
            nxt = []
            for v in frontier:
                for w in adj[v]:
                    if w not in dist:
                        dist[w] = dist[v] + 1
                        nxt.append(w)
            frontier = nxt
        far = max(dist, key=lambda v: (dist[v], v))
        return far, dist[far]
    a, _ = farthest(start)
    return farthest(a)[1]


def build_groups(spec: "MulticastSpec | None", plan: "NetworkPlan") -> list[Group]:
    """The groups of the experiment's `multicast:` section on `plan` (PlanError, exit 2, for bad member names or
    a node that would need more than the kernel's 32 multicast interfaces)."""
    if spec is None:
        return []
    groups = []
    for k, g in enumerate(spec.groups):
        members = _names(plan, g.members, f"multicast.groups[{k}].members")
        # `all` senders: every member of the group; listed senders outside the members send only (on the tree,
        # with a (self,G) route and mc0 to send from, never receiving the group's packets)
        senders = members if g.senders == "all" else _names(plan, g.senders, f"multicast.groups[{k}].senders")
        ends = sorted({*members, *senders}, key=lambda x: plan.node(x).index)
        links = steiner_links(plan, ends)
        on = {ends[0]}
        adj: dict[str, list[str]] = {ends[0]: []}
        for lid in links:
            lk = _link(plan, lid)
            on |= {lk.parent, lk.child}
            adj.setdefault(lk.parent, []).append(lk.child)
            adj.setdefault(lk.child, []).append(lk.parent)
        nodes = sorted(on, key=lambda x: plan.node(x).index)
        groups.append(Group(name=g.name, address=g.address, port=g.port, ttl=_diameter(adj, ends[0]) + 2,
                            members=tuple(members), senders=tuple(senders), nodes=tuple(nodes),
                            links=tuple(links)))
    for n in plan.nodes:
        count = len(vifs(plan, n.name, groups))
        if count > MAXVIFS:
            raise PlanError(f"multicast: node {n.name} would need {count} multicast interfaces; the kernel allows "
                            f"{MAXVIFS} (lower topology.degree or the groups' spread)")
    return groups


def _link(plan: "NetworkPlan", link_id: str):
    parent, _, child = link_id.partition("-")
    return plan.link_of(parent, child)


def _ifname(link, node: str) -> str:
    return link.parent_if if link.parent == node else link.child_if


def tree_ifs(plan: "NetworkPlan", group: Group, node: str) -> list[str]:
    """`node`'s interfaces on `group`'s tree, in the order of `plan.links_of(node)`."""
    on = set(group.links)
    return [_ifname(lk, node) for lk in plan.links_of(node) if lk.id in on]


def is_local_member(plan: "NetworkPlan", node: str, groups: list[Group] | None = None) -> bool:
    """Does `node` need mc0 (is it a member of some group, or a send-only sender to one)?"""
    return any(node in g.members or node in g.senders for g in (plan.groups if groups is None else groups))


def vifs(plan: "NetworkPlan", node: str, groups: list[Group] | None = None) -> list[str]:
    """The interfaces registered with the node's ipmr, in vif-index order: mc0 first (members of a group),
    then every link on some group's tree, in `plan.links_of` order. Empty: the node takes no part."""
    groups = plan.groups if groups is None else groups
    on = {lid for g in groups for lid in g.links}
    out = [SEND_IF] if is_local_member(plan, node, groups) else []
    return out + [_ifname(lk, node) for lk in plan.links_of(node) if lk.id in on]


def towards(plan: "NetworkPlan", group: Group, node: str, sender: str) -> str:
    """The interface of `node` on the tree path to `sender` (mc0 when node is the sender)."""
    if node == sender:
        return SEND_IF
    me = plan.node(node)
    for lk in plan.links_of(node):
        if lk.parent == node and _below(plan, sender, lk.child):     # a child link with the sender below it
            return lk.parent_if
    if not _below(plan, sender, node) and me.parent is not None:
        return plan.link_of(me.parent, node).child_if
    raise PlanError(f"{sender} is not reachable from {node}")


@dataclass(frozen=True)
class MfcEntry:
    """One kernel route of one node: packets from `origin` (ANY = 0.0.0.0) to `group` (ANY: the (*,*) entry)
    whose incoming interface is `iif` go out of every `oifs`."""

    group: str
    origin: str
    iif: str
    oifs: tuple[str, ...]

    def to_json(self) -> dict:
        return {"group": self.group, "origin": self.origin, "iif": self.iif, "oifs": list(self.oifs)}


ANY = "0.0.0.0"


def mfc_entries(plan: "NetworkPlan", node: str, groups: list[Group] | None = None) -> list[MfcEntry]:
    """The kernel routes `node` needs (a shared, bidirectional tree per group; docs/multicast.md):

    - per group whose tree holds the node: (*,G) with incoming interface P, outgoing = the node's tree links of
      the group (+ mc0 at a member). ipmr forwards a (*,G) packet to every outgoing interface but the one it came
      in on, and accepts it on P or on any interface the (*,*) entry of parent P lists;
    - per group the node may send to: (self,G) with incoming mc0, outgoing = its tree links (the looped-back copy
      of its own packets; without it they would be taken for a copy forwarded onto mc0 and only delivered);
    - one (*,*) entry with incoming P, outgoing = every tree link of the node: the "proxy" that makes each tree
      link an accepted incoming interface of the (*,G) entries (never mc0: a copy looped back from mc0 must not
      be forwarded again).

    P is the node's first tree link. O(groups) routes per node, whatever the number of senders. `groups`: the
    plan's groups narrowed to the members present (`narrowed`); the vifs, P and the (*,*) entry stay the plan's,
    as the daemon registered them at `up`."""
    groups = [g for g in (plan.groups if groups is None else groups) if node in g.nodes]
    links = [i for i in vifs(plan, node) if i != SEND_IF]
    if not links:
        return []
    parent = links[0]
    out = []
    for g in groups:
        ifs = tree_ifs(plan, g, node)
        if not ifs:
            continue
        local = node in g.members
        if node in g.senders:
            out.append(MfcEntry(group=g.address, origin=plan.node(node).address, iif=SEND_IF, oifs=tuple(ifs)))
        out.append(MfcEntry(group=g.address, origin=ANY, iif=parent, oifs=tuple(ifs + ([SEND_IF] if local else []))))
    out.append(MfcEntry(group=ANY, origin=ANY, iif=parent, oifs=tuple(links)))
    return out


def narrowed(plan: "NetworkPlan", present: set[str]) -> list[Group]:
    """The plan's groups with only the `present` members and senders, each tree the smallest spanning them (the
    multicast routing of the members in the groups now: a member that left or was removed by a view, or has not
    joined yet, gets no copies; its branch is pruned). Address, port and TTL stay the plan's."""
    out = []
    for g in plan.groups:
        members = tuple(m for m in g.members if m in present)
        senders = tuple(x for x in g.senders if x in present)
        ends = sorted({*members, *senders}, key=lambda x: plan.node(x).index)
        links = tuple(steiner_links(plan, ends)) if ends else ()
        on = set(ends)
        for lid in links:
            lk = _link(plan, lid)
            on |= {lk.parent, lk.child}
        out.append(replace(g, members=members, senders=senders, links=links,
                           nodes=tuple(sorted(on, key=lambda x: plan.node(x).index))))
    return out


def mfc_changes(plan: "NetworkPlan", before: list[Group], after: list[Group]) -> dict[str, dict]:
    """What changes in each node's routes from groups `before` to `after` (both narrowings of the plan's): per
    node whose routes differ, `set` (every route it has after, to add or update) and `delete` ((group, origin) of
    every route of the plan's it must not have: deleting one that is not there is no error), so the change
    holds whatever the daemon had before. Pure."""
    out = {}
    for n in plan.nodes:
        if not vifs(plan, n.name):
            continue
        old, new = mfc_entries(plan, n.name, before), mfc_entries(plan, n.name, after)
        if old == new:
            continue
        keep = {(e.group, e.origin) for e in new}
        # a narrowing's tree is a subtree of the plan's, so the plan's routes hold every one any narrowing has
        every = {(e.group, e.origin) for e in mfc_entries(plan, n.name)}
        out[n.name] = {"set": [e.to_json() for e in new],
                       "delete": [{"group": g, "origin": o} for g, o in sorted(every - keep)]}
    return out


def node_mroute(plan: "NetworkPlan", node: str) -> dict | None:
    """What the multicast daemon installs in `node`'s namespace: {"vifs": [ifname...], "mfc": [...]}; None when
    the node is on no group's tree."""
    v = vifs(plan, node)
    if not v:
        return None
    return {"vifs": v, "mfc": [e.to_json() for e in mfc_entries(plan, node)]}


def member_endpoints(plan: "NetworkPlan", member_name: str) -> list[dict]:
    """For each group `member_name` belongs to (plan order), what its node must do:

    - `name`, `address` (the group), `port`: bind a UDP socket to (address, port) with SO_REUSEADDR to receive;
      send to (address, port).
    - `ttl`: IP_MULTICAST_TTL of the sending socket: the tree's diameter + 2. The kernel forwards only packets
      whose TTL exceeds 1, decrementing it, and the local delivery at the farthest member is itself a forward
      (onto mc0), so a packet must arrive there with TTL 2.
    - `send_if`: IP_MULTICAST_IF of the sending socket (ip_mreqn with this interface's index). Keep
      IP_MULTICAST_LOOP at its default (1): the kernel forwards a local packet only through its looped-back copy.
      The sender therefore also receives its own packets once: drop datagrams whose source is `source`.
    - `join_ifs`: IP_ADD_MEMBERSHIP (ip_mreqn: group, ifindex of each) on the receiving socket. Only mc0: the
      kernel delivers every group packet there once, whatever tree link it arrived on; joining a link as well
      would deliver duplicates.
    - `source`: the member's own address; bind the sending socket to it (the (S,G) routes are keyed on it).
    - `sender`: whether the member may send (the group's `senders`); packets from others are not routed.
    - `receive`: false for a send-only sender (a sender outside the group's members): it joins nothing
      (`join_ifs` empty) and its mc0 is not among the group's outgoing interfaces, so nothing is delivered to it.
    """
    node = plan.node(member_name)
    out = []
    for g in plan.groups:
        if member_name in g.members or member_name in g.senders:
            receive = member_name in g.members
            out.append({"name": g.name, "address": g.address, "port": g.port, "ttl": g.ttl, "send_if": SEND_IF,
                        "join_ifs": [SEND_IF] if receive else [], "source": node.address,
                        "sender": member_name in g.senders, "receive": receive})
    return out


def expected_copies(plan: "NetworkPlan", group: Group, sender: str) -> dict[str, int]:
    """Copies per link direction ("<link id>/down|up") of one packet `sender` sends to `group`: 1 on every tree
    link, directed away from the sender; every other direction 0 (not listed)."""
    out = {}
    for lid in group.links:
        lk = _link(plan, lid)
        below = _below(plan, sender, lk.child)
        out[f"{lid}/{'up' if below else 'down'}"] = 1
    return out


def is_multicast(address: str) -> bool:
    return ipaddress.IPv4Address(address).is_multicast
