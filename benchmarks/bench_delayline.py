"""Load test of the delay line on a balanced tree of network namespaces (needs root).

    python benchmarks/bench_delayline.py [N ...] [--leaves 40] [--pps 2000 ...] [--seconds 10]
                                         [--rate-bps 10000000] [--delay-s 0.005] [--rt-priority 50]
                                         [--engine auto|c|python] [--shards K] [--json FILE]

For each N: builds an N-node tree (root has 4 children, every other interior node 3; a /31 per link, O(degree)
aggregate routes, like shared/tools/raw_tree_floor.py) as namespaces `dlb<i>`, puts a delay line on every link
direction (2 (N-1) queues, one process), sends `--pps` UDP packets/s (100 B IP) in aggregate from the
`--leaves` deepest leaves to the root for `--seconds`, and prints: shaper CPU per packet-hop, its RSS, the
daemon's hold error (actual - scheduled release, p50/p99/max), the end-to-end one-way delay error seen by the
receiver (against depth x (delay + serialisation)), losses and kernel drops. Everything is removed afterwards,
also on Ctrl-C / SIGTERM. `--pps` takes several rates (one tree, one run per rate, rising); `--engine` picks the
delay line's engine (config `engine`), `--shards` its processes (config `shards`); `--json FILE` also writes
the result dict (`runs`: one object per N and rate; at the top level the last run's rate achieved, packet-hops/s,
one-way error p50/p99, CPU us per packet-hop, and the load average). `--floor` also measures the NFQUEUE floor
(benchmarks/bench_floor.py's `measure_floor`) after the runs and prints each run's CPU per packet-hop beside it.
Without N it runs N=200 (what benchmarks/bench_scale.py calls: `--json FILE` alone).

    python benchmarks/bench_delayline.py --replay ROUNDS

No root, no namespaces: the daemon's userspace per-packet path (parse, model, heap, verdicts, release, flush) on
fake sockets, ROUNDS wake-ups of 64 packets (100 B, 4 queues, 10 Mbit/s + 5 ms) five times; prints the CPU time
per packet of each repetition. Its load-independent measure: run it under `valgrind --tool=callgrind` with two
ROUNDS values; (instructions(R2) - instructions(R1)) / (5 * 64 * (R2 - R1)) is the cost of one packet.
`--replay ROUNDS --engine c`: the same for the compiled engine, which reads and writes a real fd (a datagram
socketpair stands in for netlink, so its number includes two send/recv pairs per 64 packets; python's fake socket
makes no system call).
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.backends import netns  # noqa: E402
from orchestrator.backends.mininet import NODE_SYSCTLS  # noqa: E402
from orchestrator.shaping import nfqueue as nfq  # noqa: E402
from orchestrator.shaping.delayline import (  # noqa: E402
    DelayLineClient,
    QueueSpec,
    render_config,
    render_rules,
    start_delayline,
    stop_delayline,
)
from orchestrator.shaping.params import DirParams  # noqa: E402

PREFIX = "dlb"
RT_TOOLS = 40  # sender and receiver run SCHED_FIFO below the delay line (50): other load does not skew them
PORT = 9998
PAYLOAD = 72  # + 8 UDP + 20 IP = 100 B packets
_HDR = struct.Struct("!dIi")

# Receiver (own process, real-time, in the root's namespace): one-way delay error of every packet against
# depth(leaf) x (delay + serialisation), at the kernel's receive timestamp (SO_TIMESTAMPNS: our own wake-up is
# not the delay line's error; docs/delayline-tail.md measured it at p99 0.2-1.2 ms at SCHED_FIFO 40, 9-23 ms
# without); it counts from the first packet with seq >= 0 (the warm-up uses -1) until it has been idle for 1 s.
# CLOCK_MONOTONIC is one clock for all namespaces.
RECEIVER = """
import json, socket, struct, sys, time
addr, port, per_hop = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
depth = {int(k): v for k, v in json.loads(sys.argv[4]).items()}
hdr = struct.Struct("!dIi")
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 23)
s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)  # the kernel's receive time, not our (late) read
s.bind((addr, port))
s.settimeout(0.1)
def rt_offset():  # CLOCK_REALTIME - CLOCK_MONOTONIC, tightest of 50 readings
    return min(((b - a, r - (a + b) / 2) for a, r, b in
                ((time.monotonic(), time.time(), time.monotonic()) for _ in range(50))))[1]
