"""Helpers for integration tests: labs that always come down, and small UDP tools run inside nodes."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from orchestrator import lab as labmod
from orchestrator.backends.registry import get_backend
from orchestrator.backends.netns import NETNS_DIR
from orchestrator.mcast.probe import lower_quartile
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
    return lower_quartile(samples)


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


# Timestamped UDP flows (one-way delays: CLOCK_MONOTONIC is one clock for every namespace of a machine, or a VM).
UDP_TIMED_RECEIVER = textwrap.dedent("""
    import json, socket, struct, sys, time
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
    s.bind(("0.0.0.0", int(sys.argv[3]) if len(sys.argv) > 3 else 9999))
    kernel = sys.argv[4:5] == ["kernel"]     # the kernel's receive stamp (SO_TIMESTAMPNS, CLOCK_REALTIME)
    if kernel:
        from orchestrator.mcast.mcprobe import SO_TIMESTAMPNS, kernel_stamp
        s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    print("bound", flush=True)
    idle, total = float(sys.argv[1]), float(sys.argv[2])
    out, t0, last = [], time.monotonic(), None
    s.settimeout(0.05)
    while time.monotonic() - t0 < total and (last is None or time.monotonic() - last < idle):
        try:
            data, anc, _, _ = s.recvmsg(2048, 64)
        except socket.timeout:
            continue
        last = at = time.monotonic()
        if kernel:
            at = kernel_stamp(anc) - (time.time() - time.monotonic())   # to CLOCK_MONOTONIC
        seq, ts = struct.unpack_from("!Id", data)
        out.append((seq, at - ts))  # CLOCK_MONOTONIC is one clock for every namespace
    print(json.dumps(out), flush=True)
""")

UDP_PACED_SENDER = textwrap.dedent("""
    import socket, struct, sys, time
    dst, n, gap = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    host, port = (dst.split(":")[0], int(dst.split(":")[1])) if ":" in dst else (dst, 9999)
    # optional: the first send's CLOCK_MONOTONIC time, and offsets (s) added to the sends in turn
    t0 = float(sys.argv[4]) if len(sys.argv) > 4 else time.monotonic()
    offsets = [float(x) for x in sys.argv[5].split(",")] if len(sys.argv) > 5 else [0.0]
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    pad = b"x" * 60
    for i in range(n):
        d = t0 + i * gap + offsets[i % len(offsets)] - time.monotonic()
        if d > 0:
            time.sleep(d)
        s.sendto(struct.pack("!Id", i, time.monotonic()) + pad, (host, port))
""")


def quantiles_within_noise(measured: list[float], noise: list[float], ppf, levels: tuple[float, ...],
                           early: float, z: float = 4.0) -> list[str]:
    """Which sample quantiles of `measured` (a drawn delay X with inverse CDF `ppf`, plus the path's noise N >= 0)
    fall outside what X allows, given `noise`: N sampled at the same moments on an unjittered reference flow.
    Below: the shaper is never early by more than `early` (the delay line's arrival stamp and its release may
    each be one timer advance early; netem's hrtimer is not early), so q_M(p) >= ppf(p - z sd) - early at every
    level. Above,
    distribution-free:
    P(X + N > x + n) <= P(X > x) + P(N > n); of the budget b = 1 - p - z sd left to the two, three quarters go to X
    (x = ppf(1 - 3b/4)) and a quarter to N (n = the reference's 1 - b/8 quantile, if its sampling error z sd is
    within b/8; else the level has no upper bound). A busy machine widens the upper bound by the noise it adds."""
    m, nz = sorted(measured), sorted(noise)
    q = lambda xs, p: xs[min(len(xs) - 1, max(0, int(p * (len(xs) - 1))))]  # noqa: E731
    sd = lambda p, k: math.sqrt(p * (1 - p) / k)  # noqa: E731
    bad = []
    for p in levels:
        lo = ppf(max(1e-5, p - z * sd(p, len(m)))) - early
        b = 1 - p - z * sd(p, len(m))
        r = 1 - b / 8
        hi = ppf(1 - 3 * b / 4) + max(q(nz, r), 0.0) if b > 0 and z * sd(r, len(nz)) <= b / 8 else math.inf
        if not lo <= q(m, p) <= hi:
            bad.append(f"p{p * 100:g} {q(m, p) * 1e3:.2f} ms outside [{lo * 1e3:.2f}, {hi * 1e3:.2f}]")
    return bad


def lab_timed_flows(state, plan, flows: list[tuple[str, str, int, float]], idle: float = 1.5,
                    kernel_stamps: bool = False) -> list[list]:
    """All at once, each flow (src, dst, n, gap): n timestamped UDP datagrams src -> dst every `gap` s (each flow to
    its own port); returns, per flow, [(seq, one-way delay s)] in arrival order. `kernel_stamps`: the arrival is the
    kernel's receive stamp (as the multicast probe's), not the moment the receiver read the datagram."""
    total = max(n * gap for *_, n, gap in flows) + 30
    rxs = [in_node(state, dst, [sys.executable, "-c", UDP_TIMED_RECEIVER, str(idle), str(total), str(9100 + i),
                                *(["kernel"] if kernel_stamps else [])],
                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
           for i, (_, dst, _, _) in enumerate(flows)]
    try:
        for rx in rxs:
            assert rx.stdout.readline().strip() == "bound", rx.stderr.read()
        txs = [in_node(state, src, [sys.executable, "-c", UDP_PACED_SENDER, f"{plan.node(dst).address}:{9100 + i}",
                                    str(n), str(gap)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for i, (src, dst, n, gap) in enumerate(flows)]
        for tx in txs:
            _, err = tx.communicate(timeout=total + 10)
            assert tx.returncode == 0, err
        return [[tuple(x) for x in json.loads(rx.communicate(timeout=total + 10)[0])] for rx in rxs]
    finally:
        for rx in rxs:
            if rx.poll() is None:
                rx.kill()
                rx.wait()


def fidelity_row(parameter: str, configured: str, measured: str, tolerance: str, ok: bool) -> bool:
    """One row of a measured link-fidelity table: appended as a JSON line to the file $FIDELITY_TABLE names (`make
    test-netem` sets it; benchmarks/fidelity_table.py renders the table), printed always. Returns `ok`, for the
    assertion that follows."""
    row = {"parameter": parameter, "configured": configured, "measured": measured, "tolerance": tolerance,
           "pass": bool(ok), "kernel": os.uname().release, "test": os.environ.get("PYTEST_CURRENT_TEST", "")}
    print(f"fidelity: {parameter}: configured {configured}; measured {measured}; tolerance {tolerance}; "
          f"{'pass' if ok else 'FAIL'}")
    path = os.environ.get("FIDELITY_TABLE")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(row) + "\n")
    return ok


# The VM's timers. netem holds a packet until its time; the VM (QEMU without KVM) fires that timer late, and more so
# when the host is busy (docs/netem.md: one-way paths 0.9-2.0 ms late in docs/results/netem/fidelity.md). So a delay
# measured through netem here is judged by its lower quartile (helpers.typical): never under the formula by more
# than 0.5 ms (the stamps; netem is never early), over it by at most 3 % + 2 ms per link traversal.
def vm_allows(samples_ms: list[float], expected_ms: float, traversals: int) -> bool:
    t = typical(samples_ms)
    return expected_ms - 0.5 <= t <= expected_ms * 1.03 + 2.0 * traversals


VM_TOLERANCE = "lower quartile -0.5 ms .. +3 % + 2 ms per link traversal (the VM's timers)"
