"""Captured frames → packet-table rows. Runs on the Spark executors, so it needs only the standard library and the
node's `wire` module.

Reads classic pcap files (either byte order, micro- or nanosecond stamps) with link types Ethernet, Linux cooked
v1 and v2 (tcpdump `-i any`) and raw IP. A file that ends inside a record, or whose record header is
impossible, raises `PcapError` after the readable frames: those are still analysed, the rest is not.

A frame is *decoded* when it is an unfragmented IPv4/UDP datagram to or from the node port whose payload starts
with a valid protocol header (`wire.header_fields`); when the capture holds the whole payload the body is checked
too (`wire.decode`). Everything else keeps its row with `decoded = false` and the reason in `error`.
"""
from __future__ import annotations

import mmap
import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from gossipnode import wire

NODE_PORT = 7000
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


class PcapError(ValueError):
    """The file is not a readable pcap from some point on; the message names the file and the position."""


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
        _, _, _, _, self.snaplen, network = struct.unpack_from(order + "HHiIII", self._mm, 4)
        self.link_type = network & 0x0FFFFFFF  # the upper bits carry FCS information
        self._record = struct.Struct(order + "IIII")

    def close(self) -> None:
        if self._mm is not None:
            self._mm.close()
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


def scan(cap: CaptureFile) -> tuple:
    """A row of the CAPTURES table: the file's link type, readable packets and bytes, time span, error."""
    packets = total = 0
    first = last = link_type = error = None
    try:
        with PcapFile(cap.path, cap.file) as pf:
            link_type = pf.link_type
            for _, ts, _, orig_len, _ in pf:
                packets += 1
                total += orig_len
                if first is None:
                    first = ts
                last = ts
    except FileNotFoundError:
        error = f"{cap.file}: file not found"
    except OSError as exc:
        error = f"{cap.file}: cannot read: {exc.strerror or exc}"
    except PcapError as exc:
        error = str(exc)
    return cap.node, cap.interface, cap.file, link_type, packets, total, first, last, error


class FrameDecoder:
    """Dissects one capture's frames into the network and protocol columns of the packet table."""

    def __init__(self, link_type: int, address: str | None, names: dict[str, str]) -> None:
        self.link_type = link_type
        self.address = address
        self.names = names
        self._ips: dict[bytes, str] = {}

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

    def decode(self, data: bytes) -> tuple:
        """The columns if_index .. length of PACKETS (schemas.PACKET_COLUMNS[9:]) for one frame."""
        if_index, l3, why = self._l3(data)
        if l3 is None:
            return (if_index, None, None, None, None, None, None, None, None, None, None, None,
                    False, why) + _NO_HEADER
        if len(data) < l3 + 20:
            return (if_index, None, None, None, None, None, None, None, None, None, None, None,
                    False, "truncated IPv4 header") + _NO_HEADER
        vihl, ip_len, frag, proto, src_raw, dst_raw = _IPV4.unpack_from(data, l3)
        src, dst = self._ip(src_raw), self._ip(dst_raw)
        direction = "out" if src == self.address else "in" if dst == self.address else "fwd"
        net = (if_index, direction, src, dst, self.names.get(src), self.names.get(dst), proto, ip_len)
        if vihl & 0x0F < 5:
            return net + (None, None, None, None, False, "bad IPv4 header length") + _NO_HEADER
        if frag & 0x3FFF:
            return net + (None, None, None, None, False, "IP fragment") + _NO_HEADER
        if proto != 17:
            reason = f"not UDP ({_IP_PROTOCOLS.get(proto, f'IP protocol {proto}')})"
            return net + (None, None, None, None, False, reason) + _NO_HEADER
        l4 = l3 + (vihl & 0x0F) * 4
        if len(data) < l4 + 8:
            return net + (None, None, None, None, False, "UDP header not captured") + _NO_HEADER
        sport, dport, udp_len = _UDP.unpack_from(data, l4)
        payload_len = udp_len - 8
        payload = data[l4 + 8:l4 + udp_len]
        truncated = len(payload) < payload_len
        ports = (sport, dport, payload_len, truncated)
        if NODE_PORT not in (sport, dport):
            return net + ports + (False, f"UDP not to or from port {NODE_PORT}") + _NO_HEADER
        if len(payload) < wire.HEADER_SIZE:
            why = "protocol header not captured (snaplen)" if truncated else "payload shorter than the header"
            return net + ports + (False, why) + _NO_HEADER
        try:
            if truncated:
                # The header is all there; the body was cut by the snaplen. header_fields checks the header
                # against the packet size, so give it the original size (the body bytes are not looked at).
                h = wire.header_fields(payload + bytes(payload_len - len(payload)))
            else:
                h = wire.header_fields(payload)
                wire.decode(payload)
        except wire.DecodeError as exc:
            return net + ports + (False, str(exc)) + _NO_HEADER
        return net + ports + (True, None, h["version"], h["type"], h["type_name"], h["sender"], h["seq"],
                              h["round"], h["length"])


_NO_HEADER = (None,) * len(wire.HEADER_FIELDS)


def _not_ipv4(ethertype: int) -> str | None:
    return None if ethertype == _ETHERTYPE_IPV4 else f"not IPv4 (ethertype {ethertype:#06x})"


def packet_rows(cap: CaptureFile, run_id: str, t0: float, names: dict[str, str],
                clock_offset_s: float = 0.0) -> Iterator[tuple]:
    """Rows of the PACKETS table for every readable frame of `cap`. A file that cannot be read (missing,
    corrupt, truncated, unsupported link type) yields what precedes the problem: `scan` reports the problem.
    `clock_offset_s`: the capturing host's clock minus the controller's (real hosts); subtracted from `ts`."""
    try:
        pf = PcapFile(cap.path, cap.file)
    except (OSError, PcapError):
        return
    with pf:
        dec = FrameDecoder(pf.link_type, cap.address, names)
        head = (run_id, cap.node, cap.interface, cap.file)
        try:
            for n, ts, cap_len, orig_len, data in pf:
                ts -= clock_offset_s
                yield head + (n, ts, ts - t0, orig_len, cap_len) + dec.decode(data)
        except PcapError:
            return
