"""A deterministic discrete-event network for the peer-sampling cores (HyParView, Cyclon, Scamp, CyclonAcked):
no sockets, no wall clock, every message through `wire.encode`/`wire.decode`.

Transports as the runtime gives them to a core:
- `Output.send` (UDP): delivered after the latency if the destination is alive, else lost silently.
- `Output.stream` (TCP, connected on first use): frames between two members arrive in order. A stream to a
  crashed member fails the sender's connection (`on_connection(peer, "failed", reason)` one latency later:
  "connect: refused" for a new connection, "reset" on an open one) and the frame is lost. A crash fails every
  open connection of the crashed member at its peers ("reset"). `Output.close` closes the connection quietly at
  its closer; the other end hears "failed"/"eof" after the frames already in flight, unless it closed too or a
  new connection between the two was opened meanwhile. "up" is heard by the opener and, with the first frame,
  by the acceptor.
All randomness comes from the seed; latency is `latency` plus a seeded jitter (FIFO kept per connection).
"""
from __future__ import annotations

import heapq
import itertools
import random
from collections import Counter
from typing import Any, Callable

from gossipnode import wire
from gossipnode.config import NodeConfig
from gossipnode.protocols import registry
from gossipnode.protocols.base import Event, Output


def make_configs(n: int, protocol: str, *, senders: list[int] | None = None, rate_per_s: float = 0.0,
                 size_bytes: int = 40, start_s: float = 0.0, stop_s: float | None = None, seed: int = 1,
                 **params: Any) -> list[NodeConfig]:
    members = [{"id": i, "name": f"m{i}", "addr": f"127.0.0.1:{20000 + i}"} for i in range(n)]
    senders = list(senders or [])
    workload = None
    if senders:
        workload = {"rate_per_s": rate_per_s, "size_bytes": size_bytes, "start_s": start_s, "stop_s": stop_s}
    return [NodeConfig.model_validate({
        "name": f"m{i}", "id": i, "listen": f"127.0.0.1:{20000 + i}", "members": members,
        "protocol": {"name": protocol, **params}, "senders": senders, "workload": workload, "seed": seed,
        "event_log": "/nonexistent/events.jsonl"}) for i in range(n)]


