"""The delay line's event loop: one epoll + one CLOCK_MONOTONIC timerfd serving the NFQUEUE sockets of every
namespace. Packets read from a queue go through their direction's `LinkModel.admit`; held ones wait in one heap
(release time order) for the timer; verdicts are batched per namespace and sent once per wake-up.

The loop knows nothing of the control protocol or of setup: other fds are served by callables registered in
`handlers` (fd -> Namespace | callable(events)); `DelayLine` (daemon.py) adds queues, stats and shutdown.
"""
from __future__ import annotations

import ctypes
import heapq
import math
import os
import select
import socket
import sys
import time
from array import array

from orchestrator.shaping import nfqueue as nfq
from orchestrator.shaping.delayline.config import QueueSpec
from orchestrator.shaping.delayline.model import LinkModel

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

_libc = ctypes.CDLL(None, use_errno=True)
CLOCK_MONOTONIC = 1
TFD_TIMER_ABSTIME = 1


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


def realtime_minus_monotonic() -> float:
    """CLOCK_REALTIME - CLOCK_MONOTONIC (s), from the tightest of a few readings (NFQA_TIMESTAMP is realtime)."""
    best = (math.inf, 0.0)
    for _ in range(5):
        a = time.monotonic()
        r = time.time()
        b = time.monotonic()
        if b - a < best[0]:
            best = (b - a, r - (a + b) / 2)
    return best[1]


def log(msg: str) -> None:
    sys.stderr.write(f"{time.strftime('%H:%M:%S')} delayline[{os.getpid()}] {msg}\n")
    sys.stderr.flush()


class Direction(LinkModel):
    """One served link direction: its model, where its packets come from (namespace, queue) and the
    hold-error samples of its releases."""

    __slots__ = ("id", "ns", "qnum", "err_n", "err_sum", "err_max", "ring")

    def __init__(self, spec: QueueSpec, ns: "Namespace", seed):
        self.id = spec.id
        self.ns = ns
        self.qnum = spec.queue_num
        self.reset_samples()
        super().__init__(spec.params, f"{seed}/{spec.id}" if seed is not None else None)

    def reset_samples(self) -> None:
        self.err_n = 0
        self.err_sum = 0.0
        self.err_max = 0.0
        self.ring = None

    def stats(self, now: float) -> dict:
        n = self.err_n
        samples = sorted(self.ring[: min(n, RING)]) if self.ring is not None else []
        out = self.counters(now)
        out["hold_error"] = hold_error_stats(n, self.err_sum, self.err_max, samples)
        return out


def hold_error_stats(n: int, err_sum: float, err_max: float, samples: list[float]) -> dict:
    """A direction's hold-error summary: `n` releases, their sum and max, the newest `samples` sorted."""
    return {"count": n, "mean_s": err_sum / n if n else None,
            "p50_s": quantile(samples, 0.5), "p99_s": quantile(samples, 0.99),
            "max_s": err_max if n else None, "min_s": samples[0] if samples else None,
            "window": len(samples)}


def quantile(sorted_xs: list[float], q: float) -> float | None:
    if not sorted_xs:
        return None
    return sorted_xs[min(len(sorted_xs) - 1, int(q * len(sorted_xs)))]


class Namespace:
    """One network namespace: its NFQUEUE socket (serving all its queues) and its /proc counters."""

    __slots__ = ("key", "path", "nl", "fd", "statfd", "dirs", "pending", "baseline", "reported", "t_empty", "idx")

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
        self.idx = -1       # its index in the compiled engine (cengine.py)

    def close(self) -> None:
        self.nl.close()
        os.close(self.statfd)


