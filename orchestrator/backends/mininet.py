"""The Mininet backend: hosts that route, no switches, no controller, veth links (DESIGN.md §3).

Every node is a named network namespace `<lab>-<node>` (so the lab outlives the `up` process and later
`exec`/`status`/`run` calls find it). Processes inside a node are Mininet `Node`s: `NetnsNode` starts Mininet's
shell (mnexec + bash) inside the named namespace, so `cmd`, `popen` (mnexec -a), `sendInt` and `terminate` are
Mininet's own.

Departure from Mininet's `Topo`/`Link`/`TCIntf` for the wiring: those spawn several processes per interface and
print-and-continue when tc fails (a kernel without netem then silently gets no delay). Here the wiring is one
`ip -batch` for all namespaces, one for all veth pairs, then one `ip -batch` + one `tc -batch` per namespace
(run four at a time), with every return code checked.
"""
from __future__ import annotations

import os
import subprocess

from mininet.node import Node as MininetNode

from orchestrator.backends import netns
from orchestrator.backends.base import Backend, Progress
from orchestrator.errors import BackendError
from orchestrator.plan import Link, NetworkPlan
from orchestrator.shaping import render
from orchestrator.shaping.params import DirParams
from orchestrator.state import LabState

BATCH = 250  # lines per root-namespace batch, so progress moves on large trees


def ns_name(lab: str, node: str) -> str:
    return f"{lab}-{node}"


class NetnsNode(MininetNode):
    """A Mininet node whose shell runs inside an existing named namespace instead of a new anonymous one."""

    def __init__(self, name: str, netns_name: str, **params):
        self.netns_name = netns_name
        super().__init__(name, inNamespace=False, **params)

    def _popen(self, cmd, **params):
        if self.shell is None and cmd and cmd[0] == "mnexec":   # the shell itself: start it in our namespace
            cmd = ["ip", "netns", "exec", self.netns_name] + list(cmd)
        return super()._popen(cmd, **params)


def _egress(plan: NetworkPlan, node: str) -> list[tuple[str, DirParams, Link, str]]:
    """(interface, params, link, direction) of every egress of `node`."""
    out = []
    for link in plan.links_of(node):
        if link.parent == node:
            out.append((link.parent_if, link.down, link, "down"))
        else:
            out.append((link.child_if, link.up, link, "up"))
    return out


def node_ip_lines(plan: NetworkPlan, node: str) -> list[str]:
    """`ip -batch` lines that configure one node: loopback address, link addresses, routes (pure)."""
    n = plan.node(node)
    lines = ["link set lo up", f"addr add {n.address}/32 dev lo"]
    for link in plan.links_of(node):
        dev, addr = (link.parent_if, link.parent_addr) if link.parent == node else (link.child_if, link.child_addr)
        lines += [f"addr add {addr}/31 dev {dev}", f"link set {dev} up"]
    for r in plan.routes[node]:
        lines.append(f"route add {r.dst} via {r.via} dev {r.dev} src {r.src}")
    return lines


def node_shaping(plan: NetworkPlan, node: str, shaper: str) -> tuple[list[str], list[str]]:
    """(tc batch lines, iptables mangle rules) for one node's egress interfaces (pure)."""
    tc, ipt = [], []
    for dev, params, _, _ in _egress(plan, node):
        tc += render.tc_lines(shaper, dev, params)
        ipt += render.iptables_lines(shaper, dev, params)
    return tc, ipt


NODE_SYSCTLS = {
    "net.ipv4.ip_forward": "1",
    # Only IPv4 is shaped and routed; IPv6 would add unshaped router solicitations and DAD traffic.
    "net.ipv6.conf.all.disable_ipv6": "1",
    "net.ipv6.conf.default.disable_ipv6": "1",
}


