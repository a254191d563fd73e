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
    """A ping path. Times are virtual (docs/virtual-time.md): the pings' real RTTs / the dilation."""
    src: str
    dst: str
    hops: int
    expected_rtt_ms: float           # what the configured links give (the shaper's fidelity aside)
    emulated_rtt_ms: float           # what the chosen shaper can give (tbf: no delay, no serialisation)
    sent: int = 0
    received: int = 0
    rtt_ms: list[float] | None = None
    expected_loss: float = 0.0
    min_gap_ms: float = 0.0          # pings closer than this would queue behind each other (2 x the slowest hop)
    cut_links: int = 0               # a lab over several machines: the cut links (tunnels) the path crosses
    underlay_ms: float = 0.0         # their underlay's round trips, added to the expectation

    @property
    def target_ms(self) -> float:
        """What the RTT should be: the shaper's emulated RTT plus the underlay's under the cut links crossed."""
        return self.emulated_rtt_ms + self.underlay_ms

    @property
    def median_ms(self) -> float | None:
        return statistics.median(self.rtt_ms) if self.rtt_ms else None

    def to_json(self) -> dict:
        d = asdict(self)
        d["median_rtt_ms"] = self.median_ms
        d["error_ms"] = None if self.median_ms is None else self.median_ms - self.target_ms
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


def min_gap_ms(plan: NetworkPlan, hops: list[str], ip_bytes: int = PING_IP_BYTES) -> float:
    """2 x the longest serialisation of a ping on the path (virtual ms): pings sent closer queue behind each
    other and measure the queue, not the link."""
    ser = [d.serialisation_s(ip_bytes) for a, b in zip(hops, hops[1:])
           for d in (plan.link_of(a, b).down, plan.link_of(a, b).up)]
    return 2000 * max(ser, default=0.0)


def _probe(plan: NetworkPlan, shaper: str, a: str, b: str) -> PathProbe:
    hops = path(plan, a, b)
    configured, emulated, loss = expected_rtt_ms(plan, hops, shaper)
    return PathProbe(src=a, dst=b, hops=len(hops) - 1, expected_rtt_ms=configured, emulated_rtt_ms=emulated,
                     expected_loss=loss, min_gap_ms=min_gap_ms(plan, hops))


def plan_probes(plan: NetworkPlan, shaper: str, k: int = 4, seed: int = 0) -> list[PathProbe]:
    return [_probe(plan, shaper, a, b) for a, b in choose_paths(plan, k, seed)]


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
    return [_probe(plan, shaper, lk.parent, lk.child) for lk in choose_links(plan, k, seed)]


UDP_TOOL = [sys.executable, "-m", "orchestrator.udpprobe"]
RATE_PORT = 9123
UDP_IP_OVERHEAD = 28            # IP + UDP headers; the shapers add L2_OVERHEAD_BYTES for the wire


@dataclass
class RateSample:
    """A back-to-back UDP train across one link direction; arrivals' spacing gives the link rate (virtual: the
    real rate x the dilation)."""
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
    dilation: float = 1.0

    @property
    def real_bps(self) -> float:
        return self.configured_bps / self.dilation

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
                     train_s: float = 1.5, dilation: float = 1.0) -> RateSample | None:
    """A train on `link`'s down direction (default: the first rate-limited link) lasting about `train_s` real
    seconds (at the real rate: the configured one / `dilation`).

    The train fits the link's queue (no overflow) and its packets are sized so it lasts ~`train_s` at the
    configured rate. None when no link has a rate."""
    if link is None:
        link = next((lk for lk in plan.links if lk.down.rate_bps), None)
    if link is None or not link.down.rate_bps:
        return None
    d = link.down
    count = max(8, min(30, (d.queue_pkts or 1000) - 2))
    wire = d.rate_bps / dilation * train_s / 8 / count
    payload = int(max(64, min(1400, wire - UDP_IP_OVERHEAD - L2_OVERHEAD_BYTES)))
    emulated = not shapers.get(shaper).fidelity(d).rate.startswith("NOT")
    return RateSample(link=link.id, direction="down", src=link.parent, dst=link.child,
                      configured_bps=d.rate_bps, emulated=emulated, count=count, payload=payload, dilation=dilation)