class EventLoop:
    """The Python engine. `cengine.CEngineMixin` overrides the per-packet methods (`_read_ns`, `_drain_backlog`,
    `_verdict`, `_release`, `_flush`, `_verdict_held`) and the hooks below to run them in C."""

    engine_name = "python"

    def __init__(self, copy_range: int = DEFAULT_COPY_RANGE):
        self.copy_range = copy_range
        self.parse = nfq.packet_parser(copy_range, with_time=True)
        # The kernel takes receive timestamps only while some socket asks for them (a global switch): with this
        # one open, a forwarded packet reaches us with the time it arrived in its namespace (NFQA_TIMESTAMP).
        self.ts_sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        self.ts_sock.setsockopt(socket.SOL_SOCKET, getattr(socket, "SO_TIMESTAMPNS", 35), 1)
        self.rt_offset = realtime_minus_monotonic()
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
        self.stopping = False
        self.ep.register(self.timer.fd, select.EPOLLIN)
        self._engine_init()

    # ---------------------------------------------------------------- engine hooks (cengine.py overrides them)
    def _engine_init(self) -> None:
        heap = self.heap
        self._next_due = lambda: heap[0][0] if heap else math.inf   # when the first held packet is due
        self._has_pending = lambda: bool(self.dirty)                 # verdicts waiting for _flush

    def _new_direction(self, spec: QueueSpec, ns: "Namespace") -> Direction:
        return Direction(spec, ns, self.seed)

    def _drop_direction(self, d: Direction) -> None:
        """`d` is no longer served (its held packets were disposed of)."""

    def _ns_added(self, ns: "Namespace") -> None:
        pass

    def _watch_ns(self, ns: "Namespace") -> None:
        """Serve `ns`'s socket from the loop (the C loop watches it in its own epoll)."""
        self.ep.register(ns.fd, select.EPOLLIN)
        self.handlers[ns.fd] = ns

    def _unwatch_ns(self, ns: "Namespace") -> None:
        self.ep.unregister(ns.fd)
        del self.handlers[ns.fd]

    def _ns_forgotten(self, ns: "Namespace") -> None:
        pass

    def _clear_heap(self) -> None:
        self.heap.clear()

    # ---------------------------------------------------------------- the hot path
    def _read_ns(self, ns: Namespace, stamp: float) -> None:
        """Drain `ns`'s socket (bounded, so timers and other namespaces are served too: epoll is level-triggered).
        `stamp`: arrival time of the first packet; each later one arrived after the previous recv."""
        recv_into = ns.nl.sock.recv_into
        buf = self.buf
        parse = self.parse
        monotonic = time.monotonic
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
            pkts, errors = parse(buf, n)
            self._admit(ns, pkts, now)
            if errors:
                self._verdict_errors(ns, errors)

    def _admit(self, ns: Namespace, pkts, now: float) -> None:
        """Decide every packet in `pkts` (arrived at `now` in `ns`, or at its kernel timestamp when it has an
        earlier one): verdict now, or hold it in the heap."""
        dirs = ns.dirs.get
        off = self.rt_offset
        pending = ns.pending
        verdict = nfq.verdict
        heap = self.heap
        push = heapq.heappush
        seq = self.seq
        for qnum, pkt_id, length, kt in pkts:
            d = dirs(qnum)
            if d is None:
                self.unknown_queue += 1
                v = nfq.NF_DROP
            else:
                t = kt - off if kt else now
                if t > now:
                    t = now
                rel = d.admit(t, length)
                if rel is None:
                    v = nfq.NF_DROP
                elif rel <= now:
                    v = nfq.NF_ACCEPT
                    if rel > t:          # admitted at its kernel time, held by the model: out now, late
                        self._released(d, now, rel)
                else:
                    seq += 1
                    push(heap, (rel, seq, d, pkt_id, d.gen))
                    continue
            if not pending:
                self.dirty.append(ns)
            pending.append(verdict(qnum, pkt_id, v))
        self.seq = seq

    def _verdict_errors(self, ns: Namespace, errors: list[int]) -> None:
        for e in errors:
            self.verdict_errors += 1
            if self.verdict_errors <= 10:
                log(f"verdict rejected in {ns.path}: {os.strerror(e)}")

    def _drain_backlog(self, ns: Namespace) -> None:
        """Packets that arrived while a config request waited for its ack."""
        msgs, ns.nl.backlog = ns.nl.backlog, []
        now = time.monotonic()
        for m in msgs:
            self._admit(ns, self.parse(m, len(m))[0], now)

    def _verdict(self, ns: Namespace, qnum: int, pkt_id: int, v: int) -> None:
        if not ns.pending:
            self.dirty.append(ns)
        ns.pending.append(nfq.verdict(qnum, pkt_id, v))

    def _release(self, now: float) -> None:
        """ACCEPT every held packet due by now + advance (the timer wakes `advance` early, so a packet due
        within it would otherwise wait for a wake-up that costs as much as it saves)."""
        horizon = now + self.advance
        heap = self.heap
        pop = heapq.heappop
        verdict = nfq.verdict
        dirty = self.dirty
        released = self._released
        while heap and heap[0][0] <= horizon:
            t, _seq, d, pkt_id, gen = pop(heap)
            if gen != d.gen:
                continue
            ns = d.ns
            if not ns.pending:
                dirty.append(ns)
            ns.pending.append(verdict(d.qnum, pkt_id, 1))
            released(d, now, t)

    def _released(self, d, now: float, t: float) -> None:
        """A held packet of `d`, due at `t`, goes out at `now`: counters and the hold error."""
        d.held -= 1
        d.accepted += 1
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
        last = HIST_BINS - 1
        self.hist[(b if b < last else last) if b > 0 else 0] += 1
        self.hist_n += 1
        if err > self.hist_max:
            self.hist_max = err
            if err > 0.02:
                log(f"late release: {err * 1e3:.1f} ms after its due time ({d.id}); "
                    f"loop iteration began {(now - self.t_wake) * 1e3:.1f} ms ago, "
                    f"the wait before it lasted {(self.t_wake - self.t_wait) * 1e3:.1f} ms")
        if err < self.hist_min:
            self.hist_min = err

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

    def _verdict_held(self, d: Direction, gen: int, v: int) -> None:
        """Issue verdict `v` now for every heap entry of `d` of generation `gen` (the model disposed of them)."""
        for e in self.heap:
            if e[2] is d and e[4] == gen:
                self._verdict(d.ns, d.qnum, e[3], v)

    def cut(self, d: Direction) -> int:
        gen, n = d.gen, d.cut_link()
        if n:
            self._verdict_held(d, gen, nfq.NF_DROP)
        self._flush()
        return n

    def release_all(self, d: Direction) -> int:
        gen, n = d.gen, d.release_all()
        if n:
            self._verdict_held(d, gen, nfq.NF_ACCEPT)
        return n

    # ---------------------------------------------------------------- kernel drops
    def _fatal(self, msg: str) -> None:
        if msg not in self.fatal:
            self.fatal.append(msg)
            log(f"FATAL {msg}")

    def _housekeep(self) -> None:
        """Overridden by the daemon (which calls this one too): check a few namespaces' kernel counters."""
        self.rt_offset = realtime_minus_monotonic()   # follows NTP steps of CLOCK_REALTIME within 10 ms

    # ---------------------------------------------------------------- loop
    def run(self) -> None:
        ep = self.ep
        next_due = self._next_due
        has_pending = self._has_pending
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
            if next_due() <= now + advance:
                self._release(now)
            # a packet found without sleeping arrived after the previous epoll_wait returned (level-triggered:
            # that one would have reported it otherwise); one found after a sleep arrived during it, also when
            # the timer ended the sleep (it came with the timer's wake-up, not at the previous one)
            dispatch(events, now, t_poll if now - t_poll > 20e-6 else None, t_prev)
            t_prev = now
            # Verdicts make the next namespaces forward the released packets inside the send itself, so
            # their sockets have work now: serve it in this wake-up, then arm the timer once.
            while True:
                now = monotonic()
                if next_due() <= now + advance:
                    self._release(now)
                if not has_pending():
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
            due = next_due()
            if due != math.inf:
                t = due - advance
                if fired or t != self.armed:
                    self.timer.arm(t)
                    self.armed = t
            elif fired:
                self.timer.disarm()
                self.armed = None
            if now >= next_hk:
                self._housekeep()
                next_hk = now + HOUSEKEEP_S

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
            elif h is not None:
                h(ev)
