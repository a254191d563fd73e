"""The executor-side pcap reader and frame decoder, without Spark."""
from __future__ import annotations

import struct

import pytest

from analysis.pcap import CaptureFile, FrameDecoder, PcapError, PcapFile, packet_rows, scan
from analysis.schemas import PACKET_COLUMNS
from tests.analysis import synthetic as syn

NAMES = {syn.ADDR[n]: n for n in syn.ADDR}


def cap(path, node="h0", address=syn.ADDR["h0"]) -> CaptureFile:
    return CaptureFile(node, "any", str(path), f"pcaps/{path.name}", address)


def rows_by_column(rows):
    return [dict(zip(PACKET_COLUMNS, r)) for r in rows]


def test_rows_of_a_cooked_v2_capture(tmp_path):
    f = syn.write_pcap(tmp_path / "h0-any.pcap", 276, syn.H0_FRAMES)
    rows = rows_by_column(packet_rows(cap(f), "r1", syn.T0, NAMES))
    assert all(len(r) == len(PACKET_COLUMNS) for r in rows)
    got = [(r["frame"], r["frame_len"], r["cap_len"], r["if_index"], r["direction"], r["ip_src"], r["ip_dst"],
            r["src_node"], r["dst_node"], r["ip_proto"], r["src_port"], r["dst_port"], r["payload_len"],
            r["decoded"], r["error"], r["type_name"], r["sender"], r["seq"], r["round"], r["length"])
           for r in rows]
    g, lv, d = "GOSSIP", "LIVE", "DATA"
    a0, a1, a3 = "10.0.0.1", "10.0.0.2", "10.0.0.4"
    assert got == [
        (1, 86, 86, 2, "out", a0, a1, "h0", "h1", 17, 7000, 7000, 38, True, None, g, 0, 1, 0, 29),
        (2, 71, 71, 2, "out", a0, a1, "h0", "h1", 17, 7000, 7000, 23, True, None, lv, 0, 2, 0, 14),
        (3, 97, 97, 2, "in", a1, a0, "h1", "h0", 17, 7000, 7000, 49, True, None, d, 1, 1, 0, 40),
        (4, 86, 86, 2, "out", a0, a1, "h0", "h1", 17, 7000, 7000, 38, True, None, g, 0, 3, 0, 29),
        (5, 86, 86, 2, "out", a0, a1, "h0", "h1", 17, 7000, 7000, 38, True, None, g, 0, 4, 0, 29),
        (6, 52, 52, 2, "in", a1, a0, "h1", "h0", 1, None, None, None, False, "not UDP (ICMP)",
         None, None, None, None, None),
        (7, 48, 48, 2, None, None, None, None, None, None, None, None, None, False,
         "not IPv4 (ethertype 0x0806)", None, None, None, None, None),
        (8, 86, 86, 2, "out", a0, a1, "h0", "h1", 17, 7000, 7000, 38, True, None, g, 0, 5, 1, 29),
        (9, 71, 71, 2, "out", a0, a1, "h0", "h1", 17, 7000, 7000, 23, True, None, lv, 0, 6, 0, 14),
        (10, 97, 97, 2, "in", a1, a0, "h1", "h0", 17, 7000, 7000, 49, True, None, d, 1, 2, 0, 40),
        (11, 58, 58, 2, "out", a0, "10.9.9.9", "h0", None, 17, 40000, 53, 10, False,
         "UDP not to or from port 7000", None, None, None, None, None),
        (12, 86, 86, 2, "in", a3, a0, "h3", "h0", 17, 7000, 7000, 38, True, None, g, 3, 1, 0, 29),
    ]
    assert rows[0]["ts"] == pytest.approx(1001.1, abs=1e-6)
    assert rows[0]["t_s"] == pytest.approx(1.1, abs=1e-6)
    assert {r["run_id"] for r in rows} == {"r1"} and {r["file"] for r in rows} == {"pcaps/h0-any.pcap"}


def test_snaplen_cut_payloads_decode_from_the_header_and_vlan_is_skipped(tmp_path):
    f = syn.write_pcap(tmp_path / "h1-any.pcap", 1, syn.H1_FRAMES, snaplen=syn.H1_SNAPLEN)
    rows = rows_by_column(packet_rows(cap(f, "h1", syn.ADDR["h1"]), "r", syn.T0, NAMES))
    assert len(rows) == 13
    first = rows[0]
    assert (first["frame_len"], first["cap_len"], first["payload_len"], first["payload_truncated"],
            first["decoded"], first["type_name"], first["seq"], first["length"]) == (91, 60, 49, True, True,
                                                                                      "DATA", 1, 40)
    foreign, vlan = rows[11], rows[12]
    assert (foreign["direction"], foreign["decoded"], foreign["error"]) == (
        "in", False, "foreign packet: magic b'XX', expected b'GS'")
    assert (vlan["direction"], vlan["ip_dst"], vlan["payload_len"], vlan["decoded"], vlan["error"]) == (
        "out", "10.0.0.4", 38, False, "protocol header not captured (snaplen)")


