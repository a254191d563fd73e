"""The vectorised ingest (`analysis.pcapvec.packet_batches`) against the reference decoder
(`analysis.pcap.packet_rows`, its rows as Arrow batches the way the ingest before it built them): the same table row
for row and column for column (nulls included), and the same CAPTURES row, on

(a) synthetic captures covering every branch: the synthetic run's (tests/analysis/synthetic.py: Linux cooked v2,
    Ethernet with VLAN tags and a snaplen, cooked v1 cut inside its last record), the `direct` runs on UDP,
    multicast and TCP (segments split, coalesced, reordered, retransmitted; without their SYN; snaplens that cut
    envelopes), frames built here for the rest (raw IP, unsupported link types, truncated link, IPv4, UDP and TCP
    headers, IP options and fragments, ICMP/IGMP/IPv6, ports that are not the node's), files that are not readable
    pcaps, and messages of every codec of the wire registry: valid ones and mutations of them, whole and cut by a
    snaplen at each place a header column depends on;
(b) a run-like capture set: the repository has no committed pcaps of real runs, so benchmarks/bench_analysis.py's
    generator writes one (tiny), read whole and with the parallel record walk forced onto it (also corrupted).
"""
from __future__ import annotations

import random
import struct

import numpy as np
import pyarrow as pa
import pytest

from analysis import pcap as P
from analysis import pcapframes as F
from analysis import pcapmsg as M
from analysis import pcaptcp
from analysis import pcapvec as V
from analysis.ingest import to_batches
from analysis.schemas import PACKET_COLUMNS
from gossipnode import wire
from gossipnode.vclock import VirtualClock
from tests.analysis import synthetic as syn

NAMES = {syn.ADDR[n]: n for n in syn.ADDR}
SCHEMA = V.packets_schema()


def cap(path, node="h0", address="default") -> P.CaptureFile:
    return P.CaptureFile(node, "any", str(path), f"pcaps/{path.name}",
                         syn.ADDR.get(node) if address == "default" else address)


def same(c: P.CaptureFile, names=NAMES, batch_rows: int = V.BLOCK, **kw) -> list[dict]:
    """Both decoders on one capture: equal tables (schema, rows, every value and null) and equal scans. Returns the
    rows (dicts)."""
    s_ref, s_vec = P.CaptureScan(c), P.CaptureScan(c)
    ref = pa.Table.from_batches(list(to_batches(P.packet_rows(c, "r", syn.T0, names, scan=s_ref, **kw), SCHEMA)),
                                SCHEMA)
    batches = list(V.packet_batches(c, "r", syn.T0, names, scan=s_vec, batch_rows=batch_rows, **kw))
    assert all(b.schema == SCHEMA and 0 < b.num_rows <= batch_rows for b in batches)
    got = pa.Table.from_batches(batches, SCHEMA)
    assert s_vec.row() == s_ref.row()
    want, have = ref.to_pylist(), got.to_pylist()
    assert len(have) == len(want)
    for i, (a, b) in enumerate(zip(want, have)):
        assert b == a, (i, {k: (a[k], b[k]) for k in PACKET_COLUMNS if a[k] != b[k]})
    assert got.equals(ref)
    return have


# --- (a) synthetic captures ---------------------------------------------------------------------------------------

def test_the_synthetic_runs_captures(tmp_path):
    rows = same(cap(syn.write_pcap(tmp_path / "h0-any.pcap", 276, syn.H0_FRAMES)))
    assert {r["error"] for r in rows} >= {None, "not UDP (ICMP)", "not IPv4 (ethertype 0x0806)",
                                          "UDP not to or from port 7000"}
    rows = same(cap(syn.write_pcap(tmp_path / "h1-any.pcap", 1, syn.H1_FRAMES, snaplen=syn.H1_SNAPLEN), "h1"))
    assert sum(r["payload_truncated"] for r in rows) == 13 and rows[12]["error"].endswith("(snaplen)")
    whole = 24 + sum(16 + len(f) for _, f in syn.H2_FRAMES[:2])
    for n in (2, 3):   # cooked v1, its last record cut; and with a small block
        same(cap(syn.write_pcap(tmp_path / "h2-any.pcap", 113, syn.H2_FRAMES, cut=whole + 26), "h2"), batch_rows=n)


