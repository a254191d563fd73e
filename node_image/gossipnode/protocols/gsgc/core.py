"""One GSGC member as a sans-IO state machine.

GSGC (Guo, Hayden, van Renesse, Vogels, Birman 1997): stability detection (Figure 2, `stability.py`), gossip
failure detection (Figure 3, `failure.py`) and their integration (§3.3: W is checked against the live
membership), global or local gossip with stability controllers (§5), plus what the emulation needs around it:
a data workload (m senders, per-sender sequence numbers), R maintained from what arrived, NAK repair of gaps
from the buffer, and garbage collection of the buffer when S rises. With `rejoin_probe_steps`, declared members
are probed and readmitted members admitted to W at the next round (node_image/README.md, GSGC: Rejoin).

The runtime calls `tick(now)` when `next_wakeup()` has come and `receive(msg, now)` for every decoded packet;
both return an `Output` (messages to send, events to log). Randomness comes only from a `random.Random` seeded
by (seed, member id), so a run of cores driven by the same inputs is reproducible.

Timers: each member gossips once per step, at a uniformly random point inside the step (the paper's scattered
starting points). A timer that finds itself more than a step late (the process was stopped, or starved) skips
the missed steps and logs how many; it never fires them in a burst. The workload timer does the same.
"""
from __future__ import annotations


from collections import Counter
from typing import Any

from gossipnode.clocks import StepClock
from gossipnode.config import NodeConfig
from gossipnode.protocols.base import BadMessage, Core, Output, seeded_rng
from gossipnode.workload import DataSource, MessageBuffer, Receipts, nak_ranges, serve_nak

from .failure import FailureDetector
from .stability import Branch, Completion, RoundState, array_max
from .wire import (GOSSIP_TYPES, MAX_SEQ, MIN_DATA_SIZE, SC_GOSSIP_TYPES, Body, Data, Gossip, Live, Message, MsgType,
                   Nak, Stable)

NAK_RANGES = 16  # missing-seq ranges one NAK asks for
REPAIRS_PER_NAK = 32  # retransmissions sent in answer to one NAK


