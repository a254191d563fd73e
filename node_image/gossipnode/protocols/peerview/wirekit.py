"""A protocol codec generated from its `Layout`s: every message is a frozen dataclass whose fields are the
layout's fields (after `sender`), except the counts, which are the lengths of the arrays they size.

Field kinds: u8, u16, u32 scalars; u16/u32 arrays sized by an earlier count field; `bytes` "rest" (the payload,
last). No protocol header after the envelope (`Codec.header` is empty); `seq_field` names the body field the
packet table shows as `seq` (the data message's sequence number).
"""
from __future__ import annotations

import struct
from dataclasses import fields as dc_fields
from enum import IntEnum
from typing import Any

from gossipnode import wire
from gossipnode.wire import F, Layout

_FMT = {"u8": "B", "u16": "H", "u32": "I"}


class _Plan:
    """How one message type is laid out: its dataclass and its fields in order."""

    def __init__(self, cls: type, layout: Layout) -> None:
        self.cls = cls
        self.layout = layout
        self.count_of: dict[str, str] = {}       # count field -> the array it sizes
        for f in layout.body:
            if isinstance(f.count, str) and f.count != "rest":
                self.count_of[f.count] = f.name
        attrs = [f.name for f in dc_fields(cls)]
        expected = ["sender"] + [f.name for f in layout.body if f.name not in self.count_of]
        if attrs != expected:
            raise TypeError(f"{cls.__name__} fields {attrs} do not follow its layout {expected}")


def build(pid: int, name: str, types: type[IntEnum], messages: dict[IntEnum, tuple[type, Layout]],
          seq_field: str | None = None, seq_type: IntEnum | None = None) -> wire.Codec:
    """Register the codec of protocol `name` (id `pid`): `messages` maps each type to (dataclass, Layout)."""
    plans = {int(t): _Plan(cls, lay) for t, (cls, lay) in messages.items()}
    type_of_cls = {cls: int(t) for t, (cls, _) in messages.items()}

    def encode(msg: Any) -> tuple[int, int, bytes]:
        mtype = type_of_cls[type(msg)]
        plan = plans[mtype]
        parts: list[bytes] = []
        try:
            for f in plan.layout.body:
                if f.name in plan.count_of:
                    value = len(getattr(msg, plan.count_of[f.name]))
                    parts.append(struct.pack("!" + _FMT[f.kind], value))
                elif f.kind == "bytes":
                    parts.append(bytes(getattr(msg, f.name)))
                elif f.count is None:
                    parts.append(struct.pack("!" + _FMT[f.kind], getattr(msg, f.name)))
                else:
                    values = getattr(msg, f.name)
                    parts.append(struct.pack(f"!{len(values)}{_FMT[f.kind]}", *values))
        except struct.error as exc:
            raise ValueError(f"cannot encode {plan.layout.name}: {exc}") from None
        return mtype, msg.sender, b"".join(parts)

    def decode(mtype: int, sender: int, rest: memoryview) -> Any:
        plan = plans[mtype]
        values: dict[str, Any] = {}
        counts: dict[str, int] = {}
        pos = 0
        for f in plan.layout.body:
            if f.kind == "bytes":
                values[f.name] = bytes(rest[pos:])
                pos = len(rest)
                continue
            n = 1 if f.count is None else counts[f.count]
            fmt = struct.Struct(f"!{n}{_FMT[f.kind]}")
            if len(rest) - pos < fmt.size:
                raise wire.DecodeError(f"{name} {plan.layout.name}: truncated at {f.name} ({len(rest) - pos} "
                                       f"bytes left, {fmt.size} needed)")
            got = fmt.unpack_from(rest, pos)
            pos += fmt.size
            if f.name in plan.count_of:
                counts[f.name] = got[0]
            elif f.count is None:
                values[f.name] = got[0]
            else:
                values[f.name] = tuple(got)
        if pos != len(rest):
            raise wire.DecodeError(f"{name} {plan.layout.name}: {len(rest) - pos} trailing bytes")
        return plan.cls(sender=sender, **values)

    seq_offset = None
    if seq_field is not None and seq_type is not None:
        seq_offset = 0
        for f in plans[int(seq_type)].layout.body:
            if f.name == seq_field:
                break
            seq_offset += struct.calcsize("!" + _FMT[f.kind])

    def header_columns(mtype: int, rest: memoryview) -> dict[str, int | None]:
        if seq_offset is not None and mtype == int(seq_type) and len(rest) >= seq_offset + 4:
            return {"seq": struct.unpack_from("!I", rest, seq_offset)[0], "round": None}
        return {"seq": None, "round": None}

    codec = wire.register(wire.Codec(
        id=pid, name=name, types=types, header=(), layouts=tuple(lay for _, lay in messages.values()),
        encode=encode, decode=decode, header_columns=header_columns))
    for cls, _ in messages.values():
        cls.CODEC = codec
    return codec


def ids(name: str, doc: str = "") -> tuple[F, F]:
    """A u8 count and an array of that many u16 member ids."""
    return F(f"n_{name}", "u8"), F(name, "u16", f"n_{name}", doc)
