"""QSM's messages after the common envelope (`gossipnode.wire`); protocol id 10.

QSM header (network byte order, 6 bytes): region u16 (the region's index in the region views), seq u32 (DATA,
RETRANS, FORWARD: the origin's sequence number, per origin from 1, across its groups; TOKEN, ACK: the token
round; PULL, NAK: 0).

Bodies (counts first, checked against the length before use; ranges are inclusive (first u32, last u32) pairs of
regional sequence numbers):

    DATA, RETRANS, FORWARD  origin u16, group u16 (index in the config's groups), rseq u32 (the packet's number in
                            the (origin, region) sequence), kind u8 (FORWARD: 0 push, 1 pull; else 0), payload
    TOKEN    phase u8 (0: entering a partition at its leader, 1: inside a partition's ring, 2: home to the region
             leader), rate u32 (min μ_rec so far, milli-packets/s; 0xFFFFFFFF: none), m u8 entries, each:
             origin u16, cutoff u32, purge u32, replicated u32 (last round's caching-stable prefix: pulls from
             outside a packet's partition wait for it), max_seen u32, stable u32, cstable u32 (this round's running
             caching-stable prefix), npn u8, nprev u8,
             npn ranges (the partition's running NAK intersection), nprev ranges (the predecessor's NAK set)
    PULL     origin u16, count u8, ranges
    NAK      origin u16, partition u8, count u8, ranges (missed by the whole partition: the collective NAK)
    ACK      origin u16, stable u32 (the region-wide stable prefix), cached u32 (the caching-stable prefix: every
             packet up to it is held by all its caching replicas; the sender frees up to it), max_seen u32, rate u32
             (μ_rec = min μ_rec^(i) / m, milli-packets/s; 0xFFFFFFFF: unknown), m u8

A DATA packet is 24 bytes of headers (envelope 9 + header 6 + 9) plus its payload.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import IntEnum

from gossipnode import wire
from gossipnode.wire import F, Layout

PROTOCOL_ID = 10
HEADER = struct.Struct("!HI")
DATA = struct.Struct("!HHIB")
ENTRY = struct.Struct("!HIIIIIIBB")
RANGE = struct.Struct("!II")
TOKEN = struct.Struct("!BIB")
PULL = struct.Struct("!HB")
NAK = struct.Struct("!HBB")
ACK = struct.Struct("!HIIIIB")
HEADER_SIZE = wire.ENVELOPE_SIZE + HEADER.size
MIN_DATA_SIZE = HEADER_SIZE + DATA.size
NO_RATE = 0xFFFFFFFF
DecodeError = wire.DecodeError
Ranges = tuple[tuple[int, int], ...]


class MsgType(IntEnum):
    DATA = 1      # the origin's multicast into a region
    RETRANS = 2   # the origin's re-multicast (a collective NAK, or its timeout)
    FORWARD = 3   # a cached packet from a peer: push or pull
    TOKEN = 4
    PULL = 5
    NAK = 6
    ACK = 7


@dataclass(frozen=True, slots=True)
class Data:
    sender: int
    region: int
    seq: int
    origin: int
    group: int
    rseq: int
    payload: bytes
    type: MsgType = MsgType.DATA
    kind: int = 0   # FORWARD: 0 push, 1 pull


@dataclass(slots=True)
class Entry:
    """One origin's part of the token."""

    origin: int
    cutoff: int = 0       # the largest rseq seen in the region last round: packets up to it count as missing
    purge: int = 0        # stable in the region last round: caches drop packets up to it
    max_seen: int = 0     # the largest rseq received anywhere in the region this round (so far)
    stable: int = 0xFFFFFFFF  # min over the nodes visited of their contiguous prefix (R)
    pnak: Ranges = ()     # the current partition's NAK intersection so far
    prev: Ranges = ()     # the NAK set of the node that passed the token, inside a partition
    replicated: int = 0   # caching-stable last round: a node pulls a packet from another partition only up to it
    cstable: int = 0xFFFFFFFF  # min over the nodes visited of membership.caching_prefix (this round)


@dataclass(slots=True)
class Token:
    sender: int
    region: int
    round: int
    phase: int
    rate: int = NO_RATE
    entries: list[Entry] = field(default_factory=list)
    type: MsgType = MsgType.TOKEN


