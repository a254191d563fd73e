"""The fidelity probe: what the emulated network really delivers, against what the plan configured.

Pure part: choosing paths and computing the expected RTT of a ping over them. Measuring part: pings run inside
the nodes through a backend, in parallel. The result is written to `fidelity.json` in every run directory.
"""
from __future__ import annotations

import json
import random
import re
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

from orchestrator.plan import Link, NetworkPlan, path
from orchestrator.shaping import shapers
from orchestrator.shaping.params import L2_OVERHEAD_BYTES

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
    s = shapers.get(shaper)
    for a, b in zip(hops, hops[1:]):
        link = plan.link_of(a, b)
        for d in ((link.down, link.up) if link.parent == a else (link.up, link.down)):   # there and back
            one = d.delay_s + d.serialisation_s(ip_bytes)
            configured += one
            lost = s.fidelity(d).lost()
            emulated += ((0 if "delay" in lost else d.delay_s)
                         + (d.serialisation_s(ip_bytes) if s.emulates_serialisation else 0))
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


def choose_links(plan: NetworkPlan, k: int, seed: int) -> list[Link]:
    """`k` links to probe hop by hop: the root's first link, a leaf's access link, then seeded random ones."""
    if not plan.links or k <= 0:
        return []
    chosen = [plan.links[0]]
    if plan.links[-1] is not plan.links[0]:
        chosen.append(plan.links[-1])
    rest = [lk for lk in plan.links if lk not in chosen]
    random.Random(seed).shuffle(rest)
    return (chosen + rest)[:k]


def plan_hop_probes(plan: NetworkPlan, shaper: str, k: int, seed: int = 0) -> list[PathProbe]:
    """One-hop probes across `k` links: RTT against 2 x (delay + serialisation), the two directions' sum."""
    out = []
    for lk in choose_links(plan, k, seed):
        configured, emulated, loss = expected_rtt_ms(plan, [lk.parent, lk.child], shaper)
        out.append(PathProbe(src=lk.parent, dst=lk.child, hops=1, expected_rtt_ms=configured,
                             emulated_rtt_ms=emulated, expected_loss=loss))
    return out


UDP_TOOL = [sys.executable, "-m", "orchestrator.udpprobe"]
RATE_PORT = 9123
UDP_IP_OVERHEAD = 28            # IP + UDP headers; the shapers add L2_OVERHEAD_BYTES for the wire


@dataclass
class RateSample:
    """A back-to-back UDP train across one link direction; arrivals' spacing gives the link rate."""
    link: str
    direction: str
    src: str
    dst: str
    configured_bps: float
    emulated: bool                   # does the shaper emulate rate at all
    count: int
    payload: int
    received: int = 0
    measured_bps: float | None = None

    @property
    def wire_bytes(self) -> int:
        return self.payload + UDP_IP_OVERHEAD + L2_OVERHEAD_BYTES

    def to_json(self) -> dict:
        d = asdict(self)
        d["wire_bytes"] = self.wire_bytes
        d["error"] = (None if self.measured_bps is None or not self.configured_bps
                      else self.measured_bps / self.configured_bps - 1)
        return d


def plan_rate_sample(plan: NetworkPlan, shaper: str, link: Link | None = None,
                     train_s: float = 1.5) -> RateSample | None:
    """A train on `link`'s down direction (default: the first rate-limited link) lasting about `train_s`.

    The train fits the link's queue (no overflow) and its packets are sized so it lasts ~`train_s` at the
    configured rate. None when no link has a rate."""
    if link is None:
        link = next((lk for lk in plan.links if lk.down.rate_bps), None)
    if link is None or not link.down.rate_bps:
        return None
    d = link.down
    count = max(8, min(30, (d.queue_pkts or 1000) - 2))
    wire = d.rate_bps * train_s / 8 / count
    payload = int(max(64, min(1400, wire - UDP_IP_OVERHEAD - L2_OVERHEAD_BYTES)))
    emulated = not shapers.get(shaper).fidelity(d).rate.startswith("NOT")
    return RateSample(link=link.id, direction="down", src=link.parent, dst=link.child,
                      configured_bps=d.rate_bps, emulated=emulated, count=count, payload=payload)


