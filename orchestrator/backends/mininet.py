"""The Mininet backend: hosts that route, no switches, no controller, veth links (docs/architecture.md §3).

Every node is a named network namespace `<lab>-<node>` (so the lab outlives the `up` process and later
`exec`/`status`/`run` calls find it). `exec` and `orchestrator cli` use Mininet `Node`s: `NetnsNode` starts
Mininet's shell (mnexec + bash) inside the named namespace, so its `cmd`, `sendInt` and `terminate` are Mininet's
own; the run's processes (nodes, captures, probes) start with `ip netns exec` (`popen`).

Departure from Mininet's `Topo`/`Link`/`TCIntf` for the wiring: those spawn several processes per interface and
print-and-continue when tc fails (a kernel without netem then silently gets no delay). Here the wiring is one
`ip -batch` for all namespaces, one for all veth pairs, then one `ip -batch` + one `tc -batch` per namespace
(run four at a time), with every return code checked.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from mininet.node import Node as MininetNode

from orchestrator.backends import budgets, netns
from orchestrator.backends.base import Backend, Progress
from orchestrator.backends.local import LocalDriver
from orchestrator.errors import BackendError, DelayLineDied
from orchestrator.mcast import realise as mcast
from orchestrator.plan import Link, NetworkPlan
from orchestrator.shaping import delayline, shapers
from orchestrator.shaping.params import DirParams
from orchestrator.shard import Part, tunnel_ip_lines
from orchestrator.state import LabState, ns_name

BATCH = 250  # lines per root-namespace batch, so progress moves on large trees


class NetnsNode(MininetNode):
    """A Mininet node whose shell runs inside an existing named namespace instead of a new anonymous one."""

    def __init__(self, name: str, netns_name: str, **params):
        self.netns_name = netns_name
        super().__init__(name, inNamespace=False, **params)

    def _popen(self, cmd, **params):
        if self.shell is None and cmd and cmd[0] == "mnexec":   # the shell itself: start it in our namespace
            cmd = ["ip", "netns", "exec", self.netns_name] + list(cmd)
        return super()._popen(cmd, **params)


def _egress(plan: NetworkPlan, node: str, dilation: float = 1.0) -> list[tuple[str, DirParams, Link, str]]:
    """(interface, params, link, direction) of every egress of `node`; the params as the shaper realises them at
    time dilation `dilation` (the plan's are virtual: docs/virtual-time.md)."""
    out = []
    for link in plan.links_of(node):
        if link.parent == node:
            out.append((link.parent_if, link.down.dilated(dilation), link, "down"))
        else:
            out.append((link.child_if, link.up.dilated(dilation), link, "up"))
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


def node_shaping(plan: NetworkPlan, node: str, shaper: str, dilation: float = 1.0) -> tuple[list[str], str | None]:
    """(tc batch lines, iptables-restore input or None) for one node's egress interfaces (pure)."""
    s = shapers.get(shaper)
    egress = [(dev, params) for dev, params, _, _ in _egress(plan, node, dilation)]
    return [x for dev, d in egress for x in s.tc_lines(dev, d)], s.node_rules(egress)


def delayline_queues(plan: NetworkPlan, lab: str, dilation: float = 1.0,
                     nodes: frozenset[str] | None = None) -> list[delayline.QueueSpec]:
    """One delay-line queue per shaped link direction, numbered per namespace as `node_shaping` numbers them (of
    `nodes` only: a machine's part of a lab split over machines)."""
    out = []
    for n in plan.nodes:
        if nodes is not None and n.name not in nodes:
            continue
        for queue_num, (_, params, link, direction) in enumerate(_egress(plan, n.name, dilation)):
            if not params.is_null():
                out.append(delayline.QueueSpec(id=f"{link.id}/{direction}",
                                               netns=str(netns.NETNS_DIR / ns_name(lab, n.name)),
                                               queue_num=queue_num, params=params))
    return out


NODE_SYSCTLS = {
    "net.ipv4.ip_forward": "1",
    # Only IPv4 is shaped and routed; IPv6 would add unshaped router solicitations and DAD traffic.
    "net.ipv6.conf.all.disable_ipv6": "1",
    "net.ipv6.conf.default.disable_ipv6": "1",
}


class MininetBackend(Backend):
    driver_class = LocalDriver
    name = "mininet"
    part: Part | None = None

    def __init__(self, part: Part | None = None) -> None:
        """`part`: build only this machine's part of a lab split over machines (orchestrator.shard): its nodes,
        the links between them, and its side of each cut link as a VXLAN device; None: the whole plan."""
        self.part = part

    # --- build ------------------------------------------------------------------------------------------------
    def up(self, plan: NetworkPlan, state: LabState, progress: Progress) -> None:
        lab, shaper, part = state.lab, state.shaper, self.part
        names = [n.name for n in plan.nodes if part is None or n.name in part.nodes]
        links = [lk for lk in plan.links if part is None or part.has_link(lk.parent, lk.child)]
        # Checked before the intent is recorded: a failed `up` must not delete namespaces that are not its own.
        clash = netns.existing([ns_name(lab, n) for n in names])
        if clash:
            raise BackendError(f"namespace {clash[0]} already exists (another lab, or a leftover: "
                               f"`orchestrator teardown {lab}`)")
        # Record the intent before creating anything: a crash half-way through still leaves a complete list.
        state.namespaces = [ns_name(lab, n) for n in names]
        state.save()

        self._create_namespaces(plan, state, progress)

        progress.start("links", len(links))
        for i in range(0, len(links), BATCH):
            chunk = links[i:i + BATCH]
            netns.ip_batch([f"link add {lk.child_if} netns {ns_name(lab, lk.child)} type veth "
                            f"peer name {lk.parent_if} netns {ns_name(lab, lk.parent)}" for lk in chunk])
            progress.advance("links", len(chunk))
        if part is not None and part.tunnels:
            # Made from this (the machine's) namespace, where the underlay is: the tunnel's socket stays here.
            progress.note(f"{len(part.tunnels)} cut link(s) as VXLAN tunnels ...")
            netns.ip_batch([x for t in part.tunnels for x in tunnel_ip_lines(t, ns_name(lab, t.node))])

        # sysctls: setns in this thread, sequentially (cheap, no process).
        for n in names:
            netns.write_sysctls(ns_name(lab, n), NODE_SYSCTLS)
        raised = netns.fit_neigh_table(len(netns.existing_all()))
        if raised:
            progress.note(f"the kernel's ARP table (one for all namespaces) raised to {raised[2]} entries")

        s = shapers.get(shaper)
        if s.userspace:
            # The queues are bound before any rule exists (a rule without a listener drops: fail closed).
            progress.note("starting the delay line ...")
            self._start_delayline(plan, state)

        def configure(node: str) -> None:
            ns = ns_name(lab, node)
            netns.ip_batch(node_ip_lines(plan, node), ns)
            s.apply(netns, ns, [(dev, params) for dev, params, _, _ in _egress(plan, node, state.dilation)])

        progress.start("addresses, routes, shaping", len(names))
        netns.parallel(configure, names, on_done=lambda: progress.advance("addresses, routes, shaping"))
        if plan.groups:
            # After the links exist: the daemon registers them (and each member's mc0) as multicast interfaces.
            progress.note("multicast routing ...")
            here = part.nodes if part is not None else None      # a machine's part: its own nodes' routes
            mcast.prepare_namespaces(plan, lambda n: ns_name(lab, n), here)
            mcast.start(plan, state, lambda n: ns_name(lab, n), here)
        state.status = "up"
        state.save()

    def _create_namespaces(self, plan: NetworkPlan, state: LabState, progress: Progress) -> None:
        """One named namespace `<lab>-<node>` per node (the Docker backend attaches containers' instead)."""
        names = [n.name for n in plan.nodes if self.part is None or n.name in self.part.nodes]
        progress.start("namespaces", len(names))
        for i in range(0, len(names), BATCH):
            chunk = names[i:i + BATCH]
            netns.ip_batch([f"netns add {ns_name(state.lab, n)}" for n in chunk])
            progress.advance("namespaces", len(chunk))

    # --- teardown ---------------------------------------------------------------------------------------------
    def teardown(self, state: LabState, progress: Progress) -> None:
        self._teardown_before_processes(state, progress)
        present = netns.existing(state.namespaces)
        progress.start("processes", 1)
        stuck = netns.kill_and_wait(netns.pids_in(present))
        progress.advance("processes")
        if stuck:
            raise BackendError(f"processes {stuck[:5]} inside the lab did not die")
        budgets.remove_recorded(state)         # the CPU-budget cgroups of a run that did not remove them
        # The delay line and the multicast daemon hold sockets in the namespaces: stop them before deleting them.
        mcast.stop(state)
        self._stop_delayline(state)
        progress.start("namespaces", len(present))
        netns.delete_namespaces(present)
        progress.advance("namespaces", len(present))

    def _teardown_before_processes(self, state: LabState, progress: Progress) -> None:
        """Hook for backends that own more than namespaces (the Docker backend removes its containers)."""

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

    def isolate(self, state: LabState, names: list[str], on: bool) -> dict[str, str]:
        """A silent crash's cut (netns.silent_rules), one iptables-restore per member's namespace, at once."""
        text = netns.silent_rules(on)

        def one(n: str) -> tuple[str, str | None]:
            ns = ns_name(state.lab, n)
            if ns not in state.namespaces:
                return n, f"node {n!r} of lab {state.lab!r} does not exist"
            try:
                netns.iptables_restore(ns, text)
            except BackendError as exc:
                return n, str(exc)
            return n, None

        if not names:
            return {}
        with ThreadPoolExecutor(max_workers=min(16, len(names))) as pool:
            return {n: e for n, e in pool.map(one, names) if e}

    # --- live link changes ------------------------------------------------------------------------------------
    def set_link(self, state: LabState, plan: NetworkPlan, link_id: str, direction: str,
                 params: DirParams | None) -> None:
        link = next((lk for lk in plan.links if lk.id == link_id), None)
        if link is None:
            raise BackendError(f"no link {link_id!r}")
        key = f"{link_id}/{direction}"
        was_cut = state.link_overrides.get(key) == "cut"
        state.link_overrides[key] = "cut" if params is None else params.to_json()
        state.save()
        s = shapers.get(state.shaper)
        node, dev = (link.parent, link.parent_if) if direction == "down" else (link.child, link.child_if)
        # Every egress of the node with its parameters now (None: cut): the node's whole mangle table. The state
        # keeps virtual parameters (as the plan); the shaper gets them dilated.
        n = state.dilation
        effective = []
        for d, planned, lk, dirn in _egress(plan, node, n):
            eff = state.link_overrides.get(f"{lk.id}/{dirn}")
            effective.append((d, None if eff == "cut" else (DirParams.from_json(eff).dilated(n) if eff else planned)))
        s.set_link(netns, ns_name(state.lab, node), dev, None if params is None else params.dilated(n), effective,
                   client=self._client(state) if s.userspace else None, key=key, was_cut=was_cut)

    def health(self, state: LabState) -> list[str]:
        problems = []
        missing = [ns for ns in state.namespaces if not (netns.NETNS_DIR / ns).exists()]
        if missing:
            problems.append(f"{len(missing)} of {len(state.namespaces)} namespaces are missing (e.g. {missing[0]})")
        if state.delayline:
            pid = state.delayline.get("pid")
            if not pid or not _is_delayline(pid, state):
                problems.append(f"the delay line (pid {pid}) is not running: links are blackholed")
        return problems + mcast.health(state)

    def check(self, state: LabState) -> None:
        if mcast.health(state):
            raise BackendError(mcast.health(state)[0])
        if not shapers.get(state.shaper).userspace:
            return
        pid = (state.delayline or {}).get("pid")
        if not pid or not _is_delayline(pid, state):
            raise DelayLineDied(f"the delay line (pid {pid}) is gone: every shaped link is blackholed "
                                f"(log: {(state.delayline or {}).get('log')})")
        self._client(state).ping()     # raises DelayLineDied when the kernel dropped queued packets

    def multicast_routes(self, state: LabState, changes: dict[str, dict]) -> dict:
        return mcast.change_routes(state, changes)

    def shaper_stats(self, state: LabState) -> dict | None:
        s = shapers.get(state.shaper)
        return s.counters(self._client(state)) if s.userspace else None

    # --- the delay line ---------------------------------------------------------------------------------------
    def _client(self, state: LabState) -> delayline.DelayLineClient:
        if getattr(self, "_dl_client", None) is None or self._dl_client.path != state.delayline["control"]:
            self._dl_client = delayline.DelayLineClient(state.delayline["control"])
        return self._dl_client

    def _start_delayline(self, plan: NetworkPlan, state: LabState) -> None:
        # A short private directory for the control socket (unix socket paths are limited to 108 bytes).
        sockdir = tempfile.mkdtemp(prefix=f"orch-{state.lab}-")
        config = state.dir / "delayline.json"
        state.delayline = {"pid": None, "control": f"{sockdir}/dl.sock", "config": str(config),
                           "log": str(state.dir / "delayline.log"), "sockdir": sockdir}
        state.save()
        queues = delayline_queues(plan, state.lab, state.dilation, self.part.nodes if self.part else None)
        config.write_text(json.dumps(delayline.render_config(queues, state.delayline["control"],
                                                             seed=plan.seed)))
        proc = delayline.start_delayline(config, rt_priority=50, log_path=state.delayline["log"],
                                         die_with_parent=False)
        proc.stdout.close()
        state.delayline["pid"] = proc.pid
        state.save()

    def _stop_delayline(self, state: LabState) -> None:
        if not state.delayline:
            return
        pids = {p for p in [state.delayline.get("pid")] if p and _is_delayline(p, state)}
        pids |= set(_delayline_pids_by_config(state.delayline["config"]))   # also one started but not recorded
        for pid in pids:
            try:
                os.kill(pid, signal.SIGTERM)          # releases what it holds and exits
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10
        while any(Path(f"/proc/{p}").exists() and not netns._is_zombie(p) for p in pids) \
                and time.monotonic() < deadline:
            time.sleep(0.02)
        netns.kill_and_wait([p for p in pids if Path(f"/proc/{p}").exists()])
        shutil.rmtree(state.delayline.get("sockdir", ""), ignore_errors=True)


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def _is_delayline(pid: int, state: LabState) -> bool:
    """Is `pid` this lab's delay line (not a recycled pid)?"""
    return state.delayline is not None and state.delayline["config"] in _cmdline(pid) \
        and not netns._is_zombie(pid)


def _delayline_pids_by_config(config: str) -> list[int]:
    return [int(e.name) for e in os.scandir("/proc") if e.name.isdigit()
            and "orchestrator.shaping.delayline" in _cmdline(int(e.name)) and config in _cmdline(int(e.name))]
