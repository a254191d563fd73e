"""A small multicast sender/receiver run inside members' namespaces by `orchestrator probe --group` and the tests
(never the protocol node). It does what `member_endpoints` tells a node to do.

    python -m orchestrator.mcast.mcprobe recv GROUP PORT JOIN_IF SOURCE IDLE_S
        binds GROUP:PORT, joins GROUP on JOIN_IF, prints "ready", counts datagrams until IDLE_S pass without one
        (60 s for the first), ignoring its own (source SOURCE); prints one JSON line: per sequence number the
        copies received, and the one-way delay of each first copy: the kernel's receive timestamp (SO_TIMESTAMPNS,
        taken when the datagram reaches the member's interface, so a receiver woken late on a busy machine does not
        add to it) less the sender's wall clock stamp; all namespaces of a machine share the clock.
    python -m orchestrator.mcast.mcprobe send GROUP PORT SEND_IF TTL SOURCE COUNT SIZE GAP_S
        sends COUNT datagrams of SIZE bytes (UDP payload) GAP_S apart from SOURCE through SEND_IF.
"""
from __future__ import annotations

import json
import socket
import struct
import sys
import time

HEADER = struct.Struct("!Id")          # sequence number, send time (time.time())
IP_UDP = 28                            # header bytes of a datagram on the wire (IPv4 + UDP)
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)   # Linux; Python's socket module does not name it
TIMESPEC = struct.Struct("@qq")        # struct timespec on 64-bit Linux: tv_sec, tv_nsec


def _mreqn(group: str, ifname: str) -> bytes:
    # struct ip_mreqn { in_addr multiaddr; in_addr address; int ifindex; }
    return socket.inet_aton(group) + socket.inet_aton("0.0.0.0") + struct.pack("=i", socket.if_nametoindex(ifname))


def kernel_stamp(ancillary: list) -> float:
    """The receive time the kernel attached (SO_TIMESTAMPNS), else now."""
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= TIMESPEC.size:
            sec, nsec = TIMESPEC.unpack_from(data)
            return sec + nsec / 1e9
    return time.time()


def recv(group: str, port: int, join_if: str, source: str, idle_s: float) -> dict:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    s.bind((group, port))
    s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, _mreqn(group, join_if))
    print("ready", flush=True)
    copies: dict[int, int] = {}
    delay: dict[int, float] = {}
    s.settimeout(60)
    while True:
        try:
            data, anc, _, (src, _) = s.recvmsg(65535, socket.CMSG_SPACE(TIMESPEC.size))
        except socket.timeout:
            break
        now = kernel_stamp(anc)
        s.settimeout(idle_s)
        if src == source or len(data) < HEADER.size:
            continue
        seq, sent = HEADER.unpack_from(data)
        copies[seq] = copies.get(seq, 0) + 1
        if seq not in delay:
            delay[seq] = now - sent
    return {"copies": {str(k): v for k, v in sorted(copies.items())},
            "delay_s": [delay[k] for k in sorted(delay)]}


def send(group: str, port: int, send_if: str, ttl: int, source: str, count: int, size: int, gap: float) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((source, 0))
    s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, _mreqn("0.0.0.0", send_if))
    s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, ttl)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)   # the kernel forwards the looped copy
    pad = b"\0" * max(0, size - HEADER.size)
    t = time.monotonic()
    for seq in range(count):
        if gap:
            t += gap
            while (left := t - time.monotonic()) > 0:
                time.sleep(left)
        s.sendto(HEADER.pack(seq, time.time()) + pad, (group, port))


def main(argv: list[str]) -> int:
    if argv[:1] == ["recv"] and len(argv) == 6:
        print(json.dumps(recv(argv[1], int(argv[2]), argv[3], argv[4], float(argv[5]))), flush=True)
        return 0
    if argv[:1] == ["send"] and len(argv) == 9:
        send(argv[1], int(argv[2]), argv[3], int(argv[4]), argv[5], int(argv[6]), int(argv[7]), float(argv[8]))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