def test_a_whole_payload_is_checked_to_the_end_of_the_body(tmp_path):
    bad_body = syn.gossip(0, 1)[:-1] + b"\xff"  # W with bits set beyond nbits = 4
    f = syn.write_pcap(tmp_path / "x.pcap", 276, [(1001.0, syn.sll2(syn.udp("h0", "h1", bad_body)))])
    (row,) = rows_by_column(packet_rows(cap(f), "r", syn.T0, NAMES))
    assert not row["decoded"] and row["error"] == "GOSSIP: W has bits set beyond nbits=4"
    assert row["type_name"] is None


def test_linux_cooked_v1_and_raw_ip(tmp_path):
    ip = syn.udp("h2", "h0", syn.live(2, 1))
    for linktype, frame in ((113, syn.sll(ip)), (101, bytes(ip))):
        f = syn.write_pcap(tmp_path / f"{linktype}.pcap", linktype, [(1002.0, frame)])
        (row,) = rows_by_column(packet_rows(cap(f, "h2", syn.ADDR["h2"]), "r", syn.T0, NAMES))
        assert (row["if_index"], row["direction"], row["type_name"], row["sender"]) == (None, "out", "LIVE", 2)


def test_unsupported_link_type_keeps_the_frames_as_undecodable(tmp_path):
    f = syn.write_pcap(tmp_path / "x.pcap", 147, [(1001.0, b"\x00" * 40)])
    (row,) = rows_by_column(packet_rows(cap(f), "r", syn.T0, NAMES))
    assert (row["frame_len"], row["decoded"], row["error"]) == (40, False, "unsupported link type 147")


def test_fragments_and_short_headers_are_undecodable():
    dec = FrameDecoder(101, syn.ADDR["h0"], NAMES)

    def decoded_error(frame: bytes) -> tuple:
        (row,) = dec.decode(frame)
        cols = dict(zip(PACKET_COLUMNS[9:], row))
        return cols["decoded"], cols["error"]

    ip = syn.udp("h0", "h1", syn.gossip(0, 1))
    ip.mf = 1  # more fragments
    assert decoded_error(bytes(ip)) == (False, "IP fragment")
    assert decoded_error(bytes(syn.udp("h0", "h1", syn.gossip(0, 1)))[:24]) == (False, "UDP header not captured")
    assert decoded_error(b"\x60" + b"\x00" * 39) == (False, "not IPv4 (IP version 6)")


def test_truncated_file_yields_the_whole_records_and_scan_names_the_problem(tmp_path):
    whole = 24 + sum(16 + len(f) for _, f in syn.H2_FRAMES[:2])
    f = syn.write_pcap(tmp_path / "h2-any.pcap", 113, syn.H2_FRAMES, cut=whole + 16 + 10)
    c = cap(f, "h2", syn.ADDR["h2"])
    assert [r[4] for r in packet_rows(c, "r", syn.T0, NAMES)] == [1, 2]
    node, iface, rel, link_type, packets, total, first, last, error = scan(c)
    assert (node, iface, rel, link_type, packets, total) == ("h2", "any", "pcaps/h2-any.pcap", 113, 2, 67 + 82)
    assert error == f"pcaps/h2-any.pcap: truncated packet 3 at byte {whole} after 2 packets (10 of 82 bytes)"
    assert first == pytest.approx(1002.2) and last == pytest.approx(1002.3)


@pytest.mark.parametrize("content, message", [
    (b"", "pcaps/x.pcap: empty file (no pcap header)"),
    (b"\xd4\xc3\xb2\xa1\x02\x00", "pcaps/x.pcap: truncated pcap header (6 bytes, needs 24)"),
    (b"\x0a\x0d\x0d\x0a" + b"\x00" * 40, "pcaps/x.pcap: not a pcap file: a pcapng file (only classic pcap is read)"),
    (b"GIF89a" + b"\x00" * 40, "pcaps/x.pcap: not a pcap file: magic 0x38464947"),
])
def test_files_that_are_not_pcaps(tmp_path, content, message):
    f = tmp_path / "x.pcap"
    f.write_bytes(content)
    assert scan(cap(f))[-1] == message
    assert list(packet_rows(cap(f), "r", syn.T0, NAMES)) == []


