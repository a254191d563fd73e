"""The packet table checked against a decoder that shares nothing with the wire registry (issue #37).

tests/analysis/test_dissector.py compares Spark's per-type counts with tshark's, but the dissector is generated
from the same registry as the node's codecs and the analysis' decoder, so a layout mistake all three share (say
seq and round swapped in a header, or a DATA's origin read from the wrong offset) would pass there. Here:

- `Decoder` below is written from node_image/README.md's "Wire format" tables alone (`struct`, no import of
  `gossipnode` or `analysis`), and so is the capture reader under it (classic pcap, Ethernet / Linux cooked v1 and
  v2, IPv4, UDP, TCP reassembly by sequence number);
- the captures hold messages the node's encoder made from known values (`Truth`): GSGC (every message type, over
  three link types), pbcast (DATA over IP multicast, REPAIR, DIGEST, SOLICIT), HyParView (over TCP, coalesced and
  split segments), and the synthetic `direct` runs over UDP, TCP and multicast (tests/analysis/synthetic.py);
- pure: hand-packed bytes decode to hand-worked values in both the independent decoder and the registry; the
  independent decoder reads every synthetic message back to the values it was made from (registry vs README);
  and the comparison fails when the decoder's layout is wrong (`test_a_wrong_layout_is_caught`);
- Spark: the packet table's rows (type, sender, seq, round, length, transport, ts, keyed by file, frame and
  msg_index) equal the independent decoder's, message for message, and so do the per-type counts and frames.

The packet table has no body columns (origin, ranges, ...): those are checked against the values the messages
were made from, not against Spark.
"""
from __future__ import annotations

import struct
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.analysis import synthetic as syn

# =================================================================================================================
# The independent decoder: node_image/README.md's tables, nothing else.
# =================================================================================================================

ENVELOPE = struct.Struct("!2sBBBHH")   # magic, version, protocol, type, sender, length
ENVELOPE_SIZE = 9
PROTOCOLS = {1: "gsgc", 2: "direct", 3: "hyparview", 7: "pbcast"}   # the ones this test reads
TYPES = {
    "gsgc": {1: "DATA", 2: "REPAIR", 3: "NAK", 4: "GOSSIP", 5: "SC_GOSSIP", 6: "STABLE", 7: "LIVE",
             8: "GOSSIP_M", 9: "SC_GOSSIP_M", 10: "LOCAL_STABLE"},
    "direct": {1: "DATA"},
    "pbcast": {1: "DATA", 2: "REPAIR", 3: "DIGEST", 4: "SOLICIT"},
    "hyparview": {1: "JOIN", 2: "FORWARD_JOIN", 3: "JOIN_REPLY", 4: "NEIGHBOR", 5: "NEIGHBOR_REPLY",
                  6: "DISCONNECT", 7: "SHUFFLE", 8: "SHUFFLE_REPLY", 9: "DATA"},
}


class Bad(ValueError):
    """Not a message by the README's tables."""


class _Reader:
    """Reads network-order fields from `buf` at increasing offsets; the body must be used up exactly."""

    def __init__(self, buf: bytes, pos: int) -> None:
        self.buf, self.pos = buf, pos

    def take(self, fmt: str) -> tuple:
        s = struct.Struct("!" + fmt)
        if self.pos + s.size > len(self.buf):
            raise Bad(f"truncated at offset {self.pos}: {fmt}")
        out = s.unpack_from(self.buf, self.pos)
        self.pos += s.size
        return out

    def raw(self, n: int) -> bytes:
        if self.pos + n > len(self.buf):
            raise Bad(f"truncated at offset {self.pos}: {n} bytes")
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out

    def rest(self) -> bytes:
        out, self.pos = self.buf[self.pos:], len(self.buf)
        return out

    def end(self) -> None:
        if self.pos != len(self.buf):
            raise Bad(f"{len(self.buf) - self.pos} trailing bytes")


