"""Where the delay line's end-to-end p99 comes from (issue #21, "First find the tail"; needs root).

    python benchmarks/bench_tail.py [--n 200] [--pps 2000] [--seconds 5] [--phases idle,busy,busy-nort]
                                    [--rules own|forward] [--stamp daemon|kernel] [--engine python|c]
                                    [--rev HEAD] [--repo DIR] [--json FILE]

bench_delayline.py's workload (its tree of N namespaces, every link direction 10 Mbit/s + 5 ms + queue 1000,
`--pps` 100 B UDP packets/s round-robin from the 40 deepest leaves to the root), run on the delay line of git
revision `--rev` (exported to a temporary directory, so other people's uncommitted work does not change what is
measured), with the daemon traced from the inside: the unchanged daemon runs in a wrapper (`--traced-daemon`)
that records, per packet and hop, when the recv() that brought it returned, the arrival time the daemon stamped
on it, its scheduled and actual release, and the verdict send() that carried it (start, end). The sender records
its payload stamp and when sendto() returned; the receiver the kernel's receive timestamp (SO_TIMESTAMPNS) and
its read. With `t_in` = the sender's stamp (hop 1) or the start of the previous hop's verdict send() (hop k > 1:
the next namespace forwards the released packet inside that send), the end-to-end error
`read - stamp - depth x (delay + serialisation)` is exactly the sum of

| component | per hop / per packet |
|---|---|
| `stamp_error` | arrival time the daemon stamped - t_in (a late read stamped late delays the packet by as much) |
| `model_queue` | scheduled release - stamp - (delay + serialisation): the link model's own queueing |
| `hold_error` | actual release - scheduled release (the daemon's own measure) |
| `release_to_send` | start of the verdict send() - release |
| `delivery` | kernel receive timestamp at the receiver - start of the last verdict send() |
| `rx_read` | the receiver's read - kernel receive timestamp |

and, for information, `sender_lag` (the sender's stamp - when its schedule said to send: a late sender sends
the missed packets back to back, and the link model queues that burst, correctly), `send_syscall` (sendto()
return - stamp), `read_lag` (recv() return - t_in),
`hop1_queue_wait` (recv() return - sendto() return) and `verdict_send` (the send()'s duration). Each is
reported as p50/p99 over packets (sums over the packet's hops), plus its mean among the packets of the e2e tail
(e2e >= its p99). Phases: `idle` (nothing added), `busy` (a CPU hog at normal priority: the other core busy),
`busy-nort` (the hog, and the sender and receiver at normal priority instead of SCHED_FIFO 40). The machine's
load average is printed with every phase.

`--rules forward` queues in mangle FORWARD + OUTPUT instead of the revision's own rules (POSTROUTING before the
fix of docs/delayline-tail.md): forwarded packets
then reach the daemon with the kernel's receive timestamp (NFQA_TIMESTAMP; at POSTROUTING the kernel has
cleared it), which adds `kernel_queue_wait` (recv() return - that timestamp), `stamp_minus_kernel` and
`forward_path` (timestamp - previous verdict send() start). `--stamp kernel` (with it) is the proposed fix,
tried from the wrapper: a packet is admitted at its kernel timestamp instead of the loop's estimate. The
tracing costs the daemon some CPU (a Python walk of each recv's
messages): its hold error is printed beside the untraced daemon's own numbers for comparison.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

import bench_floor as bf  # noqa: E402 - percentile/summary, the receiver

NFQA_TIMESTAMP = 4
NFQA_PAYLOAD = 10
MSG_PACKET = (3 << 8) | 0
COPY_RANGE = 64          # IP 20 + UDP 8 + the 16-byte header (seq, stamp) of our payload, rounded up
RT_TOOLS = 40
PHASE_SHIFT = 40         # seq = phase << 40 | n
COMPONENTS = ("stamp_error", "model_queue", "hold_error", "release_to_send", "delivery", "rx_read")
INFO = ("sender_lag", "send_syscall", "read_lag", "hop1_queue_wait", "verdict_send", "kernel_queue_wait",
        "stamp_minus_kernel", "forward_path")


# ------------------------------------------------------------------------------------------------ pure parts
ATTR_ORDERS: set = set()  # distinct attribute-type sequences of queued-packet messages seen (for the parser)


def walk_packets(buf, n: int) -> list[tuple[int, int]]:
    """Every NFQNL_MSG_PACKET in buf[:n] -> (seq of our payload or -1, NFQA_TIMESTAMP in ns or 0), in order
    (the same order as the delay line's parser returns them)."""
    out = []
    off = 0
    while off + 16 <= n:
        mlen, mtype = struct.unpack_from("=IH", buf, off)
        if mlen < 16:
            break
        end = min(off + mlen, n)
        if mtype == MSG_PACKET:
            seq, tn = -1, 0
            a = off + 20
            order = []
            while a + 4 <= end:
                alen, atype = struct.unpack_from("=HH", buf, a)
                if alen < 4:
                    break
                atype &= 0x3FFF
                order.append(atype)
                if atype == NFQA_PAYLOAD and alen >= 4 + 28 + 8:
                    ihl = (buf[a + 4] & 15) * 4
                    if alen >= 4 + ihl + 8 + 8:
                        seq = struct.unpack_from("!q", buf, a + 4 + ihl + 8)[0]
                elif atype == NFQA_TIMESTAMP and alen >= 20:
                    sec, usec = struct.unpack_from(">QQ", buf, a + 4)
                    tn = sec * 1_000_000_000 + usec * 1000
                a += (alen + 3) & ~3
            if len(ATTR_ORDERS) < 20:
                ATTR_ORDERS.add(tuple(order))
            out.append((seq, tn))
        off += (mlen + 3) & ~3
    return out


def render_rules_forward(queues) -> str:
    """Like the delay line's render_rules, but queueing in mangle FORWARD (forwarded packets: the kernel's
    receive timestamp is still on the packet there, so NFQUEUE passes it as NFQA_TIMESTAMP; ip_forward_finish
    clears it before POSTROUTING) and mangle OUTPUT (the namespace's own packets)."""
    lines = ["*mangle"]
    for ifname, q in queues:
        for chain in ("FORWARD", "OUTPUT"):
            lines.append(f"-A {chain} -o {ifname} -m comment --comment delayline -j NFQUEUE --queue-num {int(q)}")
    return "\n".join(lines + ["COMMIT", ""])


def decompose(hops: list[tuple], t_app: float, t_sent: float, krx: float, t_read: float, nominal: float,
              t_due: float | None = None, per_hop: dict | None = None) -> dict:
    """One packet's components (seconds). `hops`: per hop, in path order, (t_recv, stamp, t_sched, t_release,
    send_start, send_end, kernel timestamp or None). The components in COMPONENTS add up to `e2e`; the kernel's
    queue timestamp (when present) splits the read lag into forward path + kernel queue wait."""
    c = dict.fromkeys(COMPONENTS + INFO, 0.0)
    t_in = t_app
    for k, (t_recv, stamp, t_sched, t_rel, s0, s1, t_k) in enumerate(hops):
        if t_k is not None:
            c["kernel_queue_wait"] += t_recv - t_k
            c["stamp_minus_kernel"] += stamp - t_k
            if k:
                c["forward_path"] += t_k - t_in
        c["stamp_error"] += stamp - t_in
        c["read_lag"] += t_recv - t_in
        c["model_queue"] += t_sched - stamp - nominal
        c["hold_error"] += t_rel - t_sched
        if per_hop is not None:
            per_hop["hold_error"].append(t_rel - t_sched)
            per_hop["stamp_error"].append(stamp - t_in)
        c["release_to_send"] += s0 - t_rel
        c["verdict_send"] += s1 - s0
        t_in = s0
    c["delivery"] = krx - t_in
    c["rx_read"] = t_read - krx
    c["send_syscall"] = t_sent - t_app
    c["sender_lag"] = t_app - t_due if t_due is not None else 0.0
    c["hop1_queue_wait"] = hops[0][0] - t_sent if hops else 0.0
    c["e2e"] = t_read - t_app - len(hops) * nominal
    return c


def hop_quantiles(xs: list[float]) -> dict:
    """p50/p99/p99.9/max (ms) of one component per hop: a packet crossing k hops meets the per-hop p(1 - 1/(100k))
    in its own p99."""
    s = sorted(xs)
    if not s:
        return {"n": 0}
    return {"n": len(s), **{f"p{q}_ms": round(bf.percentile(s, q / 100) * 1e3, 3) for q in (50, 99, 99.9)},
            "max_ms": round(s[-1] * 1e3, 3)}


def report(rows: list[dict]) -> dict:
    """p50/p99 (ms) of every component over packets, and its mean over the e2e tail (e2e >= e2e's p99)."""
    if not rows:
        return {"packets": 0}
    e2e = sorted(r["e2e"] for r in rows)
    cut = bf.percentile(e2e, 0.99)
    tail = [r for r in rows if r["e2e"] >= cut]
    out = {"packets": len(rows), "tail_packets": len(tail)}
    for k in ("e2e",) + COMPONENTS + INFO:
        s = sorted(r[k] for r in rows)
        out[k] = {"p50_ms": round(bf.percentile(s, 0.5) * 1e3, 3), "p99_ms": round(bf.percentile(s, 0.99) * 1e3, 3),
                  "tail_mean_ms": round(sum(r[k] for r in tail) / len(tail) * 1e3, 3)}
    return out


def external(pkts, nominal: float) -> dict:
    """What is seen without looking inside the daemon, per packet (depth, t_app_ns, t_sent_ns, t_due, krx_ns,
    read_ns): `e2e_read` (bench_delayline.py's measure: read - stamp - depth x nominal), `e2e_kernel` (the kernel's
    receive time instead of the read), `sender_lag`, `send_syscall`, `rx_read`; p50/p99 in ms."""
    cols: dict[str, list[float]] = {k: [] for k in ("e2e_read", "e2e_kernel", "sender_lag", "send_syscall",
                                                   "rx_read")}
    for depth, ta, ts, due, krx, rd in pkts:
        cols["e2e_read"].append((rd - ta) / 1e9 - depth * nominal)
        cols["sender_lag"].append(ta / 1e9 - due)
        cols["send_syscall"].append((ts - ta) / 1e9)
        if krx:
            cols["e2e_kernel"].append((krx - ta) / 1e9 - depth * nominal)
            cols["rx_read"].append((rd - krx) / 1e9)
    out: dict = {"packets": len(pkts)}
    for k, xs in cols.items():
        s = sorted(xs)
        out[k] = {"p50_ms": round(bf.percentile(s, 0.5) * 1e3, 3) if s else None,
                  "p99_ms": round(bf.percentile(s, 0.99) * 1e3, 3) if s else None}
    return out


# ------------------------------------------------------------------------------------------------ traced daemon
def realtime_minus_monotonic() -> float:
    """CLOCK_REALTIME - CLOCK_MONOTONIC (s), from the tightest of a few readings."""
    best = None
    for _ in range(5):
        a = time.monotonic()
        r = time.time()
        b = time.monotonic()
        if best is None or b - a < best[0]:
            best = (b - a, r - (a + b) / 2)
    return best[1]


def traced_daemon(snap: str, out: str, stamp: str, argv: list[str]) -> int:
    """Run revision `snap`'s daemon unchanged, its loop's methods wrapped to record timings; write them to `out`
    (JSON) when it exits. `stamp` "kernel": the experiment of the proposed fix -- a packet that carries the
    kernel's NFQA_TIMESTAMP is admitted at that time (converted to CLOCK_MONOTONIC) instead of the loop's
    estimate, when earlier; "daemon": the daemon's own stamps."""
    sys.path[:0] = [snap, os.path.join(snap, "node_image")]
    from orchestrator.shaping.delayline import daemon as D
    from orchestrator.shaping.delayline import loop as L

    mono = time.monotonic
    admits, releases, sends = [], [], []
    clock_offset = [realtime_minus_monotonic(), mono()]
    if stamp == "kernel":  # kernel receive timestamps on (a global switch while any socket asks for them)
        ts_sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        ts_sock.setsockopt(socket.SOL_SOCKET, getattr(socket, "SO_TIMESTAMPNS", 35), 1)
    EL = L.EventLoop
    o_init, o_admit, o_release, o_flush = EL.__init__, EL._admit, EL._release, EL._flush

    def init(self, *a, **k):
        o_init(self, *a, **k)
        parse = self.parse
        self._tr = None

        def traced_parse(buf, n, parse=parse):
            t = mono()
            r = parse(buf, n)
            self._tr = (t, walk_packets(buf, n))
            return r
        self.parse = traced_parse

    def admit(self, ns, pkts, now):
        tr, self._tr = self._tr, None
        if tr is None:
            o_admit(self, ns, pkts, now)
            return
        t, info = tr
        key = f"{ns.key[0]}:{ns.key[1]}"
        if stamp == "kernel":
            off = clock_offset[0]
            for pkt, (seq, tn) in zip(pkts, info):
                st = now
                if tn:
                    k = tn / 1e9 - off
                    if k < now:
                        st = k
                o_admit(self, ns, [pkt], st)
                admits.append((key, pkt[0], pkt[1], seq, tn, t, st))
            return
        o_admit(self, ns, pkts, now)
        off = getattr(self, "rt_offset", None)   # a revision that admits at the kernel's time (the fix)
        for pkt, (seq, tn) in zip(pkts, info):
            st = now
            if off is not None and len(pkt) > 3 and pkt[3] and pkt[3] - off < now:
                st = pkt[3] - off
            admits.append((key, pkt[0], pkt[1], seq, tn, t, st))

    def release(self, now):
        horizon = now + self.advance
        due = [e for e in self.heap if e[0] <= horizon and e[4] == e[2].gen]
        o_release(self, now)
        fi = len(sends)
        for t, _s, d, pid, _g in due:
            releases.append((f"{d.ns.key[0]}:{d.ns.key[1]}", d.qnum, pid, t, now, fi))

    def flush(self):
        t0 = mono()
        o_flush(self)
        t1 = mono()
        sends.append((t0, t1))
        if t1 - clock_offset[1] > 1.0:
            clock_offset[:] = [realtime_minus_monotonic(), t1]

    EL.__init__, EL._admit, EL._release, EL._flush = init, admit, release, flush
    try:
        return D.main(argv)
    finally:
        with open(out, "w") as f:
            json.dump({"admits": admits, "releases": releases, "sends": sends,
                       "attr_orders": sorted(ATTR_ORDERS)}, f)


# ------------------------------------------------------------------------------------------------ the run
def export_rev(rev: str, dest: Path, repo: Path = REPO) -> str:
    """`git archive` the delay line, the node's netns helper and bench_delayline.py of `rev` into dest."""
    commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", rev], capture_output=True, text=True,
                            check=True).stdout.strip()
    ar = subprocess.Popen(["git", "-C", str(repo), "archive", "--format=tar", rev, "orchestrator",
                           "node_image/gossipnode", "benchmarks/bench_delayline.py"], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(dest)], stdin=ar.stdout, check=True)
    ar.stdout.close()
    if ar.wait() != 0:
        raise RuntimeError(f"git archive {rev} failed")
    return commit


