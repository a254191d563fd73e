"""vsync: virtual synchrony over pbcast with a leader committee (seed 001 §§5-6, Figures 5, 7, 8), sans-IO.

This module is a member's side (every member: sending, in-order delivery, the repair sub-protocol, answering view
changes, being dropped and rejoining); `committee.py` is the committee's and the leader's (ordering, stability,
the committee round, re-election, view changes, garbage collection, admitting joiners). docs/pbcast.md has every
rule with the paper's sentence.

- Roles: the committee is a list in rank order, committee[0] the leader; at the start members 0..k-1. Every
  Newview names the committee and the leader's epoch; a leader that fails is replaced by the next live committee
  member (committee.py).
- Sending (Figure 7): the application's multicast enters the sender's constant-size buffer (`sender_buffer`, full:
  `send_blocked`) and goes to the leader as a Gseq Req (resent after `gseq_timeout_s`; from the second resend on,
  in turn to the other committee members, which answer with a LEADER notice naming the leader). The Gseq Ack
  tells the sender its gseq and the view it is delivered in; the sender disseminates it with the Pbcast layer
  (stream 0, seq = gseq), held back while a view change blocks dissemination (`vc_block: all`).
- Delivery: strictly in gseq order (`data_received` with its gseq and view; `pbcast_received` when the Pbcast
  layer hands an item up). A committee member delivers an item it holds from an ORDER only once the leader's
  stable mark covers it; items from pbcast or repair were stable before anyone disseminated them.
- Repair sub-protocol (§5.2): a member that has not delivered an in-sequence item for its timeout asks a random
  committee member (REPAIR_REQ) for what follows its next gseq. Timeout: twice the recent mean gap between
  arrivals, clamped to [repair_min_s, repair_max_s] (10 ms .. 1 s).
- View changes (Figure 8): a Prefreshview (Pbcast stream 1, or by unicast PREFRESH when the leader retransmits it)
  blocks the repair sub-protocol and, with `vc_block: all`, the dissemination of the gseqs ordered before it,
  until the Newview arrives (or 2 x ack_timeout_s); the member acknowledges it (AckPrefreshview, its delivered
  gseq) after a random delay up to `ack_defer_s`, at once when it comes by unicast. A member installs a view when
  it delivers the Newview (`view_installed`).
- Dropped (left out of a Newview it delivers, or told EXCLUDED by a committee member): `dropped`; with `rejoin`
  (default) it sends JOIN every `join_retry_s` and, admitted at a view change, gets a state transfer (STATE: the
  Newview that admits it and its gseq): it installs that view, skips to its gseq (`rejoined`, the skipped gseqs
  being the transferred state) and delivers in order from there. Its unacknowledged multicasts are abandoned
  (`send_abandoned`). Without `rejoin` it stops, as before.
"""
from __future__ import annotations

import math
from collections import Counter
from typing import Any

from gossipnode.config import NodeConfig
from gossipnode.protocols.base import BadMessage, Core, Output, seeded_rng
from gossipnode.protocols.pbcast.layer import Pbcast
from gossipnode.workload import DataSource

from .committee import CommitteeRole
from .wire import (MIN_DATA_SIZE, STREAM_ORDERED, STREAM_VIEW, AckPrefresh, CAck, CProbe, DataItem, DecodeError,
                   Excluded, GseqAck, GseqReq, Heartbeat, Join, Leader, Order, OrderAck, Ordered, PData, PDigest,
                   Prefresh, PrefreshItem, RepairItems, RepairReq, State, ViewItem, decode_item, encode_item)

INF = math.inf


