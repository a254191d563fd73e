"""Helpers for integration tests: labs that always come down, and small UDP tools run inside nodes."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from contextlib import contextmanager
from pathlib import Path

from orchestrator import lab as labmod
from orchestrator.backends.base import get_backend
from orchestrator.backends.netns import NETNS_DIR
from orchestrator.state import load_state

REPO = Path(__file__).resolve().parents[2]
ORCH = [sys.executable, "-m", "orchestrator.cli"]

# Receiver: count datagrams until `count` arrived or `idle_s` passed without any; print arrival times as JSON.
UDP_SINK = r"""
import json, socket, sys, time
port, idle = int(sys.argv[1]), float(sys.argv[2])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("0.0.0.0", port))
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
print("ready", flush=True)
times, sizes = [], []
s.settimeout(30)
while True:
    try:
        data = s.recv(65535)
    except socket.timeout:
        break
    times.append(time.monotonic()); sizes.append(len(data))
    s.settimeout(idle)
print(json.dumps({"times": times, "sizes": sizes}))
"""

# Sender: `count` datagrams of `size` bytes to host:port, `gap` seconds apart (0: as fast as possible).
UDP_SOURCE = r"""
import socket, sys, time
host, port, count, size, gap = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
payload = b"x" * size
t = time.monotonic()
for i in range(count):
    try:
        s.sendto(payload, (host, port))
    except PermissionError:   # dropped by a netfilter rule on this host's own egress: that is loss
        pass
    if gap:
        t += gap
        time.sleep(max(0.0, t - time.monotonic()))
"""


def unique_lab(prefix: str = "t") -> str:
    return f"{prefix}{uuid.uuid4().hex[:6]}"


def lab_namespaces(lab: str) -> list[str]:
    if not NETNS_DIR.is_dir():
        return []
    return [p.name for p in NETNS_DIR.iterdir() if p.name.startswith(lab + "-")]


@contextmanager
def running_lab(experiment_text: str, tmp_path: Path, shaper: str = "auto", name: str | None = None):
    """Bring a lab up from YAML text; always tear it down and check nothing of it is left."""
    lab = name or unique_lab()
    f = tmp_path / f"{lab}.yaml"
    f.write_text(experiment_text)
    prep = labmod.prepare(f, lab)
    state = labmod.up(prep, "mininet", shaper, experiment_path=str(f))
    try:
        yield state, prep.plan
    finally:
        labmod.teardown(lab)
        assert lab_namespaces(lab) == [], "namespaces outlived the lab"


def in_node(state, node: str, argv: list[str], **kw) -> subprocess.Popen:
    return get_backend(state.backend).popen(state, node, argv, **kw)


def run_in_node(state, node: str, argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    p = in_node(state, node, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, errs = p.communicate(timeout=timeout)
    return subprocess.CompletedProcess(argv, p.returncode, out, errs)


def udp_transfer(state, plan, src: str, dst: str, count: int, size: int, gap: float, idle: float = 2.0) -> dict:
    """Send `count` datagrams from src to dst; return the receiver's arrival times and sizes."""
    sink = in_node(state, dst, [sys.executable, "-c", UDP_SINK, "9000", str(idle)], stdout=subprocess.PIPE,
                   stderr=subprocess.PIPE, text=True)
    try:
        assert sink.stdout.readline().strip() == "ready"
        r = run_in_node(state, src, [sys.executable, "-c", UDP_SOURCE, plan.node(dst).address, "9000", str(count),
                                     str(size), str(gap)])
        assert r.returncode == 0, r.stderr
        out, errs = sink.communicate(timeout=120)
        assert sink.returncode == 0, errs
        return json.loads(out.strip().splitlines()[-1])
    finally:
        if sink.poll() is None:
            sink.kill()
            sink.wait()


def state_of(lab: str):
    return load_state(lab)


def cli(*args: str, env_extra: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run([*ORCH, *args], capture_output=True, text=True, cwd=REPO, env=env, timeout=timeout)