@pytest.mark.parametrize("transport", ("udp", "mcast", "tcp"))
@pytest.mark.parametrize("snaplen", (65535, 120, 100))
def test_direct_runs_on_each_transport(tmp_path, transport, snaplen):
    frames = syn._direct_frames(transport)
    for node in syn.ADDR:
        f = syn.write_pcap(tmp_path / f"{node}.pcap", 276, sorted(frames[node], key=lambda r: r[0]), snaplen)
        rows = same(cap(f, node))
        if snaplen == 65535:
            assert any(r["decoded"] for r in rows)
        same(cap(f, node), batch_rows=4)       # blocks cut between the segments of a stream
        same(cap(f, node), ports=P.Ports(node=frozenset({7000, 50001}), mcast=frozenset({7009})))
        same(cap(f, node), ports=P.Ports(node=frozenset(), mcast=frozenset()))
        same(cap(f, node, address=None), names={})


def test_tcp_frames_completing_several_messages_across_blocks(tmp_path):
    recs = sorted(syn._direct_frames("tcp")["h1"], key=lambda r: r[0])
    f = syn.write_pcap(tmp_path / "h1.pcap", 276, recs)
    rows = same(cap(f, "h1"), batch_rows=1)
    assert max(r["msg_index"] for r in rows) == 1
    for n in (2, 3, 5, 7):
        same(cap(f, "h1"), batch_rows=n)


def test_tcp_without_its_syn(tmp_path):
    def not_syn(frame: bytes) -> bool:
        if frame[:2] != b"\x08\x00":
            return True
        ip = syn.dpkt.ip.IP(frame[20:])
        return not (ip.p == 6 and ip.data.flags & syn.dpkt.tcp.TH_SYN)

    recs = sorted((r for r in syn._direct_frames("tcp")["h2"] if not_syn(r[1])), key=lambda r: r[0])
    rows = same(cap(syn.write_pcap(tmp_path / "h2.pcap", 276, recs), "h2"))
    assert pcaptcp.TCP_NO_SYN in {r["error"] for r in rows}


def _ip(src: str, dst: str, proto: int, payload: bytes, ihl: int = 5, frag: int = 0, version: int = 4) -> bytes:
    opts = b"\x01" * (4 * ihl - 20) if ihl > 5 else b""
    total = 4 * max(ihl, 5) + len(payload)
    return struct.pack("!BBHHHBBH4s4s", version << 4 | ihl, 0, total, 1, frag, 64, proto, 0,
                       bytes(map(int, syn.ADDR.get(src, src).split("."))),
                       bytes(map(int, syn.ADDR.get(dst, dst).split(".")))) + opts + payload


def _udp(sport: int, dport: int, payload: bytes, length: int | None = None) -> bytes:
    return struct.pack("!HHHH", sport, dport, 8 + len(payload) if length is None else length, 0) + payload


def _tcp(sport: int, dport: int, flags: int, payload: bytes = b"", doff: int = 5) -> bytes:
    return struct.pack("!HHIIBBHHH", sport, dport, 1000, 0, doff << 4, flags, 65535, 0, 0) + b"\0" * (4 * doff - 20) \
        + payload


def _frames() -> list[bytes]:
    """IPv4 packets (no link layer) for every branch of FrameDecoder after the link layer."""
    g = syn.gossip(0, 1)
    return [
        _ip("h0", "h1", 17, _udp(7000, 7000, g)),                          # decoded
        _ip("h0", "h1", 17, _udp(7000, 7000, g), ihl=7),                   # IP options
        _ip("h0", "h1", 17, _udp(7000, 7000, g), ihl=4),                   # bad header length
        _ip("h0", "h1", 17, _udp(7000, 7000, g), frag=0x2000),             # more fragments
        _ip("h0", "h1", 17, _udp(7000, 7000, g), frag=0x0010),             # a later fragment
        _ip("h1", "h0", 1, b"\x08\x00" + b"\0" * 10),                      # ICMP
        _ip("h1", "h0", 2, b"\x16" + b"\0" * 7),                           # IGMP
        _ip("h1", "h0", 58, b"\x80" + b"\0" * 7),                          # ICMPv6 over IPv4 (a name)
        _ip("h1", "h0", 47, b"\0" * 8),                                    # GRE: a number
        _ip("h1", "h0", 17, b"\x1b\x58"),                                  # UDP header not captured
        _ip("h1", "h0", 17, _udp(7000, 7000, g, length=5)),                # UDP length < 8
        _ip("h1", "h0", 17, _udp(7000, 7000, g[:5])),                      # shorter than the envelope
        _ip("h1", "h0", 17, _udp(7000, 7000, g, length=8 + 4)),            # UDP length cuts the envelope
        _ip("h1", "h0", 17, _udp(7000, 7000, g, length=8 + len(g) + 40)),  # UDP length beyond the frame
        _ip("h1", "h0", 17, _udp(7000, 7000, g + b"\0" * 6, length=8 + len(g))),   # trailing (Ethernet padding)
        _ip("h1", "h0", 17, _udp(5353, 5353, g)),                          # not a node port
        _ip("h1", "239.1.0.1", 17, _udp(40000, 7001, g)),                  # multicast to a group port
        _ip("h1", "239.1.0.1", 17, _udp(40000, 7000, g)),                  # multicast elsewhere
        _ip("h1", "224.0.0.251", 17, _udp(7000, 7001, g)),                 # mDNS group, group port
        _ip("h1", "10.9.9.9", 17, _udp(7000, 7000, g)),                    # forwarded (not the capture's address)
        _ip("10.9.9.8", "10.9.9.9", 17, _udp(1, 2, g)),                    # neither end known
        _ip("h1", "h0", 6, b"\x1b\x58\x00"),                               # TCP header not captured
        _ip("h1", "h0", 6, _tcp(40000, 80, 0x10, b"x" * 5)),               # TCP, not a node port
        _ip("h1", "h0", 6, _tcp(40000, 7000, 0x10)),                       # bare ACK
        _ip("h1", "h0", 6, _tcp(40000, 7000, 0x10, doff=6)),               # ACK with options
        _ip("h1", "h0", 6, _tcp(40000, 7000, 0x10, doff=15)),              # offset beyond the segment
        _ip("h1", "h0", 6, _tcp(40000, 7000, 0x18, syn.data(1, 1))),       # payload without a SYN seen
        _ip("h1", "h0", 6, _tcp(40000, 7000, 0x02)),                       # SYN
        _ip("h1", "h0", 6, _tcp(40000, 7000, 0x18, syn.data(1, 1))),       # ... then a payload
        _ip("h1", "h0", 17, _udp(7000, 7000, g), version=6),               # version 6 in an IPv4 ethertype
    ]