@dataclass(frozen=True, slots=True)
class Pull:
    sender: int
    region: int
    origin: int
    ranges: Ranges
    type: MsgType = MsgType.PULL


@dataclass(frozen=True, slots=True)
class Nak:
    sender: int
    region: int
    origin: int
    partition: int
    ranges: Ranges
    type: MsgType = MsgType.NAK


@dataclass(frozen=True, slots=True)
class Ack:
    sender: int
    region: int
    round: int
    origin: int
    stable: int
    max_seen: int
    rate: int
    m: int
    cached: int = 0       # the caching-stable prefix: the sender stops buffering packets up to it
    type: MsgType = MsgType.ACK


def _ranges(rs: Ranges) -> bytes:
    return b"".join(RANGE.pack(a, b) for a, b in rs)


def _encode(msg) -> tuple[int, int, bytes]:
    try:
        t = msg.type
        if t in (MsgType.DATA, MsgType.RETRANS, MsgType.FORWARD):
            body = HEADER.pack(msg.region, msg.seq) + DATA.pack(msg.origin, msg.group, msg.rseq, msg.kind) + \
                msg.payload
        elif t == MsgType.TOKEN:
            parts = [HEADER.pack(msg.region, msg.round), TOKEN.pack(msg.phase, msg.rate, len(msg.entries))]
            for e in msg.entries:
                parts.append(ENTRY.pack(e.origin, e.cutoff, e.purge, e.replicated, e.max_seen, e.stable, e.cstable,
                                        len(e.pnak), len(e.prev)))
                parts.append(_ranges(e.pnak) + _ranges(e.prev))
            body = b"".join(parts)
        elif t == MsgType.PULL:
            body = HEADER.pack(msg.region, 0) + PULL.pack(msg.origin, len(msg.ranges)) + _ranges(msg.ranges)
        elif t == MsgType.NAK:
            body = HEADER.pack(msg.region, 0) + NAK.pack(msg.origin, msg.partition, len(msg.ranges)) + \
                _ranges(msg.ranges)
        elif t == MsgType.ACK:
            body = HEADER.pack(msg.region, msg.round) + ACK.pack(msg.origin, msg.stable, msg.cached, msg.max_seen,
                                                                 msg.rate, msg.m)
        else:
            raise ValueError(f"unknown QSM message type {t!r}")
        return int(t), msg.sender, body
    except struct.error as exc:
        raise ValueError(f"cannot encode QSM {msg.type.name}: {exc}") from None


def _read_ranges(rest: memoryview, off: int, n: int, what: str) -> tuple[Ranges, int]:
    end = off + n * RANGE.size
    if len(rest) < end:
        raise DecodeError(f"{what}: {n} ranges need {end} bytes, the packet has {len(rest)}")
    out = []
    for i in range(n):
        a, b = RANGE.unpack_from(rest, off + i * RANGE.size)
        if a == 0 or a > b:
            raise DecodeError(f"{what}: bad range ({a}, {b})")
        out.append((a, b))
    return tuple(out), end


