"""The raw netlink bits of NFQUEUE (nfnetlink_queue), stdlib only: enter a network namespace, open its
NETLINK_NETFILTER socket, bind queues, parse queued-packet messages (`packet_parser`, the only parser) and
build verdicts.

Only what the delay line needs: IPv4, copy mode PACKET with a small copy range (the IP header gives the length),
no fail-open, no GSO passthrough (the kernel segments GSO packets before queueing them), one socket per
namespace serving any number of that namespace's queues.
"""
from __future__ import annotations

import errno
import os
import socket
import struct
from typing import Callable

from gossipnode.netns import entered

# --- constants (linux/netlink.h, linux/netfilter/nfnetlink*.h) -------------------------------------------------
NETLINK_NETFILTER = 12
SOL_NETLINK = 270
NETLINK_NO_ENOBUFS = 5
SO_RCVBUFFORCE = 33
SO_SNDBUFFORCE = 32

NLMSG_ERROR = 2
NLMSG_DONE = 3
NLM_F_REQUEST = 0x1
NLM_F_ACK = 0x4

NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET = 0
NFQNL_MSG_VERDICT = 1
NFQNL_MSG_CONFIG = 2
MSG_PACKET = (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET
MSG_VERDICT = (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_VERDICT
MSG_CONFIG = (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_CONFIG

NFQA_CFG_CMD = 1
NFQA_CFG_PARAMS = 2
NFQA_CFG_QUEUE_MAXLEN = 3
NFQNL_CFG_CMD_BIND = 1
NFQNL_CFG_CMD_UNBIND = 2
NFQNL_COPY_PACKET = 2

NFQA_PACKET_HDR = 1
NFQA_VERDICT_HDR = 2
NFQA_TIMESTAMP = 4
NFQA_PAYLOAD = 10
NFQA_CAP_LEN = 13

NF_DROP = 0
NF_ACCEPT = 1


_NLMSGHDR = struct.Struct("=IHHII")
_NLATTR = struct.Struct("=HH")
_NL_LEN_TYPE = struct.Struct("=IH")
_I32 = struct.Struct("=i")
_U16BE = struct.Struct(">H")
_U32BE = struct.Struct(">I")
_TS = struct.Struct(">QQ")


class NetlinkError(OSError):
    pass


# --- namespaces -----------------------------------------------------------------------------------------------
# Entering a namespace on this thread and coming back is the node's `gossipnode.netns.entered` (setns(2) through
# ctypes; it takes a path such as /run/netns/NAME): sockets and /proc/thread-self/net files opened inside stay
# bound to that namespace.
in_netns = entered


def netns_key(path: str) -> tuple[int, int]:
    """Identity of a namespace file (two paths to one namespace give one key)."""
    st = os.stat(path)
    return (st.st_dev, st.st_ino)


# --- messages --------------------------------------------------------------------------------------------------
def _attr(atype: int, payload: bytes) -> bytes:
    n = 4 + len(payload)
    return _NLATTR.pack(n, atype) + payload + b"\0" * ((4 - n % 4) % 4)


def _nfmsg(mtype: int, flags: int, seq: int, res_id: int, attrs: bytes, family: int = socket.AF_UNSPEC) -> bytes:
    body = struct.pack("=BB", family, 0) + _U16BE.pack(res_id) + attrs
    return _NLMSGHDR.pack(16 + len(body), mtype, flags, seq, 0) + body


def config_bind(queue_num: int, seq: int, copy_range: int, maxlen: int) -> bytes:
    """One config message: bind `queue_num` to this socket for IPv4, copy `copy_range` bytes of each packet,
    hold at most `maxlen` packets. No flags (never fail-open)."""
    attrs = (_attr(NFQA_CFG_CMD, struct.pack("=BB", NFQNL_CFG_CMD_BIND, 0) + _U16BE.pack(socket.AF_INET))
             + _attr(NFQA_CFG_PARAMS, _U32BE.pack(copy_range) + bytes([NFQNL_COPY_PACKET]))
             + _attr(NFQA_CFG_QUEUE_MAXLEN, _U32BE.pack(maxlen)))
    return _nfmsg(MSG_CONFIG, NLM_F_REQUEST | NLM_F_ACK, seq, queue_num, attrs)


def config_unbind(queue_num: int, seq: int) -> bytes:
    attrs = _attr(NFQA_CFG_CMD, struct.pack("=BB", NFQNL_CFG_CMD_UNBIND, 0) + _U16BE.pack(socket.AF_INET))
    return _nfmsg(MSG_CONFIG, NLM_F_REQUEST | NLM_F_ACK, seq, queue_num, attrs)


def _bswap16(x: int) -> int:
    return int.from_bytes(x.to_bytes(2, "little"), "big")


def _bswap32(x: int) -> int:
    return int.from_bytes(x.to_bytes(4, "little"), "big")


# A verdict is 32 bytes; packed big-endian as a whole, with the host-order header fields pre-swapped.
_VERDICT = struct.Struct(">IHHIIBBHHHII")
_V_LEN, _V_TYPE, _V_FLAGS = (_bswap32(32), _bswap16(MSG_VERDICT), _bswap16(NLM_F_REQUEST))
_V_ALEN, _V_ATYPE = _bswap16(12), _bswap16(NFQA_VERDICT_HDR)
if struct.pack("=H", 1) == struct.pack(">H", 1):  # big-endian host: no swapping needed
    _V_LEN, _V_TYPE, _V_FLAGS, _V_ALEN, _V_ATYPE = 32, MSG_VERDICT, NLM_F_REQUEST, 12, NFQA_VERDICT_HDR


def verdict(queue_num: int, packet_id: int, v: int) -> bytes:
    return _VERDICT.pack(_V_LEN, _V_TYPE, _V_FLAGS, 0, 0, socket.AF_UNSPEC, 0, queue_num, _V_ALEN, _V_ATYPE,
                         v, packet_id)


def packet_parser(copy_range: int, with_time: bool = False) -> Callable:
    """The one parser of what a queue socket delivers. Returns `parse(buf, n) -> (packets, errors)`:
    `packets` lists (queue_num, packet_id, ip_length) of every NFQNL_MSG_PACKET in buf[:n], in order
    (`with_time`: (queue_num, packet_id, ip_length, kernel_time), kernel_time the packet's NFQA_TIMESTAMP in
    CLOCK_REALTIME seconds, 0.0 without one: forwarded packets queued in FORWARD carry their receive time);
    `errors` is None or the errnos of the negative NLMSG_ERROR acks among them (a rejected verdict).
    `ip_length` is the IPv4 total length (NFQA_CAP_LEN, or the copied length, when the packet is not IPv4).

    `copy_range` is the queues' copy range: the kernel puts NFQA_PACKET_HDR first and NFQA_PAYLOAD last, so a
    packet of at least copy_range bytes is read at fixed offsets without a walk over its attributes (the hot
    path: one call per recv, not per packet)."""
    pay_span = (4 + copy_range + 3) & ~3
    pay_attr = (4 + copy_range, NFQA_PAYLOAD)
    ts_attr = (20, NFQA_TIMESTAMP)

    def parse(buf, n: int, hdr=_NL_LEN_TYPE.unpack_from, attr=_NLATTR.unpack_from, be16=_U16BE.unpack_from,
              be32=_U32BE.unpack_from, i32=_I32.unpack_from, ts=_TS.unpack_from, pay_span=pay_span,
              pay_attr=pay_attr, ts_attr=ts_attr, MSG_PACKET=MSG_PACKET, NFQA_PACKET_HDR=NFQA_PACKET_HDR):
        pkts: list[tuple[int, int, int]] = []
        append = pkts.append
        errors = None
        off = 0
        while off + 16 <= n:
            mlen, mtype = hdr(buf, off)
            if mlen < 16:
                break
            end = off + mlen
            if mtype == MSG_PACKET:
                qnum = be16(buf, off + 18)[0]   # nfgenmsg.res_id is the queue
                a = end - pay_span
                if a >= off + 28 and attr(buf, off + 20)[1] == NFQA_PACKET_HDR and attr(buf, a) == pay_attr \
                        and buf[a + 4] >> 4 == 4:
                    if not with_time:
                        append((qnum, be32(buf, off + 24)[0], be16(buf, a + 6)[0]))
                        off += (mlen + 3) & ~3
                        continue
                    # as the kernel (6.x) orders them: ... TIMESTAMP, CAP_LEN, [SKB_INFO], PAYLOAD
                    kt = 0.0
                    for b in (a - 36, a - 28):
                        if b >= off + 28 and attr(buf, b) == ts_attr:
                            sec, usec = ts(buf, b + 4)
                            kt = sec + usec * 1e-6
                            break
                    append((qnum, be32(buf, off + 24)[0], be16(buf, a + 6)[0], kt))
                else:
                    pkt_id = -1
                    length = cap_len = 0
                    kt = 0.0
                    a = off + 20
                    while a + 4 <= end:
                        alen, atype = attr(buf, a)
                        if alen < 4:
                            break
                        atype &= 0x3FFF
                        if atype == NFQA_PACKET_HDR:
                            pkt_id = be32(buf, a + 4)[0]
                        elif atype == NFQA_PAYLOAD:
                            plen = alen - 4
                            length = be16(buf, a + 6)[0] if plen >= 4 and buf[a + 4] >> 4 == 4 else plen
                        elif atype == NFQA_CAP_LEN:
                            cap_len = be32(buf, a + 4)[0]
                        elif atype == NFQA_TIMESTAMP and alen >= 20:
                            sec, usec = ts(buf, a + 4)
                            kt = sec + usec * 1e-6
                        a += (alen + 3) & ~3
                    append((qnum, pkt_id, length or cap_len, kt) if with_time
                           else (qnum, pkt_id, length or cap_len))
            elif mtype == NLMSG_ERROR:
                err = i32(buf, off + 16)[0]
                if err:
                    errors = (errors or []) + [-err]
            off += (mlen + 3) & ~3
        return pkts, errors

    return parse


# --- the socket -------------------------------------------------------------------------------------------------
class NfqSocket:
    """One NETLINK_NETFILTER socket, created in the caller's current network namespace (use `in_netns`)."""

    def __init__(self, rcvbuf: int = 8 << 20, sndbuf: int = 4 << 20):
        s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, NETLINK_NETFILTER)
        try:
            for opt, val in ((SO_RCVBUFFORCE, rcvbuf), (SO_SNDBUFFORCE, sndbuf)):
                try:
                    s.setsockopt(socket.SOL_SOCKET, opt, val)
                except OSError:  # not CAP_NET_ADMIN: take what the sysctl limit allows
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF if opt == SO_RCVBUFFORCE else socket.SO_SNDBUF,
                                 val)
            s.setsockopt(SOL_NETLINK, NETLINK_NO_ENOBUFS, 1)
            s.bind((0, 0))
            s.setblocking(False)
        except BaseException:
            s.close()
            raise
        self.sock = s
        self.fd = s.fileno()
        self.portid = s.getsockname()[0]
        self._seq = 0
        self.backlog: list[bytes] = []  # packet messages received while waiting for an ack

    def close(self) -> None:
        self.sock.close()

    def _request(self, build: Callable[[int], bytes]) -> None:
        """Send one config request and wait (blocking, 5 s) for its ack; raise NetlinkError on a negative ack.
        Packet messages that arrive meanwhile are kept in `backlog` for the caller's loop."""
        self._seq += 1
        seq = self._seq
        self.sock.settimeout(5.0)
        try:
            self.sock.send(build(seq))
            while True:
                data = self.sock.recv(1 << 16)
                off = 0
                while off + 16 <= len(data):
                    mlen, mtype, _flags, mseq, _pid = _NLMSGHDR.unpack_from(data, off)
                    if mlen < 16:
                        break
                    if mtype == NLMSG_ERROR and mseq == seq:
                        err = struct.unpack_from("=i", data, off + 16)[0]
                        if err:
                            raise NetlinkError(-err, os.strerror(-err))
                        return
                    if mtype == MSG_PACKET:
                        self.backlog.append(bytes(data[off:off + mlen]))
                    off += (mlen + 3) & ~3
        finally:
            self.sock.setblocking(False)

    def bind_queue(self, queue_num: int, copy_range: int = 64, maxlen: int = 65536) -> None:
        try:
            self._request(lambda seq: config_bind(queue_num, seq, copy_range, maxlen))
        except NetlinkError as e:
            why = "already bound by another process" if e.errno == errno.EBUSY else e.strerror
            raise NetlinkError(e.errno, f"cannot bind NFQUEUE {queue_num}: {why}") from None

    def unbind_queue(self, queue_num: int) -> None:
        self._request(lambda seq: config_unbind(queue_num, seq))


# --- kernel counters -------------------------------------------------------------------------------------------
def open_queue_stats() -> int:
    """Open this namespace's /proc nfnetlink_queue file; the fd keeps reporting this namespace after setns back."""
    return os.open("/proc/thread-self/net/netfilter/nfnetlink_queue", os.O_RDONLY | os.O_CLOEXEC)


def read_queue_stats(fd: int) -> dict[int, dict[str, int]]:
    """queue_num -> {portid, total (held now), dropped (kernel queue full), user_dropped (socket full)}."""
    chunks = []
    off = 0
    while True:
        b = os.pread(fd, 1 << 16, off)
        if not b:
            break
        chunks.append(b)
        off += len(b)
    out = {}
    for line in b"".join(chunks).decode().splitlines():
        f = line.split()
        if len(f) < 7:
            continue
        out[int(f[0])] = {"portid": int(f[1]), "total": int(f[2]), "dropped": int(f[5]), "user_dropped": int(f[6])}
    return out
