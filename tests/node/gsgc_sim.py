"""A deterministic discrete-event network for GSGC cores: no sockets, no wall clock.

Every message goes through `wire.encode`/`wire.decode`, is lost with probability `loss` and otherwise delivered
after a random latency. A multicast (`Output.mcast`) is one packet: it reaches every other member of the group
(members whose config lists it), each copy lost independently with probability `loss`. Crashed members neither act nor receive; paused members (SIGSTOP) act and receive only
when they resume, everything that came due meanwhile at once. A restarted member is a fresh core (the process
started again with its config). A partition cuts a set of members off from the rest: a copy that crosses the
cut when it is sent or when it would arrive is lost (counted in `cut`); `heal` ends every partition. All
randomness comes from the seed; partitions and restarts draw nothing from it.
"""
from __future__ import annotations

import heapq
import itertools
import random
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

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
    multicast: list[str] = (),
    **protocol: Any,
) -> list[NodeConfig]:
    """Configs for members 0..n-1 on 127.0.0.1 (`ports`, default 20000 + id; the core never binds them).
    `multicast`: names of IP multicast groups every member belongs to; `protocol`: further GSGC parameters
    (sc_step_s, stable_via, piggyback_stability, ...)."""
    ports = ports or [20000 + i for i in range(n)]
    members = [{"id": i, "name": f"m{i}", "addr": f"127.0.0.1:{ports[i]}"} for i in range(n)]
    senders = list(senders)
    common = {
        "members": members,
        "protocol": {"name": "gsgc", "subgroup": subgroup, "step_s": step_s, "fail_k": fail_k, "local_groups": local_groups,
                 "multicast_stable": multicast_stable, **protocol},
        "senders": senders,
        "workload": {"rate_per_s": rate_per_s, "size_bytes": size_bytes, "stop_s": stop_s} if senders else None,
        "seed": seed,
        "duration_s": duration_s,
        "wait_for_start": wait_for_start,
        "multicast": [{"name": g, "address": f"239.1.0.{k + 1}", "port": 7001 + k} for k, g in enumerate(multicast)],
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
        self.configs = {cfg.id: cfg for cfg in configs}
        self.nodes = {cfg.id: GsgcNode(cfg, 0.0) for cfg in configs}
        self.side: dict[int, int] = {}  # member -> its side of the active partition (absent: no partition)
        self.cut = 0  # copies lost to a partition
        self.groups = {g.name: sorted(c.id for c in configs if any(x.name == g.name for x in c.multicast))
                       for c in configs for g in c.multicast}
        self.crashed: set[int] = set()
        self.paused_until: dict[int, float] = {}
        self.events: list[tuple[int, Event]] = []
        self.sent = 0  # packets: a unicast copy, or one multicast datagram
        self.lost = 0  # copies lost
        self.sent_by_type: Counter[str] = Counter()
        self.bytes_by_type: Counter[str] = Counter()
        self.sizes: dict[str, set[int]] = {}  # message type -> every packet size sent
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

    def restart(self, node_id: int, at: float) -> None:
        """Start a crashed member again at `at`: a fresh core from its config (nothing survives a restart)."""
        self._push(at, "restart", node_id, None)

    def partition(self, members: Iterable[int], at: float) -> None:
        """Cut `members` off from the others at `at` (both directions), until `heal`."""
        self._push(at, "partition", -1, frozenset(members))

    def heal(self, at: float) -> None:
        self._push(at, "heal", -1, None)

    def _crosses(self, a: int, b: int) -> bool:
        return bool(self.side) and self.side.get(a, 0) != self.side.get(b, 0)

    def _count(self, msg: wire.Message, data: bytes) -> None:
        self.sent += 1
        self.sent_by_type[msg.type.name] += 1
        self.bytes_by_type[msg.type.name] += len(data)
        self.sizes.setdefault(msg.type.name, set()).add(len(data))

    def _record(self, node_id: int, out: Output) -> None:
        self.events.extend((node_id, e) for e in out.events)
        encoded: dict[int, bytes] = {}
        copies: list[tuple[int, bytes]] = []
        for dest, msg in out.send:
            data = encoded.setdefault(id(msg), wire.encode(msg))
            self._count(msg, data)
            copies.append((dest, data))
        for group, msg in out.mcast:
            data = wire.encode(msg)
            self._count(msg, data)
            copies.extend((dest, data) for dest in self.groups[group] if dest != node_id)
        for dest, data in copies:
            if self.side and self._crosses(node_id, dest):
                self.cut += 1
                continue
            if self.rng.random() < self.loss:
                self.lost += 1
                continue
            self._push(self.now + self.rng.uniform(*self.latency), "deliver", dest, (node_id, data))

    def run(self, until: float) -> None:
        while self._queue and self._queue[0][0] <= until:
            at, _, kind, node_id, payload = heapq.heappop(self._queue)
            self.now = at
            if kind == "partition":
                self.side = dict.fromkeys(payload, 1)  # type: ignore[arg-type]
                continue
            if kind == "heal":
                self.side = {}
                continue
            if kind == "restart":
                if node_id in self.crashed:
                    self.crashed.discard(node_id)
                    self.nodes[node_id] = GsgcNode(self.configs[node_id], at)
                    self._record(node_id, self.nodes[node_id].startup)
                    self._push(self.nodes[node_id].next_wakeup(), "tick", node_id, None)
                continue
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
                src, data = payload  # type: ignore[misc]
                if self.side and self._crosses(src, node_id):  # cut while in flight
                    self.cut += 1
                    continue
                self._record(node_id, node.receive(wire.decode(data), at))
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


# ---- §5 as the paper ran it: the measurement in docs/reproduction.md ---------------------------------------------

def paper_local_configs(*, n: int = 100, group_size: int = 50, controllers: int = 5, m: int = 50, seed: int = 1,
                        data_per_s: float = 2.0, paper: bool = True, **kw: Any) -> list[NodeConfig]:
    """topologies/gsgc-local-sparse-1000.yaml's local point for n members, as the orchestrator draws it (local
    groups and senders seeded like orchestrator/protocols.py and nodeconfig.py): b = 1, 0.7 s local steps, 0.2 s
    SC steps, no failure detection. `data_per_s` data messages per second group-wide (spread over the m
    senders), so that S can rise. `paper`: S by multicast to a group of every member, no piggybacked S."""
    ids = list(range(n))
    random.Random(f"{seed}/local-groups").shuffle(ids)
    k = max(1, round(n / group_size))
    groups = [ids[i * n // k:(i + 1) * n // k] for i in range(k)]
    local = [{"members": sorted(g), "controllers": sorted(g[:controllers])} for g in groups]
    senders = sorted(random.Random(f"{seed}/senders").sample(range(n), m))
    extra: dict[str, Any] = {}
    if paper:
        extra = {"stable_via": "multicast", "piggyback_stability": False, "multicast": ["all"]}
    args = {"subgroup": 1, "step_s": 0.7, "sc_step_s": 0.2, "fail_k": None, "senders": senders,
            "rate_per_s": data_per_s / m, "local_groups": local, "seed": seed, **extra, **kw}
    return make_configs(n, **args)


def local_gossip_counts(sim: Sim) -> dict[str, int]:
    """The issue's numbers: local rounds (distinct (group, round) constructed), SC constructions (constructing
    SCs, each counted), SC rounds constructed, constructions that raised S, STABLE packets, total packets."""
    built = [(i, e) for i, e in sim.of("round_completed") if e.fields["via"] == "constructed"]
    sc = [e for _, e in built if e.fields["level"] == "sc"]
    return {
        "local_rounds": len({(sim.nodes[i].group_index, e.fields["round"]) for i, e in built
                             if e.fields["level"] == "local"}),
        "sc_constructions": len(sc),
        "sc_rounds": len({e.fields["round"] for e in sc}),
        "raised_s": sum(1 for _, e in sim.of("stable") if e.fields["level"] == "global"
                        and e.fields["via"] == "constructed"),
        "stable_packets": sim.sent_by_type["STABLE"],
        "total_packets": sim.sent,
    }


if __name__ == "__main__":  # .venv/bin/python -m tests.node.gsgc_sim: the numbers in docs/reproduction.md
    for label, cfgs in (("m = 25, S by n - 1 unicasts, S piggybacked", paper_local_configs(m=25, paper=False)),
                        ("m = 50, S by multicast, no piggybacked S", paper_local_configs(m=50))):
        sim = Sim(cfgs, seed=1)
        sim.run(30.0)
        print(label, local_gossip_counts(sim), dict(sim.sent_by_type))
