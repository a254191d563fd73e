"""`direct`'s messages after the common envelope (`gossipnode.wire`): one type, DATA.

    DATA   seq u32 (per sender, from 1), payload (the rest)

A packet is 13 bytes of headers (envelope 9 + seq 4) plus its payload.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from gossipnode import wire
from gossipnode.wire import F, Layout

PROTOCOL_ID = 2
HEADER = struct.Struct("!I")
HEADER_SIZE = wire.ENVELOPE_SIZE + HEADER.size
MIN_DATA_SIZE = HEADER_SIZE


class MsgType(IntEnum):
    DATA = 1


@dataclass(frozen=True, slots=True)
class Data:
    sender: int
    seq: int
    payload: bytes
    type = MsgType.DATA


def _encode(msg: Data) -> tuple[int, int, bytes]:
    try:
        return int(MsgType.DATA), msg.sender, HEADER.pack(msg.seq) + msg.payload
    except struct.error as exc:
        raise ValueError(f"cannot encode DATA: {exc}") from None


def _decode(mtype: int, sender: int, rest: memoryview) -> Data:
    if len(rest) < HEADER.size:
        raise wire.DecodeError(f"DATA: {len(rest)} bytes after the envelope, its seq alone is {HEADER.size}")
    (seq,) = HEADER.unpack_from(rest)
    if seq == 0:
        raise wire.DecodeError("DATA: seq 0 (seqs start at 1)")
    return Data(sender, seq, bytes(rest[HEADER.size:]))


def _header_columns(_mtype: int, rest: memoryview) -> dict[str, int | None]:
    if len(rest) < HEADER.size:
        raise wire.DecodeError(f"{len(rest)} bytes after the envelope, the direct header alone is {HEADER.size}")
    return {"seq": HEADER.unpack_from(rest)[0], "round": None}


CODEC = wire.register(wire.Codec(
    id=PROTOCOL_ID, name="direct", types=MsgType, header=(F("seq", "u32"),),
    layouts=(Layout(MsgType.DATA, "DATA", (F("payload", "bytes", "rest"),), "a data message from its sender", data=True),),
    encode=_encode, decode=_decode, header_columns=_header_columns,
))
Data.CODEC = CODEC  # type: ignore[attr-defined]
