"""The delay line: netem semantics without sch_netem, for every link direction of a lab, in ONE process.

Each shaped egress interface has an iptables rule (mangle POSTROUTING, `-o IF -j NFQUEUE --queue-num N`, no
bypass) that hands its IPv4 packets to this process. One event loop (epoll + a timerfd) serves the NFQUEUEs of
every namespace: each packet is serialised at the link rate (IP length + 14 B L2 overhead) behind a bounded queue,
then delayed (+ jitter, optional netem-style reordering), and lost (Bernoulli or Gilbert-Elliott) as a DROP
verdict; everything else gets ACCEPT at its due time. A dead delay line fails closed: the kernel drops what it
held and every later packet of a shaped interface (no listener, no --queue-bypass).

    python -m orchestrator.shaping.delayline --config CONFIG.json [--rt-priority 50] [--die-with-parent PID]

Config (JSON, written by the orchestrator):
    {"queues": [{"id": "h3-eth0", "netns": "/run/netns/h3", "queue_num": 0, "params": DirParams.to_json()}, ...],
     "control": "/path/control.sock", "stats_file": null, "seed": null}
Prints `READY <pid>` once every queue is bound (the rules may be added from then on), or `ERROR <message>` and
exits non-zero. Control channel: JSON lines on a unix stream socket, see `DelayLineClient` and DELAYLINE.md.

This module also renders (never applies) what each namespace needs: `render_rules`, `render_unrules`,
`render_netns_prep`, and starts/talks to the daemon: `start_delayline`, `DelayLineClient`, `check_delayline`.
"""
from __future__ import annotations

import argparse
import ctypes
import errno
import gc
import heapq
import json
import math
import os
import random
import re
import resource
import select
import signal
import socket
import struct
import subprocess
import sys
import time
from array import array
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from orchestrator.errors import DelayLineDied, OrchestratorError
from orchestrator.shaping import nfqueue as nfq
from orchestrator.shaping.params import L2_OVERHEAD_BYTES, DirParams

DEFAULT_COPY_RANGE = 40          # bytes of each packet copied to us: IP + TCP/UDP header (the length is in it)
DEFAULT_KERNEL_MAXLEN = 65536    # packets the kernel may hold per queue (beyond it: queue_dropped -> fatal)
RING = 512                       # hold-error samples kept per direction (for its p50/p99)
HIST_BIN_S = 10e-6               # global hold-error histogram: 10 us bins ...
HIST_LO_S = -0.002               # ... from -2 ms (the first bin collects everything below) ...
HIST_BINS = 20200                # ... to +200 ms (the last bin collects everything above)
ADVANCE_INIT_S = 30e-6           # timer advance: start value of the wake-up latency estimate ...
ADVANCE_MAX_S = 150e-6           # ... its cap ...
ADVANCE_STEP_S = 0.5e-6          # ... and its step (a median tracker over timer wake-ups)
HOUSEKEEP_S = 0.01               # kernel-drop checks: a few namespaces every 10 ms (~10 us each), ...
HOUSEKEEP_MAX_NS = 4             # ... at most this many per tick, so all within max(1 s, N / 400 s)

_IFNAME = re.compile(r"^[A-Za-z0-9_.@:+-]{1,15}$")


# ======================================================================================================
# Rendering (pure): what the orchestrator applies in each namespace, as text / argv lists
# ======================================================================================================
def _check_ifname(ifname: str) -> str:
    if not _IFNAME.match(ifname):
        raise ValueError(f"bad interface name {ifname!r}")
    return ifname


def _rule(ifname: str, queue_num: int) -> str:
    if not 0 <= int(queue_num) <= 65535:
        raise ValueError(f"queue number {queue_num} out of range 0..65535")
    return (f"POSTROUTING -o {_check_ifname(ifname)} -m comment --comment delayline "
            f"-j NFQUEUE --queue-num {int(queue_num)}")


def render_rules(queues: Sequence[tuple[str, int]]) -> str:
    """iptables-restore input (apply with `ip netns exec NS iptables-restore --noflush`) that sends every IPv4
    packet leaving each (ifname, queue_num) to that NFQUEUE. No --queue-bypass: without a listener the kernel
    drops (fail closed). iptables only sees IPv4; IPv6 is switched off by `render_netns_prep`, ARP is never
    queued. Apply it only after the delay line printed READY (queues bound first)."""
    lines = ["*mangle"] + [f"-A {_rule(i, q)}" for i, q in queues] + ["COMMIT", ""]
    return "\n".join(lines)


def render_unrules(queues: Sequence[tuple[str, int]]) -> str:
    """The inverse of `render_rules` (same input). iptables-restore fails ("Bad rule") when a rule is already
    gone; a namespace that is deleted takes its rules with it."""
    lines = ["*mangle"] + [f"-D {_rule(i, q)}" for i, q in queues] + ["COMMIT", ""]
    return "\n".join(lines)


def render_iface_prep(ifname: str) -> list[list[str]]:
    """argv lists, run inside the interface's namespace: no segmentation/aggregation offloads, so every packet
    the delay line sees is one wire packet (shaped alone)."""
    return [["ethtool", "-K", _check_ifname(ifname), "tso", "off", "gso", "off", "gro", "off"]]


def render_netns_sysctls() -> list[list[str]]:
    """argv lists, run inside each shaped namespace: no IPv6 (iptables rules only queue IPv4)."""
    return [["sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1"],
            ["sysctl", "-q", "-w", "net.ipv6.conf.default.disable_ipv6=1"]]


def render_netns_prep(ifnames: Iterable[str]) -> list[list[str]]:
    """Everything one namespace needs before its rules: the sysctls, then the offloads of each shaped ifname."""
    out = render_netns_sysctls()
    for i in ifnames:
        out += render_iface_prep(i)
    return out


def netns_exec(netns: str, argv: list[str]) -> list[str]:
    """Wrap argv to run in the named namespace (`ip netns exec`)."""
    return ["ip", "netns", "exec", netns, *argv]


