"""The delay line daemon: `python -m orchestrator.shaping.delayline --config CONFIG.json [--rt-priority 50]
[--die-with-parent PID]`.

Binds every configured queue (one NFQUEUE socket per namespace), opens the control socket, prints
`READY <pid>` (or `ERROR <message>` and exits 1), then runs the event loop until shutdown / SIGTERM / SIGINT /
SIGHUP, when it releases (ACCEPT) everything held and already queued, writes `stats_file` and exits 0. The
kernel's own counters of every queue (queue full, socket full) are checked in the loop; any drop is fatal.
"""
from __future__ import annotations

import argparse
import gc
import json
import math
import os
import resource
import select
import signal
import sys
import time
from typing import Sequence

from orchestrator.shaping import nfqueue as nfq
from orchestrator.errors import DelayLineDied
from orchestrator.shaping.delayline import cengine, shards
from orchestrator.shaping.delayline.config import CONFIG_KEYS, QueueSpec
from orchestrator.shaping.delayline.control import ControlServer
from orchestrator.shaping.delayline.loop import (DEFAULT_COPY_RANGE, DEFAULT_KERNEL_MAXLEN, HIST_BIN_S, HIST_BINS,
                                                 HIST_LO_S, HOUSEKEEP_MAX_NS, HOUSEKEEP_S, EventLoop,
                                                 Namespace, _libc, log)

PR_SET_PDEATHSIG = 1
PR_SET_TIMERSLACK = 29


class DelayLine(EventLoop):
    def __init__(self, config: dict):
        super().__init__(int(config.get("copy_range", DEFAULT_COPY_RANGE)))
        self.config = config
        self.seed = config.get("seed")
        self.kernel_maxlen = int(config.get("kernel_maxlen", DEFAULT_KERNEL_MAXLEN))
        self.control = ControlServer(self, config["control"])
        self.stats_file = config.get("stats_file")
        self.started = time.monotonic()
        self._hk_order: list[Namespace] = []
        self._hk_pos = 0

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
                self._ns_added(ns)
                self.namespaces[key] = ns
                self._hk_order.append(ns)
                self._watch_ns(ns)
            if s.queue_num in ns.dirs:
                raise ValueError(f"queue {s.queue_num} of {s.netns} is already served as {ns.dirs[s.queue_num].id!r}")
            try:
                ns.nl.bind_queue(s.queue_num, self.copy_range, self.kernel_maxlen)
            except OSError:
                if not ns.dirs:
                    self._forget_ns(ns)
                raise
            d = self._new_direction(s, ns)
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
            self.release_all(d)
            ns = d.ns
            del ns.dirs[d.qnum]
            self._flush()
            self._drop_direction(d)
            try:
                ns.nl.unbind_queue(d.qnum)
            except OSError as e:
                log(f"unbind {i}: {e}")
            if ns.nl.backlog:
                self._drain_backlog(ns)
            if not ns.dirs:
                self._forget_ns(ns)

    def _forget_ns(self, ns: Namespace) -> None:
        self._unwatch_ns(ns)
        del self.namespaces[ns.key]
        self._hk_order.remove(ns)
        self._ns_forgotten(ns)
        ns.close()

    def _baseline(self, ns: Namespace) -> None:
        st = nfq.read_queue_stats(ns.statfd)
        for q in ns.dirs:
            if q not in ns.baseline and q in st:
                ns.baseline[q] = (st[q]["dropped"], st[q]["user_dropped"])

    # ---------------------------------------------------------------- kernel drops
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
        super()._housekeep()
        order = self._hk_order
        if not order:
            return
        k = min(HOUSEKEEP_MAX_NS, max(1, math.ceil(len(order) * HOUSEKEEP_S)))
        for _ in range(min(k, len(order))):
            self._hk_pos %= len(order)
            self._check_kernel(order[self._hk_pos])
            self._hk_pos += 1

    # ---------------------------------------------------------------- observation
    def reset_samples(self) -> None:
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

    def hist_bins(self) -> dict[str, int]:
        """The global hold-error histogram, sparse (bin index -> count): what a shard router merges."""
        return {str(i): c for i, c in enumerate(self.hist) if c}

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
            "engine": self.engine_name,
        }

    # ---------------------------------------------------------------- the end
    def shutdown(self) -> None:
        """Release (ACCEPT) everything held and everything already queued to us, then close every socket.
        Afterwards the kernel drops what the still-present rules queue (fail closed) until the orchestrator
        removes the rules."""
        n = 0
        for d in self.dirs.values():
            n += self.release_all(d)
        self._clear_heap()
        for ns in self.namespaces.values():  # what is already queued to us goes out at once, unshaped
            while True:
                try:
                    k = ns.nl.sock.recv_into(self.buf)
                except (BlockingIOError, OSError):
                    break
                for qnum, pkt_id, *_ in self.parse(self.buf, k)[0]:
                    self._verdict(ns, qnum, pkt_id, nfq.NF_ACCEPT)
                    d = ns.dirs.get(qnum)
                    if d is not None:
                        d.passed_unshaped()
                    n += 1
        self._flush()
        log(f"shutdown: released {n} packets")
        if self.stats_file:
            try:
                tmp = f"{self.stats_file}.tmp"
                with open(tmp, "w") as f:
                    json.dump(self.stats(), f, indent=1)
                os.replace(tmp, self.stats_file)
            except OSError as e:
                log(f"cannot write stats file: {e}")
        self.close_namespaces()
        self.control.close()

    def close_namespaces(self) -> None:
        for ns in self.namespaces.values():
            ns.close()


