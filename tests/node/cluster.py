"""In-process clusters of real node runtimes on loopback UDP (no root), and reading their event logs."""
from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path

from gossipnode.config import NodeConfig
from gossipnode.runtime import NodeRuntime

from .gsgc_sim import make_configs


def bind_loopback(n: int) -> list[socket.socket]:
    socks = []
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    return socks


def cluster(tmp_path: Path, n: int, **kw) -> tuple[list[NodeConfig], list[NodeRuntime]]:
    socks = bind_loopback(n)
    (tmp_path / "ctl").mkdir(exist_ok=True)
    cfgs = make_configs(n, ports=[s.getsockname()[1] for s in socks], log_dir=tmp_path / "events",
                        control_dir=tmp_path / "ctl", **kw)
    return cfgs, [NodeRuntime(cfg, sock) for cfg, sock in zip(cfgs, socks)]


async def run_all(runtimes: list[NodeRuntime], *others) -> list[str]:
    """Run every runtime (each stops by itself after duration_s) alongside other coroutines."""
    results = await asyncio.gather(*(r.run() for r in runtimes), *others)
    return list(results[: len(runtimes)])


def events(cfg: NodeConfig) -> list[dict]:
    return [json.loads(line) for line in cfg.event_log.read_text().splitlines()]