def train_rate_bps(times: list[float], wire_bytes: int) -> float | None:
    """Rate from a train's arrival times: the last two thirds (tbf lets a first burst through at once)."""
    steady = times[len(times) // 3:]
    if len(steady) < 3 or steady[-1] <= steady[0]:
        return None
    return (len(steady) - 1) * wire_bytes * 8 / (steady[-1] - steady[0])


def measure_rate(sample: RateSample, plan: NetworkPlan, popen, idle_s: float = 3.0) -> None:
    """Run the train: a sink inside `dst`, the source inside `src` (`popen(node, argv, **kw)`); the sink ends
    when the whole train arrived, or `idle_s` after the last packet when some were lost."""
    per_packet_s = sample.wire_bytes * 8 / sample.real_bps
    idle_s = max(idle_s, 3 * per_packet_s)       # the sink ends after this long without a packet
    sink = popen(sample.dst, [*UDP_TOOL, "sink", str(RATE_PORT), str(idle_s), str(sample.count)],
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        if sink.stdout.readline().strip() != "ready":
            raise RuntimeError(f"rate sample: the sink in {sample.dst} did not start: {sink.stderr.read()}")
        src = popen(sample.src, [*UDP_TOOL, "source", plan.node(sample.dst).address, str(RATE_PORT),
                                 str(sample.count), str(sample.payload), "0"],
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        src.communicate(timeout=60)
        out, _ = sink.communicate(timeout=60 + idle_s + 3 * sample.count * per_packet_s)
        got = json.loads(out.strip().splitlines()[-1])
        sample.received = len(got["times"])
        real = train_rate_bps(got["times"], sample.wire_bytes)
        sample.measured_bps = None if real is None else real * sample.dilation
    finally:
        if sink.poll() is None:
            sink.kill()
            sink.wait()


_RTT = re.compile(r"time=([\d.]+) ms")


def ping_interval_s(p: PathProbe, dilation: float = 1.0, interval: float = 0.2) -> float:
    """Real seconds between a path's pings: `interval`, or longer when the dilated path's slowest hop would make
    the pings queue behind each other."""
    return round(max(interval, p.min_gap_ms / 1000 * dilation), 3)


def measure(probes: list[PathProbe], plan: NetworkPlan, popen, count: int = 10, interval: float = 0.2,
            dilation: float = 1.0) -> None:
    """Ping each path `count` times (in parallel); `popen(node, argv, **kw)` runs a command inside a node. The
    RTTs are recorded in virtual ms (the real ones / `dilation`)."""
    def one(p: PathProbe) -> None:
        # Each ping waits long enough for a slow link: 4 x the configured RTT plus a second (real).
        wait = max(2, int(4 * p.expected_rtt_ms * dilation / 1000) + 1)
        gap = ping_interval_s(p, dilation, interval)
        proc = popen(p.src, ["ping", "-n", "-c", str(count), "-i", str(gap), "-s", str(PING_PAYLOAD),
                             "-W", str(wait), plan.node(p.dst).address],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, _ = proc.communicate(timeout=count * gap + wait + 30)
        p.sent = count
        p.rtt_ms = [float(x) / dilation for x in _RTT.findall(out)]
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
            parameters: dict | None = None, dilation: float = 1.0, underlay_ms: dict | None = None) -> dict:
    """The probe's result (fidelity.json): every RTT probe, the error extremes, loss counts, the rate sample."""
    errs = [abs(p.to_json()["error_ms"]) for p in probes if p.median_ms is not None]
    rel = [abs(p.to_json()["error_ms"]) / p.target_ms for p in probes
           if p.median_ms is not None and p.target_ms > 0]
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
        "dilation": dilation,          # every time above is virtual (the real ones / dilation)
        **({"underlay_rtt_ms": underlay_ms} if underlay_ms else {}),    # per cut link, real ms
    }


def with_underlay(probes: list[PathProbe], plan: NetworkPlan, underlay_ms: dict[str, float],
                  dilation: float = 1.0) -> None:
    """Each probe's cut links and their underlay's round trips (`underlay_ms`: real ms per cut link id; the
    probe's times are virtual, so / `dilation`): a ping crossing a tunnel also crosses the network between the
    machines, which the shaping does not include. Pure."""
    for p in probes:
        hops = path(plan, p.src, p.dst)
        crossed = [lk.id for a, b in zip(hops, hops[1:]) if (lk := plan.link_of(a, b)).id in underlay_ms]
        p.cut_links = len(crossed)
        p.underlay_ms = sum(underlay_ms[x] for x in crossed) / dilation


def probe(plan: NetworkPlan, shaper: str, popen, links: int = 4, paths: int = 2, count: int = 10,
          seed: int = 0, rate: bool = True, parameters: dict | None = None, dilation: float = 1.0,
          underlay_ms: dict[str, float] | None = None) -> dict:
    """The whole probe on a running network: `links` one-hop RTTs, `paths` multi-hop member paths, a rate
    sample. `popen(node, argv, **kw)` runs a command inside a node. `dilation`: the lab's (its shaping realises
    the plan's parameters dilated); the results are in virtual time, against the plan's parameters. A lab over
    several machines gives `underlay_ms` (each cut link's underlay RTT, real ms): every cut link is probed hop by
    hop as well, and every path is held to the formula plus the underlay under the cut links it crosses."""
    cut = dict(underlay_ms or {})
    probes = [_probe(plan, shaper, lk.parent, lk.child) for lk in plan.links if lk.id in cut]
    seen = {(p.src, p.dst) for p in probes}
    probes += [p for p in plan_hop_probes(plan, shaper, links, seed) if (p.src, p.dst) not in seen]
    seen = {(p.src, p.dst) for p in probes}
    probes += [p for p in plan_probes(plan, shaper, paths + 1, seed) if p.hops > 1 and (p.src, p.dst) not in seen
               ][:paths]
    if cut:
        with_underlay(probes, plan, cut, dilation)
    measure(probes, plan, popen, count=count, dilation=dilation)
    sample = plan_rate_sample(plan, shaper, dilation=dilation) if rate else None
    if sample is not None:
        measure_rate(sample, plan, popen)
    return summary(probes, shaper, sample, parameters, dilation, cut)


# --- judges of a finished run: did the machine keep up? (`orchestrator sweep` records them per point) ----------

MAX_HOLD_P99_MS = 1.0        # the delay line released packets late by more than this (p99): it fell behind
MAX_LAG_P99_MS = 50.0        # members started late / the schedule's actions applied late by more than this (p99)
MAX_CPU_WAIT_MS = 1.0        # a member waited this long for a CPU (virtual ms, mean per time it ran) beyond its budget
BUDGET_BOUND_SHARE = 0.5     # a member throttled in more than this share of its periods ran at its budget


def p99(values: list[float]) -> float | None:
    """The 99th percentile by nearest rank (the largest value of fewer than 100)."""
    if not values:
        return None
    s = sorted(values)
    return s[max(0, -(-99 * len(s) // 100) - 1)]


def _read_json(path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


START_SCAN_LINES = 200          # the start event is among a member's first lines (after node_started)


def _protocol_start(events_file) -> float | None:
    """When the member's protocol started: its `protocol_started` event, or an event of the protocol's start
    (`via: start`, GSGC's round 0). None when the log has neither among its first lines."""
    try:
        with events_file.open() as f:
            for i, line in enumerate(f):
                if i >= START_SCAN_LINES:
                    return None
                if '"protocol_started"' in line or '"start"' in line:
                    try:
                        ev = json.loads(line)
                    except ValueError:
                        continue
                    if ev.get("event") == "protocol_started" or ev.get("via") == "start":
                        return float(ev["ts"])
    except (OSError, KeyError, TypeError, ValueError):
        return None
    return None


def run_judges(run_dir, max_hold_p99_ms: float = MAX_HOLD_P99_MS, max_lag_p99_ms: float = MAX_LAG_P99_MS) -> dict:
    """The fidelity judges of a finished run directory (files only, no network):

    - `hold_p99_ms`: the delay line's hold error p99 (actual minus scheduled release; `tc/delayline.json`, the
      daemon's statistics at the end of the run); None when the run used no delay line (netem, tbf);
    - `start_lag_p99_ms`: the members' timer lag at the common start (the protocol's start event, see
      `_protocol_start`, minus the manifest's t0_unix, over the members that waited for it: each member's start
      timer fired that late); None for protocols that log no start event;
    - `schedule_lag_p99_ms`: the schedule's actions, applied minus planned (`events/orchestrator.jsonl`; the
      manifest's `schedule.lag_ms_max` when the log is missing);
    - `lag_p99_ms`: the larger of the two lags.

    `verdict` is `unfaithful` when a judge exceeds its threshold (`reasons` says which), `faithful` when at least
    one judge was measured and none exceeds, `unjudged` when nothing could be measured. `delayline_cores` and
    `delayline_pkts_per_s` (over the daemon's uptime) tell the next `sweep --parallel` what a point's delay line
    costs, `member_cores_each` (the manifest's `member_cpu`: the member processes' CPU over their lifetime,
    divided by the members) what its members cost. `host_speed_memory` and `host_speed_compute`: the manifest's
    `host_speed` (the machine's work per CPU-second over the run), for the sweep's host-speed judge."""
    from pathlib import Path

    d = Path(run_dir)
    out: dict = {"hold_p99_ms": None, "start_lag_p99_ms": None, "schedule_lag_p99_ms": None, "lag_p99_ms": None,
                 "thresholds": {"hold_p99_ms": max_hold_p99_ms, "lag_p99_ms": max_lag_p99_ms,
                                "cpu_wait_ms": MAX_CPU_WAIT_MS}}
    manifest = _read_json(d / "manifest.json") or {}
    n = dilation_of(manifest)
    out["dilation"] = n
    dl = _read_json(d / "tc" / "delayline.json") or {}
    hold = (dl.get("hold_error") or {}).get("p99_s")
    if isinstance(hold, (int, float)) and (dl.get("hold_error") or {}).get("count"):
        out["hold_p99_ms"] = hold * 1000 / n         # real error / N: what a packet's virtual timing suffered
    t0 = manifest.get("t0_unix")
    cfg_files = sorted((d / "configs").glob("*.json")) if (d / "configs").is_dir() else []
    if isinstance(t0, (int, float)) and cfg_files:
        lags = []
        for cfg_file in cfg_files:
            cfg = _read_json(cfg_file) or {}
            if not cfg.get("wait_for_start"):
                continue                        # a joiner (started by the schedule) or a run without a common start
            ts = _protocol_start(d / "events" / f"{cfg.get('name', cfg_file.stem)}.jsonl")
            if ts is not None:
                lags.append(max(0.0, ts - t0) * 1000)
        out["start_lag_p99_ms"] = p99(lags)
    sched = []
    try:
        with (d / "events" / "orchestrator.jsonl").open() as f:
            for line in f:
                if '"action_applied"' in line:
                    try:
                        sched.append(float(json.loads(line)["lag_ms"]))
                    except (ValueError, KeyError, TypeError):
                        pass
    except OSError:
        pass
    if sched:
        out["schedule_lag_p99_ms"] = p99(sched)
    elif isinstance((manifest.get("schedule") or {}).get("lag_ms_max"), (int, float)):
        out["schedule_lag_p99_ms"] = manifest["schedule"]["lag_ms_max"]
    lags = [v for v in (out["start_lag_p99_ms"], out["schedule_lag_p99_ms"]) if v is not None]
    out["lag_p99_ms"] = max(lags) if lags else None
    out.update(cpu_judges(manifest.get("cpu_budget")))
    reasons = []
    if out["hold_p99_ms"] is not None and out["hold_p99_ms"] > max_hold_p99_ms:
        reasons.append(f"delay line hold error p99 {out['hold_p99_ms']:.2f} ms > {max_hold_p99_ms:g} ms")
    if out["lag_p99_ms"] is not None and out["lag_p99_ms"] > max_lag_p99_ms:
        reasons.append(f"timer lag p99 {out['lag_p99_ms']:.1f} ms > {max_lag_p99_ms:g} ms")
    if out["cpu_wait_ms"] is not None and out["cpu_wait_ms"] > MAX_CPU_WAIT_MS:
        reasons.append(f"member {out['cpu_wait_unit']} waited {out['cpu_wait_ms']:.2f} ms (virtual, mean) for a CPU "
                       f"each time it ran, beyond its budget's throttling (the machine was busy) > "
                       f"{MAX_CPU_WAIT_MS:g} ms")
    out["reasons"] = reasons
    judged = any(out[k] is not None for k in ("hold_p99_ms", "lag_p99_ms", "cpu_wait_ms"))
    out["verdict"] = "unfaithful" if reasons else "faithful" if judged else "unjudged"
    cpu, up, pkts = dl.get("cpu_s"), dl.get("uptime_s"), dl.get("packets")
    timed = isinstance(up, (int, float)) and up > 0
    out["delayline_cores"] = cpu / up if timed and isinstance(cpu, (int, float)) else None
    out["delayline_pkts_per_s"] = pkts / up if timed and isinstance(pkts, (int, float)) else None
    out["member_cores_each"] = member_cores_each(manifest, len(cfg_files))
    # In virtual cores (real CPU seconds per virtual second): what `time: {dilation: auto}` sizes a rerun with.
    out["member_virtual_cores_each"] = (None if out["member_cores_each"] is None
                                        else out["member_cores_each"] * n)
    out["delayline_virtual_cores"] = None if out["delayline_cores"] is None else out["delayline_cores"] * n
    # The host's work per CPU-second over the run (orchestrator.hostspeed): judged against the sweep's other
    # points (sweepstate.judge_host_speed), as a single run has nothing to compare it with.
    speed = manifest.get("host_speed") or {}
    out["host_speed_memory"], out["host_speed_compute"] = speed.get("memory"), speed.get("compute")
    return out


def dilation_of(manifest: dict) -> float:
    """The run's time dilation (1 for runs from before virtual time)."""
    n = (manifest.get("time") or {}).get("dilation", 1.0)
    return float(n) if isinstance(n, (int, float)) and n > 0 else 1.0


def cpu_judges(budget: dict | None) -> dict:
    """The CPU budget judges from the manifest's `cpu_budget` (the driver's cgroup and scheduler readings over the
    run, from the common start to the stop, per member process). Pure.

    - `cpu_wait_ms` (and the unit): the largest mean time a member process waited for a CPU each time it ran,
      beyond its budget's throttling, in virtual ms: (time runnable but waiting − time throttled) / times it ran /
      the dilation. It is what the machine's contention added to every wakeup of the member (a packet, a timer): a
      fidelity judge (MAX_CPU_WAIT_MS). Members woken together (a multicast reaches all at once) queue for the
      machine's cores; the dilation divides that wait.
    - `budget_bound`: members throttled in more than BUDGET_BOUND_SHARE of their periods: they ran at their
      budget, so the result is the emulated CPU's (not a fault: the point of a budget), `throttled_share_max`.
    None where the run had no enforced budget (or, on Docker, no per-process scheduler reading)."""
    out: dict = {"cpu_wait_ms": None, "cpu_wait_unit": None, "budget_bound": None, "throttled_share_max": None}
    if not budget or not budget.get("enforced"):
        return out
    n = float(budget.get("dilation") or 1.0)
    waits, shares, bound = [], [], 0
    for unit, u in (budget.get("units") or {}).items():
        r = u.get("run") or {}
        periods, throttled = r.get("nr_periods") or 0, r.get("nr_throttled") or 0
        share = throttled / periods if periods else 0.0
        shares.append(share)
        bound += share > BUDGET_BOUND_SHARE
        waited, slices = r.get("run_delay_s"), r.get("timeslices")
        if isinstance(waited, (int, float)) and isinstance(slices, int) and slices > 0:
            beyond = max(0.0, waited - (r.get("throttled_s") or 0.0))
            waits.append((beyond / slices / n * 1000, unit))
    if waits:
        out["cpu_wait_ms"], out["cpu_wait_unit"] = max(waits)
    if shares:
        out["throttled_share_max"] = max(shares)
        out["budget_bound"] = bound
    return out


def member_cores_each(manifest: dict, members: int) -> float | None:
    """Real cores per member the run's member processes used (`member_cpu.run_cores`, from the common start to the
    stop, else `cores`, over their lifetime) / members, or None when the run did not measure it (older runs,
    Docker, hosts). Pure."""
    m = manifest.get("member_cpu") or {}
    cores = m.get("run_cores", m.get("cores"))      # over the run (from the common start) when measured
    if not isinstance(cores, (int, float)) or members <= 0:
        return None
    return cores / members
