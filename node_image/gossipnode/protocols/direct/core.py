"""`direct` as a sans-IO core: send each data message to every other member by the configured transport; log
the first receipt of each (origin, seq); nothing else. Over TCP a member whose connection failed (the transport's
failure detector: EOF, RST, timeout, refused connect) is sent nothing more: `direct` does not reconnect."""
from __future__ import annotations

from collections import Counter
from typing import Any

from gossipnode.config import NodeConfig
from gossipnode.protocols.base import BadMessage, Core, Output, seeded_rng
from gossipnode.workload import DataSource, Receipts

from .wire import MIN_DATA_SIZE, Data


class DirectNode(Core):
    name = "direct"

    def __init__(self, cfg: NodeConfig, now: float) -> None:
        p = cfg.protocol
        self.cfg = cfg
        self.me = cfg.id
        self.n = cfg.n
        self.transport = p.transport
        self.group = (p.group or cfg.multicast[0].name) if p.transport == "mcast" else None
        self.rng = seeded_rng("direct", cfg.seed, cfg.id)
        self.receipts = {s: Receipts() for s in cfg.senders}
        self.counters: Counter[str] = Counter()
        self.source = DataSource(cfg.workload, MIN_DATA_SIZE, now, self.rng) \
            if cfg.workload is not None and self.me in cfg.senders else None
        self.connections: dict[int, str] = {}
        self.startup = Output()

    def next_wakeup(self) -> float:
        return self.source.due if self.source is not None else float("inf")

    def tick(self, now: float) -> Output:
        out = Output()
        if self.source is None or now < self.source.due:
            return out
        seq, skipped = self.source.next(now)
        msg = Data(self.me, seq, self.source.payload)
        others = [j for j in range(self.n) if j != self.me]
        if self.transport == "udp":
            out.send.extend((j, msg) for j in others)
        elif self.transport == "tcp":     # no reconnection: a peer whose connection failed is gone for good
            out.stream.extend((j, msg) for j in others if self.connections.get(j) != "failed")
        else:
            assert self.group is not None
            out.mcast.append((self.group, msg))
        self.counters["sent_data"] += 1
        out.log(now, "data_sent", seq=seq, size=self.source.size, fanout=len(others), transport=self.transport)
        if skipped:
            out.log(now, "steps_skipped", timer="workload", missed=skipped)
        return out

    def receive(self, msg: Data, now: float, via: str = "udp") -> Output:
        if not 0 <= msg.sender < self.n or msg.sender == self.me:
            raise BadMessage(f"sender {msg.sender} is not another member (n={self.n}, me={self.me})")
        receipts = self.receipts.get(msg.sender)
        if receipts is None:
            raise BadMessage(f"DATA from {msg.sender}, who is not a sender")
        out = Output()
        if not receipts.add(msg.seq):
            self.counters["data_duplicate"] += 1
            return out
        self.counters["recv_data"] += 1
        out.log(now, "data_received", origin=msg.sender, seq=msg.seq, sender=msg.sender, repair=False, via=via)
        return out

    def on_connection(self, peer: int, event: str, now: float, reason: str = "") -> Output:
        self.connections[peer] = event
        self.counters[f"connection_{event}"] += 1
        return super().on_connection(peer, event, now, reason)

    def snapshot(self) -> dict[str, Any]:
        return {
            "id": self.me,
            "transport": self.transport,
            "R": {str(s): r.r for s, r in self.receipts.items()},
            "connections": {str(p): e for p, e in sorted(self.connections.items())},
            "counters": dict(sorted(self.counters.items())),
        }

CORE = DirectNode
