"""The packet table from a pcap's bytes with numpy, a block of frames at a time: what `analysis.pcap.packet_rows`
gives, row for row and value for value, as Arrow record batches of the PACKETS schema (`packet_batches`).

`packet_rows` (analysis/pcap.py) is the definition and stays the reference: one Python tuple per frame, a
`FrameDecoder` per capture. Here the same rules are applied to whole arrays:

1. The record headers are a chain (each gives the next one's offset). `_walk` follows it in pure numpy: chains
   started at guessed boundaries advance together and prove each other at their joins (a wrong guess costs
   time, never a wrong offset); about four times a Python loop over the headers, so no C is needed. Every other
   field of the headers is then gathered at once, and the checks of `PcapFile.__iter__` (corrupt header,
   truncated record or header) find the first unreadable record, with the same error text.
2. For a block of frames, the link-layer, IPv4, UDP and TCP fields and the protocol envelope are gathered with
   numpy fancy indexing (big-endian views of the file at every byte offset) and every rule of
   `FrameDecoder.decode` is a mask: which frames are not IPv4 and why, fragments, other IP protocols, ports, ...
3. The message of a datagram is decoded when its envelope is valid and a *spec* of its protocol is known here
   (`_Spec`, found by `_Registry`: the protocol header's seq/round columns and whether a whole message's body
   decodes, the codec's rules as array expressions; written out per codec in `_FIXED_SPECS`, read from the
   layouts for the codecs `peerview/wirekit.py` builds). A spec only ever says "this body is valid"; whatever it
   does not vouch for (a body that breaks a rule, a protocol without a spec, an envelope that is not valid, a
   header not captured) is decoded by the reference's `_message` for that message alone, so the error texts are
   the codec's own and a new protocol is decoded right before it has a spec.
4. TCP segments that need the stream state (SYN, payload to or from a node port) go through the capture's
   `FrameDecoder` in frame order, as in `packet_rows`: reassembly is the reference's code. Segments it would
   not look into (no payload, other ports, header not captured) are masks like the rest.

Strings (addresses, node names, reasons, names of protocols and types) are codes into small per-file tables,
turned into Arrow string arrays by one `take` (or handed over dictionary-encoded, for a Parquet writer).

Measured on the 2-core test machine while it was loaded (not the benchmark): about 1.2 us a packet for the
decode of the benchmark's capture set, against 25 to 35 us for `packet_rows` into Arrow batches.
"""
from __future__ import annotations

import inspect
import socket
import struct
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import as_strided
import pyarrow as pa

from analysis import pcap as P
from gossipnode import wire
from gossipnode.vclock import VirtualClock

BLOCK = 8192          # frames decoded together (one record batch, unless TCP frames complete several messages)
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


# ---- the file's bytes ------------------------------------------------------------------------------------------

class _Bytes:
    """Gathers from the file's bytes: u8/u16/u32 (network order) at arrays of absolute offsets, as int64.
    Offsets past the end are clamped (their values are never used: every read is masked by a length check)."""

    def __init__(self, buf) -> None:
        n = self.n = len(buf)
        self.a8 = np.frombuffer(buf, np.uint8)
        self.a16 = np.ndarray((n - 1,), ">u2", buf, 0, (1,))
        self.a32 = np.ndarray((n - 3,), ">u4", buf, 0, (1,))

    def u8(self, i: np.ndarray) -> np.ndarray:
        return self.a8[np.minimum(i, self.n - 1)].astype(np.int64)

    def u16(self, i: np.ndarray) -> np.ndarray:
        return self.a16[np.minimum(i, self.n - 2)].astype(np.int64)

    def u32(self, i: np.ndarray) -> np.ndarray:
        return self.a32[np.minimum(i, self.n - 4)].astype(np.int64)


def _walk_loop(buf, order: str, off: int, stop: int) -> tuple[np.ndarray, int]:
    """The chain of records from `off` (a record's offset) as `PcapFile.__iter__` follows it, without its checks:
    the offsets of the records before `stop` whose 16-byte header is in the file, and the offset after them."""
    unpack = struct.Struct(order + "I").unpack_from
    offs = array("q")
    put = offs.append
    size = len(buf)
    while off < stop and off + 16 <= size:
        put(off)
        off += 16 + unpack(buf, off + 8)[0]
    return (np.frombuffer(offs, np.int64) if len(offs) else np.zeros(0, np.int64)), off


