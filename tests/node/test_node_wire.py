"""GSGC on the wire (gossipnode.protocols.gsgc.wire inside the common envelope of gossipnode.wire): round trips, sizes, header fields, and rejection of malformed packets."""
from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gossipnode import wire as gwire
from gossipnode.protocols.gsgc import wire
from gossipnode.protocols.gsgc.wire import Data, DecodeError, Gossip, Live, Message, MsgType, Nak, Stable

SAMPLES = [
    Message(MsgType.DATA, 3, 17, 0, Data(3, b"\x00" * 46)),
    Message(MsgType.REPAIR, 5, 17, 0, Data(3, b"payload")),
    Message(MsgType.NAK, 4, 9, 2, Nak(1, ((3, 3), (7, 12)))),
    Message(MsgType.GOSSIP, 1, 10, 7, Gossip((4, 5, wire.MAX_SEQ), (1, 2, 3), 0b1011_0001_1, 9)),
    Message(MsgType.SC_GOSSIP, 2, 11, 1, Gossip((8,), (6,), 0b101, 3)),
    Message(MsgType.STABLE, 0, 12, 7, Stable((9, 9, 10))),
    Message(MsgType.LIVE, 6, 13, 7, Live(bytes([0, 3, 255, 1]))),
    Message(MsgType.GOSSIP_M, 1, 14, 7, Gossip((4, 5, wire.MAX_SEQ), None, 0b1011_0001_1, 9)),
    Message(MsgType.SC_GOSSIP_M, 2, 15, 1, Gossip((8,), None, 0b101, 3)),
    Message(MsgType.LOCAL_STABLE, 3, 16, 4, Stable((9, 9, 10))),
]


def test_every_type_has_a_sample_and_a_layout():
    assert {m.type for m in SAMPLES} == set(MsgType)
    assert {lay.type for lay in wire.CODEC.layouts} == set(MsgType)