off = rt_offset()
ts_fmt = struct.Struct("=qq")
print("bound", flush=True)
errs, last = [], None
while last is None or time.monotonic() - last < 1.0:
    try:
        data, anc, _fl, _ad = s.recvmsg(2048, socket.CMSG_SPACE(16))
    except socket.timeout:
        continue
    now = last_read = time.monotonic()
    for lvl, typ, d in anc:
        if lvl == socket.SOL_SOCKET and typ == SO_TIMESTAMPNS:
            sec, nsec = ts_fmt.unpack_from(d)
            now = sec + nsec * 1e-9 - off
    ts, leaf, seq = hdr.unpack_from(data)
    if seq < 0:
        continue
    last = last_read
    errs.append(now - ts - depth[leaf] * per_hop)
errs.sort()
q = lambda p: errs[min(len(errs) - 1, int(p * len(errs)))]
print(json.dumps({"received": len(errs), "p50": q(0.5), "p99": q(0.99), "max": errs[-1]}), flush=True)
"""


def ip4(x: int) -> str:
    return f"{x >> 24 & 255}.{x >> 16 & 255}.{x >> 8 & 255}.{x & 255}"


class Tree:
    def __init__(self, n: int, degree: int = 4):
        self.n = n
        parent, q, nxt = {0: None}, [0], 1
        while nxt < n:
            p = q.pop(0)
            for _ in range(degree if p == 0 else degree - 1):
                if nxt >= n:
                    break
                parent[nxt] = p
                q.append(nxt)
                nxt += 1
        self.parent = parent
        self.kids = {i: [] for i in range(n)}
        for c in range(1, n):
            self.kids[parent[c]].append(c)
        self.depth = {0: 0}
        for c in range(1, n):  # BFS numbering: parents first
            self.depth[c] = self.depth[parent[c]] + 1
        need = {}
        for i in reversed(range(n)):
            s = sum(need[c] for c in self.kids[i]) + 1
            need[i] = 1 << (s - 1).bit_length()
        base, addr = {0: 10 << 24}, {}
        for i in range(n):
            off = base[i]
            for c in sorted(self.kids[i], key=lambda c: -need[c]):
                base[c] = off
                off += need[c]
            addr[i] = off
        self.need, self.base, self.addr = need, base, addr

    @staticmethod
    def ns(i: int) -> str:
        return f"{PREFIX}{i}"

    @staticmethod
    def link_ip(c: int, end: int) -> str:  # /31 of link parent(c)--c: 0 = parent side, 1 = child side
        return ip4((172 << 24 | 16 << 16) + 2 * c + end)

    def ifaces(self, i: int) -> list[str]:
        return ([f"d{i}b"] if i else []) + [f"d{c}a" for c in self.kids[i]]


def ip_batch(lines: list[str], ns: str | None = None) -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".batch") as f:
        f.write("\n".join(lines) + "\n")
        f.flush()
        subprocess.run(["ip"] + (["-n", ns] if ns else []) + ["-force", "-batch", f.name], check=True,
                       stdout=subprocess.DEVNULL)


def build(t: Tree) -> None:
    ip_batch([f"netns add {t.ns(i)}" for i in range(t.n)])
    ip_batch([f"link add d{c}a netns {t.ns(t.parent[c])} type veth peer name d{c}b netns {t.ns(c)}"
              for c in range(1, t.n)])
    for i in range(t.n):
        ls = ["link set lo up", f"addr add {ip4(t.addr[i])}/32 dev lo"] + [f"link set {v} up" for v in t.ifaces(i)]
        if i:
            ls += [f"addr add {t.link_ip(i, 1)}/31 dev d{i}b",
                   f"route add default via {t.link_ip(i, 0)} src {ip4(t.addr[i])}"]
        for c in t.kids[i]:
            ls += [f"addr add {t.link_ip(c, 0)}/31 dev d{c}a",
                   f"route add {ip4(t.base[c])}/{32 - t.need[c].bit_length() + 1} via {t.link_ip(c, 1)} "
                   f"src {ip4(t.addr[i])}"]
        ip_batch(ls, t.ns(i))
        netns.write_sysctls(t.ns(i), NODE_SYSCTLS)  # what `up` writes in every node


def queues(t: Tree, params: DirParams) -> tuple[list[QueueSpec], dict[int, list[tuple[str, int]]]]:
    specs, per_ns = [], {i: [] for i in range(t.n)}
    for c in range(1, t.n):
        for i, ifname, qid in ((t.parent[c], f"d{c}a", f"{c}down"), (c, f"d{c}b", f"{c}up")):
            qn = len(per_ns[i])
            per_ns[i].append((ifname, qn))
            specs.append(QueueSpec(qid, f"/run/netns/{t.ns(i)}", qn, params))
    return specs, per_ns


def prepare_ns(ns: str, ifq: list[tuple[str, int]]) -> None:
    """What `up` does in each namespace once the delay line is READY (the Mininet backend's own functions)."""
    netns.disable_offloads(ns, [i for i, _ in ifq])
    netns.iptables_restore(ns, render_rules(ifq))


def teardown(t: Tree | None, proc, client) -> None:
    if proc is not None:
        try:
            stop_delayline(proc, client, timeout=20)
        except Exception:  # noqa: BLE001
            proc.kill()
            proc.wait()
    if t is not None:
        present = set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split())
        gone = [f"netns del {t.ns(i)}" for i in range(t.n) if t.ns(i) in present]
        if gone:
            ip_batch(gone)