def train_rate_bps(times: list[float], wire_bytes: int) -> float | None:
    """Rate from a train's arrival times: the last two thirds (tbf lets a first burst through at once)."""
    steady = times[len(times) // 3:]
    if len(steady) < 3 or steady[-1] <= steady[0]:
        return None
    return (len(steady) - 1) * wire_bytes * 8 / (steady[-1] - steady[0])


def measure_rate(sample: RateSample, plan: NetworkPlan, popen, idle_s: float = 3.0) -> None:
    """Run the train: a sink inside `dst`, the source inside `src` (`popen(node, argv, **kw)`)."""
    sink = popen(sample.dst, [*UDP_TOOL, "sink", str(RATE_PORT), str(idle_s)], stdout=subprocess.PIPE,
                 stderr=subprocess.PIPE, text=True)
    try:
        if sink.stdout.readline().strip() != "ready":
            raise RuntimeError(f"rate sample: the sink in {sample.dst} did not start: {sink.stderr.read()}")
        src = popen(sample.src, [*UDP_TOOL, "source", plan.node(sample.dst).address, str(RATE_PORT),
                                 str(sample.count), str(sample.payload), "0"],
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        src.communicate(timeout=60)
        out, _ = sink.communicate(timeout=60 + 3 * sample.count * sample.wire_bytes * 8 / sample.configured_bps)
        got = json.loads(out.strip().splitlines()[-1])
        sample.received = len(got["times"])
        sample.measured_bps = train_rate_bps(got["times"], sample.wire_bytes)
    finally:
        if sink.poll() is None:
            sink.kill()
            sink.wait()


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

    # Probes that share a link would queue behind each other's pings: run them in rounds of disjoint paths.
    for batch in disjoint_batches(plan, probes):
        with ThreadPoolExecutor(max_workers=len(batch)) as pool:
            list(pool.map(one, batch))


def disjoint_batches(plan: NetworkPlan, probes: list[PathProbe]) -> list[list[PathProbe]]:
    """Greedy rounds of probes whose paths share no link (pure)."""
    batches: list[tuple[list[PathProbe], set[str]]] = []
    for p in probes:
        hops = path(plan, p.src, p.dst)
        links = {plan.link_of(a, b).id for a, b in zip(hops, hops[1:])}
        for members, used in batches:
            if not used & links:
                members.append(p)
                used |= links
                break
        else:
            batches.append(([p], set(links)))
    return [members for members, _ in batches]


def summary(probes: list[PathProbe], shaper: str, rate: RateSample | None = None,
            parameters: dict | None = None) -> dict:
    """The probe's result (fidelity.json): every RTT probe, the error extremes, loss counts, the rate sample."""
    errs = [abs(p.to_json()["error_ms"]) for p in probes if p.median_ms is not None]
    rel = [abs(p.to_json()["error_ms"]) / p.emulated_rtt_ms for p in probes
           if p.median_ms is not None and p.emulated_rtt_ms > 0]
    sent = sum(p.sent for p in probes)
    return {
        "shaper": shaper,
        "paths": [p.to_json() for p in probes],
        "max_abs_error_ms": max(errs) if errs else None,
        "max_rel_error": max(rel) if rel else None,
        "sent": sent,
        "received": sum(p.received for p in probes),
        "expected_lost": sum(p.sent * p.expected_loss for p in probes),
        "rate": rate.to_json() if rate else None,
        "parameters": parameters,
    }


def probe(plan: NetworkPlan, shaper: str, popen, links: int = 4, paths: int = 2, count: int = 10,
          seed: int = 0, rate: bool = True, parameters: dict | None = None) -> dict:
    """The whole probe on a running network: `links` one-hop RTTs, `paths` multi-hop member paths, a rate
    sample. `popen(node, argv, **kw)` runs a command inside a node."""
    probes = plan_hop_probes(plan, shaper, links, seed)
    seen = {(p.src, p.dst) for p in probes}
    probes += [p for p in plan_probes(plan, shaper, paths + 1, seed) if p.hops > 1 and (p.src, p.dst) not in seen
               ][:paths]
    measure(probes, plan, popen, count=count)
    sample = plan_rate_sample(plan, shaper) if rate else None
    if sample is not None:
        measure_rate(sample, plan, popen)
    return summary(probes, shaper, sample, parameters)
