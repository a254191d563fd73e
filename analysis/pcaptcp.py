"""TCP reassembly for the per-packet decoder (analysis/pcap.py's `FrameDecoder`, whose docstring states the
rules): `_Direction` is one direction of a connection, reassembled by sequence number and cut into messages by the
envelope's length (each decoded by `analysis.pcapmsg._message`); the `TCP_*` texts are the reasons of TCP rows that
are not messages. Runs on the Spark executors: the standard library and the node's `wire` only.
"""
from __future__ import annotations

from analysis.pcapmsg import ENV, _NO_HEADER, _message
from gossipnode import wire

# reasons of TCP rows that are not messages
TCP_NO_PAYLOAD = "TCP segment without payload (handshake, ACK or FIN)"
TCP_PARTIAL = "TCP segment completes no message (part of a message that ends later)"
TCP_RETRANSMISSION = "TCP retransmission (bytes already seen)"
TCP_AHEAD = "TCP segment after a gap in the stream (held until the gap is filled)"
TCP_NO_SYN = "TCP stream whose start (SYN) was not captured: message boundaries unknown"
TCP_ENVELOPE_CUT = ("TCP message envelope not captured (snaplen): the rest of this direction cannot be "
                    "delimited")
TCP_LOST = "TCP stream not delimitable after an earlier problem"


class _Direction:
    """One direction of a TCP connection being reassembled. Stream offsets count from the byte after the SYN."""

    __slots__ = ("base", "next", "buf", "unknown", "ahead", "lost")

    def __init__(self, base: int | None) -> None:
        self.base = base                 # sequence number of stream offset 0 (SYN + 1); None: SYN not seen
        self.next = 0                    # stream offset of the first byte not yet received in order
        self.buf = bytearray()           # received bytes not yet cut into messages (starts at a boundary)
        self.unknown: list[list[int]] = []   # [a, b) ranges of buf the capture did not hold (zeros in buf)
        self.ahead: dict[int, tuple[bytes, int]] = {}   # offset -> (captured bytes, segment length)
        self.lost: str | None = None if base is not None else TCP_NO_SYN

    def _append(self, off: int, captured: bytes, seglen: int) -> None:
        """Add the part of a segment at `off` that lies beyond `next` (off <= next)."""
        skip = self.next - off
        new = seglen - skip
        if new <= 0:
            return
        have = captured[skip:] if skip < len(captured) else b""
        start = len(self.buf)
        self.buf += have
        if len(have) < new:
            self.buf += bytes(new - len(have))
            a = start + len(have)
            if self.unknown and self.unknown[-1][1] == a:
                self.unknown[-1][1] = start + new
            else:
                self.unknown.append([a, start + new])
        self.next += new

    def segment(self, seq: int, captured: bytes, seglen: int) -> tuple[list[tuple], str | None]:
        """Feed a segment's payload; returns (message column tuples completed, reason when there are none)."""
        if self.lost is not None:
            why = self.lost
            if why != TCP_NO_SYN:
                self.lost = TCP_LOST
            return [], why
        off = (seq - self.base) & 0xFFFFFFFF
        if off >= 1 << 31 or off + seglen <= self.next:
            return [], TCP_RETRANSMISSION
        if off > self.next:
            prev = self.ahead.get(off)
            if prev is None or prev[1] < seglen:
                self.ahead[off] = (captured, seglen)
            return [], TCP_AHEAD
        self._append(off, captured, seglen)
        while self.ahead:
            ready = [o for o in self.ahead if o <= self.next]
            if not ready:
                break
            for o in sorted(ready):
                cap, n = self.ahead.pop(o)
                if o <= self.next:
                    self._append(o, cap, n)
        return self._messages()

    def _known(self, a: int, b: int) -> int:
        """How many bytes from `a` on are captured, up to `b`."""
        for ua, ub in self.unknown:
            if ub > a and ua < b:
                return max(ua, a) - a
        return b - a

    def _messages(self) -> tuple[list[tuple], str | None]:
        out: list[tuple] = []
        buf = self.buf
        pos = 0
        error = None
        while len(buf) - pos >= ENV:
            if self._known(pos, pos + ENV) < ENV:
                error = self.lost = TCP_ENVELOPE_CUT
                break
            try:
                env = wire.parse_envelope(bytes(buf[pos:pos + ENV]), exact=False)
            except wire.DecodeError as exc:
                error = self.lost = f"TCP stream: {exc} (the rest of this direction cannot be delimited)"
                break
            size = ENV + env.length
            if len(buf) - pos < size:
                break
            known = self._known(pos, pos + size)
            out.append((known < size,) + _message(bytes(buf[pos:pos + size]), size, known))
            pos += size
        if error is not None:
            self.lost = TCP_LOST
            self.buf = bytearray()
            self.unknown = []
            self.ahead.clear()
        elif pos:
            del buf[:pos]
            self.unknown = [[a - pos, b - pos] for a, b in self.unknown if b > pos]
            if self.unknown and self.unknown[0][0] < 0:
                self.unknown[0][0] = 0
        if error is not None:
            out.append((None, False, error) + _NO_HEADER)
        return out, None if out else TCP_PARTIAL
