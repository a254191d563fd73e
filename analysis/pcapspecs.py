"""The vectorised ingest's protocol specs (analysis/pcapvec.py, step 3): per codec of the wire registry, the
protocol header's seq/round columns and whether a whole message's body decodes, the codec's rules as array
expressions over the messages of a block (`_Msgs`, which read the file's bytes through `_Bytes`). Written out per
codec in `_FIXED_SPECS`; read from the layouts for the codecs `peerview/wirekit.py` builds (`_wirekit_spec`). A spec
only ever vouches for a valid body. analysis/pcapframes.py looks the specs up (`_Registry`) and has the reference's
`_message` decode whatever they do not vouch for.
"""
from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gossipnode import wire


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
# REPAIR_ITEMS 10, ACK_PREFRESH 11, HEARTBEAT 12, CPROBE 13, CACK 14, LEADER 15, PREFRESH 16, JOIN 17, STATE 18,
# EXCLUDED 19 (no header)
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
    ok |= (m.of(12, 14) & (n == 8)) | (m.of(17, 19) & (n == 4)) | (t == 16)
    ok |= (t == 18) & (n >= 4) & (m.u32(0) != 0)
    for kind, fixed in ((13, 12), (15, 8)):          # CPROBE, LEADER: fixed fields, then the committee
        ok |= _committee_ok(m, (t == kind) & (n >= fixed + 2), fixed)
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


def _committee_ok(m: _Msgs, rows: np.ndarray, off: int) -> np.ndarray:
    """vsync's `_committee` at `off`: a count u16 >= 1, that many member ids u16, distinct, to the message's end."""
    count = np.where(rows, m.u16(off), 0)
    good = rows & (count >= 1) & (m.n == off + 2 + 2 * count)
    if not good.any():
        return good
    width = int(count[good].max())
    k = np.arange(width)
    ids = m.b.u16((m.r0 + off + 2)[good][:, None] + 2 * k[None, :]).astype(np.int64)
    ids = np.sort(np.where(k[None, :] < count[good][:, None], ids, -1 - k[None, :]), axis=1)  # padding: distinct
    out = good.copy()
    out[good] = (np.diff(ids, axis=1) != 0).all(axis=1)
    return out


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


# qsm: header region u16, seq u32 (DATA/RETRANS/FORWARD: seq; TOKEN/ACK: the round; PULL/NAK: neither)
def _qsm_header(m: _Msgs):
    raw = m.u32(2)
    return raw, m.of(1, 2, 3), raw, m.of(4, 7), _no(m)


_TOKEN_ENTRY = 28   # qsm's wire.ENTRY: origin u16, six u32 (cutoff ... cstable), npn u8, nprev u8


def _qsm_valid(m: _Msgs) -> np.ndarray:
    t, n = m.t, m.n
    ok = m.of(1, 2, 3) & (n >= 15) & (m.u32(2) != 0) & (m.u32(10) != 0)   # 6 + origin, group u16, rseq, kind
    ok |= (t == 7) & (n == 25)                                    # ACK: 6 + 19
    for typ, cnt_at, start in ((5, 8, 9), (6, 9, 10)):         # PULL, NAK
        sel = (t == typ) & (n >= start)
        if sel.any():
            cnt = m.u8(cnt_at)
            good = sel & (n == start + 8 * cnt)
            ok |= good & m.ranges_ok(good, np.full(len(t), start), cnt, 8, 0, 4, _nonzero_first_le_last)
    token = (t == 4) & (n >= 12)
    if token.any():
        entries = np.where(token, m.u8(11), 0)
        good = token.copy()
        off = np.full(len(t), 12)
        for k in range(int(entries.max(initial=0))):
            act = good & (k < entries)
            good &= ~act | (n >= off + _TOKEN_ENTRY)
            act &= good
            end = off + _TOKEN_ENTRY
            for at in (_TOKEN_ENTRY - 2, _TOKEN_ENTRY - 1):       # npn ranges, then nprev ranges
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
