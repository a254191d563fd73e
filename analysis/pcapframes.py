"""The vectorised ingest's decode of a block of frames (analysis/pcapvec.py, steps 2 to 4): `_Decoder` gathers the
link-layer, IPv4, UDP and TCP fields and the envelope with numpy fancy indexing and applies every rule of the
reference's `FrameDecoder.decode` as a mask, into the block's decode columns (`_Cols`; strings as codes into the
file's `_Table`s). A datagram's message is decoded from its protocol's spec (analysis/pcapspecs.py, looked up by
`_Registry`) or, where no spec vouches for it, by the reference's `_message` (analysis/pcapmsg.py); the TCP
segments that need the stream state go through the capture's `FrameDecoder`.
"""
from __future__ import annotations

import socket
import struct
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from analysis import pcap as P
from analysis import pcapmsg as M
from analysis.pcapspecs import _FIXED_SPECS, _WIREKIT, _Bytes, _Msgs, _Spec, _wirekit_spec
from analysis.pcaptcp import TCP_NO_PAYLOAD
from gossipnode import wire

ENV = wire.ENVELOPE_SIZE
_MAGIC = struct.unpack("!H", wire.MAGIC)[0]

# The columns `FrameDecoder.decode` fills (PACKETS' if_index .. length), with their kind here.
_DECODE_COLUMNS = ("if_index", "direction", "ip_src", "ip_dst", "src_node", "dst_node", "ip_proto", "ip_len",
                   "src_port", "dst_port", "transport", "payload_len", "payload_truncated", "msg_index", "decoded",
                   "error", "version", "protocol", "protocol_name", "type", "type_name", "sender", "seq", "round",
                   "length")
_STRING_TABLE = {"direction": "direction", "ip_src": "ip", "ip_dst": "ip", "src_node": "node",
                 "dst_node": "node", "transport": "transport", "error": "error", "protocol_name": "protocol",
                 "type_name": "type"}
_BOOL = ("payload_truncated", "decoded")


# ---- string columns --------------------------------------------------------------------------------------------

class _Table:
    """Distinct strings of a column (codes: positions; -1 is null)."""

    def __init__(self, values: tuple[str, ...] = ()) -> None:
        self.values: list[str] = []
        self.index: dict[str, int] = {}
        self._arrow: pa.Array | None = None
        for v in values:
            self.code(v)

    def code(self, s: str | None) -> int:
        if s is None:
            return -1
        c = self.index.get(s)
        if c is None:
            c = self.index[s] = len(self.values)
            self.values.append(s)
            self._arrow = None
        return c

    def arrow(self, codes: np.ndarray, dictionary: bool = False) -> pa.Array:
        """The strings of `codes` (a string array, or dictionary-encoded: the codes and this table)."""
        if self._arrow is None:
            self._arrow = pa.array(self.values, pa.string())
        indices = pa.array(codes, pa.int32(), mask=codes < 0)
        if dictionary:
            return pa.DictionaryArray.from_arrays(indices, self._arrow, safe=False)
        return self._arrow.take(indices)


# ---- one block's decode columns --------------------------------------------------------------------------------

