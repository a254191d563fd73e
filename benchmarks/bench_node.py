"""How many messages per second one node process can handle: encode + decode + protocol step.

Runs whole groups of GSGC cores in one process over an in-memory network (no sockets, zero latency, no loss),
timing the node's own work per message: encoding what it sends, decoding what it receives and the core's
receive; timer steps are timed too and counted in the total. One process handling all members does the same
work per message as one member's process would, so messages/s is the capacity of one node process (minus the
asyncio/UDP overhead, which the `udp` row adds, measured on loopback).

    python benchmarks/bench_node.py [--quick] [--json FILE]
"""
from __future__ import annotations

import argparse
import asyncio
import heapq
import json
import socket
import sys
import time
from collections import Counter, deque
from dataclasses import dataclass
from pathlib import Path
from tempfile import TemporaryDirectory

from gossipnode import wire
from gossipnode.config import NodeConfig
from gossipnode.protocols.gsgc import wire as gsgc_wire
from gossipnode.protocols.gsgc.core import GsgcNode
from gossipnode.runtime import NodeRuntime


@dataclass(frozen=True)
class Scenario:
    name: str
    n: int
    subgroup: int
    senders: int
    fail_k: int | None
    rate_per_s: float  # data messages per second per sender (0: no data)
    steps: int  # simulated steps of 1 s


SCENARIOS = [
    Scenario("dense-200, 2 senders, FD on", 200, 3, 2, 20, 0.0, 20),
    Scenario("paper: 200 members, 50 senders, no FD", 200, 3, 50, None, 0.0, 20),
    Scenario("1000 members, 5 senders, FD on", 1000, 3, 5, 30, 0.0, 8),
    Scenario("50 members, 2 senders x 10 msg/s data", 50, 2, 2, 20, 10.0, 20),
]


def configs(s: Scenario, tmp: Path) -> list[NodeConfig]:
    members = [{"id": i, "name": f"m{i}", "addr": f"127.0.0.1:{20000 + i}"} for i in range(s.n)]
    common = {
        "members": members,
        "protocol": {"name": "gsgc", "subgroup": s.subgroup, "step_s": 1.0, "fail_k": s.fail_k},
        "senders": list(range(s.senders)),
        "workload": {"rate_per_s": s.rate_per_s or 1.0, "size_bytes": 64, "stop_s": None if s.rate_per_s else 1e-3},
        "event_log": str(tmp / "unused.jsonl"),
    }
    first = NodeConfig.model_validate({**common, "name": "m0", "id": 0, "listen": members[0]["addr"]})
    return [first.model_copy(update={"name": f"m{i}", "id": i, "listen": members[i]["addr"]}) for i in range(s.n)]


def run_scenario(s: Scenario, tmp: Path) -> dict:
    nodes = [GsgcNode(cfg, 0.0) for cfg in configs(s, tmp)]
    timers = [(node.next_wakeup(), i) for i, node in enumerate(nodes)]
    heapq.heapify(timers)
    inbox: deque[tuple[int, bytes]] = deque()
    per_type: Counter[str] = Counter()
    seconds: Counter[str] = Counter()
    sizes: Counter[str] = Counter()
    clock = time.perf_counter

    def send(out) -> None:
        encoded: dict[int, bytes] = {}
        for dest, msg in out.send:
            data = encoded.get(id(msg))
            if data is None:
                t0 = clock()
                data = encoded[id(msg)] = wire.encode(msg)
                seconds[msg.type.name] += clock() - t0
            inbox.append((dest, data))

    while timers[0][0] < s.steps:
        now, i = heapq.heappop(timers)
        t0 = clock()
        out = nodes[i].tick(now)
        seconds["(timer steps)"] += clock() - t0
        send(out)
        heapq.heappush(timers, (nodes[i].next_wakeup(), i))
        while inbox:
            dest, data = inbox.popleft()
            t0 = clock()
            msg = wire.decode(data)
            out = nodes[dest].receive(msg, now)
            seconds[msg.type.name] += clock() - t0
            per_type[msg.type.name] += 1
            sizes[msg.type.name] = len(data)
            send(out)
    total = sum(per_type.values())
    busy = sum(seconds.values())
    return {
        "scenario": s.name,
        "messages": total,
        "seconds": round(busy, 3),
        "msgs_per_s": round(total / busy),
        "per_type": {t: {"count": c, "msgs_per_s": round(c / seconds[t]), "bytes": sizes[t]}
                     for t, c in sorted(per_type.items())},
        "rounds": max(node.main.round for node in nodes),
    }


