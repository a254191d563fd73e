"""The model of one shaped link direction (pure: no sockets, no clock, no root).

`LinkModel.admit(now, length)` decides the fate of one IPv4 packet of `length` bytes (IP total length) offered
at time `now`: `None` (dropped: cut, lost, or the queue is full) or the time at which it is to be released (the
caller releases it then and calls `released()`). As netem, in this order: cut, loss (Bernoulli or
Gilbert-Elliott; a lost packet never occupies the link), serialisation at `rate_bps` (IP length + 14 B L2
overhead) behind a queue of at most `queue_pkts` packets not yet fully serialised, then `delay_s` + jitter
(FIFO: never before the previous delayed packet), or with probability `reorder` no delay at all.

Counters (see DELAYLINE.md) keep these invariants, which tests/unit/test_delayline_model.py checks:
- packets == accepted + held + lost + overflowed + cut_dropped (every offered packet is counted once, a held
  one moves to accepted when released or to cut_dropped / accepted when a cut / a flush empties the direction);
- a packet joins the serialiser queue only while it holds fewer than `queue_pkts` packets (so max_queue <=
  queue_pkts; a `set` that lowers queue_pkts under a longer backlog lets it drain, nothing joins it);
- release times are non-decreasing per direction (FIFO), except for `reordered` packets and across `set`;
- no packet is released before its arrival + its serialisation time.
"""
from __future__ import annotations

from collections import deque

from orchestrator.shaping.delayline.prng import Xoshiro
from orchestrator.shaping.params import L2_OVERHEAD_BYTES, DirParams


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


class LinkModel:
    """State and counters of one link direction. `seed`: None (system randomness) or a str/int making every
    draw reproducible (prng.Xoshiro: the compiled engine draws the same sequence from the same seed). `gen`
    changes whenever the direction's held packets are disposed of at once (cut, flush): the caller's schedule
    entries of an older generation are stale."""

    __slots__ = ("params", "cut", "rng", "seed", "gen",
                 "sec_per_byte", "delay", "jitter", "normal", "loss", "ge", "ge_bad", "limit", "reorder",
                 "busy", "deps", "floor",
                 "packets", "accepted", "delayed", "reordered", "lost", "overflowed", "cut_dropped", "max_queue",
                 "queue_sum", "queued", "held")

    def __init__(self, params: DirParams | None = None, seed=None):
        self.cut = False
        self.seed = seed
        self.rng = None  # made when the params first need randomness (saves ~2.5 kB per direction)
        self.gen = 0
        self.busy = 0.0          # when the transmitter is free (end of the last serialisation)
        self.deps = deque()      # serialisation end times of packets not yet fully serialised
        self.floor = 0.0         # FIFO: no release before the previous delayed packet's release
        self.packets = self.accepted = self.delayed = self.reordered = 0
        self.lost = self.overflowed = self.cut_dropped = self.max_queue = self.held = 0
        self.queue_sum = self.queued = 0   # queue length seen by each packet admitted to the serialiser
        self.ge_bad = False
        self.apply(params if params is not None else DirParams())

    # ------------------------------------------------------------------ parameters and live changes
    def apply(self, p: DirParams) -> None:
        """Take `p` for the packets offered from now on (the serialisation backlog and the FIFO floor stay)."""
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
            self.rng = Xoshiro(self.seed)

    def set(self, p: DirParams) -> None:
        """The control `set`: as netem's tfifo, later packets may overtake ones scheduled under the old params."""
        self.apply(p)
        self.floor = 0.0

    def cut_link(self) -> int:
        """Cut: drop everything offered from now on and every held packet (returns how many were held; the
        caller drops the entries of the old `gen`); the serialisation backlog goes with them."""
        n = self.held
        self.cut = True
        self.cut_dropped += n
        self.held = 0
        self.gen += 1
        self.deps.clear()
        self.busy = self.floor = 0.0
        return n

    def heal(self) -> bool:
        """Undo a cut (the params stay what they were, or what a `set` during the cut made them)."""
        was, self.cut = self.cut, False
        return was

    def release_all(self) -> int:
        """Every held packet is released now (remove, shutdown); returns how many (entries of the old `gen`)."""
        n = self.held
        self.accepted += n
        self.held = 0
        self.gen += 1
        return n

    # ------------------------------------------------------------------ the per-packet decision
    def admit(self, now: float, length: int) -> float | None:
        """Offer one packet of IP length `length` at `now`: None (dropped) or its release time. A time <= now
        means release at once (counted as accepted); a later one is held (counted in held and delayed) until
        the caller releases it and calls `released()`."""
        self.packets += 1
        if self.cut:
            self.cut_dropped += 1
            return None
        rng = self.rng
        # loss (decided first, as netem: a lost packet never occupies the link)
        if self.loss:
            if rng.random() < self.loss:
                self.lost += 1
                return None
        elif self.ge is not None:
            ge = self.ge
            if self.ge_bad:
                if rng.random() < ge.r:
                    self.ge_bad = False
            elif rng.random() < ge.p:
                self.ge_bad = True
            if rng.random() < (ge.loss_bad if self.ge_bad else ge.loss_good):
                self.lost += 1
                return None
        # serialisation behind a bounded queue
        spb = self.sec_per_byte
        if spb:
            deps = self.deps
            while deps and deps[0] <= now:
                deps.popleft()
            if self.limit and len(deps) >= self.limit:
                self.overflowed += 1
                return None
            self.queue_sum += len(deps)
            self.queued += 1
            busy = self.busy
            dep = (busy if busy > now else now) + (length + L2_OVERHEAD_BYTES) * spb
            self.busy = dep
            deps.append(dep)
            if len(deps) > self.max_queue:
                self.max_queue = len(deps)
        else:
            dep = now
        # delay (+ jitter, FIFO kept) or, with probability `reorder`, no delay at all
        if self.reorder and rng.random() < self.reorder:
            rel = dep
            self.reordered += 1
        else:
            rel = dep + self.delay
            j = self.jitter
            if j:
                rel += rng.gauss(0.0, j) if self.normal else rng.uniform(-j, j)
                if rel < dep:
                    rel = dep
            if rel < self.floor:
                rel = self.floor
            self.floor = rel
        if rel <= now:
            self.accepted += 1
        else:
            self.delayed += 1
            self.held += 1
        return rel

    def released(self) -> None:
        """A held packet went out."""
        self.held -= 1
        self.accepted += 1

    def passed_unshaped(self) -> None:
        """A packet offered while the delay line shuts down went out at once (unshaped)."""
        self.packets += 1
        self.accepted += 1

    # ------------------------------------------------------------------ observation
    def queue_len(self, now: float) -> int:
        """Packets not yet fully serialised at `now` (the one on the wire included)."""
        deps = self.deps
        while deps and deps[0] <= now:
            deps.popleft()
        return len(deps)

    def counters(self, now: float) -> dict:
        return {
            "packets": self.packets, "accepted": self.accepted, "delayed": self.delayed,
            "reordered": self.reordered, "lost": self.lost, "overflowed": self.overflowed,
            "cut_dropped": self.cut_dropped, "max_queue": self.max_queue, "queue": self.queue_len(now),
            "queue_sum": self.queue_sum, "queued": self.queued, "held": self.held, "cut": self.cut,
            "params": self.params.to_json(),
        }
