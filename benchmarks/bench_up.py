"""`orchestrator up` / `teardown` of a tree against the raw iproute2 floor, measured in the same run.

    .venv/bin/python benchmarks/bench_up.py [EXPERIMENT] [--shaper auto|tbf|delayline] [--repeat N]

Prints the wall time of `up` and `teardown` (the CLI, as a user runs it) and of
../shared/tools/raw_tree_floor.py N DEGREE (bare) and --shaped, and the ratios. Needs root.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FLOOR = REPO.parent / "shared" / "tools" / "raw_tree_floor.py"
sys.path.insert(0, str(REPO))

from orchestrator.spec import load_experiment  # noqa: E402


def timed(argv: list[str], env: dict) -> tuple[float, str]:
    t = time.monotonic()
    r = subprocess.run(argv, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(argv)}\n{r.stderr}")
    return time.monotonic() - t, r.stdout


def leftovers(lab: str) -> list[str]:
    out = []
    ns = [p.name for p in Path("/run/netns").glob(f"{lab}-*")] if Path("/run/netns").exists() else []
    if ns:
        out.append(f"{len(ns)} namespaces")
    veth = subprocess.run(["ip", "-o", "link", "show", "type", "veth"], capture_output=True, text=True).stdout
    if lab in veth:
        out.append("veths in the root namespace")
    procs = subprocess.run(["pgrep", "-f", "mnexec|mininet:"], capture_output=True, text=True).stdout.split()
    if procs:
        out.append(f"{len(procs)} mnexec/bash processes")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("experiment", nargs="?", default=str(REPO / "topologies" / "gsgc-sparse-1000.yaml"))
    ap.add_argument("--shaper", default="auto")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    exp = load_experiment(args.experiment)
    n, degree = exp.topology.nodes, exp.topology.degree
    env = {**os.environ, "ORCHESTRATOR_STATE_DIR": tempfile.mkdtemp(prefix="bench-state-")}
    orch = [sys.executable, "-m", "orchestrator.cli"]
    lab = "benchup"
    ups, downs, bare, shaped = [], [], [], []
    for i in range(args.repeat):
        t, out = timed([sys.executable, str(FLOOR), str(n), str(degree)], env)
        bare.append(float(out.strip()))
        t, out = timed([sys.executable, str(FLOOR), str(n), str(degree), "--shaped"], env)
        shaped.append(float(out.strip()))
        t, _ = timed([*orch, "up", args.experiment, "--name", lab, "--shaper", args.shaper], env)
        ups.append(t)
        t, _ = timed([*orch, "teardown", lab], env)
        downs.append(t)
        left = leftovers(lab)
        print(f"run {i + 1}: up {ups[-1]:.2f} s, teardown {downs[-1]:.2f} s, floor bare {bare[-1]:.2f} s, "
              f"floor shaped {shaped[-1]:.2f} s, left after teardown: {', '.join(left) or 'nothing'}")
    med = statistics.median
    print(f"\n{n} nodes, degree {degree}, shaper {args.shaper} (median of {args.repeat}):")
    print(f"  orchestrator up        {med(ups):7.2f} s   (CLI wall time, Python start-up included)")
    print(f"  orchestrator teardown  {med(downs):7.2f} s")
    print(f"  raw floor, bare        {med(bare):7.2f} s   up / bare   = {med(ups) / med(bare):.2f}x")
    print(f"  raw floor, shaped      {med(shaped):7.2f} s   up / shaped = {med(ups) / med(shaped):.2f}x")


if __name__ == "__main__":
    main()