class GsgcNode(Core):
    name = "gsgc"

    def __init__(self, cfg: NodeConfig, now: float) -> None:
        """Create the member and start the protocol at `now`."""
        p = cfg.protocol
        self.cfg = cfg
        self.me = cfg.id
        self.n = cfg.n
        self.b = p.subgroup
        self.rng = seeded_rng("gsgc", cfg.seed, cfg.id)
        self.senders = list(cfg.senders)
        self.m = len(self.senders)
        self.receipts = {s: Receipts() for s in self.senders}
        self.buffer = MessageBuffer(self.senders)
        self.stability: tuple[int, ...] = (0,) * self.m  # S
        self.local_stability: tuple[int, ...] | None = None  # local mode: the latest local round's array
        self.local_stability_round = -1  # the local round it came from
        self._sc_used = -1  # the newest local round whose array this SC has contributed to an SC round
        self._sc_active = False  # this SC's current SC round has begun here (a contribution or a gossip heard)
        self.piggyback = p.piggyback_stability
        self._gossip_type = MsgType.GOSSIP if p.piggyback_stability else MsgType.GOSSIP_M
        self._sc_gossip_type = MsgType.SC_GOSSIP if p.piggyback_stability else MsgType.SC_GOSSIP_M
        self._stable_group = None
        if p.stable_via == "multicast":
            self._stable_group = p.stable_group or cfg.multicast[0].name
        self.counters: Counter[str] = Counter()
        self._ctl_seq = 0

        groups = p.local_groups
        if groups is None:
            self.level = "global"
            self.group = list(range(self.n))
            self.group_index = 0
            self.controllers: list[int] = []
            self._group_of_sc: dict[int, int] = {}
            self._scs_of_group: dict[int, list[int]] = {}
            scope = self.group
        else:
            self.level = "local"
            self.group_index = next(i for i, g in enumerate(groups) if self.me in g.members)
            self.group = sorted(groups[self.group_index].members)
            self.controllers = sorted(c for g in groups for c in g.controllers)
            self._group_of_sc = {c: i for i, g in enumerate(groups) for c in g.controllers}
            self._scs_of_group = {i: sorted(g.controllers) for i, g in enumerate(groups)}
            scope = self.group + (self.controllers if self.me in self.controllers else [])
        self.is_sc = self.me in self.controllers
        self._unrepresented: set[int] = set()
        self._bit_of = {member: pos for pos, member in enumerate(self.group)}
        self.main = RoundState(self._bit_of[self.me], self.m, now)
        self.sc = RoundState(self.group_index, self.m, now) if self.is_sc else None
        self._all_groups = (1 << len(groups)) - 1 if groups else 0

        self.rejoin = p.rejoin_probe_steps  # None: no probes, Figure 3 alone (README: Rejoin)
        self.fd = (
            FailureDetector(self.me, self.n, p.fail_k, p.suspect_threshold or p.fail_k, scope,
                            grounded_only=self.rejoin is not None)
            if p.fail_k is not None
            else None
        )
        self._declared_at: dict[int, float] = {}  # member -> when this member declared it failed
        self._admit_after: dict[int, int] = {}  # readmitted member -> the main round it is not yet required in
        self._steps_taken = 0
        self._last_probed = -1
        self._refresh_views()

        fixed = p.start_phase == "fixed"
        self.main_clock = StepClock(p.step_s, now, self.rng, fixed_phase=fixed)
        self.sc_clock = StepClock(p.sc_step_s or p.step_s, now, self.rng, fixed_phase=fixed) if self.is_sc else None
        self.source: DataSource | None = None
        if self.me in self.senders and cfg.workload is not None:
            self.source = DataSource(cfg.workload, MIN_DATA_SIZE, now, self.rng)
        self.startup = Output()  # events of the start itself, for the runtime to log
        self.startup.log(now, "round_started", level=self.level, round=0, via="start")
        # an SC round starts here only with a local array (or another SC's gossip): `_sc_begin`

    # ---- views derived from the failure detector -------------------------------------------------------------

    def _alive(self, j: int) -> bool:
        return self.fd is None or not self.fd.is_failed(j)

    def _refresh_views(self) -> None:
        self._main_peers = [j for j in self.group if j != self.me and self._alive(j)]
        self._required_main = sum(1 << self._bit_of[j] for j in self.group
                                  if self._alive(j) and j not in self._admit_after)
        self._sc_peers = [c for c in self.controllers if c != self.me and self._alive(c)]
        self._my_scs = [c for c in self._scs_of_group.get(self.group_index, []) if c != self.me and self._alive(c)]
        self._everyone_else = [j for j in range(self.n) if j != self.me and self._alive(j)]

    # ---- helpers ---------------------------------------------------------------------------------------------

    def r_array(self) -> tuple[int, ...]:
        return tuple(self.receipts[s].r for s in self.senders)

    def _sample(self, peers: list[int]) -> list[int]:
        return self.rng.sample(peers, min(self.b, len(peers)))

    def _drop_at_sender(self, targets: list[int]) -> list[int]:
        """Simulation II's sender drops: each GOSSIP copy is lost before it leaves with probability
        `gossip_drop_p` (counted as `gossip_dropped`; the RNG is only drawn when the probability is set)."""
        p = self.cfg.protocol.gossip_drop_p
        if not p:
            return targets
        kept = [t for t in targets if self.rng.random() >= p]
        self.counters["gossip_dropped"] += len(targets) - len(kept)
        return kept

    def _control(self, mtype: MsgType, rnd: int, body: Body) -> Message:
        self._ctl_seq = (self._ctl_seq + 1) & MAX_SEQ
        self.counters[f"sent_{mtype.name.lower()}"] += 1
        return Message(mtype, self.me, self._ctl_seq, rnd, body)

    def _fd_events(self, transitions: list[tuple[str, int, int]], now: float, out: Output, via: str = "") -> None:
        for event, member, value in transitions:
            if event == "declared_failed":
                self._declared_at[member] = now
                self._admit_after.pop(member, None)
            if event == "readmitted" and self.rejoin is not None:
                declared = self._declared_at.pop(member, None)
                out.log(now, event, member=member, l=value, via=via, declared_ts=declared,
                        after_s=None if declared is None else round(now - declared, 6))
                if member in self._bit_of:  # §3.3 admission: its bit in W is required from the next round on
                    self._admit_after[member] = self.main.round
                continue
            out.log(now, event, member=member, l=value)
        if any(event in ("declared_failed", "readmitted") for event, _, _ in transitions):
            self._refresh_views()
            if self.is_sc:
                self._check_representation(now, out)

    def _check_representation(self, now: float, out: Output) -> None:
        """A local group whose SCs have all failed has no voice among the SCs: global rounds wait for it (the
        alternative, leaving it out, could collect messages its members lack). Log when that starts."""
        dark = {g for g, scs in self._scs_of_group.items() if not any(self._alive(c) for c in scs)}
        for g in sorted(dark - self._unrepresented):
            out.log(now, "group_unrepresented", group=g, controllers=self._scs_of_group[g])
        self._unrepresented = dark

    def _round_done(self, level: str, rs: RoundState, done: Completion, now: float, out: Output) -> None:
        if level == "sc":
            # §5: an SC round begins with local arrays. One this SC never began (it waited for a fresh local
            # array) ends without a record here; the next begins when this SC contributes or hears an SC
            # gossip of it -- at once when it entered that round through such a gossip.
            if self._sc_active:
                out.log(now, "round_completed", level=level, round=done.round, via=done.via, steps=done.steps,
                        started_ts=done.started, tpr_s=round(now - done.started, 6))
            self._sc_active = False
            if done.via in ("next_round", "jump"):
                self._sc_begin(done.via, now, out)
            return
        out.log(now, "round_completed", level=level, round=done.round, via=done.via, steps=done.steps,
                started_ts=done.started, tpr_s=round(now - done.started, 6))
        out.log(now, "round_started", level=level, round=rs.round, via=done.via)
        if self._admit_after:
            self._admit(now, out)

    def _admit(self, now: float, out: Output) -> None:
        """§3.3's admission control: members readmitted during an earlier main round enter W's requirement at
        the start of this one (the paper's join window right after a round starts), so a join never stalls a
        round that was under way."""
        due = sorted(j for j, rnd in self._admit_after.items() if rnd < self.main.round)
        for j in due:
            del self._admit_after[j]
            out.log(now, "admitted", member=j, round=self.main.round)
        if due:
            self._refresh_views()

    def _sc_begin(self, via: str, now: float, out: Output) -> None:
        rs = self.sc
        assert rs is not None
        if self._sc_active:
            return
        self._sc_active = True
        rs.started, rs.steps = now, 0
        out.log(now, "round_started", level="sc", round=rs.round, via=via)

    def _raise_stability(self, array: tuple[int, ...], via: str, rnd: int, now: float, out: Output) -> None:
        """S = ArrayMax(S, array); then catch R up to S and garbage-collect the buffer."""
        new = array_max(self.stability, array)
        if new == self.stability:
            return
        self.stability = new
        out.log(now, "stable", level="global", via=via, round=rnd, s=list(new))
        discarded = 0
        for origin, s in zip(self.senders, new, strict=True):
            missing = self.receipts[origin].skip_to(s)
            if missing:
                out.log(now, "data_skipped", origin=origin, through=s, missing=missing)
            discarded += self.buffer.discard_through(origin, s)
        if discarded:
            out.log(now, "gc", discarded=discarded, buffer_size=self.buffer.count, buffer_bytes=self.buffer.bytes)

    def _announce_stable(self, rnd: int, out: Output) -> None:
        """Send S to every member: one datagram to the multicast group (`stable_via: multicast`), else one
        unicast copy to each other live member (the fallback)."""
        msg = self._control(MsgType.STABLE, rnd, Stable(self.stability))
        if self._stable_group is not None:
            out.mcast.append((self._stable_group, msg))
        else:
            out.send.extend((j, msg) for j in self._everyone_else)

    # ---- stability detection at the main level (global, or local group) and among SCs --------------------------

    def _settle_main(self, now: float, out: Output) -> None:
        rs = self.main
        rs.contribute(self.r_array())
        done = rs.complete_if_heard(self._required_main, now)
        if done is None:
            return
        self._round_done(self.level, rs, done, now, out)
        assert done.array is not None
        if self.level == "global":
            self._raise_stability(done.array, "constructed", done.round, now, out)
            if self.cfg.protocol.multicast_stable:
                self._announce_stable(done.round, out)
        else:
            self._learn_local(done.array, done.round, "constructed", now, out)
            if self._my_scs:  # §5: the group's SCs carry its array into the second phase
                msg = self._control(MsgType.LOCAL_STABLE, done.round, Stable(done.array))
                out.send.extend((c, msg) for c in self._my_scs)
            self._settle_sc(now, out)
        rs.contribute(self.r_array())

    def _learn_local(self, array: tuple[int, ...], rnd: int, via: str, now: float, out: Output) -> None:
        """A local round's array: constructed here, or sent by the member of the group that constructed it."""
        if rnd < self.local_stability_round:
            return
        if rnd == self.local_stability_round and self.local_stability is not None:
            array = array_max(self.local_stability, array)
            if array == self.local_stability:
                return
        self.local_stability, self.local_stability_round = array, rnd
        out.log(now, "stable", level="local", via=via, round=rnd, s=list(array))

    def _on_local_stable(self, msg: Message, st: Stable, now: float, out: Output) -> None:
        """An SC receives its group's array of local round `msg.round` (§5: the SCs start the second phase once
        the local arrays are constructed); like a STABLE, it also ends that local round here."""
        self._learn_local(st.stability, msg.round, "local_stable", now, out)
        done = self.main.end_round(msg.round, now, "local_stable")
        if done is not None:
            self._round_done(self.level, self.main, done, now, out)
            self._settle_main(now, out)
        self._settle_sc(now, out)

    def _settle_sc(self, now: float, out: Output) -> None:
        """§5's second phase at an SC: contribute each local array (from a completed local round) to one SC
        round, at most once; construct the global S when W covers every local group, and announce it."""
        rs = self.sc
        if rs is None:
            return
        if self.local_stability is not None and self.local_stability_round > self._sc_used:
            if rs.contribute(self.local_stability):
                self._sc_used = self.local_stability_round
                self._sc_begin("local_array", now, out)
        if not self._sc_active:
            return
        done = rs.complete_if_heard(self._all_groups, now)
        if done is None:
            return
        self._round_done("sc", rs, done, now, out)
        assert done.array is not None
        self._raise_stability(done.array, "constructed", done.round, now, out)
        self._announce_stable(done.round, out)

    def _on_gossip(self, msg: Message, g: Gossip, rs: RoundState, level: str, now: float, out: Output) -> None:
        branch, done = rs.receive(msg.round, g.min_so_far, g.heard, now)
        self.counters[f"{level}_{branch.value}"] += 1
        if branch is Branch.OLD_ROUND:
            return
        if done is not None:
            self._round_done(level, rs, done, now, out)
        elif rs is self.sc and branch is not Branch.REDUNDANT:
            self._sc_begin("gossip", now, out)
        if g.stability is not None:
            self._raise_stability(g.stability, "gossip", msg.round, now, out)
        self._settle(rs, now, out)

    def _settle(self, rs: RoundState, now: float, out: Output) -> None:
        if rs is self.main:
            self._settle_main(now, out)
        else:
            self._settle_sc(now, out)

    def _on_stable(self, msg: Message, st: Stable, now: float, out: Output) -> None:
        self._raise_stability(st.stability, "multicast", msg.round, now, out)
        rs = self.main if self.level == "global" else self.sc
        if rs is None:
            return
        done = rs.end_round(msg.round, now)
        if done is not None:
            self._round_done(self.level if rs is self.main else "sc", rs, done, now, out)
            self._settle(rs, now, out)

    # ---- data ------------------------------------------------------------------------------------------------

    def _send_data(self, now: float, out: Output) -> None:
        assert self.source is not None
        seq, skipped = self.source.next(now, floor=self.receipts[self.me].r)
        self.receipts[self.me].add(seq)
        self.buffer.put(self.me, seq, self.source.payload)
        msg = Message(MsgType.DATA, self.me, seq, 0, Data(self.me, self.source.payload))
        out.send.extend((j, msg) for j in self._everyone_else)
        self.counters["sent_data"] += 1
        out.log(now, "data_sent", seq=seq, size=self.source.size, fanout=len(self._everyone_else))
        self._skipped("workload", skipped, now, out)

    def _on_data(self, msg: Message, d: Data, now: float, out: Output) -> None:
        if not self.receipts[d.origin].add(msg.seq):
            self.counters["data_duplicate"] += 1
            return
        self.buffer.put(d.origin, msg.seq, d.payload)
        out.log(now, "data_received", origin=d.origin, seq=msg.seq, sender=msg.sender,
                repair=msg.type is MsgType.REPAIR)

    def _request_repairs(self, out: Output) -> None:
        for origin in self.senders:
            if origin == self.me:
                continue
            ranges = nak_ranges(self.receipts[origin], NAK_RANGES)
            if not ranges:
                continue
            if self._alive(origin):
                target = origin
            elif self._main_peers:
                target = self.rng.choice(self._main_peers)
            else:
                continue
            out.send.append((target, self._control(MsgType.NAK, self.main.round, Nak(origin, tuple(ranges)))))

    def _on_nak(self, msg: Message, nak: Nak, out: Output) -> None:
        for seq, payload in serve_nak(self.buffer, nak.origin, nak.ranges, REPAIRS_PER_NAK):
            out.send.append((msg.sender, Message(MsgType.REPAIR, self.me, seq, 0, Data(nak.origin, payload))))
            self.counters["sent_repair"] += 1

    # ---- the interface the runtime drives --------------------------------------------------------------------

    def step(self, now: float) -> Output:
        """One gossip step at the main level: Figure 3's L increment, then Figure 2's gossip to b random live
        members (of the local group, with local gossip), the Live array beside it, and NAKs for gaps."""
        out = Output()
        if self.fd is not None:
            self._fd_events(self.fd.step(), now, out)
            if self.rejoin is not None:
                self._probe(out)
        self._settle_main(now, out)
        rs = self.main
        rs.steps += 1
        targets = self._sample(self._main_peers)
        if targets:
            gossip = self._control(self._gossip_type, rs.round, Gossip(
                rs.min_so_far, self.stability if self.piggyback else None, rs.heard, len(self.group)))
            out.send.extend((t, gossip) for t in self._drop_at_sender(targets))
            if self.fd is not None:
                live = self._control(MsgType.LIVE, rs.round, Live(self.fd.wire_live()))
                out.send.extend((t, live) for t in targets)
        self._request_repairs(out)
        return out

    def _probe(self, out: Output) -> None:
        """Rejoin: every `rejoin_probe_steps` steps, the Live array to one member declared failed (round robin
        over them). A declared member is otherwise sent nothing; this is how a healed partition, or a member
        that came back, hears from us (it readmits us, and every member our L shows alive, when the probe
        arrives). No random draw: the gossip's random stream is the same with and without probes."""
        assert self.fd is not None and self.rejoin is not None
        self._steps_taken += 1
        if self._steps_taken % self.rejoin or not self.fd.failed:
            return
        declared = sorted(self.fd.failed)
        target = next((j for j in declared if j > self._last_probed), declared[0])
        self._last_probed = target
        self.counters["probes"] += 1
        out.send.append((target, self._control(MsgType.LIVE, self.main.round, Live(self.fd.wire_live()))))

    def sc_step(self, now: float) -> Output:
        """One gossip step among the stability controllers (§5, second phase). An SC whose SC round has not
        begun (no fresh local array, no SC gossip of that round heard) stays silent."""
        out = Output()
        rs = self.sc
        if rs is None:
            return out
        if self._sc_active:
            rs.steps += 1
        self._settle_sc(now, out)
        if not self._sc_active:
            return out
        targets = self._sample(self._sc_peers)
        if targets:
            n_groups = self._all_groups.bit_length()
            gossip = self._control(self._sc_gossip_type, rs.round, Gossip(
                rs.min_so_far, self.stability if self.piggyback else None, rs.heard, n_groups))
            out.send.extend((t, gossip) for t in targets)
            if self.fd is not None:
                live = self._control(MsgType.LIVE, rs.round, Live(self.fd.wire_live()))
                out.send.extend((t, live) for t in targets)
        return out

    def next_wakeup(self) -> float:
        due = self.main_clock.due
        if self.sc_clock is not None:
            due = min(due, self.sc_clock.due)
        if self.source is not None:
            due = min(due, self.source.due)
        return due

    def tick(self, now: float) -> Output:
        """Run every timer that is due at `now` (each at most once)."""
        out = Output()
        if now >= self.main_clock.due:
            self._merge(out, self.step(now))
            self._skipped("step", self.main_clock.advance(now), now, out)
        if self.sc_clock is not None and now >= self.sc_clock.due:
            self._merge(out, self.sc_step(now))
            self._skipped("sc_step", self.sc_clock.advance(now), now, out)
        if self.source is not None and now >= self.source.due:
            self._send_data(now, out)
        return out

    @staticmethod
    def _merge(into: Output, other: Output) -> None:
        into.merge(other)

    @staticmethod
    def _skipped(timer: str, missed: int, now: float, out: Output) -> None:
        if missed:
            out.log(now, "steps_skipped", timer=timer, missed=missed)

    def _validate(self, msg: Message) -> None:
        if not 0 <= msg.sender < self.n or msg.sender == self.me:
            raise BadMessage(f"sender {msg.sender} is not another member (n={self.n}, me={self.me})")
        t, body = msg.type, msg.body
        if isinstance(body, (Data, Nak)):
            if body.origin not in self.receipts:
                raise BadMessage(f"{t.name}: origin {body.origin} is not a sender")
            if t is MsgType.DATA and body.origin != msg.sender:
                raise BadMessage(f"DATA from {msg.sender} claims origin {body.origin}")
            if isinstance(body, Data) and msg.seq == 0:
                raise BadMessage(f"{t.name}: data seq 0 (seqs start at 1)")
        elif isinstance(body, Live):
            if len(body.live) != self.n:
                raise BadMessage(f"LIVE with {len(body.live)} entries, the group has {self.n}")
        elif (k := len(body.stability if isinstance(body, Stable) else body.min_so_far)) != self.m:
            raise BadMessage(f"{t.name} with {k} senders, this group has {self.m}")
        elif t is MsgType.LOCAL_STABLE:
            if not self.is_sc or msg.sender not in self._bit_of:
                raise BadMessage(f"LOCAL_STABLE from {msg.sender} to {self.me}: needs a stability controller of "
                                 f"the sender's local group")
        elif isinstance(body, Stable):
            if self.level == "local" and msg.sender not in self._group_of_sc:
                raise BadMessage(f"STABLE from {msg.sender}, who is not a stability controller")
        elif t in GOSSIP_TYPES:
            if msg.sender not in self._bit_of:
                raise BadMessage(f"GOSSIP from {msg.sender}, who is not in this member's local group")
            if body.nbits != len(self.group):
                raise BadMessage(f"GOSSIP W has {body.nbits} bits, expected {len(self.group)}")
        else:
            n_groups = self._all_groups.bit_length()
            if not self.is_sc or msg.sender not in self._group_of_sc:
                raise BadMessage(f"SC_GOSSIP from {msg.sender} to {self.me}: both must be stability controllers")
            if body.nbits != n_groups:
                raise BadMessage(f"SC_GOSSIP W has {body.nbits} bits, there are {n_groups} groups")

    def receive(self, msg: Message, now: float, via: str = "udp") -> Output:
        """Handle one decoded message. BadMessage (before any state changes) if this member cannot accept it."""
        self._validate(msg)
        out = Output()
        self.counters[f"recv_{msg.type.name.lower()}"] += 1
        if self.fd is not None:
            self._fd_events(self.fd.heard_from(msg.sender), now, out, "heard")
        body = msg.body
        if isinstance(body, Gossip):
            if msg.type in GOSSIP_TYPES:
                self._on_gossip(msg, body, self.main, self.level, now, out)
            elif self.sc is not None and msg.type in SC_GOSSIP_TYPES:
                self._on_gossip(msg, body, self.sc, "sc", now, out)
        elif msg.type is MsgType.LOCAL_STABLE:
            self._on_local_stable(msg, body, now, out)
        elif isinstance(body, Live):
            if self.fd is not None:
                self._fd_events(self.fd.merge(body.live), now, out, "live")
        elif isinstance(body, Stable):
            self._on_stable(msg, body, now, out)
        elif isinstance(body, Nak):
            self._on_nak(msg, body, out)
        else:
            self._on_data(msg, body, now, out)
        return out

    def snapshot(self) -> dict[str, Any]:
        """The member's state as plain JSON-able data (the control endpoint's `state`)."""

        def round_state(rs: RoundState, members: list[int]) -> dict[str, Any]:
            return {
                "round": rs.round,
                "steps": rs.steps,
                "started_ts": rs.started,
                "M": [None if v == MAX_SEQ else v for v in rs.min_so_far],
                "W": [x for pos, x in enumerate(members) if rs.heard >> pos & 1],
            }

        state: dict[str, Any] = {
            "id": self.me,
            "level": self.level,
            "senders": self.senders,
            "R": list(self.r_array()),
            "S": list(self.stability),
            self.level: round_state(self.main, self.group),
            "buffer": {"count": self.buffer.count, "bytes": self.buffer.bytes},
            "counters": dict(sorted(self.counters.items())),
        }
        if self.local_stability is not None:
            state["local_stability"] = list(self.local_stability)
            state["local_stability_round"] = self.local_stability_round
        if self.sc is not None:
            state["sc"] = round_state(self.sc, list(range(self._all_groups.bit_length())))
        if self.fd is not None:
            state["failed"] = sorted(self.fd.failed)
            state["suspected"] = sorted(self.fd.suspected)
            state["L"] = list(self.fd.live)
            if self.rejoin is not None:
                state["admitting"] = sorted(self._admit_after)
        return state

CORE = GsgcNode