def test_link_layers_and_every_network_branch(tmp_path):
    ip = _frames()
    eth_vlan2 = [b"\x04" * 6 + b"\x02" * 6 + struct.pack("!HHHH", 0x8100, 5, 0x88A8, 6) + struct.pack("!H", 0x0800)
                 + p for p in ip[:3]]
    cases = {
        276: [syn.sll2(p) for p in ip] + [syn.sll2(ip[0], ifindex=7), syn.sll2(ip[0])[:19], syn.sll2(ip[0])[:25],
                                         syn.sll2(ip[0], ethtype=0x86DD), b""],
        113: [syn.sll(p) for p in ip] + [syn.sll(ip[0])[:15], syn.sll(ip[0])[:16], syn.sll(ip[0], ethtype=0x0806)],
        1: [syn.eth(p) for p in ip] + eth_vlan2 + [syn.eth(ip[0])[:13], syn.eth(ip[0])[:15],
                                                    b"\x04" * 12 + b"\x81\x00\x00\x05", syn.eth(b"\0" * 28, 0x0806)],
        101: ip + [b"", b"\x60" + b"\0" * 39, b"\x45"],
        12: ip[:4] + [b"\x60" + b"\0" * 39],
        14: ip[:4],
        147: [b"\0" * 40, b""],
    }
    for linktype, frames in cases.items():
        recs = [(1001.0 + 0.001 * i, f) for i, f in enumerate(frames)]
        for snaplen in (65535, 70, 40):
            f = syn.write_pcap(tmp_path / f"{linktype}-{snaplen}.pcap", linktype, recs, snaplen)
            for address in ("default", None, "", "10.9.9.9", "239.1.0.1", "not an address"):
                same(cap(f, "h0", address))
            same(cap(f, "h0"), names={})
            rows = same(cap(f, "h0"), batch_rows=3)
            if linktype == 147:
                assert {r["error"] for r in rows} == {"unsupported link type 147"}
    reasons = {r["error"] for r in same(cap(tmp_path / "276-65535.pcap"))}
    assert reasons >= {"bad IPv4 header length", "IP fragment", "not UDP (IGMP)", "not UDP (ICMPv6)",
                       "not UDP (IP protocol 47)", "UDP header not captured", "payload shorter than the header",
                       "TCP header not captured", "TCP not to or from port 7000", pcaptcp.TCP_NO_PAYLOAD,
                       "multicast UDP not to a group port (7001)", "truncated Linux cooked v2 header",
                       "truncated IPv4 header", "not IPv4 (ethertype 0x86dd)", pcaptcp.TCP_NO_SYN}


@pytest.mark.parametrize("content", [
    b"", b"\xd4\xc3\xb2\xa1\x02\x00", b"\x0a\x0d\x0d\x0a" + b"\x00" * 40, b"GIF89a" + b"\x00" * 40,
    struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 276),                        # header only
    struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 276) + b"\x01" * 7,          # cut in a record header
])
def test_files_that_are_not_readable_pcaps(tmp_path, content):
    f = tmp_path / "x.pcap"
    f.write_bytes(content)
    assert same(cap(f)) == []


