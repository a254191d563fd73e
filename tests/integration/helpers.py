"""Helpers for integration tests: labs that always come down, and small UDP tools run inside nodes."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from orchestrator import lab as labmod
from orchestrator.backends.registry import get_backend
from orchestrator.backends.netns import NETNS_DIR
from orchestrator.state import load_state

REPO = Path(__file__).resolve().parents[2]
ORCH = [sys.executable, "-m", "orchestrator.cli"]

# The fidelity probe's UDP train tool (orchestrator/udpprobe.py), run inside nodes.
UDP_TOOL = [sys.executable, "-m", "orchestrator.udpprobe"]


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
    sink = in_node(state, dst, [*UDP_TOOL, "sink", "9000", str(idle)], stdout=subprocess.PIPE,
                   stderr=subprocess.PIPE, text=True)
    try:
        assert sink.stdout.readline().strip() == "ready"
        r = run_in_node(state, src, [*UDP_TOOL, "source", plan.node(dst).address, "9000", str(count),
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
    """Run the orchestrator as a user would. If it overruns `timeout` or the test is interrupted (Ctrl-C), it is
    stopped the way a user stops it — SIGTERM, so that a run tears its lab down — and killed only if that does
    not end it within two minutes (subprocess.run's SIGKILL would leave the lab, its nodes and captures up)."""
    env = {**os.environ, **(env_extra or {})}
    argv = [*ORCH, *args]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                          env=env) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except BaseException:
            proc.terminate()
            try:
                proc.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
            raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def event_lines(f: Path) -> list[dict]:
    """The events of one event log (JSON lines). A member killed mid-write (a crash is SIGKILL) leaves a torn last
    line without its newline: skipped, as the analysis skips it; any other line that does not parse fails."""
    *whole, last = f.read_text().split("\n")          # `last`: "" when the file ends with its newline
    out = [json.loads(x) for x in whole if x.strip()]
    try:
        out.append(json.loads(last))
    except json.JSONDecodeError:
        pass
    return out


# A measured delay (an RTT or one-way median) against the configured one. What the delay line guarantees is that it
# never releases early and that its own lateness is small (its hold error, asserted from its stats where a test
# reads them); the rest of the measured path (the sender's and receiver's wake-ups) is the machine's, and a busy
# machine stretches it: medians 1.03-2.35 ms late were measured on 2026-11-28 with the other core busy or the
# machine loaded, where 1 ms was allowed. Early: 1 ms (the ping's clock); late: 3 ms, still far below every change
# of configuration these tests tell apart (10 ms or more).
EARLY_S, LATE_S = 0.001, 0.003


def near(measured: float, expected: float) -> bool:
    return expected - EARLY_S <= measured <= expected + LATE_S


def typical(samples: list[float]) -> float:
    """The lower quartile of delays measured through the lab, the value `near` judges. A loaded machine only adds
    to a sample (the kernel's softirq work goes to ksoftirqd, which competes with the load at normal priority):
    on 2026-11-28 a loaded full run measured pings through 5 ms that took 5.4-11.8 ms, median 9.0 ms, the delay
    line's hold error staying small. A delay line late or early by more than the bounds moves this quartile as it
    moves the median; the machine's stretch does not, until it holds most samples."""
    ordered = sorted(samples)
    return ordered[(len(ordered) - 1) // 4]


def runs_together(calls: dict[str, tuple], tmp: Path) -> dict[str, Future]:
    """key -> a Future of `fn(*args, tmp / key)` for each `calls[key] = (fn, *args)`, all started at once (each in
    its own directory); returns when all have ended, so that a failed run fails only the test that reads it."""
    for k in calls:
        (tmp / k).mkdir()
    with ThreadPoolExecutor(len(calls)) as pool:
        futures = {k: pool.submit(fn, *args, tmp / k) for k, (fn, *args) in calls.items()}
        for f in futures.values():
            f.exception()
    return futures