class VsyncNode(CommitteeRole, Core):
    name = "vsync"

    def __init__(self, cfg: NodeConfig, now: float) -> None:
        p = cfg.protocol
        self.p = p
        self.cfg = cfg
        self.me = cfg.id
        self.n = cfg.n
        self.rng = seeded_rng("vsync", cfg.seed, cfg.id)
        self.view = 0
        self.view_members = [m.id for m in cfg.members]
        self.committee: tuple[int, ...] = tuple(range(p.k))
        self.epoch = 0
        self.leader = 0
        self.stamp = (0, 0)                 # (epoch, view) of what this member knows of the committee
        group = (p.group or cfg.multicast[0].name) if p.first_phase == "mcast" else None
        self.layer = Pbcast(self.me, self.view_members, [STREAM_ORDERED, STREAM_VIEW], p, group, self.rng, now,
                            PData, PDigest)
        self.counters: Counter[str] = Counter()
        self.status = "member"              # member | out (dropped, asking to rejoin) | stopped (dropped, no rejoin)
        # the Vsync layer: items by gseq (members: until delivered; the committee: until the checkpoint's GC)
        self.items: dict[int, bytes] = {}
        self.unstable: set[int] = set()     # held from an ORDER, not yet covered by the leader's stable mark
        self.stable = 0
        self.next = 1
        self.high = 0
        self.true_high = 0                  # the highest gseq that came by pbcast, repair or a Gseq Ack
        self.repaired: set[int] = set()
        self.delivered_log: list[tuple[int, str, int, int]] = []  # (gseq, kind, origin or view, lseq): for tests
        self.transfers: list[tuple[int, int]] = []                # (first, last) gseqs a state transfer covered
        # the repair sub-protocol
        self.gap_ewma = p.repair_max_s
        self.last_arrival = now
        self.repair_at = now + p.repair_max_s
        # view changes at this member
        self.blocked_until = -INF
        self.block_view = 0
        self.ack_due: tuple[float, int, int, int] | None = None   # (due, epoch, view, leader)
        self.acked: tuple[int, int] = (-1, 0)                     # (epoch, view) of the last acknowledged
        self.held: list[tuple[int, bytes]] = []                   # own acknowledged multicasts, not yet published
        # the sender
        self.source = DataSource(cfg.workload, MIN_DATA_SIZE, now, self.rng) \
            if cfg.workload is not None and self.me in cfg.senders else None
        self.pending: dict[int, list] = {}  # lseq -> [payload, first request ts, last request ts, requests]
        self.req_ts: dict[int, float] = {}  # lseq -> Gseq Req time, until delivered here
        # a dropped member
        self.join_at = INF
        self.joins = 0
        self.init_committee(now)
        self.startup = Output()
        self.startup.log(now, "view_installed", view=0, members=len(self.view_members), dropped=[],
                         committee=list(self.committee), epoch=0, gc_rounds=self.layer.gc_rounds)

    @property
    def active(self) -> bool:
        return self.status == "member"

    # ---- helpers ---------------------------------------------------------------------------------------------

    def _timeout(self, now: float) -> float:
        gap = max(self.gap_ewma, now - self.last_arrival)
        return min(self.p.repair_max_s, max(self.p.repair_min_s, 2 * gap))

    def _to_leader(self, msg: Any, now: float, out: Output) -> None:
        if self.is_leader:
            out.merge(self._handle(msg, now, "local"))
        else:
            out.send.append((self.leader, msg))

    def _notice(self) -> Leader:
        return Leader(self.me, self.epoch, self.stamp[1], self.committee)

    def blocked(self) -> bool:
        return self.blocked_until > -INF

    def _deliverable(self, gseq: int) -> bool:
        return gseq in self.items and (gseq not in self.unstable or gseq <= self.stable)

    # ---- timers ----------------------------------------------------------------------------------------------

    def next_wakeup(self) -> float:
        if self.status == "stopped":
            return INF
        if self.status == "out":
            return self.join_at
        due = [self.layer.next_wakeup(), self.repair_at, self.committee_wakeup()]
        if self.blocked():
            due.append(self.blocked_until)
        if self.ack_due is not None:
            due.append(self.ack_due[0])
        if self.source is not None:
            due.append(self.source.due)
        if self.pending:
            due.append(min(v[2] for v in self.pending.values()) + self.p.gseq_timeout_s)
        return min(due)

    def tick(self, now: float) -> Output:
        out = Output()
        if self.status == "stopped":
            return out
        if self.status == "out":
            if now >= self.join_at:
                self._send_join(now, out)
            return out
        if now >= self.layer.next_wakeup():
            skipped, _gc = self.layer.tick(now, out)
            if skipped:
                out.log(now, "steps_skipped", timer="round", missed=skipped)
        if self.blocked() and now >= self.blocked_until:
            self.counters["vc_block_timeout"] += 1
            self._unblock(now, out)
        if self.source is not None and now >= self.source.due:
            self._send(now, out)
        for lseq, entry in list(self.pending.items()):
            if now >= entry[2] + self.p.gseq_timeout_s:
                entry[2] = now
                entry[3] += 1
                self.counters["gseq_req_resent"] += 1
                self._request(lseq, entry, now, out)
        if now >= self.repair_at:
            self._repair_timer(now, out)
        if self.ack_due is not None and now >= self.ack_due[0]:
            _due, epoch, view, leader = self.ack_due
            self.ack_due = None
            self._ack_prefresh(epoch, view, leader, now, out)
        self.committee_tick(now, out)
        return out

    # ---- sending ---------------------------------------------------------------------------------------------

    def _send(self, now: float, out: Output) -> None:
        assert self.source is not None
        if len(self.pending) >= self.p.sender_buffer:
            skipped = self.source.clock.advance(now)
            self.counters["send_blocked"] += 1 + skipped
            out.log(now, "send_blocked", attempts=1 + skipped, pending=len(self.pending))
            return
        lseq, skipped = self.source.next(now)
        payload = self.source.payload
        entry = [payload, now, now, 0]
        self.pending[lseq] = entry
        self.req_ts[lseq] = now
        out.log(now, "data_sent", seq=lseq, size=self.source.size, pending=len(self.pending))
        if skipped:
            out.log(now, "steps_skipped", timer="workload", missed=skipped)
        self._request(lseq, entry, now, out)

    def _request(self, lseq: int, entry: list, now: float, out: Output) -> None:
        """A Gseq Req to the leader; from the second resend on, every other one to the next committee member in
        turn (a committee member that does not lead answers with a LEADER notice)."""
        tries = entry[3]
        target = self.leader
        if tries >= 2 and tries % 2 == 0 and len(self.committee) > 1:
            target = self.committee[(tries // 2) % len(self.committee)]
        msg = GseqReq(self.me, lseq, entry[0])
        if target == self.me:
            out.merge(self._handle(msg, now, "local"))
        else:
            out.send.append((target, msg))

    def _gseq_acked(self, lseq: int, gseq: int, view: int, now: float, out: Output) -> None:
        entry = self.pending.pop(lseq, None)
        if entry is None:
            self.counters["gseq_ack_duplicate"] += 1
            return
        out.log(now, "gseq_acked", seq=lseq, gseq=gseq, view=view, latency_s=now - entry[1])
        data = encode_item(DataItem(self.me, lseq, entry[0]))
        if not self.layer.has(STREAM_ORDERED, gseq):
            if self.blocked() and self.p.vc_block == "all":
                self.held.append((gseq, data))          # "the multicast dissemination ... blocked" (§5.2)
                self.counters["publish_held"] += 1
            else:
                self.layer.publish(STREAM_ORDERED, gseq, data, out)
        self._item(gseq, data, now, out, how="own")

    # ---- the repair sub-protocol -------------------------------------------------------------------------------

    def _repair_timer(self, now: float, out: Output) -> None:
        if self.blocked():
            self.repair_at = self.blocked_until      # "the repair sub-protocol [is] blocked during view changes"
            return
        self.repair_at = now + self._timeout(now)
        if self.in_committee and (self.next > self.true_high or self._deliverable(self.next)):
            return      # the leader's ORDERs fill a committee member's holes; repair only what pbcast showed
        peers = [c for c in self.committee if c != self.me]
        if peers:
            target = self.rng.choice(peers)
            out.send.append((target, RepairReq(self.me, self.next, self.p.repair_batch)))
            self.counters["repair_req"] += 1

    def _repair_items(self, msg: RepairItems, now: float, out: Output) -> None:
        self.high = max(self.high, msg.high)
        for gseq, data in msg.items:
            self._item(gseq, data, now, out, how="repair")
        if not msg.items and self.next <= msg.high:
            self.counters["repair_empty"] += 1
        if self.next <= self.high:
            self.repair_at = min(self.repair_at, now + self.p.repair_min_s)

    # ---- messages --------------------------------------------------------------------------------------------

    def receive(self, msg: Any, now: float, via: str = "udp") -> Output:
        if not 0 <= msg.sender < self.n or msg.sender == self.me:
            raise BadMessage(f"sender {msg.sender} is not another member (n={self.n}, me={self.me})")
        if self.status == "stopped":
            return Output()
        if self.status == "out":
            return self._handle_out(msg, now)
        return self._handle(msg, now, via)

    def _handle(self, msg: Any, now: float, via: str) -> Output:
        out = Output()
        if isinstance(msg, (PData, PDigest)):
            if isinstance(msg, PData):
                try:
                    item = decode_item(msg.payload)
                except DecodeError as exc:
                    raise BadMessage(f"P_DATA {msg.origin}/{msg.seq}: {exc}") from None
                if (msg.origin == STREAM_VIEW) != isinstance(item, PrefreshItem) or isinstance(item, Ordered):
                    raise BadMessage(f"stream {msg.origin} carries a {type(item).__name__}")
            got = self.layer.receive(msg, out)
            if got is None:
                return out
            if got.origin == STREAM_ORDERED:
                out.log(now, "pbcast_received", gseq=got.seq, phase=got.phase, round=got.round)
                self._item(got.seq, got.payload, now, out, how="pbcast")
            else:
                self._prefresh(decode_item(got.payload), now, out, direct=False)
        elif isinstance(msg, GseqReq):
            if msg.sender not in self.cfg.senders:
                raise BadMessage(f"a Gseq Req from {msg.sender}, who is not a sender")
            if self.is_leader:
                self.order_request(msg.sender, msg.lseq, msg.payload, now, out)
            else:
                self.counters["gseq_req_not_leader"] += 1
                out.send.append((msg.sender, self._notice()))
        elif isinstance(msg, GseqAck):
            if msg.sender not in self.committee and msg.sender not in self.leaders:
                raise BadMessage(f"a Gseq Ack from {msg.sender}, neither in the committee ({list(self.committee)}) "
                                 f"nor a leader this member knew")
            self._gseq_acked(msg.lseq, msg.gseq, msg.view, now, out)
        elif isinstance(msg, Order):
            self.on_order(msg, now, out)
        elif isinstance(msg, OrderAck):
            self.on_order_ack(msg, now, out)
        elif isinstance(msg, Heartbeat):
            self.on_heartbeat(msg, now, out)
        elif isinstance(msg, CProbe):
            self.on_cprobe(msg, now, out)
        elif isinstance(msg, CAck):
            self.on_cack(msg, now, out)
        elif isinstance(msg, Leader):
            self.on_leader(msg, now, out)
        elif isinstance(msg, RepairReq):
            if self.in_committee:
                self.serve_repair(msg, out)
            else:
                self.counters["repair_req_not_committee"] += 1
                out.send.append((msg.sender, self._notice()))
        elif isinstance(msg, RepairItems):
            self._repair_items(msg, now, out)
        elif isinstance(msg, AckPrefresh):
            if self.is_leader:
                self.on_ack_prefresh(msg, now, out)
            else:
                self.counters["ack_prefresh_not_leader"] += 1
                out.send.append((msg.sender, self._notice()))
        elif isinstance(msg, Prefresh):
            self._prefresh(self._prefresh_item(msg), now, out, direct=True)
        elif isinstance(msg, Join):
            if self.is_leader:
                self.on_join(msg, now, out)
            else:
                out.send.append((msg.sender, self._notice()))
        elif isinstance(msg, State):
            self._state_item(msg)
            self.counters["state_duplicate"] += 1       # a member already: the transfer came twice
        elif isinstance(msg, Excluded):
            if msg.view > self.view:
                self._dropped(msg.view, now, out)
        return out

    def _handle_out(self, msg: Any, now: float) -> Output:
        """A dropped member hears only what brings it back: LEADER, PREFRESH, STATE."""
        out = Output()
        if isinstance(msg, Leader):
            self.on_leader(msg, now, out)
        elif isinstance(msg, Prefresh):
            item = self._prefresh_item(msg)
            if item.epoch >= self.epoch:
                self.epoch, self.leader = item.epoch, item.leader
                out.send.append((item.leader, AckPrefresh(self.me, item.view, self.next - 1)))
                self.counters["ack_prefresh_joiner"] += 1
        elif isinstance(msg, State):
            self._rejoin(msg.gseq, self._state_item(msg), msg.item, now, out)
        else:
            self.counters["ignored_while_out"] += 1
        return out

    @staticmethod
    def _prefresh_item(msg: Prefresh) -> PrefreshItem:
        try:
            item = decode_item(msg.item)
        except DecodeError as exc:
            raise BadMessage(f"PREFRESH: {exc}") from None
        if not isinstance(item, PrefreshItem):
            raise BadMessage(f"PREFRESH carries a {type(item).__name__}")
        return item

    def _state_item(self, msg: State) -> ViewItem:
        try:
            item = decode_item(msg.item)
        except DecodeError as exc:
            raise BadMessage(f"STATE: {exc}") from None
        if not isinstance(item, ViewItem) or self.me not in item.members:
            raise BadMessage(f"STATE carries {item!r}, not a Newview naming {self.me}")
        return item

    # ---- the Vsync layer: items and in-order delivery --------------------------------------------------------

    def _item(self, gseq: int, data: bytes, now: float, out: Output, how: str, tag: int | None = None) -> None:
        """`how`: pbcast, repair, own (a Gseq Ack) — stable items — or order (an ORDER: unstable until the
        leader's stable mark covers it)."""
        if gseq < self.next:
            self.counters["duplicate_item"] += 1
            return
        if gseq in self.items:
            if gseq in self.unstable and how != "order":
                if self.items[gseq] != data:
                    self.counters["order_superseded"] += 1
                self.unstable.discard(gseq)
                self.items[gseq] = data
                self._deliver_ready(now, out)
            elif gseq in self.unstable and self.items[gseq] != data:
                self.items[gseq] = data             # a newer leader's ORDER replaces an older one's
            else:
                self.counters["duplicate_item"] += 1
            return
        try:
            item = decode_item(data)
        except DecodeError as exc:
            raise BadMessage(f"item {gseq}: {exc}") from None
        if isinstance(item, (PrefreshItem, Ordered)):
            raise BadMessage(f"item {gseq} is a {type(item).__name__} in the ordered stream")
        self.items[gseq] = data
        self.high = max(self.high, gseq)
        if how == "order":
            self.unstable.add(gseq)
        else:
            self.true_high = max(self.true_high, gseq)
        if how == "repair":
            self.repaired.add(gseq)
            self.counters["repaired_items"] += 1
        self.note_item(gseq, item, now, tag)
        self.gap_ewma = 0.8 * self.gap_ewma + 0.2 * max(0.0, now - self.last_arrival)
        self.last_arrival = now
        if isinstance(item, ViewItem) and item.view >= self.block_view and self.blocked():
            self._unblock(now, out)     # the Newview is here: dissemination and repairs resume
        if gseq > self.next:
            self.repair_at = min(self.repair_at, now + self._timeout(now))
        self._deliver_ready(now, out)

    def _deliver_ready(self, now: float, out: Output) -> None:
        while self.status == "member" and self._deliverable(self.next):
            gseq = self.next
            data = self.items[gseq] if self.in_committee else self.items.pop(gseq)
            self.unstable.discard(gseq)
            item = decode_item(data)
            self.next += 1
            repaired = gseq in self.repaired
            self.repaired.discard(gseq)
            if isinstance(item, DataItem):
                self.delivered_log.append((gseq, "data", item.origin, item.lseq))
                self.note_delivered(gseq, self.view)
                if item.origin == self.me:
                    sent = self.req_ts.pop(item.lseq, None)
                    if self.pending.pop(item.lseq, None) is not None:
                        self.counters["own_delivered_before_ack"] += 1
                    out.log(now, "own_delivered", seq=item.lseq, gseq=gseq, view=self.view,
                            latency_s=None if sent is None else now - sent)
                else:
                    out.log(now, "data_received", origin=item.origin, seq=item.lseq, sender=item.origin,
                            repair=repaired, gseq=gseq, view=self.view)
            else:
                self.delivered_log.append((gseq, "view", item.view, 0))
                self._install(item, gseq, data, now, out)
            self.repair_at = now + self._timeout(now)

    def _install(self, item: ViewItem, gseq: int, data: bytes, now: float, out: Output,
                 transfer: bool = False) -> None:
        dropped = sorted(set(self.view_members) - set(item.members))
        self.view = item.view
        self.view_members = list(item.members)
        self.layer.set_members(self.view_members)
        if self.blocked():
            self._unblock(now, out)
        if (item.epoch, item.view) >= self.stamp:
            self.adopt_committee(item.epoch, item.view, item.committee, now, out)
        self.note_delivered(gseq, item.view)
        self.view_checkpoint(item, gseq, data, now, out)
        fields: dict[str, Any] = {"view": item.view, "gseq": gseq, "members": len(item.members), "dropped": dropped,
                                  "committee": list(item.committee), "epoch": item.epoch}
        if transfer:
            fields["state_transfer"] = True
        if self.is_leader and self.vc_started is not None:
            fields["duration_s"] = now - self.vc_started
        out.log(now, "view_installed", **fields)
        if self.me not in item.members:
            self._dropped(item.view, now, out)

    # ---- view changes at a member ----------------------------------------------------------------------------

    def _prefresh(self, item: PrefreshItem, now: float, out: Output, direct: bool) -> None:
        if self.is_leader and item.leader == self.me:
            return
        if item.epoch < self.epoch:
            self.counters["prefresh_stale_epoch"] += 1
            return
        if item.epoch > self.epoch or item.leader != self.leader:
            self.learn_leader(item.epoch, item.leader, now, out)
        if item.view <= self.view:
            return
        key = (item.epoch, item.view)
        if key == self.acked:
            if direct:      # the leader has no acknowledgement from us: it was lost, answer again at once
                self.counters["ack_prefresh_again"] += 1
                self._ack_prefresh(item.epoch, item.view, item.leader, now, out)
            return
        if self.ack_due is not None and self.ack_due[1:3] == key:
            return
        self.high = max(self.high, item.high)
        self.block_view = item.view
        self.blocked_until = now + 2 * self.p.ack_timeout_s
        if self.p.vc_block == "all":
            self.layer.block(STREAM_ORDERED, item.high)
        defer = 0.0 if direct else self.rng.uniform(0, self.p.ack_defer_s)
        self.ack_due = (now + defer, item.epoch, item.view, item.leader)
        if direct:
            self.ack_due = None
            self._ack_prefresh(item.epoch, item.view, item.leader, now, out)

    def _ack_prefresh(self, epoch: int, view: int, leader: int, now: float, out: Output) -> None:
        self.acked = (epoch, view)
        self._to_leader_of(leader, AckPrefresh(self.me, view, self.next - 1), now, out)

    def _to_leader_of(self, leader: int, msg: Any, now: float, out: Output) -> None:
        if leader == self.me:
            out.merge(self._handle(msg, now, "local"))
        else:
            out.send.append((leader, msg))

    def _unblock(self, now: float, out: Output) -> None:
        self.blocked_until = -INF
        self.layer.unblock(STREAM_ORDERED)
        held, self.held = self.held, []
        for gseq, data in held:
            if not self.layer.has(STREAM_ORDERED, gseq):
                self.layer.publish(STREAM_ORDERED, gseq, data, out)
        self.repair_at = min(self.repair_at, now + self._timeout(now))

    # ---- dropped, and back -----------------------------------------------------------------------------------

    def _dropped(self, view: int, now: float, out: Output) -> None:
        if self.status != "member":
            return
        out.log(now, "dropped", view=view, delivered=self.next - 1)
        self.leave_committee(now, out)
        if self.blocked():
            self._unblock(now, out)
        self.ack_due = None
        if not self.p.rejoin:
            self.status = "stopped"
            return
        self.status = "out"
        self.joins = 0
        self.join_at = now

    def _send_join(self, now: float, out: Output) -> None:
        """JOIN to the leader first, then to each committee member in turn (one that does not lead answers with a
        LEADER notice)."""
        if self.joins == 0:
            out.log(now, "rejoin_requested", view=self.view, delivered=self.next - 1)
        target = self.leader if self.joins % 2 == 0 else self.committee[(self.joins // 2) % len(self.committee)]
        self.joins += 1
        self.join_at = now + self.p.join_retry_s
        if target != self.me:
            out.send.append((target, Join(self.me, self.next - 1)))

    def _rejoin(self, gseq: int, item: ViewItem, data: bytes, now: float, out: Output) -> None:
        """The state transfer: the view that admits us, at `gseq`; what lies between our last delivery and it is
        the transferred state (seed 001 §5.2: 'a single state-transfer to initialize multiple new members')."""
        if gseq < self.next:
            self.counters["state_stale"] += 1
            return
        skipped = gseq - self.next
        if skipped > 0:
            self.transfers.append((self.next, gseq - 1))
        abandoned = sorted(self.pending)
        self.pending.clear()
        for lseq in abandoned:
            self.req_ts.pop(lseq, None)
        if abandoned:
            out.log(now, "send_abandoned", seqs=abandoned)
        self.items.clear()
        self.unstable.clear()
        self.repaired.clear()
        self.held.clear()
        self.next = gseq + 1
        self.high = max(self.high, gseq)
        self.true_high = max(self.true_high, gseq)
        self.layer.receipts[STREAM_ORDERED].skip_to(gseq)
        self.status = "member"
        self.join_at = INF
        self.acked = (item.epoch, item.view)
        self.delivered_log.append((gseq, "view", item.view, 0))
        out.log(now, "rejoined", view=item.view, gseq=gseq, skipped=skipped)
        self._install(item, gseq, data, now, out, transfer=True)
        self.last_arrival = now
        self.repair_at = now + self.p.repair_min_s

    def snapshot(self) -> dict[str, Any]:
        return {
            "id": self.me, "view": self.view, "members": len(self.view_members), "status": self.status,
            "epoch": self.epoch, "leader": self.leader, "committee": list(self.committee),
            "next": self.next, "high": self.high, "pending": len(self.pending), "round": self.layer.round,
            "items": len(self.items),
            "counters": dict(sorted((self.counters + self.layer.counters).items())),
        }


CORE = VsyncNode
