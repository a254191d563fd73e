"""Isolating experiment (docs/reproduction-hyparview.md, Table 1): does the order of the joins shape HyParView's
active-view overlay? The seeded overlay simulator (tests/node/overlay_sim.py: the real cores, no sockets, 5-10 ms
links) runs N members that join member 0 either all within `--spread` = 0.5 s (as the testbed's runs: every member
at the common start) or one by one over N seconds (as the paper's PeerSim runs: "one by one, no cycles in
between"), then 50 cycles; it prints the active views' clustering coefficient and average shortest path (networkx)
beside a random graph's with the same size and degree.

    .venv/bin/python -m experiments.hyparview_join_order --members 200 --seeds 1 2 3
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys

import networkx as nx

from tests.node.overlay_sim import OverlaySim, make_configs


def overlay(n: int, spread: float, seed: int, cycles: int = 50) -> dict:
    sim = OverlaySim(make_configs(n, "hyparview", seed=seed), seed=seed, start_spread=spread)
    end = spread + cycles * 1.0 + 1.0         # the default cycle: 1 s
    sim.run(end)
    g = nx.Graph()
    g.add_nodes_from(sim.alive)
    g.add_edges_from((i, j) for i in sim.alive for j in sim.cores[i].active if j in sim.alive)
    k = 2 * g.number_of_edges() / g.number_of_nodes()
    path = nx.average_shortest_path_length(g) if nx.is_connected(g) else None
    return {"members": n, "spread_s": spread, "seed": seed, "clustering": nx.average_clustering(g),
            "clustering_random": k / (n - 1), "shortest_path": path,
            "shortest_path_random": math.log(n) / math.log(k) if k > 1 else None, "degree": k}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--members", type=int, default=200)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    rows = []
    for label, spread in (("all at once (0.5 s)", 0.5), ("one by one (1/s)", float(a.members))):
        runs = [overlay(a.members, spread, s) for s in a.seeds]
        rows += runs
        c = [r["clustering"] for r in runs]
        p = [r["shortest_path"] for r in runs if r["shortest_path"] is not None]
        print(f"{label:22s} clustering {statistics.fmean(c):.4f} (runs {', '.join(f'{x:.4f}' for x in c)}; random "
              f"{runs[0]['clustering_random']:.4f})  shortest path "
              f"{statistics.fmean(p) if p else float('nan'):.2f} (random {runs[0]['shortest_path_random']:.2f})"
              f"  degree {statistics.fmean(r['degree'] for r in runs):.2f}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
