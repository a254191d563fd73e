"""A deterministic discrete-event network for QSM cores: no sockets, no wall clock.

Every message goes through `wire.encode`/`wire.decode`. UDP and IP multicast copies are lost independently with
probability `loss` and otherwise delivered after a random latency; a multicast reaches every other member whose
config lists the group. TCP streams (`Output.stream`: the token, push, pull, NAK, ACK) are in order per pair of
members, after the same latency, and reliable unless `tcp_late`/`tcp_lost` say otherwise: as the lab's TCP is,
where a connection to a ring neighbour whose SYN was lost opens a second or more late (a frame is late by 1-3 s
with probability `tcp_late`, and every frame behind it on its pair waits too) and a connection that fails drops
its queue (a frame is lost with probability `tcp_lost`). All randomness comes from the seed.

`drop(src, dst, msg)`, if set, loses the UDP/multicast copies it returns True for (hand-worked tests); `after(sim)`,
if set, runs after every delivered message and timer (to check an invariant at every step). `crash(i)` stops a
member silently (what reaches it is lost, its timers never fire); `gms_remove(ids, spread)` is the GMS's next view
without those members, reaching every other running member at its own moment within `spread` seconds, and
`gms_add(ids, spread)` the next view with those joiners (configs made with `joiners=[...]`: until then their cores
take part in nothing, as a process not started yet) or with restarted members. `restart(i)` starts a crashed
member's next process: a fresh core with the next `incarnation`, which gets every view so far with the next view
(the cumulative `gms_view` command, as the runtime's control does).
"""
from __future__ import annotations

import heapq
import itertools
import random
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from gossipnode import wire
from gossipnode.config import NodeConfig
from gossipnode.protocols.base import Event, Output
from gossipnode.protocols.qsm.core import QsmNode
from gossipnode.protocols.qsm.membership import compute_regions


def make_configs(n: int, groups: dict[str, list[int]], *, senders: Iterable[int] = (), rate_per_s: float = 20.0,
                 size_bytes: int = 64, stop_s: float | None = None, seed: int = 1, transport: str = "mcast",
                 partition_size: int = 3, **protocol: Any) -> list[NodeConfig]:
    """Configs for members 0..n-1 in `groups` (name -> member ids; every group's senders default to the workload
    senders in it). With mcast, each member gets its region's multicast group, and a sender also every region
    group of the groups it sends to (the platform's IP multicast sends only from a group's members)."""
    senders = list(senders)
    members = [{"id": i, "name": f"m{i}", "addr": f"127.0.0.1:{20000 + i}"} for i in range(n)]
    regions = compute_regions(groups, n, partition_size)      # once every joiner has joined
    mgroups = {r.name: set(r.members) for r in regions}
    for s in senders:
        for g, ms in groups.items():
            if s in ms:
                for r in regions:
                    if g in r.groups:
                        mgroups[r.name].add(s)
    addr = {name: (f"239.2.0.{k + 1}", 7101 + k) for k, name in enumerate(sorted(mgroups))}
    params = {"name": "qsm", "groups": [{"name": g, "members": ms} for g, ms in groups.items()],
              "partition_size": partition_size, "transport": transport, **protocol}
    out = []
    for i in range(n):
        mc = [{"name": name, "address": addr[name][0], "port": addr[name][1]}
              for name in sorted(mgroups) if i in mgroups[name]] if transport == "mcast" else []
        out.append(NodeConfig.model_validate({
            "name": f"m{i}", "id": i, "listen": members[i]["addr"], "members": members, "protocol": params,
            "senders": senders, "workload": {"rate_per_s": rate_per_s, "size_bytes": size_bytes, "stop_s": stop_s}
            if senders else None, "seed": seed * 1000 + i, "event_log": f"/nonexistent/m{i}.jsonl", "multicast": mc,
        }))
    return out


