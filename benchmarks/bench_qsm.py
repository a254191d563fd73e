"""The ceiling of one QSM node process on this machine: QSM DATA packets per second one node sends and one node
receives (the whole runtime: asyncio, UDP, the wire codec, the QSM core, the JSONL event log), printed beside
their floor measured in the same run — a bare Python UDP socket's send and receive rate on loopback with the
same 100-byte datagrams (no asyncio, no decoding, no event log).

- **send**: one QSM sender runtime (rate control off, a workload of 100 000/s: its timer sends one packet per
  firing and skips the steps it missed, as in a run) for `--seconds`; its `sent_data` counter over the time.
- **receive**: one QSM receiver runtime (member of the sender's group; the token interval 1 h, so no token
  traffic) fed DATA packets from a socket bound to the sender's address, in windows of 100: the next window goes
  out when the runtime has read the last (no socket drops); it logs `data_received` for each, as in a run.
- **floor send / receive**: `sendto` in a loop; windows of 1000 datagrams sent and then read (`recv`) in one
  thread — like the QSM receive measurement, whose feeding socket lives in the same process, the send is counted.

Transport `udp` with one receiver: one unicast datagram per packet, as one IP multicast datagram per region is.
The lab's own costs (the delay line's per packet-hop, docs/benchmarks.md) come on top and are not measured here.

    python benchmarks/bench_qsm.py [--seconds 3] [--packets 20000] [--json FILE]

In the lab the members share the machine's cores with each other (and here with other sessions' work), so a run's
rate says as much about the load as about QSM. `--watch PREFIX --log FILE` measures what a run's node processes
really used: once a second it writes `unix-time pid cpu-seconds run-dir` for every node process
(`python -m gossipnode --config RUN/configs/M.json`) whose run directory starts with PREFIX (user + system time
from /proc/PID/stat); analysis/figures_qsm.py `--cpu FILE` turns that into CPU microseconds per packet receipt —
the ceiling measured in situ, independent of the load (a process's last second may be missed: the members are idle
for the 8 s after the sending stops).

    python benchmarks/bench_qsm.py --watch /tmp/h7/ --log /tmp/h7/cpu.log &
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
import time
from pathlib import Path
from tempfile import TemporaryDirectory

from gossipnode import wire
from gossipnode.config import NodeConfig
from gossipnode.protocols.qsm.wire import Data
from gossipnode.runtime import NodeRuntime

sys.path.insert(0, str(Path(__file__).parent))
from bench_node import blast_into  # noqa: E402  (the benchmarks are scripts side by side)

SIZE = 100                   # bytes of UDP payload per data packet (headers included), as topologies/qsm-fig9.yaml
PAYLOAD = SIZE - 24          # a QSM DATA message's headers are 24 bytes (22 before cf76e53: u16 indexes)


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def config(me: int, addrs: list[str], tmp: Path, *, sender: int, rate: float, duration: float | None) -> NodeConfig:
    members = [{"id": i, "name": f"m{i}", "addr": a} for i, a in enumerate(addrs)]
    return NodeConfig.model_validate({
        "name": f"m{me}", "id": me, "listen": addrs[me], "members": members,
        "protocol": {"name": "qsm", "transport": "udp", "groups": [{"name": "a", "members": "all"}],
                     "token_interval_s": 3600.0, "rate_control": False, "partition_size": 2},
        "senders": [sender], "workload": {"rate_per_s": rate, "size_bytes": SIZE},
        "event_log": str(tmp / f"m{me}.jsonl"), "duration_s": duration})


def udp_pair() -> tuple[socket.socket, socket.socket]:
    a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for s in (a, b):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
        s.bind(("127.0.0.1", 0))
    return a, b


def floor_send(packets: int) -> float:
    a, b = udp_pair()
    data, dest = b"x" * SIZE, b.getsockname()
    b.setblocking(False)
    start = time.perf_counter()
    for k in range(packets):
        a.sendto(data, dest)
        if k % 1000 == 999:        # drain the receiver so the sends never fail on a full buffer
            try:
                while True:
                    b.recv(2048)
            except BlockingIOError:
                pass
    elapsed = time.perf_counter() - start
    a.close()
    b.close()
    return packets / elapsed


def floor_recv(packets: int) -> float:
    a, b = udp_pair()
    data, dest = b"x" * SIZE, b.getsockname()
    got = 0
    start = time.perf_counter()
    while got < packets:
        for _ in range(1000):
            a.sendto(data, dest)
        for _ in range(1000):
            b.recv(2048)
        got += 1000
    elapsed = time.perf_counter() - start
    a.close()
    b.close()
    return got / elapsed


def qsm_send(tmp: Path, seconds: float) -> dict:
    node_sock, drain = udp_pair()
    addrs = [f"127.0.0.1:{node_sock.getsockname()[1]}", f"127.0.0.1:{drain.getsockname()[1]}"]
    runtime = NodeRuntime(config(0, addrs, tmp, sender=0, rate=100000.0, duration=seconds), node_sock)
    drained = 0

    def on_readable() -> None:
        nonlocal drained
        try:
            while True:
                drain.recv(2048)
                drained += 1
        except BlockingIOError:
            pass

    async def main() -> float:
        drain.setblocking(False)
        asyncio.get_running_loop().add_reader(drain.fileno(), on_readable)
        start = time.perf_counter()
        await runtime.run()
        return time.perf_counter() - start

    elapsed = asyncio.run(main())
    drain.close()
    sent = runtime.core.counters["sent_data"] if runtime.core else 0
    return {"sent": sent, "seconds": round(elapsed, 3), "per_s": round(sent / elapsed), "drained": drained}


def qsm_recv(tmp: Path, packets: int) -> dict:
    node_sock, peer = udp_pair()
    addrs = [f"127.0.0.1:{node_sock.getsockname()[1]}", f"127.0.0.1:{peer.getsockname()[1]}"]
    runtime = NodeRuntime(config(0, addrs, tmp, sender=1, rate=1.0, duration=None), node_sock)
    batch = [wire.encode(Data(1, 0, k, 1, 0, k, b"x" * PAYLOAD)) for k in range(1, packets + 1)]
    assert len(batch[0]) == SIZE

    elapsed = blast_into(runtime, peer, node_sock, batch, settle_s=0.3)
    peer.close()
    got = runtime.counters["packets_in"]
    received = sum(1 for line in (tmp / "m0.jsonl").read_text().splitlines() if '"data_received"' in line)
    return {"packets": got, "logged": received, "seconds": round(elapsed, 3), "per_s": round(got / elapsed)}


def node_cpu(prefix: str) -> list[tuple[int, float, str]]:
    """(pid, cpu seconds, run dir) of every node process whose --config lies under `prefix`."""
    tick = os.sysconf("SC_CLK_TCK")
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            args = (d / "cmdline").read_bytes().split(b"\0")
            if b"gossipnode" not in args or b"--config" not in args:
                continue
            cfg = Path(args[args.index(b"--config") + 1].decode())
            if not str(cfg).startswith(prefix):
                continue
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            out.append((int(d.name), (int(fields[11]) + int(fields[12])) / tick, str(cfg.parent.parent)))
        except (OSError, IndexError, ValueError):
            continue            # gone meanwhile
    return out


def watch(prefix: str, log: Path, interval: float = 1.0) -> None:
    with log.open("a") as f:
        while True:
            now = time.time()
            for pid, cpu, run in node_cpu(prefix):
                f.write(f"{now:.1f} {pid} {cpu:.2f} {run}\n")
            f.flush()
            time.sleep(interval)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--watch", metavar="PREFIX", help="log the CPU time of the node processes of runs under "
                                                          "PREFIX (until killed)")
    parser.add_argument("--log", type=Path, default=Path("cpu.log"), help="--watch's output")
    parser.add_argument("--seconds", type=float, default=3.0, help="how long the QSM sender sends")
    parser.add_argument("--packets", type=int, default=20000, help="packets into the QSM receiver and the floors")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    if args.watch:
        watch(args.watch, args.log)
        return 0
    before = loadavg()
    with TemporaryDirectory() as tmp:
        fs = floor_send(args.packets)
        fr = floor_recv(args.packets)
        s = qsm_send(Path(tmp), args.seconds)
        r = qsm_recv(Path(tmp), args.packets)
    after = loadavg()
    print(f"load average before {before}, after {after} ({os.cpu_count()} cores)")
    print(f"{'':<44} {'packets/s':>10} {'floor/s':>10} {'x floor':>8}")
    print(f"{'QSM node sends (100 B DATA, one per timer)':<44} {s['per_s']:>10} {round(fs):>10} "
          f"{fs / s['per_s']:>7.1f}x   ({s['sent']} in {s['seconds']} s)")
    print(f"{'QSM node receives (decode, core, event log)':<44} {r['per_s']:>10} {round(fr):>10} "
          f"{fr / r['per_s']:>7.1f}x   ({r['packets']} in {r['seconds']} s, {r['logged']} data_received)")
    print(f"per packet: send {1e6 / s['per_s']:.1f} us (floor {1e6 / fs:.1f} us), "
          f"receive {1e6 / r['per_s']:.1f} us (floor {1e6 / fr:.1f} us)")
    if args.json:
        args.json.write_text(json.dumps({"load_before": before, "load_after": after, "cpus": os.cpu_count(),
                                         "size_bytes": SIZE, "send": s, "receive": r,
                                         "floor_send_per_s": round(fs), "floor_recv_per_s": round(fr)}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
