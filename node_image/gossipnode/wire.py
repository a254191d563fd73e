"""The node's wire format: a fixed 16-byte header followed by a body that depends on the message type.

Used by the node and by the analysis (which decodes captured packets with it), so it has no other dependency.

Header (network byte order, 16 bytes)::

    magic    2s  b"GS"
    version  u8  VERSION
    type     u8  MsgType
    sender   u16 member id of the node that sent this packet
    seq      u32 DATA/REPAIR: the data message's sequence number (per origin, from 1);
                 other types: the sender's control-message counter (with sender and type, names a packet)
    round    u32 the sender's current round (SC_GOSSIP: its SC round; STABLE: the round that completed; DATA: 0)
    length   u16 body length in bytes; must equal the rest of the packet exactly

Bodies (network byte order; counts come first and are checked against the body length before use):

    DATA, REPAIR   origin u16, payload (the rest). REPAIR is a retransmission; sender may differ from origin.
    NAK            origin u16, count u16, count x (first u32, last u32): inclusive ranges of missing seqs
    GOSSIP,        m u16, nbits u16, M: m x u32, S: m x u32, W: ceil(nbits / 8) bytes
    SC_GOSSIP      (W bit i is byte i // 8, bit i % 8 counted from the least significant; unused bits are 0)
    STABLE         m u16, S: m x u32
    LIVE           n u16, L: n x u8

M, S are indexed by sender position (the config's `senders` order); MAX_SEQ in M means "no information".
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum
from functools import lru_cache

MAGIC = b"GS"
VERSION = 1
HEADER = struct.Struct("!2sBBHIIH")
HEADER_SIZE = HEADER.size
MAX_SEQ = 0xFFFFFFFF
MAX_BODY = 0xFFFF
HEADER_FIELDS = ("version", "type", "type_name", "sender", "seq", "round", "length")


class MsgType(IntEnum):
    DATA = 1
    REPAIR = 2
    NAK = 3
    GOSSIP = 4
    SC_GOSSIP = 5
    STABLE = 6
    LIVE = 7


class DecodeError(ValueError):
    """The bytes are not a well-formed packet of this protocol version; the message says why."""


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
    """Figure 2's gossip (M, W, S); the round travels in the header."""

    min_so_far: tuple[int, ...]
    stability: tuple[int, ...]
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
        if len(body.stability) != m:
            raise ValueError(f"M has {m} entries but S has {len(body.stability)}")
        if body.nbits < 1 or body.heard >> body.nbits:
            raise ValueError(f"W {body.heard:#x} does not fit in nbits={body.nbits}")
        return (
            _U16x2.pack(m, body.nbits)
            + _u32s(2 * m).pack(*body.min_so_far, *body.stability)
            + body.heard.to_bytes(_bitmap_len(body.nbits), "little")
        )
    if isinstance(body, Live):
        return _U16.pack(len(body.live)) + body.live
    if isinstance(body, Stable):
        return _U16.pack(len(body.stability)) + _u32s(len(body.stability)).pack(*body.stability)
    return _U16x2.pack(body.origin, len(body.ranges)) + b"".join(_RANGE.pack(a, b) for a, b in body.ranges)


def encode(msg: Message) -> bytes:
    """Serialise a message; ValueError if a field does not fit the format."""
    try:
        body = _encode_body(msg)
        if len(body) > MAX_BODY:
            raise ValueError(f"body of {len(body)} bytes exceeds {MAX_BODY}")
        return HEADER.pack(MAGIC, VERSION, msg.type, msg.sender, msg.seq, msg.round, len(body)) + body
    except struct.error as exc:
        raise ValueError(f"cannot encode {msg.type.name} message: {exc}") from None


def _parse_header(packet: bytes) -> tuple[MsgType, int, int, int, int]:
    if len(packet) < HEADER_SIZE:
        raise DecodeError(f"truncated packet: {len(packet)} bytes, the header alone is {HEADER_SIZE}")
    magic, version, mtype, sender, seq, rnd, length = HEADER.unpack_from(packet)
    if magic != MAGIC:
        raise DecodeError(f"foreign packet: magic {magic!r}, expected {MAGIC!r}")
    if version != VERSION:
        raise DecodeError(f"unsupported wire version {version} (this decoder speaks version {VERSION})")
    try:
        kind = MsgType(mtype)
    except ValueError:
        raise DecodeError(f"unknown message type {mtype}") from None
    actual = len(packet) - HEADER_SIZE
    if length != actual:
        what = "truncated" if length > actual else "trailing bytes"
        raise DecodeError(f"{what}: header says the body has {length} bytes, the packet carries {actual}")
    return kind, sender, seq, rnd, length


def _need(body: memoryview, size: int, what: str) -> None:
    if len(body) != size:
        raise DecodeError(f"{what}: body must be {size} bytes for its counts, got {len(body)}")


def _decode_body(kind: MsgType, body: memoryview) -> Body:
    if kind in (MsgType.DATA, MsgType.REPAIR):
        if len(body) < 2:
            raise DecodeError(f"{kind.name}: body of {len(body)} bytes has no origin field")
        return Data(_U16.unpack_from(body)[0], bytes(body[2:]))
    if kind in (MsgType.GOSSIP, MsgType.SC_GOSSIP):
        if len(body) < 4:
            raise DecodeError(f"{kind.name}: body of {len(body)} bytes has no m/nbits fields")
        m, nbits = _U16x2.unpack_from(body)
        if nbits == 0:
            raise DecodeError(f"{kind.name}: W has nbits=0")
        _need(body, 4 + 8 * m + _bitmap_len(nbits), f"{kind.name} with m={m}, nbits={nbits}")
        arrays = _u32s(2 * m).unpack_from(body, 4)
        heard = int.from_bytes(body[4 + 8 * m :], "little")
        if heard >> nbits:
            raise DecodeError(f"{kind.name}: W has bits set beyond nbits={nbits}")
        return Gossip(arrays[:m], arrays[m:], heard, nbits)
    if len(body) < 2:
        raise DecodeError(f"{kind.name}: body of {len(body)} bytes has no count field")
    count = _U16.unpack_from(body)[0]
    if kind is MsgType.LIVE:
        _need(body, 2 + count, f"LIVE with n={count}")
        return Live(bytes(body[2:]))
    if kind is MsgType.STABLE:
        _need(body, 2 + 4 * count, f"STABLE with m={count}")
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


def decode(packet: bytes) -> Message:
    """Parse one packet; DecodeError (a ValueError) for anything truncated, foreign or inconsistent."""
    kind, sender, seq, rnd, _ = _parse_header(packet)
    return Message(kind, sender, seq, rnd, _decode_body(kind, memoryview(packet)[HEADER_SIZE:]))


def header_fields(packet: bytes) -> dict[str, int | str]:
    """The header of a packet as a flat dict with the keys HEADER_FIELDS (one row of the analysis' packet table).

    Checks the header (magic, version, type, length against the packet size) but not the body."""
    kind, sender, seq, rnd, length = _parse_header(packet)
    return {
        "version": VERSION,
        "type": int(kind),
        "type_name": kind.name,
        "sender": sender,
        "seq": seq,
        "round": rnd,
        "length": length,
    }
