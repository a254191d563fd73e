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
