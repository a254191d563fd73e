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
   (`_Decoder`, analysis/pcapframes.py).
3. The message of a datagram is decoded when its envelope is valid and a *spec* of its protocol is known here
   (`_Spec`, found by `_Registry`: the protocol header's seq/round columns and whether a whole message's body
   decodes, the codec's rules as array expressions; written out per codec in `_FIXED_SPECS`, read from the
   layouts for the codecs `peerview/wirekit.py` builds: analysis/pcapspecs.py). A spec only ever says "this body
   is valid"; whatever it does not vouch for (a body that breaks a rule, a protocol without a spec, an envelope
   that is not valid, a header not captured) is decoded by the reference's `_message` for that message alone, so
   the error texts are the codec's own and a new protocol is decoded right before it has a spec.
4. TCP segments that need the stream state (SYN, payload to or from a node port) go through the capture's
   `FrameDecoder` in frame order, as in `packet_rows`: reassembly is the reference's code. Segments it would
   not look into (no payload, other ports, header not captured) are masks like the rest.

Strings (addresses, node names, reasons, names of protocols and types) are codes into small per-file tables,
turned into Arrow string arrays by one `take` (or handed over dictionary-encoded, for a Parquet writer).

Measured on the 2-core test machine while it was loaded (not the benchmark): about 1.2 us a packet for the
decode of the benchmark's capture set, against 25 to 35 us for `packet_rows` into Arrow batches.
"""
from __future__ import annotations

import struct
from array import array
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import as_strided
import pyarrow as pa

from analysis import pcap as P
from analysis.pcapframes import _DECODE_COLUMNS, _STRING_TABLE, _Decoder
from analysis.pcapspecs import _Bytes
from gossipnode.vclock import VirtualClock

BLOCK = 8192          # frames decoded together (one record batch, unless TCP frames complete several messages)


# ---- the records ------------------------------------------------------------------------------------------------

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


def _const_string(s: str, n: int, dictionary: bool = False) -> pa.Array:
    if dictionary:
        return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array([s], pa.string()), safe=False)
    b = s.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * len(b)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(b * n))


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
