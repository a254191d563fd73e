"""pbcast (Bimodal Multicast) as a sans-IO core: the workload's senders publish through the `layer.Pbcast`
engine; every member logs each message's first arrival (`data_received` with its round of arrival and whether it
came from the first phase or from repair) and, with `fifo`, its in-order delivery to the application
(`data_delivered`)."""
from __future__ import annotations

import math
from typing import Any

from gossipnode.config import NodeConfig
from gossipnode.protocols.base import BadMessage, Core, Output, seeded_rng
from gossipnode.workload import DataSource

from .layer import Pbcast
from .wire import MIN_DATA_SIZE, Data, Digest


class PbcastNode(Core):
    name = "pbcast"

    def __init__(self, cfg: NodeConfig, now: float) -> None:
        p = cfg.protocol
        self.cfg = cfg
        self.me = cfg.id
        self.n = cfg.n
        self.rng = seeded_rng("pbcast", cfg.seed, cfg.id)
        group = (p.group or cfg.multicast[0].name) if p.first_phase == "mcast" else None
        self.layer = Pbcast(self.me, [m.id for m in cfg.members], list(cfg.senders), p, group, self.rng, now)
        self.fifo = p.fifo
        self.delivered = {s: 0 for s in cfg.senders}  # fifo: delivered to the application through this seq
        self.source = DataSource(cfg.workload, MIN_DATA_SIZE, now, self.rng) \
            if cfg.workload is not None and self.me in cfg.senders else None
        # Figure 4 counts overhead "per multicast": the layer's counters as the multicast period opens and closes
        # (every member knows the workload's window), so the analysis counts what the period cost
        wl = cfg.workload
        self.windows = [] if wl is None or wl.stop_s is None else [(now + wl.start_s, "start"),
                                                                   (now + wl.stop_s, "stop")]
        self.startup = Output()
        self.startup.log(now, "pbcast_started", gc_rounds=self.layer.gc_rounds, round_s=p.round_s,
                         fanout=p.fanout, mode=p.mode, first_phase=p.first_phase)

    def next_wakeup(self) -> float:
        due = min(self.layer.next_wakeup(), self.windows[0][0] if self.windows else math.inf)
        return min(due, self.source.due) if self.source is not None else due

    def tick(self, now: float) -> Output:
        out = Output()
        while self.windows and now >= self.windows[0][0]:
            _, edge = self.windows.pop(0)
            out.log(now, "pbcast_counters", window=edge, counters=dict(sorted(self.layer.counters.items())))
        if self.source is not None and now >= self.source.due:
            seq, skipped = self.source.next(now)
            self.layer.publish(self.me, seq, self.source.payload, out)
            self.delivered[self.me] = seq
            out.log(now, "data_sent", seq=seq, size=self.source.size, phase=self.cfg.protocol.first_phase,
                    round=self.layer.round)
            if skipped:
                out.log(now, "steps_skipped", timer="workload", missed=skipped)
        if now >= self.layer.next_wakeup():
            skipped, discarded = self.layer.tick(now, out)
            if skipped:
                out.log(now, "steps_skipped", timer="round", missed=skipped)
            if discarded:
                out.log(now, "gc", discarded=discarded, buffer_size=len(self.layer.buffer), round=self.layer.round)
        return out

    def receive(self, msg: Data | Digest, now: float, via: str = "udp") -> Output:
        if not 0 <= msg.sender < self.n or msg.sender == self.me:
            raise BadMessage(f"sender {msg.sender} is not another member (n={self.n}, me={self.me})")
        out = Output()
        got = self.layer.receive(msg, out)
        if got is not None:
            out.log(now, "data_received", origin=got.origin, seq=got.seq, sender=got.sender,
                    repair=got.phase == "repair", phase=got.phase, round=got.round, via=via)
            if self.fifo:
                upto = self.layer.receipts[got.origin].r
                for seq in range(self.delivered[got.origin] + 1, upto + 1):
                    out.log(now, "data_delivered", origin=got.origin, seq=seq)
                self.delivered[got.origin] = max(self.delivered[got.origin], upto)
        return out

    def snapshot(self) -> dict[str, Any]:
        return {
            "id": self.me,
            "round": self.layer.round,
            "gc_rounds": self.layer.gc_rounds,
            "buffer": len(self.layer.buffer),
            "R": {str(s): r.r for s, r in self.layer.receipts.items()},
            "counters": dict(sorted(self.layer.counters.items())),
        }


CORE = PbcastNode