def paper_gossip_size(n: int, m: int) -> int:
    """§4.1: a 32-byte header, M (m x 4 bytes), W (n bits) and the 4-byte round; 236 + n/8 for m = 50, the n/8
    rounded up ("with some padding": 243 to 299 bytes for n = 50..500)."""
    return 32 + 4 * m + -(-n // 8) + 4


HEADER_DIFFERENCE = 15  # the paper's 32-byte header + 4-byte round against our 9 + 4 + 4 bytes of headers + m, nbits


@pytest.mark.parametrize("n", [50, 100, 200, 300, 400, 500, 1000])
@pytest.mark.parametrize("m", [1, 25, 50])
def test_gossip_without_s_is_the_papers_size_less_the_header_difference(n, m):
    gossip = wire.encode(Message(MsgType.GOSSIP_M, 1, 1, 1, Gossip((7,) * m, None, (1 << n) - 1, n)))
    assert len(gossip) == paper_gossip_size(n, m) - HEADER_DIFFERENCE
    with_s = wire.encode(Message(MsgType.GOSSIP, 1, 1, 1, Gossip((7,) * m, (5,) * m, (1 << n) - 1, n)))
    assert len(with_s) == len(gossip) + 4 * m  # S: 4 more bytes per sender
    if m == 50:
        assert paper_gossip_size(n, m) == 236 + -(-n // 8)
    assert paper_gossip_size(200, 50) == 261 and paper_gossip_size(50, 50) == 243 and paper_gossip_size(500, 50) == 299


def test_sc_gossip_and_stable_sizes():
    sc = wire.encode(Message(MsgType.SC_GOSSIP_M, 1, 1, 1, Gossip((7,) * 50, None, 0b11, 2)))
    assert len(sc) == paper_gossip_size(2, 50) - HEADER_DIFFERENCE == 222  # W: one bit per local group
    for t in (MsgType.STABLE, MsgType.LOCAL_STABLE):  # S (or a local array) alone: 2 bytes of count, no nbits
        assert len(wire.encode(Message(t, 1, 1, 1, Stable((7,) * 50)))) == 32 + 4 * 50 + 4 - 17 == 219


@pytest.mark.parametrize(("mtype", "body"), [
    (MsgType.GOSSIP, Gossip((1,), None, 1, 1)),
    (MsgType.SC_GOSSIP, Gossip((1,), None, 1, 1)),
    (MsgType.GOSSIP_M, Gossip((1,), (1,), 1, 1)),
    (MsgType.SC_GOSSIP_M, Gossip((1,), (1,), 1, 1)),
])
def test_the_type_says_whether_s_is_there(mtype, body):
    with pytest.raises(ValueError):
        wire.encode(Message(mtype, 0, 1, 0, body))


def test_gossip_with_and_without_s_never_decode_as_each_other():
    m_only = wire.encode(Message(MsgType.GOSSIP_M, 1, 1, 1, Gossip((7, 8), None, 1, 8)))
    as_gossip = bytearray(m_only)
    as_gossip[4] = MsgType.GOSSIP
    with pytest.raises(DecodeError, match="GOSSIP with m=2, nbits=8: body must be 21 bytes"):
        wire.decode(bytes(as_gossip))


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: m.type.name)
def test_round_trip(msg):
    assert wire.decode(wire.encode(msg)) == msg


def test_header_layout_is_fixed_and_big_endian():
    packet = wire.encode(Message(MsgType.STABLE, 0x0102, 0x03040506, 0x0708090A, Stable((1,))))
    # envelope: magic, version 2, protocol 1 (gsgc), type, sender, length of what follows (8 + 6)
    assert packet[:9] == b"GS" + bytes([2, 1, MsgType.STABLE, 0x01, 0x02, 0, 14])
    assert packet[9:17] == bytes([3, 4, 5, 6, 7, 8, 9, 10])  # GSGC header: seq, round
    assert packet[17:] == b"\x00\x01\x00\x00\x00\x01"
    assert wire.HEADER_SIZE == 17


def test_header_fields_is_a_flat_row():
    packet = wire.encode(SAMPLES[3])
    row = wire.header_fields(packet)
    assert tuple(k for k in row if k != "protocol_name") == gwire.HEADER_FIELDS
    assert row == {"version": 2, "protocol": 1, "protocol_name": "gsgc", "type": 4, "type_name": "GOSSIP",
                   "sender": 1, "seq": 10, "round": 7, "length": len(packet) - 9}


@pytest.mark.parametrize("m", [1, 2, 5, 25])
def test_gossip_for_1000_members_and_few_senders_is_under_400_bytes(m):
    msg = Message(MsgType.GOSSIP, 999, 1, 1, Gossip((7,) * m, (5,) * m, (1 << 1000) - 1, 1000))
    size = len(wire.encode(msg))
    assert size == 17 + 4 + 8 * m + 125  # headers, m/nbits, M and S (u32 each), 1000-bit W
    assert size < 400


def test_gossip_bitmap_is_lsb_first():
    packet = wire.encode(Message(MsgType.GOSSIP, 0, 1, 0, Gossip((), (), 1 << 9 | 1, 10)))
    assert packet[-2:] == bytes([0b0000_0001, 0b0000_0010])


def _header(mtype=MsgType.STABLE, length=0, magic=b"GS", version=2, protocol=1):
    """Envelope + GSGC header for a body of `length` bytes (the envelope counts the 8-byte GSGC header too)."""
    return struct.pack("!2sBBBHHII", magic, version, protocol, mtype, 1, length + 8, 1, 0)


@pytest.mark.parametrize(
    ("packet", "reason"),
    [
        (b"", "truncated packet: 0 bytes"),
        (b"GS\x01", "truncated packet: 3 bytes"),
        (_header(magic=b"XX") + b"\x00\x00", "foreign packet"),
        (_header(version=1) + b"\x00\x00", "unsupported wire version 1"),
        (_header(protocol=200) + b"\x00\x00", "unknown protocol id 200"),
        (_header(mtype=99) + b"\x00\x00", "gsgc: unknown message type 99"),
        (_header(length=0xFFF0) + b"\x00\x00", "truncated: the envelope says 65528 bytes follow, the packet carries 10"),
        (b"GS\x02\x01\x06\x00\x01\x00\x04" + b"\x00" * 4, "the GSGC header alone is 8"),
        (_header(length=1) + b"\x00\x00", "trailing bytes"),
        (_header(length=2) + b"\x00\x05", "STABLE with m=5: body must be 22 bytes"),
        (_header(MsgType.LIVE, 2) + b"\xff\xff", "LIVE with n=65535"),
        (_header(MsgType.DATA, 1) + b"\x00", "DATA: body of 1 bytes has no origin"),
        (_header(MsgType.NAK, 12) + struct.pack("!HHII", 0, 1, 9, 3), "range 9..3 is reversed"),
        (_header(MsgType.NAK, 4) + struct.pack("!HH", 0, 4000), "NAK with 4000 ranges"),
        (_header(MsgType.GOSSIP, 5) + struct.pack("!HHB", 0, 4, 0x10), "W has bits set beyond nbits=4"),
        (_header(MsgType.GOSSIP, 4) + struct.pack("!HH", 0, 0), "W has nbits=0"),
        (_header(MsgType.GOSSIP, 6) + struct.pack("!HH", 50000, 8) + b"\x00\x00", "m=50000, nbits=8"),
    ],
)
def test_malformed_packets_are_rejected_with_a_reason(packet, reason):
    with pytest.raises(DecodeError, match=reason.replace(".", r"\.")):
        wire.decode(packet)


def test_decode_error_is_a_value_error():
    assert issubclass(DecodeError, ValueError)


def test_header_fields_checks_the_header_only():
    body_broken = _header(length=2) + b"\x00\x05"
    assert wire.header_fields(body_broken)["type_name"] == "STABLE"
    with pytest.raises(DecodeError, match="foreign"):
        wire.header_fields(b"HTTP/1.1 200 OK\r\n")


@pytest.mark.parametrize(
    "msg",
    [
        Message(MsgType.DATA, 70000, 1, 0, Data(0, b"")),
        Message(MsgType.GOSSIP, 0, 1, 0, Gossip((1,), (1, 2), 1, 1)),
        Message(MsgType.GOSSIP, 0, 1, 0, Gossip((), (), 0b100, 2)),
        Message(MsgType.STABLE, 0, 1, 0, Live(b"")),
        Message(MsgType.DATA, 0, 1, 0, Data(0, bytes(70000))),
    ],
)
def test_encode_refuses_what_does_not_fit(msg):
    with pytest.raises(ValueError):
        wire.encode(msg)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300))
def test_fuzz_random_bytes_decode_or_decode_error(packet):
    try:
        msg = wire.decode(packet)
    except DecodeError:
        return
    assert wire.encode(msg) == packet  # whatever is accepted is canonical


@settings(max_examples=400)
@given(st.sampled_from(SAMPLES), st.data())
def test_fuzz_mutated_packets_decode_or_decode_error(msg, data):
    packet = bytearray(wire.encode(msg))
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(0, len(packet) - 1))
        packet[pos] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(packet)))
    for candidate in (bytes(packet), bytes(packet[:cut])):
        try:
            decoded = wire.decode(candidate)
        except DecodeError:
            continue
        assert wire.encode(decoded) == candidate


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: m.type.name)
def test_the_fast_path_encodes_as_the_generic_envelope_does(msg):
    mtype, sender, rest = wire.CODEC.encode(msg)
    assert wire.encode(msg) == gwire.pack(wire.PROTOCOL_ID, mtype, sender, rest)