class Sim:
    def __init__(self, configs: list[NodeConfig], *, loss: float = 0.0,
                 latency: tuple[float, float] = (0.002, 0.02), seed: int = 0, tcp_late: float = 0.0,
                 tcp_lost: float = 0.0) -> None:
        self.rng = random.Random(seed)
        self.loss = loss
        self.tcp_late = tcp_late
        self.tcp_lost = tcp_lost
        self.latency = latency
        self.now = 0.0
        self.nodes = {cfg.id: QsmNode(cfg, 0.0) for cfg in configs}
        self.mgroups: dict[str, list[int]] = {}
        for c in configs:
            for g in c.multicast:
                self.mgroups.setdefault(g.name, []).append(c.id)
        self.queue: list[tuple[float, int, str, Any]] = []
        self.order = itertools.count()
        self.stream_last: dict[tuple[int, int], float] = {}
        self.scheduled: dict[int, float] = {}
        self.events: list[tuple[int, Event]] = []
        self.sent: Counter[str] = Counter()
        self.lost: Counter[str] = Counter()
        self.drop: Callable[[int, int, Any], bool] | None = None
        self.after: Callable[[Sim], None] | None = None
        self.crashed: set[int] = set()
        self.view = 0
        self.changes: list[dict[str, list[int]]] = []      # every view's change so far (the GMS's command)
        for i, node in self.nodes.items():
            self._emit(i, node.startup)
            self._timer(i)

    def _push(self, at: float, kind: str, payload: Any) -> None:
        heapq.heappush(self.queue, (at, next(self.order), kind, payload))

    def _timer(self, i: int) -> None:
        due = self.nodes[i].next_wakeup()
        if due != float("inf") and self.scheduled.get(i) != due:
            self.scheduled[i] = due
            self._push(max(due, self.now), "tick", (i, due))

    def _lat(self) -> float:
        return self.rng.uniform(*self.latency)

    def _emit(self, i: int, out: Output) -> None:
        self.events.extend((i, e) for e in out.events)
        for dst, msg in out.send:
            self._datagram(i, dst, msg, "udp")
        for group, msg in out.mcast:
            pkt = wire.encode(msg)
            self.sent[f"mcast:{msg.type.name}"] += 1
            for dst in self.mgroups[group]:
                if dst != i:
                    self._deliver_lossy(i, dst, msg, pkt, "mcast")
        for dst, msg in out.stream:
            pkt = wire.encode(msg)
            self.sent[f"tcp:{msg.type.name}"] += 1
            late = 0.0
            if self.tcp_late or self.tcp_lost:
                r = self.rng.random()
                if r < self.tcp_lost:
                    self.lost["tcp"] += 1
                    continue
                if r < self.tcp_lost + self.tcp_late:
                    late = self.rng.uniform(1.0, 3.0)
            at = max(self.now + self._lat() + late, self.stream_last.get((i, dst), 0.0) + 1e-6)
            self.stream_last[(i, dst)] = at
            self._push(at, "msg", (dst, pkt, "tcp"))

    def _datagram(self, i: int, dst: int, msg: Any, via: str) -> None:
        pkt = wire.encode(msg)
        self.sent[f"{via}:{msg.type.name}"] += 1
        self._deliver_lossy(i, dst, msg, pkt, via)

    def _deliver_lossy(self, i: int, dst: int, msg: Any, pkt: bytes, via: str) -> None:
        if self.rng.random() < self.loss or (self.drop is not None and self.drop(i, dst, msg)):
            self.lost[via] += 1
            return
        self._push(self.now + self._lat(), "msg", (dst, pkt, via))

    def run_until(self, t: float) -> None:
        while self.queue and self.queue[0][0] <= t:
            at, _, kind, payload = heapq.heappop(self.queue)
            self.now = at
            if kind == "view":
                i, changes = payload
                if i not in self.crashed:
                    node = self.nodes[i]
                    self._emit(i, node.control({"cmd": "gms_view", "changes": changes}, at)[1])
                    self._timer(i)
                continue
            if payload[0] in self.crashed:
                continue
            if kind == "tick":
                i, due = payload
                node = self.nodes[i]
                if node.next_wakeup() != due:
                    continue              # superseded by a later schedule
                self.scheduled.pop(i, None)
                out = node.tick(at)
            else:
                i, pkt, via = payload
                node = self.nodes[i]
                out = node.receive(wire.decode(pkt), at, via)
            self._emit(i, out)
            self._timer(i)
            if self.after is not None:
                self.after(self)
        self.now = t

    def crash(self, i: int) -> None:
        self.crashed.add(i)

    def gms_remove(self, removed: list[int], spread: float = 0.0) -> None:
        self._gms("remove", removed, spread)

    def gms_add(self, joined: list[int], spread: float = 0.0) -> None:
        self._gms("add", joined, spread)

    def _gms(self, change: str, ids: list[int], spread: float) -> None:
        self.view += 1
        self.changes.append({change: list(ids)})
        for i in sorted(self.nodes):      # a crashed member never sees it (run_until)
            self._push(self.now + self.rng.uniform(0, spread), "view", (i, list(self.changes)))

    def restart(self, i: int) -> None:
        """A crashed member's next process (a fresh core, the next incarnation) starts now."""
        assert i in self.crashed, f"member {i} is running"
        self.crashed.discard(i)
        old = self.nodes[i]
        self.nodes[i] = node = QsmNode(old.cfg.model_copy(update={"incarnation": old.incarnation + 1}), self.now)
        self.scheduled.pop(i, None)
        self._emit(i, node.startup)
        self._timer(i)

    def crash_and_remove(self, who: list[int], detect: float, spread: float = 0.3) -> None:
        """Crash `who` now and, `detect` seconds later, announce the GMS's view without them (`gms_remove`)."""
        for m in who:
            self.crash(m)
        self.run_until(self.now + detect)
        self.gms_remove(list(who), spread=spread)

    def control(self, i: int, active: bool) -> None:
        self._emit(i, self.nodes[i].set_workload(active, self.now))
        self._timer(i)

    def of(self, name: str) -> list[tuple[int, Event]]:
        return [(i, e) for i, e in self.events if e.event == name]
