"""tradvsync as a sans-IO core (seed 001 §2.1, the protocol class of Figure 1).

Sender: each multicast goes to every other member (a unicast copy each, or one IP multicast datagram) and stays
in a fixed-size buffer (`window`, `workload.MessageBuffer`) until every member has acknowledged it. A send
attempt that finds the buffer full is refused (flow control: `send_blocked`), so one slow member caps the
group's throughput. A member without acknowledgement progress for `retransmit_s` is resent what it lacks.
Receiver: delivers each sender's messages in order (`data_received` is the in-order delivery to the
application), acknowledges cumulatively (every `ack_every` messages or `ack_delay_s` after the first
unacknowledged one) and NAKs a gap at most every `nak_s`.
"""
from __future__ import annotations

import math
from collections import Counter
from typing import Any

from gossipnode.config import NodeConfig
from gossipnode.protocols.base import BadMessage, Core, Output, seeded_rng
from gossipnode.workload import DataSource, MessageBuffer, Receipts, serve_nak

from .wire import MIN_DATA_SIZE, Ack, Data, Nak

INF = math.inf


class _Inbound:
    """One sender's stream at a receiver."""

    def __init__(self) -> None:
        self.receipts = Receipts()
        self.delivered = 0
        self.acked = 0
        self.ack_due = INF
        self.nak_at = -INF
        self.repaired: set[int] = set()