def _decode(mtype: int, sender: int, rest: memoryview):
    t = MsgType(mtype)
    if len(rest) < HEADER.size:
        raise DecodeError(f"{t.name}: {len(rest)} bytes, the QSM header alone is {HEADER.size}")
    region, seq = HEADER.unpack_from(rest)
    off = HEADER.size
    if t in (MsgType.DATA, MsgType.RETRANS, MsgType.FORWARD):
        if len(rest) < off + DATA.size:
            raise DecodeError(f"{t.name}: {len(rest)} bytes, its headers alone are {off + DATA.size}")
        origin, group, rseq, kind = DATA.unpack_from(rest, off)
        if seq == 0 or rseq == 0:
            raise DecodeError(f"{t.name}: seq 0 (seqs start at 1)")
        return Data(sender, region, seq, origin, group, rseq, bytes(rest[off + DATA.size:]), t, kind)
    if t == MsgType.TOKEN:
        if len(rest) < off + TOKEN.size:
            raise DecodeError(f"TOKEN: {len(rest)} bytes, its headers alone are {off + TOKEN.size}")
        phase, rate, m = TOKEN.unpack_from(rest, off)
        off += TOKEN.size
        entries = []
        for _ in range(m):
            if len(rest) < off + ENTRY.size:
                raise DecodeError(f"TOKEN: truncated entry at byte {off}")
            origin, cutoff, purge, replicated, max_seen, stable, cstable, npn, nprev = ENTRY.unpack_from(rest, off)
            pnak, off = _read_ranges(rest, off + ENTRY.size, npn, "TOKEN")
            prev, off = _read_ranges(rest, off, nprev, "TOKEN")
            entries.append(Entry(origin, cutoff, purge, max_seen, stable, pnak, prev, replicated, cstable))
        if off != len(rest):
            raise DecodeError(f"TOKEN: {len(rest) - off} trailing bytes")
        return Token(sender, region, seq, phase, rate, entries)
    if t == MsgType.PULL:
        if len(rest) < off + PULL.size:
            raise DecodeError("PULL: truncated")
        origin, n = PULL.unpack_from(rest, off)
        ranges, end = _read_ranges(rest, off + PULL.size, n, "PULL")
        if end != len(rest):
            raise DecodeError("PULL: trailing bytes")
        return Pull(sender, region, origin, ranges)
    if t == MsgType.NAK:
        if len(rest) < off + NAK.size:
            raise DecodeError("NAK: truncated")
        origin, part, n = NAK.unpack_from(rest, off)
        ranges, end = _read_ranges(rest, off + NAK.size, n, "NAK")
        if end != len(rest):
            raise DecodeError("NAK: trailing bytes")
        return Nak(sender, region, origin, part, ranges)
    if len(rest) != off + ACK.size:
        raise DecodeError(f"ACK: {len(rest)} bytes, expected {off + ACK.size}")
    origin, stable, cached, max_seen, rate, m = ACK.unpack_from(rest, off)
    return Ack(sender, region, seq, origin, stable, max_seen, rate, m, cached)


def _header_columns(mtype: int, rest: memoryview) -> dict[str, int | None]:
    if len(rest) < HEADER.size:
        raise DecodeError(f"{len(rest)} bytes after the envelope, the QSM header alone is {HEADER.size}")
    _region, seq = HEADER.unpack_from(rest)
    if mtype in (MsgType.TOKEN, MsgType.ACK):
        return {"seq": None, "round": seq}
    if mtype in (MsgType.PULL, MsgType.NAK):
        return {"seq": None, "round": None}
    return {"seq": seq, "round": None}


_DATA = (F("origin", "u16"), F("group", "u16"), F("rseq", "u32", doc="regional sequence number"),
         F("kind", "u8", doc="FORWARD: 0 push, 1 pull"), F("payload", "bytes", "rest"))

CODEC = wire.register(wire.Codec(
    id=PROTOCOL_ID, name="qsm", types=MsgType,
    header=(F("region", "u16"), F("seq", "u32", doc="data: the origin's seq; TOKEN, ACK: the round")),
    layouts=(
        Layout(MsgType.DATA, "DATA", _DATA, "the origin's multicast into a region", data=True),
        Layout(MsgType.RETRANS, "RETRANS", _DATA, "the origin's re-multicast (collective NAK or timeout)"),
        Layout(MsgType.FORWARD, "FORWARD", _DATA, "a cached packet pushed or pulled from a peer"),
        Layout(MsgType.TOKEN, "TOKEN", (F("phase", "u8"), F("rate", "u32", doc="min receive rate, mpkt/s"),
                                        F("m", "u8", doc="entries"),
                                        F("entries", "bytes", "rest", "per origin: origin, cutoff, purge, "
                                          "replicated, max_seen, stable, cstable, npn, nprev, ranges")),
               "the region's token"),
        Layout(MsgType.PULL, "PULL", (F("origin", "u16"), F("count", "u8"), F("ranges", "u32", "count*2"))),
        Layout(MsgType.NAK, "NAK", (F("origin", "u16"), F("partition", "u8"), F("count", "u8"),
                                    F("ranges", "u32", "count*2")), "a partition's collective NAK"),
        Layout(MsgType.ACK, "ACK", (F("origin", "u16"), F("stable", "u32", doc="stable in the region"),
                                    F("cached", "u32", doc="stable at the caching replicas"), F("max_seen", "u32"),
                                    F("rate", "u32", doc="μ_rec, mpkt/s"), F("m", "u8")),
               "the region leader's collective ACK"),
    ),
    encode=_encode, decode=_decode, header_columns=_header_columns,
))
for _cls in (Data, Token, Pull, Nak, Ack):
    _cls.CODEC = CODEC  # type: ignore[attr-defined]
