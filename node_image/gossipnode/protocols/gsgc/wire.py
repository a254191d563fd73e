"""GSGC's messages: its header and bodies after the common envelope (`gossipnode.wire`).

GSGC header (network byte order, 8 bytes, after the 9-byte envelope that carries type and sender)::

    seq      u32 DATA/REPAIR: the data message's sequence number (per origin, from 1);
                 other types: the sender's control-message counter (with sender and type, names a packet)
    round    u32 the sender's current round (SC_GOSSIP: its SC round; STABLE: the round that completed; DATA: 0)

Bodies (network byte order; counts come first and are checked against the body length before use):

    DATA, REPAIR   origin u16, payload (the rest). REPAIR is a retransmission; sender may differ from origin.
    NAK            origin u16, count u16, count x (first u32, last u32): inclusive ranges of missing seqs
    GOSSIP,        m u16, nbits u16, M: m x u32, S: m x u32, W: ceil(nbits / 8) bytes
    SC_GOSSIP      (W bit i is byte i // 8, bit i % 8 counted from the least significant; unused bits are 0)
    GOSSIP_M,      m u16, nbits u16, M: m x u32, W: ceil(nbits / 8) bytes -- the same without S
    SC_GOSSIP_M    (`piggyback_stability: false`: S travels only in STABLE, as in the paper's optimised scheme)
    STABLE         m u16, S: m x u32
    LIVE           n u16, L: n x u8
    LOCAL_STABLE   m u16, A: m x u32 -- a local group's stability array (§5), from the member that constructed
                   it (round: the local round) to its group's stability controllers

Sizes: GOSSIP 21 + 8m + ceil(nbits/8); GOSSIP_M 21 + 4m + ceil(nbits/8), which is the paper's gossip
(§4.1: 32-byte header + 4m + n/8 + 4-byte round = 236 + n/8 for m = 50, n/8 rounded up) minus 15 bytes: our
9-byte envelope, 4-byte packet counter and the 2 + 2 bytes of counts (17 + 4 with the round) against its 32-byte
header (+ its round); STABLE and LOCAL_STABLE 19 + 4m.

M, S are indexed by sender position (the config's `senders` order); MAX_SEQ in M means "no information".
A packet is 17 bytes of headers (envelope 9 + seq/round 8) plus its body.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum
from functools import lru_cache

from gossipnode import wire
from gossipnode.wire import F, Layout

PROTOCOL_ID = 1
HEADER = struct.Struct("!II")  # GSGC's own header after the envelope: seq, round
HEADER_SIZE = wire.ENVELOPE_SIZE + HEADER.size  # bytes before the body
MAX_SEQ = 0xFFFFFFFF
MAX_BODY = wire.MAX_BODY - HEADER.size
MIN_DATA_SIZE = HEADER_SIZE + 2  # headers + origin field: a DATA message with an empty payload
DecodeError = wire.DecodeError


class MsgType(IntEnum):
    DATA = 1
    REPAIR = 2
    NAK = 3
    GOSSIP = 4
    SC_GOSSIP = 5
    STABLE = 6
    LIVE = 7
    GOSSIP_M = 8  # GOSSIP without S
    SC_GOSSIP_M = 9  # SC_GOSSIP without S
    LOCAL_STABLE = 10


GOSSIP_TYPES = (MsgType.GOSSIP, MsgType.GOSSIP_M)  # the main level's gossip (global, or in a local group)
SC_GOSSIP_TYPES = (MsgType.SC_GOSSIP, MsgType.SC_GOSSIP_M)  # among stability controllers
WITHOUT_S = (MsgType.GOSSIP_M, MsgType.SC_GOSSIP_M)


@dataclass(frozen=True, slots=True)
class Data:
    origin: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class Nak:
    origin: int
    ranges: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class Gossip:
    """Figure 2's gossip (M, W, S); the round travels in the header. `stability` is None in GOSSIP_M and
    SC_GOSSIP_M (no piggybacked S) and a tuple in GOSSIP and SC_GOSSIP: the message type decides, never the
    value."""

    min_so_far: tuple[int, ...]
    stability: tuple[int, ...] | None
    heard: int  # W as a bitmask: bit i set = heard from member (or group) i
    nbits: int


@dataclass(frozen=True, slots=True)
class Stable:
    stability: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Live:
    live: bytes  # Figure 3's L, one saturating byte per member


Body = Data | Nak | Gossip | Stable | Live

BODY_OF = {
    MsgType.DATA: Data,
    MsgType.REPAIR: Data,
    MsgType.NAK: Nak,
    MsgType.GOSSIP: Gossip,
    MsgType.SC_GOSSIP: Gossip,
    MsgType.STABLE: Stable,
    MsgType.LIVE: Live,
    MsgType.GOSSIP_M: Gossip,
    MsgType.SC_GOSSIP_M: Gossip,
    MsgType.LOCAL_STABLE: Stable,
}


@dataclass(frozen=True, slots=True)
class Message:
    type: MsgType
    sender: int
    seq: int
    round: int
    body: Body


_U16 = struct.Struct("!H")
_U16x2 = struct.Struct("!HH")
_RANGE = struct.Struct("!II")


@lru_cache(maxsize=256)
def _u32s(count: int) -> struct.Struct:
    return struct.Struct(f"!{count}I")


def _bitmap_len(nbits: int) -> int:
    return (nbits + 7) // 8


def _encode_body(msg: Message) -> bytes:
    body = msg.body
    if type(body) is not BODY_OF[msg.type]:
        expected = BODY_OF[msg.type].__name__
        raise ValueError(f"{msg.type.name} message needs a {expected} body, got {type(body).__name__}")
    if isinstance(body, Data):
        return _U16.pack(body.origin) + body.payload
    if isinstance(body, Gossip):
        m = len(body.min_so_far)
        if msg.type in WITHOUT_S:
            if body.stability is not None:
                raise ValueError(f"{msg.type.name} carries no S (stability must be None)")
            arrays = body.min_so_far
        elif body.stability is None or len(body.stability) != m:
            raise ValueError(f"{msg.type.name}: M has {m} entries but S is {body.stability!r}")
        else:
            arrays = (*body.min_so_far, *body.stability)
        if body.nbits < 1 or body.heard >> body.nbits:
            raise ValueError(f"W {body.heard:#x} does not fit in nbits={body.nbits}")
        return (
            _U16x2.pack(m, body.nbits)
            + _u32s(len(arrays)).pack(*arrays)
            + body.heard.to_bytes(_bitmap_len(body.nbits), "little")
        )
    if isinstance(body, Live):
        return _U16.pack(len(body.live)) + body.live
    if isinstance(body, Stable):
        return _U16.pack(len(body.stability)) + _u32s(len(body.stability)).pack(*body.stability)
    return _U16x2.pack(body.origin, len(body.ranges)) + b"".join(_RANGE.pack(a, b) for a, b in body.ranges)


_GOSSIP_KINDS = (*GOSSIP_TYPES, *SC_GOSSIP_TYPES)


def _need(body: memoryview, size: int, what: str) -> None:
    if len(body) != size:
        raise DecodeError(f"{what}: body must be {size} bytes for its counts, got {len(body)}")


def _decode_body(kind: MsgType, body: memoryview) -> Body:
    if kind in (MsgType.DATA, MsgType.REPAIR):
        if len(body) < 2:
            raise DecodeError(f"{kind.name}: body of {len(body)} bytes has no origin field")
        return Data(_U16.unpack_from(body)[0], bytes(body[2:]))
    if kind in _GOSSIP_KINDS:
        if len(body) < 4:
            raise DecodeError(f"{kind.name}: body of {len(body)} bytes has no m/nbits fields")
        m, nbits = _U16x2.unpack_from(body)
        if nbits == 0:
            raise DecodeError(f"{kind.name}: W has nbits=0")
        words = m if kind in WITHOUT_S else 2 * m
        _need(body, 4 + 4 * words + _bitmap_len(nbits), f"{kind.name} with m={m}, nbits={nbits}")
        arrays = _u32s(words).unpack_from(body, 4)
        heard = int.from_bytes(body[4 + 4 * words :], "little")
        if heard >> nbits:
            raise DecodeError(f"{kind.name}: W has bits set beyond nbits={nbits}")
        return Gossip(arrays[:m], arrays[m:] if words > m else None, heard, nbits)
    if len(body) < 2:
        raise DecodeError(f"{kind.name}: body of {len(body)} bytes has no count field")
    count = _U16.unpack_from(body)[0]
    if kind is MsgType.LIVE:
        _need(body, 2 + count, f"LIVE with n={count}")
        return Live(bytes(body[2:]))
    if kind in (MsgType.STABLE, MsgType.LOCAL_STABLE):
        _need(body, 2 + 4 * count, f"{kind.name} with m={count}")
        return Stable(_u32s(count).unpack_from(body, 2))
    if len(body) < 4:
        raise DecodeError(f"NAK: body of {len(body)} bytes has no range count")
    origin, count = _U16x2.unpack_from(body)
    _need(body, 4 + 8 * count, f"NAK with {count} ranges")
    ranges = tuple(_RANGE.unpack_from(body, 4 + 8 * i) for i in range(count))
    for first, last in ranges:
        if first > last:
            raise DecodeError(f"NAK: range {first}..{last} is reversed")
    return Nak(origin, ranges)


def _encode(msg: Message) -> tuple[int, int, bytes]:
    try:
        body = _encode_body(msg)
        if len(body) > MAX_BODY:
            raise ValueError(f"body of {len(body)} bytes exceeds {MAX_BODY}")
        return int(msg.type), msg.sender, HEADER.pack(msg.seq, msg.round) + body
    except struct.error as exc:
        raise ValueError(f"cannot encode {msg.type.name} message: {exc}") from None


_PACKET = struct.Struct("!2sBBBHHII")  # envelope + GSGC header, packed at once on the hot path
_TYPE = {int(t): t for t in MsgType}


def _encode_packet(msg: Message) -> bytes:
    try:
        body = _encode_body(msg)
        if len(body) > MAX_BODY:
            raise ValueError(f"body of {len(body)} bytes exceeds {MAX_BODY}")
        return _PACKET.pack(wire.MAGIC, wire.VERSION, PROTOCOL_ID, msg.type, msg.sender, HEADER.size + len(body),
                            msg.seq, msg.round) + body
    except struct.error as exc:
        raise ValueError(f"cannot encode {msg.type.name} message: {exc}") from None


def _decode_packet(packet: bytes) -> Message | None:
    """The hot path: a packet whose envelope and header are in order decodes here in one unpack; anything else
    returns None and takes the generic path, which names the problem."""
    if len(packet) < HEADER_SIZE:
        return None
    magic, version, _proto, mtype, sender, length, seq, rnd = _PACKET.unpack_from(packet)
    kind = _TYPE.get(mtype)
    if magic != wire.MAGIC or version != wire.VERSION or kind is None or length != len(packet) - wire.ENVELOPE_SIZE:
        return None
    return Message(kind, sender, seq, rnd, _decode_body(kind, memoryview(packet)[HEADER_SIZE:]))


def _decode(mtype: int, sender: int, rest: memoryview) -> Message:
    kind = _TYPE[mtype]
    if len(rest) < HEADER.size:
        raise DecodeError(f"{kind.name}: {len(rest)} bytes after the envelope, the GSGC header alone is "
                          f"{HEADER.size}")
    seq, rnd = HEADER.unpack_from(rest)
    return Message(kind, sender, seq, rnd, _decode_body(kind, rest[HEADER.size:]))


def _header_columns(_mtype: int, rest: memoryview) -> dict[str, int | None]:
    if len(rest) < HEADER.size:
        raise DecodeError(f"{len(rest)} bytes after the envelope, the GSGC header alone is {HEADER.size}")
    seq, rnd = HEADER.unpack_from(rest)
    return {"seq": seq, "round": rnd}


_GOSSIP = (F("m", "u16", doc="senders"), F("nbits", "u16", doc="bits of W"), F("M", "u32", "m", "min so far"),
           F("S", "u32", "m", "stability"), F("W", "bytes", "bits:nbits", "heard-from bitmap"))
_GOSSIP_M = (_GOSSIP[0], _GOSSIP[1], _GOSSIP[2], _GOSSIP[4])
_DATA = (F("origin", "u16"), F("payload", "bytes", "rest"))
CODEC = wire.register(wire.Codec(
    id=PROTOCOL_ID, name="gsgc", types=MsgType,
    header=(F("seq", "u32"), F("round", "u32")),
    layouts=(
        Layout(MsgType.DATA, "DATA", _DATA, "a data message from its origin", data=True),
        Layout(MsgType.REPAIR, "REPAIR", _DATA, "a retransmission (answer to a NAK)", data=True),
        Layout(MsgType.NAK, "NAK", (F("origin", "u16"), F("count", "u16"), F("ranges", "u32", "count*2"))),
        Layout(MsgType.GOSSIP, "GOSSIP", _GOSSIP, "Figure 2's gossip"),
        Layout(MsgType.SC_GOSSIP, "SC_GOSSIP", _GOSSIP, "§5's gossip among stability controllers"),
        Layout(MsgType.STABLE, "STABLE", (F("m", "u16"), F("S", "u32", "m"))),
        Layout(MsgType.LIVE, "LIVE", (F("n", "u16"), F("L", "u8", "n", "Figure 3's live array"))),
        Layout(MsgType.GOSSIP_M, "GOSSIP_M", _GOSSIP_M, "Figure 2's gossip without the piggybacked S"),
        Layout(MsgType.SC_GOSSIP_M, "SC_GOSSIP_M", _GOSSIP_M, "§5's SC gossip without the piggybacked S"),
        Layout(MsgType.LOCAL_STABLE, "LOCAL_STABLE", (F("m", "u16"), F("A", "u32", "m", "local stability array")),
               "§5: a local group's array, to its stability controllers"),
    ),
    encode=_encode, decode=_decode, header_columns=_header_columns, encode_packet=_encode_packet,
    decode_packet=_decode_packet,
))
Message.CODEC = CODEC  # type: ignore[attr-defined]


def encode(msg: Message) -> bytes:
    """Serialise a GSGC message with its envelope; ValueError if a field does not fit the format."""
    return wire.encode(msg)


def decode(packet: bytes) -> Message:
    """Parse one GSGC packet (envelope included); DecodeError for anything malformed or of another protocol."""
    msg = wire.decode(packet)
    if not isinstance(msg, Message):
        raise DecodeError(f"not a GSGC packet: {type(msg).__name__}")
    return msg


def header_fields(packet: bytes) -> dict[str, int | str | None]:
    return wire.header_fields(packet)
