"""One protocol message's packet-table columns from its bytes (`_message`): its envelope and protocol header
(`wire.header_fields`; in the common case the codec's `header_columns`) and, when the capture holds the whole
message, its body (`wire.decode`), or why it is not decoded. The per-packet decoder calls it for datagrams
(analysis/pcap.py) and TCP messages (analysis/pcaptcp.py); the vectorised one (analysis/pcapframes.py) for what no
spec vouches for. Like them it runs on the Spark executors: the standard library and the node's `wire` only.
"""
from __future__ import annotations

from gossipnode import wire

_FIELD_SIZE = {"u8": 1, "u16": 2, "u32": 4}
ENV = wire.ENVELOPE_SIZE
_ENVELOPE = wire.ENVELOPE
_NO_HEADER = (None,) * (len(wire.HEADER_FIELDS) + 1)   # + protocol_name

def header_size(codec: wire.Codec) -> int:
    """Bytes of a codec's own header after the envelope (what `header_columns` reads)."""
    return sum(_FIELD_SIZE[f.kind] * (f.count if isinstance(f.count, int) else 1) for f in codec.header)


_HEADER_SIZES: dict[int, int] = {}


def _header_size_of(protocol: int) -> int:
    size = _HEADER_SIZES.get(protocol)
    if size is None:
        size = _HEADER_SIZES[protocol] = header_size(wire.CODECS[protocol])
    return size


_CODEC_INFO: dict[int, tuple[wire.Codec, dict[int, str], int]] = {}   # protocol id -> (codec, type names, header)


def _codec_info(protocol: int) -> tuple[wire.Codec, dict[int, str], int] | None:
    info = _CODEC_INFO.get(protocol)
    if info is None:
        codec = wire.CODECS.get(protocol)
        if codec is None:
            return None
        info = _CODEC_INFO[protocol] = (codec, {int(t): t.name for t in codec.types}, _header_size_of(protocol))
    return info


def _message(buf: bytes, size: int, captured: int) -> tuple:
    """(decoded, error, *HEADER_FIELDS) of one message of `size` bytes of which the first `captured` are in `buf`
    (the rest were cut by the snaplen). `captured` >= the envelope."""
    # The common case in one pass: a valid envelope of a registered protocol whose length is the message's.
    magic, version, protocol, mtype, sender, length = _ENVELOPE.unpack_from(buf)
    info = _codec_info(protocol) if magic == wire.MAGIC and version == wire.VERSION and length == size - ENV \
        else None
    name = info[1].get(mtype) if info is not None else None
    if name is not None:
        codec, _, hsize = info
        if captured < ENV + hsize:
            return (False, "protocol header not captured (snaplen)") + _NO_HEADER
        try:
            cols = codec.header_columns(mtype, memoryview(buf)[ENV:captured])
            if captured == size:
                wire.decode(buf)
        except wire.DecodeError as exc:
            return (False, str(exc)) + _NO_HEADER
        return (True, None, wire.VERSION, protocol, codec.name, mtype, name, sender, cols.get("seq"),
                cols.get("round"), length)
    # Anything else: the wire's own checks name the problem.
    try:
        if captured < size:
            env = wire.parse_envelope(buf[:ENV], exact=False)
            if captured < ENV + _header_size_of(env.protocol):
                return (False, "protocol header not captured (snaplen)") + _NO_HEADER
            h = wire.header_fields(bytes(buf[:captured]) + bytes(size - captured))
        else:
            h = wire.header_fields(buf)
            wire.decode(buf)
    except wire.DecodeError as exc:
        return (False, str(exc)) + _NO_HEADER
    return (True, None, h["version"], h["protocol"], h["protocol_name"], h["type"], h["type_name"], h["sender"],
            h["seq"], h["round"], h["length"])