def run(args) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="bench-tail-"))
    snap = tmp / "snap"
    snap.mkdir()
    commit = export_rev(args.rev, snap, args.repo)
    builder = snap / "orchestrator" / "shaping" / "delayline" / "build_engine.py"
    if args.engine == "c" and builder.exists():   # the revision's compiled engine, built in the snapshot
        subprocess.run([sys.executable, str(builder)], check=True, capture_output=True)
    sys.path[:0] = [str(snap / "benchmarks"), str(snap), str(snap / "node_image")]
    import bench_delayline as bd  # the revision's: its tree, its preparation of namespaces

    from orchestrator.shaping import nfqueue as nfq
    from orchestrator.shaping.delayline import DelayLineClient, render_config
    from orchestrator.shaping.params import DirParams

    bd.PREFIX = f"tl{os.getpid()}n"
    t = proc = client = rx = None
    hogs: list[subprocess.Popen] = []
    res: dict = {"rev": commit, "N": args.n, "pps": args.pps, "seconds": args.seconds, "rules": args.rules,
                 "stamp": args.stamp}
    old = os.sched_getscheduler(0), os.sched_getparam(0)
    try:
        t = bd.Tree(args.n)
        if any(os.path.exists(f"/run/netns/{t.ns(i)}") for i in range(t.n)):
            raise RuntimeError(f"namespaces {bd.PREFIX}* exist already")
        bd.build(t)
        params = DirParams(rate_bps=args.rate_bps, delay_s=args.delay_s, queue_pkts=1000)
        specs, per_ns = bd.queues(t, params)
        cfg = render_config(specs, control=str(tmp / "dl.sock"))
        cfg["copy_range"] = COPY_RANGE
        if args.engine:    # revisions with engines (#21): only the python engine, unsharded, is traced inside
            cfg["engine"] = args.engine
            cfg["shards"] = args.shards
        (tmp / "dl.json").write_text(json.dumps(cfg))
        trace = tmp / "trace.json"
        with open(tmp / "dl.log", "w") as log_f:
            proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--traced-daemon", str(snap),
                                     str(trace), args.stamp, "--", "--config", str(tmp / "dl.json"),
                                     "--rt-priority", "50"], stdout=subprocess.PIPE, stderr=log_f, text=True)
        line = proc.stdout.readline()
        if not line.startswith("READY"):
            raise RuntimeError(f"traced delay line did not start: {line!r} {(tmp / 'dl.log').read_text()[-500:]}")
        client = DelayLineClient(str(tmp / "dl.sock"), timeout=60)

        def prepare(i: int) -> None:
            if args.rules == "own":
                bd.prepare_ns(t.ns(i), per_ns[i])      # the revision's own rules
            else:
                bd.netns.disable_offloads(t.ns(i), [f for f, _ in per_ns[i]])
                bd.netns.iptables_restore(t.ns(i), render_rules_forward(per_ns[i]))
        with ThreadPoolExecutor(max_workers=8) as ex:
            list(ex.map(prepare, [i for i in range(t.n) if per_ns[i]]))

        leaves = sorted((i for i in range(t.n) if not t.kids[i]), key=lambda i: (-t.depth[i], i))[: args.leaves]
        socks = []
        for i in leaves:
            with nfq.in_netns(f"/run/netns/{t.ns(i)}"):
                socks.append(socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
        dst = (bd.ip4(t.addr[0]), bf.PORT)
        rx = subprocess.Popen(["ip", "netns", "exec", t.ns(0), sys.executable, "-c", bf.RECEIVER, dst[0],
                               str(dst[1]), str(tmp / "rx.bin")], stdout=subprocess.PIPE, text=True)
        if rx.stdout.readline().strip() != "bound":
            raise RuntimeError("receiver did not start")
        pad = b"\0" * (bf.PAYLOAD - bf.HDR.size)
        sent_log: dict[int, tuple[int, int, int, float]] = {}   # seq -> (leaf, t_app_ns, t_sent_ns, t_due)

        def send_for(seconds: float, seq0: int, log: bool) -> int:
            mono, mono_ns, pack = time.monotonic, time.monotonic_ns, bf.HDR.pack
            sent, k, start = 0, 0, mono()
            total = int(seconds * args.pps)
            while sent < total:
                due = start + sent / args.pps
                d = due - mono()
                if d > 0:
                    time.sleep(d)
                leaf, s = leaves[k], socks[k]
                k = (k + 1) % len(socks)
                ta = mono_ns()
                s.sendto(pack(seq0 + sent, ta) + pad, dst)
                if log:
                    sent_log[seq0 + sent] = (leaf, ta, mono_ns(), due)
                sent += 1
            return sent

        # the receiver's rt priority is set per phase with chrt -p on its pid (the ip netns exec child)
        rx_pids = [int(p) for p in subprocess.run(["pgrep", "-P", str(rx.pid)], capture_output=True,
                                                   text=True).stdout.split()] or [rx.pid]
        send_for(1.0, 0, False)                     # warm-up: ARP, caches (seq 0.. of phase 0, not logged)
        gc.collect()
        gc.disable()       # no collector pauses in the sender (its log grows by a tuple per packet)
        time.sleep(0.5)
        phases = args.phases.split(",")
        res["phases"] = {}
        for pi, ph in enumerate(phases, start=1):
            rt = ph != "busy-nort" and not ph.endswith("-nort")
            if ph.startswith("busy"):
                hogs.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))
            for p in rx_pids:
                subprocess.run(["chrt", "-p", "-f" if rt else "-o", str(RT_TOOLS if rt else 0), str(p)], check=True,
                               capture_output=True)
            os.sched_setscheduler(0, os.SCHED_FIFO if rt else os.SCHED_OTHER,
                                  os.sched_param(RT_TOOLS if rt else 0))
            time.sleep(0.3)
            st0 = client.stats(ids=[], reset=True, kernel=False)
            load0 = os.getloadavg()[0]
            n = send_for(args.seconds, pi << PHASE_SHIFT, True)
            os.sched_setscheduler(0, old[0], old[1])
            time.sleep(0.3)
            st = client.stats(ids=[], kernel=False)
            while hogs:
                h = hogs.pop()
                h.kill()
                h.wait()
            res["phases"][ph] = {"sent": n, "load": [round(load0, 2), round(os.getloadavg()[0], 2)],
                                 "tools_rt": rt, "daemon_hold_error_ms": {
                                     k: round(st["hold_error"][k] * 1e3, 3) for k in ("p50_s", "p99_s", "max_s")},
                                 "daemon_cpu_us_per_packet_hop": round(
                                     (st["cpu_s"] - st0["cpu_s"]) / max(1, st["packets"] - st0["packets"]) * 1e6, 1)}
        gc.enable()
        socks[0].sendto(bf.HDR.pack(-1, 0) + pad, dst)
        offset = int(rx.communicate(timeout=90)[0].strip())
        recv = {seq: (krx - offset, rd) for seq, _s, krx, rd in bf.quads((tmp / "rx.bin").read_bytes())}
        client.shutdown()
        proc.wait(timeout=60)
        tr = json.loads(trace.read_text())
        res["nfq_attr_orders"] = tr["attr_orders"]

        # join: hops per seq
        rel = {(k, q, p): (ts, tr_, fi) for k, q, p, ts, tr_, fi in tr["releases"]}
        sends = tr["sends"]
        hops: dict[int, list] = {}
        nfq_ts = 0
        for k, q, p, seq, tn, t_recv, stamp in tr["admits"]:
            r = rel.get((k, q, p))
            if seq < (1 << PHASE_SHIFT) or r is None or r[2] >= len(sends):
                continue
            nfq_ts += bool(tn)
            s0, s1 = sends[r[2]]
            hops.setdefault(seq, []).append((t_recv, stamp, r[0], r[1], s0, s1, (tn - offset) / 1e9 if tn else None))
        res["nfq_timestamp_present"] = nfq_ts
        nominal = args.delay_s + (100 + 14) * 8 / args.rate_bps
        for pi, ph in enumerate(phases, start=1):
            res["phases"][ph]["external"] = external(
                [(t.depth[leaf], ta, ts, due) + recv[seq] for seq, (leaf, ta, ts, due) in sent_log.items()
                 if seq >> PHASE_SHIFT == pi and seq in recv], nominal)
            rows, incomplete = [], 0
            per_hop: dict[str, list[float]] = {"hold_error": [], "stamp_error": []}
            for seq, (leaf, ta, ts, due) in sent_log.items():
                if seq >> PHASE_SHIFT != pi:
                    continue
                h = sorted(hops.get(seq, []))
                if seq not in recv or len(h) != t.depth[leaf] or not recv[seq][0]:
                    incomplete += 1
                    continue
                krx, rd = recv[seq]
                rows.append(decompose(h, ta / 1e9, ts / 1e9, krx / 1e9, rd / 1e9, nominal, due, per_hop))
            res["phases"][ph].update(report(rows))
            res["phases"][ph]["per_hop"] = {k: hop_quantiles(v) for k, v in per_hop.items()}
            res["phases"][ph]["incomplete"] = incomplete
            sums = [abs(sum(r[k] for k in COMPONENTS) - r["e2e"]) for r in rows]
            res["phases"][ph]["identity_max_error_us"] = round(max(sums) * 1e6, 3) if sums else None
        for s in socks:
            s.close()
        return res
    finally:
        gc.enable()
        os.sched_setscheduler(0, old[0], old[1])
        for h in hogs:
            h.kill()
            h.wait()
        for p in (rx, proc):
            if p is not None and p.poll() is None:
                if p is proc:
                    p.send_signal(signal.SIGTERM)
                    try:
                        p.wait(timeout=20)
                    except subprocess.TimeoutExpired:
                        pass
                if p.poll() is None:
                    p.kill()
                    p.wait()
        if t is not None:
            bd.teardown(t, None, None)
        subprocess.run(["rm", "-rf", str(tmp)])


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--traced-daemon":
        snap, out, stamp = sys.argv[2], sys.argv[3], sys.argv[4]
        rest = sys.argv[5:]
        return traced_daemon(snap, out, stamp, rest[1:] if rest[:1] == ["--"] else rest)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=200, help="tree size (bench_delayline.py's tree)")
    ap.add_argument("--leaves", type=int, default=40)
    ap.add_argument("--pps", type=float, default=2000)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--rate-bps", type=int, default=10_000_000)
    ap.add_argument("--delay-s", type=float, default=0.005)
    ap.add_argument("--phases", default="idle,busy,busy-nort")
    ap.add_argument("--rules", choices=("own", "forward"), default="own",
                    help="the revision's own rules (POSTROUTING before the fix) or FORWARD+OUTPUT ones")
    ap.add_argument("--stamp", choices=("daemon", "kernel"), default="daemon",
                    help="kernel: admit packets at their NFQA_TIMESTAMP (the proposed fix; needs --rules forward)")
    ap.add_argument("--engine", choices=("python", "c"), help="config engine (revisions that have engines); only "
                    "python is traced inside, c gives the external measures only")
    ap.add_argument("--shards", type=int, default=1, help="config shards, with --engine")
    ap.add_argument("--rev", default="HEAD", help="git revision whose delay line is measured")
    ap.add_argument("--repo", type=Path, default=REPO, help="the git repository of --rev (e.g. a clone with a fix)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    res = run(args)
    print(json.dumps(res))
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
