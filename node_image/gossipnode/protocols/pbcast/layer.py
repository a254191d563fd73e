"""The Bimodal Multicast engine (§3 of seed 001; Birman et al. 1999), pure and reusable: `vsync` runs it below
its Vsync layer with its own message classes.

- First phase: unreliable. IP multicast (one datagram to a group), or the unicast fallback: the members in id
  order rotated to start at the root form a tree of `tree_fanout`; every member that gets a first-phase DATA
  forwards it to its children. Or none (anti-entropy alone, §5.1's analysis).
- Message buffer: every message that arrives (first phase or repair) enters it with the round of arrival and is
  garbage collected `gc_rounds` (= ceil(C log2 n)) rounds later.
- Anti-entropy: every round (this member's own clock: a random point inside each round, not synchronised across
  members) a digest of the buffer (inclusive ranges per origin) goes to `fanout` random members. The receiver
  solicits what it lacks (pull) and sends what it holds, young, and the digest lacks (push), per `mode`; a
  solicitation is answered with retransmissions from the buffer, at most `max_repairs` each.

Messages are delivered (returned as `Delivery`) on first arrival; duplicates are counted, never delivered again.

Blocking (a hook for vsync, whose view changes block "the multicast dissemination", seed 001 §5.2):
`block(origin, upto)` holds back the anti-entropy of `origin`'s messages 1..upto — digests leave them out, they are
neither solicited, pushed nor served — until `unblock(origin)`; arrivals are still accepted, later messages of
the origin and other origins gossip as usual. pbcast itself never blocks.
"""
from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from dataclasses import dataclass
from typing import Any

from gossipnode.clocks import StepClock
from gossipnode.protocols.base import BadMessage, Output
from gossipnode.workload import Receipts

from .wire import MAX_RANGES, Data, Digest


@dataclass(frozen=True, slots=True)
class Delivery:
    origin: int
    seq: int
    payload: bytes
    sender: int      # the member the packet came from
    root: int        # the member that started its first phase
    phase: str       # "first" (first-phase DATA) or "repair" (anti-entropy REPAIR)
    round: int       # this member's round count at arrival