def rss_kb(pid: int) -> tuple[int, int]:
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                out[k] = int(v.split()[0])
    return out["VmRSS"], out["VmHWM"]


def run(n: int, args, tmp: Path) -> list[dict]:
    t = proc = client = None
    out = []
    try:
        t = Tree(n)
        t0 = time.monotonic()
        build(t)
        t_build = time.monotonic() - t0
        params = DirParams(rate_bps=args.rate_bps, delay_s=args.delay_s, queue_pkts=args.queue)
        specs, per_ns = queues(t, params)
        cfg = tmp / f"dl{n}.json"
        cfg.write_text(json.dumps(render_config(specs, control=str(tmp / f"dl{n}.sock"), engine=args.engine,
                                                shards=args.shards)))
        t0 = time.monotonic()
        proc = start_delayline(cfg, rt_priority=args.rt_priority, timeout=300)
        t_bind = time.monotonic() - t0
        client = DelayLineClient(proc.control_path, timeout=60)
        idle_rss = rss_kb(proc.pid)[0]
        t0 = time.monotonic()
        with ThreadPoolExecutor(max_workers=args.jobs) as ex:
            list(ex.map(lambda i: prepare_ns(t.ns(i), per_ns[i]), [i for i in range(n) if per_ns[i]]))
        t_rules = time.monotonic() - t0

        setup = {"N": n, "queues": len(specs), "build_s": round(t_build, 2), "bind_s": round(t_bind, 2),
                 "rules_s": round(t_rules, 2), "rss_idle_mb": round(idle_rss / 1024, 1)}
        for pps in args.pps:
            res = measure(t, proc, client, specs, pps, args, setup)
            print(json.dumps(res))
            sys.stdout.flush()
            out.append(res)
        return out
    finally:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
        if proc is not None:  # what the daemon logged about late releases / kernel drops
            with open(proc.log_path, errors="replace") as f:
                for line in f:
                    if "late release" in line or "FATAL" in line or "engine" in line:
                        print(f"# delayline: {line.rstrip()}", file=sys.stderr)
        t0 = time.monotonic()
        teardown(t, proc, client)
        if t is not None:
            print(f"# N={n}: removed in {time.monotonic() - t0:.1f} s", file=sys.stderr)