@dataclass(frozen=True)
class Decoder:
    """One message's fields by the README's tables. `gsgc_header` / `data_origin_at` exist only so that a test can
    get the layout wrong on purpose (test_a_wrong_layout_is_caught)."""

    gsgc_header: tuple[str, str] = ("seq", "round")   # README: `II` seq, round at offsets 9, 13
    gsgc_origin_at: int = 17                          # README: DATA/REPAIR origin `H` at offset 17

    def decode(self, buf: bytes) -> dict:
        if len(buf) < ENVELOPE_SIZE:
            raise Bad("shorter than the envelope")
        magic, version, proto, mtype, sender, length = ENVELOPE.unpack_from(buf)
        if magic != b"GS" or version != 2:
            raise Bad(f"magic {magic!r} version {version}")
        if len(buf) != ENVELOPE_SIZE + length:
            raise Bad(f"length {length} but {len(buf) - ENVELOPE_SIZE} bytes follow")
        name = PROTOCOLS.get(proto)
        if name is None or mtype not in TYPES[name]:
            raise Bad(f"protocol {proto} type {mtype}")
        out = {"protocol": proto, "protocol_name": name, "type": mtype, "type_name": TYPES[name][mtype],
               "sender": sender, "length": length, "seq": None, "round": None}
        r = _Reader(buf, ENVELOPE_SIZE)
        getattr(self, "_" + name)(out, out["type_name"], r)
        r.end()
        return out

    def _gsgc(self, out: dict, t: str, r: _Reader) -> None:
        a, b = r.take("II")
        out.update(dict(zip(self.gsgc_header, (a, b))))
        if t in ("DATA", "REPAIR"):
            r.pos = self.gsgc_origin_at
            (out["origin"],) = r.take("H")
            out["payload"] = r.rest()
        elif t == "NAK":
            out["origin"], count = r.take("HH")
            out["ranges"] = tuple(r.take("II") for _ in range(count))
        elif t in ("GOSSIP", "SC_GOSSIP", "GOSSIP_M", "SC_GOSSIP_M"):
            m, nbits = r.take("HH")
            out["nbits"] = nbits
            out["M"] = r.take(f"{m}I")
            out["S"] = r.take(f"{m}I") if t in ("GOSSIP", "SC_GOSSIP") else None
            w = int.from_bytes(r.raw((nbits + 7) // 8), "little")    # bit i: byte i // 8, bit i % 8 from the LSB
            if nbits == 0 or w >> nbits:
                raise Bad(f"W {w:#x} with nbits {nbits}")
            out["W"] = w
        elif t in ("STABLE", "LOCAL_STABLE"):
            (m,) = r.take("H")
            out["S"] = r.take(f"{m}I")
        else:   # LIVE
            (n,) = r.take("H")
            out["L"] = r.raw(n)

    def _direct(self, out: dict, _t: str, r: _Reader) -> None:
        (out["seq"],) = r.take("I")
        out["payload"] = r.rest()

    def _pbcast(self, out: dict, t: str, r: _Reader) -> None:
        (out["round"],) = r.take("I")
        if t in ("DATA", "REPAIR"):
            out["origin"], out["root"], out["seq"] = r.take("HHI")
            out["payload"] = r.rest()
        else:
            (count,) = r.take("H")
            out["ranges"] = tuple(r.take("HII") for _ in range(count))

    def _hyparview(self, out: dict, t: str, r: _Reader) -> None:
        if t == "FORWARD_JOIN":
            out["new"], out["ttl"] = r.take("HB")
        elif t == "NEIGHBOR":
            (out["priority"],) = r.take("B")
        elif t == "NEIGHBOR_REPLY":
            (out["accepted"],) = r.take("B")
        elif t == "SHUFFLE":
            out["origin"], out["ttl"], n = r.take("HBB")
            out["ids"] = r.take(f"{n}H")
        elif t == "SHUFFLE_REPLY":
            (n,) = r.take("B")
            out["ids"] = r.take(f"{n}H")
        elif t == "DATA":
            out["origin"], out["seq"], out["hops"] = r.take("HIB")
            out["payload"] = r.rest()


# --- captures: classic pcap, link layer, IPv4, UDP, TCP --------------------------------------------------------

NODE_PORTS = frozenset({7000})
MCAST_PORTS = frozenset({7001})


def pcap_records(path: Path):
    """(frame number from 1, ts, captured bytes) of a classic pcap, and its link type."""
    data = path.read_bytes()
    magic = struct.unpack_from("<I", data)[0]
    order, unit = {0xA1B2C3D4: ("<", 1e-6), 0xD4C3B2A1: (">", 1e-6),
                   0xA1B23C4D: ("<", 1e-9), 0x4D3CB2A1: (">", 1e-9)}[magic]
    linktype = struct.unpack_from(order + "I", data, 20)[0]
    off, n, out = 24, 0, []
    while off + 16 <= len(data):
        sec, frac, cap, _orig = struct.unpack_from(order + "IIII", data, off)
        if off + 16 + cap > len(data):
            break
        n += 1
        out.append((n, sec + frac * unit, data[off + 16:off + 16 + cap]))
        off += 16 + cap
    return linktype, out


def l3(linktype: int, frame: bytes) -> bytes | None:
    """The IPv4 packet in a frame, or None."""
    if linktype == 1:                                   # Ethernet, optionally one VLAN tag
        etype, off = struct.unpack_from("!H", frame, 12)[0], 14
        if etype == 0x8100:
            etype, off = struct.unpack_from("!H", frame, 16)[0], 18
    elif linktype == 113:                               # Linux cooked v1: protocol at 14, 16 bytes
        etype, off = struct.unpack_from("!H", frame, 14)[0], 16
    elif linktype == 276:                               # Linux cooked v2: protocol at 0, 20 bytes
        etype, off = struct.unpack_from("!H", frame, 0)[0], 20
    else:
        raise AssertionError(f"link type {linktype}")
    return frame[off:] if etype == 0x0800 else None


class Streams:
    """TCP reassembly per direction from its SYN: retransmitted bytes skipped, segments after a gap held; the
    stream is cut into messages by the envelope's length. A message belongs to the frame that completes it."""

    def __init__(self) -> None:
        self.next: dict[tuple, int] = {}
        self.held: dict[tuple, dict[int, bytes]] = {}
        self.buf: dict[tuple, bytes] = {}

    def segment(self, key: tuple, seq: int, flags: int, data: bytes) -> list[bytes]:
        if flags & 0x02:                                # SYN
            self.next[key], self.held[key], self.buf[key] = (seq + 1) & 0xFFFFFFFF, {}, b""
            return []
        if key not in self.next or not data:
            return []
        self.held[key][seq] = data
        progressed = True
        while progressed:
            progressed = False
            for s, d in list(self.held[key].items()):
                ahead = ((s - self.next[key] + 2 ** 31) & 0xFFFFFFFF) - 2 ** 31   # signed distance, mod 2^32
                if ahead <= 0:
                    del self.held[key][s]
                    fresh = d[-ahead:]
                    if fresh:
                        self.buf[key] += fresh
                        self.next[key] = (self.next[key] + len(fresh)) & 0xFFFFFFFF
                        progressed = True
        out, buf = [], self.buf[key]
        while len(buf) >= ENVELOPE_SIZE and len(buf) >= ENVELOPE_SIZE + struct.unpack_from("!H", buf, 7)[0]:
            size = ENVELOPE_SIZE + struct.unpack_from("!H", buf, 7)[0]
            out.append(buf[:size])
            buf = buf[size:]
        self.buf[key] = buf
        return out


def decode_capture(path: Path, decoder: Decoder = Decoder()) -> tuple[int, list[dict]]:
    """(frames in the file, one dict per protocol message: frame, msg_index, ts, transport and its fields)."""
    linktype, records = pcap_records(path)
    streams, rows = Streams(), []
    for frame_no, ts, frame in records:
        ip = l3(linktype, frame)
        if ip is None or ip[0] >> 4 != 4:
            continue
        ihl = (ip[0] & 0x0F) * 4
        total, frag, proto = struct.unpack_from("!H", ip, 2)[0], struct.unpack_from("!H", ip, 6)[0], ip[9]
        if frag & 0x3FFF:                               # a fragment
            continue
        src, dst = ip[12:16], ip[16:20]
        seg = ip[ihl:total]
        payloads: list[tuple[str, bytes]] = []
        if proto == 17:
            sport, dport, ulen = struct.unpack_from("!HHH", seg)
            body = seg[8:ulen]
            if 224 <= dst[0] <= 239 and dport in MCAST_PORTS:
                payloads = [("mcast", body)]
            elif sport in NODE_PORTS or dport in NODE_PORTS:
                payloads = [("udp", body)]
        elif proto == 6:
            sport, dport, seq, _ack, off, flags = struct.unpack_from("!HHIIBB", seg)
            if sport in NODE_PORTS or dport in NODE_PORTS:
                key = (src, sport, dst, dport)
                payloads = [("tcp", m) for m in streams.segment(key, seq, flags, seg[(off >> 4) * 4:])]
        index = 0
        for transport, msg in payloads:
            try:
                fields = decoder.decode(msg)
            except Bad:
                continue
            rows.append({"frame": frame_no, "msg_index": index, "ts": ts, "transport": transport, **fields})
            index += 1
    return len(records), rows


# =================================================================================================================
# The captures: messages made by the node's encoder from known values (`truth`), written as pcaps.
# =================================================================================================================

@dataclass
class Capture:
    node: str
    path: Path
    file: str                   # unique across the test's captures: the packet table's `file` column
    truth: list[dict] | None    # per message, in (frame, msg_index) order: the values it was made from
    kind: str


def _encode(msg) -> bytes:
    from gossipnode import wire   # the node's encoder makes the bytes, as on the wire; it never decodes here

    return wire.encode(msg)


def gsgc_messages() -> list[tuple[bytes, dict]]:
    """Every GSGC type, with seq, round, origin and sender all different (a swap of any two shows)."""
    from gossipnode.protocols.gsgc import wire as g

    T, out = g.MsgType, []

    def add(mtype, sender, seq, rnd, body, **fields):
        out.append((_encode(g.Message(mtype, sender, seq, rnd, body)),
                    {"protocol_name": "gsgc", "type_name": mtype.name, "sender": sender, "seq": seq, "round": rnd,
                     **fields}))

    for i in range(6):
        add(T.DATA, 3, 40 + i, 0, g.Data(3, bytes([i]) * (20 + i)), origin=3, payload=bytes([i]) * (20 + i))
    add(T.REPAIR, 0, 41, 2, g.Data(3, b"r" * 20), origin=3, payload=b"r" * 20)   # retransmitted by 0, origin 3
    add(T.REPAIR, 2, 7, 5, g.Data(1, b"ab"), origin=1, payload=b"ab")
    add(T.NAK, 1, 1001, 6, g.Nak(3, ((42, 44), (47, 47))), origin=3, ranges=((42, 44), (47, 47)))
    add(T.GOSSIP, 0, 1002, 9, g.Gossip((5, 0xFFFFFFFF), (2, 3), 0b1011, 4), M=(5, 0xFFFFFFFF), S=(2, 3), W=0b1011,
        nbits=4)
    add(T.GOSSIP, 1, 1003, 10, g.Gossip((6, 7, 8), (1, 2, 3), 1 << 9, 10), M=(6, 7, 8), S=(1, 2, 3), W=1 << 9,
        nbits=10)
    add(T.SC_GOSSIP, 2, 1004, 11, g.Gossip((9,), (4,), 0b10, 2), M=(9,), S=(4,), W=0b10, nbits=2)
    add(T.STABLE, 3, 1005, 12, g.Stable((13, 14)), S=(13, 14))
    add(T.LIVE, 0, 1006, 13, g.Live(bytes([0, 1, 2, 0xFF])), L=bytes([0, 1, 2, 0xFF]))
    add(T.GOSSIP_M, 1, 1007, 14, g.Gossip((15, 16), None, 0b0101, 4), M=(15, 16), S=None, W=0b0101, nbits=4)
    add(T.SC_GOSSIP_M, 2, 1008, 15, g.Gossip((17,), None, 1, 1), M=(17,), S=None, W=1, nbits=1)
    add(T.LOCAL_STABLE, 3, 1009, 16, g.Stable((18, 19, 20)), S=(18, 19, 20))
    return out


def pbcast_messages() -> list[tuple[bytes, dict, bool]]:
    """(bytes, truth, multicast?)."""
    from gossipnode.protocols.pbcast import wire as p

    out = []
    for i in range(3):
        out.append((_encode(p.Data(1, 20 + i, 1, 1, 30 + i, b"x" * 10)),
                    {"protocol_name": "pbcast", "type_name": "DATA", "sender": 1, "round": 20 + i, "seq": 30 + i,
                     "origin": 1, "root": 1}, True))
    out.append((_encode(p.Data(2, 23, 1, 0, 31, b"x" * 10, repair=True)),
                {"protocol_name": "pbcast", "type_name": "REPAIR", "sender": 2, "round": 23, "seq": 31, "origin": 1,
                 "root": 0}, False))
    out.append((_encode(p.Digest(0, 24, ((1, 30, 32), (3, 5, 5)))),
                {"protocol_name": "pbcast", "type_name": "DIGEST", "sender": 0, "round": 24, "seq": None,
                 "ranges": ((1, 30, 32), (3, 5, 5))}, False))
    out.append((_encode(p.Digest(3, 25, ((1, 31, 31),), solicit=True)),
                {"protocol_name": "pbcast", "type_name": "SOLICIT", "sender": 3, "round": 25, "seq": None,
                 "ranges": ((1, 31, 31),)}, False))
    return out


def hyparview_messages(sender: int, other: int) -> list[tuple[bytes, dict]]:
    from gossipnode.protocols.hyparview import wire as h

    def t(name: str, **f) -> dict:
        return {"protocol_name": "hyparview", "type_name": name, "sender": sender, "seq": None, "round": None, **f}

    return [
        (_encode(h.Join(sender)), t("JOIN")),
        (_encode(h.ForwardJoin(sender, other, 5)), t("FORWARD_JOIN", new=other, ttl=5)),
        (_encode(h.Neighbor(sender, 1)), t("NEIGHBOR", priority=1)),
        (_encode(h.NeighborReply(sender, 0)), t("NEIGHBOR_REPLY", accepted=0)),
        (_encode(h.Shuffle(sender, 3, 4, (3, 2, 1))), t("SHUFFLE", origin=3, ttl=4, ids=(3, 2, 1))),
        (_encode(h.Data(sender, 2, 77 + sender, 3, b"h" * 12)), t("DATA", origin=2, seq=77 + sender, hops=3,
                                                                     payload=b"h" * 12)),
        (_encode(h.ShuffleReply(sender, (0,))), t("SHUFFLE_REPLY", ids=(0,))),
        (_encode(h.Data(sender, sender, 5, 0, b"")), t("DATA", origin=sender, seq=5, hops=0, payload=b"")),
        (_encode(h.Disconnect(sender)), t("DISCONNECT")),
        (_encode(h.JoinReply(sender)), t("JOIN_REPLY")),
    ]


def _not_messages() -> list[bytes]:
    """Datagrams to the node port that both decoders must refuse: foreign magic, a GOSSIP whose counts do not
    fit its body, a length that disagrees with the datagram."""
    from gossipnode.protocols.gsgc import wire as g

    good = _encode(g.Message(g.MsgType.GOSSIP, 1, 9, 9, g.Gossip((1, 2), (3, 4), 1, 4)))
    bad_count = good[:17] + struct.pack("!H", 3) + good[19:]              # m = 3, the body holds 2
    bad_length = good[:7] + struct.pack("!H", len(good) - 9 + 1) + good[9:]
    return [b"XX" + good[2:], bad_count, bad_length]


def write_gsgc(d: Path) -> list[Capture]:
    """The same traffic at h0 (Linux cooked v2), h1 (Ethernet) and h2 (Linux cooked v1)."""
    names = list(syn.ADDR)
    msgs = gsgc_messages()
    bad = _not_messages()
    ip_frames, truth = [], []
    for i, (payload, tr) in enumerate(msgs):
        a = names[tr["sender"]]
        b = names[(tr["sender"] + 1 + i % 3) % 4]
        ip_frames.append((1001.0 + 0.01 * i, syn.udp(a, b, payload)))
        truth.append(tr)
        if i % 5 == 2:
            ip_frames.append((1001.0 + 0.01 * i + 0.001, syn.udp(a, b, bad[(i // 5) % len(bad)])))
            ip_frames.append((1001.0 + 0.01 * i + 0.002, syn.icmp_echo(a, b)))
    out = []
    for node, linktype, link in (("h0", 276, syn.sll2), ("h1", 1, syn.eth), ("h2", 113, syn.sll)):
        path = syn.write_pcap(d / f"gsgc-{node}.pcap", linktype, [(ts, link(p)) for ts, p in ip_frames])
        out.append(Capture(node, path, path.name, truth, "gsgc"))
    return out


def write_pbcast(d: Path) -> list[Capture]:
    names = list(syn.ADDR)
    frames, truth = [], []
    for i, (payload, tr, mcast) in enumerate(pbcast_messages()):
        a = names[tr["sender"]]
        if mcast:
            pkt = syn.udp(a, "239.1.0.1", payload, sport=40000 + tr["sender"], dport=7001)
        else:
            pkt = syn.udp(a, names[(tr["sender"] + 1) % 4], payload)
        frames.append((1002.0 + 0.01 * i, syn.sll2(pkt)))
        truth.append(tr)
    frames.append((1002.5, syn.sll2(syn.udp("h3", "224.0.0.251", b"m" * 20, sport=5353, dport=5353))))   # mDNS
    path = syn.write_pcap(d / "pbcast-h1.pcap", 276, frames)
    return [Capture("h1", path, path.name, truth, "pbcast")]


def write_hyparview_tcp(d: Path) -> list[Capture]:
    """h0's capture of one connection h0:50001 -> h1:7000, both directions carrying every HyParView type; each
    direction's stream is cut so that segments coalesce messages and split an envelope, then one segment is
    retransmitted; h1's sequence numbers wrap around 2^32."""
    S, A, P = 0x02, 0x10, 0x08
    isn = {"h0": 1000, "h1": 4_294_967_200}
    port = {"h0": 50001, "h1": 7000}
    msgs = {"h0": hyparview_messages(0, 1), "h1": hyparview_messages(1, 0)}
    stream = {n: b"".join(m for m, _ in msgs[n]) for n in msgs}
    nxt = {n: isn[n] + 1 for n in isn}
    t = 1003.0
    segs: list[tuple[float, str, object]] = []

    def seg(src: str, flags: int, seq: int, ack: int, data: bytes = b"", ts: float | None = None) -> None:
        dst = "h1" if src == "h0" else "h0"
        segs.append((ts if ts is not None else t + 0.001 * len(segs), src,
                     syn.tcp(src, dst, port[src], port[dst], seq, ack, flags, data)))

    seg("h0", S, isn["h0"], 0)
    seg("h1", S | A, isn["h1"], nxt["h0"])
    seg("h0", A, nxt["h0"], nxt["h1"])
    truth: dict[str, list[dict]] = {"h0": [], "h1": []}
    for src in ("h0", "h1"):
        data, dst = stream[src], "h1" if src == "h0" else "h0"
        sizes = [len(m) for m, _ in msgs[src]]
        ends = [sum(sizes[:k + 1]) for k in range(len(sizes))]
        cuts = [0, 4, ends[2], ends[3] + 11, ends[6], len(data) - 1, len(data)]   # split envelope, coalesced, ...
        for lo, hi in zip(cuts, cuts[1:]):
            seg(src, A | P, nxt[src] + lo, nxt[dst], data[lo:hi])
            seg(dst, A, nxt[dst], nxt[src] + hi)
        seg(src, A | P, nxt[src] + cuts[1], nxt[dst], data[cuts[1]:cuts[2]])   # a retransmission
        for _, tr in msgs[src]:
            truth[src].append(tr)
    frames = [(ts, syn.sll2(pkt)) for ts, _, pkt in segs]
    path = syn.write_pcap(d / "hyparview-h0.pcap", 276, frames)
    # both directions are in h0's capture: h0's messages first (its stream is sent first), then h1's
    return [Capture("h0", path, path.name, truth["h0"] + truth["h1"], "hyparview")]


def write_direct(d: Path) -> list[Capture]:
    out = []
    for transport in ("udp", "tcp", "mcast"):
        for node, path in syn.direct_pcaps(d / transport, transport).items():
            out.append(Capture(node, path, f"direct-{transport}/{path.name}", None, f"direct-{transport}"))
    return out


def direct_expected(node: str, transport: str) -> Counter:
    """(sender, seq) -> copies at `node`: the origin sends one per other member (udp, tcp) or one datagram
    (mcast); every other member receives one."""
    out: Counter = Counter()
    for origin, sends in syn.DIRECT_SENT.items():
        for seq, _ in sends:
            out[(syn.IDS[origin], seq)] += 3 if node == origin and transport != "mcast" else 1
    return out


@pytest.fixture(scope="module")
def captures(tmp_path_factory) -> list[Capture]:
    d = tmp_path_factory.mktemp("wire-independent")
    return [*write_gsgc(d), *write_pbcast(d), *write_hyparview_tcp(d), *write_direct(d)]


# =================================================================================================================
# Comparisons
# =================================================================================================================

def truth_mismatches(cap: Capture, rows: list[dict]) -> list[str]:
    """Where the decoded messages of a capture differ from the values they were made from."""
    if cap.truth is None:   # direct: the synthetic run's messages, as a multiset per node
        transport = cap.kind.split("-")[1]
        got = Counter((r["sender"], r["seq"]) for r in rows)
        bad = [f"{cap.file}: {got} != {direct_expected(cap.node, transport)}"] \
            if got != direct_expected(cap.node, transport) else []
        return bad + [f"{cap.file} frame {r['frame']}: {k} = {r[k]!r}" for r in rows
                      for k, want in (("protocol_name", "direct"), ("type_name", "DATA"), ("round", None),
                                      ("length", syn.DIRECT_SIZE - 9), ("transport", transport))
                      if r[k] != want]
    if len(rows) != len(cap.truth):
        return [f"{cap.file}: {len(rows)} messages decoded, {len(cap.truth)} made"]
    return [f"{cap.file} frame {r['frame']}.{r['msg_index']} ({t['type_name']}): {k} = {r.get(k)!r}, made with "
            f"{want!r}" for r, t in zip(rows, cap.truth) for k, want in t.items() if r.get(k) != want]


SPARK_COLUMNS = ("transport", "protocol", "protocol_name", "type", "type_name", "sender", "seq", "round", "length")


def table_mismatches(ours: dict[tuple, dict], table: dict[tuple, dict]) -> list[str]:
    """Rows keyed by (file, frame, msg_index): the packet table's decoded messages against the independent
    decoder's, column by column."""
    out = [f"{k}: only in the packet table ({table[k]['type_name']})" for k in sorted(set(table) - set(ours))]
    out += [f"{k}: only in the independent decode ({ours[k]['type_name']})" for k in sorted(set(ours) - set(table))]
    for k in sorted(set(ours) & set(table)):
        a, b = ours[k], table[k]
        out += [f"{k}: {c} = {b[c]!r} in the packet table, {a[c]!r} by the README" for c in SPARK_COLUMNS
                if a[c] != b[c]]
        if abs(a["ts"] - b["ts"]) > 1e-6:
            out.append(f"{k}: ts {b['ts']} != {a['ts']}")
    return out


# =================================================================================================================
# Pure tests
# =================================================================================================================

def _env(proto: int, mtype: int, sender: int, rest: bytes) -> bytes:
    return struct.pack("!2sBBBHH", b"GS", 2, proto, mtype, sender, len(rest)) + rest


# Packets packed by hand from the README's tables, and the values worked out by hand.
HAND = [
    # GSGC DATA: seq 7, round 0, origin 1 (sent by 3), payload "hello"
    (_env(1, 1, 3, struct.pack("!IIH", 7, 0, 1) + b"hello"),
     {"protocol_name": "gsgc", "type_name": "DATA", "sender": 3, "seq": 7, "round": 0, "origin": 1, "length": 15}),
    # GSGC GOSSIP: counter 12, round 4, m = 2, nbits = 4, M = (1, 2), S = (0, 1), W = members 0 and 1
    (_env(1, 4, 0, struct.pack("!IIHH4IB", 12, 4, 2, 4, 1, 2, 0, 1, 0b0011)),
     {"type_name": "GOSSIP", "sender": 0, "seq": 12, "round": 4, "M": (1, 2), "S": (0, 1), "W": 0b0011,
      "length": 29}),
    # GSGC NAK: counter 3, round 2, origin 1, ranges 5..6 and 9..9
    (_env(1, 3, 2, struct.pack("!IIHH4I", 3, 2, 1, 2, 5, 6, 9, 9)),
     {"type_name": "NAK", "sender": 2, "seq": 3, "round": 2, "origin": 1, "ranges": ((5, 6), (9, 9))}),
    # GSGC GOSSIP_M with W bit 9 (byte 1, bit 1)
    (_env(1, 8, 1, struct.pack("!IIHHI2B", 5, 6, 1, 10, 8, 0, 0b10)),
     {"type_name": "GOSSIP_M", "seq": 5, "round": 6, "M": (8,), "S": None, "W": 1 << 9, "nbits": 10}),
    # direct DATA: seq 9 from 2
    (_env(2, 1, 2, struct.pack("!I", 9) + b"pp"),
     {"protocol_name": "direct", "type_name": "DATA", "sender": 2, "seq": 9, "round": None, "length": 6}),
    # pbcast DATA: round 5, origin 2, root 0, seq 9, sent by 1
    (_env(7, 1, 1, struct.pack("!IHHI", 5, 2, 0, 9) + b"z"),
     {"protocol_name": "pbcast", "type_name": "DATA", "sender": 1, "round": 5, "seq": 9, "origin": 2, "root": 0}),
    # pbcast DIGEST: round 8, (origin 2, 1..4)
    (_env(7, 3, 0, struct.pack("!IHHII", 8, 1, 2, 1, 4)),
     {"type_name": "DIGEST", "round": 8, "seq": None, "ranges": ((2, 1, 4),)}),
    # HyParView DATA: origin 2, seq 9, hops 3, sent by 1
    (_env(3, 9, 1, struct.pack("!HIB", 2, 9, 3) + b"q"),
     {"protocol_name": "hyparview", "type_name": "DATA", "sender": 1, "seq": 9, "round": None, "origin": 2,
      "hops": 3}),
    # HyParView SHUFFLE: origin 3, ttl 4, ids (1, 2)
    (_env(3, 7, 0, struct.pack("!HBB2H", 3, 4, 2, 1, 2)),
     {"type_name": "SHUFFLE", "seq": None, "origin": 3, "ttl": 4, "ids": (1, 2)}),
]


@pytest.mark.parametrize("packet,want", HAND, ids=[f"{w.get('protocol_name', '')}{w['type_name']}" for _, w in HAND])
def test_hand_packed_bytes_decode_to_the_hand_worked_values_in_both_decoders(packet, want):
    got = Decoder().decode(packet)
    assert {k: got.get(k) for k in want} == want
    # and the registry agrees: its packet-table columns and its message
    from gossipnode import wire

    h = wire.header_fields(packet)
    assert {k: h[k] for k in ("protocol", "protocol_name", "type", "type_name", "sender", "seq", "round",
                              "length")} == {k: got[k] for k in ("protocol", "protocol_name", "type", "type_name",
                                                                  "sender", "seq", "round", "length")}
    msg = wire.decode(packet)
    assert wire.encode(msg) == packet
    body = getattr(msg, "body", msg)
    for ours, theirs in (("origin", "origin"), ("ranges", "ranges"), ("M", "min_so_far"), ("S", "stability"),
                         ("W", "heard"), ("root", "root"), ("hops", "hops"), ("ids", "ids"), ("ttl", "ttl")):
        if ours in want:
            assert getattr(body, theirs) == want[ours], ours
    if "seq" in want and want["seq"] is not None:
        assert getattr(msg, "seq", getattr(body, "seq", None)) == want["seq"]


def test_the_independent_decoder_reads_every_message_back_to_the_values_it_was_made_from(captures):
    """The registry's encoder against the README's tables, for every capture (no Spark)."""
    problems, messages = [], 0
    for cap in captures:
        _, rows = decode_capture(cap.path)
        messages += len(rows)
        problems += truth_mismatches(cap, rows)
    assert problems == []
    # 17 GSGC messages x 3 captures, 6 pbcast, 20 HyParView over TCP, direct: 30 + 30 + 20
    assert messages == 17 * 3 + 6 + 20 + 30 + 30 + 20


def test_a_wrong_layout_is_caught(captures):
    """The comparisons fail when the decoder's layout is wrong: seq and round swapped in GSGC's header, or the
    origin read two bytes late (from the payload)."""
    cap = next(c for c in captures if c.kind == "gsgc")
    _, right = decode_capture(cap.path)
    assert truth_mismatches(cap, right) == []
    for wrong in (Decoder(gsgc_header=("round", "seq")), Decoder(gsgc_origin_at=19)):
        _, rows = decode_capture(cap.path, wrong)
        bad = truth_mismatches(cap, rows)
        assert len(bad) >= 8, bad
        keyed = {(cap.file, r["frame"], r["msg_index"]): r for r in rows}
        fields = {"seq", "round"} if wrong.gsgc_header != ("seq", "round") else {"origin", "payload"}
        assert {b.split(": ")[1].split(" = ")[0] for b in bad} == fields
        if fields == {"seq", "round"}:   # and against a table that has the right values
            table = {(cap.file, r["frame"], r["msg_index"]): r for r in right}
            assert len(table_mismatches(keyed, table)) == 2 * len(rows)


def test_the_readme_documents_what_this_decoder_reads():
    """The constants above are the README's: its tables name each type number and header format used here."""
    text = (Path(__file__).resolve().parents[2] / "node_image" / "README.md").read_text()
    section = text[text.index("### Wire format"):text.index("### Adding a protocol")]
    assert "| 0 | `2s` | magic `GS` |" in section and "| 7 | `H` | length" in section
    assert "| gsgc (1) | `II` seq, round (offsets 9, 13) | offset 9, every type | offset 13, every type |" in section
    assert "| pbcast (7) | `I` round (9) | DATA, REPAIR: the body's seq (offset 17) | offset 9 |" in section
    for name, types in TYPES.items():
        if name == "direct":
            assert "one type, 1 DATA: `I` seq at offset 9" in section
            continue
        for number, tname in types.items():
            assert f"| {number} | {tname} |" in section, (name, number, tname)
    assert "| 1 | DATA | `H` origin" in section and "| 9 | DATA | `HIB` origin, seq, hops" in section
    assert "| 1 | DATA | `HHI` origin, root" in section


# =================================================================================================================
# Spark: the packet table against the independent decoder
# =================================================================================================================

@pytest.mark.spark
def test_the_packet_table_equals_the_independent_decode(spark, captures):
    from analysis import ingest
    from analysis.pcap import CaptureFile

    files = [CaptureFile(c.node, "any", str(c.path), c.file, syn.ADDR[c.node]) for c in captures]
    packets = ingest.parse_packets(ingest.files_frame(spark, files), "r", syn.T0, {})
    got = packets.select("file", "frame", "msg_index", "ts", "decoded", *SPARK_COLUMNS).collect()

    table = {(r["file"], r["frame"], r["msg_index"]): r.asDict() for r in got if r["decoded"]}
    ours: dict[tuple, dict] = {}
    frames: dict[str, int] = {}
    for cap in captures:
        frames[cap.file], rows = decode_capture(cap.path)
        ours.update({(cap.file, r["frame"], r["msg_index"]): r for r in rows})

    assert table_mismatches(ours, table) == []
    # frames per file (the table has one row per frame, or one per message of a frame with msg_index 0 first)
    assert Counter(r["file"] for r in got if r["msg_index"] == 0) == Counter(frames)
    # per-type counts per capture
    count = lambda rows: Counter((k[0], r["protocol_name"], r["type_name"]) for k, r in rows.items())  # noqa: E731
    assert count(table) == count(ours)
    assert len(table) == 17 * 3 + 6 + 20 + 30 + 30 + 20
    assert {r["protocol_name"] for r in table.values()} == {"gsgc", "pbcast", "hyparview", "direct"}
    assert {r["transport"] for r in table.values()} == {"udp", "mcast", "tcp"}
