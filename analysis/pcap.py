"""Captured frames → packet-table rows. Runs on the Spark executors, so it needs only the standard library and the
node's `wire` module. This per-packet decoder is the definition of the packet table: the ingest builds the same table
with numpy (`analysis.pcapvec`, tested against `packet_rows` row for row), and falls back on this decoder for what
needs the stream state (TCP reassembly: `analysis.pcaptcp`) or a codec's own error text (one message's columns:
`analysis.pcapmsg`).

Reads classic pcap files (either byte order, micro- or nanosecond stamps) with link types Ethernet, Linux cooked
v1 and v2 (tcpdump `-i any`) and raw IP. A file that ends inside a record, or whose record header is
impossible, raises `PcapError` after the readable frames: those are still analysed, the rest is not.

Every registered protocol (`gossipnode.wire.CODECS`) is decoded, on each of the node's transports
(`transport` column):

- `udp`: an unfragmented IPv4/UDP datagram to or from a node port (`Ports.node`, 7000);
- `mcast`: a UDP datagram to an IP multicast address (224.0.0.0/4) on a group port (`Ports.mcast`, the configs'
  `multicast[].port`, 7001 by default);
- `tcp`: a TCP segment to or from a node port. Each direction of a connection is reassembled by sequence number
  (retransmitted bytes are skipped, segments after a gap are held until it is filled) and cut into messages by the
  envelope's length, from the connection's SYN on. A message gets its row at the frame that completes it, so a
  frame holds zero, one or several messages (`msg_index` 0, 1, ...: the frame's other columns repeat).

A datagram (or TCP message) is *decoded* when it starts with a valid envelope and protocol header
(`wire.header_fields`); when the capture holds the whole message the body is checked too (`wire.decode`). A
message whose body the snaplen cut is decoded from its header alone (`payload_truncated`). Everything else keeps
its row with `decoded = false` and the reason in `error`; nothing is guessed. In particular a TCP message whose
envelope was not captured (snaplen) cannot be delimited, nor can anything after it in that direction: its
segment and the rest of the direction are undecodable with that reason, as is a connection whose SYN the capture
missed. TCP segments that complete no message (handshake, bare ACKs, the first part of a message) are rows with
`decoded = false` and a reason too: `decoded` means "this row is a protocol message".
"""
from __future__ import annotations

import mmap
import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from analysis.pcapmsg import ENV, _NO_HEADER, _message
from analysis.pcaptcp import TCP_NO_PAYLOAD, _Direction
from gossipnode.vclock import VirtualClock

NODE_PORT = 7000
MCAST_PORT = 7001
MAX_FRAME = 262_144  # Wireshark's WTAP_MAX_PACKET_SIZE: a larger captured length means a corrupt record

LINKTYPE_ETHERNET = 1
LINKTYPE_RAW = 101
LINKTYPE_LINUX_SLL = 113
LINKTYPE_LINUX_SLL2 = 276
_RAW_ALIASES = (12, 14)  # DLT_RAW on some BSDs and old libpcaps

_MAGIC = {  # first four bytes (little-endian read) → (struct byte order, fraction unit in seconds)
    0xA1B2C3D4: ("<", 1e-6), 0xD4C3B2A1: (">", 1e-6),
    0xA1B23C4D: ("<", 1e-9), 0x4D3CB2A1: (">", 1e-9),
}
_PCAPNG = 0x0A0D0D0A
_IP_PROTOCOLS = {1: "ICMP", 2: "IGMP", 6: "TCP", 58: "ICMPv6"}
_ETHERTYPE_IPV4 = 0x0800
_VLAN = (0x8100, 0x88A8)
_U16 = struct.Struct("!H")
_IPV4 = struct.Struct("!BxHxxHxB2x4s4s")  # version/ihl, total length, flags/fragment, protocol, src, dst
_UDP = struct.Struct("!HHH")
_TCP = struct.Struct("!HHIIBB")  # ports, seq, ack, data offset, flags
_SYN = 0x02


class PcapError(ValueError):
    """The file is not a readable pcap from some point on; the message names the file and the position."""


@dataclass(frozen=True)
class Ports:
    """Where the node's packets are: UDP/TCP node ports, and the multicast group ports (UDP to 224.0.0.0/4)."""

    node: frozenset[int] = field(default_factory=lambda: frozenset({NODE_PORT}))
    mcast: frozenset[int] = field(default_factory=lambda: frozenset({MCAST_PORT}))

    def describe_node(self) -> str:
        """'port 7000' (the reasons of the packet table name the ports)."""
        return ("port " if len(self.node) == 1 else "ports ") + ", ".join(map(str, sorted(self.node)))


