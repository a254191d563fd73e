"""Packed members: memory per member, and what sharing one loop does to the members' timing.

Runs a GSGC group of N members on loopback as ONE process (`python -m gossipnode --manifest ...`, packed
members) for N in --sizes, and (--processes M) as M processes of one member each, for comparison. Every member
runs the protocol (gossip steps of --step-s, optional data from two senders). After --settle-s it reads the
process's RSS and PSS (/proc/PID/status, /proc/PID/smaps_rollup), then stops the members and reads their event
logs for timing: rounds completed, mean time per round (tpr_s) and steps skipped (a timer that fired more than
a step late, i.e. the loop was busy with other members' work or the machine was loaded).

Memory per member: RSS(N)/N, and the marginal (RSS(N) - RSS(1)) / (N - 1), the cost of one more member in a
packed process. The floor is one process per member: RSS(1) (one member alone in a process), and its PSS (the
interpreter's shared pages counted once per process sharing them).

    python benchmarks/bench_packed.py [--sizes 1 50 200] [--processes 20] [--settle-s 8] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from tempfile import TemporaryDirectory

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "node_image"))

from gossipnode import control  # noqa: E402
from gossipnode.config import NodeConfig  # noqa: E402


def free_ports(n: int) -> list[int]:
    socks = []
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def write_configs(d: Path, n: int, step_s: float, data: bool) -> list[Path]:
    ports = free_ports(n)
    members = [{"id": i, "name": f"m{i}", "addr": f"127.0.0.1:{ports[i]}"} for i in range(n)]
    senders = [0, n // 2] if data and n >= 2 else []
    paths = []
    for i in range(n):
        cfg = NodeConfig.model_validate({
            "name": f"m{i}", "id": i, "listen": members[i]["addr"], "members": members,
            "protocol": {"name": "gsgc", "subgroup": min(4, n), "step_s": step_s, "fail_k": None},
            "senders": senders,
            "workload": {"rate_per_s": 5.0, "size_bytes": 200} if senders else None,
            "seed": 7, "wait_for_start": True, "event_log": str(d / "events" / f"m{i}.jsonl"), "control": str(d / "ctl" / f"m{i}.sock")})
        path = d / f"m{i}.json"
        path.write_text(cfg.model_dump_json())
        paths.append(path)
    (d / "ctl").mkdir(exist_ok=True)
    return paths


def memory_kb(pid: int) -> tuple[int, int]:
    """(RSS, PSS) of a process in kB."""
    rss = pss = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            pss = int(line.split()[1])
    return rss, pss


def start_together(ctl: list[Path], procs: list[subprocess.Popen], timeout: float = 300) -> None:
    """Wait for every member's control socket, then start them all 1 s from now (one first round for all)."""
    deadline = time.time() + timeout
    while not all(c.exists() for c in ctl):
        if time.time() > deadline or any(p.poll() is not None for p in procs):
            raise RuntimeError("members did not come up")
        time.sleep(0.1)
    at = time.time() + 1.0 + len(ctl) * 0.005
    for c in ctl:
        control.start(c, at=at, timeout=60)
    time.sleep(max(0.0, at - time.time()))


def timing(d: Path, n: int) -> dict:
    tprs, skipped, rounds = [], 0, 0
    for i in range(n):
        for line in (d / "events" / f"m{i}.jsonl").read_text().splitlines():
            e = json.loads(line)
            if e["event"] == "round_completed" and e.get("level", "global") == "global":
                rounds += 1
                tprs.append(e["tpr_s"])
            elif e["event"] == "steps_skipped":
                skipped += e["missed"]
    return {"rounds_per_member": rounds / n, "tpr_mean_s": statistics.fmean(tprs) if tprs else None,
            "steps_skipped_per_member": skipped / n}


def run(n: int, packed: bool, step_s: float, settle_s: float, data: bool) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO / "node_image")}
    with TemporaryDirectory(prefix="bench_packed_") as tmp:
        d = Path(tmp)
        paths = write_configs(d, n, step_s, data)
        if packed:
            manifest = d / "members.txt"
            manifest.write_text("\n".join(map(str, paths)) + "\n")
            cmds = [[sys.executable, "-m", "gossipnode", "--manifest", str(manifest)]]
        else:
            cmds = [[sys.executable, "-m", "gossipnode", "--config", str(p)] for p in paths]
        procs = [subprocess.Popen(c, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for c in cmds]
        try:
            t0 = time.time()
            start_together([d / "ctl" / f"m{i}.sock" for i in range(n)], procs)
            start_s = time.time() - t0
            time.sleep(settle_s)
            mem = [memory_kb(p.pid) for p in procs]
            cpu = [sum(int(x) for x in Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()[11:13])
                   / os.sysconf("SC_CLK_TCK") for p in procs]
            for p in procs:
                p.send_signal(signal.SIGTERM)
            for p in procs:
                p.wait(timeout=120)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        rss, pss = sum(m[0] for m in mem) / 1024, sum(m[1] for m in mem) / 1024
        return {"members": n, "packed": packed, "processes": len(procs), "rss_mb": round(rss, 1),
                "pss_mb": round(pss, 1), "rss_per_member_mb": round(rss / n, 2), "pss_per_member_mb": round(pss / n, 2),
                "start_s": round(start_s, 1), "cpu_s": round(sum(cpu), 1), **timing(d, n)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 50, 200], help="packed members per process")
    parser.add_argument("--processes", type=int, default=0, help="also run this many one-member processes")
    parser.add_argument("--step-s", type=float, default=0.5)
    parser.add_argument("--settle-s", type=float, default=8.0)
    parser.add_argument("--no-data", action="store_true", help="no data senders (gossip steps only)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    sizes = sorted(set(args.sizes) | {1})
    rows = [run(n, True, args.step_s, args.settle_s, not args.no_data) for n in sizes]
    if args.processes:
        rows.append(run(args.processes, False, args.step_s, args.settle_s, not args.no_data))
    one = rows[0]
    print(f"{'members':>7} {'procs':>5} {'RSS MB':>8} {'PSS MB':>8} {'RSS/mbr':>8} {'PSS/mbr':>8} {'marginal':>8} "
          f"{'cpu s':>6} {'rounds':>6} {'tpr s':>6} {'skipped':>7}")
    for r in rows:
        marginal = ((r["rss_mb"] - one["rss_mb"]) / (r["members"] - 1)) if r["packed"] and r["members"] > 1 else None
        r["marginal_rss_per_member_mb"] = None if marginal is None else round(marginal, 2)
        tpr = "-" if r["tpr_mean_s"] is None else f"{r['tpr_mean_s']:.2f}"
        print(f"{r['members']:>7} {r['processes']:>5} {r['rss_mb']:>8.1f} {r['pss_mb']:>8.1f} "
              f"{r['rss_per_member_mb']:>8.2f} {r['pss_per_member_mb']:>8.2f} "
              f"{'-' if marginal is None else f'{marginal:.2f}':>8} {r['cpu_s']:>6.1f} "
              f"{r['rounds_per_member']:>6.1f} {tpr:>6} {r['steps_skipped_per_member']:>7.2f}")
    print(f"floor (one process per member): RSS {one['rss_mb']:.1f} MB, PSS {one['pss_mb']:.1f} MB per member")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