def blast_into(runtime, peer, node_sock, batch: list[bytes], settle_s: float = 0.2) -> float:
    """Run `runtime` and send it `batch` from `peer` over loopback in windows of 100 packets, the next window when
    the node has read the last (no socket drops); stop the runtime; the seconds from the first send to the last
    read. Shared with bench_qsm.py."""
    packets = len(batch)

    async def blast() -> float:
        await asyncio.sleep(settle_s)
        start = time.perf_counter()
        for first in range(0, packets, 100):
            for data in batch[first : first + 100]:
                peer.sendto(data, node_sock.getsockname())
            while runtime.counters["packets_in"] < min(first + 100, packets):
                await asyncio.sleep(0)
        elapsed = time.perf_counter() - start
        runtime.stop("done")
        return elapsed

    async def main() -> float:
        _, elapsed = await asyncio.gather(runtime.run(), blast())
        return elapsed

    return asyncio.run(main())


def run_udp(tmp: Path, packets: int) -> dict:
    """One NodeRuntime on loopback fed GOSSIP packets from a peer socket in the same event loop; messages/s
    through asyncio + UDP (the sending side's cost is included, so this is a lower bound)."""
    peer = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    peer.bind(("127.0.0.1", 0))
    node_sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    node_sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
    node_sock.bind(("127.0.0.1", 0))
    addrs = [f"127.0.0.1:{node_sock.getsockname()[1]}", f"127.0.0.1:{peer.getsockname()[1]}"]
    members = [{"id": i, "name": f"m{i}", "addr": a} for i, a in enumerate(addrs)]
    cfg = NodeConfig.model_validate({"name": "m0", "id": 0, "listen": addrs[0], "members": members,
                                     "protocol": {"name": "gsgc", "subgroup": 1, "step_s": 3600.0}, "event_log": str(tmp / "udp.jsonl")})
    runtime = NodeRuntime(cfg, node_sock)
    batch = [wire.encode(gsgc_wire.Message(gsgc_wire.MsgType.GOSSIP, 1, k, 0, gsgc_wire.Gossip((), (), 0b10, 2)))
             for k in range(packets)]

    elapsed = blast_into(runtime, peer, node_sock, batch, settle_s=0.2)
    peer.close()
    handled = runtime.counters["packets_in"]
    return {"scenario": "udp: one runtime, GOSSIP over loopback", "messages": handled,
            "seconds": round(elapsed, 3), "msgs_per_s": round(handled / elapsed)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps (a smoke run)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    results = []
    with TemporaryDirectory() as tmp:
        for s in SCENARIOS:
            if args.quick:
                s = Scenario(s.name, s.n, s.subgroup, s.senders, s.fail_k, s.rate_per_s, max(2, s.steps // 5))
            r = run_scenario(s, Path(tmp))
            results.append(r)
            print(f"{r['scenario']:<45} {r['messages']:>8} msgs {r['seconds']:>7.2f} s  {r['msgs_per_s']:>8} msgs/s"
                  f"  ({r['rounds']} rounds)")
            for t, v in r["per_type"].items():
                print(f"    {t:<10} {v['count']:>8} x {v['bytes']:>5} B  {v['msgs_per_s']:>8} msgs/s")
        r = run_udp(Path(tmp), 5000 if args.quick else 50000)
        results.append(r)
        print(f"{r['scenario']:<45} {r['messages']:>8} msgs {r['seconds']:>7.2f} s  {r['msgs_per_s']:>8} msgs/s")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