@dataclass(frozen=True)
class QueueSpec:
    """One shaped link direction: the egress interface behind NFQUEUE `queue_num` in namespace file `netns`."""

    id: str
    netns: str
    queue_num: int
    params: DirParams = field(default_factory=DirParams)

    def to_json(self) -> dict:
        return {"id": self.id, "netns": self.netns, "queue_num": self.queue_num, "params": self.params.to_json()}

    @classmethod
    def from_json(cls, d: dict) -> "QueueSpec":
        unknown = set(d) - {"id", "netns", "queue_num", "params"}
        if unknown:
            raise ValueError(f"unknown queue keys {sorted(unknown)}")
        return cls(id=str(d["id"]), netns=str(d["netns"]), queue_num=int(d["queue_num"]),
                   params=params_from_json(d.get("params") or {}))


def render_config(queues: Sequence[QueueSpec], control: str, stats_file: str | None = None,
                  seed: int | None = None) -> dict:
    """The daemon's config file content (json.dump it)."""
    return {"queues": [q.to_json() for q in queues], "control": str(control),
            "stats_file": str(stats_file) if stats_file else None, "seed": seed}


def params_from_json(d: dict) -> DirParams:
    try:
        p = DirParams.from_json(d)
    except TypeError as e:
        raise ValueError(f"bad params {d!r}: {e}") from None
    validate_params(p)
    return p


def validate_params(p: DirParams) -> None:
    def prob(name, v):
        if not (0.0 <= float(v) <= 1.0):
            raise ValueError(f"{name} must be a probability in [0, 1], got {v!r}")
    if p.rate_bps is not None and not p.rate_bps > 0:
        raise ValueError(f"rate_bps must be positive or null, got {p.rate_bps!r}")
    if p.delay_s < 0 or p.jitter_s < 0:
        raise ValueError("delay_s and jitter_s must be >= 0")
    if p.jitter_dist not in ("uniform", "normal"):
        raise ValueError(f"jitter_dist must be uniform or normal, got {p.jitter_dist!r}")
    prob("loss", p.loss)
    prob("reorder", p.reorder)
    if p.gemodel is not None:
        for k in ("p", "r", "loss_bad", "loss_good"):
            prob(f"gemodel.{k}", getattr(p.gemodel, k))
    if p.queue_pkts is not None and int(p.queue_pkts) < 1:
        raise ValueError(f"queue_pkts must be >= 1 or null, got {p.queue_pkts!r}")


# ======================================================================================================
# The daemon
# ======================================================================================================
_libc = ctypes.CDLL(None, use_errno=True)
_NL_LEN_TYPE = struct.Struct("=IH")
_NLA = struct.Struct("=HH")
_BE16 = struct.Struct(">H")
_BE32 = struct.Struct(">I")
CLOCK_MONOTONIC = 1
TFD_TIMER_ABSTIME = 1
PR_SET_PDEATHSIG = 1
PR_SET_TIMERSLACK = 29


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


