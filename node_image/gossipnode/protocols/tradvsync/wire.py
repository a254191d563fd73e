"""tradvsync's messages after the common envelope (`gossipnode.wire`); protocol id 9.

    DATA     seq u32, payload (the rest) -- a multicast from its sender (seqs per sender, from 1)
    RETRANS  seq u32, payload -- the sender's retransmission (answer to a NAK, or after `retransmit_s`)
    ACK      origin u16, upto u32 -- every message of `origin` through `upto` has arrived here (cumulative)
    NAK      origin u16, first u32, last u32 -- please resend first..last

A DATA is 13 bytes of headers plus its payload; an ACK 15 bytes, a NAK 19.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from gossipnode import wire
from gossipnode.wire import F, Layout

PROTOCOL_ID = 9
SEQ = struct.Struct("!I")
ACK = struct.Struct("!HI")
NAK = struct.Struct("!HII")
MIN_DATA_SIZE = wire.ENVELOPE_SIZE + SEQ.size
DecodeError = wire.DecodeError


class MsgType(IntEnum):
    DATA = 1
    RETRANS = 2
    ACK = 3
    NAK = 4


@dataclass(frozen=True, slots=True)
class Data:
    sender: int
    seq: int
    payload: bytes
    retrans: bool = False


@dataclass(frozen=True, slots=True)
class Ack:
    sender: int
    origin: int
    upto: int


@dataclass(frozen=True, slots=True)
class Nak:
    sender: int
    origin: int
    first: int
    last: int


def _encode(msg) -> tuple[int, int, bytes]:
    try:
        if isinstance(msg, Data):
            return int(MsgType.RETRANS if msg.retrans else MsgType.DATA), msg.sender, SEQ.pack(msg.seq) + msg.payload
        if isinstance(msg, Ack):
            return int(MsgType.ACK), msg.sender, ACK.pack(msg.origin, msg.upto)
        if not 1 <= msg.first <= msg.last:
            raise ValueError(f"NAK range {msg.first}..{msg.last} is empty or reversed")
        return int(MsgType.NAK), msg.sender, NAK.pack(msg.origin, msg.first, msg.last)
    except struct.error as exc:
        raise ValueError(f"cannot encode {type(msg).__name__}: {exc}") from None


def _decode(mtype: int, sender: int, rest: memoryview):
    kind = MsgType(mtype)
    if kind in (MsgType.DATA, MsgType.RETRANS):
        if len(rest) < SEQ.size:
            raise DecodeError(f"{kind.name}: {len(rest)} bytes after the envelope, its seq alone is {SEQ.size}")
        (seq,) = SEQ.unpack_from(rest)
        if seq == 0:
            raise DecodeError(f"{kind.name}: seq 0 (seqs start at 1)")
        return Data(sender, seq, bytes(rest[SEQ.size:]), kind is MsgType.RETRANS)
    size = ACK.size if kind is MsgType.ACK else NAK.size
    if len(rest) != size:
        raise DecodeError(f"{kind.name}: body must be {size} bytes, got {len(rest)}")
    if kind is MsgType.ACK:
        return Ack(sender, *ACK.unpack_from(rest))
    origin, first, last = NAK.unpack_from(rest)
    if not 1 <= first <= last:
        raise DecodeError(f"NAK: range {first}..{last} is empty, reversed or starts at 0")
    return Nak(sender, origin, first, last)


def _header_columns(mtype: int, rest: memoryview) -> dict[str, int | None]:
    if mtype in (MsgType.DATA, MsgType.RETRANS) and len(rest) >= SEQ.size:
        return {"seq": SEQ.unpack_from(rest)[0], "round": None}
    if mtype == MsgType.ACK and len(rest) >= ACK.size:
        return {"seq": ACK.unpack_from(rest)[1], "round": None}
    return {"seq": None, "round": None}


_DATA = (F("seq", "u32"), F("payload", "bytes", "rest"))
CODEC = wire.register(wire.Codec(
    id=PROTOCOL_ID, name="tradvsync", types=MsgType, header=(),
    layouts=(
        Layout(MsgType.DATA, "DATA", _DATA, "a multicast from its sender", data=True),
        Layout(MsgType.RETRANS, "RETRANS", _DATA, "the sender's retransmission", data=True),
        Layout(MsgType.ACK, "ACK", (F("origin", "u16"), F("upto", "u32")), "cumulative acknowledgement"),
        Layout(MsgType.NAK, "NAK", (F("origin", "u16"), F("first", "u32"), F("last", "u32")), "resend request"),
    ),
    encode=_encode, decode=_decode, header_columns=_header_columns,
))
for _cls in (Data, Ack, Nak):
    _cls.CODEC = CODEC  # type: ignore[attr-defined]
