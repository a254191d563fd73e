"""Scamp's messages after the common envelope; no header of its own.

    SUBSCRIBE    new u16, ttl u8: a (re-)subscription on its indirection walk; at ttl 0 its receiver is the contact
    FORWARD_SUB  new u16, hops u8: a subscription forwarded by the contact (to every PartialView member, plus c
                 copies) and onwards until a member keeps it
    KEPT         (empty) the sender keeps the receiver in its PartialView: the receiver adds it to its InView
    DATA         origin u16, seq u32, hops u8, payload (the rest): a gossiped broadcast
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from gossipnode import wire
from gossipnode.wire import F, Layout

from ..cyclon.wire import DATA_LAYOUT
from ..peerview.wirekit import build

PROTOCOL_ID = 5
MIN_DATA_SIZE = wire.ENVELOPE_SIZE + 7


class MsgType(IntEnum):
    SUBSCRIBE = 1
    FORWARD_SUB = 2
    KEPT = 3
    DATA = 4


@dataclass(frozen=True, slots=True)
class Subscribe:
    sender: int
    new: int
    ttl: int


@dataclass(frozen=True, slots=True)
class ForwardSub:
    sender: int
    new: int
    hops: int


@dataclass(frozen=True, slots=True)
class Kept:
    sender: int


@dataclass(frozen=True, slots=True)
class Data:
    sender: int
    origin: int
    seq: int
    hops: int
    payload: bytes


T = MsgType
CODEC = build(PROTOCOL_ID, "scamp", MsgType, {
    T.SUBSCRIBE: (Subscribe, Layout(T.SUBSCRIBE, "SUBSCRIBE", (F("new", "u16"), F("ttl", "u8")),
                                    "a subscription on its indirection walk")),
    T.FORWARD_SUB: (ForwardSub, Layout(T.FORWARD_SUB, "FORWARD_SUB", (F("new", "u16"), F("hops", "u8")),
                                       "a forwarded subscription")),
    T.KEPT: (Kept, Layout(T.KEPT, "KEPT", (), "the sender keeps the receiver in its PartialView")),
    T.DATA: (Data, Layout(T.DATA, "DATA", DATA_LAYOUT, "a gossiped broadcast", data=True)),
}, seq_field="seq", seq_type=T.DATA)