class TimerFd:
    """A CLOCK_MONOTONIC timerfd (the same clock as time.monotonic), armed at absolute times."""

    def __init__(self):
        fd = _libc.timerfd_create(CLOCK_MONOTONIC, os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            e = ctypes.get_errno()
            raise OSError(e, f"timerfd_create: {os.strerror(e)}")
        self.fd = fd
        self._spec = _Itimerspec()
        self._ref = ctypes.byref(self._spec)

    def arm(self, t: float) -> None:
        sec = int(t)
        v = self._spec.it_value
        v.tv_sec = sec
        v.tv_nsec = int((t - sec) * 1e9)
        if _libc.timerfd_settime(self.fd, TFD_TIMER_ABSTIME, self._ref, None) != 0:
            e = ctypes.get_errno()
            raise OSError(e, f"timerfd_settime: {os.strerror(e)}")

    def disarm(self) -> None:
        v = self._spec.it_value
        v.tv_sec = v.tv_nsec = 0
        _libc.timerfd_settime(self.fd, 0, self._ref, None)


def _log(msg: str) -> None:
    sys.stderr.write(f"{time.strftime('%H:%M:%S')} delayline[{os.getpid()}] {msg}\n")
    sys.stderr.flush()


class Direction:
    """State of one shaped link direction."""

    __slots__ = ("id", "ns", "qnum", "params", "cut", "rng", "seed", "gen",
                 "sec_per_byte", "delay", "jitter", "normal", "loss", "ge", "ge_bad", "limit", "reorder",
                 "busy", "deps", "floor",
                 "packets", "accepted", "delayed", "reordered", "lost", "overflowed", "cut_dropped", "max_queue",
                 "queue_sum", "queued", "held", "err_n", "err_sum", "err_max", "ring")

    def __init__(self, spec: QueueSpec, ns: "Namespace", seed):
        self.id = spec.id
        self.ns = ns
        self.qnum = spec.queue_num
        self.cut = False
        self.seed = f"{seed}/{spec.id}" if seed is not None else None
        self.rng = None  # made when the params first need randomness (saves ~2.5 kB per direction)
        self.gen = 0
        self.busy = 0.0          # when the transmitter is free (end of the last serialisation)
        self.deps = deque()      # serialisation end times of packets not yet fully serialised
        self.floor = 0.0         # FIFO: no release before the previous delayed packet's release
        self.packets = self.accepted = self.delayed = self.reordered = 0
        self.lost = self.overflowed = self.cut_dropped = self.max_queue = self.held = 0
        self.queue_sum = self.queued = 0   # queue length seen by each packet admitted to the serialiser
        self.ge_bad = False
        self.reset_samples()
        self.apply(spec.params)

    def apply(self, p: DirParams) -> None:
        self.params = p
        self.sec_per_byte = 8.0 / p.rate_bps if p.rate_bps else 0.0
        self.delay = float(p.delay_s)
        self.jitter = float(p.jitter_s)
        self.normal = p.jitter_dist == "normal"
        self.loss = float(p.loss) if p.gemodel is None else 0.0
        self.ge = p.gemodel
        self.limit = int(p.queue_pkts) if p.queue_pkts else 0
        self.reorder = float(p.reorder)
        if self.rng is None and (self.loss or self.ge is not None or self.jitter or self.reorder):
            self.rng = random.Random(self.seed) if self.seed is not None else random.Random()

    def reset_samples(self) -> None:
        self.err_n = 0
        self.err_sum = 0.0
        self.err_max = 0.0
        self.ring = None

    def queue_len(self, now: float) -> int:
        deps = self.deps
        while deps and deps[0] <= now:
            deps.popleft()
        return len(deps)

    def stats(self, now: float) -> dict:
        n = self.err_n
        samples = sorted(self.ring[: min(n, RING)]) if self.ring is not None else []
        return {
            "packets": self.packets, "accepted": self.accepted, "delayed": self.delayed,
            "reordered": self.reordered, "lost": self.lost, "overflowed": self.overflowed,
            "cut_dropped": self.cut_dropped, "max_queue": self.max_queue, "queue": self.queue_len(now),
            "queue_sum": self.queue_sum, "queued": self.queued,
            "held": self.held, "cut": self.cut, "params": self.params.to_json(),
            "hold_error": {"count": n, "mean_s": self.err_sum / n if n else None,
                           "p50_s": _quantile(samples, 0.5), "p99_s": _quantile(samples, 0.99),
                           "max_s": self.err_max if n else None, "min_s": samples[0] if samples else None,
                           "window": len(samples)},
        }


def _quantile(sorted_xs: list[float], q: float) -> float | None:
    if not sorted_xs:
        return None
    return sorted_xs[min(len(sorted_xs) - 1, int(q * len(sorted_xs)))]


class Namespace:
    """One network namespace: its NFQUEUE socket (serving all its queues) and its /proc counters."""

    __slots__ = ("key", "path", "nl", "fd", "statfd", "dirs", "pending", "baseline", "reported", "t_empty")

    def __init__(self, path: str, key):
        self.key = key
        self.path = path
        with nfq.in_netns(path):
            self.nl = nfq.NfqSocket()
            try:
                self.statfd = nfq.open_queue_stats()
            except BaseException:
                self.nl.close()
                raise
        self.fd = self.nl.fd
        self.dirs: dict[int, Direction] = {}
        self.pending: list[bytes] = []
        self.baseline: dict[int, tuple[int, int]] = {}
        self.reported: dict[int, tuple[int, int]] = {}
        self.t_empty = 0.0  # when its socket was last read empty

    def close(self) -> None:
        self.nl.close()
        os.close(self.statfd)


class DelayLine:
    def __init__(self, config: dict):
        self.config = config
        self.seed = config.get("seed")
        self.copy_range = int(config.get("copy_range", DEFAULT_COPY_RANGE))
        self.kernel_maxlen = int(config.get("kernel_maxlen", DEFAULT_KERNEL_MAXLEN))
        self.control_path = config["control"]
        self.stats_file = config.get("stats_file")
        self.ep = select.epoll()
        self.handlers: dict[int, object] = {}
        self.namespaces: dict[tuple, Namespace] = {}
        self.dirs: dict[str, Direction] = {}
        self.heap: list = []
        self.seq = 0
        self.dirty: list[Namespace] = []
        self.fatal: list[str] = []
        self.timer = TimerFd()
        self.armed: float | None = None     # when the timerfd is set to fire
        self.advance = ADVANCE_INIT_S      # how early it is set (median wake-up latency of the timer)
        self.t_flushed = 0.0               # when the last verdicts were sent (forwarded packets arrive then)
        self.t_wait = self.t_wake = 0.0    # when the loop last began waiting in epoll, and woke up
        self.buf = bytearray(1 << 17)
        self.hist = [0] * HIST_BINS
        self.hist_n = 0
        self.hist_max = -math.inf
        self.hist_min = math.inf
        self.unknown_queue = 0
        self.verdict_errors = 0
        self.wakeups = 0
        self.started = time.monotonic()
        self.stopping = False
        self.clients: dict[int, list] = {}
        self.listener: socket.socket | None = None
        self._hk_order: list[Namespace] = []
        self._hk_pos = 0
        self.ep.register(self.timer.fd, select.EPOLLIN)

    # ---------------------------------------------------------------- setup
    def add_queues(self, specs: Sequence[QueueSpec]) -> list[str]:
        seen = set(self.dirs)
        for s in specs:
            if s.id in seen:
                raise ValueError(f"duplicate queue id {s.id!r}")
            seen.add(s.id)
        added = []
        for s in specs:
            key = nfq.netns_key(s.netns)
            ns = self.namespaces.get(key)
            if ns is None:
                ns = Namespace(s.netns, key)
                self.namespaces[key] = ns
                self._hk_order.append(ns)
                self.ep.register(ns.fd, select.EPOLLIN)
                self.handlers[ns.fd] = ns
            if s.queue_num in ns.dirs:
                raise ValueError(f"queue {s.queue_num} of {s.netns} is already served as {ns.dirs[s.queue_num].id!r}")
            try:
                ns.nl.bind_queue(s.queue_num, self.copy_range, self.kernel_maxlen)
            except OSError:
                if not ns.dirs:
                    self._forget_ns(ns)
                raise
            d = Direction(s, ns, self.seed)
            ns.dirs[s.queue_num] = d
            self.dirs[s.id] = d
            added.append(s.id)
            if ns.nl.backlog:
                self._drain_backlog(ns)
        for key in {nfq.netns_key(s.netns) for s in specs}:
            self._baseline(self.namespaces[key])
        return added

    def remove_queues(self, ids: Sequence[str]) -> None:
        for i in ids:
            if i not in self.dirs:
                raise KeyError(i)
        for i in ids:
            d = self.dirs.pop(i)
            d.accepted += self._flush_dir(d, nfq.NF_ACCEPT)
            ns = d.ns
            del ns.dirs[d.qnum]
            self._flush()
            try:
                ns.nl.unbind_queue(d.qnum)
            except OSError as e:
                _log(f"unbind {i}: {e}")
            if ns.nl.backlog:
                self._drain_backlog(ns)
            if not ns.dirs:
                self._forget_ns(ns)

    def _forget_ns(self, ns: Namespace) -> None:
        self.ep.unregister(ns.fd)
        del self.handlers[ns.fd]
        del self.namespaces[ns.key]
        self._hk_order.remove(ns)
        ns.close()

    def _baseline(self, ns: Namespace) -> None:
        st = nfq.read_queue_stats(ns.statfd)
        for q in ns.dirs:
            if q not in ns.baseline and q in st:
                ns.baseline[q] = (st[q]["dropped"], st[q]["user_dropped"])

    def listen(self) -> None:
        path = self.control_path
        if os.path.exists(path):
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(path)
            except OSError:
                os.unlink(path)  # stale socket of a dead daemon
            else:
                raise OSError(errno.EADDRINUSE, f"control socket {path} is served by a live process")
            finally:
                probe.close()
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        old = os.umask(0o077)
        try:
            s.bind(path)
        finally:
            os.umask(old)
        s.listen(16)
        s.setblocking(False)
        self.listener = s
        self.ep.register(s.fileno(), select.EPOLLIN)
        self.handlers[s.fileno()] = self._on_accept

    # ---------------------------------------------------------------- the hot path
    def _read_ns(self, ns: Namespace, stamp: float) -> None:
        """Drain `ns`'s socket (bounded, so timers and other namespaces are served too: epoll is level-triggered).
        `stamp`: arrival time of the first packet; each later one arrived after the previous recv."""
        recv_into = ns.nl.sock.recv_into
        buf = self.buf
        hdr = _NL_LEN_TYPE.unpack_from
        be16 = _BE16.unpack_from
        be32 = _BE32.unpack_from
        attr = _NLA.unpack_from
        arrive = self._arrive
        monotonic = time.monotonic
        MSG_PACKET = nfq.MSG_PACKET
        pay_span = (4 + self.copy_range + 3) & ~3
        pay_attr = (4 + self.copy_range, nfq.NFQA_PAYLOAD)
        for _ in range(512):
            try:
                n = recv_into(buf)
            except BlockingIOError:
                ns.t_empty = monotonic()
                return
            except InterruptedError:
                continue
            now = stamp
            stamp = monotonic()
            off = 0
            while off + 16 <= n:
                mlen, mtype = hdr(buf, off)
                if mlen < 16:
                    break
                end = off + mlen
                if mtype == MSG_PACKET:
                    # nfgenmsg.res_id is the queue. The kernel puts NFQA_PACKET_HDR first and NFQA_PAYLOAD last,
                    # so a packet of at least copy_range bytes needs no walk over the attributes.
                    qnum = be16(buf, off + 18)[0]
                    a = end - pay_span
                    if attr(buf, off + 20)[1] == 1 and attr(buf, a) == pay_attr and buf[a + 4] >> 4 == 4:
                        arrive(ns, qnum, be32(buf, off + 24)[0], be16(buf, a + 6)[0], now)
                        off += (mlen + 3) & ~3
                        continue
                    a = off + 20
                    pkt_id = -1
                    length = 0
                    while a + 4 <= end:
                        alen, atype = attr(buf, a)
                        if alen < 4:
                            break
                        atype &= 0x3FFF
                        if atype == 1:     # NFQA_PACKET_HDR
                            pkt_id = be32(buf, a + 4)[0]
                        elif atype == 10:  # NFQA_PAYLOAD (last): IPv4 total length
                            length = be16(buf, a + 6)[0] if buf[a + 4] >> 4 == 4 else alen - 4
                            break
                        elif atype == 13:  # NFQA_CAP_LEN (the whole packet's length)
                            length = be32(buf, a + 4)[0]
                        a += (alen + 3) & ~3
                    arrive(ns, qnum, pkt_id, length, now)
                elif mtype == nfq.NLMSG_ERROR:
                    err = struct.unpack_from("=i", buf, off + 16)[0]
                    if err:
                        self.verdict_errors += 1
                        if self.verdict_errors <= 10:
                            _log(f"verdict rejected in {ns.path}: {os.strerror(-err)}")
                off += (mlen + 3) & ~3

    def _drain_backlog(self, ns: Namespace) -> None:
        msgs, ns.nl.backlog = ns.nl.backlog, []
        now = time.monotonic()
        for m in msgs:
            qnum, pkt_id, length = nfq.parse_packet(m, 0, len(m))
            self._arrive(ns, qnum, pkt_id, length, now)

    def _verdict(self, ns: Namespace, qnum: int, pkt_id: int, v: int) -> None:
        if not ns.pending:
            self.dirty.append(ns)
        ns.pending.append(nfq.verdict(qnum, pkt_id, v))

    def _arrive(self, ns: Namespace, qnum: int, pkt_id: int, length: int, now: float) -> None:
        d = ns.dirs.get(qnum)
        if d is None:
            self.unknown_queue += 1
            self._verdict(ns, qnum, pkt_id, nfq.NF_DROP)
            return
        d.packets += 1
        if d.cut:
            d.cut_dropped += 1
            self._verdict(ns, qnum, pkt_id, nfq.NF_DROP)
            return
        rng = d.rng
        # loss (decided first, as netem: a lost packet never occupies the link)
        if d.loss:
            if rng.random() < d.loss:
                d.lost += 1
                self._verdict(ns, qnum, pkt_id, nfq.NF_DROP)
                return
        elif d.ge is not None:
            ge = d.ge
            if d.ge_bad:
                if rng.random() < ge.r:
                    d.ge_bad = False
            elif rng.random() < ge.p:
                d.ge_bad = True
            if rng.random() < (ge.loss_bad if d.ge_bad else ge.loss_good):
                d.lost += 1
                self._verdict(ns, qnum, pkt_id, nfq.NF_DROP)
                return
        # serialisation behind a bounded queue
        spb = d.sec_per_byte
        if spb:
            deps = d.deps
            while deps and deps[0] <= now:
                deps.popleft()
            if d.limit and len(deps) >= d.limit:
                d.overflowed += 1
                self._verdict(ns, qnum, pkt_id, nfq.NF_DROP)
                return
            d.queue_sum += len(deps)
            d.queued += 1
            busy = d.busy
            dep = (busy if busy > now else now) + (length + L2_OVERHEAD_BYTES) * spb
            d.busy = dep
            deps.append(dep)
            if len(deps) > d.max_queue:
                d.max_queue = len(deps)
        else:
            dep = now
        # delay (+ jitter, FIFO kept) or, with probability `reorder`, no delay at all
        if d.reorder and rng.random() < d.reorder:
            rel = dep
            d.reordered += 1
        else:
            rel = dep + d.delay
            j = d.jitter
            if j:
                rel += rng.gauss(0.0, j) if d.normal else rng.uniform(-j, j)
                if rel < dep:
                    rel = dep
            if rel < d.floor:
                rel = d.floor
            d.floor = rel
        if rel <= now:
            d.accepted += 1
            self._verdict(ns, qnum, pkt_id, nfq.NF_ACCEPT)
            return
        d.delayed += 1
        d.held += 1
        self.seq += 1
        heapq.heappush(self.heap, (rel, self.seq, d, pkt_id, d.gen))

    def _release(self, now: float) -> None:
        """ACCEPT every held packet due by now + advance (the timer wakes `advance` early, so a packet due
        within it would otherwise wait for a wake-up that costs as much as it saves)."""
        horizon = now + self.advance
        heap = self.heap
        pop = heapq.heappop
        hist = self.hist
        verdict = nfq.verdict
        dirty = self.dirty
        last = HIST_BINS - 1
        n = 0
        while heap and heap[0][0] <= horizon:
            t, _seq, d, pkt_id, gen = pop(heap)
            if gen != d.gen:
                continue
            d.held -= 1
            d.accepted += 1
            ns = d.ns
            if not ns.pending:
                dirty.append(ns)
            ns.pending.append(verdict(d.qnum, pkt_id, 1))
            err = now - t
            c = d.err_n
            ring = d.ring
            if ring is None:
                ring = d.ring = array("d", bytes(8 * RING))
            ring[c % RING] = err
            d.err_n = c + 1
            d.err_sum += err
            if err > d.err_max:
                d.err_max = err
            b = int((err - HIST_LO_S) / HIST_BIN_S)
            hist[(b if b < last else last) if b > 0 else 0] += 1
            if err > self.hist_max:
                self.hist_max = err
                if err > 0.02:
                    _log(f"late release: {err * 1e3:.1f} ms after its due time ({d.id}); "
                         f"loop iteration began {(now - self.t_wake) * 1e3:.1f} ms ago, "
                         f"the wait before it lasted {(self.t_wake - self.t_wait) * 1e3:.1f} ms")
            if err < self.hist_min:
                self.hist_min = err
            n += 1
        self.hist_n += n

    def _flush(self) -> None:
        for ns in self.dirty:
            p = ns.pending
            chunks = [p[0]] if len(p) == 1 else [b"".join(p[i:i + 2048]) for i in range(0, len(p), 2048)]
            for data in chunks:
                while True:
                    try:
                        ns.nl.sock.send(data)
                        break
                    except InterruptedError:
                        continue
                    except BlockingIOError:
                        select.select([], [ns.fd], [], 0.01)
                    except OSError as e:
                        self._fatal(f"sending verdicts to {ns.path} failed: {e}")
                        break
            p.clear()
        self.dirty.clear()

    def _flush_dir(self, d: Direction, v: int) -> int:
        """Issue verdict `v` now for every packet `d` holds (cut: DROP, remove/shutdown: ACCEPT)."""
        n = 0
        if d.held:
            for e in self.heap:
                if e[2] is d and e[4] == d.gen:
                    self._verdict(d.ns, d.qnum, e[3], v)
                    n += 1
        d.gen += 1
        d.held = 0
        return n

    # ---------------------------------------------------------------- kernel drops
    def _fatal(self, msg: str) -> None:
        if msg not in self.fatal:
            self.fatal.append(msg)
            _log(f"FATAL {msg}")

    def _check_kernel(self, ns: Namespace) -> dict:
        try:
            st = nfq.read_queue_stats(ns.statfd)
        except OSError as e:
            self._fatal(f"cannot read nfnetlink_queue of {ns.path}: {e}")
            return {}
        for q, d in ns.dirs.items():
            s = st.get(q)
            if s is None or s["portid"] != ns.nl.portid:
                self._fatal(f"queue {q} ({d.id}) of {ns.path} is no longer bound to the delay line")
                continue
            b0, b1 = ns.baseline.get(q, (0, 0))
            cur = (s["dropped"] - b0, s["user_dropped"] - b1)
            if (cur[0] or cur[1]) and ns.reported.get(q) != cur:
                ns.reported[q] = cur
                self._fatal(f"kernel dropped packets of {d.id} ({ns.path} queue {q}): "
                            f"queue_dropped={cur[0]} user_dropped={cur[1]}")
        return st

    def _housekeep(self) -> None:
        order = self._hk_order
        if not order:
            return
        k = min(HOUSEKEEP_MAX_NS, max(1, math.ceil(len(order) * HOUSEKEEP_S)))
        for _ in range(min(k, len(order))):
            self._hk_pos %= len(order)
            self._check_kernel(order[self._hk_pos])
            self._hk_pos += 1

    # ---------------------------------------------------------------- control channel
    def _on_accept(self, _ev) -> None:
        while True:
            try:
                c, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            c.setblocking(False)
            self.clients[c.fileno()] = [c, bytearray(), bytearray()]
            self.ep.register(c.fileno(), select.EPOLLIN)
            self.handlers[c.fileno()] = "client"

    def _drop_client(self, fd: int) -> None:
        c = self.clients.pop(fd, None)
        if c:
            self.ep.unregister(fd)
            del self.handlers[fd]
            c[0].close()

    def _client_event(self, fd: int, ev: int) -> None:
        c = self.clients.get(fd)
        if c is None:
            return
        sock, inbuf, outbuf = c
        if ev & select.EPOLLIN:
            try:
                data = sock.recv(1 << 16)
            except (BlockingIOError, InterruptedError):
                data = None
            except OSError:
                data = b""
            if data == b"":
                self._drop_client(fd)
                return
            if data:
                inbuf += data
                while b"\n" in inbuf:
                    line, _, rest = bytes(inbuf).partition(b"\n")
                    inbuf[:] = rest
                    if line.strip():
                        outbuf += (json.dumps(self._request(line)) + "\n").encode()
                if len(inbuf) > 1 << 20:
                    self._drop_client(fd)
                    return
        if outbuf:
            try:
                k = sock.send(outbuf)
                del outbuf[:k]
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                self._drop_client(fd)
                return
        self.ep.modify(fd, select.EPOLLIN | (select.EPOLLOUT if outbuf else 0))

    def _request(self, line: bytes) -> dict:
        try:
            req = json.loads(line)
            if not isinstance(req, dict):
                raise ValueError("a request is a JSON object")
            op = req.get("op")
            if op == "ping":
                out = {"pid": os.getpid(), "queues": len(self.dirs), "namespaces": len(self.namespaces)}
            elif op == "set":
                d = self._dir(req)
                p = params_from_json(req["params"])
                d.apply(p)
                d.floor = 0.0  # as netem's tfifo: later packets may overtake ones scheduled under the old params
                _log(f"set {d.id} {json.dumps(p.to_json())}")
                out = {}
            elif op == "cut":
                d = self._dir(req)
                was = d.cut
                d.cut = True
                n = self._flush_dir(d, nfq.NF_DROP)
                d.cut_dropped += n
                d.deps.clear()
                d.busy = d.floor = 0.0
                self._flush()
                _log(f"cut {d.id} (dropped {n} held)")
                out = {"dropped_held": n, "was_cut": was}
            elif op == "heal":
                d = self._dir(req)
                was = d.cut
                d.cut = False
                _log(f"heal {d.id}")
                out = {"was_cut": was}
            elif op == "stats":
                out = self.stats(req.get("ids"), kernel=bool(req.get("kernel", True)))
                if req.get("reset"):
                    self._reset_samples()
            elif op == "add":
                specs = [QueueSpec.from_json(q) for q in req.get("queues", [])]
                out = {"added": self.add_queues(specs)}
                _log(f"added {out['added']}")
            elif op == "remove":
                ids = [str(i) for i in req.get("ids", [])]
                self.remove_queues(ids)
                _log(f"removed {ids}")
                out = {"removed": ids}
            elif op == "shutdown":
                self.stopping = True
                out = {}
            else:
                raise ValueError(f"unknown op {op!r}")
            out.update(ok=True, fatal=list(self.fatal))
            return out
        except KeyError as e:
            return {"ok": False, "error": f"unknown id or missing field {e}", "fatal": list(self.fatal)}
        except (ValueError, TypeError, OSError) as e:
            return {"ok": False, "error": str(e), "fatal": list(self.fatal)}

    def _dir(self, req: dict) -> Direction:
        return self.dirs[str(req["id"])]

    def _reset_samples(self) -> None:
        for d in self.dirs.values():
            d.reset_samples()
        self.hist = [0] * HIST_BINS
        self.hist_n = 0
        self.hist_max = -math.inf
        self.hist_min = math.inf

    def _hist_quantile(self, q: float) -> float | None:
        if not self.hist_n:
            return None
        target = q * self.hist_n
        acc = 0
        for i, c in enumerate(self.hist):
            acc += c
            if acc >= target and c:
                return HIST_LO_S + (i + 1) * HIST_BIN_S  # upper edge of the bin
        return self.hist_max

    def stats(self, ids=None, kernel: bool = True) -> dict:
        """Counters. `ids`: the directions to detail (None: all; [] for the global summary only, which is
        cheap); `kernel`: read every namespace's nfnetlink_queue now (false: skip; the loop reads them anyway,
        each within ~1 s, and `fatal` reports what it found)."""
        now = time.monotonic()
        kq_all = {}
        drops = 0
        for ns in (self.namespaces.values() if kernel else ()):
            st = self._check_kernel(ns)
            kq = {}
            for q in ns.dirs:
                if q in st:
                    b0, b1 = ns.baseline.get(q, (0, 0))
                    s = st[q]
                    kq[str(q)] = {"held": s["total"], "queue_dropped": s["dropped"] - b0,
                                  "user_dropped": s["user_dropped"] - b1}
                    drops += s["dropped"] - b0 + s["user_dropped"] - b1
            kq_all[ns.path] = kq
        sel = self.dirs if ids is None else {i: self.dirs[i] for i in ids}
        t = os.times()
        with open("/proc/self/statm") as f:
            rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        return {
            "queues": {i: d.stats(now) for i, d in sel.items()},
            "kernel": kq_all, "kernel_drops": drops if kernel else None,
            "hold_error": {"count": self.hist_n, "p50_s": self._hist_quantile(0.5),
                           "p99_s": self._hist_quantile(0.99), "max_s": self.hist_max if self.hist_n else None,
                           "min_s": self.hist_min if self.hist_n else None, "bin_s": HIST_BIN_S},
            "timer_advance_s": self.advance,
            "cpu_s": t.user + t.system, "cpu_user_s": t.user, "cpu_sys_s": t.system, "rss_bytes": rss,
            "uptime_s": now - self.started, "packets": sum(d.packets for d in self.dirs.values()),
            "held": sum(d.held for d in self.dirs.values()),
            "unknown_queue": self.unknown_queue, "verdict_errors": self.verdict_errors, "wakeups": self.wakeups,
        }

    # ---------------------------------------------------------------- loop
    def run(self) -> None:
        ep = self.ep
        heap = self.heap
        monotonic = time.monotonic
        tfd = self.timer.fd
        dispatch = self._dispatch
        next_hk = monotonic() + HOUSEKEEP_S
        t_prev = monotonic()
        while not self.stopping:
            t_poll = monotonic()
            timeout = next_hk - t_poll
            try:
                events = ep.poll(timeout if timeout > 0 else 0)
            except InterruptedError:
                events = []
            self.wakeups += 1
            now = monotonic()
            self.t_wait, self.t_wake = t_poll, now
            advance = self.advance
            fired = False
            for fd, _ev in events:
                if fd == tfd:
                    # the advance tracks the median lateness of timer wake-ups behind the armed time
                    fired = True
                    if now - self.armed > advance:
                        advance = min(ADVANCE_MAX_S, advance + ADVANCE_STEP_S)
                    else:
                        advance = max(0.0, advance - ADVANCE_STEP_S)
                    self.advance = advance
                    break
            if heap and heap[0][0] <= now + advance:
                self._release(now)
            # a packet found without sleeping arrived after the previous epoll_wait returned (level-triggered:
            # that one would have reported it otherwise)
            dispatch(events, now, t_poll if (now - t_poll > 20e-6 and not fired) else None, t_prev)
            t_prev = now
            # Verdicts make the next namespaces forward the released packets inside the send itself, so
            # their sockets have work now: serve it in this wake-up, then arm the timer once.
            while True:
                now = monotonic()
                if heap and heap[0][0] <= now + advance:
                    self._release(now)
                if not self.dirty:
                    break
                self._flush()
                self.t_flushed = monotonic()
                events = ep.poll(0)
                if not events:
                    break
                dispatch(events, self.t_flushed, None, self.t_flushed)
                if now >= next_hk:  # saturated: the loop may stay in here for long
                    self._housekeep()
                    next_hk = now + HOUSEKEEP_S
            # (re)arm the timer `advance` before the next due packet; arming also clears a fired timerfd
            if heap:
                t = heap[0][0] - advance
                if fired or t != self.armed:
                    self.timer.arm(t)
                    self.armed = t
            elif fired:
                self.timer.disarm()
                self.armed = None
            if now >= next_hk:
                self._housekeep()
                next_hk = now + HOUSEKEEP_S
        self.shutdown()

    def _dispatch(self, events, now: float, slept_since: float | None, after: float) -> None:
        """Serve the ready fds (the timerfd is handled by run). `slept_since`: when the loop began an idle
        wait that these events ended (None: it did not sleep); `after`: no waiting packet arrived before."""
        handlers = self.handlers
        advance = self.advance
        for fd, ev in events:
            h = handlers.get(fd)
            if type(h) is Namespace:
                # When did the first waiting packet reach the queue? If the loop slept until now, about one
                # wake-up latency (the timer advance) ago, not before the sleep began. Otherwise after the
                # previous epoll_wait and after the socket was last found empty, and most likely during our
                # last verdict send (a released packet is forwarded by the next namespace inside that very
                # system call).
                if slept_since is not None:
                    t = now - advance
                    stamp = t if t > slept_since else slept_since
                else:
                    t = self.t_flushed
                    if h.t_empty > t:
                        t = h.t_empty
                    if after > t:
                        t = after
                    stamp = t if t < now else now
                self._read_ns(h, stamp)
            elif h == "client":
                self._client_event(fd, ev)
            elif h is not None:
                h(ev)

    def shutdown(self) -> None:
        """Release (ACCEPT) everything held and everything already queued to us, then close every socket.
        Afterwards the kernel drops what the still-present rules queue (fail closed) until the orchestrator
        removes the rules."""
        n = 0
        for d in self.dirs.values():
            k = self._flush_dir(d, nfq.NF_ACCEPT)
            d.accepted += k
            n += k
        self.heap.clear()
        for ns in self.namespaces.values():  # what is already queued to us goes out at once, unshaped
            while True:
                try:
                    data = ns.nl.sock.recv(1 << 17)
                except (BlockingIOError, OSError):
                    break
                off = 0
                while off + 16 <= len(data):
                    mlen, mtype = _NL_LEN_TYPE.unpack_from(data, off)
                    if mlen < 16:
                        break
                    if mtype == nfq.MSG_PACKET:
                        qnum, pkt_id, _len = nfq.parse_packet(data, off, off + mlen)
                        self._verdict(ns, qnum, pkt_id, nfq.NF_ACCEPT)
                        d = ns.dirs.get(qnum)
                        if d is not None:
                            d.packets += 1
                            d.accepted += 1
                        n += 1
                    off += (mlen + 3) & ~3
        self._flush()
        _log(f"shutdown: released {n} packets")
        if self.stats_file:
            try:
                tmp = f"{self.stats_file}.tmp"
                with open(tmp, "w") as f:
                    json.dump(self.stats(), f, indent=1)
                os.replace(tmp, self.stats_file)
            except OSError as e:
                _log(f"cannot write stats file: {e}")
        for ns in self.namespaces.values():
            ns.close()
        for fd in list(self.clients):
            c = self.clients[fd]
            try:
                c[0].setblocking(True)
                c[0].settimeout(1.0)
                if c[2]:
                    c[0].sendall(c[2])
            except OSError:
                pass
            self._drop_client(fd)
        if self.listener is not None:
            self.listener.close()
            try:
                os.unlink(self.control_path)
            except OSError:
                pass


def _set_rt(priority: int) -> None:
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m orchestrator.shaping.delayline", description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--rt-priority", type=int, default=0, help="SCHED_FIFO priority (0: normal scheduling)")
    ap.add_argument("--die-with-parent", type=int, default=0, metavar="PID",
                    help="exit (as on SIGTERM) when process PID, our parent, exits")
    args = ap.parse_args(argv)

    def fail(msg: str) -> int:
        sys.stdout.write(f"ERROR {msg}\n")
        sys.stdout.flush()
        _log(f"startup failed: {msg}")
        return 1

    dl = None
    try:
        if args.die_with_parent:
            _libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
            if os.getppid() != args.die_with_parent:
                return fail(f"parent {args.die_with_parent} is gone")
        with open(args.config) as f:
            config = json.load(f)
        unknown = set(config) - {"queues", "control", "stats_file", "seed", "copy_range", "kernel_maxlen"}
        if unknown:
            return fail(f"unknown config keys {sorted(unknown)}")
        specs = [QueueSpec.from_json(q) for q in config.get("queues", [])]
        if args.rt_priority:
            _set_rt(args.rt_priority)
        _libc.prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0)
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        stop = []
        rfd, wfd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wfd)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, lambda s, _f: stop.append(s))
        dl = DelayLine(config)
        dl.ep.register(rfd, select.EPOLLIN)

        def on_signal(_ev):
            try:
                os.read(rfd, 512)
            except BlockingIOError:
                pass
            if stop:
                _log(f"signal {stop[0]}: shutting down")
                dl.stopping = True
        dl.handlers[rfd] = on_signal
        dl.add_queues(specs)
        dl.listen()
    except (OSError, ValueError, KeyError, TypeError, json.JSONDecodeError) as e:
        if dl is not None:
            for ns in dl.namespaces.values():
                ns.close()
        return fail(f"{type(e).__name__}: {e}" if not isinstance(e, OSError) else str(e))
    gc.collect()
    gc.freeze()
    gc.disable()  # the hot path makes no reference cycles; no collector pauses in the loop
    _log(f"serving {len(dl.dirs)} queues in {len(dl.namespaces)} namespaces"
         + (f", SCHED_FIFO {args.rt_priority}" if args.rt_priority else ""))
    sys.stdout.write(f"READY {os.getpid()}\n")
    sys.stdout.flush()
    if stop:
        dl.stopping = True
    dl.run()
    _log("exit")
    return 0


