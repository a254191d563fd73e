"""Scale on one machine (issue #21): members, memory per member, `up` and start times, failure detection, and
the delay line's rate and error — each beside its floor measured in the same run.

    .venv/bin/python benchmarks/bench_scale.py [--members 2000] [--nodes 2500] [--packing auto|process|N]
                                               [--duration 120s] [--step 2s] [--skip-delayline] [--json FILE]

1. `up`: `orchestrator up topologies/gsgc-scale.yaml` (the CLI, as a user runs it) against
   ../shared/tools/raw_tree_floor.py NODES 4 --shaped (bare namespaces, veths, one qdisc each).
2. Members: `orchestrator run` of the same file on that lab (`--lab`), GSGC with `members` members packed as
   `--packing` says, five of them crashed at 20 s. While it runs, the proportional set size (PSS) of every node
   process is sampled; memory per member = peak summed PSS / members. Floor: the PSS of a bare interpreter (what a
   process per member costs before it does anything) and of one member alone in its process.
   Start: from the orchestrator's log, the time from the captures' start to "N nodes ready" (every member
   answering on its control socket); floor: one member's start-up (a process that imports the node and exits) x
   processes / cores.
   Failure detection: every live member must declare each crashed member (GSGC `declared_failed`); prints the
   fraction of (observer, crashed) pairs declared, the latency's median and max, and false declarations.
3. Delay line (unless --skip-delayline): benchmarks/bench_delayline.py's rate and one-way error, beside the
   NFQUEUE floor (benchmarks/bench_floor.py: libnetfilter_queue accepting every packet at once), same run.

Needs root. Leaves nothing behind (the lab is torn down on every exit path).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FLOOR = REPO.parent / "shared" / "tools" / "raw_tree_floor.py"
EXPERIMENT = REPO / "topologies" / "gsgc-scale.yaml"
ORCH = [sys.executable, "-m", "orchestrator.cli"]


def load() -> str:
    return Path("/proc/loadavg").read_text().split(" ", 3)[0]


def pss_kb(pid: int) -> int | None:
    """Proportional set size of a process (shared pages split among the processes sharing them)."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def node_pids(marker: str) -> list[int]:
    """Node processes (python -m gossipnode ...) whose command line mentions `marker` (the run's directory)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "gossipnode" in cmd and marker in cmd and "ip netns exec" not in cmd:
            out.append(int(d.name))
    return out


class MemorySampler(threading.Thread):
    """Samples the summed PSS of the run's node processes every `every_s` until stopped; keeps the peak."""

    def __init__(self, marker: str, every_s: float = 2.0):
        super().__init__(daemon=True)
        self.marker, self.every_s = marker, every_s
        self.peak_kb, self.peak_procs = 0, 0
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(self.every_s):
            pids = node_pids(self.marker)
            total = sum(v for v in (pss_kb(p) for p in pids) if v)
            if total > self.peak_kb:
                self.peak_kb, self.peak_procs = total, len(pids)

    def stop(self) -> None:
        self._halt.set()
        self.join()


def timed(argv: list[str], env: dict, **kw) -> tuple[float, subprocess.CompletedProcess]:
    t = time.monotonic()
    r = subprocess.run(argv, capture_output=True, text=True, env=env, **kw)
    return time.monotonic() - t, r


def interpreter_floor() -> dict:
    """PSS of a bare interpreter, and one process's start-up that imports the node (the per-process floors)."""
    p = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    time.sleep(1.0)
    bare = pss_kb(p.pid)
    p.communicate(b"")
    starts = []
    for _ in range(3):
        t = time.monotonic()
        subprocess.run([sys.executable, "-c", "import gossipnode.runtime, gossipnode.packed"], check=True,
                       cwd=REPO / "node_image")
        starts.append(time.monotonic() - t)
    return {"bare_interpreter_pss_mb": (bare or 0) / 1024, "process_start_s": statistics.median(starts)}


def log_times(run_dir: Path) -> dict[str, float]:
    """Timestamps (unix) of the orchestrator log's milestones."""
    out: dict[str, float] = {}
    for line in (run_dir / "orchestrator.log").read_text().splitlines():
        ts, _, msg = line.partition(" ")
        t = datetime.fromisoformat(ts).timestamp()
        if msg.endswith("captures running"):
            out["captures"] = t
        elif re.fullmatch(r"\d+ nodes ready", msg):
            out["ready"] = t
    return out


def detection(run_dir: Path) -> dict:
    """GSGC failure detection from the run directory's event logs: who crashed when, who declared whom."""
    configs = {json.loads(p.read_text())["id"]: p.stem for p in (run_dir / "configs").glob("*.json")}
    crashed: dict[str, float] = {}
    for line in (run_dir / "events" / "orchestrator.jsonl").read_text().splitlines():
        e = json.loads(line)
        if e.get("event") == "action_applied" and e.get("op") == "crash":
            crashed.update({m: e["ts"] for m in e["targets"]})
    declared: dict[tuple[str, str], float] = {}
    false = 0
    for f in (run_dir / "events").glob("*.jsonl"):
        if f.stem == "orchestrator":
            continue
        with f.open() as fh:
            for line in fh:
                if '"declared_failed"' not in line:
                    continue
                e = json.loads(line)
                target = configs.get(e.get("member"))
                if target in crashed and e["ts"] >= crashed[target]:
                    declared.setdefault((f.stem, target), e["ts"] - crashed[target])
                else:
                    false += 1
    observers = [m for m in configs.values() if m not in crashed]
    pairs = len(observers) * len(crashed)
    lat = sorted(declared.values())
    return {"crashed": len(crashed), "pairs": pairs, "declared": len(declared),
            "declared_fraction": len(declared) / pairs if pairs else None,
            "latency_median_s": statistics.median(lat) if lat else None, "latency_max_s": lat[-1] if lat else None,
            "false_declarations": false}