# The parallel walk (`_walk`): chains start at guessed record boundaries every _SEGMENT bytes of a window of
# _WINDOW bytes and advance together; a window is given up for the loop after _MAX_STEPS steps, and the file after
# _MAX_MISSES wrong guesses.
_SEGMENT = 4096
_WINDOW = 1 << 22
_MAX_STEPS = 1024
_MAX_MISSES = 8
_HEAD = 1 << 16          # the loop walks this much first: the file's first stamp and its record sizes
_PARALLEL_MIN = 1 << 20  # smaller files: the loop


def _walk(buf, order: str, snaplen: int, unit: float) -> tuple[np.ndarray, int]:
    """The offsets of the records whose 16-byte header is in the file, following the chain of captured lengths
    from byte 24 as `PcapFile.__iter__` does (without its checks: `_records` does them on the arrays), and where
    the chain left the file.

    The chain cannot be followed in one array operation, and a Python loop costs about 0.2 us a record (a sixth of
    the whole decode). So, pure numpy: in each window of the file, a chain is started every `_SEGMENT` bytes at
    the first position that looks like a record header (its stamp's high byte is the first record's, its seconds
    within a month of it, lengths plausible, and so is the header after it), and all chains advance one record a
    step, each until it reaches the next chain's start. A guess only decides speed, never the result: the first
    chain starts on the true chain, and a chain that lands exactly on the next one's start proves that start
    true; at the first chain that does not, the records up to it are kept and the walk goes on from where that
    chain really went. About 0.05 us a record; files under a megabyte take the loop."""
    size = len(buf)
    head, at = _walk_loop(buf, order, 24, min(size, 24 + _HEAD))
    if at + 16 > size or size < _PARALLEL_MIN or len(head) < 16:
        rest, at = _walk_loop(buf, order, at, size)
        return np.concatenate([head, rest]), at
    a8 = np.frombuffer(buf, np.uint8)
    a32 = np.ndarray((size - 3,), order + "u4", buf, 0, (1,))
    try:
        caps = a32[head + 8].astype(np.int64)
        win = int(min(max(caps.max() + 16, 64), _SEGMENT // 2))
        sec0 = int(a32[24])
        sec_lo, sec_hi = max(sec0 - 86_400, 0), min(sec0 + 31 * 86_400, 0xFFFFFFFF)
        top_lo, top_span = sec_lo >> 24, (sec_hi >> 24) - (sec_lo >> 24)
        top_at = 3 if order == "<" else 0             # where the seconds' high byte is in a header
        fmax = 1_000_000_000 if unit < 1e-6 else 1_000_000
        limit = snaplen if 0 < snaplen <= P.MAX_FRAME else P.MAX_FRAME

        def plausible(p: np.ndarray) -> np.ndarray:
            sec, frac, cap, orig = (a32[p + k].astype(np.int64) for k in (0, 4, 8, 12))
            return ((sec >= sec_lo) & (sec <= sec_hi) & (frac < fmax) & (cap <= limit) & (cap <= orig)
                    & (orig <= P.MAX_FRAME)), cap

        def guesses(lo: int, hi: int) -> np.ndarray:
            """The first plausible header in each segment's first `win` bytes, segments from `lo` + _SEGMENT."""
            starts = np.arange(lo + _SEGMENT, hi - win - 32, _SEGMENT, dtype=np.int64)
            if not len(starts):
                return starts
            top = as_strided(a8[int(starts[0]) + top_at:], shape=(len(starts), win), strides=(_SEGMENT, 1))
            k, j = np.nonzero((top - np.uint8(top_lo)) <= np.uint8(top_span))
            p = starts[k] + j
            ok, cap = plausible(p)
            nxt = p + 16 + cap
            inside = nxt + 16 <= size
            ok &= ~inside | plausible(np.where(inside, nxt, 24))[0]
            k, p = k[ok], p[ok]
            return p[np.r_[True, k[1:] != k[:-1]]] if len(p) else p

        parts = [head]
        misses = 0
        while at + 16 <= size:
            wend = min(at + _WINDOW, size)
            g = guesses(at, wend) if misses < _MAX_MISSES else np.zeros(0, np.int64)
            if len(g) < 4:
                rest, at = _walk_loop(buf, order, at, wend)
                parts.append(rest)
                continue
            stop = np.append(g, min(wend, size - 15))
            pos = np.concatenate([[at], g])
            rows = [pos]
            lim = size - 4
            while len(rows) <= _MAX_STEPS:
                for _ in range(4):
                    pos = pos + 16
                    pos += a32[np.minimum(pos - 8, lim)]
                    rows.append(pos)
                if (pos >= stop).all():
                    break
            else:
                rest, at = _walk_loop(buf, order, at, wend)
                parts.append(rest)
                continue
            walked = np.stack(rows)
            before = walked < stop                      # each chain's records: a prefix of its column
            ends = walked[before.argmin(axis=0), np.arange(len(stop))]
            wrong = np.flatnonzero(ends[:-1] != g)
            k = int(wrong[0]) + 1 if len(wrong) else len(stop)
            parts.append(walked[:, :k].T[before[:, :k].T])   # chains 0 .. k-1, in order
            at = int(ends[k - 1])
            misses += len(wrong) > 0
        return np.concatenate(parts), at
    finally:
        del a8, a32


@dataclass
class _Records:
    off: np.ndarray        # offset of each readable record's header
    ts: np.ndarray         # the record's stamp (seconds, float64, as PcapFile gives it)
    cap: np.ndarray        # captured length
    orig: np.ndarray       # original length
    error: str | None      # why the file is not readable past the last of these


def _records(pf: P.PcapFile) -> _Records:
    """The records `iter(pf)` yields, and the PcapError it raises after them (its text), from one walk."""
    buf = pf.buffer
    size = len(buf)
    off, end = _walk(buf, pf.order, pf.snaplen, pf.unit)
    a32 = np.ndarray((size - 3,), pf.order + "u4", buf, 0, (1,))     # size >= 24: PcapFile checked
    try:
        sec, frac, cap, orig = (a32[off + k].astype(np.int64) for k in (0, 4, 8, 12))
    finally:
        del a32
    error = None
    corrupt = (cap > P.MAX_FRAME) | (cap > orig)
    cut = off + 16 + cap > size
    bad = np.flatnonzero(corrupt | cut)
    if len(bad):
        k = int(bad[0])
        o, c = int(off[k]), int(cap[k])
        if corrupt[k]:
            error = (f"{pf.name}: corrupt record header at byte {o} after {k} packets (captured length {c}, "
                     f"original length {int(orig[k])})")
        else:
            error = f"{pf.name}: truncated packet {k + 1} at byte {o} after {k} packets ({size - o - 16} of {c} bytes)"
        off, sec, frac, cap, orig = off[:k], sec[:k], frac[:k], cap[:k], orig[:k]
    elif end < size:
        error = (f"{pf.name}: truncated record header at byte {end} after {len(off)} packets "
                 f"({size - end} of 16 bytes)")
    ts = sec.astype(np.float64) + frac.astype(np.float64) * pf.unit
    return _Records(off, ts, cap, orig, error)


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


def _const_string(s: str, n: int, dictionary: bool = False) -> pa.Array:
    if dictionary:
        return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array([s], pa.string()), safe=False)
    b = s.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * len(b)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(b * n))


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