def test_corrupt_record_header(tmp_path):
    f = syn.write_pcap(tmp_path / "x.pcap", 276, syn.H0_FRAMES[:2])
    data = bytearray(f.read_bytes())
    second = 24 + 16 + len(syn.H0_FRAMES[0][1])
    struct.pack_into("<I", data, second + 8, 10_000_000)  # captured length
    f.write_bytes(bytes(data))
    assert scan(cap(f))[4:6] == (1, 86)
    assert scan(cap(f))[-1] == (f"pcaps/x.pcap: corrupt record header at byte {second} after 1 packets "
                                f"(captured length 10000000, original length 71)")


def test_missing_file(tmp_path):
    assert scan(cap(tmp_path / "h3-any.pcap"))[-1] == "pcaps/h3-any.pcap: file not found"


def test_big_endian_nanosecond_pcap(tmp_path):
    frame = syn.sll2(syn.udp("h0", "h1", syn.gossip(0, 1)))
    f = tmp_path / "be.pcap"
    f.write_bytes(struct.pack(">IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 65535, 276)
                  + struct.pack(">IIII", 1001, 250_000_000, len(frame), len(frame)) + frame)
    with PcapFile(f) as pf:
        ((n, ts, cap_len, orig_len, data),) = list(pf)
    assert (n, ts, cap_len, orig_len, data) == (1, 1001.25, 86, 86, frame)
    with pytest.raises(PcapError, match="truncated pcap header"):
        (tmp_path / "short.pcap").write_bytes(b"\xa1\xb2\x3c\x4d")
        PcapFile(tmp_path / "short.pcap")


# --- the `direct` protocol's transports (tests/analysis/synthetic.py, "runs of the direct protocol") -------------

from analysis import pcap as P  # noqa: E402
from analysis import pcaptcp as T  # noqa: E402


def direct_rows(tmp_path, transport: str, node: str, snaplen: int = 65535, drop=None) -> list[dict]:
    recs = sorted(syn._direct_frames(transport)[node], key=lambda r: r[0])
    if drop is not None:
        recs = [r for r in recs if not drop(r[1])]
    f = syn.write_pcap(tmp_path / f"{node}-{transport}.pcap", 276, recs, snaplen)
    return rows_by_column(packet_rows(cap(f, node, syn.ADDR[node]), "r", syn.T0, NAMES))


def test_udp_and_multicast_datagrams_of_direct(tmp_path):
    rows = direct_rows(tmp_path, "mcast", "h3")
    data = [r for r in rows if r["decoded"]]
    # h3 receives each of the 5 messages once, to 239.1.0.1:7001 from port 40000 + the sender's id.
    assert [(r["direction"], r["transport"], r["ip_dst"], r["src_port"], r["dst_port"], r["protocol"],
             r["protocol_name"], r["type_name"], r["sender"], r["seq"], r["round"], r["length"]) for r in data] == [
        ("in", "mcast", "239.1.0.1", 40000, 7001, 2, "direct", "DATA", 0, 1, None, 41),
        ("in", "mcast", "239.1.0.1", 40001, 7001, 2, "direct", "DATA", 1, 1, None, 41),
        ("in", "mcast", "239.1.0.1", 40000, 7001, 2, "direct", "DATA", 0, 2, None, 41),
        ("in", "mcast", "239.1.0.1", 40001, 7001, 2, "direct", "DATA", 1, 2, None, 41),
        ("in", "mcast", "239.1.0.1", 40000, 7001, 2, "direct", "DATA", 0, 3, None, 41)]
    assert sorted(r["error"] for r in rows if not r["decoded"]) == [
        "multicast UDP not to a group port (7001)", "not IPv4 (ethertype 0x0806)"]
    sent = [r for r in direct_rows(tmp_path, "mcast", "h0") if r["decoded"] and r["direction"] == "out"]
    assert [(r["seq"], r["ip_dst"]) for r in sent] == [(1, "239.1.0.1"), (2, "239.1.0.1"), (3, "239.1.0.1")]
    # a group port elsewhere: the same datagrams are not the node's
    f = syn.write_pcap(tmp_path / "x.pcap", 276, syn._direct_frames("mcast")["h3"])
    other = rows_by_column(packet_rows(cap(f, "h3", syn.ADDR["h3"]), "r", syn.T0, NAMES,
                                       ports=P.Ports(mcast=frozenset({7009}))))
    assert sum(r["decoded"] for r in other) == 0
    udp = [r for r in direct_rows(tmp_path, "udp", "h2") if r["decoded"]]
    assert {(r["transport"], r["direction"], r["src_node"]) for r in udp} == {("udp", "in", "h0"), ("udp", "in", "h1")}
    assert len(udp) == 5


def test_tcp_messages_at_the_frame_that_completes_them(tmp_path):
    rows = direct_rows(tmp_path, "tcp", "h3")
    msgs = [(r["src_node"], r["msg_index"], r["sender"], r["seq"], r["payload_len"]) for r in rows if r["decoded"]]
    # h0 -> h3: segments [0, 50), [100, 150) (ahead of the gap), [50, 100) (fills it: m2 and m3 complete here);
    # h1 -> h3: [0, 4), [4, 9) (m1's envelope over two segments), [9, 50) completes m1, [50, 100) is m2.
    assert msgs == [("h0", 0, 0, 1, 50), ("h0", 0, 0, 2, 50), ("h0", 1, 0, 3, 50), ("h1", 0, 1, 1, 41),
                    ("h1", 0, 1, 2, 50)]
    gap_fill = [r for r in rows if r["decoded"] and r["seq"] in (2, 3) and r["sender"] == 0]
    assert gap_fill[0]["frame"] == gap_fill[1]["frame"] and gap_fill[0]["ts"] == pytest.approx(1001.02)
    reasons = sorted(r["error"] for r in rows if not r["decoded"] and r["transport"] == "tcp"
                     and r["error"] != T.TCP_NO_PAYLOAD)
    assert reasons == [T.TCP_AHEAD, T.TCP_PARTIAL, T.TCP_PARTIAL]
    assert {r["transport"] for r in rows if r["decoded"]} == {"tcp"} and all(r["length"] == 41 for r in rows
                                                                             if r["decoded"])


def test_tcp_coalesced_split_and_retransmitted(tmp_path):
    # h1's capture of h0 -> h1 (from port 50001): [0, 100) = m1 + m2, [100, 105) = m3's first 5 bytes,
    # [105, 150) completes m3, then [105, 150) again. h1 -> h0 on the same connection: [0, 100) = both of h1's.
    rows = direct_rows(tmp_path, "tcp", "h1")
    fwd = [r for r in rows if r["src_port"] == 50001 and r["payload_len"]]
    assert [(r["payload_len"], r["msg_index"], r["decoded"], r["seq"], r["error"]) for r in fwd] == [
        (100, 0, True, 1, None), (100, 1, True, 2, None), (5, 0, False, None, T.TCP_PARTIAL),
        (45, 0, True, 3, None), (45, 0, False, None, T.TCP_RETRANSMISSION)]
    back = [r for r in rows if r["dst_port"] == 50001 and r["decoded"]]
    assert [(r["direction"], r["msg_index"], r["sender"], r["seq"]) for r in back] == [("out", 0, 1, 1),
                                                                                      ("out", 1, 1, 2)]


def test_tcp_snaplen_never_guesses_a_boundary(tmp_path):
    # Frames are 20 (cooked v2) + 20 (IP) + 20 (TCP) bytes of headers. Snaplen 120 keeps 60 payload bytes: m1
    # whole, m2's envelope but not its 4-byte seq; 100 keeps 40: m1's headers, not m2's envelope (bytes 50-58).
    rows = direct_rows(tmp_path, "tcp", "h1", snaplen=120)
    fwd = [(r["msg_index"], r["decoded"], r["seq"], r["payload_truncated"], r["error"]) for r in rows
           if r["src_port"] == 50001 and r["payload_len"]]
    assert fwd == [(0, True, 1, False, None), (1, False, None, True, "protocol header not captured (snaplen)"),
                   (0, False, None, False, T.TCP_PARTIAL), (0, True, 3, False, None),
                   (0, False, None, False, T.TCP_RETRANSMISSION)]
    rows = direct_rows(tmp_path, "tcp", "h1", snaplen=100)
    fwd = [(r["msg_index"], r["decoded"], r["seq"], r["payload_truncated"], r["error"]) for r in rows
           if r["src_port"] == 50001 and r["payload_len"]]
    assert fwd == [(0, True, 1, True, None), (1, False, None, True, T.TCP_ENVELOPE_CUT),
                   (0, False, None, False, T.TCP_LOST), (0, False, None, True, T.TCP_LOST),
                   (0, False, None, True, T.TCP_LOST)]          # 45-byte segments, 40 captured


def test_tcp_without_its_syn_is_not_delimited(tmp_path):
    def syn_frame(frame: bytes) -> bool:
        if frame[:2] != b"\x08\x00":            # cooked v2's protocol: not IPv4
            return False
        ip = syn.dpkt.ip.IP(frame[20:])
        return ip.p == 6 and bool(ip.data.flags & syn.dpkt.tcp.TH_SYN)

    rows = direct_rows(tmp_path, "tcp", "h2", drop=syn_frame)
    data = [r for r in rows if r["transport"] == "tcp" and r["payload_len"]]
    assert len(data) == 5 and {r["error"] for r in data} == {T.TCP_NO_SYN}
    assert not any(r["decoded"] for r in rows)
