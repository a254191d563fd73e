"""A deterministic discrete-event network for the pbcast, vsync and tradvsync cores: no sockets, no wall clock.

Every message goes through `wire.encode`/`wire.decode`, is lost with probability `loss` and otherwise delivered
after a random latency; a multicast is one packet reaching every other member of the group, each copy lost
independently. Crashed members neither act nor receive. Paused members (SIGSTOP) act and receive only when they
resume, everything that came due meanwhile at once; `perturb` pauses a member for 100 ms intervals with
probability p (the orchestrator's `perturb`, seed 001 §2.1). `intercept` lets a test lose or hold back chosen
unicast messages (a rule sees source, destination, the message and the time). `slow` gives a member a processing
time per received message: its messages wait in a FIFO queue served one at a time, and a pause stops the server
(the paper's members at their "maximum stable rate", seed 001 §6.1-6.2, whose backlog grows when perturbed). All
randomness comes from the seed.
"""
from __future__ import annotations

import heapq
import itertools
import random
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from gossipnode import wire
from gossipnode.config import NodeConfig
from gossipnode.protocols import registry
from gossipnode.protocols.base import Event, Output


def make_configs(n: int, protocol: dict[str, Any], *, senders=(), rate_per_s: float = 20.0, size_bytes: int = 64,
                 start_s: float = 0.0, stop_s: float | None = None, seed: int = 1, multicast=("data",),
                 log_dir: Path = Path("/nonexistent")) -> list[NodeConfig]:
    """Configs for members 0..n-1 on 127.0.0.1 (the cores never bind); every member in each multicast group."""
    members = [{"id": i, "name": f"m{i}", "addr": f"127.0.0.1:{21000 + i}"} for i in range(n)]
    senders = list(senders)
    common = {
        "members": members, "protocol": protocol, "senders": senders,
        "workload": {"rate_per_s": rate_per_s, "size_bytes": size_bytes, "start_s": start_s, "stop_s": stop_s}
        if senders else None,
        "seed": seed,
        "multicast": [{"name": g, "address": f"239.1.0.{k + 1}", "port": 7001 + k} for k, g in enumerate(multicast)],
    }
    return [NodeConfig.model_validate({**common, "name": f"m{i}", "id": i, "listen": members[i]["addr"],
                                       "event_log": str(log_dir / f"m{i}.jsonl")}) for i in range(n)]


