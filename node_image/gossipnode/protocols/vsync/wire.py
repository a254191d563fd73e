"""vsync's messages after the common envelope (`gossipnode.wire`); protocol id 8.

The Pbcast layer's four messages, with pbcast's bodies (protocols/pbcast/wire.py: a u32 round header, then
the body), under vsync's types P_DATA, P_REPAIR, P_DIGEST, P_SOLICIT. Their origin is a stream: 0 the totally
ordered stream (seq = the global sequence number, gseq), 1 the view-change stream (seq = `vc_seq(epoch, view)`:
a Prefreshview, unique per leader epoch so that a new leader's Prefreshview for a view number a failed leader
already announced is not taken for a duplicate). Their payload is an *item*::

    kind u8: 1 DATA  origin u16, lseq u32, payload (the rest)    a multicast, lseq its sender's own number
             2 NEWVIEW  view u32, epoch u32, gc u32, n u16, members u16 x n, c u16, committee u16 x c
                        the next view: its members, the committee in rank order (committee[0] leads, for epoch
                        `epoch`), and the checkpoint `gc` (every member of the view has delivered 1..gc: the
                        committee garbage-collects them when it delivers this Newview)
             3 PREFRESHVIEW  view u32, high u32, epoch u32, leader u16   a view change begins (high: the last
                        gseq ordered before it; the Newview will be high + 1); acknowledge to `leader`
             4 ORDERED  epoch u32, stable u32, view u32, item (the rest: a DATA or NEWVIEW item)
                        the committee's envelope inside an ORDER: the leader's epoch, its stable mark (every gseq
                        up to it is held by every committee member) and the view the gseq is delivered in

The Vsync layer's own messages (no header). Types 5-11 keep the layouts they had before the committee round was
built (analysis/pcapspecs.py decodes them vectorised); 12-19 are new:

    GSEQ_REQ       lseq u32, payload                       sender -> leader: order this multicast
    GSEQ_ACK       lseq u32, gseq u32, view u32            leader -> sender: it is gseq, delivered in view
    ORDER          gseq u32, item (an ORDERED envelope)    leader -> committee: stabilise gseq (k > 1)
    ORDER_ACK      gseq u32                                committee -> leader: I hold every gseq through this
    REPAIR_REQ     next u32, count u16                     member -> committee member: I lack next.. (the
                                                           repair sub-protocol; also the idle probe)
    REPAIR_ITEMS   high u32, count u16, count x (gseq u32, len u16, item)   committee -> member
    ACK_PREFRESH   view u32, delivered u32                 member -> leader (AckPrefreshview, deferred)
    HEARTBEAT      epoch u32, stable u32                   leader -> committee, every heartbeat_s
    CPROBE         epoch u32, view u32, high u32, c u16, committee u16 x c
                                                           leader -> committee: the committee round
    CACK           epoch u32, delivered u32                committee -> leader: the answer
    LEADER         epoch u32, view u32, c u16, committee u16 x c
                                                           "the committee is this, committee[0] leads": to a
                                                           message that should have gone to the leader, or
                                                           came from a leader of an older epoch
    PREFRESH       item (a PREFRESHVIEW item)              leader -> a member that has not acknowledged (or a
                                                           joiner): the Prefreshview again, by unicast
    JOIN           delivered u32                           a dropped member -> leader: admit me again
    STATE          gseq u32, item (a NEWVIEW item)         leader -> joiner: the state transfer (the view that
                                                           admits it and its place, gseq, in the order)
    EXCLUDED       view u32                                committee -> a member: you are not in view `view`
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
_U32x2U16 = struct.Struct("!IIH")
_U32x3U16 = struct.Struct("!IIIH")
_U16 = struct.Struct("!H")
_DATA_ITEM = struct.Struct("!BHI")
_VIEW_ITEM = struct.Struct("!BIIIH")
_PREFRESH_ITEM = struct.Struct("!BIIIH")
_ORDERED_ITEM = struct.Struct("!BIII")
_ENTRY = struct.Struct("!IH")
MIN_DATA_SIZE = pw.MIN_DATA_SIZE + _DATA_ITEM.size   # a P_DATA carrying a DATA item with an empty payload
MAX_EPOCH = 0xFFFF


def vc_seq(epoch: int, view: int) -> int:
    """The Pbcast seq of a Prefreshview on stream 1: unique per (leader epoch, view)."""
    if not 0 <= epoch <= MAX_EPOCH or not 0 < view <= 0xFFFF:
        raise ValueError(f"epoch {epoch} / view {view} out of the view-change stream's range")
    return (epoch << 16) | view


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
    HEARTBEAT = 12
    CPROBE = 13
    CACK = 14
    LEADER = 15
    PREFRESH = 16
    JOIN = 17
    STATE = 18
    EXCLUDED = 19


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
    epoch: int = 0
    gc: int = 0
    committee: tuple[int, ...] = (0,)


@dataclass(frozen=True, slots=True)
class PrefreshItem:
    view: int
    high: int
    epoch: int = 0
    leader: int = 0


@dataclass(frozen=True, slots=True)
class Ordered:
    epoch: int
    stable: int
    view: int
    item: bytes


def _ids(ids: tuple[int, ...]) -> bytes:
    return _U16.pack(len(ids)) + struct.pack(f"!{len(ids)}H", *ids)


def _read_ids(data, off: int, what: str) -> tuple[tuple[int, ...], int]:
    if len(data) < off + 2:
        raise DecodeError(f"{what}: no count")
    (n,) = _U16.unpack_from(data, off)
    off += 2
    if len(data) < off + 2 * n:
        raise DecodeError(f"{what}: {n} ids, {len(data) - off} bytes")
    return struct.unpack_from(f"!{n}H", data, off), off + 2 * n


def encode_item(item) -> bytes:
    try:
        if isinstance(item, DataItem):
            return _DATA_ITEM.pack(1, item.origin, item.lseq) + item.payload
        if isinstance(item, ViewItem):
            return (_VIEW_ITEM.pack(2, item.view, item.epoch, item.gc, len(item.members))
                    + struct.pack(f"!{len(item.members)}H", *item.members) + _ids(item.committee))
        if isinstance(item, PrefreshItem):
            return _PREFRESH_ITEM.pack(3, item.view, item.high, item.epoch, item.leader)
        if isinstance(item, Ordered):
            return _ORDERED_ITEM.pack(4, item.epoch, item.stable, item.view) + item.item
    except struct.error as exc:
        raise ValueError(f"cannot encode {type(item).__name__}: {exc}") from None
    raise ValueError(f"not a vsync item: {item!r}")


def decode_item(data: bytes):
    """An item from its bytes; DecodeError if it is not one (a core checks items before it keeps them)."""
    if not data:
        raise DecodeError("empty item")
    kind = data[0]
    if kind == 1 and len(data) >= _DATA_ITEM.size:
        _k, origin, lseq = _DATA_ITEM.unpack_from(data)
        return DataItem(origin, lseq, bytes(data[_DATA_ITEM.size:]))
    if kind == 2 and len(data) >= _VIEW_ITEM.size:
        _k, view, epoch, gc, n = _VIEW_ITEM.unpack_from(data)
        off = _VIEW_ITEM.size + 2 * n
        if len(data) < off:
            raise DecodeError(f"NEWVIEW item with {n} members: {len(data)} bytes")
        members = struct.unpack_from(f"!{n}H", data, _VIEW_ITEM.size)
        committee, off = _read_ids(data, off, "NEWVIEW committee")
        if off != len(data) or not committee or len(set(committee)) != len(committee) \
                or not set(committee) <= set(members):
            raise DecodeError(f"NEWVIEW item: committee {committee} is not a non-empty subset of the members, or "
                              f"{len(data) - off} trailing bytes")
        return ViewItem(view, members, epoch, gc, committee)
    if kind == 3 and len(data) == _PREFRESH_ITEM.size:
        _k, view, high, epoch, leader = _PREFRESH_ITEM.unpack(data)
        return PrefreshItem(view, high, epoch, leader)
    if kind == 4 and len(data) > _ORDERED_ITEM.size:
        _k, epoch, stable, view = _ORDERED_ITEM.unpack_from(data)
        return Ordered(epoch, stable, view, bytes(data[_ORDERED_ITEM.size:]))
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


@dataclass(frozen=True, slots=True)
class Heartbeat:
    sender: int
    epoch: int
    stable: int


@dataclass(frozen=True, slots=True)
class CProbe:
    sender: int
    epoch: int
    view: int
    high: int
    committee: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class CAck:
    sender: int
    epoch: int
    delivered: int


@dataclass(frozen=True, slots=True)
class Leader:
    sender: int
    epoch: int
    view: int
    committee: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Prefresh:
    sender: int
    item: bytes


@dataclass(frozen=True, slots=True)
class Join:
    sender: int
    delivered: int


@dataclass(frozen=True, slots=True)
class State:
    sender: int
    gseq: int
    item: bytes


@dataclass(frozen=True, slots=True)
class Excluded:
    sender: int
    view: int


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
        if isinstance(msg, Heartbeat):
            return int(MsgType.HEARTBEAT), msg.sender, _U32x2.pack(msg.epoch, msg.stable)
        if isinstance(msg, CProbe):
            return int(MsgType.CPROBE), msg.sender, _U32x3.pack(msg.epoch, msg.view, msg.high) + _ids(msg.committee)
        if isinstance(msg, CAck):
            return int(MsgType.CACK), msg.sender, _U32x2.pack(msg.epoch, msg.delivered)
        if isinstance(msg, Leader):
            return int(MsgType.LEADER), msg.sender, _U32x2.pack(msg.epoch, msg.view) + _ids(msg.committee)
        if isinstance(msg, Prefresh):
            return int(MsgType.PREFRESH), msg.sender, msg.item
        if isinstance(msg, Join):
            return int(MsgType.JOIN), msg.sender, _U32.pack(msg.delivered)
        if isinstance(msg, State):
            return int(MsgType.STATE), msg.sender, _U32.pack(msg.gseq) + msg.item
        if isinstance(msg, Excluded):
            return int(MsgType.EXCLUDED), msg.sender, _U32.pack(msg.view)
    except struct.error as exc:
        raise ValueError(f"cannot encode {type(msg).__name__}: {exc}") from None
    raise ValueError(f"not a vsync message: {msg!r}")


def _fixed(kind: MsgType, rest: memoryview, st: struct.Struct) -> tuple:
    if len(rest) != st.size:
        raise DecodeError(f"{kind.name}: body must be {st.size} bytes, got {len(rest)}")
    return st.unpack_from(rest)


def _committee(kind: MsgType, rest: memoryview, off: int) -> tuple[int, ...]:
    ids, end = _read_ids(rest, off, kind.name)
    if end != len(rest):
        raise DecodeError(f"{kind.name}: {len(rest) - end} trailing bytes")
    if not ids or len(set(ids)) != len(ids):
        raise DecodeError(f"{kind.name}: committee {ids} is empty or repeats a member")
    return ids


def _decode(mtype: int, sender: int, rest: memoryview):
    kind = MsgType(mtype)
    if kind in _PB:
        return pw.decode_body(_PB[kind], sender, rest, PData, PDigest)
    if kind in (MsgType.GSEQ_REQ, MsgType.ORDER, MsgType.STATE):
        if len(rest) < 4:
            raise DecodeError(f"{kind.name}: {len(rest)} bytes, its sequence number alone is 4")
        (num,) = _U32.unpack_from(rest)
        if num == 0:
            raise DecodeError(f"{kind.name}: sequence number 0")
        if kind is MsgType.GSEQ_REQ:
            return GseqReq(sender, num, bytes(rest[4:]))
        if kind is MsgType.ORDER:
            return Order(sender, num, bytes(rest[4:]))
        return State(sender, num, bytes(rest[4:]))
    if kind is MsgType.GSEQ_ACK:
        return GseqAck(sender, *_fixed(kind, rest, _U32x3))
    if kind is MsgType.ORDER_ACK:
        return OrderAck(sender, *_fixed(kind, rest, _U32))
    if kind is MsgType.REPAIR_REQ:
        return RepairReq(sender, *_fixed(kind, rest, _U32U16))
    if kind is MsgType.ACK_PREFRESH:
        return AckPrefresh(sender, *_fixed(kind, rest, _U32x2))
    if kind is MsgType.HEARTBEAT:
        return Heartbeat(sender, *_fixed(kind, rest, _U32x2))
    if kind is MsgType.CACK:
        return CAck(sender, *_fixed(kind, rest, _U32x2))
    if kind is MsgType.JOIN:
        return Join(sender, *_fixed(kind, rest, _U32))
    if kind is MsgType.EXCLUDED:
        return Excluded(sender, *_fixed(kind, rest, _U32))
    if kind is MsgType.CPROBE:
        if len(rest) < _U32x3.size:
            raise DecodeError(f"CPROBE: {len(rest)} bytes, its fixed fields alone are {_U32x3.size}")
        return CProbe(sender, *_U32x3.unpack_from(rest), _committee(kind, rest, _U32x3.size))
    if kind is MsgType.LEADER:
        if len(rest) < _U32x2.size:
            raise DecodeError(f"LEADER: {len(rest)} bytes, its fixed fields alone are {_U32x2.size}")
        return Leader(sender, *_U32x2.unpack_from(rest), _committee(kind, rest, _U32x2.size))
    if kind is MsgType.PREFRESH:
        return Prefresh(sender, bytes(rest))
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


_COMMITTEE_F = (F("count", "u16"), F("committee", "bytes", "rest", "member id u16 x count, committee[0] leads"))

CODEC = wire.register(wire.Codec(
    id=PROTOCOL_ID, name="vsync", types=MsgType, header=(),
    layouts=(
        *pw.layouts(MsgType, "P_"),
        Layout(MsgType.GSEQ_REQ, "GSEQ_REQ", (F("lseq", "u32"), F("payload", "bytes", "rest")),
               "Gseq Req: sender -> leader", data=True),
        Layout(MsgType.GSEQ_ACK, "GSEQ_ACK", (F("lseq", "u32"), F("gseq", "u32"), F("view", "u32")), "Gseq Ack"),
        Layout(MsgType.ORDER, "ORDER", (F("gseq", "u32"), F("item", "bytes", "rest", "ORDERED envelope")),
               "leader -> committee"),
        Layout(MsgType.ORDER_ACK, "ORDER_ACK", (F("gseq", "u32"),), "committee -> leader (cumulative)"),
        Layout(MsgType.REPAIR_REQ, "REPAIR_REQ", (F("next", "u32"), F("count", "u16")), "repair sub-protocol"),
        Layout(MsgType.REPAIR_ITEMS, "REPAIR_ITEMS", (F("high", "u32"), F("count", "u16"),
                                                      F("items", "bytes", "rest", "(gseq u32, len u16, item) x count")),
               "repair sub-protocol: the committee's answer", data=True),
        Layout(MsgType.ACK_PREFRESH, "ACK_PREFRESH", (F("view", "u32"), F("delivered", "u32")), "AckPrefreshview"),
        Layout(MsgType.HEARTBEAT, "HEARTBEAT", (F("epoch", "u32"), F("stable", "u32")), "leader -> committee"),
        Layout(MsgType.CPROBE, "CPROBE", (F("epoch", "u32"), F("view", "u32"), F("high", "u32"), *_COMMITTEE_F),
               "the committee round: leader -> committee"),
        Layout(MsgType.CACK, "CACK", (F("epoch", "u32"), F("delivered", "u32")), "the committee round's answer"),
        Layout(MsgType.LEADER, "LEADER", (F("epoch", "u32"), F("view", "u32"), *_COMMITTEE_F),
               "who leads: the committee as this member knows it"),
        Layout(MsgType.PREFRESH, "PREFRESH", (F("item", "bytes", "rest", "PREFRESHVIEW item"),),
               "the Prefreshview again, by unicast"),
        Layout(MsgType.JOIN, "JOIN", (F("delivered", "u32"),), "a dropped member asks to rejoin"),
        Layout(MsgType.STATE, "STATE", (F("gseq", "u32"), F("item", "bytes", "rest", "NEWVIEW item")),
               "state transfer to a joiner"),
        Layout(MsgType.EXCLUDED, "EXCLUDED", (F("view", "u32"),), "you are not in this view"),
    ),
    encode=_encode, decode=_decode, header_columns=_header_columns,
))
for _cls in (PData, PDigest, GseqReq, GseqAck, Order, OrderAck, RepairReq, RepairItems, AckPrefresh, Heartbeat, CProbe,
             CAck, Leader, Prefresh, Join, State, Excluded):
    _cls.CODEC = CODEC  # type: ignore[attr-defined]
