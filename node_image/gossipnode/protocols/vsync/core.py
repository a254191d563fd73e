"""vsync: virtual synchrony over pbcast with a leader committee (seed 001 §§4-5, Figures 5, 7, 8), sans-IO.

Roles: the committee is members 0..k-1, member 0 its leader (no re-election: a committee member that stops
answering is dropped at the next view change like any member; the leader's failure is not tolerated).

- Sending (Figure 7): the application's multicast enters the sender's constant-size buffer (`sender_buffer`; a
  send attempt finding it full is refused: `send_blocked`) and goes to the leader as a Gseq Req (resent after
  `gseq_timeout_s`). The leader gives it the next global sequence number (gseq); with k > 1 it first sends it to
  the other committee members (ORDER) and waits for all their ORDER_ACKs ("attains stability"). The Gseq Ack
  tells the sender its gseq and the view it will be delivered in; the sender then disseminates it with the Pbcast
  layer (`pbcast.layer.Pbcast`, stream 0, seq = gseq). The committee keeps every item for repairs.
- Delivery: the Vsync layer delivers items strictly in gseq order (`data_received` for a multicast, with its gseq
  and view; `pbcast_received` when the Pbcast layer hands an item up, out of order or not).
- Repair sub-protocol (§5.2): a member that has not delivered an in-sequence item for its timeout sends a
  REPAIR_REQ (its next gseq) to a random committee member, which answers with what it holds from there and its
  own high-water mark. The timeout is twice the recent mean gap between arrivals, clamped to [repair_min_s,
  repair_max_s] (10 ms .. 1 s): members of an idle group probe the committee about once a second.
- View changes (Figure 8): every `view_period_s` the leader disseminates a Prefreshview (Pbcast stream 1,
  seq = the next view number) and holds new Gseq Reqs. Members answer with an AckPrefreshview carrying their
  delivered gseq, each deferred by a random time up to `ack_defer_s`; a member's repair sub-protocol is blocked
  from the Prefreshview until the Newview arrives. Once every member of the view has acknowledged (`ack_wait:
  all`, the default), or after `ack_timeout_s` (always, with `ack_wait: timeout`), the leader keeps the members that
  acknowledged and are at most `max_lag` gseqs behind it, gives the Newview the next gseq (so views are totally
  ordered with the multicasts) and disseminates it by Pbcast; the held requests are then ordered. A member
  installs the view when it delivers the Newview (`view_installed`); a member left out logs `dropped` and stops.
  Not implemented: the committee's own membership round, state transfer, GC of the committee's items at views.
"""
from __future__ import annotations

import math
from collections import Counter
from typing import Any

from gossipnode.config import NodeConfig
from gossipnode.protocols.base import BadMessage, Core, Output, seeded_rng
from gossipnode.protocols.pbcast.layer import Pbcast
from gossipnode.workload import DataSource

from .wire import (MIN_DATA_SIZE, STREAM_ORDERED, STREAM_VIEW, AckPrefresh, DataItem, DecodeError, GseqAck, GseqReq,
                   Order, OrderAck, PData, PDigest, PrefreshItem, RepairItems, RepairReq, ViewItem, decode_item,
                   encode_item)

INF = math.inf
REPAIR_BYTES = 60000  # payload bytes one REPAIR_ITEMS may carry