def test_missing_corrupt_and_truncated_files(tmp_path):
    assert same(cap(tmp_path / "h3-any.pcap", "h3")) == []
    f = syn.write_pcap(tmp_path / "x.pcap", 276, syn.H0_FRAMES)
    data = f.read_bytes()
    offsets, _ = V._walk_loop(data, "<", 24, len(data))
    for k, (cap_len, orig_len) in enumerate([(10_000_000, 71), (90, 71), (P.MAX_FRAME + 1, P.MAX_FRAME + 2),
                                             (P.MAX_FRAME, P.MAX_FRAME), (0, 0), (3, 10)]):
        b = bytearray(data)
        struct.pack_into("<II", b, int(offsets[5]) + 8, cap_len, orig_len)
        f.write_bytes(bytes(b))
        same(cap(f))
    for cut in (len(data) - 1, len(data) - 100, int(offsets[-1]) + 5, int(offsets[-1]) + 16, 24 + 16 + 10):
        f.write_bytes(data[:cut])
        same(cap(f))


def test_byte_orders_and_stamp_units(tmp_path):
    frames = [syn.sll2(syn.udp("h0", "h1", syn.gossip(0, k))) for k in range(1, 5)]
    for magic, order in ((0xA1B2C3D4, "<"), (0xA1B2C3D4, ">"), (0xA1B23C4D, "<"), (0xA1B23C4D, ">")):
        f = tmp_path / "x.pcap"
        ns = magic == 0xA1B23C4D
        f.write_bytes(struct.pack(order + "IHHiIII", magic, 2, 4, 0, 0, 65535, 276) + b"".join(
            struct.pack(order + "IIII", 1001 + k, (250_000_000 if ns else 250_000) + k, len(fr), len(fr)) + fr
            for k, fr in enumerate(frames)))
        rows = same(cap(f))
        assert rows[0]["ts"] == pytest.approx(1001.25)


def test_host_clock_offsets_and_virtual_time(tmp_path):
    f = syn.write_pcap(tmp_path / "h0-any.pcap", 276, syn.H0_FRAMES)
    for kw in ({"clock_offset_s": 0.25}, {"clock_offset_s": -1.5}, {"clock": VirtualClock(4, 900.0)},
               {"clock": VirtualClock(1, 900.0)}, {"clock": VirtualClock(2.5, 1000)},
               {"clock": VirtualClock(3, 999.5), "clock_offset_s": 0.125}):
        rows = same(cap(f), **kw)
    assert rows[0]["ts"] == pytest.approx(999.5 + (1001.1 - 0.125 - 999.5) / 3)


# --- every codec of the wire registry ---------------------------------------------------------------------------

_FMT = {"u8": "!B", "u16": "!H", "u32": "!I"}
_MAX = {"u8": 0xFF, "u16": 0xFFFF, "u32": 0xFFFFFFFF}