class Sim:
    def __init__(self, configs: list[NodeConfig], *, loss: float = 0.0, latency: tuple[float, float] = (0.001, 0.005),
                 seed: int = 0, mcast_loss: float | None = None, mcast_drop: float = 0.0) -> None:
        """`loss`: each unicast copy; `mcast_loss`: each multicast copy (default `loss`); `mcast_drop`: a whole
        multicast datagram lost at its sender (its operating system dropped it)."""
        self.rng = random.Random(seed)
        self.mcast_drop = mcast_drop
        self.loss = loss
        self.mcast_loss = loss if mcast_loss is None else mcast_loss
        self.latency = latency
        self.now = 0.0
        self.nodes = {cfg.id: registry.create(cfg, 0.0) for cfg in configs}
        self.groups = {g.name: sorted(c.id for c in configs if any(x.name == g.name for x in c.multicast))
                       for c in configs for g in c.multicast}
        self.crashed: set[int] = set()
        self.paused_until: dict[int, float] = {}
        self.events: list[tuple[int, Event]] = []
        self.sent_by_type: Counter[str] = Counter()
        self.recv_by_node_type: Counter[tuple[int, str]] = Counter()
        self.lost = 0
        self.intercepted = 0
        self.service: dict[int, float] = {}
        self.backlog: dict[int, list[bytes]] = {}
        self.serving: set[int] = set()
        self.rules: list[Callable[[int, int, object, float], object]] = []
        self._queue: list[tuple[float, int, str, int, object]] = []
        self._order = itertools.count()
        self._tick_at: dict[int, float] = {}
        for node_id, node in self.nodes.items():
            self._record(node_id, node.startup)
            self._schedule(node_id, node.next_wakeup())

    def _schedule(self, node_id: int, at: float) -> None:
        if self._tick_at.get(node_id) != at:
            self._tick_at[node_id] = at
            self._push(at, "tick", node_id, None)

    def _push(self, at: float, kind: str, node_id: int, payload: object) -> None:
        if at != float("inf"):
            heapq.heappush(self._queue, (at, next(self._order), kind, node_id, payload))

    def intercept(self, rule: Callable[[int, int, object, float], object]) -> None:
        """`rule(src, dst, msg, now)` for every unicast message sent: None lets it through, "drop" loses it, a
        time holds it back until then (it is delivered after that time plus the usual latency)."""
        self.rules.append(rule)

    def slow(self, node_id: int, service_s: float) -> None:
        """Member `node_id` takes `service_s` to process each message it receives (FIFO, one at a time)."""
        self.service[node_id] = service_s
        self.backlog[node_id] = []

    def crash(self, node_id: int, at: float) -> None:
        self._push(at, "crash", node_id, None)

    def pause(self, node_id: int, at: float, duration: float) -> None:
        self._push(at, "pause", node_id, at + duration)

    def perturb(self, node_id: int, start: float, stop: float, p: float, seed: int = 0) -> int:
        """Sleep `node_id` for each 100 ms interval of [start, stop) with probability p; returns the sleeps."""
        rng = random.Random(f"perturb/{seed}/{node_id}")
        sleeps = 0
        k = 0
        while start + 0.1 * k < stop:
            if rng.random() < p:
                self.pause(node_id, start + 0.1 * k, 0.1)
                sleeps += 1
            k += 1
        return sleeps

    def _record(self, node_id: int, out: Output) -> None:
        self.events.extend((node_id, e) for e in out.events)
        copies: list[tuple[int, bytes, float]] = []
        held: list[tuple[int, bytes, float]] = []
        for dest, msg in [*out.send, *out.stream]:
            data = wire.encode(msg)
            self.sent_by_type[wire.header_fields(data)["type_name"]] += 1
            verdicts = [v for v in (rule(node_id, dest, msg, self.now) for rule in self.rules) if v is not None]
            if "drop" in verdicts:
                self.intercepted += 1
                continue
            if verdicts:
                self.intercepted += 1
                held.append((dest, data, max(float(v) for v in verdicts)))  # type: ignore[arg-type]
                continue
            copies.append((dest, data, self.loss))
        for dest, data, until in held:
            self._push(max(self.now, until) + self.rng.uniform(*self.latency), "deliver", dest, data)
        for group, msg in out.mcast:
            data = wire.encode(msg)
            self.sent_by_type[wire.header_fields(data)["type_name"]] += 1
            if self.mcast_drop and self.rng.random() < self.mcast_drop:
                self.lost += 1
                continue
            copies.extend((dest, data, self.mcast_loss) for dest in self.groups[group] if dest != node_id)
        for dest, data, loss in copies:
            if self.rng.random() < loss:
                self.lost += 1
                continue
            self._push(self.now + self.rng.uniform(*self.latency), "deliver", dest, data)

    def run(self, until: float) -> None:
        while self._queue and self._queue[0][0] <= until:
            at, _, kind, node_id, payload = heapq.heappop(self._queue)
            self.now = at
            if node_id in self.crashed:
                continue
            if kind == "pause":
                self.paused_until[node_id] = max(self.paused_until.get(node_id, 0.0), payload)  # type: ignore
                continue
            if kind == "tick" and self._tick_at.get(node_id) != at:
                continue  # superseded
            resume = self.paused_until.get(node_id, 0.0)
            if at < resume:
                if kind == "tick":
                    self._schedule(node_id, resume)
                else:
                    self._push(resume, kind, node_id, payload)
                continue
            node = self.nodes[node_id]
            if kind == "deliver" and node_id in self.service:
                self.backlog[node_id].append(payload)  # type: ignore[arg-type]
                if node_id not in self.serving:
                    self.serving.add(node_id)
                    self._push(at, "serve", node_id, None)
                continue
            if kind == "serve":
                payload = self.backlog[node_id].pop(0)
                if self.backlog[node_id]:
                    self._push(at + self.service[node_id], "serve", node_id, None)
                else:
                    self.serving.discard(node_id)
                kind = "deliver"
            if kind == "crash":
                self.crashed.add(node_id)
            elif kind == "tick":
                self._tick_at.pop(node_id, None)
                if at >= node.next_wakeup():
                    self._record(node_id, node.tick(at))
                self._schedule(node_id, node.next_wakeup())
            else:
                msg = wire.decode(payload)  # type: ignore[arg-type]
                self.recv_by_node_type[(node_id, wire.header_fields(payload)["type_name"])] += 1
                self._record(node_id, node.receive(msg, at))
                if node.next_wakeup() < self._tick_at.get(node_id, float("inf")):
                    self._schedule(node_id, node.next_wakeup())
        self.now = until

    def of(self, event: str, node_id: int | None = None) -> list[tuple[int, Event]]:
        return [(i, e) for i, e in self.events if e.event == event and (node_id is None or i == node_id)]
