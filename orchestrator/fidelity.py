"""The fidelity probe: what the emulated network really delivers, against what the plan configured.

Pure part: choosing paths and computing the expected RTT of a ping over them. Measuring part: pings run inside
the nodes through a backend, in parallel. The result is written to `fidelity.json` in every run directory.
"""
from __future__ import annotations

import random
import re
import statistics
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

from orchestrator.plan import NetworkPlan, path
from orchestrator.shaping import render

PING_IP_BYTES = 100          # ping -s 72: 72 + 8 ICMP + 20 IP
PING_PAYLOAD = PING_IP_BYTES - 28


@dataclass
class PathProbe:
    src: str
    dst: str
    hops: int
    expected_rtt_ms: float           # what the configured links give (the shaper's fidelity aside)
    emulated_rtt_ms: float           # what the chosen shaper can give (tbf: no delay, no serialisation)
    sent: int = 0
    received: int = 0
    rtt_ms: list[float] | None = None
    expected_loss: float = 0.0

    @property
    def median_ms(self) -> float | None:
        return statistics.median(self.rtt_ms) if self.rtt_ms else None

    def to_json(self) -> dict:
        d = asdict(self)
        d["median_rtt_ms"] = self.median_ms
        d["error_ms"] = None if self.median_ms is None else self.median_ms - self.emulated_rtt_ms
        d["loss_measured"] = 1 - self.received / self.sent if self.sent else None
        return d


def expected_rtt_ms(plan: NetworkPlan, hops: list[str], shaper: str, ip_bytes: int = PING_IP_BYTES) -> tuple[
        float, float, float]:
    """(configured RTT, RTT the shaper emulates, round-trip loss probability) of a ping along `hops`."""
    configured = emulated = 0.0
    survive = 1.0
    for a, b in zip(hops, hops[1:]):
        link = plan.link_of(a, b)
        for d in ((link.down, link.up) if link.parent == a else (link.up, link.down)):   # there and back
            one = d.delay_s + d.serialisation_s(ip_bytes)
            configured += one
            lost = render.fidelity(shaper, d).lost()
            emulated += (0 if "delay" in lost else d.delay_s) + (0 if shaper == "tbf" else d.serialisation_s(ip_bytes))
            survive *= 1 - d.loss
    return configured * 1000, emulated * 1000, 1 - survive


def choose_paths(plan: NetworkPlan, k: int, seed: int) -> list[tuple[str, str]]:
    """One link, the tree's longest member-to-member path, then seeded random member pairs; `k` in all."""
    members = [n.name for n in plan.members] or [n.name for n in plan.nodes]
    root = plan.nodes[0].name
    far_a = max(members, key=lambda m: (len(path(plan, root, m)), m))
    far_b = max(members, key=lambda m: (len(path(plan, far_a, m)), m))
    first = plan.links[0]
    pairs = [(first.parent, first.child)]
    if far_a != far_b:
        pairs.append((far_a, far_b))
    rng = random.Random(seed)
    tries = 0
    while len(pairs) < k and len(members) > 1 and tries < 100:
        pair = tuple(rng.sample(members, 2))
        tries += 1
        if pair not in pairs:
            pairs.append(pair)  # type: ignore[arg-type]
    return pairs[:k]


def plan_probes(plan: NetworkPlan, shaper: str, k: int = 4, seed: int = 0) -> list[PathProbe]:
    out = []
    for a, b in choose_paths(plan, k, seed):
        hops = path(plan, a, b)
        configured, emulated, loss = expected_rtt_ms(plan, hops, shaper)
        out.append(PathProbe(src=a, dst=b, hops=len(hops) - 1, expected_rtt_ms=configured,
                             emulated_rtt_ms=emulated, expected_loss=loss))
    return out


_RTT = re.compile(r"time=([\d.]+) ms")


def measure(probes: list[PathProbe], plan: NetworkPlan, popen, count: int = 10, interval: float = 0.2) -> None:
    """Ping each path `count` times (in parallel); `popen(node, argv, **kw)` runs a command inside a node."""
    def one(p: PathProbe) -> None:
        # Each ping waits long enough for a slow link: 4 x the configured RTT plus a second.
        wait = max(2, int(4 * p.expected_rtt_ms / 1000) + 1)
        proc = popen(p.src, ["ping", "-n", "-c", str(count), "-i", str(interval), "-s", str(PING_PAYLOAD),
                             "-W", str(wait), plan.node(p.dst).address],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, _ = proc.communicate(timeout=count * interval + wait + 30)
        p.sent = count
        p.rtt_ms = [float(x) for x in _RTT.findall(out)]
        p.received = len(p.rtt_ms)

    with ThreadPoolExecutor(max_workers=max(1, len(probes))) as pool:
        list(pool.map(one, probes))


def summary(probes: list[PathProbe], shaper: str) -> dict:
    errs = [abs(p.to_json()["error_ms"]) for p in probes if p.median_ms is not None]
    return {
        "shaper": shaper,
        "paths": [p.to_json() for p in probes],
        "max_abs_error_ms": max(errs) if errs else None,
        "sent": sum(p.sent for p in probes),
        "received": sum(p.received for p in probes),
    }
