"""Realising a plan's multicast groups in a lab's namespaces (used by the namespace backends: Mininet, Docker).

`prepare_namespaces` gives every member of a group its `mc0` (a veth whose peer `mc0p` stays down: a local
interface that is never transmitted on nor shaped) and switches reverse-path filtering off on the interfaces the
kernel forwards multicast on; `start` runs the multicast routing daemon (mrouted.py) on the plan's routes and
records it in the lab state before it exists, so `stop` (teardown, also after a crashed orchestrator) finds it.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

from orchestrator.backends import netns
from orchestrator.errors import BackendError
from orchestrator.mcast import mrouted
from orchestrator.mcast.tree import SEND_IF, SEND_IF_PEER, is_local_member, mfc_entries, node_mroute, vifs
from orchestrator.plan import NetworkPlan
from orchestrator.state import LabState

MODULE = "orchestrator.mcast.mrouted"


def ip_lines(plan: NetworkPlan, node: str) -> list[str]:
    """`ip -batch` lines creating the node's mc0 (pure); none for nodes that are no group's member."""
    if not is_local_member(plan, node):
        return []
    return [f"link add {SEND_IF} type veth peer name {SEND_IF_PEER}", f"link set {SEND_IF} up"]


def sysctls(plan: NetworkPlan, node: str) -> dict[str, str]:
    """rp_filter off on every multicast interface (the kernel uses max(all, interface)); pure."""
    ifs = vifs(plan, node)
    if not ifs:
        return {}
    out = {"net.ipv4.conf.all.rp_filter": "0", "net.ipv4.conf.default.rp_filter": "0"}
    out.update({f"net.ipv4.conf.{i}.rp_filter": "0" for i in ifs})
    return out


def prepare_namespaces(plan: NetworkPlan, ns_of, only: frozenset[str] | None = None) -> None:
    """mc0 and sysctls in every namespace of a group's tree; `ns_of(node)` names a node's namespace. `only`: the
    nodes of this machine's part of a lab over several machines."""
    nodes = [n.name for n in plan.nodes if vifs(plan, n.name) and (only is None or n.name in only)]

    def one(node: str) -> None:
        ns = ns_of(node)
        netns.ip_batch(ip_lines(plan, node), ns)
        netns.write_sysctls(ns, sysctls(plan, node))

    netns.parallel(one, nodes)


def render_config(plan: NetworkPlan, ns_path_of, control: str, only: frozenset[str] | None = None) -> dict:
    """The daemon's config (pure): every namespace on a group's tree with its vifs and (S,G) routes (`only`: of
    this machine's part; a cut link's tunnel has the link's interface name, so it is the vif the plan names)."""
    spaces = []
    for n in plan.nodes:
        if only is not None and n.name not in only:
            continue
        spec = node_mroute(plan, n.name)
        if spec is not None:
            spaces.append({"node": n.name, "netns": ns_path_of(n.name), **spec})
    return {"control": control, "namespaces": spaces}


def start(plan: NetworkPlan, state: LabState, ns_of, only: frozenset[str] | None = None) -> None:
    """Write the daemon's config, record it in the state, start it and record its pid (BackendError on failure)."""
    sockdir = tempfile.mkdtemp(prefix=f"orch-mr-{state.lab}-")
    config = state.dir / "mrouted.json"
    state.mroute = {"pid": None, "config": str(config), "control": f"{sockdir}/mr.sock",
                    "log": str(state.dir / "mrouted.log"), "sockdir": sockdir}
    state.save()
    config.write_text(json.dumps(render_config(plan, lambda n: str(netns.NETNS_DIR / ns_of(n)),
                                               state.mroute["control"], only)))
    proc = mrouted.start(config, state.mroute["log"])
    state.mroute["pid"] = proc.pid
    state.save()


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def is_running(state: LabState) -> bool:
    pid = (state.mroute or {}).get("pid")
    return bool(pid) and state.mroute["config"] in _cmdline(pid) and not netns._is_zombie(pid)


def _pids(state: LabState) -> set[int]:
    """This lab's daemon: the recorded pid, and any started but not recorded (found by its config path)."""
    config = state.mroute["config"]
    found = {int(e.name) for e in os.scandir("/proc") if e.name.isdigit()
             and MODULE in _cmdline(int(e.name)) and config in _cmdline(int(e.name))}
    return found | ({state.mroute["pid"]} if is_running(state) else set())


def stop(state: LabState) -> None:
    """SIGTERM (it closes its sockets: the kernel drops the routes), then SIGKILL; remove its socket dir."""
    if not state.mroute:
        return
    pids = _pids(state)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{p}").exists() and not netns._is_zombie(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    left = netns.kill_and_wait([p for p in pids if Path(f"/proc/{p}").exists()])
    if left:
        raise BackendError(f"the multicast routing daemon (pid {left[0]}) did not die")
    shutil.rmtree(state.mroute.get("sockdir", ""), ignore_errors=True)


def health(state: LabState) -> list[str]:
    if not state.mroute:
        return []
    if not is_running(state):
        return [f"the multicast routing daemon (pid {state.mroute.get('pid')}) is not running: groups are not "
                f"forwarded (log: {state.mroute.get('log')})"]
    return []


def stats(state: LabState) -> dict | None:
    """The daemon's view: per node MFC entries the kernel holds, packets and wrong-interface counts."""
    if not state.mroute or not is_running(state):
        return None
    return mrouted.call(state.mroute["control"], {"op": "stats"})


def change_routes(state: LabState, changes: dict[str, dict]) -> dict:
    """Hand the daemon the routes that change as members join and leave (`tree.mfc_changes`); BackendError when
    it is gone, OrchestratorError when it refuses them."""
    if not changes:
        return {"nodes": 0}
    if not state.mroute or not is_running(state):
        raise BackendError("the multicast routing daemon is not running: the routes cannot follow the members")
    r = mrouted.call(state.mroute["control"], {"op": "mfc", "nodes": changes})    # raises when refused
    return {k: r[k] for k in ("nodes", "set", "deleted")}


def status(state: LabState, plan: NetworkPlan) -> dict | None:
    """`orchestrator status --json`'s `multicast`: the daemon and, per group, its tree and the kernel routes the
    tree's namespaces hold against the plan's. None for labs without groups."""
    if not plan.groups:
        return None
    alive = is_running(state)
    live = None
    problem = None
    if alive:
        try:
            live = stats(state)
        except Exception as exc:  # noqa: BLE001 - a status must still print
            problem = str(exc)
    groups = []
    for g in plan.groups:
        want = sum(1 for n in g.nodes for e in mfc_entries(plan, n) if e.group == g.address)
        got = packets = None
        if live:
            got = sum(v["groups"].get(g.address, {}).get("mfc", 0) for n, v in live["nodes"].items() if n in g.nodes)
            packets = sum(v["groups"].get(g.address, {}).get("packets", 0) for v in live["nodes"].values())
        groups.append({"name": g.name, "address": g.address, "port": g.port, "ttl": g.ttl,
                       "members": list(g.members), "senders": list(g.senders), "tree_nodes": len(g.nodes),
                       "tree_links": len(g.links), "mfc_expected": want, "mfc_installed": got,
                       "packets_forwarded": packets})
    return {"daemon": {"pid": (state.mroute or {}).get("pid"), "alive": alive, "problem": problem,
                       "log": (state.mroute or {}).get("log"),
                       "upcalls": live.get("upcalls") if live else None},
            "groups": groups}
