"""Cyclon's messages after the common envelope; no header of its own. An entry is a u32: member id << 16 | age.

    JOIN           (empty) to the introducer
    WALK           new u16, ttl u8: one of the introducer's random walks for a joining node
    JOIN_REPLY     n u8, entries n x u32: the entry the walk's end gave up for the new node (or itself)
    SHUFFLE        n u8, entries n x u32: the initiator's subset (its own entry with age 0 first)
    SHUFFLE_REPLY  n u8, entries n x u32
    DATA           origin u16, seq u32, hops u8, payload (the rest): a gossiped broadcast
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from gossipnode import wire
from gossipnode.wire import F, Layout

from ..peerview.wirekit import build

PROTOCOL_ID = 4
MIN_DATA_SIZE = wire.ENVELOPE_SIZE + 7


class MsgType(IntEnum):
    JOIN = 1
    WALK = 2
    JOIN_REPLY = 3
    SHUFFLE = 4
    SHUFFLE_REPLY = 5
    DATA = 6


@dataclass(frozen=True, slots=True)
class Join:
    sender: int


@dataclass(frozen=True, slots=True)
class Walk:
    sender: int
    new: int
    ttl: int


@dataclass(frozen=True, slots=True)
class JoinReply:
    sender: int
    entries: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Shuffle:
    sender: int
    entries: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ShuffleReply:
    sender: int
    entries: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Data:
    sender: int
    origin: int
    seq: int
    hops: int
    payload: bytes


def entry(member: int, age: int) -> int:
    return (member << 16) | min(age, 0xFFFF)


def unpack(e: int) -> tuple[int, int]:
    return e >> 16, e & 0xFFFF


ENTRIES = (F("n", "u8"), F("entries", "u32", "n", "member id << 16 | age"))
DATA_LAYOUT = (F("origin", "u16"), F("seq", "u32"), F("hops", "u8"), F("payload", "bytes", "rest"))


def messages(T) -> dict:
    return {
        T.JOIN: (Join, Layout(T.JOIN, "JOIN", (), "a new node asks the introducer to join")),
        T.WALK: (Walk, Layout(T.WALK, "WALK", (F("new", "u16"), F("ttl", "u8")), "a join's random walk")),
        T.JOIN_REPLY: (JoinReply, Layout(T.JOIN_REPLY, "JOIN_REPLY", ENTRIES)),
        T.SHUFFLE: (Shuffle, Layout(T.SHUFFLE, "SHUFFLE", ENTRIES, "the periodic exchange with the oldest peer")),
        T.SHUFFLE_REPLY: (ShuffleReply, Layout(T.SHUFFLE_REPLY, "SHUFFLE_REPLY", ENTRIES)),
        T.DATA: (Data, Layout(T.DATA, "DATA", DATA_LAYOUT, "a gossiped broadcast", data=True)),
    }


CODEC = build(PROTOCOL_ID, "cyclon", MsgType, messages(MsgType), seq_field="seq", seq_type=MsgType.DATA)
