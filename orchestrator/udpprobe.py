"""A tiny UDP train tool run inside nodes by the fidelity probe (and the integration tests).

    python -m orchestrator.udpprobe sink PORT IDLE_S [COUNT]  prints "ready", then one JSON line of arrivals
    python -m orchestrator.udpprobe source HOST PORT COUNT SIZE GAP_S

The sink counts datagrams until IDLE_S pass without one (30 s for the first), or until COUNT arrived (the train's
length: only a train that lost packets waits IDLE_S), and prints their arrival times (monotonic) and sizes. The source sends COUNT datagrams of SIZE bytes, GAP_S apart (0: back to back). A train sent
back to back through a bottleneck arrives spaced by the bottleneck's serialisation time: the receiver's
bytes / time is the link rate (packet-train capacity estimate).
"""
from __future__ import annotations

import json
import socket
import sys
import time


def sink(port: int, idle_s: float, count: int | None = None) -> dict:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    s.bind(("0.0.0.0", port))
    print("ready", flush=True)
    times: list[float] = []
    sizes: list[int] = []
    s.settimeout(30)
    while True:
        try:
            data = s.recv(65535)
        except socket.timeout:
            break
        times.append(time.monotonic())
        sizes.append(len(data))
        if count is not None and len(times) >= count:
            break
        s.settimeout(idle_s)
    return {"times": times, "sizes": sizes}


def source(host: str, port: int, count: int, size: int, gap_s: float) -> int:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    payload = b"x" * size
    sent = 0
    t = time.monotonic()
    for _ in range(count):
        try:
            s.sendto(payload, (host, port))
            sent += 1
        except PermissionError:   # dropped by a netfilter rule on this host's own egress: that is loss
            pass
        if gap_s:
            t += gap_s
            time.sleep(max(0.0, t - time.monotonic()))
    return sent


def main(argv: list[str]) -> int:
    if argv[:1] == ["sink"] and len(argv) in (3, 4):
        print(json.dumps(sink(int(argv[1]), float(argv[2]), int(argv[3]) if len(argv) == 4 else None)), flush=True)
        return 0
    if argv[:1] == ["source"] and len(argv) == 6:
        source(argv[1], int(argv[2]), int(argv[3]), int(argv[4]), float(argv[5]))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
