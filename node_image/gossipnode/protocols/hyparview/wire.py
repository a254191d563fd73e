"""HyParView's messages after the common envelope (`gossipnode.wire`); no header of its own. Bodies (network byte
order; ids are member ids, u16):

    JOIN            (empty) the sender is the new node (Algorithm 1)
    FORWARD_JOIN    new u16, ttl u8
    JOIN_REPLY      (empty) a node that added the new node to its active view at the end of a FORWARD_JOIN walk
                    tells it so (the paper's TCP connection from that node does this implicitly)
    NEIGHBOR        priority u8 (1 high: the sender's active view is empty; 0 low)
    NEIGHBOR_REPLY  accepted u8
    DISCONNECT      (empty)
    SHUFFLE         origin u16, ttl u8, n u8, ids n x u16 (origin, ka active, kp passive members)
    SHUFFLE_REPLY   n u8, ids n x u16 (as many passive members as the SHUFFLE carried ids)
    DATA            origin u16, seq u32, hops u8, payload (the rest): a flooded broadcast

A DATA packet is 16 bytes of headers (envelope 9 + origin 2 + seq 4 + hops 1) plus its payload.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from gossipnode import wire
from gossipnode.wire import F, Layout

from ..peerview.wirekit import build, ids

PROTOCOL_ID = 3
MIN_DATA_SIZE = wire.ENVELOPE_SIZE + 7


class MsgType(IntEnum):
    JOIN = 1
    FORWARD_JOIN = 2
    JOIN_REPLY = 3
    NEIGHBOR = 4
    NEIGHBOR_REPLY = 5
    DISCONNECT = 6
    SHUFFLE = 7
    SHUFFLE_REPLY = 8
    DATA = 9


@dataclass(frozen=True, slots=True)
class Join:
    sender: int


@dataclass(frozen=True, slots=True)
class ForwardJoin:
    sender: int
    new: int
    ttl: int


@dataclass(frozen=True, slots=True)
class JoinReply:
    sender: int


@dataclass(frozen=True, slots=True)
class Neighbor:
    sender: int
    priority: int


@dataclass(frozen=True, slots=True)
class NeighborReply:
    sender: int
    accepted: int


@dataclass(frozen=True, slots=True)
class Disconnect:
    sender: int


@dataclass(frozen=True, slots=True)
class Shuffle:
    sender: int
    origin: int
    ttl: int
    ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ShuffleReply:
    sender: int
    ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Data:
    sender: int
    origin: int
    seq: int
    hops: int
    payload: bytes


T = MsgType
CODEC = build(PROTOCOL_ID, "hyparview", MsgType, {
    T.JOIN: (Join, Layout(T.JOIN, "JOIN", (), "a new node asks its contact node to join")),
    T.FORWARD_JOIN: (ForwardJoin, Layout(T.FORWARD_JOIN, "FORWARD_JOIN", (F("new", "u16"), F("ttl", "u8")),
                                         "the join's random walk")),
    T.JOIN_REPLY: (JoinReply, Layout(T.JOIN_REPLY, "JOIN_REPLY", (), "the walk's end added the new node")),
    T.NEIGHBOR: (Neighbor, Layout(T.NEIGHBOR, "NEIGHBOR", (F("priority", "u8"),), "ask to enter an active view")),
    T.NEIGHBOR_REPLY: (NeighborReply, Layout(T.NEIGHBOR_REPLY, "NEIGHBOR_REPLY", (F("accepted", "u8"),))),
    T.DISCONNECT: (Disconnect, Layout(T.DISCONNECT, "DISCONNECT", (), "dropped from the sender's active view")),
    T.SHUFFLE: (Shuffle, Layout(T.SHUFFLE, "SHUFFLE", (F("origin", "u16"), F("ttl", "u8"), *ids("ids")),
                                "the passive view's periodic exchange (a random walk)")),
    T.SHUFFLE_REPLY: (ShuffleReply, Layout(T.SHUFFLE_REPLY, "SHUFFLE_REPLY", ids("ids"))),
    T.DATA: (Data, Layout(T.DATA, "DATA", (F("origin", "u16"), F("seq", "u32"), F("hops", "u8"),
                                           F("payload", "bytes", "rest")), "a flooded broadcast", data=True)),
}, seq_field="seq", seq_type=T.DATA)