# ======================================================================================================
# Client side (used by the orchestrator)
# ======================================================================================================
def _tail(path: str | os.PathLike | None, n: int = 4000) -> str:
    if not path:
        return ""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - n))
            return f.read().decode(errors="replace").strip()
    except OSError:
        return ""


class DelayLineClient:
    """JSON-lines client of the control socket. Every transport failure (daemon gone, no answer) raises
    DelayLineDied; a request the daemon refuses raises OrchestratorError."""

    def __init__(self, control_path: str | os.PathLike, timeout: float = 10.0):
        self.path = str(control_path)
        self.timeout = timeout
        self._sock: socket.socket | None = None
        self._rbuf = b""

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
            self._rbuf = b""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def call(self, req: dict) -> dict:
        try:
            if self._sock is None:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.settimeout(self.timeout)
                s.connect(self.path)
                self._sock = s
            self._sock.sendall((json.dumps(req) + "\n").encode())
            while b"\n" not in self._rbuf:
                chunk = self._sock.recv(1 << 16)
                if not chunk:
                    raise ConnectionResetError("the delay line closed the control connection")
                self._rbuf += chunk
        except socket.timeout:
            self.close()
            raise DelayLineDied(f"delay line at {self.path} did not answer {req.get('op')!r} "
                                f"within {self.timeout} s") from None
        except OSError as e:
            self.close()
            raise DelayLineDied(f"delay line at {self.path} is gone ({e.strerror or e})") from None
        line, _, self._rbuf = self._rbuf.partition(b"\n")
        resp = json.loads(line)
        if not resp.get("ok"):
            raise OrchestratorError(f"delay line refused {req.get('op')!r}: {resp.get('error')}")
        return resp

    def ping(self) -> dict:
        """Raises DelayLineDied when the daemon is gone or reports a fatal condition (kernel drops)."""
        r = self.call({"op": "ping"})
        if r.get("fatal"):
            raise DelayLineDied("delay line reports: " + "; ".join(r["fatal"]))
        return r

    def set(self, id: str, params: DirParams | dict) -> dict:
        p = params.to_json() if isinstance(params, DirParams) else dict(params)
        return self.call({"op": "set", "id": id, "params": p})

    def cut(self, id: str) -> dict:
        return self.call({"op": "cut", "id": id})

    def heal(self, id: str) -> dict:
        return self.call({"op": "heal", "id": id})

    def stats(self, ids: Sequence[str] | None = None, reset: bool = False, kernel: bool = True) -> dict:
        """ids=None: every direction; ids=[]: only the global summary (cheap with thousands of queues).
        reset: start new hold-error samples after this answer. kernel=False: skip reading /proc now."""
        req: dict = {"op": "stats", "reset": reset, "kernel": kernel}
        if ids is not None:
            req["ids"] = list(ids)
        return self.call(req)

    def add(self, queues: Sequence[QueueSpec | dict]) -> dict:
        return self.call({"op": "add", "queues": [q.to_json() if isinstance(q, QueueSpec) else q for q in queues]})

    def remove(self, ids: Sequence[str]) -> dict:
        return self.call({"op": "remove", "ids": list(ids)})

    def shutdown(self) -> dict:
        r = self.call({"op": "shutdown"})
        self.close()
        return r


