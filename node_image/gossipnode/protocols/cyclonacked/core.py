"""CyclonAcked (seed 003 §5): Cyclon (`cyclon/core.py`) whose gossip is acknowledged. Every DATA copy a member
receives is answered with ACK(origin, seq) to the member it came from; a gossip target whose ACK has not arrived
`ack_timeout_s` after the DATA was sent is taken for failed and removed from the partial view (event
`view_changed` with reason `no_ack`). Nothing is resent: the failure detector only cleans the view for later
broadcasts, as in the paper."""
from __future__ import annotations

import heapq
from typing import Any

from gossipnode.protocols.base import Output

from ..cyclon.core import CyclonNode
from . import wire as acked_wire


class CyclonAckedNode(CyclonNode):
    name = "cyclonacked"
    W = acked_wire

    def __init__(self, cfg, now: float) -> None:
        self.ack_timeout = cfg.protocol.ack_timeout_s
        self.waiting: dict[tuple[int, int, int], float] = {}   # (peer, origin, seq) -> deadline
        self.deadlines: list[tuple[float, int, int, int]] = []
        super().__init__(cfg, now)

    def _send_data(self, out: Output, now: float, targets: list[int], msg) -> None:
        super()._send_data(out, now, targets, msg)
        for q in targets:
            key = (q, msg.origin, msg.seq)
            self.waiting[key] = now + self.ack_timeout
            heapq.heappush(self.deadlines, (now + self.ack_timeout, *key))

    def _on_data(self, msg, now: float, out: Output) -> None:
        out.send.append((msg.sender, self.W.Ack(self.me, msg.origin, msg.seq)))
        super()._on_data(msg, now, out)

    def _receive_other(self, msg, now: float, out: Output) -> None:
        if type(msg) is not self.W.Ack:
            super()._receive_other(msg, now, out)
        self.waiting.pop((msg.sender, msg.origin, msg.seq), None)

    def next_wakeup(self) -> float:
        due = self.deadlines[0][0] if self.deadlines else float("inf")
        return min(super().next_wakeup(), due)

    def tick(self, now: float) -> Output:
        out = Output()
        while self.deadlines and self.deadlines[0][0] <= now:
            _, peer, origin, seq = heapq.heappop(self.deadlines)
            if self.waiting.pop((peer, origin, seq), None) is None:
                continue                    # acknowledged
            self.counters["ack_timeouts"] += 1
            if peer in self.view:
                self._remove(out, now, peer, "no_ack")
        return out.merge(super().tick(now)) if now >= super().next_wakeup() else out

    def snapshot(self) -> dict[str, Any]:
        return {**super().snapshot(), "awaiting_ack": len(self.waiting)}


CORE = CyclonAckedNode
