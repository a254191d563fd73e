"""The compiled engine's Python side (issue 21): `CLinkModel` (model.py's `LinkModel` interface over the C link
model), `CDirection` (loop.py's `Direction` over it) and `CEngineMixin`, which moves the event loop's hot path
(receive, parse, admit, hold, release, batched verdicts) into `_engine.c`. The loop's control flow, setup,
control protocol and stats stay Python (loop.py, daemon.py): the mixin overrides only the per-packet methods.

`load()` returns the cffi module (`ffi`, `lib`) or raises ImportError (not built: `make setup`, or
`.venv/bin/python orchestrator/shaping/delayline/build_engine.py`). `resolve_engine("c" | "python" | "auto")`
-> "c" | "python" (auto: c when it loads, else python with one warning line)."""
from __future__ import annotations

import math
import os
import sys

from orchestrator.shaping.delayline.prng import seed64
from orchestrator.shaping.params import DirParams

ENGINES = ("c", "python", "auto")
_mod = None


def load():
    global _mod
    if _mod is None:
        from orchestrator.shaping.delayline import _cengine  # noqa: F401  (ImportError when not built)
        _mod = _cengine
    return _mod


def available() -> bool:
    try:
        load()
        return True
    except ImportError:
        return False


def resolve_engine(engine: str | None, warn=None) -> str:
    engine = engine or "auto"
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if engine == "python":
        return "python"
    try:
        load()
        return "c"
    except ImportError as e:
        if engine == "c":
            raise ValueError(f"engine c is not built ({e}): run make setup") from None
        (warn or (lambda m: sys.stderr.write(m + "\n")))(
            f"warning: the compiled delay line engine is not built ({e}); using the python engine")
        return "python"


_COUNTERS = ("packets", "accepted", "delayed", "reordered", "lost", "overflowed", "cut_dropped", "max_queue",
             "queue_sum", "queued", "held", "gen")


class CLinkModel:
    """model.py's LinkModel over the C link model (same semantics, same PRNG: bit-identical release times).
    `admit(now, length)` -> None (dropped) or the release time; times are seconds >= 0."""

    __slots__ = ("c", "params", "seed", "_lib", "__weakref__")

    def __init__(self, params: DirParams | None = None, seed=None):
        m = load()
        self._lib = m.lib
        self.seed = seed
        self.c = m.ffi.gc(m.lib.link_new(seed64(seed)), m.lib.link_free)
        if self.c == m.ffi.NULL:
            raise MemoryError("link_new")
        self.apply(params if params is not None else DirParams())

    def apply(self, p: DirParams) -> None:
        self.params = p
        ge = p.gemodel
        self._lib.link_set(self.c, float(p.rate_bps or 0.0), float(p.delay_s), float(p.jitter_s),
                           1 if p.jitter_dist == "normal" else 0, float(p.loss), 1 if ge is not None else 0,
                           float(ge.p) if ge else 0.0, float(ge.r) if ge else 0.0,
                           float(ge.loss_bad) if ge else 0.0, float(ge.loss_good) if ge else 0.0,
                           int(p.queue_pkts) if p.queue_pkts else 0, float(p.reorder))

    def set(self, p: DirParams) -> None:
        self.apply(p)
        self.c.floor = 0.0

    def cut_link(self) -> int:
        return int(self._lib.link_cut(self.c))

    def heal(self) -> bool:
        was = bool(self.c.cut)
        self.c.cut = 0
        return was

    def release_all(self) -> int:
        return int(self._lib.link_release_all(self.c))

    def admit(self, now: float, length: int) -> float | None:
        r = self._lib.link_admit(self.c, now, length)
        return None if r < 0 else r

    def released(self) -> None:
        self.c.held -= 1
        self.c.accepted += 1

    def passed_unshaped(self) -> None:
        self.c.packets += 1
        self.c.accepted += 1

    def queue_len(self, now: float) -> int:
        return int(self._lib.link_queue_len(self.c, now))

    @property
    def cut(self) -> bool:
        return bool(self.c.cut)

    def counters(self, now: float) -> dict:
        c = self.c
        return {"packets": c.packets, "accepted": c.accepted, "delayed": c.delayed, "reordered": c.reordered,
                "lost": c.lost, "overflowed": c.overflowed, "cut_dropped": c.cut_dropped,
                "max_queue": c.max_queue, "queue": self.queue_len(now), "queue_sum": c.queue_sum,
                "queued": c.queued, "held": c.held, "cut": bool(c.cut), "params": self.params.to_json()}


def _counter(name):
    return property(lambda self: getattr(self.c, name))


for _n in _COUNTERS:
    setattr(CLinkModel, _n, _counter(_n))


