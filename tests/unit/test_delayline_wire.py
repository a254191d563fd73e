"""The delay line's pure edges: the NFQUEUE message parser (one parser for the hot path, the backlog and the
shutdown drain), verdicts, the iptables rules and the config file (no root)."""
from __future__ import annotations

import json
import socket
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.shaping import nfqueue as nfq
from orchestrator.shaping.delayline import QueueSpec, render_config, render_rules
from orchestrator.shaping.params import DirParams, GilbertElliott

COPY = 40


def attr(atype: int, payload: bytes) -> bytes:
    n = 4 + len(payload)
    return struct.pack("=HH", n, atype) + payload + b"\0" * ((4 - n % 4) % 4)


def ipv4(total_len: int, copied: int) -> bytes:
    hdr = bytes([0x45, 0]) + struct.pack(">H", total_len) + bytes(16)
    return (hdr + bytes(max(0, copied - len(hdr))))[:copied]


def packet_msg(qnum: int, pkt_id: int, payload: bytes, cap_len: int | None = None, extra: bytes = b"") -> bytes:
    """An NFQNL_MSG_PACKET as the kernel builds it: PACKET_HDR first, optional attributes, PAYLOAD last."""
    attrs = attr(nfq.NFQA_PACKET_HDR, struct.pack(">IHB", pkt_id, 0x0800, 4)) + extra
    if cap_len is not None:
        attrs += attr(nfq.NFQA_CAP_LEN, struct.pack(">I", cap_len))
    attrs += attr(nfq.NFQA_PAYLOAD, payload)
    body = struct.pack("=BB", socket.AF_INET, 0) + struct.pack(">H", qnum) + attrs
    return struct.pack("=IHHII", 16 + len(body), nfq.MSG_PACKET, 0, 0, 0) + body


def error_msg(err: int) -> bytes:
    body = struct.pack("=i", err) + bytes(16)
    return struct.pack("=IHHII", 16 + len(body), nfq.NLMSG_ERROR, 0, 0, 0) + body


def test_fast_path_fields():
    parse = nfq.packet_parser(COPY)
    m = packet_msg(7, 123456, ipv4(1400, COPY), extra=attr(5, struct.pack(">I", 3)))  # + an ifindex attribute
    assert parse(m, len(m)) == ([(7, 123456, 1400)], None)


def test_short_and_non_ipv4_payloads_take_the_walk():
    parse = nfq.packet_parser(COPY)
    short = packet_msg(1, 5, ipv4(28, 28))                    # shorter than the copy range: no fixed offsets
    arp_like = packet_msg(2, 6, bytes([0x00]) * COPY, cap_len=60)  # not IPv4: the copied length
    none = packet_msg(3, 7, b"", cap_len=60)                  # no payload bytes: NFQA_CAP_LEN
    buf = short + arp_like + none
    assert parse(buf, len(buf))[0] == [(1, 5, 28), (2, 6, COPY), (3, 7, 60)]


def test_many_messages_errors_and_a_truncated_tail():
    parse = nfq.packet_parser(COPY)
    msgs = [packet_msg(q, 100 + q, ipv4(60 + q, COPY)) for q in range(5)]
    buf = msgs[0] + error_msg(-22) + error_msg(0) + b"".join(msgs[1:])
    pkts, errors = parse(bytearray(buf) + bytes(100), len(buf) + 10)   # n: 10 bytes of a next header only
    assert pkts == [(q, 100 + q, 60 + q) for q in range(5)]
    assert errors == [22]


@settings(max_examples=300, deadline=None)
@given(qnum=st.integers(0, 65535), pkt_id=st.integers(0, 2**32 - 1), total=st.integers(20, 65535),
       copied=st.integers(0, 80), extra=st.lists(st.binary(max_size=9), max_size=3),
       copy_range=st.sampled_from([20, 40, 64]))
def test_parser_agrees_with_the_message(qnum, pkt_id, total, copied, extra, copy_range):
    """Whatever the kernel adds between the header and the payload, and however much it copies (up to the
    copy range), the parser finds the queue, the id and the length."""
    copied = min(copied, copy_range)
    payload = ipv4(total, copied) if copied >= 4 else b"\x45" * copied
    m = packet_msg(qnum, pkt_id, payload, cap_len=total, extra=b"".join(attr(20 + i, x) for i, x in enumerate(extra)))
    expected = total if copied >= 4 else (copied or total)
    assert nfq.packet_parser(copy_range)(m, len(m)) == ([(qnum, pkt_id, expected)], None)


