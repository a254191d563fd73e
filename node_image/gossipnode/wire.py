"""The common wire envelope and the registry of every protocol's messages.

Every packet (a UDP datagram, a multicast datagram, or one frame of a TCP stream) starts with the same 9-byte
envelope, followed by the protocol's own header and body::

    magic     2s  b"GS"
    version   u8  VERSION (of the envelope)
    protocol  u8  the protocol's id (`Codec.id`: gsgc 1, direct 2, ...)
    type      u8  the protocol's message type
    sender    u16 member id of the node that sent this packet
    length    u16 bytes after the envelope (the protocol header and body); must equal the rest exactly

On TCP the envelope is the frame header: a reader takes 9 bytes, checks them, then reads `length` more.

Each protocol registers one `Codec`: its id and name, its message types, how to encode and decode its messages,
and a declarative `Layout` of every message (fields in order, with the counts that size them). The node and the
analysis both decode through `decode`/`header_fields`; the Wireshark dissector is generated from the layouts,
so a packet is read by two independent decoders (the Python codec and tshark with the generated Lua) in tests.

Used by the node and by the analysis (which decodes captured packets with it), so it has no other dependency.
"""
from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

MAGIC = b"GS"
VERSION = 2
ENVELOPE = struct.Struct("!2sBBBHH")
ENVELOPE_SIZE = ENVELOPE.size
MAX_BODY = 0xFFFF
HEADER_FIELDS = ("version", "protocol", "type", "type_name", "sender", "seq", "round", "length")


class DecodeError(ValueError):
    """The bytes are not a well-formed packet of a registered protocol; the message says why."""


# ---- declarative layouts (documentation, the generated dissector, and the size formulas) ----------------------

@dataclass(frozen=True)
class F:
    """One field of a layout. `kind`: u8, u16, u32 or bytes. `count`: None (one value), an int, the name of an
    earlier field, "bits:NAME" (ceil(NAME / 8) bytes: a bitmap of NAME bits) or "rest" (to the end)."""

    name: str
    kind: str
    count: int | str | None = None
    doc: str = ""


@dataclass(frozen=True)
class Layout:
    """A message type's fields after the envelope: the protocol header (`Codec.header`) then these."""

    type: int
    name: str
    body: tuple[F, ...]
    doc: str = ""
    data: bool = False  # carries application data (the analysis counts every other type as control overhead)


@dataclass
class Codec:
    """One protocol's wire: registered once, used by the node, the analysis and the dissector generator.

    `encode(msg) -> (type, sender, bytes after the envelope)`; `decode(type, sender, rest: memoryview) -> msg`
    (DecodeError for anything inconsistent); `header(msg_type, sender, rest) -> {"seq": .., "round": ..}`, the
    packet-table columns this protocol fills from its own header (None where it has no such field)."""

    id: int
    name: str
    types: type[IntEnum]
    header: tuple[F, ...]
    layouts: tuple[Layout, ...]
    encode: Callable[[Any], tuple[int, int, bytes]]
    decode: Callable[[int, int, memoryview], Any]
    header_columns: Callable[[int, memoryview], dict[str, int | None]] = field(
        default=lambda _t, _rest: {"seq": None, "round": None})
    # Optional fast path: the whole packet, envelope included, in one step (the node's hot path).
    encode_packet: Callable[[Any], bytes] | None = None
    # Optional fast path for a well-formed packet: the message, or None to take the generic (checking) path.
    decode_packet: Callable[[bytes], Any] | None = None

    def __post_init__(self) -> None:
        self.type_of = {int(t): t for t in self.types}   # number -> enum member, without an enum call


CODECS: dict[int, Codec] = {}
BY_NAME: dict[str, Codec] = {}


def register(codec: Codec) -> Codec:
    """Add a protocol's codec (ids and names are unique; the layouts must cover exactly its message types)."""
    if codec.id in CODECS and CODECS[codec.id] is not codec:
        raise ValueError(f"protocol id {codec.id} is taken by {CODECS[codec.id].name}")
    if not 1 <= codec.id <= 255:
        raise ValueError(f"protocol id {codec.id} does not fit a byte")
    if {int(t) for t in codec.types} != {lay.type for lay in codec.layouts}:
        raise ValueError(f"{codec.name}: layouts do not match the message types")
    CODECS[codec.id] = codec
    BY_NAME[codec.name] = codec
    return codec