class _Cols:
    """The decode columns (if_index .. length) of a block: numpy values and validity, or string codes."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.val: dict[str, np.ndarray] = {}
        self.ok: dict[str, np.ndarray] = {}
        for name in _DECODE_COLUMNS:
            if name in _STRING_TABLE:
                self.val[name] = np.full(n, -1, np.int32)
            else:
                self.val[name] = np.zeros(n, bool if name in _BOOL else np.int64)
                if name not in ("msg_index", "decoded"):
                    self.ok[name] = np.zeros(n, bool)

    def set(self, name: str, rows, values) -> None:
        self.val[name][rows] = values
        if name in self.ok:
            self.ok[name][rows] = True

    def grow(self, extra: int) -> None:
        for d in (self.val, self.ok):
            for k, v in d.items():
                d[k] = np.concatenate([v, np.full(extra, -1 if v.dtype == np.int32 else 0, v.dtype)])
        self.n += extra

    def put_row(self, i: int, cols: tuple, tables: dict[str, _Table]) -> None:
        """Row i from a tuple of `FrameDecoder.decode` (the reference's values)."""
        for name, v in zip(_DECODE_COLUMNS, cols):
            t = _STRING_TABLE.get(name)
            if t is not None:
                self.val[name][i] = tables[t].code(v)
            elif v is None:
                self.ok[name][i] = False
            else:
                self.val[name][i] = v
                if name in self.ok:
                    self.ok[name][i] = True

    def take(self, order: np.ndarray) -> None:
        for d in (self.val, self.ok):
            for k, v in d.items():
                d[k] = v[order]
        self.n = len(order)


class _Registry:
    """The wire registry as lookup arrays: per protocol id its spec, header size and name; per (id, type) the
    type's name (codes into the protocol and type tables)."""

    def __init__(self, protocols: _Table, types: _Table) -> None:
        self.specs: dict[int, _Spec] = {}
        self.hsize = np.zeros(256, np.int64)
        self.pname = np.full(256, -1, np.int32)
        self.tname = np.full((256, 256), -1, np.int32)
        for pid, codec in wire.CODECS.items():
            spec = self.spec_of(codec)
            if spec is None:
                continue
            self.specs[pid] = spec
            self.hsize[pid] = M._header_size_of(pid)
            self.pname[pid] = protocols.code(codec.name)
            for t in codec.types:
                if 0 <= int(t) < 256:
                    self.tname[pid, int(t)] = types.code(t.name)

    @staticmethod
    def spec_of(codec: wire.Codec) -> _Spec | None:
        module = getattr(codec.decode, "__module__", None)
        if module == _WIREKIT:
            return _wirekit_spec(codec)
        return _FIXED_SPECS.get((codec.name, module))


# ---- a capture ---------------------------------------------------------------------------------------------------

_DIRECTIONS = ("out", "in", "fwd")
_TRANSPORTS = ("udp", "mcast", "tcp")


class _Decoder:
    """One capture's frames, a block at a time (`block`); holds the file's string tables and, for the TCP
    segments that need the stream state, the reference's `FrameDecoder`."""

    def __init__(self, pf: P.PcapFile, b: _Bytes, address: str | None, names: dict[str, str],
                 ports: P.Ports) -> None:
        self.pf, self.b = pf, b
        self.link_type = pf.link_type
        self.address = address
        self.names = names
        self.ports = ports
        self.tables = {"direction": _Table(_DIRECTIONS), "transport": _Table(_TRANSPORTS), "ip": _Table(),
                       "node": _Table(), "error": _Table(), "protocol": _Table(), "type": _Table()}
        self.reg = _Registry(self.tables["protocol"], self.tables["type"])
        self.frames = P.FrameDecoder(pf.link_type, address, names, ports)
        self.node_ports = np.array(sorted(ports.node), np.int64)
        self.mcast_ports = np.array(sorted(ports.mcast), np.int64)
        self._ips: dict[int, tuple[int, int, bool]] = {}   # address -> (ip code, node code, is the capture's)

    def _reason(self, cols: _Cols, rows: np.ndarray, text: str) -> None:
        cols.val["error"][rows] = self.tables["error"].code(text)

    def _reasons(self, cols: _Cols, rows: np.ndarray, values: np.ndarray, text: Callable[[int], str]) -> None:
        """A reason that names a value (an ethertype, a protocol number): one text per distinct value."""
        if not rows.any():
            return
        v = values[rows]
        u = np.unique(v)
        codes = np.array([self.tables["error"].code(text(int(x))) for x in u], np.int32)
        cols.val["error"][rows] = codes[np.searchsorted(u, v)]

    def _addresses(self, raw: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """IPv4 addresses (u32) -> (string codes, node-name codes, is the capture's address)."""
        u = np.unique(raw)                      # few distinct values: no sort of the whole array
        inv = np.searchsorted(u, raw)
        info = []
        for v in u.tolist():
            got = self._ips.get(v)
            if got is None:
                s = socket.inet_ntoa(v.to_bytes(4, "big"))
                got = self._ips[v] = (self.tables["ip"].code(s), self.tables["node"].code(self.names.get(s)),
                                      s == self.address)
            info.append(got)
        arr = np.array(info, np.int64).reshape(-1, 3)
        return arr[inv, 0].astype(np.int32), arr[inv, 1].astype(np.int32), arr[inv, 2].astype(bool)

    def block(self, start: np.ndarray, length: np.ndarray) -> tuple[_Cols, np.ndarray]:
        """The decode columns of the frames whose data start at `start` (absolute) with `length` captured bytes,
        and for each row its frame (position in the block): one row per frame, except TCP segments completing
        several messages."""
        b, L, N = self.b, length, len(start)
        cols = _Cols(N)
        lt = self.link_type
        l3 = np.full(N, -1, np.int64)
        err = self._reason
        if lt == P.LINKTYPE_LINUX_SLL2:
            short = L < 20
            err(cols, short, "truncated Linux cooked v2 header")
            ok = ~short
            cols.set("if_index", ok, b.u32(start + 4)[ok])
            proto = b.u16(start)
            l3[ok & (proto == P._ETHERTYPE_IPV4)] = 20
        elif lt == P.LINKTYPE_LINUX_SLL:
            short = L < 16
            err(cols, short, "truncated Linux cooked header")
            ok = ~short
            proto = b.u16(start + 14)
            l3[ok & (proto == P._ETHERTYPE_IPV4)] = 16
        elif lt == P.LINKTYPE_ETHERNET:
            off = np.full(N, 12, np.int64)
            tagged = (L >= off + 2) & np.isin(b.u16(start + off), P._VLAN)
            while tagged.any():
                off[tagged] += 4
                tagged &= (L >= off + 2) & np.isin(b.u16(start + off), P._VLAN)
            short = L < off + 2
            err(cols, short, "truncated Ethernet header")
            ok = ~short
            proto = b.u16(start + off)
            ip4 = ok & (proto == P._ETHERTYPE_IPV4)
            l3[ip4] = off[ip4] + 2
        elif lt in (P.LINKTYPE_RAW, *P._RAW_ALIASES):
            empty = L == 0
            err(cols, empty, "empty frame")
            version = b.u8(start) >> 4
            self._reasons(cols, ~empty & (version != 4), version, lambda v: f"not IPv4 (IP version {v})")
            l3[~empty & (version == 4)] = 0
            ok = proto = None
        else:
            err(cols, np.ones(N, bool), f"unsupported link type {lt}")
            ok = proto = None
        if ok is not None:
            self._reasons(cols, ok & (l3 < 0), proto, lambda e: P._not_ipv4(e))

        # IPv4
        has = l3 >= 0
        short = has & (L < l3 + 20)
        err(cols, short, "truncated IPv4 header")
        ip = np.flatnonzero(has & ~short)
        a = start[ip] + l3[ip]
        vihl, ip_len, frag, proto = b.u8(a), b.u16(a + 2), b.u16(a + 6), b.u8(a + 9)
        src, dst = b.u32(a + 12), b.u32(a + 16)
        if len(ip):
            codes, nodes, mine = self._addresses(np.concatenate([src, dst]))
            k = len(ip)
            group = (dst >> 28) == 0xE
            in_ = mine[k:] | (group & bool(self.address))
            cols.set("direction", ip, np.where(mine[:k], 0, np.where(in_, 1, 2)).astype(np.int32))
            cols.set("ip_src", ip, codes[:k])
            cols.set("ip_dst", ip, codes[k:])
            cols.set("src_node", ip, nodes[:k])
            cols.set("dst_node", ip, nodes[k:])
            cols.set("ip_proto", ip, proto)
            cols.set("ip_len", ip, ip_len)
        else:
            group = np.zeros(0, bool)
        ihl = vihl & 0x0F
        badhl = ihl < 5
        err(cols, ip[badhl], "bad IPv4 header length")
        fragment = ~badhl & ((frag & 0x3FFF) != 0)
        err(cols, ip[fragment], "IP fragment")
        good = ~badhl & ~fragment
        l4 = a + ihl * 4                                   # absolute, per IPv4 frame
        tcp, udp = good & (proto == 6), good & (proto == 17)
        other = good & ~tcp & ~udp
        self._reasons(cols, _scatter(N, ip[other]), _spread(N, ip, proto),
                      lambda p: f"not UDP ({P._IP_PROTOCOLS.get(p, f'IP protocol {p}')})")
        end = start + L                                    # absolute end of each frame's captured bytes

        slow: list[int] = []
        if tcp.any():
            slow = self._tcp(cols, ip[tcp], a[tcp], l4[tcp], ip_len[tcp], end)
        if udp.any():
            self._udp(cols, ip[udp], l4[udp], group[udp], end)

        # The TCP segments that need the stream state, in frame order, through the reference's FrameDecoder.
        owner = np.arange(N)
        if slow:
            mm = self.pf.buffer
            extra: list[tuple[int, int, tuple]] = []
            tables = self.tables
            for i in slow:
                s = int(start[i])
                rows = self.frames.decode(mm[s:s + int(L[i])])
                cols.put_row(i, rows[0], tables)
                extra += [(i, j, r) for j, r in enumerate(rows[1:], 1)]
            if extra:
                cols.grow(len(extra))
                for k, (i, _j, r) in enumerate(extra):
                    cols.put_row(N + k, r, tables)
                owner = np.concatenate([owner, np.array([i for i, _, _ in extra], np.int64)])
                sub = np.concatenate([np.zeros(N, np.int64), np.array([j for _, j, _ in extra], np.int64)])
                order = np.lexsort((sub, owner))
                cols.take(order)
                owner = owner[order]
        return cols, owner

    def _tcp(self, cols: _Cols, rows: np.ndarray, a: np.ndarray, l4: np.ndarray, ip_len: np.ndarray,
             end: np.ndarray) -> list[int]:
        """TCP frames (`rows`, with their IPv4 header at `a` and TCP header at `l4`): the rows that need no
        stream state are filled here; returns the others (frame positions)."""
        b = self.b
        fend = end[rows]
        short = fend < l4 + 20
        self._reason(cols, rows[short], "TCP header not captured")
        cols.set("transport", rows, 2)
        r, l4, a, ip_len, fend = rows[~short], l4[~short], a[~short], ip_len[~short], fend[~short]
        sport, dport = b.u16(l4), b.u16(l4 + 2)
        doff, flags = b.u8(l4 + 12), b.u8(l4 + 13)
        seg0 = l4 + (doff >> 4) * 4
        seg1 = a + ip_len
        seglen = seg1 - seg0
        captured = np.maximum(0, np.minimum(seg1, fend) - np.minimum(seg0, fend))
        cols.set("src_port", r, sport)
        cols.set("dst_port", r, dport)
        cols.set("payload_len", r, seglen)
        cols.set("payload_truncated", r, captured < seglen)
        node = np.isin(sport, self.node_ports) | np.isin(dport, self.node_ports)
        self._reason(cols, r[~node], f"TCP not to or from {self.ports.describe_node()}")
        bare = node & ((flags & P._SYN) == 0) & (seglen <= 0)
        self._reason(cols, r[bare], TCP_NO_PAYLOAD)
        return r[node & ~bare].tolist()

    def _udp(self, cols: _Cols, rows: np.ndarray, l4: np.ndarray, group: np.ndarray, end: np.ndarray) -> None:
        b = self.b
        fend = end[rows]
        short = fend < l4 + 8
        self._reason(cols, rows[short], "UDP header not captured")
        r, l4, group, fend = rows[~short], l4[~short], group[~short], fend[~short]
        sport, dport, ulen = b.u16(l4), b.u16(l4 + 2), b.u16(l4 + 4)
        size = ulen - 8
        p0, p1 = l4 + 8, l4 + ulen
        captured = np.maximum(0, np.minimum(p1, fend) - np.minimum(p0, fend))
        truncated = captured < size
        cols.set("src_port", r, sport)
        cols.set("dst_port", r, dport)
        cols.set("transport", r, np.where(group, 1, 0).astype(np.int32))
        cols.set("payload_len", r, size)
        cols.set("payload_truncated", r, truncated)
        groups = ", ".join(map(str, sorted(self.ports.mcast))) or "none"
        not_group = group & ~np.isin(dport, self.mcast_ports)
        self._reason(cols, r[not_group], f"multicast UDP not to a group port ({groups})")
        not_node = ~group & ~(np.isin(sport, self.node_ports) | np.isin(dport, self.node_ports))
        self._reason(cols, r[not_node], f"UDP not to or from {self.ports.describe_node()}")
        mine = ~not_group & ~not_node
        tiny = mine & (captured < ENV)
        self._reason(cols, r[tiny & truncated], "protocol header not captured (snaplen)")
        self._reason(cols, r[tiny & ~truncated], "payload shorter than the header")
        msg = mine & ~tiny
        if msg.any():
            self._messages(cols, r[msg], p0[msg], size[msg], captured[msg])

    def _messages(self, cols: _Cols, rows: np.ndarray, p0: np.ndarray, size: np.ndarray,
                  captured: np.ndarray) -> None:
        """Datagrams' messages (`rows`, starting at `p0`, `size` bytes of which `captured` are in the file): the
        decoded ones from their protocol's spec, the rest by the reference's `_message`, one by one."""
        b, reg = self.b, self.reg
        magic, version, pid = b.u16(p0), b.u8(p0 + 2), b.u8(p0 + 3)
        mtype, sender, length = b.u8(p0 + 4), b.u16(p0 + 5), b.u16(p0 + 7)
        fast = ((magic == _MAGIC) & (version == wire.VERSION) & (length == size - ENV)
                & (reg.tname[pid, mtype] >= 0) & (captured >= ENV + reg.hsize[pid]))
        seq, seq_ok = np.zeros(len(rows), np.int64), np.zeros(len(rows), bool)
        rnd, rnd_ok = np.zeros(len(rows), np.int64), np.zeros(len(rows), bool)
        for p in np.unique(pid[fast]).tolist():
            sel = np.flatnonzero(fast & (pid == p))
            spec = reg.specs[p]
            m = _Msgs(b, p0[sel] + ENV, length[sel], captured[sel] - ENV, mtype[sel])
            s, s_ok, r_, r_ok, slow = spec.header(m)
            seq[sel], seq_ok[sel], rnd[sel], rnd_ok[sel] = s, s_ok, r_, r_ok
            whole = captured[sel] == size[sel]
            if whole.any():
                w = np.flatnonzero(whole)
                mw = _Msgs(b, m.r0[w], m.n[w], m.c[w], m.t[w])
                slow = slow.copy()
                slow[w] |= ~spec.valid(mw)
            fast[sel[slow]] = False
        ok = np.flatnonzero(fast)
        at = rows[ok]
        cols.val["decoded"][at] = True
        cols.set("version", at, wire.VERSION)
        cols.set("protocol", at, pid[ok])
        cols.set("protocol_name", at, reg.pname[pid[ok]])
        cols.set("type", at, mtype[ok])
        cols.set("type_name", at, reg.tname[pid[ok], mtype[ok]])
        cols.set("sender", at, sender[ok])
        cols.set("seq", at[seq_ok[ok]], seq[ok][seq_ok[ok]])
        cols.set("round", at[rnd_ok[ok]], rnd[ok][rnd_ok[ok]])
        cols.set("length", at, length[ok])
        rest = np.flatnonzero(~fast)
        if len(rest):
            mm = self.pf.buffer
            tables = self.tables
            names = _DECODE_COLUMNS[_DECODE_COLUMNS.index("decoded"):]
            for k in rest.tolist():
                s, c = int(p0[k]), int(captured[k])
                got = M._message(mm[s:s + c], int(size[k]), c)
                i = int(rows[k])
                for name, v in zip(names, got):
                    t = _STRING_TABLE.get(name)
                    if t is not None:
                        cols.val[name][i] = tables[t].code(v)
                    elif v is None:
                        cols.ok[name][i] = False
                    else:
                        cols.val[name][i] = v
                        if name in cols.ok:
                            cols.ok[name][i] = True


def _scatter(n: int, rows: np.ndarray) -> np.ndarray:
    m = np.zeros(n, bool)
    m[rows] = True
    return m


def _spread(n: int, rows: np.ndarray, values: np.ndarray) -> np.ndarray:
    out = np.zeros(n, np.int64)
    out[rows] = values
    return out