class MininetBackend(Backend):
    name = "mininet"

    # --- build ------------------------------------------------------------------------------------------------
    def up(self, plan: NetworkPlan, state: LabState, progress: Progress) -> None:
        lab, shaper = state.lab, state.shaper
        names = [n.name for n in plan.nodes]
        # Record the intent before creating anything: a crash half-way through still leaves a complete list.
        state.namespaces = [ns_name(lab, n) for n in names]
        state.save()
        clash = netns.existing(state.namespaces)
        if clash:
            raise BackendError(f"namespace {clash[0]} already exists (another lab, or a leftover: "
                               f"`orchestrator teardown {lab}`)")

        progress.start("namespaces", len(names))
        for i in range(0, len(names), BATCH):
            chunk = names[i:i + BATCH]
            netns.ip_batch([f"netns add {ns_name(lab, n)}" for n in chunk])
            progress.advance("namespaces", len(chunk))

        progress.start("links", len(plan.links))
        for i in range(0, len(plan.links), BATCH):
            chunk = plan.links[i:i + BATCH]
            netns.ip_batch([f"link add {lk.child_if} netns {ns_name(lab, lk.child)} type veth "
                            f"peer name {lk.parent_if} netns {ns_name(lab, lk.parent)}" for lk in chunk])
            progress.advance("links", len(chunk))

        # sysctls: setns in this thread, sequentially (cheap, no process).
        for n in names:
            netns.write_sysctls(ns_name(lab, n), NODE_SYSCTLS)

        def configure(node: str) -> None:
            ns = ns_name(lab, node)
            netns.ip_batch(node_ip_lines(plan, node), ns)
            tc, ipt = node_shaping(plan, node, shaper)
            netns.ip_batch(tc, ns, tool="tc")
            if ipt:
                netns.iptables_restore(ns, render.iptables_restore_input(ipt))

        progress.start("addresses, routes, shaping", len(names))
        netns.parallel(configure, names, on_done=lambda: progress.advance("addresses, routes, shaping"))
        state.status = "up"
        state.save()

    # --- teardown ---------------------------------------------------------------------------------------------
    def teardown(self, state: LabState, progress: Progress) -> None:
        present = netns.existing(state.namespaces)
        progress.start("processes", 1)
        stuck = netns.kill_and_wait(netns.pids_in(present))
        progress.advance("processes")
        if stuck:
            raise BackendError(f"processes {stuck[:5]} inside the lab did not die")
        progress.start("namespaces", len(present))
        netns.delete_namespaces(present)
        progress.advance("namespaces", len(present))

    # --- processes --------------------------------------------------------------------------------------------
    def node(self, state: LabState, node: str) -> NetnsNode:
        ns = ns_name(state.lab, node)
        if ns not in state.namespaces or not (netns.NETNS_DIR / ns).exists():
            raise BackendError(f"node {node!r} of lab {state.lab!r} does not exist")
        return NetnsNode(node, ns)

    def exec(self, state: LabState, node: str, argv: list[str]) -> int:
        n = self.node(state, node)
        try:
            p = n.popen(argv, stdin=None, stdout=None, stderr=None)
            try:
                return p.wait()
            except KeyboardInterrupt:
                p.terminate()
                return p.wait()
        finally:
            n.terminate()

    def popen(self, state: LabState, node: str, argv: list[str], **kwargs) -> subprocess.Popen:
        ns = ns_name(state.lab, node)
        if ns not in state.namespaces:
            raise BackendError(f"node {node!r} of lab {state.lab!r} does not exist")
        return subprocess.Popen(["ip", "netns", "exec", ns, *argv], **kwargs)

    # --- live link changes ------------------------------------------------------------------------------------
    def set_link(self, state: LabState, plan: NetworkPlan, link_id: str, direction: str,
                 params: DirParams | None) -> None:
        link = next((lk for lk in plan.links if lk.id == link_id), None)
        if link is None:
            raise BackendError(f"no link {link_id!r}")
        if state.shaper not in ("netem", "tbf"):
            raise BackendError(f"live link changes are not implemented for shaper {state.shaper!r}")
        node, dev = (link.parent, link.parent_if) if direction == "down" else (link.child, link.child_if)
        ns = ns_name(state.lab, node)
        state.link_overrides[f"{link_id}/{direction}"] = "cut" if params is None else params.to_json()
        state.save()
        # del + add, never `change`: on kernel 6.1 `change` keeps an omitted rate/reorder of the old qdisc.
        netns.ip_batch(render.tc_clear_lines(dev), ns, tool="tc", force=True)
        netns.ip_batch(render.tc_lines(state.shaper, dev, params or DirParams()), ns, tool="tc")
        # The node's whole mangle table, re-rendered from the effective parameters of all its egresses.
        rules = []
        for d, planned, lk, dirn in _egress(plan, node):
            eff = state.link_overrides.get(f"{lk.id}/{dirn}")
            if eff == "cut":
                rules.append(f"-A POSTROUTING -o {d} -j DROP")
            else:
                rules += render.iptables_lines(state.shaper, d, DirParams.from_json(eff) if eff else planned)
        netns.run_checked(["ip", "netns", "exec", ns, "iptables-restore", "-w"],
                          stdin=render.iptables_restore_input(rules), what=f"iptables-restore in {ns}")

    def health(self, state: LabState) -> list[str]:
        problems = []
        missing = [ns for ns in state.namespaces if not (netns.NETNS_DIR / ns).exists()]
        if missing:
            problems.append(f"{len(missing)} of {len(state.namespaces)} namespaces are missing (e.g. {missing[0]})")
        if state.delayline:
            pid = state.delayline.get("pid")
            if not pid or not os.path.exists(f"/proc/{pid}"):
                problems.append(f"the delay line (pid {pid}) is not running: links are blackholed")
        return problems

    def check(self, state: LabState) -> None:
        return None

    def shaper_stats(self, state: LabState) -> dict | None:
        return None