def _from_layout(codec: wire.Codec, layout: wire.Layout, rng: random.Random) -> bytes:
    """The bytes after the envelope of a message laid out as `layout` says, with values drawn from the edges of
    their ranges (so some break the codec's rules) and counts that size what they count."""
    fields = (*codec.header, *layout.body)
    counted = {c.split(":")[-1].split("*")[0] for f in fields if isinstance(f.count, str) for c in [f.count]}
    vals: dict[str, int] = {}
    out = bytearray()
    for f in fields:
        if f.kind == "bytes":
            if isinstance(f.count, str) and f.count.startswith("bits:"):
                nbits = vals[f.count[5:]]
                w = bytearray(rng.randrange(256) for _ in range((nbits + 7) // 8))
                if w and nbits % 8 and rng.random() < 0.8:
                    w[-1] &= (1 << nbits % 8) - 1
                out += w
            else:
                out += bytes(rng.randrange(256) for _ in range(rng.choice((0, 1, 4, 11))))
            continue
        if f.count is None:
            n = 1
        elif isinstance(f.count, int):
            n = f.count
        elif f.count.endswith("*2"):
            n = 2 * vals[f.count[:-2]]
        else:
            n = vals[f.count]
        for _ in range(n):
            if f.name in counted:
                v = rng.choice((0, 1, 2, 3, 9))
            else:
                v = rng.choice((1, 1, 2, 5, 7, _MAX[f.kind], rng.randrange(_MAX[f.kind] + 1), 0))
            vals.setdefault(f.name, v)
            out += struct.pack(_FMT[f.kind], v)
    return bytes(out)


def _encoded() -> list[bytes]:
    """Whole messages the codecs encode themselves, for the bodies a layout does not spell out (ranges, items,
    token entries) and the fixed rules (seqs from 1, bits of W within nbits)."""
    from gossipnode.protocols.direct import wire as d
    from gossipnode.protocols.gsgc import wire as g
    from gossipnode.protocols.pbcast import wire as pb
    from gossipnode.protocols.qsm import wire as q
    from gossipnode.protocols.tradvsync import wire as tv
    from gossipnode.protocols.vsync import wire as vs

    T = g.MsgType
    msgs = [
        g.Message(T.DATA, 1, 4, 0, g.Data(1, b"d" * 20)), g.Message(T.REPAIR, 2, 4, 0, g.Data(1, b"")),
        g.Message(T.NAK, 3, 5, 1, g.Nak(2, ((1, 4), (7, 7)))), g.Message(T.NAK, 3, 6, 1, g.Nak(2, ())),
        g.Message(T.GOSSIP, 1, 2, 3, g.Gossip((1, 2, 3), (0, 1, 2), 0b101, 3)),
        g.Message(T.SC_GOSSIP, 1, 2, 3, g.Gossip((1,), (0,), 0x1FF, 9)),
        g.Message(T.GOSSIP_M, 1, 2, 3, g.Gossip((5, 6), None, 0xFF, 8)),
        g.Message(T.SC_GOSSIP_M, 1, 2, 3, g.Gossip((), None, 1, 1)),
        g.Message(T.STABLE, 1, 2, 3, g.Stable((1, 2))), g.Message(T.LOCAL_STABLE, 1, 2, 3, g.Stable(())),
        g.Message(T.LIVE, 1, 2, 3, g.Live(bytes([0, 1, 2]))),
        d.Data(1, 5, b"x" * 7), d.Data(0, 1, b""),
        pb.Data(1, 7, 2, 3, 9, b"xy"), pb.Data(1, 7, 2, 3, 1, b"", repair=True),
        pb.Digest(1, 7, ((1, 1, 5), (2, 3, 3))), pb.Digest(1, 8, (), solicit=True),
        vs.PData(1, 7, 0, 3, 9, vs.encode_item(vs.DataItem(1, 4, b"z"))), vs.PDigest(1, 7, ((0, 1, 2),)),
        vs.PDigest(1, 7, ((1, 2, 2),), solicit=True), vs.PData(1, 7, 1, 3, 2, b"", repair=True),
        vs.GseqReq(1, 3, b"pp"), vs.GseqAck(1, 3, 4, 5), vs.Order(1, 4, b"it"), vs.OrderAck(1, 4),
        vs.RepairReq(1, 5, 2), vs.RepairItems(1, 9, ((5, b"abc"), (6, b""))), vs.RepairItems(1, 9, ()),
        vs.AckPrefresh(1, 2, 3), vs.Heartbeat(1, 2, 9), vs.CProbe(1, 2, 3, 9, (1, 0, 4)), vs.CAck(1, 2, 9),
        vs.Leader(1, 2, 3, (4,)), vs.Prefresh(1, vs.encode_item(vs.PrefreshItem(3, 9, 2, 1))), vs.Join(1, 9),
        vs.State(1, 9, b"st"), vs.Excluded(1, 3),
        q.Data(1, 0, 3, 2, 0, 4, b"qq"), q.Data(1, 1, 3, 2, 0, 4, b"", q.MsgType.RETRANS),
        q.Data(1, 1, 3, 2, 0, 4, b"f", q.MsgType.FORWARD, 1),
        q.Token(1, 0, 3, 1, 500, [q.Entry(2, 1, 1, 5, 3, ((1, 2),), ((3, 4), (6, 6))), q.Entry(4)]),
        q.Token(1, 0, 4, 0), q.Pull(1, 0, 2, ((1, 3),)), q.Pull(1, 0, 2, ()), q.Nak(1, 0, 2, 1, ((2, 2), (4, 9))),
        q.Ack(1, 0, 4, 2, 5, 6, 100, 3), q.Ack(1, 300, 4, 2, 5, 6, 100, 3, 6),
        q.Data(1, 65535, 3, 2, 300, 4, b"q"), q.Token(1, 257, 3, 1, 7, [q.Entry(2, 1, 1, 5, 3, (), ((3, 4),), 2, 4)]),
        q.Pull(1, 999, 2, ((5, 6),)), q.Nak(1, 256, 2, 3, ((2, 2),)),
        tv.Data(1, 5, b"p"), tv.Data(1, 6, b"", retrans=True), tv.Ack(1, 2, 9), tv.Nak(1, 2, 3, 4),
    ]
    return [wire.encode(m) for m in msgs]


def _mutations(msg: bytes, rng: random.Random) -> list[bytes]:
    """A message and variants: bytes of the body set to 0 or 0xFF, the body cut or extended (the envelope's length
    kept consistent), and envelopes that are not valid."""
    magic, version, proto, mtype, sender, _length = wire.ENVELOPE.unpack_from(msg)
    rest = msg[wire.ENVELOPE_SIZE:]

    def env(body: bytes, **kw) -> bytes:
        e = dict(magic=magic, version=version, proto=proto, mtype=mtype, sender=sender, length=len(body))
        e.update(kw)
        return wire.ENVELOPE.pack(e["magic"], e["version"], e["proto"], e["mtype"], e["sender"], e["length"]) + body

    out = [msg]
    for _ in range(4):
        if rest:
            b = bytearray(rest)
            b[rng.randrange(len(b))] = rng.choice((0, 0xFF))
            out.append(env(bytes(b)))
    for k in range(0, len(rest), 4):           # a zero or an all-ones word at each u32 boundary
        for v in (b"\0\0\0\0", b"\xff\xff\xff\xff"):
            if rng.random() < 0.35:
                out.append(env(rest[:k] + v[:len(rest) - k] + rest[k + 4:]))
    out += [env(rest[:-1]), env(rest[:-3]), env(rest[: len(rest) // 2]), env(b""), env(rest + b"\0"),
            env(rest + b"\x01\x02\x03\x04\x05")]
    out += [env(rest, magic=b"XX"), env(rest, version=1), env(rest, proto=200), env(rest, mtype=250),
            env(rest, length=len(rest) + 1), env(rest, length=max(len(rest) - 1, 0))]
    return out


def _corpus(seed: int = 7) -> list[bytes]:
    rng = random.Random(seed)
    base = _encoded()
    for codec in wire.CODECS.values():
        for layout in codec.layouts:
            for _ in range(6):
                base.append(wire.ENVELOPE.pack(wire.MAGIC, wire.VERSION, codec.id, layout.type, rng.randrange(1 << 16),
                                               0) + _from_layout(codec, layout, rng))
    out = []
    for m in base:
        fixed = m[:7] + struct.pack("!H", len(m) - wire.ENVELOPE_SIZE) + m[9:]
        out += _mutations(fixed, rng)
    return out


def _message_file(tmp_path, name: str, msgs: list[bytes], snaplen: int):
    frames = [(1001.0 + 1e-4 * i, syn.sll2(syn.udp("h0" if i % 2 else "h1", "h1" if i % 2 else "h0", m)))
              for i, m in enumerate(msgs)]
    return cap(syn.write_pcap(tmp_path / f"{name}-{snaplen}.pcap", 276, frames, snaplen))


def _fallbacks(c: P.CaptureFile, monkeypatch) -> list[tuple]:
    """What the vectorised decode of `c` asked the reference's `_message` (for the messages no spec vouched for)."""
    got = []
    reference = M._message

    def spy(*a):
        got.append(reference(*a))
        return got[-1]

    with monkeypatch.context() as m:
        m.setattr(M, "_message", spy)
        for _ in V.packet_batches(c, "r", syn.T0, NAMES):
            pass
    return got


def test_every_codec_whole_and_cut_at_every_header_column(tmp_path, monkeypatch):
    """Messages of every registered protocol and type, valid and not, whole and cut: the reference's rows. And
    every message the reference decodes, the specs decode (the reference's `_message`, which the vectorised path
    calls for what a spec does not vouch for, never decodes one there)."""
    msgs = _corpus()
    c = _message_file(tmp_path, "all", msgs, 65535)
    rows = same(c)
    assert len(rows) == len(msgs)
    errors = {r["error"] for r in rows if not r["decoded"]}
    assert len(errors) > 40
    fallback = _fallbacks(c, monkeypatch)
    assert len(fallback) == len(rows) - sum(r["decoded"] for r in rows)
    valid = [m for m, r in zip(msgs, rows) if r["decoded"]]
    # The payload starts 48 bytes into a frame (cooked v2 20, IPv4 20, UDP 8): snaplen 57 keeps the envelope, 61
    # GSGC's seq, 65 its round, pbcast's round and qsm's header, 69 pbcast's DATA seq, ...
    decoded: dict[tuple[str, str], set[bool]] = {}
    for snaplen in (65535, *range(57, 92)):
        c = _message_file(tmp_path, "m", msgs if snaplen in (57, 61, 65, 69) else valid, snaplen)
        for r in same(c):
            if r["decoded"]:
                decoded.setdefault((r["protocol_name"], r["type_name"]), set()).add(r["payload_truncated"])
        assert not any(r[0] for r in _fallbacks(c, monkeypatch))
    # every type of every registered protocol decoded, whole and from a cut capture
    assert set(decoded) == {(c.name, t.name) for c in wire.CODECS.values() for t in c.types}
    assert all(v == {True, False} for v in decoded.values()), {k: v for k, v in decoded.items() if v != {True, False}}


def test_each_protocol_has_a_vectorised_spec():
    """The registry's protocols are all decoded by array expressions (a protocol without a spec would be decoded
    message by message by the reference: right, but slow)."""
    reg = F._Registry(F._Table(), F._Table())
    assert set(reg.specs) == set(wire.CODECS)
    assert F._DECODE_COLUMNS == PACKET_COLUMNS[9:]


# --- (b) a run-like capture set (benchmarks/bench_analysis.py's generator) ----------------------------------------

def test_the_benchmarks_capture_set(tmp_path):
    from benchmarks.bench_analysis import write_captures

    paths = write_captures(tmp_path, 3000, 3)
    for p in paths:
        c = P.CaptureFile(p.stem.rsplit("-", 1)[0], "any", str(p), p.name, "10.0.0.1")
        rows = same(c, names={f"10.0.0.{i}": f"h{i}" for i in range(1, 20)})
        assert len(rows) == 1000 and sum(r["decoded"] for r in rows) > 900


def test_the_parallel_record_walk(tmp_path, monkeypatch):
    """The walk of the record chain from guessed boundaries gives the loop's offsets: on a clean file, on one whose
    payloads hold plausible record headers that chain (wrong guesses, proved wrong at the joins), with corrupt and
    truncated records; and the packet table over it is the reference's."""
    from benchmarks.bench_analysis import write_captures

    monkeypatch.setattr(V, "_PARALLEL_MIN", 4096)
    monkeypatch.setattr(V, "_HEAD", 4096)
    monkeypatch.setattr(V, "_WINDOW", 1 << 15)
    monkeypatch.setattr(V, "_SEGMENT", 1024)
    (path,) = write_captures(tmp_path, 3000, 1)
    data = path.read_bytes()
    offsets, end = V._walk_loop(data, "<", 24, len(data))
    loops = []
    real_loop = V._walk_loop

    def counted(*a):
        loops.append(a[2])
        return real_loop(*a)

    monkeypatch.setattr(V, "_walk_loop", counted)

    def check(buf: bytes) -> None:
        want = real_loop(buf, "<", 24, len(buf))
        got = V._walk(buf, "<", 128, 1e-6)
        assert got[1] == want[1] and np.array_equal(got[0], want[0])

    check(data)
    assert len(loops) <= 3          # the head, and at most the short tail of a window
    chained = bytearray(data)
    for o in offsets[::2].tolist():
        chained[o + 66:o + 98] = (struct.pack("<IIII", 1_800_000_001, 7, 0, 40)
                                  + struct.pack("<IIII", 1_800_000_001, 9, 20, 40))
    loops.clear()
    check(bytes(chained))
    assert len(loops) > 3           # guesses proved wrong: the loop took over
    rng = random.Random(3)
    for _ in range(25):
        b = bytearray(data[:rng.randrange(len(data) // 2, len(data))])
        for _ in range(rng.randrange(4)):
            at = rng.randrange(24, len(b) - 16)
            if rng.random() < 0.5:
                b[at:at + 16] = struct.pack("<IIII", 1_800_000_000, 5, rng.randrange(300), 300)
            else:
                b[at:at + 4] = struct.pack("<I", rng.randrange(1 << 32))
        check(bytes(b))
    for k, content in enumerate((data, bytes(chained), data[:len(data) - 77])):
        f = tmp_path / f"w{k}.pcap"
        f.write_bytes(content)
        same(P.CaptureFile("h0", "any", str(f), f.name, "10.0.0.1"), names={})
    bad = bytearray(data)
    struct.pack_into("<I", bad, int(offsets[2000]) + 8, 10_000_000)
    f = tmp_path / "corrupt.pcap"
    f.write_bytes(bytes(bad))
    s = P.CaptureScan(P.CaptureFile("h0", "any", str(f), f.name, None))
    for _ in V.packet_batches(s.cap, "r", 0.0, {}, scan=s):
        pass
    assert s.packets == 2000 and s.error.startswith(f"{f.name}: corrupt record header at byte {int(offsets[2000])}")
    same(s.cap, names={})


# --- the ingest --------------------------------------------------------------------------------------------------

def test_the_ingest_writes_the_reference_table(tmp_path, monkeypatch):
    """`ingest.write_capture` (what each task of `ingest_packets` runs): the capture's Parquet file holds the
    reference's rows (strings plain, non-null columns required), in row groups of ROW_GROUP_ROWS; its scan row is
    the reference's; a file without frames writes nothing."""
    import pandas as pd
    import pyarrow.parquet as pq

    from analysis import ingest

    monkeypatch.setattr(ingest, "ROW_GROUP_ROWS", 20)
    monkeypatch.setattr(ingest, "BATCH_ROWS", 8)
    recs = sorted(syn._direct_frames("tcp")["h1"], key=lambda r: r[0])
    caps = [cap(syn.write_pcap(tmp_path / "in" / "h1-any.pcap", 276, recs), "h1"),
            cap(syn.write_pcap(tmp_path / "in" / "h0-any.pcap", 276, syn.H0_FRAMES)),
            cap(tmp_path / "in" / "h3-any.pcap", "h3")]
    out = tmp_path / "packets"
    counts = {}
    for c in caps:
        row = ingest.write_capture(c, str(out), "r", syn.T0, NAMES, 0.5, clock=VirtualClock(2, 1000.0))
        s = P.CaptureScan(c)
        reference = list(P.packet_rows(c, "r", syn.T0, NAMES, 0.5, scan=s, clock=VirtualClock(2, 1000.0)))
        assert row == s.row()
        counts[c.node] = len(reference)
        if c.node == "h3":
            assert not (out / "node=h3").exists()
            continue
        (f,) = (out / f"node={c.node}").glob("*.parquet")
        meta = pq.ParquetFile(f)
        assert meta.metadata.num_row_groups == {"h0": 1, "h1": 2}[c.node]     # 12 rows; 43 = 24 + 19
        back = meta.read()
        assert back.schema == SCHEMA.remove(SCHEMA.get_field_index("node"))
        node = PACKET_COLUMNS.index("node")
        assert [tuple(r.values()) for r in back.to_pylist()] == [r[:node] + r[node + 1:] for r in reference]
    df = pd.read_parquet(out)
    assert df.groupby("node", observed=True).size().to_dict() == {"h0": 12, "h1": counts["h1"]} and counts["h3"] == 0
    assert ingest.partition_dir("node", "a/b=c%") == "node=a%2Fb%3Dc%25"


@pytest.mark.spark
def test_parse_and_ingest_give_the_reference_table(spark, tmp_path):
    """Through Spark: the packets DataFrame (`parse_packets`, mapInArrow) and the table `ingest_packets` writes, read
    back as the analysis reads it, are the reference decoder's rows, and the returned scans its scans; on captures
    with TCP, multicast and undecodable frames, a missing file, a host clock offset and virtual time."""
    from analysis import ingest
    from analysis.schemas import PACKETS

    caps = []
    for transport in ("tcp", "mcast"):
        for node in ("h0", "h3"):
            recs = sorted(syn._direct_frames(transport)[node], key=lambda r: r[0])
            f = syn.write_pcap(tmp_path / f"{node}-{transport}.pcap", 276, recs, 100 if node == "h3" else 65535)
            caps.append(P.CaptureFile(node, transport, str(f), f.name, syn.ADDR[node]))
    caps.append(P.CaptureFile("h2", "any", str(tmp_path / "h2-any.pcap"), "h2-any.pcap", syn.ADDR["h2"]))
    clock, offsets = VirtualClock(2, 1000.0), {"h3": 0.25}
    key = PACKETS.fieldNames().index
    order = lambda r: (r[key("file")], r[key("frame")], r[key("msg_index")])  # noqa: E731
    scans = [P.CaptureScan(c) for c in caps]
    reference = sorted((row for c, s in zip(caps, scans)
                        for row in P.packet_rows(c, "r", syn.T0, NAMES, offsets.get(c.node, 0.0), scan=s, clock=clock)),
                       key=order)
    table = ingest.parse_packets(ingest.files_frame(spark, caps), "r", syn.T0, NAMES, offsets, clock=clock).collect()
    assert sorted((tuple(r) for r in table), key=order) == reference
    scanned = ingest.ingest_packets(spark, caps, "r", syn.T0, NAMES, tmp_path / "packets", offsets, clock=clock)
    assert scanned == [dict(zip(ingest.CAPTURES.fieldNames(), s.row())) for s in scans]
    back = ingest.read_table(spark, tmp_path / "packets", PACKETS)
    assert [(f.name, f.dataType) for f in back.schema] == [(f.name, f.dataType) for f in PACKETS]
    assert sorted((tuple(r) for r in back.collect()), key=order) == reference
    ingest.ingest_packets(spark, caps[:1], "r", syn.T0, NAMES, tmp_path / "packets")     # replaces the table
    assert {r["node"] for r in ingest.read_table(spark, tmp_path / "packets", PACKETS).collect()} == {"h0"}
