"""pbcast's messages after the common envelope (`gossipnode.wire`); protocol id 7.

Header (network byte order, 4 bytes after the 9-byte envelope that carries type and sender)::

    round    u32 the sender's anti-entropy round counter when it sent this packet

Bodies (counts first, checked against the body length before use):

    DATA     origin u16, root u16, seq u32, payload (the rest) -- the unreliable first phase (IP multicast, or a
             copy forwarded down the unicast tree rooted at `root`, the member that started the first phase)
    REPAIR   origin u16, root u16, seq u32, payload -- a retransmission of the second phase (solicited: pull;
             unsolicited: push)
    DIGEST   count u16, count x (origin u16, first u32, last u32): the message buffer's contents as inclusive
             ranges ('messages 5-11 and 13 from sender s')
    SOLICIT  count u16, count x (origin u16, first u32, last u32): the messages of a digest the receiver lacks

A DATA is 21 bytes of headers (envelope 9 + round 4 + origin 2 + root 2 + seq 4) plus its payload; a DIGEST or
SOLICIT is 15 + 10 per range.

The message classes are plain dataclasses; `vsync` (vsync over pbcast) reuses the bodies and the classes, under
its own codec, through `body_codec` below.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from gossipnode import wire
from gossipnode.wire import F, Layout

PROTOCOL_ID = 7
HEADER = struct.Struct("!I")
ITEM = struct.Struct("!HHI")      # origin, root, seq
RANGE = struct.Struct("!HII")     # origin, first, last
_U16 = struct.Struct("!H")
HEADER_SIZE = wire.ENVELOPE_SIZE + HEADER.size
MIN_DATA_SIZE = HEADER_SIZE + ITEM.size
MAX_RANGES = (wire.MAX_BODY - HEADER.size - 2) // RANGE.size
DecodeError = wire.DecodeError


class MsgType(IntEnum):
    DATA = 1
    REPAIR = 2
    DIGEST = 3
    SOLICIT = 4


@dataclass(frozen=True, slots=True)
class Data:
    """One buffered message (first phase DATA, or REPAIR when `repair`)."""

    sender: int
    round: int
    origin: int
    root: int
    seq: int
    payload: bytes
    repair: bool = False


@dataclass(frozen=True, slots=True)
class Digest:
    """DIGEST (`solicit` False) or SOLICIT: inclusive (origin, first, last) ranges."""

    sender: int
    round: int
    ranges: tuple[tuple[int, int, int], ...]
    solicit: bool = False


def encode_body(msg: Data | Digest) -> bytes:
    """The bytes after the envelope (header included) of a pbcast message; ValueError if it does not fit."""
    try:
        if isinstance(msg, Data):
            return HEADER.pack(msg.round) + ITEM.pack(msg.origin, msg.root, msg.seq) + msg.payload
        if len(msg.ranges) > MAX_RANGES:
            raise ValueError(f"{len(msg.ranges)} ranges exceed {MAX_RANGES}")
        for _o, first, last in msg.ranges:
            if not 1 <= first <= last:
                raise ValueError(f"range {first}..{last} is empty, reversed or starts at 0")
        return HEADER.pack(msg.round) + _U16.pack(len(msg.ranges)) + b"".join(RANGE.pack(*r) for r in msg.ranges)
    except struct.error as exc:
        raise ValueError(f"cannot encode {type(msg).__name__}: {exc}") from None


def decode_body(kind: str, sender: int, rest: memoryview, data_cls=None, digest_cls=None):
    """`kind`: DATA, REPAIR, DIGEST or SOLICIT; the classes to build (vsync passes its own subclasses)."""
    data_cls = data_cls or Data
    digest_cls = digest_cls or Digest
    if len(rest) < HEADER.size:
        raise DecodeError(f"{kind}: {len(rest)} bytes after the envelope, the round alone is {HEADER.size}")
    (rnd,) = HEADER.unpack_from(rest)
    body = rest[HEADER.size:]
    if kind in ("DATA", "REPAIR"):
        if len(body) < ITEM.size:
            raise DecodeError(f"{kind}: body of {len(body)} bytes has no origin/root/seq")
        origin, root, seq = ITEM.unpack_from(body)
        if seq == 0:
            raise DecodeError(f"{kind}: seq 0 (seqs start at 1)")
        return data_cls(sender, rnd, origin, root, seq, bytes(body[ITEM.size:]), kind == "REPAIR")
    if len(body) < 2:
        raise DecodeError(f"{kind}: body of {len(body)} bytes has no range count")
    (count,) = _U16.unpack_from(body)
    if len(body) != 2 + RANGE.size * count:
        raise DecodeError(f"{kind} with {count} ranges: body must be {2 + RANGE.size * count} bytes, got {len(body)}")
    ranges = tuple(RANGE.unpack_from(body, 2 + RANGE.size * i) for i in range(count))
    for _o, first, last in ranges:
        if not 1 <= first <= last:
            raise DecodeError(f"{kind}: range {first}..{last} is empty, reversed or starts at 0")
    return digest_cls(sender, rnd, ranges, kind == "SOLICIT")


def kind_of(msg: Data | Digest) -> str:
    if isinstance(msg, Data):
        return "REPAIR" if msg.repair else "DATA"
    return "SOLICIT" if msg.solicit else "DIGEST"


def _encode(msg: Data | Digest) -> tuple[int, int, bytes]:
    return int(MsgType[kind_of(msg)]), msg.sender, encode_body(msg)


def _decode(mtype: int, sender: int, rest: memoryview) -> Data | Digest:
    return decode_body(MsgType(mtype).name, sender, rest)


def header_columns(mtype_name: str, rest: memoryview) -> dict[str, int | None]:
    if len(rest) < HEADER.size:
        raise DecodeError(f"{len(rest)} bytes after the envelope, the pbcast header alone is {HEADER.size}")
    seq = None
    if mtype_name in ("DATA", "REPAIR") and len(rest) >= HEADER.size + ITEM.size:
        seq = ITEM.unpack_from(rest, HEADER.size)[2]
    return {"seq": seq, "round": HEADER.unpack_from(rest)[0]}


_ITEM_F = (F("origin", "u16"), F("root", "u16", doc="first-phase root"), F("seq", "u32"),
           F("payload", "bytes", "rest"))


def layouts(types: type[IntEnum], prefix: str = "") -> tuple[Layout, ...]:
    """The four pbcast layouts under `types` (names DATA, REPAIR, DIGEST, SOLICIT with an optional prefix)."""
    ranges = (F("count", "u16"), F("ranges", "bytes", "rest", "(origin u16, first u32, last u32) x count"))
    return (
        Layout(types[prefix + "DATA"], prefix + "DATA", _ITEM_F, "first phase: unreliable multicast", data=True),
        Layout(types[prefix + "REPAIR"], prefix + "REPAIR", _ITEM_F, "anti-entropy retransmission", data=True),
        Layout(types[prefix + "DIGEST"], prefix + "DIGEST", ranges, "anti-entropy digest of the message buffer"),
        Layout(types[prefix + "SOLICIT"], prefix + "SOLICIT", ranges, "the digest's messages the receiver lacks"),
    )


CODEC = wire.register(wire.Codec(
    id=PROTOCOL_ID, name="pbcast", types=MsgType, header=(F("round", "u32"),),
    layouts=layouts(MsgType),
    encode=_encode, decode=_decode,
    header_columns=lambda t, rest: header_columns(MsgType(t).name, rest),
))
Data.CODEC = CODEC  # type: ignore[attr-defined]
Digest.CODEC = CODEC  # type: ignore[attr-defined]
