"""Installing a group's kernel multicast routes: the orchestrator's one daemon (orchestrator/mcast/mrouted.py,
setns into every namespace) against smcroute (one `smcrouted` per namespace, the other way the issue named).
Prints, per tree: routes, time until every namespace's kernel holds all of them, and memory (daemon RSS; smcroute:
the sum of its processes' PSS). Needs root and `apt-get install smcroute` for the comparison.

    python benchmarks/bench_mcast.py [NODES:SENDERS ...]      default: 40:all 1000:10 1000:all
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from orchestrator import lab as labmod
from orchestrator.backends.netns import in_netns
from orchestrator.mcast import realise
from orchestrator.mcast.tree import SEND_IF, mfc_entries, towards, tree_ifs, vifs
from orchestrator.state import ns_name


def sg_entries(plan, node: str) -> list[tuple[str, str, str, list[str]]]:
    """Static (S,G) routes equivalent to the plan's (*,G) tree: (iif, source, group, oifs) per sender. smcroute's
    own (*,G) is resolved per source in userspace on the first packet, so the comparison installs these."""
    out = []
    for g in plan.groups:
        if node not in g.nodes:
            continue
        ifs = tree_ifs(plan, g, node)
        for s in g.senders:
            iif = towards(plan, g, node, s)
            oifs = [i for i in ifs if i != iif] + ([SEND_IF] if node in g.members and s != node else [])
            out.append((iif, plan.node(s).address, g.address, oifs))
    return out


def kernel_routes(lab: str, nodes: list[str]) -> int:
    n = 0
    for node in nodes:
        with in_netns(ns_name(lab, node)):
            n += sum(1 for line in Path("/proc/thread-self/net/ip_mr_cache").read_text().splitlines()[1:]
                     if line.split()[2] != "-1")
    return n


def pss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def one(nodes: int, senders: str, tmp: Path) -> None:
    lab = f"bm{nodes}{'a' if senders == 'all' else senders}"[:16]
    sender_list = "all" if senders == "all" else "[" + ", ".join(f"h{i}" for i in range(int(senders))) + "]"
    f = tmp / f"{lab}.yaml"
    f.write_text(f"topology: {{kind: tree, nodes: {nodes}, degree: 4}}\n"
                 f"multicast: {{groups: [{{name: d, address: 239.1.0.1, members: all, senders: {sender_list}}}]}}\n")
    prep = labmod.prepare(f, lab)
    plan = prep.plan
    tree = list(plan.groups[0].nodes)
    want = sum(len(mfc_entries(plan, n)) for n in tree)
    t0 = time.monotonic()
    state = labmod.up(prep, "mininet", "tbf", experiment_path=str(f))
    try:
        t_up = time.monotonic() - t0
        log = Path(state.mroute["log"]).read_text()
        install = float(log.split("'install_s': ")[1].split("}")[0])
        got = kernel_routes(lab, tree)
        pid = state.mroute["pid"]
        print(f"{nodes} nodes, senders {senders}: {want} routes; mrouted: install {install:.3f} s (up {t_up:.1f} s), "
              f"kernel holds {got}, RSS {rss_kib(pid) / 1024:.1f} MiB, PSS {pss_kib(pid) / 1024:.1f} MiB")
        realise.stop(state)
        if not shutil.which("smcrouted"):
            print("  smcroute: not installed (apt-get install smcroute)")
            return
        # smcroute: one daemon per namespace, its config written from the same plan.
        procs = []
        t0 = time.monotonic()
        for n in tree:
            conf = tmp / f"{lab}-{n}.conf"
            lines = [f"phyint {i} enable" for i in vifs(plan, n)]
            lines += [f"mroute from {iif} source {src} group {grp} to {' '.join(oifs)}"
                      for iif, src, grp, oifs in sg_entries(plan, n)]
            conf.write_text("\n".join(lines) + "\n")
            procs.append(subprocess.Popen(["ip", "netns", "exec", ns_name(lab, n), "smcrouted", "-n", "-N", "-l",
                                           "err", "-f", str(conf), "-i", f"{lab}-{n}", "-u",
                                           str(tmp / f"{lab}-{n}.sock"), "-P", str(tmp / f"{lab}-{n}.pid")],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        deadline = time.monotonic() + 600
        want_sg = sum(len(sg_entries(plan, n)) for n in tree)
        while (got := kernel_routes(lab, tree)) < want_sg and time.monotonic() < deadline:
            time.sleep(0.2)
        took = time.monotonic() - t0
        pss = sum(pss_kib(p.pid) for p in procs)
        rss = sum(rss_kib(p.pid) for p in procs)
        print(f"  smcroute ((S,G) per sender): {len(procs)} processes, all {got} routes after {took:.2f} s, "
              f"PSS {pss / 1024:.1f} MiB (RSS sum {rss / 1024:.1f} MiB)")
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=30)
    finally:
        labmod.teardown(lab)


def main(argv: list[str]) -> int:
    if os.geteuid() != 0:
        print("needs root", file=sys.stderr)
        return 2
    os.environ.setdefault("ORCHESTRATOR_STATE_DIR", tempfile.mkdtemp(prefix="bench-mcast-state-"))
    tmp = Path(tempfile.mkdtemp(prefix="bench-mcast-"))
    for spec in argv or ["40:all", "1000:10", "1000:all"]:
        nodes, senders = spec.split(":")
        one(int(nodes), senders, tmp)
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
