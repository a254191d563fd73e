"""`up` / `teardown` of a tree split over three machines against the same tree on one, measured in the same run.

    .venv/bin/python benchmarks/bench_machines.py [EXPERIMENT] [--machines 3] [--shaper auto|tbf|delayline]

The default experiment is the GSGC 1000-node tree's network (topologies/gsgc-sparse-1000.yaml: degree 4, 200
members, 30 kbit/s + 5 ms links) without its multicast group: the network only, as `up` builds it.

The "machines" are network namespaces on a bridge, each with its own underlay address, on this one machine (as
tests/integration/test_machines.py makes them): first each builds its part with `orchestrator up --part` inside its
namespace, all at once (the parts alone); then the same through a controller, `up --machines` (each machine with its
own sshd: the checks over SSH, then the parts at once) and `teardown` from the controller. The split's wall time is the slowest part's (they
share this machine's cores, so the ratio measures what splitting adds, not what separate machines would gain).
Also printed, as the floor: ../shared/tools/raw_tree_floor.py N DEGREE --shaped. Needs root; leaves nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FLOOR = REPO.parent / "shared" / "tools" / "raw_tree_floor.py"
sys.path.insert(0, str(REPO))

from orchestrator.lab import prepare  # noqa: E402
from orchestrator.shard import node_weights, part_of, shard_plan  # noqa: E402

ORCH = [sys.executable, "-m", "orchestrator.cli"]
NET = "10.249.77"
TREE = """\
name: benchmm
topology: {kind: tree, nodes: 1000, degree: 4, members: {count: 200, seed: 7}}
links: {rate: 30kbit, delay: 5ms, queue: 64}
duration: 10s
seed: 1
"""


def sh(argv: list[str]) -> None:
    subprocess.run(argv, check=True, capture_output=True)


def make_machines(k: int) -> list[str]:
    """k namespaces `bmm1..k` on a bridge namespace `bmmsw`, underlay NET.11.. ."""
    sh(["ip", "netns", "add", "bmmsw"])
    sh(["ip", "-n", "bmmsw", "link", "add", "br0", "type", "bridge"])
    sh(["ip", "-n", "bmmsw", "link", "set", "br0", "up"])
    for i in range(1, k + 1):
        ns = f"bmm{i}"
        sh(["ip", "netns", "add", ns])
        sh(["ip", "-n", "bmmsw", "link", "add", f"p{i}", "type", "veth", "peer", "name", "eth0", "netns", ns])
        sh(["ip", "-n", "bmmsw", "link", "set", f"p{i}", "master", "br0", "up"])
        sh(["ip", "-n", ns, "addr", "add", f"{NET}.{10 + i}/24", "dev", "eth0"])
        sh(["ip", "-n", ns, "link", "set", "eth0", "up"])
        sh(["ip", "-n", ns, "link", "set", "lo", "up"])
    return [f"bmm{i}" for i in range(1, k + 1)]


def remove_machines(k: int) -> None:
    for ns in ["bmmsw", *[f"bmm{i}" for i in range(1, k + 1)]]:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def run_all(argvs: list[list[str]], envs: list[dict]) -> float:
    """Start every command at once; the wall time until the last ends."""
    t = time.monotonic()
    procs = [subprocess.Popen(a, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=e)
             for a, e in zip(argvs, envs)]
    for a, p in zip(argvs, procs):
        out, err = p.communicate()
        if p.returncode != 0:
            sys.exit(f"failed: {' '.join(a)}\n{err}")
    return time.monotonic() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("experiment", nargs="?", default=None)
    ap.add_argument("--machines", type=int, default=3)
    ap.add_argument("--shaper", default="auto")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-machines-"))
    if args.experiment is None:
        args.experiment = str(tmp / "tree.yaml")
        Path(args.experiment).write_text(TREE)
    prep = prepare(args.experiment)
    plan, k = prep.plan, args.machines
    n = len(plan.nodes)
    env = {**os.environ, "ORCHESTRATOR_STATE_DIR": str(tmp / "one")}
    lab = "benchmm"

    t = time.monotonic()
    r = subprocess.run([sys.executable, str(FLOOR), str(n), str(prep.experiment.topology.degree), "--shaped"],
                       capture_output=True, text=True)
    floor = float(r.stdout.strip()) if r.returncode == 0 else None
    one_up = run_all([[*ORCH, "up", args.experiment, "--name", lab, "--shaper", args.shaper]], [env])
    one_down = run_all([[*ORCH, "teardown", lab]], [env])

    names = make_machines(k)
    try:
        machines = [f"m{i}" for i in range(1, k + 1)]
        underlay = {m: f"{NET}.{10 + i}" for i, m in enumerate(machines, start=1)}
        sharding = shard_plan(plan, machines, node_weights(plan, prep.experiment.nodes.cpu))
        argvs, envs = [], []
        for m, ns in zip(machines, names):
            f = tmp / f"part-{m}.json"
            f.write_text(json.dumps(part_of(plan, sharding, m, underlay, prep.lab).to_json()))
            argvs.append(["nsenter", f"--net=/run/netns/{ns}", *ORCH, "up", args.experiment, "--part", str(f),
                          "--shaper", args.shaper])
            envs.append({**os.environ, "ORCHESTRATOR_STATE_DIR": str(tmp / m)})
        split_up = run_all(argvs, envs)
        split_down = run_all([["nsenter", f"--net=/run/netns/{ns}", *ORCH, "teardown", prep.lab] for ns in names],
                             envs)
    finally:
        remove_machines(k)

    # The whole path from a controller: `up --machines` (machine checks over SSH, sharding, parts built by the
    # machines' own orchestrators) and `teardown` from the controller.
    from tests.integration.sshhosts import SshHosts

    hosts = SshHosts(k, share_mounts=True).start()
    try:
        entries = [{"orchestrator": sys.executable, "state_dir": str(tmp / f"state-host{i}")} for i in range(1, k + 1)]
        inv = hosts.inventory_file(tmp / "inventory.ini", entries)
        cenv = {**os.environ, "ORCHESTRATOR_STATE_DIR": str(tmp / "controller")}
        ctl_up = run_all([[*ORCH, "up", args.experiment, "--name", lab, "--shaper", args.shaper, "--machines",
                           str(inv), "--known-hosts", str(hosts.known_hosts)]], [cenv])
        ctl_down = run_all([[*ORCH, "teardown", lab]], [cenv])
    finally:
        hosts.close()
    left = [p.name for p in Path("/run/netns").glob(f"{prep.lab}-*")] + [p.name for p in Path("/run/netns").glob(
        f"{lab}-*")]
    print(f"{n} nodes, degree {prep.experiment.topology.degree}, shaper {args.shaper}; {k} machines, shards of "
          f"{[len(s.nodes) for s in sharding.shards]} nodes, {len(sharding.cut)} cut links "
          f"({time.monotonic() - t:.0f} s in all):")
    print(f"  up, one machine           {one_up:7.2f} s")
    print(f"  up, {k} machines at once   {split_up:7.2f} s   split / one = {split_up / one_up:.2f}x (goal <= 1.2x)")
    print(f"  teardown, one machine     {one_down:7.2f} s")
    print(f"  teardown, {k} machines     {split_down:7.2f} s")
    print(f"  up --machines (controller) {ctl_up:6.2f} s   controller / one = {ctl_up / one_up:.2f}x (checks over "
          f"SSH, then the parts at once)")
    print(f"  teardown (controller)     {ctl_down:7.2f} s")
    if floor is not None:
        print(f"  raw floor, shaped         {floor:7.2f} s   one / floor = {one_up / floor:.2f}x")
    print(f"  left after teardown: {', '.join(left) or 'nothing'}")


if __name__ == "__main__":
    main()