def delayline_numbers() -> dict:
    """The delay line's and the NFQUEUE floor's numbers, from their own benchmarks (each measures its floor)."""
    out: dict = {}
    with tempfile.TemporaryDirectory() as d:
        j = Path(d) / "dl.json"
        r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_delayline.py"), "--json", str(j)],
                           capture_output=True, text=True)
        out["delayline"] = json.loads(j.read_text()) if r.returncode == 0 and j.exists() else \
            {"error": (r.stderr or r.stdout)[-500:]}
    try:
        sys.path.insert(0, str(REPO / "benchmarks"))
        from bench_floor import measure_floor  # type: ignore[import-not-found]

        out["nfqueue_floor"] = measure_floor(rate_pps=0, seconds=5)
    except Exception as exc:  # noqa: BLE001 - a missing floor is printed, not fatal
        out["nfqueue_floor"] = {"error": f"{exc.__class__.__name__}: {exc}"}
    return out


def _s(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f} s"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--members", type=int, default=2000)
    ap.add_argument("--nodes", type=int, default=2500)
    ap.add_argument("--packing", default="auto")
    ap.add_argument("--duration", default="120s")
    ap.add_argument("--step", default="2s")
    ap.add_argument("--skip-delayline", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_scale.py needs root")
    tmp = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    env = {**os.environ, "ORCHESTRATOR_STATE_DIR": str(tmp / "state")}
    sets = ["--set", f"members={args.members}", "--set", f"nodes={args.nodes}", "--set", f"packing={args.packing}",
            "--set", f"duration={args.duration}", "--set", f"step={args.step}"]
    lab = "bscale"
    res: dict = {"members": args.members, "nodes": args.nodes, "packing": args.packing, "load_start": load()}
    try:
        t, r = timed([sys.executable, str(FLOOR), str(args.nodes), "4", "--shaped"], env)
        res["up_floor_s"] = float(r.stdout.strip()) if r.returncode == 0 else None
        t, r = timed([*ORCH, "up", str(EXPERIMENT), "--name", lab, *sets], env)
        if r.returncode != 0:
            sys.exit(f"up failed: {r.stderr[-2000:]}")
        res["up_s"] = t
        out = tmp / "runs"
        sampler = MemorySampler(str(out))
        sampler.start()
        t, r = timed([*ORCH, "run", str(EXPERIMENT), "--lab", lab, "--out", str(out), *sets], env)
        sampler.stop()
        run_dir = Path(r.stdout.strip().splitlines()[-1]) if r.stdout.strip() else None
        if r.returncode != 0 or run_dir is None:
            sys.exit(f"run failed ({run_dir}): {r.stderr[-2000:]}")
        manifest = json.loads((run_dir / "manifest.json").read_text())
        marks = log_times(run_dir)
        res.update(run_s=t, status=manifest.get("status"), packing_used=manifest.get("packing"),
                   start_s=marks["ready"] - marks["captures"] if {"ready", "captures"} <= set(marks) else None,
                   node_processes=sampler.peak_procs, peak_pss_mb=sampler.peak_kb / 1024,
                   pss_per_member_mb=sampler.peak_kb / 1024 / args.members, load_run_end=load())
        res["detection"] = detection(run_dir)
        res["floors"] = interpreter_floor()
    finally:
        subprocess.run([*ORCH, "teardown", lab], capture_output=True, env=env)
    if not args.skip_delayline:
        res.update(delayline_numbers())
    fl = res["floors"]
    procs = max(1, res["node_processes"] or 1)
    print(f"\n{args.members} GSGC members on a {args.nodes}-node tree, packing {args.packing} "
          f"({res['node_processes']} node processes; load {res['load_start']} -> {res['load_run_end']})")
    print(f"  up (CLI)                  {res['up_s']:7.1f} s   floor (raw_tree_floor --shaped) "
          f"{res['up_floor_s'] or float('nan'):.1f} s")
    start_floor = fl["process_start_s"] * procs / (os.cpu_count() or 1)
    print(f"  start of every member     {res['start_s'] or float('nan'):7.1f} s   floor (node import x processes "
          f"/ cores) {start_floor:.1f} s; up + start {res['up_s'] + (res['start_s'] or 0):.1f} s")
    print(f"  memory per member (PSS)   {res['pss_per_member_mb']:7.2f} MB  floor: a bare interpreter "
          f"{fl['bare_interpreter_pss_mb']:.1f} MB a process")
    d = res["detection"]
    print(f"  failure detection         {d['declared']}/{d['pairs']} (observer, crashed) pairs declared; latency "
          f"median {_s(d['latency_median_s'])}, max {_s(d['latency_max_s'])}; {d['false_declarations']} false")
    if "delayline" in res:
        print(f"  delay line                {json.dumps(res['delayline'])[:300]}")
        print(f"  NFQUEUE floor             {json.dumps(res['nfqueue_floor'])[:300]}")
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