def measure(t: Tree, proc, client, specs, pps: float, args, setup: dict) -> dict:
    rx = None
    socks = []
    try:
        n = t.n
        load0 = os.getloadavg()[0]
        # traffic: the deepest leaves -> root
        leaves = sorted((i for i in range(n) if not t.kids[i]), key=lambda i: (-t.depth[i], i))[: args.leaves]
        for i in leaves:
            with nfq.in_netns(f"/run/netns/{t.ns(i)}"):
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            socks.append((i, s))
        ser = (100 + 14) * 8 / args.rate_bps
        rx = subprocess.Popen(
            ["ip", "netns", "exec", t.ns(0), "chrt", "-f", str(RT_TOOLS), sys.executable, "-c", RECEIVER,
             ip4(t.addr[0]), str(PORT), repr(args.delay_s + ser), json.dumps({i: t.depth[i] for i in leaves})],
            stdout=subprocess.PIPE, text=True)
        assert rx.stdout.readline().strip() == "bound"
        dst = (ip4(t.addr[0]), PORT)
        pad = b"\0" * (PAYLOAD - _HDR.size)
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(RT_TOOLS))

        def send_for(seconds: float, seq0: int) -> int:
            sent, k, start = 0, 0, time.monotonic()
            total = int(seconds * pps)
            while sent < total:
                due = start + sent / pps
                d = due - time.monotonic()
                if d > 0:
                    time.sleep(d)
                elif d < -1 / pps:       # we were not scheduled: keep the spacing (a catch-up burst would be
                    start -= d           # queued by the link model, correctly, and counted as its error)
                leaf, s = socks[k]
                k = (k + 1) % len(socks)
                s.sendto(_HDR.pack(time.monotonic(), leaf, seq0 if seq0 < 0 else seq0 + sent) + pad, dst)
                sent += 1
            return sent

        send_for(1.0, -1)  # warm-up (ARP, caches)
        time.sleep(0.5)
        gc.collect()
        gc.disable()  # no collector pause in the sender while it paces the packets
        q0 = client.stats(kernel=False)["queues"].values()
        drops0 = (sum(v["overflowed"] for v in q0), sum(v["lost"] for v in q0))
        before = client.stats(ids=[], reset=True, kernel=False)
        t_send = time.monotonic()
        sent = send_for(args.seconds, 0)
        t_send = time.monotonic() - t_send
        gc.enable()
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
        time.sleep(max(0.5, 3 * max(t.depth.values()) * (args.delay_s + ser)))
        after = client.stats(ids=[], kernel=False)
        e2e = json.loads(rx.communicate(timeout=60)[0])
        full = client.stats(kernel=True, reset=True)
        rss, hwm = rss_kb(proc.pid)
        hops = after["packets"] - before["packets"]
        cpu = after["cpu_s"] - before["cpu_s"]
        res = {
            **setup, "engine": after.get("engine", "python"), "pps": pps, "leaves": len(leaves),
            "max_depth": max(t.depth.values()), "sent": sent, "rate_achieved_pps": round(sent / t_send),
            "received": e2e["received"], "packet_hops": hops,
            "packet_hops_per_s": round(hops / args.seconds),
            "cpu_s": round(cpu, 3), "cpu_us_per_packet_hop": round(cpu / hops * 1e6, 1) if hops else None,
            "cpu_share": round(cpu / (args.seconds + 0.5), 3),
            "cpu_user_share": round((after["cpu_user_s"] - before["cpu_user_s"]) / cpu, 2) if cpu else None,
            "wakeups_per_s": round((after["wakeups"] - before["wakeups"]) / args.seconds),
            "shards": len(full.get("shards") or []) or 1,
            "rss_mb": round((full.get("rss_bytes") or rss * 1024) / 2**20, 1),
            "rss_peak_mb": round(hwm / 1024, 1),
            "hold_error_p50_ms": round(after["hold_error"]["p50_s"] * 1e3, 3),
            "hold_error_p99_ms": round(after["hold_error"]["p99_s"] * 1e3, 3),
            "hold_error_max_ms": round(after["hold_error"]["max_s"] * 1e3, 3),
            "hold_error_min_ms": round(after["hold_error"]["min_s"] * 1e3, 3),
            "e2e_error_p50_ms": round(e2e["p50"] * 1e3, 3), "e2e_error_p99_ms": round(e2e["p99"] * 1e3, 3),
            "e2e_error_max_ms": round(e2e["max"] * 1e3, 3),
            "e2e_error_per_hop_p50_ms": round(e2e["p50"] * 1e3 / statistics.mean(t.depth[i] for i in leaves), 3),
            "overflowed": sum(v["overflowed"] for v in full["queues"].values()) - drops0[0],
            "lost": sum(v["lost"] for v in full["queues"].values()) - drops0[1],
            "kernel_drops": full["kernel_drops"], "fatal": full["fatal"],
            "timer_advance_us": round(after["timer_advance_s"] * 1e6, 1),
            "load_before": round(load0, 2), "load_after": round(os.getloadavg()[0], 2),
        }
        return res
    finally:
        gc.enable()
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
        for _, s in socks:
            s.close()
        if rx is not None and rx.poll() is None:
            rx.kill()
            rx.wait()