def shards_wanted(config: dict, specs) -> int:
    """Engine processes: config `shards` (or DELAYLINE_SHARDS), default half the CPUs we may run on; never more
    than the namespaces (a namespace's queues share one socket, so one process)."""
    k = config.get("shards") or os.environ.get("DELAYLINE_SHARDS") or shards.default_shards()
    k = int(k)
    if k < 1:
        raise ValueError(f"shards must be >= 1, got {k}")
    return min(k, len({nfq.netns_key(s.netns) for s in specs}) or 1)


class CDelayLine(cengine.CEngineMixin, DelayLine):
    """The daemon with the compiled hot path (config `engine: c`)."""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m orchestrator.shaping.delayline",
                                 description="The delay line: netem semantics without sch_netem, one process.")
    ap.add_argument("--config", required=True)
    ap.add_argument("--rt-priority", type=int, default=0, help="SCHED_FIFO priority (0: normal scheduling)")
    ap.add_argument("--die-with-parent", type=int, default=0, metavar="PID",
                    help="exit (as on SIGTERM) when process PID, our parent, exits")
    ap.add_argument("--pdeathsig", choices=["TERM", "KILL"], default="TERM",
                    help="the signal --die-with-parent gets (a shard router's engines: KILL, so they fail closed)")
    args = ap.parse_args(argv)

    def fail(msg: str) -> int:
        sys.stdout.write(f"ERROR {msg}\n")
        sys.stdout.flush()
        log(f"startup failed: {msg}")
        return 1

    dl = None
    try:
        if args.die_with_parent:
            _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL if args.pdeathsig == "KILL" else signal.SIGTERM, 0, 0, 0)
            if os.getppid() != args.die_with_parent:
                return fail(f"parent {args.die_with_parent} is gone")
        with open(args.config) as f:
            config = json.load(f)
        unknown = set(config) - CONFIG_KEYS
        if unknown:
            return fail(f"unknown config keys {sorted(unknown)}")
        specs = [QueueSpec.from_json(q) for q in config.get("queues", [])]
        if args.rt_priority:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(args.rt_priority))
        _libc.prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0)
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        stop = []
        rfd, wfd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wfd)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, lambda s, _f: stop.append(s))
        engine = cengine.resolve_engine(config.get("engine") or os.environ.get("DELAYLINE_ENGINE"), warn=log)
        k = shards_wanted(config, specs)
        if k > 1:
            dl = shards.ShardRouter({**config, "engine": engine}, specs, k, args.rt_priority)
        else:
            dl = (CDelayLine if engine == "c" else DelayLine)(config)
        dl.ep.register(rfd, select.EPOLLIN)

        def on_signal(_ev):
            try:
                os.read(rfd, 512)
            except BlockingIOError:
                pass
            if stop:
                log(f"signal {stop[0]}: shutting down")
                dl.stopping = True
        dl.handlers[rfd] = on_signal
        if k <= 1:
            dl.add_queues(specs)
        dl.control.listen()
    except (OSError, ValueError, KeyError, TypeError, json.JSONDecodeError, DelayLineDied) as e:
        if dl is not None:
            dl.close_namespaces()
        return fail(f"{type(e).__name__}: {e}" if not isinstance(e, OSError) else str(e))
    if k > 1:
        what = f"routing {len(specs)} queues over {k} shards (engine {engine})"
    else:
        gc.collect()
        gc.freeze()
        gc.disable()  # the hot path makes no reference cycles; no collector pauses in the loop
        what = f"serving {len(dl.dirs)} queues in {len(dl.namespaces)} namespaces, engine {dl.engine_name}"
    log(what + (f", SCHED_FIFO {args.rt_priority}" if args.rt_priority else ""))
    sys.stdout.write(f"READY {os.getpid()}\n")
    sys.stdout.flush()
    if stop:
        dl.stopping = True
    dl.run()
    dl.shutdown()
    log("exit")
    return 0