class TradVsyncNode(Core):
    name = "tradvsync"

    def __init__(self, cfg: NodeConfig, now: float) -> None:
        p = cfg.protocol
        self.p = p
        self.cfg = cfg
        self.me = cfg.id
        self.n = cfg.n
        self.others = [m.id for m in cfg.members if m.id != self.me]
        self.group = (p.group or cfg.multicast[0].name) if p.transport == "mcast" else None
        self.rng = seeded_rng("tradvsync", cfg.seed, cfg.id)
        self.counters: Counter[str] = Counter()
        self.inbound = {s: _Inbound() for s in cfg.senders if s != self.me}
        self.source = DataSource(cfg.workload, MIN_DATA_SIZE, now, self.rng) \
            if cfg.workload is not None and self.me in cfg.senders else None
        self.buffer = MessageBuffer([self.me])
        self.acks = {j: 0 for j in self.others}
        self.progress_at = {j: now for j in self.others}
        self.stable = 0
        self.check_at = now + p.retransmit_s / 2 if self.source is not None else INF
        self.startup = Output()

    # ---- timers ----------------------------------------------------------------------------------------------

    def next_wakeup(self) -> float:
        due = min([self.check_at, *(s.ack_due for s in self.inbound.values())])
        return min(due, self.source.due) if self.source is not None else due

    def tick(self, now: float) -> Output:
        out = Output()
        if self.source is not None and now >= self.source.due:
            self._send(now, out)
        if now >= self.check_at:
            self._retransmit(now, out)
            self.check_at = now + self.p.retransmit_s / 2
        for origin, s in self.inbound.items():
            if now >= s.ack_due:
                self._ack(origin, s, out)
        return out

    def _send(self, now: float, out: Output) -> None:
        assert self.source is not None
        if self.source.seq - self.stable >= self.p.window:        # the buffer is full: flow control
            skipped = self.source.clock.advance(now)
            self.counters["send_blocked"] += 1 + skipped
            out.log(now, "send_blocked", attempts=1 + skipped, buffered=self.buffer.count, stable=self.stable,
                    slowest=min(self.acks, key=self.acks.get) if self.acks else None)
            return
        seq, skipped = self.source.next(now)
        msg = Data(self.me, seq, self.source.payload)
        self.buffer.put(self.me, seq, self.source.payload)
        if self.group is not None:
            out.mcast.append((self.group, msg))
        else:
            out.send.extend((j, msg) for j in self.others)
        self.counters["sent_data"] += 1
        out.log(now, "data_sent", seq=seq, size=self.source.size, buffered=self.buffer.count)
        if skipped:
            out.log(now, "steps_skipped", timer="workload", missed=skipped)
        if not self.others:
            self.stable = seq
            self.buffer.discard_through(self.me, seq)

    def _retransmit(self, now: float, out: Output) -> None:
        if self.source is None:
            return
        for j in self.others:
            if self.acks[j] < self.source.seq and now - self.progress_at[j] >= self.p.retransmit_s:
                found = serve_nak(self.buffer, self.me, ((self.acks[j] + 1, self.source.seq),),
                                  self.p.max_retransmit)
                out.send.extend((j, Data(self.me, seq, payload, True)) for seq, payload in found)
                self.counters["sent_retrans"] += len(found)
                self.progress_at[j] = now

    def _ack(self, origin: int, s: _Inbound, out: Output) -> None:
        s.ack_due = INF
        if s.delivered > s.acked:
            s.acked = s.delivered
            out.send.append((origin, Ack(self.me, origin, s.acked)))
            self.counters["sent_ack"] += 1

    # ---- messages --------------------------------------------------------------------------------------------

    def receive(self, msg: Data | Ack | Nak, now: float, via: str = "udp") -> Output:
        if not 0 <= msg.sender < self.n or msg.sender == self.me:
            raise BadMessage(f"sender {msg.sender} is not another member (n={self.n}, me={self.me})")
        out = Output()
        if isinstance(msg, Data):
            self._data(msg, now, via, out)
        elif isinstance(msg, Ack):
            if msg.origin != self.me or self.source is None or msg.upto > self.source.seq:
                raise BadMessage(f"ACK of {msg.origin}/{msg.upto}: not a multicast of this member")
            self._acked(msg.sender, msg.upto, now, out)
        else:
            if msg.origin != self.me or self.source is None:
                raise BadMessage(f"NAK for {msg.origin}: not this member's multicasts")
            found = serve_nak(self.buffer, self.me, ((msg.first, msg.last),), self.p.max_retransmit)
            out.send.extend((msg.sender, Data(self.me, seq, payload, True)) for seq, payload in found)
            self.counters["sent_retrans"] += len(found)
        return out

    def _data(self, msg: Data, now: float, via: str, out: Output) -> None:
        s = self.inbound.get(msg.sender)
        if s is None:
            raise BadMessage(f"DATA from {msg.sender}, who is not a sender")
        if not s.receipts.add(msg.seq):
            self.counters["duplicate"] += 1
            if msg.seq <= s.acked:          # our ACK was lost or is late: say it again
                s.ack_due = min(s.ack_due, now)
            return
        self.counters["recv_retrans" if msg.retrans else "recv_data"] += 1
        if msg.retrans:
            s.repaired.add(msg.seq)
        r = s.receipts.r
        for seq in range(s.delivered + 1, r + 1):   # in-order delivery to the application
            out.log(now, "data_received", origin=msg.sender, seq=seq, sender=msg.sender,
                    repair=seq in s.repaired, via=via)
            s.repaired.discard(seq)
        s.delivered = r
        if s.delivered - s.acked >= self.p.ack_every:
            self._ack(msg.sender, s, out)
        elif s.delivered > s.acked and s.ack_due == INF:
            s.ack_due = now + self.p.ack_delay_s
        if s.receipts.ahead and now - s.nak_at >= self.p.nak_s:
            first, last = s.receipts.missing(1)[0]
            out.send.append((msg.sender, Nak(self.me, msg.sender, first, last)))
            self.counters["sent_nak"] += 1
            s.nak_at = now

    def _acked(self, j: int, upto: int, now: float, out: Output) -> None:
        if upto <= self.acks[j]:
            return
        self.acks[j] = upto
        self.progress_at[j] = now
        stable = min(self.acks.values())
        if stable > self.stable:
            self.buffer.discard_through(self.me, stable)
            self.stable = stable

    def snapshot(self) -> dict[str, Any]:
        return {
            "id": self.me,
            "stable": self.stable,
            "buffered": self.buffer.count,
            "acks": {str(j): a for j, a in self.acks.items()} if self.source is not None else {},
            "delivered": {str(o): s.delivered for o, s in self.inbound.items()},
            "counters": dict(sorted(self.counters.items())),
        }


CORE = TradVsyncNode