class CDirection(CLinkModel):
    """loop.py's Direction over the C link: its hold-error samples live in C (filled by engine_release)."""

    __slots__ = ("id", "ns", "qnum")

    def __init__(self, spec, ns, seed):
        self.id = spec.id
        self.ns = ns
        self.qnum = spec.queue_num
        super().__init__(spec.params, f"{seed}/{spec.id}" if seed is not None else None)

    def reset_samples(self) -> None:
        c = self.c
        c.err_n = 0
        c.err_sum = 0.0
        c.err_max = 0.0

    def stats(self, now: float) -> dict:
        from orchestrator.shaping.delayline.loop import RING, hold_error_stats
        c = self.c
        n = int(c.err_n)
        samples = sorted(load().ffi.unpack(c.ring, min(n, RING))) if n and c.ring != load().ffi.NULL else []
        out = self.counters(now)
        out["hold_error"] = hold_error_stats(n, c.err_sum, c.err_max, samples)
        return out


class CEngineMixin:
    """Put before an EventLoop subclass (`class X(CEngineMixin, DelayLine)`): the per-packet work goes to C.
    The Python heap stays empty; held packets live in the engine's heap."""

    engine_name = "c"

    def _engine_init(self) -> None:
        m = load()
        self._ffi, self._lib = m.ffi, m.lib
        self._eng = m.ffi.gc(m.lib.engine_new(self.copy_range), m.lib.engine_free)
        self._t_empty = m.ffi.new("double *")
        self._i2 = m.ffi.new("int[2]")
        self._d1 = m.ffi.new("double *")
        self._st = m.ffi.new("int64_t[6]")
        self._by_idx: dict[int, object] = {}
        self._logged_errors = 0
        # DELAYLINE_C_LOOP=0: the python loop around the compiled hot path (for comparisons)
        self._c_loop = os.environ.get("DELAYLINE_C_LOOP", "1") != "0"

    # -- hooks of EventLoop / DelayLine
    def _new_direction(self, spec, ns):
        d = CDirection(spec, ns, self.seed)
        if self._lib.engine_add_link(self._eng, ns.idx, spec.queue_num, d.c) != 0:
            raise MemoryError("engine_add_link")
        return d

    def _drop_direction(self, d) -> None:
        self._lib.engine_remove_link(self._eng, d.c)

    def _ns_added(self, ns) -> None:
        ns.idx = self._lib.engine_add_ns(self._eng, ns.fd)
        if ns.idx < 0:
            raise MemoryError("engine_add_ns")
        self._by_idx[ns.idx] = ns

    def _ns_forgotten(self, ns) -> None:
        self._lib.engine_remove_ns(self._eng, ns.idx)
        self._by_idx.pop(ns.idx, None)

    def _watch_ns(self, ns) -> None:
        if not self._c_loop:
            super()._watch_ns(ns)
        # else engine_add_ns (in _ns_added) put it in the engine's epoll

    def _unwatch_ns(self, ns) -> None:
        if not self._c_loop:
            super()._unwatch_ns(ns)
        # else engine_remove_ns (in _ns_forgotten) takes it out

    def run(self) -> None:
        """The event loop in C (`engine_run`: loop.py's run, wake-up for wake-up); it returns to Python when the
        control socket or a signal has work (Python's epoll, nested in the engine's, is ready) and every
        HOUSEKEEP_S for the kernel-drop checks."""
        from orchestrator.shaping.delayline.loop import ADVANCE_MAX_S, ADVANCE_STEP_S, HOUSEKEEP_S
        import time
        if not self._c_loop:
            return super().run()
        lib, eng = self._lib, self._eng
        self.ep.unregister(self.timer.fd)            # the engine has its own timerfd
        r = lib.engine_loop_init(eng, self.ep.fileno(), self.advance, ADVANCE_MAX_S, ADVANCE_STEP_S)
        if r < 0:
            raise OSError(-r, f"engine_loop_init: {os.strerror(-r)}")
        info = self._ffi.new("double[4]")
        monotonic = time.monotonic
        handlers = self.handlers
        next_hk = monotonic() + HOUSEKEEP_S
        while not self.stopping:
            r = lib.engine_run(eng, next_hk)
            if r < 0:
                raise OSError(-r, os.strerror(-r))
            lib.engine_loop_info(eng, info)
            self.advance, self.wakeups, self.t_wait, self.t_wake = info[0], int(info[1]), info[2], info[3]
            self._after_c()
            if r == 1:
                for fd, ev in self.ep.poll(0):
                    h = handlers.get(fd)
                    if h is not None:
                        h(ev)
                if self._has_pending():      # a control op (cut, remove) issued verdicts
                    self._flush()
            now = monotonic()
            if now >= next_hk:
                self._housekeep()
                next_hk = now + HOUSEKEEP_S

    def _after_c(self) -> None:
        """What the python loop logs on the way, logged once the C loop hands back."""
        if self._lib.engine_take_late(self._eng, self._d1, self._i2, self._i2 + 1):
            from orchestrator.shaping.delayline.loop import log
            ns = self._by_idx.get(self._i2[0])
            d = ns.dirs.get(self._i2[1]) if ns else None
            log(f"late release: {self._d1[0] * 1e3:.1f} ms after its due time ({d.id if d else '?'}); "
                f"the wait before its loop iteration lasted {(self.t_wake - self.t_wait) * 1e3:.1f} ms")
        if self._lib.engine_take_flush_error(self._eng, self._i2, self._i2 + 1):
            ns = self._by_idx.get(self._i2[0])
            self._fatal(f"sending verdicts to {ns.path if ns else '?'} failed: {os.strerror(self._i2[1])}")
        self._log_verdict_errors()

    def _next_due(self) -> float:
        return self._lib.engine_next_due(self._eng)

    def _has_pending(self) -> bool:
        return self._lib.engine_pending(self._eng) > 0

    # -- the hot path
    def _read_ns(self, ns, stamp: float) -> None:
        r = self._lib.engine_read(self._eng, ns.idx, stamp, self._t_empty)
        if r == 0:
            ns.t_empty = self._t_empty[0]
        elif r < 0:
            raise OSError(-r, os.strerror(-r))
        self._log_verdict_errors()

    def _log_verdict_errors(self) -> None:
        self._lib.engine_stats(self._eng, self._st)
        n = self._st[1]
        if n > self._logged_errors:
            if self._logged_errors < 10:
                from orchestrator.shaping.delayline.loop import log
                e = self._lib.engine_last_error(self._eng, self._i2)
                ns = self._by_idx.get(self._i2[0])
                log(f"verdict rejected in {ns.path if ns else '?'}: {os.strerror(e)}")
            self._logged_errors = n

    def _drain_backlog(self, ns) -> None:
        import time
        msgs, ns.nl.backlog = ns.nl.backlog, []
        now = time.monotonic()
        for m in msgs:
            self._lib.engine_admit_buf(self._eng, ns.idx, self._ffi.from_buffer(m), len(m), now)

    def _verdict(self, ns, qnum: int, pkt_id: int, v: int) -> None:
        self._lib.engine_verdict(self._eng, ns.idx, qnum, pkt_id & 0xFFFFFFFF, v)

    def _release(self, now: float) -> None:
        self._lib.engine_release(self._eng, now, now + self.advance)
        if self._lib.engine_take_late(self._eng, self._d1, self._i2, self._i2 + 1):
            from orchestrator.shaping.delayline.loop import log
            ns = self._by_idx.get(self._i2[0])
            d = ns.dirs.get(self._i2[1]) if ns else None
            log(f"late release: {self._d1[0] * 1e3:.1f} ms after its due time ({d.id if d else '?'}); "
                f"loop iteration began {(now - self.t_wake) * 1e3:.1f} ms ago, "
                f"the wait before it lasted {(self.t_wake - self.t_wait) * 1e3:.1f} ms")

    def _flush(self) -> None:
        if self._lib.engine_flush(self._eng, self._i2, self._i2 + 1):
            ns = self._by_idx.get(self._i2[0])
            self._fatal(f"sending verdicts to {ns.path if ns else '?'} failed: {os.strerror(self._i2[1])}")

    def _verdict_held(self, d, gen: int, v: int) -> None:
        self._lib.engine_dispose(self._eng, d.c, gen, v)

    def _clear_heap(self) -> None:
        self._lib.engine_clear_heap(self._eng)

    # -- observation
    def hist_bins(self) -> dict[str, int]:
        out = self._ffi.new("int64_t[]", 20200)
        self._lib.engine_hist_copy(self._eng, out)
        return {str(i): c for i, c in enumerate(out) if c}

    def reset_samples(self) -> None:
        super().reset_samples()
        self._lib.engine_reset_hist(self._eng)

    def stats(self, ids=None, kernel: bool = True) -> dict:
        out = super().stats(ids, kernel)
        lib, eng = self._lib, self._eng
        lib.engine_stats(eng, self._st)
        n = int(self._st[2])
        q = (lambda x: None if math.isnan(x) else x)
        out["hold_error"].update({"count": n, "p50_s": q(lib.engine_hist_quantile(eng, 0.5)) if n else None,
                                  "p99_s": q(lib.engine_hist_quantile(eng, 0.99)) if n else None,
                                  "max_s": lib.engine_hist_max(eng) if n else None,
                                  "min_s": lib.engine_hist_min(eng) if n else None})
        out["unknown_queue"] = int(self._st[0])
        out["verdict_errors"] = int(self._st[1])
        out["engine"] = "c"
        return out
