"""vsync's leader committee (seed 001 §5.2, Figures 7 and 8): a mixin of `core.VsyncNode`, the committee's and the
leader's side. docs/pbcast.md lists every rule with the sentence of the paper it comes from.

- Ordering: the leader gives each Gseq Req the next gseq and sends it to the other committee members (ORDER, in
  gseq order, resent go-back-N after `gseq_timeout_s`); each acknowledges the highest gseq through which it holds
  every item (ORDER_ACK, cumulative). The leader's stable mark is the lowest of these: "All multicasts are first
  communicated to the committee, where they attain stability, are assigned a global sequence number". Only then
  is a gseq acknowledged to its sender (Gseq Ack, tagged with the view it was ordered in) or, for a Newview,
  disseminated; committee members deliver an ORDERed item only under the stable mark (ORDER and HEARTBEAT carry
  it). So every stable gseq is in the contiguous prefix of every committee member.
- The committee round: each view change begins with it ("The leaders first establish/reconfirm the membership
  within the leader-committee itself"): CPROBE to the committee, CACK back (within `ack_timeout_s`, CPROBE resent
  after `gseq_timeout_s`). A member that does not answer is removed and replaced by the lowest-id member of the
  view outside the committee ("The failure of a committee member will result in the inclusion of some other
  non-faulty member into the committee"); the replacement gets the items it lacks by ORDER before it counts.
  The leader also starts a view change when a committee member has left an ORDER unacknowledged for
  `ack_timeout_s` ("Both these kinds of failures result in view changes, first in the k-committee, then at the
  members").
- Re-election: a committee member of rank r (its place in the committee list after the leader) that has heard
  nothing from the leader (HEARTBEAT every `heartbeat_s`, ORDER, CPROBE) for r x `leader_timeout_s` takes over:
  it keeps its own contiguous prefix (which holds every stable gseq), opens epoch + 1 and runs the committee round,
  then a view change. Members of the committee accept it only if it is in their committee list and holds
  everything they delivered; they drop their unstable items and are sent its items by ORDER. The lowest rank wins
  a tie of epochs. A leader that hears of a newer epoch steps down.
- View change (Figure 8) after the round: Prefreshview by Pbcast, AckPrefreshviews for `ack_timeout_s` (or until all
  members have answered, `ack_wait: all`), the Prefreshview resent by unicast `ack_retries` times to those that
  have not answered; Gseq Reqs are held ("The leader-committee delays pending Gseq Req messages ... until the end
  of the view change process"). The Newview keeps the members that answered and whose delivery lags the
  leader's by at most `lag_limit_s`, admits the joiners that answered, names the committee and the GC checkpoint,
  and takes the next gseq.
- Garbage collection at the checkpoint ("The periodic view change offers a checkpoint beyond which messages can be
  garbage-collected"): when a committee member delivers a Newview it discards the items (and their bookkeeping) up
  to the Newview's `gc`, the lowest delivered gseq its members acknowledged: nobody in the view can ask for them.
- Joiners: a dropped member's JOIN puts it on the list of the next view change; once the Newview that admits it
  is stable the leader sends it the state transfer (STATE).
"""
from __future__ import annotations

import math
from typing import Any

from gossipnode.protocols.base import BadMessage, Output
from gossipnode.workload import Receipts

from .wire import (STREAM_ORDERED, STREAM_VIEW, CAck, CProbe, DataItem, DecodeError, Excluded, GseqAck, Heartbeat,
                   Leader, Order, OrderAck, Ordered, Prefresh, PrefreshItem, RepairItems, State, ViewItem,
                   decode_item, encode_item, vc_seq)

INF = math.inf
REPAIR_BYTES = 60000  # payload bytes one REPAIR_ITEMS may carry