@dataclass(frozen=True)
class CaptureFile:
    """One pcap of a run: which node captured it on which interface, and the node's own address (direction)."""

    node: str
    interface: str
    path: str        # absolute, as the executors open it
    file: str        # relative to the run directory, as the tables and messages name it
    address: str | None


class PcapFile:
    """A pcap opened for reading (memory-mapped). Iterating yields (frame number, ts, cap_len, orig_len, data)."""

    def __init__(self, path: str | Path, name: str | None = None) -> None:
        self.name = name or str(path)
        self._mm: mmap.mmap | None = None
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            if size == 0:
                raise PcapError(f"{self.name}: empty file (no pcap header)")
            self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        if size < 24:
            self.close()
            raise PcapError(f"{self.name}: truncated pcap header ({size} bytes, needs 24)")
        (magic,) = struct.unpack_from("<I", self._mm)
        if magic not in _MAGIC:
            self.close()
            what = "a pcapng file (only classic pcap is read)" if magic == _PCAPNG else f"magic {magic:#010x}"
            raise PcapError(f"{self.name}: not a pcap file: {what}")
        order, self._unit = _MAGIC[magic]
        self.order = order          # struct byte order of the headers ("<" or ">")
        self.unit = self._unit      # seconds per unit of the records' fraction field (1e-6 or 1e-9)
        _, _, _, _, self.snaplen, network = struct.unpack_from(order + "HHiIII", self._mm, 4)
        self.link_type = network & 0x0FFFFFFF  # the upper bits carry FCS information
        self._record = struct.Struct(order + "IIII")

    @property
    def buffer(self) -> mmap.mmap:
        """The whole file, memory-mapped (the vectorised reader, `analysis.pcapvec`, indexes it). Views of it must
        be released before `close`."""
        assert self._mm is not None, "closed"
        return self._mm

    def close(self) -> None:
        if self._mm is not None:
            try:
                self._mm.close()
            except BufferError:     # a view of it is still alive (an exception's frames): unmapped when freed
                pass
            self._mm = None

    def __enter__(self) -> PcapFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[tuple[int, float, int, int, bytes]]:
        mm, unit, record = self._mm, self._unit, self._record
        assert mm is not None, "closed"
        size = len(mm)
        off = 24
        n = 0
        while off < size:
            if off + 16 > size:
                raise PcapError(f"{self.name}: truncated record header at byte {off} after {n} packets "
                                f"({size - off} of 16 bytes)")
            sec, frac, cap_len, orig_len = record.unpack_from(mm, off)
            if cap_len > MAX_FRAME or cap_len > orig_len:
                raise PcapError(f"{self.name}: corrupt record header at byte {off} after {n} packets "
                                f"(captured length {cap_len}, original length {orig_len})")
            end = off + 16 + cap_len
            if end > size:
                raise PcapError(f"{self.name}: truncated packet {n + 1} at byte {off} after {n} packets "
                                f"({size - off - 16} of {cap_len} bytes)")
            n += 1
            yield n, sec + frac * unit, cap_len, orig_len, mm[off + 16:end]
            off = end


@dataclass
class CaptureScan:
    """What reading a pcap found, filled in while `packet_rows` reads it (one pass): a row of the CAPTURES
    table (`row`), the same as `scan` gives for the file."""

    cap: CaptureFile
    link_type: int | None = None
    packets: int = 0
    bytes: int = 0
    first: float | None = None
    last: float | None = None
    error: str | None = None

    def row(self) -> tuple:
        c = self.cap
        return c.node, c.interface, c.file, self.link_type, self.packets, self.bytes, self.first, self.last, self.error


def _open_error(cap: CaptureFile, exc: Exception) -> str:
    if isinstance(exc, FileNotFoundError):
        return f"{cap.file}: file not found"
    if isinstance(exc, OSError):
        return f"{cap.file}: cannot read: {exc.strerror or exc}"
    return str(exc)


def scan(cap: CaptureFile) -> tuple:
    """A row of the CAPTURES table: the file's link type, readable packets and bytes, time span, error. Reads
    the records only (`packet_rows` with a `CaptureScan` gives the same row while it decodes)."""
    s = CaptureScan(cap)
    try:
        with PcapFile(cap.path, cap.file) as pf:
            s.link_type = pf.link_type
            for _, ts, _, orig_len, _ in pf:
                s.packets += 1
                s.bytes += orig_len
                if s.first is None:
                    s.first = ts
                s.last = ts
    except (OSError, PcapError) as exc:
        s.error = _open_error(cap, exc)
    return s.row()


