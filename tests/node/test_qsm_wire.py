"""QSM's wire (protocol id 10): every message round-trips through the common envelope; malformed packets are
DecodeErrors, never crashes."""
from __future__ import annotations

import pytest

from gossipnode import wire
from gossipnode.protocols.qsm.wire import MIN_DATA_SIZE, Ack, Data, Entry, MsgType, Nak, Pull, Token

MESSAGES = [
    Data(1, 0, 5, 1, 0, 3, b"payload"),
    Data(4, 2, 9, 1, 1, 7, b"", MsgType.RETRANS),
    Data(4, 2, 9, 1, 1, 7, b"x", MsgType.FORWARD, 1),
    Token(2, 1, 7, 0, 1234, [Entry(1, 2, 3, 4, 5, ((1, 2),), ((3, 3), (5, 6)), 3, 5), Entry(9)]),
    Token(2, 1, 8, 2),
    Pull(1, 0, 2, ((1, 4), (9, 9))),
    Nak(1, 0, 2, 1, ((1, 1),)),
    Ack(1, 0, 3, 2, 9, 10, 500, 1, 10),
]


@pytest.mark.parametrize("msg", MESSAGES, ids=lambda m: m.type.name)
def test_round_trip(msg):
    pkt = wire.encode(msg)
    assert pkt[3] == 10
    assert wire.decode(pkt) == msg
    fields = wire.header_fields(pkt)
    assert fields["protocol_name"] == "qsm" and fields["type_name"] == msg.type.name


def test_data_size_and_header_columns():
    pkt = wire.encode(Data(1, 0, 5, 1, 0, 3, b""))
    assert len(pkt) == MIN_DATA_SIZE == 24     # envelope 9, header 6 (region u16, seq u32), 9
    assert wire.header_fields(pkt)["seq"] == 5
    assert wire.header_fields(wire.encode(MESSAGES[3]))["round"] == 7
    assert wire.data_types()["qsm"] == {"DATA"}


@pytest.mark.parametrize("msg", MESSAGES, ids=lambda m: m.type.name)
def test_truncated_and_padded_packets_are_decode_errors(msg):
    pkt = wire.encode(msg)
    for cut in range(wire.ENVELOPE_SIZE, len(pkt)):
        body = pkt[wire.ENVELOPE_SIZE:cut]
        bad = pkt[:7] + len(body).to_bytes(2, "big") + body
        if msg.type in (MsgType.DATA, MsgType.RETRANS, MsgType.FORWARD) and cut >= MIN_DATA_SIZE:
            continue    # a shorter payload is still a well-formed DATA
        with pytest.raises(wire.DecodeError):
            wire.decode(bad)


def test_token_entry_and_ack_carry_the_caching_stable_prefixes():
    # an entry: origin u16, cutoff, purge, replicated, max_seen, stable, cstable u32, npn, nprev u8 = 28 bytes
    tok = MESSAGES[3]
    assert len(wire.encode(tok)) == wire.ENVELOPE_SIZE + 6 + 6 + 2 * 28 + 8 * 3
    back = wire.decode(wire.encode(tok)).entries[0]
    assert (back.replicated, back.cstable, back.stable) == (3, 5, 5)
    assert wire.decode(wire.encode(tok)).entries[1].cstable == 0xFFFFFFFF
    # ACK: origin u16, stable, cached, max_seen, rate u32, m u8 = 19 bytes after the 5-byte header
    ack = wire.decode(wire.encode(MESSAGES[-1]))
    assert (ack.stable, ack.cached, ack.max_seen) == (9, 10, 10)
    assert len(wire.encode(MESSAGES[-1])) == wire.ENVELOPE_SIZE + 6 + 19


def test_region_and_group_indexes_beyond_256():
    # region u16 in the header, group u16 in DATA: more than 256 regions or groups round-trip
    for msg in (Data(1, 300, 5, 1, 4000, 3, b"p"), Ack(1, 65535, 3, 2, 9, 10, 500, 1, 10),
                Pull(1, 256, 2, ((1, 1),)), Token(2, 1000, 7, 0, 5, [Entry(1)])):
        assert wire.decode(wire.encode(msg)) == msg
    assert wire.header_fields(wire.encode(Data(1, 300, 5, 1, 4000, 3, b"")))["seq"] == 5
    with pytest.raises(ValueError):
        wire.encode(Data(1, 65536, 5, 1, 0, 3, b""))


def test_bad_ranges_and_zero_seq():
    with pytest.raises(wire.DecodeError, match="bad range"):
        wire.decode(wire.encode(Pull(1, 0, 2, ((5, 4),))))
    with pytest.raises(wire.DecodeError, match="seq 0"):
        wire.decode(wire.encode(Data(1, 0, 0, 1, 0, 3, b"")))