def replay(rounds: int, per: int = 64, queues: int = 4, copy: int = 40, engine: str = "python") -> None:
    from orchestrator.shaping.delayline.daemon import CDelayLine, DelayLine
    from orchestrator.shaping.delayline.loop import Direction, Namespace

    def attr(t: int, p: bytes) -> bytes:
        n = 4 + len(p)
        return struct.pack("=HH", n, t) + p + b"\0" * ((4 - n % 4) % 4)

    def msg(q: int, pkt_id: int) -> bytes:  # as the kernel sends it: PACKET_HDR, IFINDEX_OUTDEV, PAYLOAD
        ip = bytes([0x45, 0]) + struct.pack(">H", 100) + bytes(copy - 4)
        a = attr(1, struct.pack(">IHB", pkt_id, 0x800, 4)) + attr(5, struct.pack(">I", 3)) + attr(10, ip)
        body = struct.pack("=BB", 2, 0) + struct.pack(">H", q) + a
        return struct.pack("=IHHII", 16 + len(body), nfq.MSG_PACKET, 0, 0, 0) + body

    chunk = b"".join(msg(i % queues, i) for i in range(per))

    class Sock:  # one recv of `chunk` per wake-up, then EAGAIN; verdicts are swallowed
        left = 0

        def recv_into(self, buf):
            if not self.left:
                raise BlockingIOError
            self.left -= 1
            buf[:len(chunk)] = chunk
            return len(chunk)

        def send(self, data):
            return len(data)

    c = engine == "c"
    dl = (CDelayLine if c else DelayLine)({"control": "/nonexistent", "queues": [], "copy_range": copy})
    ns = Namespace.__new__(Namespace)
    ns.key, ns.path, ns.fd, ns.statfd, ns.t_empty = ("replay",), "/replay", -1, -1, 0.0
    ns.nl = type("Nl", (), {"sock": Sock(), "backlog": []})()
    ns.dirs, ns.pending, ns.baseline, ns.reported = {}, [], {}, {}
    if c:  # the C engine reads and writes a real fd: a datagram socketpair stands in for netlink
        kern, ours = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        for s in (kern, ours):
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 22)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
        kern.setblocking(False)
        ns.fd = ours.fileno()
        dl._ns_added(ns)
    params = DirParams(rate_bps=10_000_000, delay_s=0.005, queue_pkts=1000)
    for q in range(queues):
        spec = QueueSpec(f"q{q}", "/replay", q, params)
        d = dl._new_direction(spec, ns) if c else Direction(spec, ns, None)
        ns.dirs[q] = dl.dirs[d.id] = d
    t, out = 1000.0, []
    for _ in range(5):
        c0 = time.process_time()
        for _ in range(rounds):
            if c:
                kern.send(chunk)
                dl._read_ns(ns, t)
                dl._flush()
                dl._release(t + 0.015)
                dl._flush()
                while True:  # the verdicts (two datagrams per round)
                    try:
                        kern.recv(1 << 16)
                    except BlockingIOError:
                        break
                t += 1.0
                continue
            ns.nl.sock.left = 1
            dl._read_ns(ns, t)
            dl._flush()
            dl._release(t + 0.015)  # everything is due by then (< 20 ms late: no log line)
            dl._flush()
            t += 1.0
        out.append((time.process_time() - c0) / (rounds * per) * 1e6)
    assert sum(d.accepted for d in dl.dirs.values()) == 5 * rounds * per
    print(json.dumps({"engine": engine, "replay_rounds": rounds, "packets": 5 * rounds * per,
                      "cpu_us_per_packet": [round(x, 3) for x in out]}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("n", type=int, nargs="*", help="tree sizes, e.g. 200 1000")
    ap.add_argument("--replay", type=int, metavar="ROUNDS", help="no root: the per-packet path on fake sockets")
    ap.add_argument("--leaves", type=int, default=40)
    ap.add_argument("--pps", type=float, nargs="+", default=[2000.0], help="aggregate send rates, one run each")
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--rate-bps", type=int, default=10_000_000)
    ap.add_argument("--delay-s", type=float, default=0.005)
    ap.add_argument("--queue", type=int, default=1000)
    ap.add_argument("--rt-priority", type=int, default=50)
    ap.add_argument("--jobs", type=int, default=8, help="parallel namespace preparations")
    ap.add_argument("--engine", choices=["auto", "c", "python"], default="auto", help="the delay line's engine")
    ap.add_argument("--floor", action="store_true",
                    help="also measure the NFQUEUE floor (benchmarks/bench_floor.py) in this run and print the "
                         "CPU per packet-hop beside it")
    ap.add_argument("--shards", type=int, help="engine processes (default: the daemon's, one per CPU)")
    ap.add_argument("--json", type=Path, metavar="FILE", help="also write the result dict to FILE")
    args = ap.parse_args()
    if args.replay:
        replay(args.replay, engine="c" if args.engine == "c" else "python")
        return 0
    if not args.n:
        args.n = [200]
    if os.geteuid() != 0:
        print("needs root", file=sys.stderr)
        return 2
    present = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    if any(p.startswith(PREFIX) and p[len(PREFIX):].isdigit() for p in present):
        print(f"namespaces {PREFIX}* exist already (another run?); remove them first", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench-dl-") as d:
        for n in args.n:
            runs += run(n, args, Path(d))
    floor = None
    if args.floor:
        try:
            sys.path.insert(0, str(Path(__file__).resolve().parent))
            from bench_floor import measure_floor  # type: ignore[import-not-found]
            floor = measure_floor(rate_pps=0, seconds=5)
        except Exception as exc:  # noqa: BLE001 - a missing floor is printed, not fatal
            floor = {"error": f"{exc.__class__.__name__}: {exc}"}
        f_us = floor.get("cpu_us_per_packet")
        for r in runs:
            c = r.get("cpu_us_per_packet_hop")
            r["floor_cpu_us_per_packet"] = f_us
            r["cpu_vs_floor"] = round(c / f_us, 2) if c and f_us else None
            print(f"# {r['engine']} {r['packet_hops_per_s']} packet-hops/s: {c} us CPU per packet-hop, floor "
                  f"{f_us} us per packet ({r['cpu_vs_floor']}x), load {r['load_after']}", file=sys.stderr)
        print(json.dumps({"nfqueue_floor": floor}))
    if args.json:
        last = runs[-1] if runs else {}
        summary = {k: last.get(k) for k in ("engine", "N", "pps", "rate_achieved_pps", "packet_hops_per_s",
                                            "e2e_error_p50_ms", "e2e_error_p99_ms", "hold_error_p99_ms",
                                            "cpu_us_per_packet_hop", "cpu_share", "load_before", "load_after")}
        args.json.write_text(json.dumps({**summary, "load": last.get("load_after"), "runs": runs,
                                         "nfqueue_floor": floor}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