class FrameDecoder:
    """Dissects one capture's frames into the network and protocol columns of the packet table. Stateful: TCP
    connections are reassembled across the frames of the file, which must be fed in order."""

    def __init__(self, link_type: int, address: str | None, names: dict[str, str], ports: Ports | None = None) -> None:
        self.link_type = link_type
        self.address = address
        self.names = names
        self.ports = ports or Ports()
        self._ips: dict[bytes, str] = {}
        self._tcp: dict[tuple, _Direction] = {}

    def _ip(self, raw: bytes) -> str:
        ip = self._ips.get(raw)
        if ip is None:
            ip = self._ips[raw] = socket.inet_ntoa(raw)
        return ip

    def _l3(self, data: bytes) -> tuple[int | None, int | None, str | None]:
        """(if_index, offset of the IPv4 header, or None with the reason)."""
        lt = self.link_type
        if lt == LINKTYPE_LINUX_SLL2:
            if len(data) < 20:
                return None, None, "truncated Linux cooked v2 header"
            proto, if_index = struct.unpack_from("!H2xI", data)
            return if_index, 20 if proto == _ETHERTYPE_IPV4 else None, _not_ipv4(proto)
        if lt == LINKTYPE_LINUX_SLL:
            if len(data) < 16:
                return None, None, "truncated Linux cooked header"
            (proto,) = _U16.unpack_from(data, 14)
            return None, 16 if proto == _ETHERTYPE_IPV4 else None, _not_ipv4(proto)
        if lt == LINKTYPE_ETHERNET:
            off = 12
            while len(data) >= off + 2 and _U16.unpack_from(data, off)[0] in _VLAN:
                off += 4
            if len(data) < off + 2:
                return None, None, "truncated Ethernet header"
            (proto,) = _U16.unpack_from(data, off)
            return None, off + 2 if proto == _ETHERTYPE_IPV4 else None, _not_ipv4(proto)
        if lt in (LINKTYPE_RAW, *_RAW_ALIASES):
            if not data or data[0] >> 4 != 4:
                return None, None, f"not IPv4 (IP version {data[0] >> 4})" if data else "empty frame"
            return None, 0, None
        return None, None, f"unsupported link type {lt}"

    def decode(self, data: bytes) -> list[tuple]:
        """The columns if_index .. length of PACKETS (schemas.PACKET_COLUMNS[9:]) for one frame: one tuple per
        message the frame completes (TCP may complete several), or one undecodable tuple."""
        if_index, l3, why = self._l3(data)
        if l3 is None:
            return [(if_index, None, None, None, None, None, None, None, None, None, None, None, None, 0,
                     False, why) + _NO_HEADER]
        if len(data) < l3 + 20:
            return [(if_index, None, None, None, None, None, None, None, None, None, None, None, None, 0,
                     False, "truncated IPv4 header") + _NO_HEADER]
        vihl, ip_len, frag, proto, src_raw, dst_raw = _IPV4.unpack_from(data, l3)
        src, dst = self._ip(src_raw), self._ip(dst_raw)
        group = 224 <= dst_raw[0] <= 239
        direction = ("out" if src == self.address else "in" if dst == self.address or group and self.address
                     else "fwd")
        net = (if_index, direction, src, dst, self.names.get(src), self.names.get(dst), proto, ip_len)
        if vihl & 0x0F < 5:
            return [net + (None, None, None, None, None, 0, False, "bad IPv4 header length") + _NO_HEADER]
        if frag & 0x3FFF:
            return [net + (None, None, None, None, None, 0, False, "IP fragment") + _NO_HEADER]
        l4 = l3 + (vihl & 0x0F) * 4
        if proto == 6:
            return self._tcp_rows(data, net, l3, l4, ip_len, src, dst)
        if proto != 17:
            reason = f"not UDP ({_IP_PROTOCOLS.get(proto, f'IP protocol {proto}')})"
            return [net + (None, None, None, None, None, 0, False, reason) + _NO_HEADER]
        if len(data) < l4 + 8:
            return [net + (None, None, None, None, None, 0, False, "UDP header not captured") + _NO_HEADER]
        sport, dport, udp_len = _UDP.unpack_from(data, l4)
        payload_len = udp_len - 8
        payload = data[l4 + 8:l4 + udp_len]
        truncated = len(payload) < payload_len
        if group:
            transport = "mcast"
            if dport not in self.ports.mcast:
                ports = (sport, dport, transport, payload_len, truncated, 0)
                groups = ", ".join(map(str, sorted(self.ports.mcast))) or "none"
                return [net + ports + (False, f"multicast UDP not to a group port ({groups})") + _NO_HEADER]
        else:
            transport = "udp"
            if sport not in self.ports.node and dport not in self.ports.node:
                ports = (sport, dport, transport, payload_len, truncated, 0)
                return [net + ports + (False, f"UDP not to or from {self.ports.describe_node()}") + _NO_HEADER]
        ports = (sport, dport, transport, payload_len, truncated, 0)
        if len(payload) < ENV:
            why = "protocol header not captured (snaplen)" if truncated else "payload shorter than the header"
            return [net + ports + (False, why) + _NO_HEADER]
        return [net + ports + _message(payload, payload_len, len(payload))]

    def _tcp_rows(self, data: bytes, net: tuple, l3: int, l4: int, ip_len: int, src: str, dst: str) -> list[tuple]:
        if len(data) < l4 + 20:
            return [net + (None, None, "tcp", None, None, 0, False, "TCP header not captured") + _NO_HEADER]
        sport, dport, seq, _ack, doff, flags = _TCP.unpack_from(data, l4)
        start = l4 + (doff >> 4) * 4
        seglen = l3 + ip_len - start
        captured = data[start:l3 + ip_len]
        truncated = len(captured) < seglen
        head = net + (sport, dport, "tcp", seglen, truncated)
        if sport not in self.ports.node and dport not in self.ports.node:
            return [head + (0, False, f"TCP not to or from {self.ports.describe_node()}") + _NO_HEADER]
        key = (src, sport, dst, dport)
        if flags & _SYN:
            self._tcp[key] = _Direction((seq + 1) & 0xFFFFFFFF)
            seq = (seq + 1) & 0xFFFFFFFF
        if seglen <= 0:
            return [head + (0, False, TCP_NO_PAYLOAD) + _NO_HEADER]
        d = self._tcp.get(key)
        if d is None:
            d = self._tcp[key] = _Direction(None)
        msgs, reason = d.segment(seq, captured, seglen)
        if not msgs:
            return [head + (0, False, reason) + _NO_HEADER]
        return [net + (sport, dport, "tcp", seglen, truncated if cut is None else cut, i) + tuple(rest)
                for i, (cut, *rest) in enumerate(msgs)]