def start_delayline(config_path: str | os.PathLike, rt_priority: int | None = 50, timeout: float = 30.0,
                    log_path: str | os.PathLike | None = None, die_with_parent: bool = True) -> subprocess.Popen:
    """Start the daemon on `config_path`, wait for READY; raise DelayLineDied with its stderr otherwise.
    Its stderr goes to `log_path` (default: the config path with suffix .log). The returned Popen carries
    `.control_path` and `.log_path`. With `die_with_parent`, the daemon shuts down when this process exits."""
    config_path = Path(config_path)
    with open(config_path) as f:
        control = json.load(f)["control"]
    log_path = Path(log_path) if log_path else config_path.with_suffix(".log")
    argv = [sys.executable, "-m", "orchestrator.shaping.delayline", "--config", str(config_path)]
    if rt_priority:
        argv += ["--rt-priority", str(int(rt_priority))]
    if die_with_parent:
        argv += ["--die-with-parent", str(os.getpid())]
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log, env=env,
                                start_new_session=True, close_fds=True)
    proc.control_path = control
    proc.log_path = str(log_path)
    deadline = time.monotonic() + timeout
    line = b""
    try:
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            r, _, _ = select.select([proc.stdout], [], [], left)
            if not r:
                continue
            ch = os.read(proc.stdout.fileno(), 4096)
            if not ch:
                break
            line += ch
    except TimeoutError:
        proc.kill()
        proc.wait()
        raise DelayLineDied(f"delay line did not become ready within {timeout} s; stderr:\n{_tail(log_path)}") \
            from None
    text = line.decode(errors="replace").strip()
    if text.startswith("READY "):
        return proc
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    why = text[len("ERROR "):] if text.startswith("ERROR ") else f"exited with status {proc.returncode}"
    raise DelayLineDied(f"delay line failed to start: {why}; stderr:\n{_tail(log_path)}")


def check_delayline(proc: subprocess.Popen, client: DelayLineClient | None = None) -> dict:
    """The orchestrator's watch: raise DelayLineDied if the process exited or reports kernel drops; else the
    ping answer."""
    rc = proc.poll()
    if rc is not None:
        raise DelayLineDied(f"delay line (pid {proc.pid}) exited with status {rc}"
                            + (f" (signal {-rc})" if rc < 0 else "")
                            + f"; stderr:\n{_tail(getattr(proc, 'log_path', None))}")
    client = client or DelayLineClient(proc.control_path)
    return client.ping()


def stop_delayline(proc: subprocess.Popen, client: DelayLineClient | None = None, timeout: float = 10.0) -> int:
    """Graceful stop (shutdown request, then SIGTERM, then SIGKILL); returns the exit status. Idempotent."""
    if proc.poll() is None:
        try:
            (client or DelayLineClient(proc.control_path, timeout=timeout)).shutdown()
        except OrchestratorError:
            proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stdout:
        proc.stdout.close()
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