class VsyncNode(Core):
    name = "vsync"

    def __init__(self, cfg: NodeConfig, now: float) -> None:
        p = cfg.protocol
        self.p = p
        self.cfg = cfg
        self.me = cfg.id
        self.n = cfg.n
        self.rng = seeded_rng("vsync", cfg.seed, cfg.id)
        self.committee = list(range(p.k))
        self.leader = 0
        self.in_committee = self.me in self.committee
        self.is_leader = self.me == self.leader
        self.view = 0
        self.view_members = [m.id for m in cfg.members]
        group = (p.group or cfg.multicast[0].name) if p.first_phase == "mcast" else None
        self.layer = Pbcast(self.me, self.view_members, [STREAM_ORDERED, STREAM_VIEW], p, group, self.rng, now,
                            PData, PDigest)
        self.counters: Counter[str] = Counter()
        self.active = True
        # the Vsync layer: items by gseq (members: until delivered; the committee: all), delivery in order
        self.items: dict[int, bytes] = {}
        self.next = 1
        self.high = 0
        self.repaired: set[int] = set()
        self.delivered_log: list[tuple[int, str, int, int]] = []  # (gseq, kind, origin or view, lseq): for tests
        # the repair sub-protocol
        self.gap_ewma = p.repair_max_s
        self.last_arrival = now
        self.repair_at = INF if self.in_committee else now + p.repair_max_s
        self.blocked_until = -INF
        self.ack_due: tuple[float, int] | None = None
        self.acked_view = 0
        # the sender
        self.source = DataSource(cfg.workload, MIN_DATA_SIZE, now, self.rng) \
            if cfg.workload is not None and self.me in cfg.senders else None
        self.pending: dict[int, list] = {}        # lseq -> [payload, first request ts, last request ts]
        self.req_ts: dict[int, float] = {}        # lseq -> Gseq Req time, until delivered here
        # the leader
        self.next_gseq = 1
        self.assigned: dict[tuple[int, int], int] = {}
        self.ordering: dict[int, dict] = {}       # gseq -> {waiting, sent, key}: ORDERs not yet acknowledged
        self.queued: list[tuple[int, int, bytes]] = []
        self.changing = False
        self.vc_view = 0
        self.vc_started = 0.0
        self.vc_deadline = INF
        self.acks: dict[int, int] = {}
        self.view_at = now + p.view_period_s if self.is_leader else INF
        self.startup = Output()
        self.startup.log(now, "view_installed", view=0, members=len(self.view_members), dropped=[],
                         committee=self.committee, gc_rounds=self.layer.gc_rounds)

    # ---- helpers ---------------------------------------------------------------------------------------------

    def _timeout(self, now: float) -> float:
        gap = max(self.gap_ewma, now - self.last_arrival)
        return min(self.p.repair_max_s, max(self.p.repair_min_s, 2 * gap))

    def _to_leader(self, msg: Any, now: float, out: Output) -> None:
        if self.is_leader:
            out.merge(self._handle(msg, now, "local"))
        else:
            out.send.append((self.leader, msg))

    # ---- timers ----------------------------------------------------------------------------------------------

    def next_wakeup(self) -> float:
        if not self.active:
            return INF
        due = [self.layer.next_wakeup(), self.repair_at, self.view_at, self.vc_deadline]
        if self.ack_due is not None:
            due.append(self.ack_due[0])
        if self.source is not None:
            due.append(self.source.due)
        if self.pending:
            due.append(min(v[2] for v in self.pending.values()) + self.p.gseq_timeout_s)
        if self.ordering:
            due.append(min(o["sent"] for o in self.ordering.values()) + self.p.gseq_timeout_s)
        return min(due)

    def tick(self, now: float) -> Output:
        out = Output()
        if not self.active:
            return out
        if now >= self.layer.next_wakeup():
            skipped, _gc = self.layer.tick(now, out)
            if skipped:
                out.log(now, "steps_skipped", timer="round", missed=skipped)
        if self.source is not None and now >= self.source.due:
            self._send(now, out)
        for lseq, entry in list(self.pending.items()):
            if now >= entry[2] + self.p.gseq_timeout_s:
                entry[2] = now
                self.counters["gseq_req_resent"] += 1
                self._to_leader(GseqReq(self.me, lseq, entry[0]), now, out)
        for gseq, o in self.ordering.items():
            if now >= o["sent"] + self.p.gseq_timeout_s:
                o["sent"] = now
                out.send.extend((c, Order(self.me, gseq, self.items[gseq])) for c in o["waiting"])
        if now >= self.repair_at:
            self._repair_timer(now, out)
        if self.ack_due is not None and now >= self.ack_due[0]:
            view = self.ack_due[1]
            self.ack_due = None
            self.acked_view = view
            self._to_leader(AckPrefresh(self.me, view, self.next - 1), now, out)
        if now >= self.view_at:
            self._start_view_change(now, out)
        if now >= self.vc_deadline:
            self._decide_view(now, out)
        return out

    def _send(self, now: float, out: Output) -> None:
        assert self.source is not None
        if len(self.pending) >= self.p.sender_buffer:
            skipped = self.source.clock.advance(now)
            self.counters["send_blocked"] += 1 + skipped
            out.log(now, "send_blocked", attempts=1 + skipped, pending=len(self.pending))
            return
        lseq, skipped = self.source.next(now)
        payload = self.source.payload
        self.pending[lseq] = [payload, now, now]
        self.req_ts[lseq] = now
        out.log(now, "data_sent", seq=lseq, size=self.source.size, pending=len(self.pending))
        if skipped:
            out.log(now, "steps_skipped", timer="workload", missed=skipped)
        self._to_leader(GseqReq(self.me, lseq, payload), now, out)

    def _repair_timer(self, now: float, out: Output) -> None:
        if now < self.blocked_until:
            self.repair_at = self.blocked_until
            return
        peers = [c for c in self.committee if c in self.view_members and c != self.me]
        if peers:
            target = self.rng.choice(peers)
            out.send.append((target, RepairReq(self.me, self.next, self.p.repair_batch)))
            self.counters["repair_req"] += 1
        self.repair_at = now + self._timeout(now)

    # ---- messages --------------------------------------------------------------------------------------------

    def receive(self, msg: Any, now: float, via: str = "udp") -> Output:
        if not 0 <= msg.sender < self.n or msg.sender == self.me:
            raise BadMessage(f"sender {msg.sender} is not another member (n={self.n}, me={self.me})")
        if not self.active:
            return Output()
        return self._handle(msg, now, via)

    def _handle(self, msg: Any, now: float, via: str) -> Output:
        out = Output()
        if isinstance(msg, (PData, PDigest)):
            if isinstance(msg, PData):
                try:
                    item = decode_item(msg.payload)
                except DecodeError as exc:
                    raise BadMessage(f"P_DATA {msg.origin}/{msg.seq}: {exc}") from None
                if (msg.origin == STREAM_VIEW) != isinstance(item, PrefreshItem):
                    raise BadMessage(f"stream {msg.origin} carries a {type(item).__name__}")
            got = self.layer.receive(msg, out)
            if got is None:
                return out
            if got.origin == STREAM_ORDERED:
                out.log(now, "pbcast_received", gseq=got.seq, phase=got.phase, round=got.round)
                self._item(got.seq, got.payload, now, out, repaired=False)
            else:
                self._prefresh(decode_item(got.payload), now)
        elif isinstance(msg, GseqReq):
            if not self.is_leader:
                raise BadMessage(f"a Gseq Req from {msg.sender}, but {self.me} is not the leader")
            if msg.sender != self.me and msg.sender not in self.cfg.senders:
                raise BadMessage(f"a Gseq Req from {msg.sender}, who is not a sender")
            self._order_request(msg.sender, msg.lseq, msg.payload, now, out)
        elif isinstance(msg, GseqAck):
            if msg.sender != self.leader:
                raise BadMessage(f"a Gseq Ack from {msg.sender}, not the leader")
            self._gseq_acked(msg.lseq, msg.gseq, msg.view, now, out)
        elif isinstance(msg, Order):
            if msg.sender != self.leader or not self.in_committee:
                raise BadMessage(f"an ORDER from {msg.sender} to {self.me}: not leader to committee")
            self._item(msg.gseq, msg.item, now, out, repaired=False)
            out.send.append((self.leader, OrderAck(self.me, msg.gseq)))
        elif isinstance(msg, OrderAck):
            if not self.is_leader:
                raise BadMessage(f"an ORDER_ACK to {self.me}, not the leader")
            self._order_acked(msg.sender, msg.gseq, now, out)
        elif isinstance(msg, RepairReq):
            if not self.in_committee:
                raise BadMessage(f"a REPAIR_REQ to {self.me}, not a committee member")
            self._serve_repair(msg, out)
        elif isinstance(msg, RepairItems):
            self.high = max(self.high, msg.high)
            for gseq, data in msg.items:
                self._item(gseq, data, now, out, repaired=True)
            if self.next <= self.high and not self.in_committee:
                self.repair_at = min(self.repair_at, now + self.p.repair_min_s)
        elif isinstance(msg, AckPrefresh):
            if not self.is_leader:
                raise BadMessage(f"an AckPrefreshview to {self.me}, not the leader")
            if self.changing and msg.view == self.vc_view:
                self.acks[msg.sender] = msg.delivered
                if self.p.ack_wait == "all" and all(j in self.acks for j in self.view_members):
                    self._decide_view(now, out)
        return out

    # ---- the Vsync layer: items and in-order delivery --------------------------------------------------------

    def _item(self, gseq: int, data: bytes, now: float, out: Output, repaired: bool) -> None:
        if gseq < self.next or gseq in self.items:
            self.counters["duplicate_item"] += 1
            return
        try:
            item = decode_item(data)
        except DecodeError as exc:
            raise BadMessage(f"item {gseq}: {exc}") from None
        if isinstance(item, PrefreshItem):
            raise BadMessage(f"item {gseq} is a Prefreshview in the ordered stream")
        self.items[gseq] = data
        self.high = max(self.high, gseq)
        if repaired:
            self.repaired.add(gseq)
            self.counters["repaired_items"] += 1
        self.gap_ewma = 0.8 * self.gap_ewma + 0.2 * max(0.0, now - self.last_arrival)
        self.last_arrival = now
        if isinstance(item, ViewItem) and item.view > self.view:
            self.blocked_until = -INF     # the Newview is here: repairs may resume
        if gseq > self.next and not self.in_committee:
            self.repair_at = min(self.repair_at, now + self._timeout(now))
        self._deliver_ready(now, out)

    def _deliver_ready(self, now: float, out: Output) -> None:
        while self.active and self.next in self.items:
            gseq = self.next
            data = self.items[gseq] if self.in_committee else self.items.pop(gseq)
            item = decode_item(data)
            self.next += 1
            repaired = gseq in self.repaired
            self.repaired.discard(gseq)
            if isinstance(item, DataItem):
                self.delivered_log.append((gseq, "data", item.origin, item.lseq))
                if item.origin == self.me:
                    sent = self.req_ts.pop(item.lseq, None)
                    out.log(now, "own_delivered", seq=item.lseq, gseq=gseq, view=self.view,
                            latency_s=None if sent is None else now - sent)
                else:
                    out.log(now, "data_received", origin=item.origin, seq=item.lseq, sender=item.origin,
                            repair=repaired, gseq=gseq, view=self.view)
            else:
                self.delivered_log.append((gseq, "view", item.view, 0))
                self._install(item, gseq, now, out)
            if not self.in_committee:
                self.repair_at = now + self._timeout(now)

    def _install(self, item: ViewItem, gseq: int, now: float, out: Output) -> None:
        dropped = sorted(set(self.view_members) - set(item.members))
        self.view = item.view
        self.view_members = list(item.members)
        self.layer.set_members(self.view_members)
        self.blocked_until = -INF
        fields: dict[str, Any] = {"view": item.view, "gseq": gseq, "members": len(item.members), "dropped": dropped}
        if self.is_leader:
            fields["duration_s"] = now - self.vc_started
        out.log(now, "view_installed", **fields)
        if self.me not in item.members:
            out.log(now, "dropped", view=item.view, delivered=self.next - 1)
            self.active = False

    def _prefresh(self, item: PrefreshItem, now: float) -> None:
        if item.view <= max(self.view, self.acked_view) or self.is_leader:
            return
        self.high = max(self.high, item.high)
        self.blocked_until = now + 2 * self.p.ack_timeout_s
        self.ack_due = (now + self.rng.uniform(0, self.p.ack_defer_s), item.view)

    # ---- the sender ------------------------------------------------------------------------------------------

    def _gseq_acked(self, lseq: int, gseq: int, view: int, now: float, out: Output) -> None:
        entry = self.pending.pop(lseq, None)
        if entry is None:
            self.counters["gseq_ack_duplicate"] += 1
            return
        out.log(now, "gseq_acked", seq=lseq, gseq=gseq, view=view, latency_s=now - entry[1])
        data = encode_item(DataItem(self.me, lseq, entry[0]))
        if not self.layer.has(STREAM_ORDERED, gseq):
            self.layer.publish(STREAM_ORDERED, gseq, data, out)
        self._item(gseq, data, now, out, repaired=False)

    # ---- the leader ------------------------------------------------------------------------------------------

    def _order_request(self, sender: int, lseq: int, payload: bytes, now: float, out: Output) -> None:
        if sender not in self.view_members:
            self.counters["gseq_req_outside_view"] += 1
            return
        key = (sender, lseq)
        if key in self.assigned:
            gseq = self.assigned[key]
            if gseq not in self.ordering:
                self._ack_sender(key, gseq, now, out)
            return
        if self.changing:                 # held until the view change ends (§5.2)
            if all((s, q) != key for s, q, _p in self.queued):
                self.queued.append((sender, lseq, payload))
            return
        gseq = self.next_gseq
        self.next_gseq += 1
        self.assigned[key] = gseq
        data = encode_item(DataItem(sender, lseq, payload))
        self._stabilise(gseq, data, key, now, out)

    def _stabilise(self, gseq: int, data: bytes, key: tuple[int, int] | None, now: float, out: Output) -> None:
        """Give `gseq` to the committee (ORDER) before acknowledging the sender (or disseminating a Newview)."""
        self._item(gseq, data, now, out, repaired=False)
        others = [c for c in self.committee if c != self.me and c in self.view_members]
        if others:
            self.ordering[gseq] = {"waiting": set(others), "sent": now, "key": key}
            out.send.extend((c, Order(self.me, gseq, data)) for c in others)
        else:
            self._stable(gseq, key, now, out)

    def _order_acked(self, member: int, gseq: int, now: float, out: Output) -> None:
        o = self.ordering.get(gseq)
        if o is None:
            return
        o["waiting"].discard(member)
        if not o["waiting"]:
            del self.ordering[gseq]
            self._stable(gseq, o["key"], now, out)

    def _stable(self, gseq: int, key: tuple[int, int] | None, now: float, out: Output) -> None:
        if key is not None:
            self._ack_sender(key, gseq, now, out)
        else:                             # a Newview: the leader disseminates it
            self.layer.publish(STREAM_ORDERED, gseq, self.items[gseq], out)

    def _ack_sender(self, key: tuple[int, int], gseq: int, now: float, out: Output) -> None:
        sender, lseq = key
        if sender == self.me:
            self._gseq_acked(lseq, gseq, self.view, now, out)
        else:
            out.send.append((sender, GseqAck(self.me, lseq, gseq, self.view)))

    def _serve_repair(self, req: RepairReq, out: Output) -> None:
        items, size = [], 0
        for gseq in range(req.next, req.next + min(req.count, self.p.repair_batch)):
            data = self.items.get(gseq)
            if data is None or size + len(data) + 6 > REPAIR_BYTES:
                break
            items.append((gseq, data))
            size += len(data) + 6
        out.send.append((req.sender, RepairItems(self.me, self.next - 1, tuple(items))))
        self.counters["repair_items_sent"] += len(items)

    def _start_view_change(self, now: float, out: Output) -> None:
        self.view_at = INF
        self.changing = True
        self.vc_view = self.view + 1
        self.vc_started = now
        self.vc_deadline = now + self.p.ack_timeout_s
        self.acks = {self.me: self.next - 1}
        high = self.next_gseq - 1
        self.layer.publish(STREAM_VIEW, self.vc_view, encode_item(PrefreshItem(self.vc_view, high)), out)
        out.log(now, "view_change_started", view=self.vc_view, high=high, members=len(self.view_members))

    def _decide_view(self, now: float, out: Output) -> None:
        self.vc_deadline = INF
        floor = self.next_gseq - 1 - self.p.max_lag
        survivors = sorted(j for j in self.view_members if j in self.acks and self.acks[j] >= floor)
        dropped = sorted(set(self.view_members) - set(survivors))
        gseq = self.next_gseq
        self.next_gseq += 1
        out.log(now, "view_change_decided", view=self.vc_view, gseq=gseq, members=len(survivors), dropped=dropped,
                acks=len(self.acks) - 1, duration_s=now - self.vc_started)
        for o in self.ordering.values():         # dropped committee members are not waited for
            o["waiting"] -= set(dropped)
        self.changing = False
        self.view_at = self.vc_started + self.p.view_period_s
        self._stabilise(gseq, encode_item(ViewItem(self.vc_view, tuple(survivors))), None, now, out)
        for g, o in list(self.ordering.items()):
            if not o["waiting"]:
                del self.ordering[g]
                self._stable(g, o["key"], now, out)
        queued, self.queued = self.queued, []
        for sender, lseq, payload in queued:
            self._order_request(sender, lseq, payload, now, out)

    def snapshot(self) -> dict[str, Any]:
        return {
            "id": self.me, "view": self.view, "members": len(self.view_members), "active": self.active,
            "next": self.next, "high": self.high, "pending": len(self.pending), "round": self.layer.round,
            "counters": dict(sorted((self.counters + self.layer.counters).items())),
        }


CORE = VsyncNode
