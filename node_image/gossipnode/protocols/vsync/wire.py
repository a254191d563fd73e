"""vsync's messages after the common envelope (`gossipnode.wire`); protocol id 8.

The Pbcast layer's four messages, with pbcast's bodies (protocols/pbcast/wire.py: a u32 round header, then
the body), under vsync's types P_DATA, P_REPAIR, P_DIGEST, P_SOLICIT. Their origin is a stream: 0 the totally
ordered stream (seq = the global sequence number, gseq), 1 the view-change stream (seq = the view number: a
Prefreshview). Their payload is an *item*::

    kind u8: 1 DATA  origin u16, lseq u32, payload (the rest)    a multicast, lseq its sender's own number
             2 NEWVIEW  view u32, n u16, members u16 x n          the next view's membership
             3 PREFRESHVIEW  view u32, high u32                   a view change begins (high: the leader's gseq)

The Vsync layer's own messages (no header):

    GSEQ_REQ       lseq u32, payload                       sender -> leader: order this multicast
    GSEQ_ACK       lseq u32, gseq u32, view u32            leader -> sender: it is gseq, delivered in view
    ORDER          gseq u32, item (the rest)               leader -> committee: stabilise gseq (k > 1)
    ORDER_ACK      gseq u32                                committee -> leader
    REPAIR_REQ     next u32, count u16                     member -> committee member: I lack next.. (the
                                                           repair sub-protocol; also the idle probe)
    REPAIR_ITEMS   high u32, count u16, count x (gseq u32, len u16, item)   committee -> member
    ACK_PREFRESH   view u32, delivered u32                 member -> leader (AckPrefreshview, deferred)
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from gossipnode import wire
from gossipnode.protocols.pbcast import wire as pw
from gossipnode.wire import F, Layout

PROTOCOL_ID = 8
DecodeError = wire.DecodeError
STREAM_ORDERED = 0
STREAM_VIEW = 1
_U32 = struct.Struct("!I")
_U32U16 = struct.Struct("!IH")
_U32x2 = struct.Struct("!II")
_U32x3 = struct.Struct("!III")
_DATA_ITEM = struct.Struct("!BHI")
_VIEW_ITEM = struct.Struct("!BIH")
_PREFRESH_ITEM = struct.Struct("!BII")
_ENTRY = struct.Struct("!IH")
MIN_DATA_SIZE = pw.MIN_DATA_SIZE + _DATA_ITEM.size   # a P_DATA carrying a DATA item with an empty payload


class MsgType(IntEnum):
    P_DATA = 1
    P_REPAIR = 2
    P_DIGEST = 3
    P_SOLICIT = 4
    GSEQ_REQ = 5
    GSEQ_ACK = 6
    ORDER = 7
    ORDER_ACK = 8
    REPAIR_REQ = 9
    REPAIR_ITEMS = 10
    ACK_PREFRESH = 11


class PData(pw.Data):
    __slots__ = ()


class PDigest(pw.Digest):
    __slots__ = ()


# ---- items -------------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class DataItem:
    origin: int
    lseq: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class ViewItem:
    view: int
    members: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class PrefreshItem:
    view: int
    high: int


def encode_item(item) -> bytes:
    try:
        if isinstance(item, DataItem):
            return _DATA_ITEM.pack(1, item.origin, item.lseq) + item.payload
        if isinstance(item, ViewItem):
            return _VIEW_ITEM.pack(2, item.view, len(item.members)) + struct.pack(f"!{len(item.members)}H",
                                                                                 *item.members)
        return _PREFRESH_ITEM.pack(3, item.view, item.high)
    except struct.error as exc:
        raise ValueError(f"cannot encode {type(item).__name__}: {exc}") from None


def decode_item(data: bytes):
    """An item from its bytes; DecodeError if it is not one (a core checks items before it keeps them)."""
    if not data:
        raise DecodeError("empty item")
    kind = data[0]
    if kind == 1 and len(data) >= _DATA_ITEM.size:
        _k, origin, lseq = _DATA_ITEM.unpack_from(data)
        return DataItem(origin, lseq, bytes(data[_DATA_ITEM.size:]))
    if kind == 2 and len(data) >= _VIEW_ITEM.size:
        _k, view, n = _VIEW_ITEM.unpack_from(data)
        if len(data) != _VIEW_ITEM.size + 2 * n:
            raise DecodeError(f"NEWVIEW item with {n} members: {len(data)} bytes")
        return ViewItem(view, struct.unpack_from(f"!{n}H", data, _VIEW_ITEM.size))
    if kind == 3 and len(data) == _PREFRESH_ITEM.size:
        _k, view, high = _PREFRESH_ITEM.unpack(data)
        return PrefreshItem(view, high)
    raise DecodeError(f"item of kind {kind}, {len(data)} bytes, is not well formed")


# ---- the Vsync layer's messages ----------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class GseqReq:
    sender: int
    lseq: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class GseqAck:
    sender: int
    lseq: int
    gseq: int
    view: int


@dataclass(frozen=True, slots=True)
class Order:
    sender: int
    gseq: int
    item: bytes


@dataclass(frozen=True, slots=True)
class OrderAck:
    sender: int
    gseq: int


@dataclass(frozen=True, slots=True)
class RepairReq:
    sender: int
    next: int
    count: int


@dataclass(frozen=True, slots=True)
class RepairItems:
    sender: int
    high: int
    items: tuple[tuple[int, bytes], ...]


@dataclass(frozen=True, slots=True)
class AckPrefresh:
    sender: int
    view: int
    delivered: int


_PB = {MsgType.P_DATA: "DATA", MsgType.P_REPAIR: "REPAIR", MsgType.P_DIGEST: "DIGEST",
       MsgType.P_SOLICIT: "SOLICIT"}


def _encode(msg) -> tuple[int, int, bytes]:
    try:
        if isinstance(msg, (PData, PDigest)):
            return int(MsgType["P_" + pw.kind_of(msg)]), msg.sender, pw.encode_body(msg)
        if isinstance(msg, GseqReq):
            return int(MsgType.GSEQ_REQ), msg.sender, _U32.pack(msg.lseq) + msg.payload
        if isinstance(msg, GseqAck):
            return int(MsgType.GSEQ_ACK), msg.sender, _U32x3.pack(msg.lseq, msg.gseq, msg.view)
        if isinstance(msg, Order):
            return int(MsgType.ORDER), msg.sender, _U32.pack(msg.gseq) + msg.item
        if isinstance(msg, OrderAck):
            return int(MsgType.ORDER_ACK), msg.sender, _U32.pack(msg.gseq)
        if isinstance(msg, RepairReq):
            return int(MsgType.REPAIR_REQ), msg.sender, _U32U16.pack(msg.next, msg.count)
        if isinstance(msg, RepairItems):
            body = _U32U16.pack(msg.high, len(msg.items)) + b"".join(
                _ENTRY.pack(g, len(it)) + it for g, it in msg.items)
            return int(MsgType.REPAIR_ITEMS), msg.sender, body
        if isinstance(msg, AckPrefresh):
            return int(MsgType.ACK_PREFRESH), msg.sender, _U32x2.pack(msg.view, msg.delivered)
    except struct.error as exc:
        raise ValueError(f"cannot encode {type(msg).__name__}: {exc}") from None
    raise ValueError(f"not a vsync message: {msg!r}")


def _fixed(kind: MsgType, rest: memoryview, st: struct.Struct) -> tuple:
    if len(rest) != st.size:
        raise DecodeError(f"{kind.name}: body must be {st.size} bytes, got {len(rest)}")
    return st.unpack_from(rest)


def _decode(mtype: int, sender: int, rest: memoryview):
    kind = MsgType(mtype)
    if kind in _PB:
        return pw.decode_body(_PB[kind], sender, rest, PData, PDigest)
    if kind in (MsgType.GSEQ_REQ, MsgType.ORDER):
        if len(rest) < 4:
            raise DecodeError(f"{kind.name}: {len(rest)} bytes, its sequence number alone is 4")
        (num,) = _U32.unpack_from(rest)
        if num == 0:
            raise DecodeError(f"{kind.name}: sequence number 0")
        if kind is MsgType.GSEQ_REQ:
            return GseqReq(sender, num, bytes(rest[4:]))
        return Order(sender, num, bytes(rest[4:]))
    if kind is MsgType.GSEQ_ACK:
        return GseqAck(sender, *_fixed(kind, rest, _U32x3))
    if kind is MsgType.ORDER_ACK:
        return OrderAck(sender, *_fixed(kind, rest, _U32))
    if kind is MsgType.REPAIR_REQ:
        return RepairReq(sender, *_fixed(kind, rest, _U32U16))
    if kind is MsgType.ACK_PREFRESH:
        return AckPrefresh(sender, *_fixed(kind, rest, _U32x2))
    if len(rest) < _U32U16.size:
        raise DecodeError(f"REPAIR_ITEMS: {len(rest)} bytes, its counts alone are {_U32U16.size}")
    high, count = _U32U16.unpack_from(rest)
    items, off = [], _U32U16.size
    for _ in range(count):
        if len(rest) < off + _ENTRY.size:
            raise DecodeError(f"REPAIR_ITEMS: truncated at item {len(items)} of {count}")
        gseq, size = _ENTRY.unpack_from(rest, off)
        off += _ENTRY.size
        if len(rest) < off + size:
            raise DecodeError(f"REPAIR_ITEMS: item {gseq} of {size} bytes is truncated")
        items.append((gseq, bytes(rest[off:off + size])))
        off += size
    if off != len(rest):
        raise DecodeError(f"REPAIR_ITEMS: {len(rest) - off} trailing bytes")
    return RepairItems(sender, high, tuple(items))


def _header_columns(mtype: int, rest: memoryview) -> dict[str, int | None]:
    kind = MsgType(mtype)
    if kind in _PB:
        return pw.header_columns(_PB[kind], rest)
    if kind in (MsgType.GSEQ_REQ, MsgType.ORDER, MsgType.ORDER_ACK) and len(rest) >= 4:
        return {"seq": _U32.unpack_from(rest)[0], "round": None}
    if kind is MsgType.GSEQ_ACK and len(rest) >= 8:
        return {"seq": _U32x2.unpack_from(rest)[1], "round": None}
    return {"seq": None, "round": None}


CODEC = wire.register(wire.Codec(
    id=PROTOCOL_ID, name="vsync", types=MsgType, header=(),
    layouts=(
        *pw.layouts(MsgType, "P_"),
        Layout(MsgType.GSEQ_REQ, "GSEQ_REQ", (F("lseq", "u32"), F("payload", "bytes", "rest")),
               "Gseq Req: sender -> leader", data=True),
        Layout(MsgType.GSEQ_ACK, "GSEQ_ACK", (F("lseq", "u32"), F("gseq", "u32"), F("view", "u32")), "Gseq Ack"),
        Layout(MsgType.ORDER, "ORDER", (F("gseq", "u32"), F("item", "bytes", "rest")), "leader -> committee"),
        Layout(MsgType.ORDER_ACK, "ORDER_ACK", (F("gseq", "u32"),), "committee -> leader"),
        Layout(MsgType.REPAIR_REQ, "REPAIR_REQ", (F("next", "u32"), F("count", "u16")), "repair sub-protocol"),
        Layout(MsgType.REPAIR_ITEMS, "REPAIR_ITEMS", (F("high", "u32"), F("count", "u16"),
                                                      F("items", "bytes", "rest", "(gseq u32, len u16, item) x count")),
               "repair sub-protocol: the committee's answer", data=True),
        Layout(MsgType.ACK_PREFRESH, "ACK_PREFRESH", (F("view", "u32"), F("delivered", "u32")), "AckPrefreshview"),
    ),
    encode=_encode, decode=_decode, header_columns=_header_columns,
))
for _cls in (PData, PDigest, GseqReq, GseqAck, Order, OrderAck, RepairReq, RepairItems, AckPrefresh):
    _cls.CODEC = CODEC  # type: ignore[attr-defined]