def pack(protocol: int, mtype: int, sender: int, rest: bytes) -> bytes:
    if len(rest) > MAX_BODY:
        raise ValueError(f"message of {len(rest)} bytes after the envelope exceeds {MAX_BODY}")
    try:
        return ENVELOPE.pack(MAGIC, VERSION, protocol, mtype, sender, len(rest)) + rest
    except struct.error as exc:
        raise ValueError(f"cannot encode the envelope: {exc}") from None


def encode(msg: Any) -> bytes:
    """Serialise a message of any registered protocol (its class carries `CODEC`); ValueError if it does not fit."""
    codec: Codec = type(msg).CODEC
    if codec.encode_packet is not None:
        return codec.encode_packet(msg)
    mtype, sender, rest = codec.encode(msg)
    return pack(codec.id, mtype, sender, rest)


@dataclass(frozen=True, slots=True)
class Envelope:
    protocol: int
    type: int
    sender: int
    length: int


def parse_envelope(packet: bytes | memoryview, exact: bool = True) -> Envelope:
    """Check and parse the first ENVELOPE_SIZE bytes. `exact`: the packet must hold exactly `length` more bytes
    (a datagram); otherwise (a TCP frame header) only the envelope itself is checked."""
    if len(packet) < ENVELOPE_SIZE:
        raise DecodeError(f"truncated packet: {len(packet)} bytes, the envelope alone is {ENVELOPE_SIZE}")
    magic, version, protocol, mtype, sender, length = ENVELOPE.unpack_from(packet)
    if magic != MAGIC:
        raise DecodeError(f"foreign packet: magic {bytes(magic)!r}, expected {MAGIC!r}")
    if version != VERSION:
        raise DecodeError(f"unsupported wire version {version} (this decoder speaks version {VERSION})")
    codec = CODECS.get(protocol)
    if codec is None:
        raise DecodeError(f"unknown protocol id {protocol}")
    if mtype not in codec.type_of:
        raise DecodeError(f"{codec.name}: unknown message type {mtype}")
    if exact:
        actual = len(packet) - ENVELOPE_SIZE
        if length != actual:
            what = "truncated" if length > actual else "trailing bytes"
            raise DecodeError(f"{what}: the envelope says {length} bytes follow, the packet carries {actual}")
    return Envelope(protocol, mtype, sender, length)


def decode(packet: bytes) -> Any:
    """Parse one packet of any registered protocol; DecodeError (a ValueError) for anything truncated, foreign or
    inconsistent."""
    if len(packet) > 3:
        fast = CODECS.get(packet[3])
        if fast is not None and fast.decode_packet is not None:
            msg = fast.decode_packet(packet)
            if msg is not None:
                return msg
    env = parse_envelope(packet)
    return CODECS[env.protocol].decode(env.type, env.sender, memoryview(packet)[ENVELOPE_SIZE:])


def header_fields(packet: bytes) -> dict[str, int | str | None]:
    """The envelope and the protocol header of a packet as a flat dict with the keys HEADER_FIELDS plus
    `protocol_name` (one row of the analysis' packet table). Checks the envelope, not the body."""
    env = parse_envelope(packet)
    codec = CODECS[env.protocol]
    cols = codec.header_columns(env.type, memoryview(packet)[ENVELOPE_SIZE:])
    return {
        "version": VERSION,
        "protocol": env.protocol,
        "protocol_name": codec.name,
        "type": env.type,
        "type_name": codec.types(env.type).name,
        "sender": env.sender,
        "seq": cols.get("seq"),
        "round": cols.get("round"),
        "length": env.length,
    }


def data_types() -> dict[str, set[str]]:
    """Protocol name -> the names of its message types that carry application data."""
    return {c.name: {lay.name for lay in c.layouts if lay.data} for c in CODECS.values()}


def type_names() -> dict[tuple[str, int], str]:
    """(protocol name, type number) -> type name, for every registered protocol."""
    return {(c.name, int(t)): t.name for c in CODECS.values() for t in c.types}


def load_all() -> None:
    """Register every protocol shipped with the node (importing the package does it)."""
    from . import protocols  # noqa: F401 - registers the codecs


# Register the protocols shipped with the node (their wire modules only: no pydantic, no protocol logic). At the
# bottom, so that their `from gossipnode import wire` finds this module complete.
from .protocols import wires as _wires  # noqa: E402,F401
