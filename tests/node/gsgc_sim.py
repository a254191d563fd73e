"""A deterministic discrete-event network for GSGC cores: no sockets, no wall clock.

Every message goes through `wire.encode`/`wire.decode`, is lost with probability `loss` and otherwise delivered
after a random latency. Crashed members neither act nor receive; paused members (SIGSTOP) act and receive only
when they resume, everything that came due meanwhile at once. All randomness comes from the seed.
"""
from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Callable, Iterable
from pathlib import Path

from gossipnode.protocols.gsgc import wire
from gossipnode.config import NodeConfig
from gossipnode.protocols.base import Event, Output
from gossipnode.protocols.gsgc.core import GsgcNode


def make_configs(
    n: int,
    *,
    subgroup: int = 2,
    step_s: float = 1.0,
    fail_k: int | None = None,
    senders: Iterable[int] = (),
    rate_per_s: float = 2.0,
    size_bytes: int = 40,
    stop_s: float | None = None,
    local_groups: list[dict] | None = None,
    multicast_stable: bool = False,
    seed: int = 1,
    ports: list[int] | None = None,
    log_dir: Path = Path("/nonexistent"),
    control_dir: Path | None = None,
    duration_s: float | None = None,
    wait_for_start: bool = False,
) -> list[NodeConfig]:
    """Configs for members 0..n-1 on 127.0.0.1 (`ports`, default 20000 + id; the core never binds them)."""
    ports = ports or [20000 + i for i in range(n)]
    members = [{"id": i, "name": f"m{i}", "addr": f"127.0.0.1:{ports[i]}"} for i in range(n)]
    senders = list(senders)
    common = {
        "members": members,
        "protocol": {"name": "gsgc", "subgroup": subgroup, "step_s": step_s, "fail_k": fail_k, "local_groups": local_groups,
                 "multicast_stable": multicast_stable},
        "senders": senders,
        "workload": {"rate_per_s": rate_per_s, "size_bytes": size_bytes, "stop_s": stop_s} if senders else None,
        "seed": seed,
        "duration_s": duration_s,
        "wait_for_start": wait_for_start,
    }
    return [
        NodeConfig.model_validate({**common, "name": f"m{i}", "id": i, "listen": members[i]["addr"],
                                   "event_log": str(log_dir / f"m{i}.jsonl"),
                                   "control": str(control_dir / f"m{i}.sock") if control_dir else None})
        for i in range(n)
    ]


class Sim:
    def __init__(self, configs: list[NodeConfig], *, loss: float = 0.0, latency: tuple[float, float] = (0.005, 0.05),
                 seed: int = 0) -> None:
        self.rng = random.Random(seed)
        self.loss = loss
        self.latency = latency
        self.now = 0.0
        self.nodes = {cfg.id: GsgcNode(cfg, 0.0) for cfg in configs}
        self.crashed: set[int] = set()
        self.paused_until: dict[int, float] = {}
        self.events: list[tuple[int, Event]] = []
        self.sent = 0
        self.lost = 0
        self._queue: list[tuple[float, int, str, int, object]] = []
        self._order = itertools.count()
        self.observers: list[Callable[[Sim], None]] = []
        for node_id, node in self.nodes.items():
            self._record(node_id, node.startup)
            self._push(node.next_wakeup(), "tick", node_id, None)

    def _push(self, at: float, kind: str, node_id: int, payload: object) -> None:
        heapq.heappush(self._queue, (at, next(self._order), kind, node_id, payload))

    def crash(self, node_id: int, at: float) -> None:
        self._push(at, "crash", node_id, None)

    def pause(self, node_id: int, at: float, duration: float) -> None:
        self._push(at, "pause", node_id, at + duration)

    def _record(self, node_id: int, out: Output) -> None:
        self.events.extend((node_id, e) for e in out.events)
        encoded: dict[int, bytes] = {}
        for dest, msg in out.send:
            data = encoded.setdefault(id(msg), wire.encode(msg))
            self.sent += 1
            if self.rng.random() < self.loss:
                self.lost += 1
                continue
            self._push(self.now + self.rng.uniform(*self.latency), "deliver", dest, data)

    def run(self, until: float) -> None:
        while self._queue and self._queue[0][0] <= until:
            at, _, kind, node_id, payload = heapq.heappop(self._queue)
            self.now = at
            if node_id in self.crashed:
                continue
            resume = self.paused_until.get(node_id, 0.0)
            if at < resume:
                self._push(resume, kind, node_id, payload)
                continue
            node = self.nodes[node_id]
            if kind == "crash":
                self.crashed.add(node_id)
                continue
            if kind == "pause":
                self.paused_until[node_id] = payload  # type: ignore[assignment]
                continue
            if kind == "tick":
                self._record(node_id, node.tick(at))
                self._push(node.next_wakeup(), "tick", node_id, None)
            else:
                self._record(node_id, node.receive(wire.decode(payload), at))  # type: ignore[arg-type]
            for observe in self.observers:
                observe(self)
        self.now = until

    # ---- reading the outcome ---------------------------------------------------------------------------------

    def of(self, event: str, node_id: int | None = None) -> list[tuple[int, Event]]:
        return [(i, e) for i, e in self.events if e.event == event and (node_id is None or i == node_id)]

    def live(self) -> list[int]:
        return [i for i in self.nodes if i not in self.crashed]

    def declared(self) -> set[int]:
        """Members that some member has declared failed at some point."""
        return {e.fields["member"] for _, e in self.of("declared_failed")}