# ---- protocol specs: the codecs' header columns and body rules as array expressions ----------------------------

class _Msgs:
    """Messages of one protocol in a block: `r0` where the bytes after the envelope start (absolute), `n` how
    many there are (the envelope's length), `c` how many of them were captured, `t` the message type."""

    def __init__(self, b: _Bytes, r0: np.ndarray, n: np.ndarray, c: np.ndarray, t: np.ndarray) -> None:
        self.b, self.r0, self.n, self.c, self.t = b, r0, n, c, t

    def u8(self, off) -> np.ndarray:
        return self.b.u8(self.r0 + off)

    def u16(self, off) -> np.ndarray:
        return self.b.u16(self.r0 + off)

    def u32(self, off) -> np.ndarray:
        return self.b.u32(self.r0 + off)

    def of(self, *types: int) -> np.ndarray:
        return np.isin(self.t, types)

    def ranges_ok(self, rows: np.ndarray, start: np.ndarray, count: np.ndarray, stride: int, ia: int, ib: int,
                  good: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
        """For each message: do its `count` records of `stride` bytes from `start` (after the envelope), with u32
        values at `ia` and `ib` in each, all satisfy `good(a, b)`? Only `rows` are looked at (others: True);
        their records must be within the message."""
        cnt = np.where(rows, count, 0)
        total = int(cnt.sum())
        if total == 0:
            return np.ones(len(cnt), bool)
        owner = np.repeat(np.arange(len(cnt)), cnt)
        k = np.arange(total) - np.repeat(np.cumsum(cnt) - cnt, cnt)
        pos = self.r0[owner] + start[owner] + k * stride
        bad = ~good(self.b.u32(pos + ia), self.b.u32(pos + ib))
        return np.bincount(owner[bad], minlength=len(cnt)) == 0


@dataclass(frozen=True)
class _Spec:
    """How the vectorised path reads one protocol. `header(m)` -> (seq, seq valid, round, round valid, rows to
    leave to the reference); the reads see only the captured bytes, as `Codec.header_columns` does. `valid(m)`
    (whole messages only) -> True where `wire.decode` accepts the message: never True where it would not."""

    header: Callable
    valid: Callable


def _no(m: _Msgs) -> np.ndarray:
    return np.zeros(len(m.t), bool)


def _yes(m: _Msgs) -> np.ndarray:
    return np.ones(len(m.t), bool)


def _first_le_last(a, b):
    return a <= b


def _one_le_first_le_last(a, b):
    return (a >= 1) & (a <= b)


def _nonzero_first_le_last(a, b):
    return (a != 0) & (a <= b)


# gsgc (protocols/gsgc/wire.py): header seq u32, round u32 (always captured: the header is checked first)
def _gsgc_header(m: _Msgs):
    return m.u32(0), _yes(m), m.u32(4), _yes(m), _no(m)


def _gsgc_valid(m: _Msgs) -> np.ndarray:
    t, bl = m.t, m.n - 8
    ok = np.zeros(len(t), bool)
    data = m.of(1, 2)
    ok[data] = bl[data] >= 2
    gos = m.of(4, 5, 8, 9)
    if gos.any():
        cnt, nbits = m.u16(8), m.u16(10)
        words = np.where(m.of(8, 9), cnt, 2 * cnt)
        wlen = (nbits + 7) // 8
        good = gos & (bl >= 4) & (nbits != 0) & (bl == 4 + 4 * words + wlen)
        rem = nbits & 7
        last = m.u8(np.where(good, 12 + 4 * words + wlen - 1, 0))
        ok |= good & ((rem == 0) | ((last >> rem) == 0))
    arrays = m.of(6, 10)
    live = t == 7
    if arrays.any() or live.any():
        cnt = m.u16(8)
        ok |= arrays & (bl >= 2) & (bl == 2 + 4 * cnt)
        ok |= live & (bl >= 2) & (bl == 2 + cnt)
    nak = t == 3
    if nak.any():
        cnt = m.u16(10)
        good = nak & (bl >= 4) & (bl == 4 + 8 * cnt)
        ok |= good & m.ranges_ok(good, np.full(len(t), 12), cnt, 8, 0, 4, _first_le_last)
    return ok


# direct: header seq u32; DATA's seq is not 0
def _direct_header(m: _Msgs):
    return m.u32(0), _yes(m), m.u32(0), _no(m), _no(m)


def _direct_valid(m: _Msgs) -> np.ndarray:
    return m.u32(0) != 0


# pbcast, and vsync's P_* types: header round u32; DATA/REPAIR: origin u16, root u16, seq u32, payload;
# DIGEST/SOLICIT: count u16, count x (origin u16, first u32, last u32) with 1 <= first <= last
def _pbcast_header(m: _Msgs, data=(1, 2)):
    seq_ok = m.of(*data) & (m.c >= 12)
    return m.u32(8), seq_ok, m.u32(0), np.ones(len(m.t), bool), _no(m)


def _pbcast_valid(m: _Msgs, data=(1, 2), digest=(3, 4)) -> np.ndarray:
    bl = m.n - 4
    ok = m.of(*data) & (bl >= 8) & (m.u32(8) != 0)
    dig = m.of(*digest)
    if dig.any():
        cnt = m.u16(4)
        good = dig & (bl >= 2) & (bl == 2 + 10 * cnt)
        ok |= good & m.ranges_ok(good, np.full(len(m.t), 6), cnt, 10, 2, 6, _one_le_first_le_last)
    return ok & (m.n >= 4)


# vsync: P_DATA.. P_SOLICIT (1-4) are pbcast's; GSEQ_REQ 5, GSEQ_ACK 6, ORDER 7, ORDER_ACK 8, REPAIR_REQ 9,
# REPAIR_ITEMS 10, ACK_PREFRESH 11 (no header)
def _vsync_header(m: _Msgs):
    pb = m.of(1, 2, 3, 4)
    seq, seq_ok, rnd, _, _ = _pbcast_header(m)
    seq_ok = seq_ok & pb
    first = m.of(5, 7, 8) & (m.c >= 4)
    second = (m.t == 6) & (m.c >= 8)
    seq = np.where(first, m.u32(0), np.where(second, m.u32(4), seq))
    return seq, seq_ok | first | second, rnd, pb.copy(), pb & (m.c < 4)


_REPAIR_ITEMS_MAX = 256   # more items than this: left to the reference (a loop per item)


def _vsync_valid(m: _Msgs) -> np.ndarray:
    t, n = m.t, m.n
    ok = m.of(1, 2, 3, 4) & _pbcast_valid(m)
    ok |= m.of(5, 7) & (n >= 4) & (m.u32(0) != 0)
    ok |= ((t == 6) & (n == 12)) | ((t == 8) & (n == 4)) | ((t == 9) & (n == 6)) | ((t == 11) & (n == 8))
    items = (t == 10) & (n >= 6)
    if items.any():
        count = np.where(items, m.u16(4), 0)
        good = items & (count <= _REPAIR_ITEMS_MAX)
        off = np.full(len(t), 6)
        for k in range(int(count[good].max(initial=0))):
            act = good & (k < count)
            good &= ~act | (n >= off + 6)
            act &= good
            size = m.u16(off + 4)
            good &= ~act | (n >= off + 6 + size)
            act &= good
            off = np.where(act, off + 6 + size, off)
        ok |= good & (off == n)
    return ok


# tradvsync: DATA 1/RETRANS 2 seq u32 (not 0), payload; ACK 3 origin u16, upto u32; NAK 4 origin, first, last
def _tradvsync_header(m: _Msgs):
    data = m.of(1, 2) & (m.c >= 4)
    ack = (m.t == 3) & (m.c >= 6)
    return np.where(data, m.u32(0), m.u32(2)), data | ack, m.u32(0), _no(m), _no(m)


def _tradvsync_valid(m: _Msgs) -> np.ndarray:
    t, n = m.t, m.n
    ok = m.of(1, 2) & (n >= 4) & (m.u32(0) != 0)
    ok |= (t == 3) & (n == 6)
    first, last = m.u32(2), m.u32(6)
    ok |= (t == 4) & (n == 10) & (first >= 1) & (first <= last)
    return ok


# qsm: header region u8, seq u32 (DATA/RETRANS/FORWARD: seq; TOKEN/ACK: the round; PULL/NAK: neither)
def _qsm_header(m: _Msgs):
    raw = m.u32(1)
    return raw, m.of(1, 2, 3), raw, m.of(4, 7), _no(m)


_TOKEN_ENTRY = 20


def _qsm_valid(m: _Msgs) -> np.ndarray:
    t, n = m.t, m.n
    ok = m.of(1, 2, 3) & (n >= 13) & (m.u32(1) != 0) & (m.u32(8) != 0)
    ok |= (t == 7) & (n == 20)                                    # ACK: 5 + 15
    for typ, cnt_at, start in ((5, 7, 8), (6, 8, 9)):          # PULL, NAK
        sel = (t == typ) & (n >= start)
        if sel.any():
            cnt = m.u8(cnt_at)
            good = sel & (n == start + 8 * cnt)
            ok |= good & m.ranges_ok(good, np.full(len(t), start), cnt, 8, 0, 4, _nonzero_first_le_last)
    token = (t == 4) & (n >= 11)
    if token.any():
        entries = np.where(token, m.u8(10), 0)
        good = token.copy()
        off = np.full(len(t), 11)
        for k in range(int(entries.max(initial=0))):
            act = good & (k < entries)
            good &= ~act | (n >= off + _TOKEN_ENTRY)
            act &= good
            end = off + _TOKEN_ENTRY
            for at in (18, 19):                                   # npn ranges, then nprev ranges
                cnt = np.where(act, m.u8(off + at), 0)
                good &= ~act | (n >= end + 8 * cnt)
                act &= good
                good &= m.ranges_ok(act, end, cnt, 8, 0, 4, _nonzero_first_le_last)
                act &= good
                end = end + 8 * cnt
            off = np.where(act, end, off)
        ok |= good & (off == n)
    return ok


# codecs built by peerview/wirekit.py from their layouts: no header; the body is the layout's fields in order
def _wirekit_spec(codec: wire.Codec) -> _Spec | None:
    try:
        plans = inspect.getclosurevars(codec.decode).nonlocals["plans"]
        hv = inspect.getclosurevars(codec.header_columns).nonlocals
        seq_offset, seq_type = hv["seq_offset"], hv["seq_type"]
    except (KeyError, TypeError):
        return None
    size = {"u8": 1, "u16": 2, "u32": 4}
    layouts = {}
    for mtype, plan in plans.items():
        fields = []
        seen: set[str] = set()
        for f in plan.layout.body:
            if f.kind == "bytes":
                fields.append((f.name, "bytes", None, False))
                continue
            if f.kind not in size or not (f.count is None or isinstance(f.count, str) and f.count in seen):
                return None     # not a layout wirekit decodes (it would fail otherwise): the reference decides
            if f.name in plan.count_of:
                seen.add(f.name)
            fields.append((f.name, f.kind, f.count, f.name in plan.count_of))
        layouts[int(mtype)] = fields

    def header(m: _Msgs):
        if seq_offset is None:
            return m.u32(0), _no(m), m.u32(0), _no(m), _no(m)
        ok = (m.t == int(seq_type)) & (m.c >= seq_offset + 4)
        return m.u32(seq_offset), ok, m.u32(0), _no(m), _no(m)

    def valid(m: _Msgs) -> np.ndarray:
        ok = np.zeros(len(m.t), bool)
        for mtype, fields in layouts.items():
            good = m.t == mtype
            if not good.any():
                continue
            pos = np.zeros(len(m.t), np.int64)
            counts: dict[str, np.ndarray] = {}
            for name, kind, count, is_count in fields:
                if kind == "bytes":
                    pos = m.n.copy()
                    continue
                need = size[kind] * (1 if count is None else counts[count])
                good &= m.n - pos >= need
                if is_count:
                    read = {"u8": m.u8, "u16": m.u16, "u32": m.u32}[kind]
                    counts[name] = np.where(good, read(pos), 0)
                pos = pos + np.where(good, need, 0)
            ok |= good & (pos == m.n)
        return ok

    return _Spec(header, valid)


# Which codecs the specs describe: (name, module of its decode function) -> spec. A protocol registered under
# another codec, or none of these, is decoded message by message by the reference.
_FIXED_SPECS = {
    ("gsgc", "gossipnode.protocols.gsgc.wire"): _Spec(_gsgc_header, _gsgc_valid),
    ("direct", "gossipnode.protocols.direct.wire"): _Spec(_direct_header, _direct_valid),
    ("pbcast", "gossipnode.protocols.pbcast.wire"): _Spec(_pbcast_header, _pbcast_valid),
    ("vsync", "gossipnode.protocols.vsync.wire"): _Spec(_vsync_header, _vsync_valid),
    ("tradvsync", "gossipnode.protocols.tradvsync.wire"): _Spec(_tradvsync_header, _tradvsync_valid),
    ("qsm", "gossipnode.protocols.qsm.wire"): _Spec(_qsm_header, _qsm_valid),
}
_WIREKIT = "gossipnode.protocols.peerview.wirekit"


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
            self.hsize[pid] = P._header_size_of(pid)
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
        self._reason(cols, r[bare], P.TCP_NO_PAYLOAD)
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
                got = P._message(mm[s:s + c], int(size[k]), c)
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


# ---- the batches -------------------------------------------------------------------------------------------------

_SCHEMA: pa.Schema | None = None


def packets_schema() -> pa.Schema:
    """PACKETS as an Arrow schema (as `analysis.ingest.arrow_schema` gives it)."""
    global _SCHEMA
    if _SCHEMA is None:
        from pyspark.sql.pandas.types import to_arrow_schema

        from analysis.schemas import PACKETS

        _SCHEMA = to_arrow_schema(PACKETS)
    return _SCHEMA


def dictionary_schema(schema: pa.Schema) -> pa.Schema:
    """`schema` with its string columns dictionary-encoded (int32 indices), as `packet_batches(dictionary=True)`
    gives them."""
    return pa.schema([pa.field(f.name, pa.dictionary(pa.int32(), pa.string()), f.nullable)
                      if pa.types.is_string(f.type) else f for f in schema])


def _times(ts: np.ndarray, clock_offset_s: float, clock: VirtualClock | None) -> np.ndarray:
    """`packet_rows`' ts: the file's stamp minus the host's clock offset, made virtual by the run's clock."""
    ts = ts - clock_offset_s
    if clock is not None and not clock.identity:
        if type(clock) is VirtualClock and clock.dilation != 1:
            ts = np.float64(clock.epoch) + (ts - np.float64(clock.epoch)) / np.float64(clock.dilation)
        else:
            ts = np.array([clock.to_virtual(float(x)) for x in ts.tolist()], np.float64)
    return ts


def packet_batches(cap: P.CaptureFile, run_id: str, t0: float, names: dict[str, str],
                   clock_offset_s: float = 0.0, ports: P.Ports | None = None, scan: P.CaptureScan | None = None,
                   clock: VirtualClock | None = None, batch_rows: int = BLOCK,
                   schema: pa.Schema | None = None, dictionary: bool = False) -> Iterator[pa.RecordBatch]:
    """`packet_rows(...)` as Arrow record batches of the PACKETS schema (at most `batch_rows` rows each; none for a
    file without readable frames): the same rows in the same order, and `scan` filled the same way. `dictionary`:
    the string columns dictionary-encoded (`dictionary_schema`; the same values, for a Parquet writer)."""
    schema = schema or packets_schema()
    out_schema = dictionary_schema(schema) if dictionary else schema
    ports = ports or P.Ports()
    try:
        pf = P.PcapFile(cap.path, cap.file)
    except (OSError, P.PcapError) as exc:
        if scan is not None:
            scan.error = P._open_error(cap, exc)
        return
    with pf:
        b = dec = None
        try:
            if scan is not None:
                scan.link_type = pf.link_type
            rec = _records(pf)
            n = len(rec.off)
            if scan is not None:
                scan.packets = n
                scan.bytes = int(rec.orig.sum())
                if n:
                    scan.first, scan.last = float(rec.ts[0]), float(rec.ts[-1])
                scan.error = rec.error
            if not n:
                return
            ts = _times(rec.ts, clock_offset_s, clock)
            t_s = ts - t0
            b = _Bytes(pf.buffer)
            dec = _Decoder(pf, b, cap.address, names, ports)
            for lo in range(0, n, batch_rows):
                hi = min(lo + batch_rows, n)
                cols, owner = dec.block(rec.off[lo:hi] + 16, rec.cap[lo:hi])
                frame = owner + lo
                rows = len(frame)
                arrays = [_const_string(s, rows, dictionary) for s in (run_id, cap.node, cap.interface, cap.file)]
                arrays += [pa.array(frame + 1, pa.int64()), pa.array(ts[frame], pa.float64()),
                           pa.array(t_s[frame], pa.float64()), pa.array(rec.orig[frame], pa.int32()),
                           pa.array(rec.cap[frame], pa.int32())]
                for name, field in zip(_DECODE_COLUMNS, list(schema)[9:]):
                    v = cols.val[name]
                    t = _STRING_TABLE.get(name)
                    if t is not None:
                        arrays.append(dec.tables[t].arrow(v, dictionary))
                    elif name in cols.ok:
                        arrays.append(pa.array(v, field.type, mask=~cols.ok[name]))
                    else:
                        arrays.append(pa.array(v, field.type))
                batch = pa.RecordBatch.from_arrays(arrays, schema=out_schema)
                for s in range(0, rows, batch_rows):
                    yield batch.slice(s, batch_rows) if rows > batch_rows else batch
        finally:
            del b, dec      # the views of the mapping, before the file is closed
