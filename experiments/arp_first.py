"""The neighbour (ARP) resolution a dilated lab does not dilate (docs/virtual-time.md, "What is not dilated"):
`python -m experiments.arp_first LAB [--trials 10] [--pairs 3]`. On a running lab, for a few parent-child links:
flush the child's neighbour table (and the parent's), ping the parent twice 0.5 s apart, and report the first ping's
RTT (which waits for the ARP exchange) and the second's, real and virtual (/ the lab's dilation), as JSON on
stdout. ARP is not queued by the delay line, so what it adds is the kernel's own resolution time."""
from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys

from orchestrator import lab as labmod

_RTT = re.compile(r"icmp_seq=(\d+) .*time=([\d.]+) ms")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.arp_first")
    ap.add_argument("lab")
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--pairs", type=int, default=3)
    a = ap.parse_args(argv)
    state, plan, popen = labmod._healthy_lab(a.lab)
    n = state.dilation
    out = {"lab": a.lab, "dilation": n, "trials": []}
    for lk in plan.links[:a.pairs]:
        for _ in range(a.trials):
            for node in (lk.child, lk.parent):
                popen(node, ["ip", "neigh", "flush", "all"], stdout=subprocess.DEVNULL).wait()
            p = popen(lk.child, ["ping", "-n", "-c", "2", "-i", "0.5", "-W", str(max(2, int(2 * n))),
                                 lk.parent_addr], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            text, _ = p.communicate(timeout=60)
            rtt = {int(s): float(t) for s, t in _RTT.findall(text)}
            if 1 in rtt and 2 in rtt:
                out["trials"].append({"link": lk.id, "first_ms": rtt[1], "second_ms": rtt[2]})
    extra = [t["first_ms"] - t["second_ms"] for t in out["trials"]]
    out["arp_extra_real_ms_median"] = statistics.median(extra) if extra else None
    out["arp_extra_real_ms_max"] = max(extra) if extra else None
    out["arp_extra_virtual_ms_median"] = statistics.median(extra) / n if extra else None
    json.dump(out, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
