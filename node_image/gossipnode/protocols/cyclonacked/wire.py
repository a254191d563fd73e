"""CyclonAcked's messages: Cyclon's (`cyclon/wire.py`, same layouts) plus ACK.

    ACK   origin u16, seq u32: the sender received DATA (origin, seq) from the member it acknowledges
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from gossipnode.wire import F, Layout

from ..cyclon import wire as cw
from ..cyclon.wire import DATA_LAYOUT, ENTRIES, MIN_DATA_SIZE, entry, unpack  # noqa: F401 - the core's W.*
from ..peerview.wirekit import build

PROTOCOL_ID = 6


class MsgType(IntEnum):
    JOIN = 1
    WALK = 2
    JOIN_REPLY = 3
    SHUFFLE = 4
    SHUFFLE_REPLY = 5
    DATA = 6
    ACK = 7


@dataclass(frozen=True, slots=True)
class Join(cw.Join):
    pass


@dataclass(frozen=True, slots=True)
class Walk(cw.Walk):
    pass


@dataclass(frozen=True, slots=True)
class JoinReply(cw.JoinReply):
    pass


@dataclass(frozen=True, slots=True)
class Shuffle(cw.Shuffle):
    pass


@dataclass(frozen=True, slots=True)
class ShuffleReply(cw.ShuffleReply):
    pass


@dataclass(frozen=True, slots=True)
class Data(cw.Data):
    pass


@dataclass(frozen=True, slots=True)
class Ack:
    sender: int
    origin: int
    seq: int


T = MsgType
CODEC = build(PROTOCOL_ID, "cyclonacked", MsgType, {
    T.JOIN: (Join, Layout(T.JOIN, "JOIN", (), "a new node asks the introducer to join")),
    T.WALK: (Walk, Layout(T.WALK, "WALK", (F("new", "u16"), F("ttl", "u8")), "a join's random walk")),
    T.JOIN_REPLY: (JoinReply, Layout(T.JOIN_REPLY, "JOIN_REPLY", ENTRIES)),
    T.SHUFFLE: (Shuffle, Layout(T.SHUFFLE, "SHUFFLE", ENTRIES, "the periodic exchange with the oldest peer")),
    T.SHUFFLE_REPLY: (ShuffleReply, Layout(T.SHUFFLE_REPLY, "SHUFFLE_REPLY", ENTRIES)),
    T.DATA: (Data, Layout(T.DATA, "DATA", DATA_LAYOUT, "a gossiped broadcast (acknowledged)", data=True)),
    T.ACK: (Ack, Layout(T.ACK, "ACK", (F("origin", "u16"), F("seq", "u32")), "acknowledges a DATA")),
}, seq_field="seq", seq_type=T.DATA)