class OverlaySim:
    def __init__(self, configs: list[NodeConfig], *, seed: int = 1, latency: float = 0.005, jitter: float = 0.005,
                 start_spread: float = 0.0, now: float = 0.0) -> None:
        self.rng = random.Random(f"overlay-sim/{seed}")
        self.latency, self.jitter = latency, jitter
        self.now = now
        self.n = len(configs)
        self.queue: list[tuple[float, int, str, tuple]] = []
        self.order = itertools.count()
        self.cores: dict[int, Any] = {}
        self.alive: set[int] = set()
        self.events: list[tuple[int, Event]] = []
        self.conn: dict[frozenset, int] = {}        # open connections: pair -> incarnation
        self.closed_by: dict[frozenset, set[int]] = {}
        self.incarnation = itertools.count(1)
        self.last_arrival: dict[tuple[int, int], float] = {}
        self.wake: dict[int, float] = {}
        self.counters: Counter[str] = Counter()
        self.configs = configs
        self._accepted: set[tuple[int, int, int]] = set()
        self._failing: set[tuple[int, int]] = set()
        for cfg in configs:
            start = now + (self.rng.random() * start_spread if start_spread else 0.0)
            self._at(start, "start", (cfg.id,))

    # ---- scheduling ---------------------------------------------------------------------------------------------

    def _at(self, t: float, kind: str, args: tuple) -> None:
        heapq.heappush(self.queue, (t, next(self.order), kind, args))

    def _arrival(self, src: int, dst: int) -> float:
        t = self.now + self.latency + self.rng.random() * self.jitter
        t = max(t, self.last_arrival.get((src, dst), 0.0) + 1e-6)
        self.last_arrival[(src, dst)] = t
        return t

    def _schedule_wake(self, i: int) -> None:
        core = self.cores.get(i)
        if core is None or i not in self.alive:
            return
        t = core.next_wakeup()
        if t != float("inf") and t != self.wake.get(i):
            self.wake[i] = t
            self._at(max(t, self.now), "tick", (i, t))

    def _emit(self, i: int, out: Output) -> None:
        for ev in out.events:
            self.events.append((i, ev))
        for dst, msg in out.send:
            data = wire.encode(msg)
            self.counters["udp"] += 1
            if dst in self.alive:
                self._at(self._arrival(i, dst), "udp", (dst, data))
        for dst, msg in out.stream:
            data = wire.encode(msg)
            self.counters["tcp"] += 1
            pair = frozenset((i, dst))
            inc = self.conn.get(pair)
            if dst not in self.alive:
                if inc is not None:
                    del self.conn[pair]
                if (i, dst) in self._failing:
                    continue
                self._failing.add((i, dst))
                self._at(self.now + self.latency, "failed", (i, dst, "reset" if inc else "connect: refused", None))
                continue
            if inc is None:
                inc = self.conn[pair] = next(self.incarnation)
                self.closed_by[pair] = set()
                self._at(self.now + self.latency, "up", (i, dst, "connected", inc))
            self._at(self._arrival(i, dst), "frame", (i, dst, data, inc))
        for peer in out.close:
            pair = frozenset((i, peer))
            inc = self.conn.get(pair)
            if inc is None:
                self.closed_by.setdefault(pair, set()).add(i)
                continue
            del self.conn[pair]
            self.closed_by[pair] = {i}
            self._at(self._arrival(i, peer), "eof", (i, peer, inc))
        self._schedule_wake(i)

    # ---- driving ------------------------------------------------------------------------------------------------

    def crash(self, ids, at: float | None = None) -> None:
        for i in ids:
            self._at(self.now if at is None else at, "crash", (i,))

    def call(self, at: float, fn: Callable[["OverlaySim"], None]) -> None:
        self._at(at, "call", (fn,))

    def run(self, until: float) -> None:
        while self.queue and self.queue[0][0] <= until:
            t, _, kind, args = heapq.heappop(self.queue)
            self.now = max(self.now, t)
            getattr(self, f"_do_{kind}")(*args)
        self.now = max(self.now, until)

    def _do_call(self, fn) -> None:
        fn(self)

    def _do_start(self, i: int) -> None:
        core = registry.create(self.configs[i], self.now)
        self.cores[i] = core
        self.alive.add(i)
        self._emit(i, core.startup)

    def _do_tick(self, i: int, t: float) -> None:
        if i not in self.alive or self.wake.get(i) != t:
            return
        self.wake.pop(i, None)
        self._emit(i, self.cores[i].tick(self.now))

    def _do_udp(self, dst: int, data: bytes) -> None:
        if dst in self.alive:
            self._emit(dst, self.cores[dst].receive(wire.decode(data), self.now, "udp"))

    def _do_up(self, i: int, peer: int, reason: str, inc: int) -> None:
        if i in self.alive and self.conn.get(frozenset((i, peer))) == inc:
            self._emit(i, self.cores[i].on_connection(peer, "up", self.now, reason))

    def _do_frame(self, src: int, dst: int, data: bytes, inc: int) -> None:
        if dst not in self.alive:
            return
        pair = frozenset((src, dst))
        if self.conn.get(pair) != inc and dst in self.closed_by.get(pair, set()):
            self.counters["tcp_lost_after_close"] += 1   # the receiver had closed this connection: RST
            return
        if (dst, src, inc) not in self._accepted:
            self._accepted.add((dst, src, inc))
            if self.conn.get(pair) == inc:
                self._emit(dst, self.cores[dst].on_connection(src, "up", self.now, "accepted"))
        self._emit(dst, self.cores[dst].receive(wire.decode(data), self.now, "tcp"))

    def _do_eof(self, closer: int, peer: int, inc: int) -> None:
        pair = frozenset((closer, peer))
        if peer not in self.alive or self.conn.get(pair) is not None:
            return                      # reopened meanwhile, or the peer is gone
        if peer in self.closed_by.get(pair, set()):
            return
        self._emit(peer, self.cores[peer].on_connection(closer, "failed", self.now, "eof"))

    def _do_failed(self, i: int, peer: int, reason: str, _inc) -> None:
        self._failing.discard((i, peer))
        if i in self.alive:
            self._emit(i, self.cores[i].on_connection(peer, "failed", self.now, reason))

    def _do_crash(self, i: int) -> None:
        if i not in self.alive:
            return
        self.alive.discard(i)
        for pair in [p for p in self.conn if i in p]:
            (peer,) = pair - {i}
            del self.conn[pair]
            self._at(self.now + self.latency, "failed", (peer, i, "reset", None))

    # ---- what the tests read ------------------------------------------------------------------------------------

    def of(self, event: str) -> list[tuple[int, Event]]:
        return [(i, e) for i, e in self.events if e.event == event]
