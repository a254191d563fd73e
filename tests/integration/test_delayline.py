"""The delay line against namespaces built here (prefix `dlt`), measured with ping and UDP against expectations
computed from the link parameters. Every namespace, veth and process is removed in the fixture's teardown.

The namespaces are prepared the way the orchestrator prepares a lab's (the Mininet backend's own functions:
`netns.write_sysctls(ns, NODE_SYSCTLS)`, `netns.disable_offloads` on every shaped egress, the rules of
`render_rules` through `netns.iptables_restore`, after READY); only the topologies are hand-made."""
from __future__ import annotations

import itertools
import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from orchestrator.backends import netns
from orchestrator.backends.mininet import NODE_SYSCTLS
from orchestrator.errors import DelayLineDied, OrchestratorError
from orchestrator.shaping.delayline import (
    DelayLineClient,
    QueueSpec,
    render_config,
    render_rules,
    start_delayline,
    stop_delayline,
)
from orchestrator.shaping.delayline.loop import ADVANCE_MAX_S
from orchestrator.shaping.params import L2_OVERHEAD_BYTES, DirParams, GilbertElliott

from .helpers import EARLY_S, UDP_PACED_SENDER, UDP_TIMED_RECEIVER, near, quantiles_within_noise, typical

_COUNTER = itertools.count()
# Measuring tools run real-time (below the delay line's 50), so that other load on a shared machine does not
# add scheduling delay to what they measure.
RT = ["chrt", "-f", "40"]