class CommitteeRole:
    """State and handlers of a committee member and of the leader (mixed into VsyncNode)."""

    def init_committee(self, now: float) -> None:
        self.in_committee = self.me in self.committee
        self.is_leader = self.me == self.leader
        self.leaders = {self.leader}         # every leader this member has known (a deposed one's late Gseq Ack
        #                                      is still right: it acknowledges only stable gseqs)
        self.synced = (0, 0)                 # (epoch, leader) whose committee round this member has answered
        self.heard_leader = now
        self.tags: dict[int, int] = {}       # committee: gseq -> the view it is delivered in
        self.ordered_at: dict[int, float] = {}
        self.done: dict[int, Receipts] = {}  # committee: per sender, the lseqs garbage-collected
        self.gc_floor = 0
        self.installed_newview: tuple[int, bytes] | None = None
        # the leader
        self.next_gseq = 1
        self.assigned: dict[tuple[int, int], int] = {}
        self.assign_view = 0
        self.acked: dict[int, int] = {}      # committee member -> through which gseq it holds everything (-1: not yet)
        self.sent_upto: dict[int, int] = {}
        self.last_sent: dict[int, float] = {}
        self.behind_since: dict[int, float] = {}
        self.queued: list[tuple[int, int, bytes]] = []
        self.phase = "idle"                  # idle | committee (the round) | prefresh (waiting for AckPrefreshviews)
        self.round: dict[str, Any] | None = None
        self.vc: dict[str, Any] | None = None
        self.vc_started: float | None = None
        self.joiners: dict[int, float] = {}
        self.pending_state: dict[int, int] = {}
        self.pending_excluded: dict[int, list[int]] = {}
        self.view_at = INF
        self.hb_at = INF
        if self.is_leader:
            self._lead(now, synced=True)
            self.view_at = now + self.p.view_period_s

    def _lead(self, now: float, synced: bool) -> None:
        self.is_leader = True
        others = [c for c in self.committee if c != self.me]
        start = 0 if synced else -1
        self.acked = {c: start for c in others}
        self.sent_upto = dict(self.acked)
        self.last_sent = {c: now for c in others}
        self.behind_since = {c: now for c in others}
        self.hb_at = now + self.p.heartbeat_s if others else INF

    def _others(self) -> list[int]:
        return [c for c in self.committee if c != self.me]

    # ---- timers ----------------------------------------------------------------------------------------------

    def _takeover_at(self) -> float:
        if not self.in_committee or self.is_leader or self.synced != (self.epoch, self.leader):
            return INF
        others = [c for c in self.committee if c != self.leader]
        if self.me not in others:
            return INF
        return self.heard_leader + (others.index(self.me) + 1) * self.p.leader_timeout

    def committee_wakeup(self) -> float:
        if not self.is_leader:
            return self._takeover_at()
        due = [self.view_at, self.hb_at]
        top = self.next_gseq - 1
        for c, a in self.acked.items():
            if a < top or a < 0:
                due.append(max(self.last_sent[c], self.behind_since[c]) + self.p.gseq_timeout_s)
                if self.phase == "idle" and a >= 0:
                    due.append(self.behind_since[c] + self.p.ack_timeout_s)
        if self.phase == "committee":
            due += [self.round["deadline"], self.round["sent"] + self.p.gseq_timeout_s]
        elif self.phase == "prefresh":
            due.append(self.vc["deadline"])
            if self.vc["retries"]:
                due.append(self.vc["retries"][0])
        return min(due)

    def committee_tick(self, now: float, out: Output) -> None:
        if not self.is_leader:
            due = self._takeover_at()
            if self.status == "member" and now >= due:
                if now - due > self.p.leader_timeout / 2:
                    # we woke up long after our own deadline: we were not running (paused, descheduled), so the
                    # silence is ours, and what the leader sent meanwhile is still to be read: one more timeout
                    out.log(now, "takeover_deferred", late_s=now - due, leader=self.leader, epoch=self.epoch)
                    self.counters["takeover_deferred"] += 1
                    self.heard_leader = now
                    return
                self._take_over(now, out)
            return
        if now >= self.hb_at:
            self.hb_at = now + self.p.heartbeat_s
            out.send.extend((c, Heartbeat(self.me, self.epoch, self.stable)) for c in self._others())
        stalled = []
        for c, a in list(self.acked.items()):
            if now >= max(self.last_sent[c], self.behind_since[c]) + self.p.gseq_timeout_s \
                    and (a < 0 or a < self.next_gseq - 1):
                self.last_sent[c] = now
                if a < 0:
                    if self.phase != "committee":
                        out.send.append((c, self._cprobe()))
                else:
                    self.sent_upto[c] = a
                    self.counters["order_resent"] += 1
                    self._pump(c, now, out)
            if 0 <= a < self.next_gseq - 1 and now >= self.behind_since[c] + self.p.ack_timeout_s:
                stalled.append(c)
        if self.phase == "committee":
            r = self.round
            if now >= r["deadline"]:
                self._end_round(now, out)
            elif now >= r["sent"] + self.p.gseq_timeout_s:
                r["sent"] = now
                late = r["waiting"] | ({r["suspect"]} - set(r["answered"]) - {None})
                out.send.extend((c, self._cprobe()) for c in sorted(late))
        elif self.phase == "prefresh":
            vc = self.vc
            while vc["retries"] and now >= vc["retries"][0]:
                vc["retries"].pop(0)
                self._resend_prefresh(out)
            if now >= vc["deadline"]:
                self._decide(now, out)
        elif stalled:
            out.log(now, "committee_suspected", members=stalled, epoch=self.epoch)
            self._start_view_change(now, out, "committee")
        elif now >= self.view_at:
            self._start_view_change(now, out, "periodic")

    # ---- ordering at the leader ------------------------------------------------------------------------------

    def order_request(self, sender: int, lseq: int, payload: bytes, now: float, out: Output) -> None:
        if sender not in self.view_members:
            self.counters["gseq_req_outside_view"] += 1
            if sender != self.me:
                out.send.append((sender, Excluded(self.me, self.view)))
            return
        key = (sender, lseq)
        gseq = self.assigned.get(key)
        if gseq is not None:
            if gseq <= self.stable:
                self._ack_sender(key, gseq, now, out)
            return
        r = self.done.get(sender)
        if r is not None and (lseq <= r.r or lseq in r.ahead):
            self.counters["gseq_req_stale"] += 1
            return
        if self.phase != "idle":                 # held until the view change ends (§5.2)
            if all((s, q) != key for s, q, _p in self.queued):
                self.queued.append((sender, lseq, payload))
            return
        self.assigned[key] = self.next_gseq         # before _assign: with k = 1 it is stable at once
        self._assign(encode_item(DataItem(sender, lseq, payload)), now, out, self.assign_view)

    def _assign(self, data: bytes, now: float, out: Output, tag: int) -> int:
        gseq = self.next_gseq
        self.next_gseq += 1
        self.items[gseq] = data
        self.unstable.add(gseq)
        self.tags[gseq] = tag
        self.ordered_at[gseq] = now
        self.high = max(self.high, gseq)
        for c in self._others():
            if self.acked[c] == gseq - 1:
                self.behind_since[c] = now
            self._pump(c, now, out)
        self._advance_stable(now, out)
        return gseq

    def _pump(self, c: int, now: float, out: Output) -> None:
        """ORDERs to committee member c, in gseq order, at most `repair_batch` beyond what it acknowledged."""
        a = self.acked[c]
        if a < 0:
            return
        top = min(self.next_gseq - 1, a + self.p.repair_batch)
        while self.sent_upto[c] < top:
            g = self.sent_upto[c] + 1
            self.sent_upto[c] = g
            data = self.items.get(g)
            if data is None:
                self.counters["order_missing"] += 1
                continue
            env = encode_item(Ordered(self.epoch, self.stable, self.tags.get(g, self.view), data))
            out.send.append((c, Order(self.me, g, env)))

    def on_order_ack(self, msg: OrderAck, now: float, out: Output) -> None:
        c = msg.sender
        if not self.is_leader or self.acked.get(c, -1) < 0:
            self.counters["order_ack_ignored"] += 1
            return
        upto = min(msg.gseq, self.next_gseq - 1)
        if upto > self.acked[c]:
            self.acked[c] = upto
            self.behind_since[c] = now
            self.sent_upto[c] = max(self.sent_upto[c], upto)
            self._pump(c, now, out)
            self._advance_stable(now, out)

    def _advance_stable(self, now: float, out: Output) -> None:
        top = self.next_gseq - 1
        for c in self._others():
            top = min(top, self.acked[c])
        if top <= self.stable:
            return
        old, self.stable = self.stable, top
        for g in range(old + 1, top + 1):
            data = self.items.get(g)
            if data is None:
                continue
            self.ordered_at[g] = now        # the lag rule counts from when a gseq could be disseminated
            item = decode_item(data)
            if isinstance(item, DataItem):
                key = (item.origin, item.lseq)
                if self.assigned.get(key) == g:
                    self._ack_sender(key, g, now, out)
            elif g > self.gc_floor:
                if not self.layer.has(STREAM_ORDERED, g):
                    self.layer.publish(STREAM_ORDERED, g, data, out)    # the Newview goes out by Pbcast
                for j in [j for j, at in self.pending_state.items() if at == g]:
                    del self.pending_state[j]
                    out.send.append((j, State(self.me, g, data)))
                for j in self.pending_excluded.pop(g, []):
                    out.send.append((j, Excluded(self.me, item.view)))
        self._deliver_ready(now, out)

    def _ack_sender(self, key: tuple[int, int], gseq: int, now: float, out: Output) -> None:
        sender, lseq = key
        view = self.tags.get(gseq, self.view)   # the view it was ordered in, not the leader's view now (#34)
        if sender == self.me:
            self._gseq_acked(lseq, gseq, view, now, out)
        else:
            out.send.append((sender, GseqAck(self.me, lseq, gseq, view)))

    # ---- a committee member ----------------------------------------------------------------------------------

    def _from_my_leader(self, epoch: int, sender: int, what: str, out: Output) -> bool:
        """Whether a committee message (ORDER, HEARTBEAT) comes from the leader whose round we answered; a
        leader of an older epoch is told the newer one."""
        if epoch < self.epoch:
            self.counters[f"{what}_stale_epoch"] += 1
            out.send.append((sender, self._notice()))
            return False
        if not self.in_committee or self.is_leader or (epoch, sender) != self.synced or sender != self.leader:
            self.counters[f"{what}_unexpected"] += 1
            return False
        return True

    def on_order(self, msg: Order, now: float, out: Output) -> None:
        try:
            env = decode_item(msg.item)
            inner = decode_item(env.item) if isinstance(env, Ordered) else None
        except DecodeError as exc:
            raise BadMessage(f"ORDER {msg.gseq}: {exc}") from None
        if not isinstance(inner, (DataItem, ViewItem)):
            raise BadMessage(f"ORDER {msg.gseq} carries {type(env).__name__}/{type(inner).__name__}, not an "
                             f"ORDERED envelope around a DATA or NEWVIEW item")
        if not self._from_my_leader(env.epoch, msg.sender, "order", out):
            return
        self.heard_leader = now
        self.stable = max(self.stable, env.stable)
        self._item(msg.gseq, env.item, now, out, how="order", tag=env.view)
        out.send.append((msg.sender, OrderAck(self.me, self._contig())))
        self._deliver_ready(now, out)

    def on_heartbeat(self, msg: Heartbeat, now: float, out: Output) -> None:
        if not self._from_my_leader(msg.epoch, msg.sender, "heartbeat", out):
            return
        self.heard_leader = now
        if msg.stable > self.stable:
            self.stable = msg.stable
            self._deliver_ready(now, out)

    def _contig(self) -> int:
        h = self.next - 1
        while h + 1 in self.items:
            h += 1
        return h

    def note_item(self, gseq: int, item: Any, now: float, tag: int | None) -> None:
        if self.in_committee:
            self.ordered_at.setdefault(gseq, now)
            if tag is not None:
                self.tags[gseq] = tag

    def note_delivered(self, gseq: int, view: int) -> None:
        if self.in_committee:
            self.tags.setdefault(gseq, view)

    def serve_repair(self, req: Any, out: Output) -> None:
        if req.sender not in self.view_members:
            self.counters["repair_req_outside_view"] += 1
            out.send.append((req.sender, Excluded(self.me, self.view)))
            return
        items, size = [], 0
        for gseq in range(req.next, min(self.next, req.next + min(req.count, self.p.repair_batch))):
            data = self.items.get(gseq)
            if data is None or size + len(data) + 6 > REPAIR_BYTES:
                break
            items.append((gseq, data))
            size += len(data) + 6
        out.send.append((req.sender, RepairItems(self.me, self.next - 1, tuple(items))))
        self.counters["repair_items_sent"] += len(items)

    def view_checkpoint(self, item: ViewItem, gseq: int, data: bytes, now: float, out: Output) -> None:
        """A Newview delivered: the committee garbage-collects what every member of the view has delivered."""
        self.installed_newview = (gseq, data)
        if not self.in_committee or item.gc <= self.gc_floor:
            return
        stale = sorted(g for g in self.items if g <= item.gc)
        for g in stale:
            it = decode_item(self.items.pop(g))
            self.tags.pop(g, None)
            if isinstance(it, DataItem):
                self.done.setdefault(it.origin, Receipts()).add(it.lseq)
                self.assigned.pop((it.origin, it.lseq), None)
        for g in [g for g in self.ordered_at if g <= item.gc]:
            del self.ordered_at[g]
        for g in [g for g in self.tags if g <= item.gc]:
            del self.tags[g]
        self.gc_floor = item.gc
        out.log(now, "committee_gc", view=item.view, gc=item.gc, discarded=len(stale), held=len(self.items))

    # ---- who leads -------------------------------------------------------------------------------------------

    def adopt_committee(self, epoch: int, view: int, committee: tuple[int, ...], now: float, out: Output,
                        force: bool = False) -> None:
        """What this member knows of the committee, from a Newview, a CPROBE or a LEADER notice: the newest
        (epoch, view) wins."""
        if (epoch, view) < self.stamp and not force:
            return
        self.stamp = (epoch, view)
        self.committee = tuple(committee)
        if epoch > self.epoch or force or committee[0] != self.leader:
            self.learn_leader(epoch, committee[0], now, out, force=True)
        if self.in_committee and self.me not in self.committee:
            self.leave_committee(now, out)
        elif not self.in_committee and self.me in self.committee:
            self.in_committee = True

    def learn_leader(self, epoch: int, leader: int, now: float, out: Output, force: bool = False) -> None:
        if not force and (epoch < self.epoch or (epoch == self.epoch and leader >= self.leader)):
            return
        changed = leader != self.leader
        self.epoch, self.leader = epoch, leader
        self.leaders.add(leader)
        if self.is_leader and leader != self.me:
            self._step_down(now, out)
        if self.in_committee and not self.is_leader and (epoch, leader) != self.synced and changed:
            self.heard_leader = now          # its CPROBE should follow; give it the leader timeout
        if changed:
            self._resend_pending(now, out)

    def _resend_pending(self, now: float, out: Output) -> None:
        for lseq, entry in self.pending.items():
            entry[2] = now
            entry[3] = 0
            self._request(lseq, entry, now, out)

    def on_leader(self, msg: Leader, now: float, out: Output) -> None:
        if self.is_leader and self.round is not None and self.round.get("takeover") \
                and (msg.sender in self.round["waiting"] or msg.sender == self.round["suspect"]) \
                and msg.committee[0] != self.me:
            # a committee member refuses our takeover: it knows a committee we are not the leader of
            out.log(now, "takeover_aborted", epoch=self.epoch, by=msg.sender, leader=msg.committee[0])
            self.counters["takeover_aborted"] += 1
            self.adopt_committee(msg.epoch, msg.view, msg.committee, now, out, force=True)
            self.heard_leader = now
            return
        if self.is_leader and msg.epoch > self.epoch and msg.committee[0] not in self.committee:
            # a newer epoch led by a member our committee round removed (or never had): no committee member
            # accepts such a takeover, so we stay, and tell it ours
            self.counters["leader_notice_refused"] += 1
            out.log(now, "leader_notice_refused", by=msg.sender, epoch=msg.epoch, leader=msg.committee[0])
            out.send.append((msg.sender, self._notice()))
            return
        if (msg.epoch, msg.view) > self.stamp:
            self.adopt_committee(msg.epoch, msg.view, msg.committee, now, out)
        elif msg.epoch > self.epoch:
            self.learn_leader(msg.epoch, msg.committee[0], now, out)
        else:
            self.counters["leader_notice_old"] += 1

    def leave_committee(self, now: float, out: Output) -> None:
        if self.is_leader:
            self._step_down(now, out)
        if not self.in_committee:
            return
        self.in_committee = False
        for g in list(self.items):
            if g < self.next or g in self.unstable:
                del self.items[g]
        self.unstable.clear()
        self.tags.clear()
        self.ordered_at.clear()
        out.log(now, "committee_left", epoch=self.epoch, leader=self.leader)

    def _step_down(self, now: float, out: Output) -> None:
        out.log(now, "leader_stepped_down", epoch=self.epoch, leader=self.leader)
        self.is_leader = False
        self.phase = "idle"
        self.round = self.vc = None
        self.queued.clear()
        self.joiners.clear()
        self.pending_state.clear()
        self.pending_excluded.clear()
        self.acked.clear()
        self.view_at = self.hb_at = INF
        for g in list(self.unstable):
            self.items.pop(g, None)
        self.unstable.clear()
        if self.blocked():
            self._unblock(now, out)
        self.heard_leader = now

    def _cprobe(self) -> CProbe:
        return CProbe(self.me, self.epoch, self.assign_view + 1, self.next_gseq - 1, self.committee)

    def on_cprobe(self, msg: CProbe, now: float, out: Output) -> None:
        new = (msg.epoch, msg.sender) != self.synced
        if msg.epoch < self.epoch or (msg.epoch == self.epoch and msg.sender != self.leader
                                      and msg.sender > self.leader):
            self.counters["cprobe_stale"] += 1
            out.send.append((msg.sender, self._notice()))
            return
        if new and self.in_committee and (msg.sender not in self.committee or msg.high < self.next - 1):
            # it is not in our committee, or lacks what we delivered: it cannot hold every stable gseq
            self.counters["cprobe_refused"] += 1
            out.log(now, "takeover_refused", candidate=msg.sender, epoch=msg.epoch, high=msg.high,
                    delivered=self.next - 1)
            out.send.append((msg.sender, self._notice()))
            return
        if self.is_leader:
            self._step_down(now, out)
        if new:         # a new leader: what we hold unstable may differ from what it holds; it sends its own
            for g in list(self.unstable):
                self.items.pop(g, None)
            self.unstable.clear()
            self.synced = (msg.epoch, msg.sender)
        prev = self.leader
        self.epoch, self.leader = msg.epoch, msg.sender
        self.leaders.add(msg.sender)
        self.stamp = max(self.stamp, (msg.epoch, msg.view))
        self.committee = msg.committee
        self.in_committee = self.me in msg.committee
        self.heard_leader = now
        if prev != msg.sender:
            out.log(now, "leader_changed", epoch=msg.epoch, leader=msg.sender, previous=prev)
            self._resend_pending(now, out)
        out.send.append((msg.sender, CAck(self.me, msg.epoch, self._contig())))

    def on_cack(self, msg: CAck, now: float, out: Output) -> None:
        c = msg.sender
        if not self.is_leader or msg.epoch != self.epoch or c not in self.acked:
            self.counters["cack_ignored"] += 1
            return
        held = min(msg.delivered, self.next_gseq - 1)          # it holds every gseq through this
        if self.acked[c] < 0 or held > self.acked[c]:
            self.sent_upto[c] = max(held, self.sent_upto[c]) if self.acked[c] >= 0 else held
            self.acked[c] = held
            self._pump(c, now, out)
        self.behind_since[c] = now          # it answers: another ack_timeout_s before it counts as stalled
        r = self.round
        if r is not None and (c in r["waiting"] or c == r["suspect"]):
            r["waiting"].discard(c)
            r["answered"][c] = msg.delivered
            if not r["waiting"]:
                self._end_round(now, out)
        self._advance_stable(now, out)

    # ---- re-election -----------------------------------------------------------------------------------------

    def _take_over(self, now: float, out: Output) -> None:
        """Our leader has been silent for rank x leader_timeout: lead from our contiguous prefix, which holds every
        stable gseq (each was acknowledged by every committee member)."""
        previous, silent = self.leader, now - self.heard_leader
        high = self._contig()
        for g in [g for g in self.unstable if g > high]:
            self.items.pop(g, None)
            self.unstable.discard(g)
        self.epoch = max(self.epoch, self.stamp[0]) + 1
        self.leader = self.me
        self.leaders.add(self.me)
        self.synced = (self.epoch, self.me)
        self.next_gseq = high + 1
        view = self.view
        self.assigned = {}
        for g in range(self.next, high + 1):
            item = decode_item(self.items[g])
            if isinstance(item, ViewItem):
                view = item.view
            self.tags.setdefault(g, view)
        for g, data in self.items.items():
            item = decode_item(data)
            if isinstance(item, DataItem) and g <= high:
                self.assigned[(item.origin, item.lseq)] = g
        self.assign_view = view
        self.committee = (self.me,) + tuple(sorted(c for c in self.committee if c != self.me))
        self.stamp = (self.epoch, view + 1)
        out.log(now, "leader_elected", epoch=self.epoch, previous=previous, high=high, delivered=self.next - 1,
                silent_s=silent, committee=list(self.committee))
        self._lead(now, synced=False)
        self._start_view_change(now, out, "takeover", suspect=previous)

    # ---- view changes at the leader --------------------------------------------------------------------------

    def _start_view_change(self, now: float, out: Output, reason: str, suspect: int | None = None) -> None:
        """Phase one: the committee round. A takeover probes the leader it replaces too (if that one answers in
        time it stays in the committee) but does not wait for it."""
        self.view_at = INF
        self.phase = "committee"
        waiting = set(self._others()) - {suspect}
        self.round = {"reason": reason, "started": now, "deadline": now + self.p.ack_timeout_s, "sent": now,
                      "waiting": waiting, "answered": {}, "takeover": reason == "takeover", "suspect": suspect}
        probe = self._cprobe()
        out.send.extend((c, probe) for c in sorted(set(self._others())))
        if not waiting:
            self._end_round(now, out)

    def _end_round(self, now: float, out: Output) -> None:
        r = self.round
        removed = sorted(r["waiting"] | ({r["suspect"]} - set(r["answered"]) - {None}))
        keep = [c for c in self.committee if c not in removed]
        spare = [m for m in sorted(self.view_members) if m not in keep and m not in removed]
        added = spare[:max(0, self.p.k - len(keep))]
        self.committee = (self.me,) + tuple(sorted(set(keep + added) - {self.me}))
        self.stamp = (self.epoch, self.assign_view + 1)
        for c in removed:
            for d in (self.acked, self.sent_upto, self.last_sent, self.behind_since):
                d.pop(c, None)
        for c in added:
            self.acked[c] = self.sent_upto[c] = -1
            self.last_sent[c] = self.behind_since[c] = now
        if self._others() and self.hb_at == INF:
            self.hb_at = now + self.p.heartbeat_s
        probe = self._cprobe()
        out.send.extend((c, probe) for c in added)
        if removed or added:
            notice = self._notice()
            out.send.extend((c, notice) for c in [*removed, *keep] if c != self.me)
        out.log(now, "committee_round", epoch=self.epoch, view=self.assign_view + 1, reason=r["reason"],
                committee=list(self.committee), removed=removed, added=added, duration_s=now - r["started"])
        if len(self.committee) < self.p.k:
            out.log(now, "committee_short", committee=list(self.committee), k=self.p.k)
        self.round_started = r["started"]
        self.round = None
        self._start_prefresh(now, r["reason"], out)
        self._advance_stable(now, out)

    def _start_prefresh(self, now: float, reason: str, out: Output) -> None:
        """Phase two (Figure 8): the Prefreshview, by Pbcast; joiners get it by unicast."""
        self.phase = "prefresh"
        view, high = self.assign_view + 1, self.next_gseq - 1
        item = encode_item(PrefreshItem(view, high, self.epoch, self.me))
        p = self.p
        step = (p.ack_timeout_s - p.ack_defer_s) / (p.ack_retries + 1)
        self.vc = {"view": view, "high": high, "stable": self.stable, "started": now, "deadline": now + p.ack_timeout_s, "item": item,
                   "acks": {self.me: self.next - 1}, "retries": [now + p.ack_defer_s + step * j
                                                                  for j in range(1, p.ack_retries + 1)]}
        for c in self._others():
            if self.acked.get(c, -1) >= 0:
                self.vc["acks"][c] = self.acked[c]       # the committee round was their answer
        self.vc_started = now
        self.layer.publish(STREAM_VIEW, vc_seq(self.epoch, view), item, out)
        self.block_view = view
        self.blocked_until = now + 2 * p.ack_timeout_s
        if p.vc_block == "all":
            self.layer.block(STREAM_ORDERED, high)
        out.send.extend((j, Prefresh(self.me, item)) for j in sorted(self.joiners))
        out.log(now, "view_change_started", view=view, high=high, members=len(self.view_members),
                epoch=self.epoch, reason=reason)
        if p.ack_wait == "all" and all(m in self.vc["acks"] for m in self.view_members):
            self._decide(now, out)

    def _resend_prefresh(self, out: Output) -> None:
        vc = self.vc
        late = [m for m in [*self.view_members, *self.joiners] if m not in vc["acks"]]
        out.send.extend((m, Prefresh(self.me, vc["item"])) for m in late)
        self.counters["prefresh_resent"] += len(late)

    def on_ack_prefresh(self, msg: Any, now: float, out: Output) -> None:
        vc = self.vc
        if self.phase != "prefresh" or msg.view != vc["view"]:
            self.counters["ack_prefresh_late"] += 1
            return
        if msg.sender in self.view_members or msg.sender in self.joiners:
            vc["acks"][msg.sender] = msg.delivered
        if self.p.ack_wait == "all" and all(m in vc["acks"] for m in self.view_members):
            self._decide(now, out)

    def _lag(self, member: int, delivered: int) -> float:
        """How long before the Prefreshview the first gseq `member` lacks became stable, i.e. could be disseminated
        (0: it lacks nothing that was stable then)."""
        if delivered >= self.vc["stable"]:
            return 0.0
        at = self.ordered_at.get(delivered + 1)
        return INF if at is None else self.vc["started"] - at

    def _decide(self, now: float, out: Output) -> None:
        vc = self.vc
        acks = vc["acks"]
        survivors, lagging = [], []
        for m in self.view_members:
            if m not in acks:
                continue
            if m in self.committee or self._lag(m, acks[m]) <= self.p.lag_limit:
                survivors.append(m)
            else:
                lagging.append(m)
        joined = sorted(j for j in self.joiners if j in acks and j not in self.view_members)
        members = tuple(sorted(survivors + joined))
        dropped = sorted(set(self.view_members) - set(survivors))
        committee = tuple(c for c in self.committee if c in members)
        gone = [c for c in self.committee if c not in members]     # never synced replacements
        if gone:
            self.committee = committee
            for c in gone:
                for d in (self.acked, self.sent_upto, self.last_sent, self.behind_since):
                    d.pop(c, None)
            out.send.extend((c, self._notice()) for c in gone)
        gc = min([acks[m] for m in survivors] + [self.stable, vc["high"]])
        item = ViewItem(vc["view"], members, self.epoch, max(0, gc), committee)
        out.log(now, "view_change_decided", view=vc["view"], gseq=self.next_gseq, members=len(members),
                dropped=dropped, lagging=lagging, joined=joined, acks=len(acks) - 1, duration_s=now - vc["started"],
                committee=list(committee), epoch=self.epoch, gc=item.gc)
        self.phase = "idle"
        self.vc = None
        self.view_at = self.round_started + self.p.view_period_s
        self.assign_view = vc["view"]
        data = encode_item(item)
        gseq = self.next_gseq
        for j in joined:
            self.pending_state[j] = gseq
            self.joiners.pop(j, None)
        if dropped:
            self.pending_excluded[gseq] = dropped
        self._unblock(now, out)
        self._assign(data, now, out, vc["view"])
        queued, self.queued = self.queued, []
        for sender, lseq, payload in queued:
            self.order_request(sender, lseq, payload, now, out)

    def on_join(self, msg: Any, now: float, out: Output) -> None:
        j = msg.sender
        if j in self.view_members:          # admitted already: the state transfer was lost
            if j not in self.pending_state and self.installed_newview is not None:
                gseq, data = self.installed_newview
                out.send.append((j, State(self.me, gseq, data)))
                self.counters["state_resent"] += 1
            return
        if j not in self.joiners:
            out.log(now, "join_received", member=j, delivered=msg.delivered)
        self.joiners[j] = now
        if self.phase == "prefresh" and j not in self.vc["acks"]:
            out.send.append((j, Prefresh(self.me, self.vc["item"])))