class Pbcast:
    def __init__(self, me: int, members: list[int], origins: list[int], params: Any, group: str | None,
                 rng, now: float, data_cls: type = Data, digest_cls: type = Digest) -> None:
        self.me = me
        self.p = params
        self.group = group
        self.rng = rng
        self.data_cls, self.digest_cls = data_cls, digest_cls
        self.receipts = {o: Receipts() for o in origins}
        self.buffer: dict[tuple[int, int], tuple[bytes, int, int]] = {}  # (origin, seq) -> (payload, root, round)
        self.round = 0
        self.clock = StepClock(params.round_s, now, rng)
        self.counters: Counter[str] = Counter()
        self.blocked: dict[int, int] = {}   # origin -> its messages 1..upto are held back (vsync's view changes)
        self.set_members(members)

    # ---- blocking (vsync) ------------------------------------------------------------------------------------

    def block(self, origin: int, upto: int) -> None:
        """Hold back the anti-entropy of `origin`'s messages 1..upto (digest, solicit, push, serve)."""
        self.blocked[origin] = upto

    def unblock(self, origin: int) -> None:
        self.blocked.pop(origin, None)

    # ---- membership ------------------------------------------------------------------------------------------

    def set_members(self, members: list[int]) -> None:
        self.members = sorted(members)
        self._index = {m: i for i, m in enumerate(self.members)}
        self.peers = [m for m in self.members if m != self.me]
        self.gc_rounds = self.p.gc_rounds(len(self.members))

    def children(self, root: int) -> list[int]:
        """This member's children in the unicast tree rooted at `root` (members in id order, rotated)."""
        n = len(self.members)
        if root not in self._index or self.me not in self._index:
            return []
        base = self._index[root]
        pos = (self._index[self.me] - base) % n
        f = self.p.tree_fanout
        return [self.members[(base + c) % n] for c in range(pos * f + 1, min(n, pos * f + f + 1))]

    # ---- the first phase -------------------------------------------------------------------------------------

    def publish(self, origin: int, seq: int, payload: bytes, out: Output) -> None:
        """Multicast a new message of `origin` (this member is the first phase's root)."""
        if not self.receipts[origin].add(seq):
            raise ValueError(f"message {origin}/{seq} published twice")
        self.buffer[(origin, seq)] = (payload, self.me, self.round)
        self._first_phase(self.data_cls(self.me, self.round, origin, self.me, seq, payload), out)

    def _first_phase(self, msg: Data, out: Output) -> None:
        mode = self.p.first_phase
        if mode == "mcast":
            out.mcast.append((self.group, msg))
            self.counters["sent_data"] += 1
        elif mode == "tree":
            kids = self.children(msg.root)
            out.send.extend((k, msg) for k in kids)
            self.counters["sent_data"] += len(kids)

    # ---- receiving -------------------------------------------------------------------------------------------

    def receive(self, msg: Data | Digest, out: Output) -> Delivery | None:
        if isinstance(msg, Data):
            return self._data(msg, out)
        for origin, _first, _last in msg.ranges:
            if origin not in self.receipts:
                raise BadMessage(f"{'SOLICIT' if msg.solicit else 'DIGEST'} names origin {origin}, not a sender")
        if msg.solicit:
            self.counters["recv_solicit"] += 1
            self._serve(msg, out)
        else:
            self.counters["recv_digest"] += 1
            self._compare(msg, out)
        return None

    def _data(self, msg: Data, out: Output) -> Delivery | None:
        receipts = self.receipts.get(msg.origin)
        if receipts is None:
            raise BadMessage(f"{'REPAIR' if msg.repair else 'DATA'} of origin {msg.origin}, not a sender")
        kind = "repair" if msg.repair else "data"
        if not receipts.add(msg.seq):
            self.counters[f"duplicate_{kind}"] += 1
            return None
        self.counters[f"recv_{kind}"] += 1
        self.buffer[(msg.origin, msg.seq)] = (msg.payload, msg.root, self.round)
        if not msg.repair and self.p.first_phase == "tree":
            fwd = self.data_cls(self.me, self.round, msg.origin, msg.root, msg.seq, msg.payload)
            self._first_phase(fwd, out)
        return Delivery(msg.origin, msg.seq, msg.payload, msg.sender, msg.root,
                        "repair" if msg.repair else "first", self.round)

    def has(self, origin: int, seq: int) -> bool:
        r = self.receipts[origin]
        return seq <= r.r or seq in r.ahead

    def _compare(self, digest: Digest, out: Output) -> None:
        """A digest from a peer: solicit what it lists and we lack (pull); push what we hold young and it lacks."""
        if self.p.mode in ("pull", "push_pull"):
            wanted: list[tuple[int, int, int]] = []
            budget = self.p.max_repairs
            for origin, first, last in digest.ranges:
                r = self.receipts[origin]
                seq = max(first, r.r + 1, self.blocked.get(origin, 0) + 1)
                while seq <= last and budget > 0:
                    if seq in r.ahead:
                        seq += 1
                        continue
                    if wanted and wanted[-1][0] == origin and wanted[-1][2] == seq - 1:
                        wanted[-1] = (origin, wanted[-1][1], seq)
                    else:
                        wanted.append((origin, seq, seq))
                    budget -= 1
                    seq += 1
                if budget == 0:
                    break
            if wanted:
                out.send.append((digest.sender, self.digest_cls(self.me, self.round, tuple(wanted), True)))
                self.counters["sent_solicit"] += 1
        if self.p.mode in ("push", "push_pull"):
            listed: dict[int, list[tuple[int, int]]] = {}
            for origin, first, last in digest.ranges:
                listed.setdefault(origin, []).append((first, last))
            starts = {o: sorted(rs) for o, rs in listed.items()}
            young = self.round - self.gc_rounds // 2
            pushed = 0
            for (origin, seq), (payload, root, arrived) in self.buffer.items():
                if arrived < young or seq <= self.blocked.get(origin, 0):
                    continue
                rs = starts.get(origin, [])
                i = bisect_right(rs, (seq, 0xFFFFFFFF)) - 1
                if i >= 0 and rs[i][0] <= seq <= rs[i][1]:
                    continue
                out.send.append((digest.sender, self.data_cls(self.me, self.round, origin, root, seq, payload,
                                                              True)))
                pushed += 1
                if pushed == self.p.max_repairs:
                    break
            self.counters["sent_repair"] += pushed
            self.counters["sent_push"] += pushed

    def _serve(self, solicit: Digest, out: Output) -> None:
        sent = 0
        for origin, first, last in solicit.ranges:
            first = max(first, self.blocked.get(origin, 0) + 1)
            for seq in range(first, min(last, first + self.p.max_repairs) + 1):
                held = self.buffer.get((origin, seq))
                if held is None:
                    continue
                payload, root, _arrived = held
                out.send.append((solicit.sender, self.data_cls(self.me, self.round, origin, root, seq, payload,
                                                               True)))
                sent += 1
                if sent == self.p.max_repairs:
                    self.counters["sent_repair"] += sent
                    return
        self.counters["sent_repair"] += sent

    # ---- rounds ----------------------------------------------------------------------------------------------

    def digest(self) -> tuple[tuple[int, int, int], ...]:
        """The buffer as inclusive ranges per origin (the newest `max_ranges` if there are more)."""
        seqs: dict[int, list[int]] = {}
        for origin, seq in self.buffer:
            if seq > self.blocked.get(origin, 0):
                seqs.setdefault(origin, []).append(seq)
        ranges: list[tuple[int, int, int]] = []
        for origin in sorted(seqs):
            run_first = run_last = None
            for seq in sorted(seqs[origin]):
                if run_last is not None and seq == run_last + 1:
                    run_last = seq
                    continue
                if run_first is not None:
                    ranges.append((origin, run_first, run_last))
                run_first = run_last = seq
            ranges.append((origin, run_first, run_last))
        limit = min(self.p.max_ranges, MAX_RANGES)
        return tuple(ranges[-limit:])

    def next_wakeup(self) -> float:
        return self.clock.due

    def tick(self, now: float, out: Output) -> tuple[int, int]:
        """Run the round if due: GC, then a digest to `fanout` random members. Returns (rounds skipped by a
        stall, messages garbage collected)."""
        if now < self.clock.due:
            return 0, 0
        skipped = self.clock.advance(now)
        self.round += 1 + skipped
        horizon = self.round - self.gc_rounds
        stale = [key for key, (_p, _r, arrived) in self.buffer.items() if arrived <= horizon]
        for key in stale:
            del self.buffer[key]
        if self.peers:
            digest = self.digest()
            for peer in self.rng.sample(self.peers, min(self.p.fanout, len(self.peers))):
                out.send.append((peer, self.digest_cls(self.me, self.round, digest, False)))
                self.counters["sent_digest"] += 1
        return skipped, len(stale)