def _run(argv: list[str], input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(argv, input=input, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({r.returncode}): {r.stderr.strip()}")
    return r


class Lab:
    """Namespaces joined by veth pairs, plus the delay line serving them (with `engine`: c or python)."""

    def __init__(self, tmp: Path, engine: str = "python"):
        self.engine = engine
        self.tag = f"dlt{os.getpid() % 1000:03d}{next(_COUNTER)}"
        self.tmp = tmp
        self.namespaces: list[str] = []
        self.procs: list[subprocess.Popen] = []
        self.dl: subprocess.Popen | None = None
        self.client: DelayLineClient | None = None
        self.queues: list[QueueSpec] = []
        self.ifq: dict[str, list[tuple[str, int]]] = {}  # netns -> [(ifname, queue_num)]

    def ns(self, short: str) -> str:
        name = f"{self.tag}{short}"
        if name not in self.namespaces:
            _run(["ip", "netns", "add", name])
            self.namespaces.append(name)
            _run(["ip", "-n", name, "link", "set", "lo", "up"])
            netns.write_sysctls(name, NODE_SYSCTLS)   # as `up`: forwarding on, IPv6 off (only IPv4 is queued)
        return name

    def link(self, a: str, a_if: str, a_ip: str, b: str, b_if: str, b_ip: str) -> None:
        A, B = self.ns(a), self.ns(b)
        _run(["ip", "link", "add", a_if, "netns", A, "type", "veth", "peer", "name", b_if, "netns", B])
        for n, i, ip in ((A, a_if, a_ip), (B, b_if, b_ip)):
            _run(["ip", "-n", n, "addr", "add", f"{ip}/31", "dev", i])
            _run(["ip", "-n", n, "link", "set", i, "up"])

    def shape(self, qid: str, short: str, ifname: str, params: DirParams) -> QueueSpec:
        n = self.ns(short)
        netns.disable_offloads(n, [ifname])   # as `up` does for every shaped egress: one packet per wire packet
        qn = len(self.ifq.setdefault(n, []))
        self.ifq[n].append((ifname, qn))
        q = QueueSpec(id=qid, netns=f"/run/netns/{n}", queue_num=qn, params=params)
        self.queues.append(q)
        return q

    def start(self, extra_config: dict | None = None, rules: bool = True) -> None:
        cfg = render_config(self.queues, control=str(self.tmp / "dl.sock"), stats_file=str(self.tmp / "stats.json"),
                            engine=self.engine)
        cfg.update(extra_config or {})
        (self.tmp / "dl.json").write_text(json.dumps(cfg))
        self.dl = start_delayline(self.tmp / "dl.json", rt_priority=50)
        self.client = DelayLineClient(self.dl.control_path)
        if rules:
            self.apply_rules()

    def apply_rules(self) -> None:
        for n, qs in self.ifq.items():
            netns.iptables_restore(n, render_rules(qs))

    def remove_rules(self) -> None:
        """Not something the orchestrator does (its teardown deletes the namespaces, rules and all): here, to
        show that a namespace without the rules is normal again."""
        for n in self.ifq:
            _run(["ip", "netns", "exec", n, "iptables", "-w", "-t", "mangle", "-F"])   # FORWARD and OUTPUT

    def sh(self, short: str, argv: list[str], check: bool = True) -> subprocess.CompletedProcess:
        return _run(["ip", "netns", "exec", self.ns(short), *argv], check=check)

    def spawn(self, short: str, argv: list[str]) -> subprocess.Popen:
        p = subprocess.Popen(["ip", "netns", "exec", self.ns(short), *argv], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        self.procs.append(p)
        return p

    def ping(self, short: str, dst: str, count: int, interval: float, size: int = 56,
             wait: float = 2.0) -> tuple[int, list[float]]:
        """(received, per-reply RTTs in seconds)."""
        r = self.sh(short, RT + ["ping", "-n", "-c", str(count), "-i", str(interval), "-s", str(size), "-W", str(wait),
                            dst], check=False)
        m = re.search(r"(\d+) received", r.stdout)
        assert m, r.stdout + r.stderr
        return int(m.group(1)), [float(x) / 1000 for x in re.findall(r"time=([\d.]+) ms", r.stdout)]

    def teardown(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.communicate()
        if self.dl is not None:
            try:
                stop_delayline(self.dl, self.client, timeout=5)
            except Exception:  # noqa: BLE001 - teardown must go on
                self.dl.kill()
                self.dl.wait()
        if self.client:
            self.client.close()
        for n in self.namespaces:
            _run(["ip", "netns", "del", n], check=False)
        left = [n for n in _run(["ip", "netns", "list"]).stdout.split() if n.startswith(self.tag)]
        assert not left, f"namespaces left behind: {left}"
        assert self.dl is None or self.dl.poll() is not None


def _engines():
    from orchestrator.shaping.delayline import cengine
    return ["python", pytest.param("c", marks=pytest.mark.skipif(not cengine.available(),
                                                                 reason="the compiled engine is not built"))]


@pytest.fixture(params=_engines())
def lab(tmp_path, request):
    lb = Lab(tmp_path, request.param)
    try:
        yield lb
    finally:
        lb.teardown()


def chain(lab: Lab, params: DirParams) -> None:
    """a -- b -- c, b routes; every egress shaped with `params`. a is 10.9.0.0, c is 10.9.1.1."""
    lab.link("a", "eth0", "10.9.0.0", "b", "eth0", "10.9.0.1")
    lab.link("b", "eth1", "10.9.1.0", "c", "eth0", "10.9.1.1")
    lab.sh("a", ["ip", "route", "add", "default", "via", "10.9.0.1"])
    lab.sh("c", ["ip", "route", "add", "default", "via", "10.9.1.0"])
    lab.sh("b", ["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"])
    lab.shape("a>b", "a", "eth0", params)
    lab.shape("b>a", "b", "eth0", params)
    lab.shape("b>c", "b", "eth1", params)
    lab.shape("c>b", "c", "eth0", params)


def pair(lab: Lab, ab: DirParams, ba: DirParams | None = None) -> None:
    """a -- b (10.9.0.0 -- 10.9.0.1); a>b shaped with `ab`, b>a with `ba` when given."""
    lab.link("a", "eth0", "10.9.0.0", "b", "eth0", "10.9.0.1")
    lab.shape("a>b", "a", "eth0", ab)
    if ba is not None:
        lab.shape("b>a", "b", "eth0", ba)


UDP_RECEIVER = textwrap.dedent("""
    import socket, sys, time
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
    s.bind(("0.0.0.0", 9999))
    print("bound", flush=True)
    idle, total = float(sys.argv[1]), float(sys.argv[2])
    n, t0, last = 0, time.monotonic(), None
    s.settimeout(0.05)
    while time.monotonic() - t0 < total and (last is None or time.monotonic() - last < idle):
        try:
            s.recv(2048)
        except socket.timeout:
            continue
        n += 1
        last = time.monotonic()
    print(n, flush=True)
""")

UDP_SENDER = textwrap.dedent("""
    import socket, sys, time
    dst, n, payload = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    data = b"x" * payload
    t0 = time.monotonic()
    for _ in range(n):
        s.sendto(data, (dst, 9999))
    print(time.monotonic() - t0, flush=True)
""")


_TO = {"a": ("b", "10.9.0.1"), "b": ("a", "10.9.0.0")}     # sender -> (receiving namespace, its address)


def timed_flows(lab: Lab, flows: dict[str, tuple]) -> dict[str, list[tuple[int, float]]]:
    """All at once, for each sender ("a" or "b") -> (n, gap[, first send's CLOCK_MONOTONIC time[, offsets]]), the
    arguments of UDP_PACED_SENDER: n timestamped UDP datagrams to the other namespace every `gap` s; returns
    sender -> [(seq, one-way delay)] in arrival order."""
    total = max(f[0] * f[1] for f in flows.values()) + 20
    rxs = {src: lab.spawn(_TO[src][0], RT + [sys.executable, "-c", UDP_TIMED_RECEIVER, "1.0", str(total)])
           for src in flows}
    for rx in rxs.values():
        assert rx.stdout.readline().strip() == "bound"
    txs = [lab.spawn(src, RT + [sys.executable, "-c", UDP_PACED_SENDER, _TO[src][1], *map(str, f)])
           for src, f in flows.items()]
    for tx in txs:
        assert tx.wait(timeout=total + 10) == 0, tx.stderr.read()
    return {src: [tuple(x) for x in json.loads(rx.communicate(timeout=total + 10)[0])] for src, rx in rxs.items()}


def timed_flow(lab: Lab, n: int, gap: float) -> list[tuple[int, float]]:
    """n timestamped UDP datagrams a -> b every `gap` s; returns [(seq, one-way delay)] in arrival order."""
    return timed_flows(lab, {"a": (n, gap)})["a"]


def udp_receiver(lab: Lab, short: str, idle: float, total: float) -> subprocess.Popen:
    p = lab.spawn(short, RT + [sys.executable, "-c", UDP_RECEIVER, str(idle), str(total)])
    assert p.stdout.readline().strip() == "bound"
    return p


def udp_burst(lab: Lab, short: str, dst: str, n: int, ip_bytes: int) -> float:
    """Send n UDP datagrams of `ip_bytes` (IP header included) as fast as possible; return the burst's duration."""
    r = lab.sh(short, RT + [sys.executable, "-c", UDP_SENDER, dst, str(n), str(ip_bytes - 28)])
    return float(r.stdout.strip())


def consistent(st: dict) -> bool:
    return st["packets"] == st["accepted"] + st["lost"] + st["overflowed"] + st["cut_dropped"] + st["held"]


# ------------------------------------------------------------------------------------------------ on namespaces
@pytest.mark.root
def test_chain_rtt_5ms_per_direction(lab):
    chain(lab, DirParams(delay_s=0.005))
    lab.start()
    lab.ping("a", "10.9.1.1", 3, 0.05)  # ARP warm-up
    got, rtts = lab.ping("a", "10.9.1.1", 50, 0.02)
    med = typical(rtts)
    expected = 4 * 0.005  # a>b, b>c, c>b, b>a
    print(f"a<->c RTT lower quartile {med * 1e3:.3f} ms (expected {expected * 1e3:.1f}), n={got}")
    assert got == 50
    assert near(med, expected)
    st = lab.client.stats()
    assert st["kernel_drops"] == 0 and not st["fatal"]
    for qid in ("a>b", "b>c", "c>b", "b>a"):
        q = st["queues"][qid]
        assert q["packets"] >= 53 and consistent(q)
        assert q["hold_error"]["count"] >= 53 and q["hold_error"]["p50_s"] < 0.001


@pytest.mark.root
def test_chain_rate_and_delay_30kbit(lab):
    p = DirParams(rate_bps=30_000, delay_s=0.005, queue_pkts=64)
    chain(lab, p)
    lab.start()
    lab.ping("a", "10.9.1.1", 2, 0.3, size=72)
    for dst, hops in (("10.9.0.1", 1), ("10.9.1.1", 2)):
        got, rtts = lab.ping("a", dst, 10, 0.3, size=72)  # 72 B ICMP data = 100 B IP packets
        expected = 2 * hops * (0.005 + (100 + L2_OVERHEAD_BYTES) * 8 / 30_000)
        med = statistics.median(rtts)
        print(f"{hops} hop(s): RTT median {med * 1e3:.2f} ms, expected {expected * 1e3:.2f} ms")
        assert got == 10
        assert abs(med - expected) <= 0.03 * expected


@pytest.mark.root
def test_bernoulli_loss_within_3_sigma(lab):
    # Seeded draws: the daemon's loss count is reproducible, so the rate check tests the loss process and not
    # luck (an unseeded 3-sigma check fails ~0.5 % of the time by chance). The checks go from the cause to the
    # effect: every request reached the daemon, the daemon dropped the right share, and ping lost exactly those
    # (a loss anywhere else, e.g. a late reply on a starved machine, fails the last check and says so).
    pair(lab, DirParams(loss=0.01))
    lab.start(extra_config={"seed": 7})
    lab.ping("a", "10.9.0.1", 2, 0.05)
    n = 2000
    for loss in (0.01, 0.10):
        lab.client.set("a>b", DirParams(loss=loss))
        before = lab.client.stats(["a>b"])
        got, _ = lab.ping("a", "10.9.0.1", n, 0.002, wait=1)
        after = lab.client.stats(["a>b"])
        q0, q1 = before["queues"]["a>b"], after["queues"]["a>b"]
        dropped = q1["lost"] - q0["lost"]
        mean, sd = n * loss, math.sqrt(n * loss * (1 - loss))
        print(f"loss {loss:.0%}: daemon dropped {dropped}/{n} (expected {mean:.0f} +- {3 * sd:.1f}), "
              f"ping lost {n - got}, kernel queue drops {after['kernel_drops']} (before: {before['kernel_drops']})")
        assert q1["packets"] - q0["packets"] == n
        assert abs(dropped - mean) <= 3 * sd
        assert n - got == dropped, "ping lost packets the delay line did not drop"


@pytest.mark.root
def test_gilbert_elliott_loss_rate(lab):
    # stationary loss of the 2-state chain: pi_bad = p / (p + r); seeded, checked as above
    ge = GilbertElliott(p=0.05, r=0.45, loss_bad=1.0, loss_good=0.0)
    pair(lab, DirParams(gemodel=ge))
    lab.start(extra_config={"seed": 7})
    lab.ping("a", "10.9.0.1", 2, 0.05)
    before = lab.client.stats(["a>b"])["queues"]["a>b"]
    n = 2000
    got, _ = lab.ping("a", "10.9.0.1", n, 0.002, wait=1)
    after = lab.client.stats(["a>b"])["queues"]["a>b"]
    dropped = after["lost"] - before["lost"]
    pi = ge.p / (ge.p + ge.r)
    # bursts make the count over-dispersed: variance ~ n pi (1-pi) (1 + 2 (1-p-r)/(p+r))
    sd = math.sqrt(n * pi * (1 - pi) * (1 + 2 * (1 - ge.p - ge.r) / (ge.p + ge.r)))
    print(f"GE loss: daemon dropped {dropped}/{n}, expected {n * pi:.0f} +- {3 * sd:.1f}; ping lost {n - got}")
    assert after["packets"] - before["packets"] == n
    assert abs(dropped - n * pi) <= 3 * sd
    assert n - got == dropped, "ping lost packets the delay line did not drop"


@pytest.mark.root
def test_overload_fills_queue_and_drops_the_rest(lab):
    rate, size, burst, qlen = 30_000, 100, 500, 64
    pair(lab, DirParams(rate_bps=rate, delay_s=0.005, queue_pkts=qlen))
    lab.start()
    lab.ping("a", "10.9.0.1", 1, 0.2)  # ARP
    base = lab.client.stats(["a>b"])["queues"]["a>b"]
    rx = udp_receiver(lab, "b", idle=1.0, total=30)
    duration = udp_burst(lab, "a", "10.9.0.1", burst, size)
    received = int(rx.communicate(timeout=40)[0].strip())
    st = lab.client.stats(["a>b"])["queues"]["a>b"]
    ser = (size + L2_OVERHEAD_BYTES) * 8 / rate
    drained_max = math.ceil(duration / ser) + 1  # departures during the burst free queue slots
    overflowed = st["overflowed"] - base["overflowed"]
    print(f"burst {burst} in {duration * 1e3:.1f} ms: overflowed {overflowed}, received {received}, "
          f"max_queue {st['max_queue']}, expected overflow in [{burst - qlen - drained_max}, {burst - qlen}]")
    assert burst - qlen - drained_max <= overflowed <= burst - qlen
    assert st["max_queue"] == qlen
    admitted = st["queued"] - base["queued"]
    assert admitted == burst - overflowed
    assert 0 < (st["queue_sum"] - base["queue_sum"]) / admitted < qlen   # mean queue seen on arrival
    assert received == burst - overflowed
    assert st["accepted"] - base["accepted"] == received
    assert consistent(st) and st["held"] == 0 and st["queue"] == 0


@pytest.mark.root
def test_set_cut_heal(lab):
    five = DirParams(delay_s=0.005)
    pair(lab, five, five)
    lab.start()
    lab.ping("a", "10.9.0.1", 2, 0.05)
    _, rtts = lab.ping("a", "10.9.0.1", 20, 0.02)
    assert near(typical(rtts), 0.010)
    lab.client.set("a>b", DirParams(delay_s=0.025))
    _, rtts = lab.ping("a", "10.9.0.1", 20, 0.05)
    med_set = typical(rtts)
    assert near(med_set, 0.030)
    lab.client.cut("a>b")
    got, _ = lab.ping("a", "10.9.0.1", 10, 0.02, wait=1)
    assert got == 0
    assert lab.client.stats(["a>b"])["queues"]["a>b"]["cut_dropped"] >= 10
    lab.client.heal("a>b")
    got, rtts = lab.ping("a", "10.9.0.1", 20, 0.05)
    med_heal = typical(rtts)
    print(f"RTT 10 ms -> set 25 ms: {med_set * 1e3:.2f} ms; cut: 0/10; healed: {med_heal * 1e3:.2f} ms")
    assert got == 20 and near(med_heal, 0.030)  # healed to the params it had before the cut


@pytest.mark.root
def test_cut_drops_packets_already_queued(lab):
    rate, size, n = 30_000, 100, 20
    pair(lab, DirParams(rate_bps=rate, delay_s=0.005, queue_pkts=64))
    lab.start()
    lab.ping("a", "10.9.0.1", 1, 0.2)
    rx = udp_receiver(lab, "b", idle=1.0, total=10)
    udp_burst(lab, "a", "10.9.0.1", n, size)
    time.sleep(0.1)
    r = lab.client.cut("a>b")
    received = int(rx.communicate(timeout=20)[0].strip())
    st = lab.client.stats(["a>b"])["queues"]["a>b"]
    # by 0.1 s about 0.1 / ser = 3 packets were serialised and delayed out; the rest was dropped by the cut
    print(f"cut after 0.1 s: {r['dropped_held']} held packets dropped, {received} delivered")
    assert r["dropped_held"] >= n - 6
    assert received + r["dropped_held"] == n
    assert st["held"] == 0 and st["queue"] == 0 and consistent(st)


@pytest.mark.root
def test_add_queue_at_runtime(lab):
    pair(lab, DirParams(delay_s=0.005))
    lab.start()
    lab.ping("a", "10.9.0.1", 2, 0.05)
    _, rtts = lab.ping("a", "10.9.0.1", 20, 0.02)
    assert near(typical(rtts), 0.005)
    q = lab.shape("b>a", "b", "eth0", DirParams(delay_s=0.010))
    assert lab.client.add([q])["added"] == ["b>a"]
    netns.iptables_restore(lab.ns("b"), render_rules([("eth0", q.queue_num)]))
    _, rtts = lab.ping("a", "10.9.0.1", 20, 0.02)
    st = lab.client.stats(["b>a"])["queues"]["b>a"]
    print(f"queue added at runtime: RTTs {min(rtts) * 1e3:.2f}-{max(rtts) * 1e3:.2f} ms (lower quartile "
          f"{typical(rtts) * 1e3:.2f}, expected 15), held {st['delayed']}, hold error p50 "
          f"{st['hold_error']['p50_s'] * 1e3:.3f} ms")
    # the added queue is in the path and does its job: it held every reply (its own counters) and released them
    # on time (its hold error), and no round trip came back before 5 + 10 ms. The round trips' lateness is not
    # judged here: in one full run of ten (2026-11-28, run10) both engines' lower quartiles were 19.6 ms just after
    # the queue was added, with analysis tests on the other core, never reproduced alone or beside two busy loops
    # (6 runs); `near` judges the end-to-end RTT in the set/cut/heal and shard tests
    assert st["delayed"] >= 20 and st["hold_error"]["p50_s"] < 0.001
    assert min(rtts) >= 0.015 - EARLY_S
    with pytest.raises(OrchestratorError, match="duplicate"):
        lab.client.add([q])


@pytest.mark.root
def test_sigkill_fails_closed_and_is_reported(lab):
    pair(lab, DirParams(delay_s=0.005))
    lab.start()
    got, _ = lab.ping("a", "10.9.0.1", 5, 0.02)
    assert got == 5
    assert lab.client.ping()["ok"]          # the orchestrator's watch (MininetBackend.check): alive, and a ping
    os.kill(lab.dl.pid, signal.SIGKILL)
    assert lab.dl.wait() == -signal.SIGKILL
    got, _ = lab.ping("a", "10.9.0.1", 10, 0.02, wait=1)
    assert got == 0  # nothing gets through undelayed
    with pytest.raises(DelayLineDied, match="is gone"):
        lab.client.ping()
    lab.remove_rules()  # the orchestrator's teardown: after it, the namespace is not blackholed
    got, _ = lab.ping("a", "10.9.0.1", 5, 0.02)
    assert got == 5


@pytest.mark.root
def test_kernel_queue_drops_are_fatal(lab):
    # a kernel queue of 8 packets with a 1 s delay: a burst of 30 overflows it inside the kernel
    pair(lab, DirParams(delay_s=1.0))
    lab.start(extra_config={"kernel_maxlen": 8})
    udp_burst(lab, "a", "10.9.0.1", 30, 100)
    deadline = time.monotonic() + 5
    with pytest.raises(DelayLineDied, match=r"queue_dropped=\d+") as e:
        while time.monotonic() < deadline:
            lab.client.ping()
            time.sleep(0.1)
    # at most 30 - 8: the engine may read a packet or two from the kernel queue while the burst is still coming
    # (20 once, 2026-11-28, run11), never more than what overflowed
    dropped = int(re.search(r"queue_dropped=(\d+)", str(e.value)).group(1))
    assert 1 <= dropped <= 22 and lab.client.stats()["kernel_drops"] == dropped


@pytest.mark.root
def test_sigterm_releases_held_packets_and_writes_stats(lab):
    pair(lab, DirParams(delay_s=5.0))
    lab.start()
    rx = udp_receiver(lab, "b", idle=0.5, total=10)
    udp_burst(lab, "a", "10.9.0.1", 5, 100)
    time.sleep(0.2)
    assert lab.client.stats()["held"] == 5
    t0 = time.monotonic()
    lab.dl.send_signal(signal.SIGTERM)
    assert lab.dl.wait(timeout=5) == 0
    received = int(rx.communicate(timeout=10)[0].strip())
    assert received == 5 and time.monotonic() - t0 < 3  # released at once, not after the 5 s delay
    st = json.loads((lab.tmp / "stats.json").read_text())
    assert st["queues"]["a>b"]["accepted"] == 5
    assert not os.path.exists(lab.dl.control_path)


@pytest.mark.root
def test_startup_error_is_reported(lab, tmp_path):
    cfg = render_config([QueueSpec("x", "/run/netns/dlt-does-not-exist", 0)], control=str(tmp_path / "c.sock"))
    (tmp_path / "bad.json").write_text(json.dumps(cfg))
    with pytest.raises(DelayLineDied, match="dlt-does-not-exist"):
        start_delayline(tmp_path / "bad.json", rt_priority=None)


@pytest.mark.root
@pytest.mark.parametrize("dist", ["uniform", "normal"])
def test_jitter_spreads_delay_and_keeps_fifo(lab, dist):
    # jitter well above the path's own noise (0.1-0.6 ms quiet, a few ms on a busy machine), and packets 30 ms apart
    # so that FIFO never binds (uniform spans 10 ms; two normal draws differ by 30 ms at 4.2 sigma)
    delay, jitter, n = 0.025, 0.005, 200
    pair(lab, DirParams(delay_s=delay, jitter_s=jitter, jitter_dist=dist), DirParams(delay_s=delay))
    lab.start()
    lab.ping("a", "10.9.0.1", 1, 0.2)
    flows = timed_flows(lab, {"a": (n, 0.030), "b": (4 * n, 0.030 / 4)})   # b -> a 4x denser, the same seconds
    got, ref = flows["a"], flows["b"]
    assert len(got) == n and len(ref) == 4 * n
    noise = [d - delay for _, d in ref]   # the unjittered b -> a flow: the path's noise over the same seconds
    if dist == "uniform":   # bounded on both sides: [delay - jitter, delay + jitter]
        ppf, levels = (lambda p: delay - jitter + 2 * jitter * p), (0.03, 0.1, 0.25, 0.5, 0.75, 0.9, 0.97)
    else:
        ppf, levels = statistics.NormalDist(delay, jitter).inv_cdf, (0.1, 0.25, 0.5, 0.75, 0.9)
    d = sorted(x[1] for x in got)
    q = lambda p: d[int(p * (len(d) - 1))]  # noqa: E731
    print(f"{dist} jitter: one-way p10/p50/p90 {q(0.1) * 1e3:.2f}/{q(0.5) * 1e3:.2f}/{q(0.9) * 1e3:.2f} ms "
          f"(expected {ppf(0.1) * 1e3:.2f}/{ppf(0.5) * 1e3:.2f}/{ppf(0.9) * 1e3:.2f}); reference noise p50/p98 "
          f"{statistics.median(noise) * 1e3:.2f}/{sorted(noise)[int(0.98 * (len(noise) - 1))] * 1e3:.2f} ms")
    bad = quantiles_within_noise([x[1] for x in got], noise, ppf, levels, early=2 * ADVANCE_MAX_S)
    assert not bad, bad
    # the delay line's own lateness: its median under 1 ms (its p99 is a benchmark: bench_delayline.py)
    held = lab.client.stats(["a>b"])["queues"]["a>b"]["hold_error"]
    assert held["p50_s"] < 0.001, held
    # densely spaced (1 ms < jitter range): still no reordering, as netem with a rate
    got = timed_flow(lab, 300, 0.001)
    seqs = [x[0] for x in got]
    assert seqs == sorted(seqs) and len(seqs) == 300


@pytest.mark.root
def test_a_packet_arriving_as_the_release_timer_fires_is_not_released_early(lab):
    """The delay line's arrival stamp when a packet and the release timer wake it together: the packet arrived
    during that sleep (epoll is level-triggered), not before it. b -> a packets every 5 ms are released by the
    timer every 5 ms; a -> b packets are sent at those release times plus offsets from -300 to +300 us, so some
    arrive in the timer's own wake-up. Each packet is held its 10 ms, none early by more than what the mechanism
    allows: its arrival stamp and its release may each be one timer advance early (ADVANCE_MAX_S at most), which no
    load can make larger. (Stamped at the previous wake-up before, such packets left up to ~5 ms early: 136 of
    800.) One path stays open: a packet found without sleeping is stamped at the previous wake-up, the earliest it
    can have arrived, so it may leave early by up to one loop iteration (DELAYLINE.md); the Python engine let 1 of
    800 leave 1.37 ms early that way on a quiet machine (2026-11-28). At most 1 % may."""
    delay = 0.010
    pair(lab, DirParams(delay_s=delay), DirParams(delay_s=delay))
    lab.start()
    lab.ping("a", "10.9.0.1", 1, 0.2)
    n, gap = 400, 0.005
    t0 = time.monotonic() + 1.0                      # CLOCK_MONOTONIC is one clock for every namespace
    offsets = ",".join(f"{(k - 15) * 20e-6:.6f}" for k in range(31))
    flows = timed_flows(lab, {"b": (n, gap, f"{t0:.6f}"), "a": (n, gap, f"{t0 + delay:.6f}", offsets)})
    ab, ba = ([x[1] for x in flows[src]] for src in "ab")
    print(f"a -> b one-way min {min(ab) * 1e3:.3f} ms, median {statistics.median(ab) * 1e3:.3f} ms; "
          f"b -> a min {min(ba) * 1e3:.3f} ms ({len(ab)}, {len(ba)} packets)")
    assert len(ab) == n and len(ba) == n
    early = sorted(d for d in ab + ba if d < delay - 2 * ADVANCE_MAX_S)
    shown = [round(d * 1e3, 3) for d in early[:10]]
    print(f"{len(early)} of {len(ab) + len(ba)} early by more than {2 * ADVANCE_MAX_S * 1e6:.0f} us: {shown} ms")
    assert len(early) <= (len(ab) + len(ba)) // 100, f"{len(early)} packets early: {shown} ms"


@pytest.mark.root
def test_reorder_sends_some_packets_without_delay(lab):
    delay, reorder, n = 0.010, 0.25, 400
    pair(lab, DirParams(delay_s=delay, reorder=reorder))
    lab.start()
    lab.ping("a", "10.9.0.1", 1, 0.2)
    before = lab.client.stats(["a>b"])["queues"]["a>b"]["reordered"]
    got = timed_flow(lab, n, 0.002)
    reordered = lab.client.stats(["a>b"])["queues"]["a>b"]["reordered"] - before
    # seen undelayed: under 8 ms of the 10. A delayed packet is never that early (the open busy-loop path of
    # DELAYLINE.md is one loop iteration, ~1.4 ms at worst); an undelayed one arrives later only when the machine
    # holds the sender, receiver or engine 8 ms
    fast = sum(1 for _, d in got if d < 0.8 * delay)
    sd = math.sqrt(n * reorder * (1 - reorder))
    seqs = [x[0] for x in got]
    print(f"reorder 25%: the engine sent {reordered}/{n} undelayed (expected {n * reorder:.0f} +- {3 * sd:.0f}), "
          f"{fast} seen undelayed, {sum(1 for a, b in zip(seqs, seqs[1:]) if b < a)} inversions")
    assert len(got) == n
    assert abs(reordered - n * reorder) <= 3 * sd         # the engine's draw: a timing-free binomial check
    assert seqs != sorted(seqs)
    # every packet the receiver saw undelayed was sent undelayed (the delay line is never early), and most packets
    # sent undelayed were seen so: CI's loaded machine held 11 of 98 more than 5 ms (2026-11-28), so up to a fifth
    # may be held past 8 ms; a delay line that delayed its reordered packets would show none
    assert reordered - reordered // 5 <= fast <= reordered, (fast, reordered)


@pytest.mark.root
def test_sharded_daemon_routes_control_merges_stats_and_fails_closed(lab):
    """`shards: 2`: a's and b's queues in two engine processes behind the one control socket."""
    five = DirParams(delay_s=0.005)
    pair(lab, five, five)
    lab.start(extra_config={"shards": 2})
    info = lab.client.ping()
    assert len(info["shards"]) == 2 and info["queues"] == 2 and info["namespaces"] == 2
    lab.ping("a", "10.9.0.1", 2, 0.05)
    _, rtts = lab.ping("a", "10.9.0.1", 20, 0.02)
    assert near(typical(rtts), 0.010)
    lab.client.set("a>b", DirParams(delay_s=0.025))           # a's shard
    _, rtts = lab.ping("a", "10.9.0.1", 20, 0.05)
    assert near(typical(rtts), 0.030)
    lab.client.cut("b>a")                                       # b's shard
    got, _ = lab.ping("a", "10.9.0.1", 5, 0.02, wait=1)
    assert got == 0
    assert lab.client.heal("b>a")["was_cut"]
    st = lab.client.stats()
    assert set(st["queues"]) == {"a>b", "b>a"} and len(st["shards"]) == 2 and st["engine"] == lab.engine
    assert st["kernel_drops"] == 0 and not st["fatal"] and consistent(st["queues"]["a>b"])
    assert st["hold_error"]["count"] >= 80 and st["hold_error"]["p50_s"] < 0.001
    assert list(lab.client.stats(["b>a"])["queues"]) == ["b>a"]
    with pytest.raises(OrchestratorError, match="unknown id"):
        lab.client.cut("nope")
    os.kill(info["shards"][1], signal.SIGKILL)                  # a shard dies: fatal, as a dead daemon
    with pytest.raises(DelayLineDied, match="shard 1"):
        lab.client.ping()
    os.kill(lab.dl.pid, signal.SIGKILL)                         # the router dies: its shards die with it
    assert lab.dl.wait() == -signal.SIGKILL
    deadline = time.monotonic() + 5
    while any(os.path.exists(f"/proc/{p}") for p in info["shards"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(os.path.exists(f"/proc/{p}") for p in info["shards"])
    got, _ = lab.ping("a", "10.9.0.1", 5, 0.02, wait=1)
    assert got == 0                                             # failed closed
    lab.remove_rules()
    got, _ = lab.ping("a", "10.9.0.1", 5, 0.02)
    assert got == 5