def test_verdict_layout():
    v = nfq.verdict(3, 0xDEADBEEF, nfq.NF_ACCEPT)
    mlen, mtype, flags, _seq, _pid = struct.unpack_from("=IHHII", v)
    assert (mlen, mtype, flags, len(v)) == (32, nfq.MSG_VERDICT, nfq.NLM_F_REQUEST, 32)
    assert struct.unpack_from(">H", v, 18)[0] == 3
    alen, atype = struct.unpack_from("=HH", v, 20)
    assert (alen, atype) == (12, nfq.NFQA_VERDICT_HDR)
    assert struct.unpack_from(">II", v, 24) == (nfq.NF_ACCEPT, 0xDEADBEEF)


def test_parser_with_time_reads_the_kernel_timestamp():
    """A forwarded packet as the kernel (6.18) queues it from FORWARD: PACKET_HDR INDEV OUTDEV HWADDR TIMESTAMP
    CAP_LEN SKB_INFO PAYLOAD; a local one (OUTPUT) has no TIMESTAMP."""
    def attr(t, p):
        n = 4 + len(p)
        return struct.pack("=HH", n, t) + p + b"\0" * ((4 - n % 4) % 4)

    def msg(ts, skb_info=True):
        ip = bytes([0x45, 0]) + struct.pack(">H", 100) + bytes(COPY - 4)
        a = attr(1, struct.pack(">IHB", 77, 0x800, 4)) + attr(5, struct.pack(">I", 2)) + attr(6, struct.pack(">I", 3))
        if ts is not None:
            a += attr(9, bytes(12)) + attr(4, struct.pack(">QQ", *ts))
        a += attr(13, struct.pack(">I", 100)) + (attr(14, struct.pack(">I", 0)) if skb_info else b"") + attr(10, ip)
        body = struct.pack("=BB", 2, 0) + struct.pack(">H", 5) + a
        return struct.pack("=IHHII", 16 + len(body), nfq.MSG_PACKET, 0, 0, 0) + body

    parse = nfq.packet_parser(COPY, with_time=True)
    buf = msg((1_700_000_000, 250_000)) + msg((1_700_000_001, 0), skb_info=False) + msg(None)
    assert parse(buf, len(buf))[0] == [(5, 77, 100, 1_700_000_000.25), (5, 77, 100, 1_700_000_001.0),
                                       (5, 77, 100, 0.0)]
    assert nfq.packet_parser(COPY)(buf, len(buf))[0] == [(5, 77, 100)] * 3


def test_render_rules_text():
    r = render_rules([("eth0", 0), ("h3-eth1", 7)])
    assert r.splitlines() == [
        "*mangle",
        "-A FORWARD -o eth0 -m comment --comment delayline -j NFQUEUE --queue-num 0",
        "-A OUTPUT -o eth0 -m comment --comment delayline -j NFQUEUE --queue-num 0",
        "-A FORWARD -o h3-eth1 -m comment --comment delayline -j NFQUEUE --queue-num 7",
        "-A OUTPUT -o h3-eth1 -m comment --comment delayline -j NFQUEUE --queue-num 7",
        "COMMIT",
    ]
    assert "--queue-bypass" not in r and "fail" not in r      # fail closed
    with pytest.raises(ValueError):
        render_rules([("eth0; rm -rf /", 0)])
    with pytest.raises(ValueError):
        render_rules([("eth0", 70000)])


def test_config_roundtrip():
    q = QueueSpec("h1-eth0", "/run/netns/h1", 0, DirParams(rate_bps=30_000, delay_s=0.005, queue_pkts=64,
                                                           gemodel=GilbertElliott(p=0.01, r=0.3)))
    cfg = render_config([q], control="/tmp/x.sock")
    assert QueueSpec.from_json(json.loads(json.dumps(cfg))["queues"][0]) == q
    with pytest.raises(ValueError):
        QueueSpec.from_json({**q.to_json(), "extra": 1})
