"""The NFQUEUE floor (issue #21): what the kernel's NFQUEUE round trip costs with a minimal C program
(benchmarks/nfq_floor.c, libnetfilter_queue, ACCEPT every packet at once) on this machine, now (needs root, gcc
and libnetfilter-queue-dev, which `make setup` installs).

    python benchmarks/bench_floor.py [--rate-pps 0] [--seconds 5] [--latency-pps 2000] [--sender c|python]
                                     [--trace] [--json FILE]

Builds two namespaces of its own (`nfqf<pid>x<k>a`/`b`, a veth pair, IPv4 only, offloads off), compiles
nfq_floor.c with gcc into a temporary directory, and:

1. sends UDP (100 B IP packets) from a to b at `--latency-pps` for a while without any rule: one-way latency
   (sender's CLOCK_MONOTONIC stamp in the payload -> the receiver's read; also the kernel's receive timestamp,
   SO_TIMESTAMPNS) -- the path without a queue;
2. adds `-t mangle -A POSTROUTING -o <veth> -j NFQUEUE --queue-num 0` in a (the delay line queues in FORWARD and
   OUTPUT; for one sender's own packets the two hooks cost the same) with
   nfq_floor serving queue 0 (SCHED_FIFO 50, like the delay line in bench_delayline.py), and sends at
   `--rate-pps` for `--seconds` to a port nobody listens on (0: as fast as a sender goes -- `--sender c`, the
   default, is nfq_floor's own sendmmsg flooder at normal priority, `python` one Python loop): packets/s through
   the queue (until it has drained), packets the kernel dropped (`lost_in_kernel`: the queue was full), and the
   floor program's own user + system CPU per packet (its getrusage, asked for by SIGUSR1 at the start and the
   end of the window);
3. the latency of step 1 again, through the queue.

Prints one JSON object (also `--json FILE`); `measure_floor(rate_pps, seconds)` returns it (bench_scale.py).
Everything it creates is removed afterwards, also on failure, Ctrl-C and SIGTERM.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SOURCE = HERE / "nfq_floor.c"
PORT = 9997                 # the receiver (latency phases)
SINK_PORT = 9996            # nobody listens: the throughput phase costs no receiver CPU
PAYLOAD = 72                # + 8 UDP + 20 IP = 100 B packets, as bench_delayline.py
HDR = struct.Struct("!qq")  # seq, sender's CLOCK_MONOTONIC ns (first 16 payload bytes)
REC = struct.Struct("<qq24s")  # nfq_floor's trace record
RT_FLOOR = 50               # the delay line's priority in bench_delayline.py ...
RT_TOOLS = 40               # ... and its sender's/receiver's
_counter = itertools.count()

# Receiver (own process in namespace b): per packet seq, sender stamp, kernel receive time (CLOCK_REALTIME ns,
# SO_TIMESTAMPNS), application read time (CLOCK_MONOTONIC ns); written as int64 quadruples to argv[3] on a packet
# with seq -1 (or after 60 s without any). Prints "bound", then the realtime-monotonic offset.
RECEIVER = r"""
import array, socket, struct, sys, time
addr, port, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 23)
s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
s.bind((addr, port))
s.settimeout(0.1)
def offset():
    best = None
    for _ in range(50):
        a = time.monotonic_ns(); r = time.time_ns(); b = time.monotonic_ns()
        if best is None or b - a < best[0]:
            best = (b - a, r - (a + b) // 2)
    return best[1]
off0 = offset()
print("bound", flush=True)
rec, last, hdr, ts = array.array("q"), None, struct.Struct("!qq"), struct.Struct("=qq")
cmsg_space = socket.CMSG_SPACE(16)
last = time.monotonic()
while time.monotonic() - last < 60:
    try:
        data, anc, _f, _a = s.recvmsg(256, cmsg_space)
    except socket.timeout:
        continue
    now = time.monotonic_ns()
    last = time.monotonic()
    seq, sent = hdr.unpack_from(data)
    if seq < 0:
        break
    krx = 0
    for lvl, typ, d in anc:
        if lvl == socket.SOL_SOCKET and typ == SO_TIMESTAMPNS:
            sec, nsec = ts.unpack_from(d)
            krx = sec * 1000000000 + nsec
    rec.extend((seq, sent, krx, now))
with open(out, "wb") as f:
    rec.tofile(f)
print((off0 + offset()) // 2, flush=True)
"""


# ------------------------------------------------------------------------------------------------ pure helpers
def percentile(sorted_xs, q: float):
    """The q-quantile of an ascending sequence (nearest rank, as bench_delayline.py); None when empty."""
    if not sorted_xs:
        return None
    return sorted_xs[min(len(sorted_xs) - 1, max(0, int(q * len(sorted_xs))))]


def summary(xs, scale: float = 1.0, digits: int = 3) -> dict:
    """count, p50, p99, max of `xs` (any order), each multiplied by `scale` and rounded."""
    s = sorted(xs)
    r = (lambda v: None if v is None else round(v * scale, digits))
    return {"n": len(s), "p50": r(percentile(s, 0.5)), "p99": r(percentile(s, 0.99)),
            "max": r(s[-1] if s else None)}


def parse_proc_stat(text: str) -> dict:
    """/proc/<pid>/stat -> {"utime_ticks", "stime_ticks", "state"}; the command name may hold spaces and
    parentheses, so fields are counted after its last ')'."""
    rest = text[text.rindex(")") + 2:].split()
    # rest[0] is field 3 (state); utime and stime are fields 14 and 15
    return {"state": rest[0], "utime_ticks": int(rest[11]), "stime_ticks": int(rest[12])}


def parse_stat_line(line: str) -> tuple[int, int, int]:
    """nfq_floor's "STAT <packets> <user_us> <sys_us>" -> (packets, user_us, sys_us)."""
    f = line.split()
    if len(f) != 4 or f[0] != "STAT":
        raise ValueError(f"not a STAT line: {line!r}")
    return int(f[1]), int(f[2]), int(f[3])


def parse_trace(data: bytes) -> list[tuple[int, int, int, int]]:
    """nfq_floor --trace records -> [(t_read_mono_ns, t_nfq_realtime_ns or 0, seq, sender_mono_ns)]: seq and
    the sender's stamp are this benchmark's payload header, after the 8-byte UDP header."""
    out = []
    for t_read, t_nfq, head in REC.iter_unpack(data[: len(data) - len(data) % REC.size]):
        seq, sent = HDR.unpack_from(head, 8)
        out.append((t_read, t_nfq, seq, sent))
    return out


def latency(records, offset_ns: int, seq_lo: int, seq_hi: int) -> dict:
    """One-way latency of the receiver's (seq, sent, krx_real, read_mono) quadruples with seq_lo <= seq < seq_hi:
    sender stamp -> application read, sender stamp -> kernel receive, kernel receive -> read (ms)."""
    app, kern, rd = [], [], []
    for seq, sent, krx, now in records:
        if seq_lo <= seq < seq_hi:
            app.append(now - sent)
            if krx:
                k = krx - offset_ns
                kern.append(k - sent)
                rd.append(now - k)
    return {"app_ms": summary(app, 1e-6), "kernel_rx_ms": summary(kern, 1e-6), "rx_to_read_ms": summary(rd, 1e-6)}


def quads(data: bytes) -> list[tuple[int, int, int, int]]:
    n = len(data) // 32
    return list(struct.iter_unpack("=qqqq", data[: n * 32]))


# ------------------------------------------------------------------------------------------------ side effects
def compile_floor(outdir: Path) -> Path:
    exe = outdir / "nfq_floor"
    r = subprocess.run(["gcc", "-O2", "-Wall", "-o", str(exe), str(SOURCE), "-lnetfilter_queue", "-lnfnetlink"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"cannot compile {SOURCE.name} (is libnetfilter-queue-dev installed? make setup): "
                           f"{r.stderr.strip()[-400:]}")
    return exe


def _run(argv: list[str], stdin: str | None = None) -> None:
    r = subprocess.run(argv, input=stdin, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {r.stderr.strip()}")


def _netns_exists(name: str) -> bool:
    return os.path.exists(f"/run/netns/{name}")


class Pair:
    """Two fresh namespaces joined by a veth: a (10.251.0.1) -> b (10.251.0.2); IPv4 only, offloads off.
    Removed by close() (kills what still runs in them first)."""

    A_IP, B_IP = "10.251.0.1", "10.251.0.2"

    def __init__(self, tag: str = "nfqf"):
        k = next(_counter)
        self.a, self.b = f"{tag}{os.getpid()}x{k}a", f"{tag}{os.getpid()}x{k}b"
        self.veth = "fl0"
        self.created: list[str] = []
        try:
            for ns in (self.a, self.b):
                if _netns_exists(ns):
                    raise RuntimeError(f"namespace {ns} exists already")
                _run(["ip", "netns", "add", ns])
                self.created.append(ns)
            _run(["ip", "link", "add", self.veth, "netns", self.a, "type", "veth", "peer", "name", "fl1", "netns",
                  self.b])
            for ns, ip, dev in ((self.a, self.A_IP, self.veth), (self.b, self.B_IP, "fl1")):
                _run(["ip", "-n", ns, "-batch", "-"], stdin="link set lo up\n"
                     f"addr add {ip}/30 dev {dev}\nlink set {dev} up\n")
                sys.path.insert(0, str(REPO))
                from orchestrator.backends import netns  # noqa: PLC0415 - needs the repo on sys.path
                from orchestrator.backends.mininet import NODE_SYSCTLS  # noqa: PLC0415

                netns.write_sysctls(ns, NODE_SYSCTLS)
                netns.disable_offloads(ns, [dev])
        except BaseException:
            self.close()
            raise

    def exec_argv(self, ns: str, argv: list[str], rt: int = 0) -> list[str]:
        return ["ip", "netns", "exec", ns] + (["chrt", "-f", str(rt)] if rt else []) + argv

    def sender(self) -> socket.socket:
        from gossipnode.netns import entered  # noqa: PLC0415

        with entered(self.a):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 22)
        return s

    def add_queue_rule(self) -> None:
        _run(["ip", "netns", "exec", self.a, "iptables", "-w", "-t", "mangle", "-A", "POSTROUTING", "-o",
              self.veth, "-j", "NFQUEUE", "--queue-num", "0"])

    def del_queue_rule(self) -> None:
        _run(["ip", "netns", "exec", self.a, "iptables", "-w", "-t", "mangle", "-F", "POSTROUTING"])

    def close(self) -> None:
        for ns in self.created:
            if not _netns_exists(ns):
                continue
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
            for p in pids:
                try:
                    os.kill(int(p), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self.created = []


def send(s: socket.socket, dst: tuple[str, int], rate_pps: float, seconds: float, seq0: int) -> tuple[int, float]:
    """Send 100 B UDP packets at rate_pps (0: back to back) for `seconds`; seq from seq0. -> (sent, elapsed)."""
    pad = b"\0" * (PAYLOAD - HDR.size)
    pack, mono, mono_ns, sendto = HDR.pack, time.monotonic, time.monotonic_ns, s.sendto
    start = mono()
    end = start + seconds
    sent = 0
    if rate_pps <= 0:
        while True:
            for _ in range(256):
                try:
                    sendto(pack(seq0 + sent, mono_ns()) + pad, dst)
                except OSError:  # ENOBUFS: the socket buffer is full -- the queue is the bottleneck
                    continue
                sent += 1
            if mono() >= end:
                break
    else:
        total = int(seconds * rate_pps)
        while sent < total:
            d = start + sent / rate_pps - mono()
            if d > 0:
                time.sleep(d)
            sendto(pack(seq0 + sent, mono_ns()) + pad, dst)
            sent += 1
    return sent, mono() - start


def _stat(proc: subprocess.Popen, timeout_s: float = 10.0) -> tuple[int, int, int]:
    proc.send_signal(signal.SIGUSR1)
    if not select.select([proc.stdout], [], [], timeout_s)[0]:
        raise RuntimeError(f"nfq_floor gave no STAT line within {timeout_s:.0f} s of SIGUSR1")
    return parse_stat_line(proc.stdout.readline())


def measure_floor(rate_pps: float, seconds: float, latency_pps: float = 2000.0,
                  latency_seconds: float | None = None, trace: bool = False, sender: str = "c") -> dict:
    """The NFQUEUE floor, measured now (see the module doc). `rate_pps` 0: as fast as the sender goes -- with
    `sender` "c" nfq_floor's own flooder (sendmmsg, normal priority), "python" one Python loop.
    `trace`: also the time packets waited in the kernel queue before nfq_floor read them (latency phase)."""
    if os.geteuid() != 0:
        raise PermissionError("bench_floor needs root (namespaces, iptables)")
    lat_s = latency_seconds if latency_seconds is not None else max(0.5, min(seconds, 2.0))
    out: dict = {"rate_pps_asked": rate_pps, "seconds": seconds, "latency_pps": latency_pps,
                 "load_before": os.getloadavg()[0]}
    pair = floor = rx = None
    old_sched = os.sched_getscheduler(0), os.sched_getparam(0)
    with tempfile.TemporaryDirectory(prefix="bench-floor-") as d:
        tmp = Path(d)
        try:
            exe = compile_floor(tmp)
            pair = Pair()
            rx = subprocess.Popen(pair.exec_argv(pair.b, [sys.executable, "-c", RECEIVER, pair.B_IP, str(PORT),
                                                          str(tmp / "rx.bin")], rt=RT_TOOLS),
                                  stdout=subprocess.PIPE, text=True)
            if rx.stdout.readline().strip() != "bound":
                raise RuntimeError("receiver did not start")
            s = pair.sender()
            dst, sink = (Pair.B_IP, PORT), (Pair.B_IP, SINK_PORT)
            send(s, dst, latency_pps, 0.2, 0)                      # warm-up: ARP, caches
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(RT_TOOLS))
            n_noq, _ = send(s, dst, latency_pps, lat_s, 1 << 40)   # 1: no queue
            os.sched_setscheduler(0, *old_sched[:1], old_sched[1])

            pair.add_queue_rule()
            argv = [str(exe), "0"] + (["--copy", "64", "--trace", str(tmp / "nfq.bin")] if trace else [])
            floor = subprocess.Popen(pair.exec_argv(pair.a, argv, rt=RT_FLOOR), stdout=subprocess.PIPE, text=True)
            line = floor.stdout.readline()
            if not line.startswith("READY"):
                raise RuntimeError(f"nfq_floor did not start: {line!r}")
            send(s, sink, 1000, 0.2, 0)                            # warm-up through the queue
            p0, u0, s0 = _stat(floor)
            t0 = time.monotonic()
            if rate_pps <= 0 and sender == "c":                    # 2: throughput
                fl = subprocess.run(pair.exec_argv(pair.a, [str(exe), "--flood", Pair.B_IP, str(SINK_PORT),
                                                            str(seconds)]), capture_output=True, text=True)
                f = fl.stdout.split()
                if fl.returncode != 0 or len(f) != 3 or f[0] != "SENT":
                    raise RuntimeError(f"flooder failed: {fl.stdout} {fl.stderr}")
                sent, send_s = int(f[1]), float(f[2])
            else:
                sent, send_s = send(s, sink, rate_pps, seconds, 0)
            p1, u1, s1 = _stat(floor)
            t1 = time.monotonic()
            while True:                                            # until the queue has drained
                time.sleep(0.02)
                p2, u2, s2 = _stat(floor)
                if p2 == p1:
                    break
                p1, u1, s1, t1 = p2, u2, s2, time.monotonic()
            elapsed = t1 - t0
            pk = p1 - p0
            out.update({
                "sender": sender if rate_pps <= 0 else "python", "sent": sent,
                "sender_pps": round(sent / send_s), "packets": pk, "lost_in_kernel": sent - pk,
                "packets_per_s": round(pk / elapsed),
                "cpu_user_us_per_packet": round((u1 - u0) / pk, 2) if pk else None,
                "cpu_sys_us_per_packet": round((s1 - s0) / pk, 2) if pk else None,
                "cpu_us_per_packet": round((u1 - u0 + s1 - s0) / pk, 2) if pk else None,
                "cpu_share": round((u1 - u0 + s1 - s0) / 1e6 / elapsed, 3),
            })
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(RT_TOOLS))
            n_q, _ = send(s, dst, latency_pps, lat_s, 2 << 40)      # 3: through the queue
            os.sched_setscheduler(0, *old_sched[:1], old_sched[1])
            s.sendto(HDR.pack(-1, 0) + b"\0" * (PAYLOAD - HDR.size), dst)
            s.close()
            offset = int(rx.communicate(timeout=30)[0].strip())
            recs = quads((tmp / "rx.bin").read_bytes())
            floor.send_signal(signal.SIGTERM)
            floor.communicate(timeout=30)
            out["latency_no_queue"] = {"sent": n_noq, **latency(recs, offset, 1 << 40, 2 << 40)}
            out["latency_queue"] = {"sent": n_q, **latency(recs, offset, 2 << 40, 3 << 40)}
            out["latency_queue"]["received"] = out["latency_queue"]["app_ms"]["n"]
            out["latency_no_queue"]["received"] = out["latency_no_queue"]["app_ms"]["n"]
            if trace:
                tr = [r for r in parse_trace((tmp / "nfq.bin").read_bytes()) if (2 << 40) <= r[2] < (3 << 40)]
                out["latency_queue"]["sender_to_floor_read_ms"] = summary([t - sent for t, _, _, sent in tr], 1e-6)
                out["latency_queue"]["nfq_timestamp_present"] = sum(1 for r in tr if r[1])
        finally:
            os.sched_setscheduler(0, *old_sched[:1], old_sched[1])
            for p in (floor, rx):
                if p is not None and p.poll() is None:
                    p.kill()
                    p.wait()
            if pair is not None:
                pair.close()
    out["load_after"] = os.getloadavg()[0]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rate-pps", type=float, default=0, help="throughput phase rate (0: as fast as possible)")
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--latency-pps", type=float, default=2000)
    ap.add_argument("--trace", action="store_true", help="also time the kernel queue (nfq_floor --trace)")
    ap.add_argument("--sender", choices=("c", "python"), default="c", help="the flooder for --rate-pps 0")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    res = measure_floor(args.rate_pps, args.seconds, latency_pps=args.latency_pps, trace=args.trace,
                        sender=args.sender)
    print(json.dumps(res))
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
