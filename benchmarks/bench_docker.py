"""Docker vs Mininet on the same experiment: bring-up time, teardown time, memory per member. Needs root, a
running Docker engine and the node image (`orchestrator image build`).

    .venv/bin/python benchmarks/bench_docker.py [EXPERIMENT] [--shaper delayline|tbf|auto] [--backends docker,mininet]
                                                [--no-nodes] [--settle S]

For each backend: `up` (wall time, in-process, the same call the CLI makes), then memory of the idle lab, then the
protocol node started on every member (the run's own node configs) and, after `--settle` seconds, memory again;
then the nodes are stopped and `teardown` is timed. Memory per member:
- node process: RSS and PSS (/proc/PID/smaps_rollup; PSS shares the interpreter's pages fairly) of the gossipnode
  process, on either backend;
- Docker only: the container's cgroup memory (usage minus inactive file cache: the node, `sleep` and the
  container's own kernel objects) and the containerd-shim process that every container has on the host (RSS, PSS).
Prints one table; nothing is left behind (the lab is torn down also on errors and Ctrl-C).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from orchestrator import lab as labmod  # noqa: E402
from orchestrator.backends.registry import get_backend  # noqa: E402
from orchestrator.nodeconfig import node_configs  # noqa: E402


def mem_kb(pid: int) -> tuple[int, int]:
    """(RSS, PSS) in kB of one process."""
    rss = pss = 0
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Rss:"):
                rss = int(line.split()[1])
            elif line.startswith("Pss:"):
                pss = int(line.split()[1])
    except OSError:
        pass
    return rss, pss


def shim_pids(container_ids: set[str]) -> list[int]:
    out = []
    for e in os.scandir("/proc"):
        if not e.name.isdigit():
            continue
        try:
            argv = Path(f"/proc/{e.name}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"containerd-shim-runc-v2") and b"-id" in argv:
            cid = argv[argv.index(b"-id") + 1].decode()
            if cid in container_ids:
                out.append(int(e.name))
    return out


def mean_mib(values: list[float]) -> str:
    return f"{statistics.mean(values) / 1024:.1f}" if values else "-"


def bench(backend_name: str, experiment: str, shaper: str, with_nodes: bool, settle_s: float) -> dict:
    lab = f"bench{backend_name[:3]}"
    prep = labmod.prepare(experiment, lab)
    backend = get_backend(backend_name)
    res = {"backend": backend_name, "nodes": len(prep.plan.nodes), "members": len(prep.plan.members)}
    procs = {}
    state = None
    run_dir = Path(tempfile.mkdtemp(prefix=f"bench-{backend_name}-"))
    for sub in ("configs", "events", "logs"):
        (run_dir / sub).mkdir()
    try:
        t = time.monotonic()
        state = labmod.up(prep, backend_name, shaper, experiment_path=experiment)
        res["up_s"] = time.monotonic() - t
        res["shaper"] = state.shaper
        if backend_name == "docker":
            from orchestrator.backends import docker as dk

            containers = dk.lab_containers(dk.client(), lab)
            ids = {x.id for x in containers}
            res["idle_cgroup_kib"] = [dk.container_memory(x) / 1024 for x in containers]
            shims = shim_pids(ids)
            res["shims"] = len(shims)
            res["shim_rss_kib"] = [mem_kb(p)[0] for p in shims]
            res["shim_pss_kib"] = [mem_kb(p)[1] for p in shims]
        if with_nodes:
            configs = node_configs(prep.experiment, prep.plan, run_dir, run_dir / "ctl")
            (run_dir / "ctl").mkdir()
            t = time.monotonic()
            for name, cfg in configs.items():
                cfg = backend.node_config(state, name, cfg)
                (run_dir / "configs" / f"{name}.json").write_text(json.dumps(cfg))
                procs[name] = backend.start_node(state, name, cfg, run_dir)
            res["start_nodes_s"] = time.monotonic() - t
            time.sleep(settle_s)
            alive = [p for p in procs.values() if p.poll() is None]
            res["nodes_alive"] = len(alive)
            mems = [mem_kb(p.pid) for p in alive]
            res["node_rss_kib"] = [m[0] for m in mems]
            res["node_pss_kib"] = [m[1] for m in mems]
            if backend_name == "docker":
                res["busy_cgroup_kib"] = [dk.container_memory(x) / 1024 for x in containers]
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.terminate()
        for p in procs.values():
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        if state is not None:
            t = time.monotonic()
            labmod.teardown(lab)
            res["teardown_s"] = time.monotonic() - t
        subprocess.run(["rm", "-rf", str(run_dir)], check=False)
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("experiment", nargs="?", default=str(REPO / "topologies" / "gsgc-dense-200.yaml"))
    ap.add_argument("--shaper", default="delayline")
    ap.add_argument("--backends", default="docker,mininet")
    ap.add_argument("--no-nodes", action="store_true", help="Only the network: no protocol nodes.")
    ap.add_argument("--settle", type=float, default=20.0, help="Seconds the nodes run before memory is read.")
    ap.add_argument("--json", type=Path, help="Also write the raw results here.")
    args = ap.parse_args()
    own_state = None
    if "ORCHESTRATOR_STATE_DIR" not in os.environ:
        own_state = os.environ["ORCHESTRATOR_STATE_DIR"] = tempfile.mkdtemp(prefix="bench-state-")
    try:
        results = [bench(b, args.experiment, args.shaper, not args.no_nodes, args.settle)
                   for b in args.backends.split(",")]
    finally:
        if own_state:
            subprocess.run(["rm", "-rf", own_state], check=False)
    load = os.getloadavg()
    print(f"\n{args.experiment}, shaper {results[0].get('shaper')}, {os.cpu_count()} CPUs, "
          f"load average {load[0]:.1f} at the end (other work on the machine counts)")
    print(f"{'backend':<8} {'members':>7} {'up s':>7} {'down s':>7} {'start nodes s':>13} "
          f"{'node RSS MiB':>12} {'node PSS MiB':>12} {'cgroup idle':>11} {'cgroup busy':>11} "
          f"{'shim RSS':>8} {'shim PSS':>8}")
    for r in results:
        print(f"{r['backend']:<8} {r['members']:>7} {r.get('up_s', 0):>7.1f} {r.get('teardown_s', 0):>7.1f} "
              f"{r.get('start_nodes_s', 0):>13.1f} {mean_mib(r.get('node_rss_kib', [])):>12} "
              f"{mean_mib(r.get('node_pss_kib', [])):>12} {mean_mib(r.get('idle_cgroup_kib', [])):>11} "
              f"{mean_mib(r.get('busy_cgroup_kib', [])):>11} {mean_mib(r.get('shim_rss_kib', [])):>8} "
              f"{mean_mib(r.get('shim_pss_kib', [])):>8}")
    print("memory columns: mean MiB per member; cgroup = Docker container memory (usage - inactive file); "
          "shim = containerd-shim-runc-v2, one per container")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