def _not_ipv4(ethertype: int) -> str | None:
    return None if ethertype == _ETHERTYPE_IPV4 else f"not IPv4 (ethertype {ethertype:#06x})"


def packet_rows(cap: CaptureFile, run_id: str, t0: float, names: dict[str, str],
                clock_offset_s: float = 0.0, ports: Ports | None = None,
                scan: CaptureScan | None = None, clock: VirtualClock | None = None) -> Iterator[tuple]:
    """Rows of the PACKETS table for every readable frame of `cap` (several for a TCP segment that completes
    several messages). A file that cannot be read (missing, corrupt, truncated, unsupported link type) yields
    what precedes the problem: `scan` (the function, or a `CaptureScan` given here, filled in as the file is
    read) reports the problem. `clock_offset_s`: the capturing host's clock minus the controller's (real hosts);
    subtracted from `ts` (not from the scan's first/last, which are the file's own stamps, as `scan` gives).
    `clock`: the run's virtual time (docs/virtual-time.md): `ts` and `t_s` are virtual, as the events' stamps."""
    virtual = clock.to_virtual if clock is not None and not clock.identity else None
    try:
        pf = PcapFile(cap.path, cap.file)
    except (OSError, PcapError) as exc:
        if scan is not None:
            scan.error = _open_error(cap, exc)
        return
    with pf:
        if scan is not None:
            scan.link_type = pf.link_type
        dec = FrameDecoder(pf.link_type, cap.address, names, ports)
        head = (run_id, cap.node, cap.interface, cap.file)
        try:
            for n, ts, cap_len, orig_len, data in pf:
                if scan is not None:
                    scan.packets = n
                    scan.bytes += orig_len
                    if scan.first is None:
                        scan.first = ts
                    scan.last = ts
                ts -= clock_offset_s
                if virtual is not None:
                    ts = virtual(ts)
                frame = head + (n, ts, ts - t0, orig_len, cap_len)
                for cols in dec.decode(data):
                    yield frame + cols
        except PcapError as exc:
            if scan is not None:
                scan.error = str(exc)
            return
