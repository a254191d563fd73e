"""Virtual time and CPU budgets on a real lab (issue #33, docs/virtual-time.md; root, Mininet).

The same small experiment at N = 1 and N = 5: the probe's RTTs, the schedule, the events' timing and the data's
latency agree in virtual time, while the run takes N times longer. Then the budgets: members that try to use a
whole core get their budget, packed members share their pack's. Every bound here holds with the other core busy:
lower bounds the mechanisms guarantee (a timer never fires early, a pause never ends early), and medians against
tolerances far above the noise of a loaded machine (the lab's cgroups outrank other work)."""
from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import pytest

from orchestrator.runner import RunOptions, run

from .helpers import event_lines, lab_namespaces, unique_lab

pytestmark = [pytest.mark.root, pytest.mark.mininet]

# A 4-node tree (h0 the root with children h1 and h3; h2 under h1), the GSGC paper's slow links: serialisation of
# a data packet dominates, so a timing mistake by N would show. h3 sends each message to h0, h1, h2 in that order,
# one packet after the other on its uplink: the k-th waits for k serialisations there, then crosses its hops.
EXPERIMENT = """\
name: {name}
topology: {{kind: tree, nodes: 4, degree: 2}}
links: {{rate: 30kbit, delay: 5ms, queue: 64}}
protocol: {{direct: {{transport: udp}}}}
workload: {{senders: [h3], rate_per_s: 2, size_bytes: 100, start: 0.5s}}
schedule:
  - {{at: 2s, action: pause, nodes: [h2], duration: 1s}}
duration: 5s
time: {{dilation: {n}}}
seed: 3
"""
SER_S, DELAY_S = 142 * 8 / 30_000, 0.005             # 100 + 28 + 14 bytes at 30 kbit/s; 5 ms
ONE_WAY_S = {"h0": SER_S + DELAY_S,                                       # first on the uplink, 1 hop
             "h1": 2 * SER_S + DELAY_S + (SER_S + DELAY_S),               # second, 2 hops
             "h2": 3 * SER_S + DELAY_S + 2 * (SER_S + DELAY_S)}           # third, 3 hops


def _events(run_dir: Path, node: str) -> list[dict]:
    return event_lines(run_dir / "events" / f"{node}.jsonl")


def _run(tmp_path, n: float, text: str = EXPERIMENT, **kw) -> tuple[Path, float]:
    name = unique_lab("vt")
    f = tmp_path / f"{name}.yaml"
    f.write_text(text.format(name=name, n=n, **kw))
    t = time.monotonic()
    run_dir = run(f, RunOptions(out=tmp_path / "runs", probe_links=2, probe_paths=1))
    elapsed = time.monotonic() - t
    assert lab_namespaces(name) == []
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "completed"
    return run_dir, elapsed


def _latencies(run_dir: Path, receiver: str) -> list[float]:
    sent = {e["seq"]: e["ts"] for e in _events(run_dir, "h3") if e["event"] == "data_sent"}
    return [e["ts"] - sent[e["seq"]] for e in _events(run_dir, receiver)
            if e["event"] == "data_received" and e.get("seq") in sent]


@pytest.mark.slow
def test_dilation_5_against_1(tmp_path, state_dir):
    results = {}
    for n in (1, 5):
        run_dir, elapsed = _run(tmp_path, n)
        m = json.loads((run_dir / "manifest.json").read_text())
        fid = json.loads((run_dir / "fidelity.json").read_text())
        results[n] = (run_dir, m, fid)
        assert m["time"]["dilation"] == n
        assert elapsed >= 5 * n                       # the experiment's 5 virtual seconds lasted N x 5 real ones
        # the probe: every one-hop RTT (virtual) near 2 x (delay + serialisation): the delay line's error is
        # ~0.1 ms real per hop, / N in virtual time
        for p in fid["paths"]:
            assert p["received"] >= p["sent"] - 1
            assert abs(p["median_rtt_ms"] - p["expected_rtt_ms"]) < 0.05 * p["expected_rtt_ms"], p
        assert fid["rate"]["error"] is not None and abs(fid["rate"]["error"]) < 0.05
        # the schedule: applied at its virtual times, never early
        ops = [json.loads(x) for x in (run_dir / "events" / "orchestrator.jsonl").read_text().splitlines()]
        applied = [o for o in ops if o.get("event") == "action_applied"]
        assert [(o["op"], o["planned_s"]) for o in applied] == [("stop_signal", 2.0), ("cont_signal", 3.0)]
        assert all(o["actual_s"] >= o["planned_s"] for o in applied)
        # the paused member received nothing for the pause's virtual second
        t0 = m["t0_unix"]
        got = [e["ts"] - t0 for e in _events(run_dir, "h2") if e["event"] == "data_received"]
        assert not [t for t in got if applied[0]["actual_s"] + 0.01 < t < 3.0]
        # the data: sends every 0.5 virtual seconds (a fixed grid: a late send does not move the next), one-way
        # latency as the links say
        sends = [e["ts"] for e in _events(run_dir, "h3") if e["event"] == "data_sent"]
        gaps = [b - a for a, b in zip(sends, sends[1:])]
        assert len(sends) >= 8 and abs(statistics.median(gaps) - 0.5) < 0.02, gaps
        for receiver, one_way in ONE_WAY_S.items():
            lat = _latencies(run_dir, receiver)
            assert len(lat) >= 6
            assert min(lat) >= one_way * 0.99                      # a packet is never early
            assert statistics.median(lat) < one_way * 1.05, (n, receiver, lat)
    # the two runs agree: the same latencies (the pause's late deliveries included), each within the bounds above;
    # at N = 5 the machine's real-time noise is a fifth in virtual time, so its medians are the nearer to the
    # links' formula: within 2 % + 1 ms virtual (CI's loaded machine put N = 1's 3-hop median 4.7 % late, N = 5's
    # 0.1 %, 2026-11-28)
    (r1, _, _), (r5, _, _) = results[1], results[5]
    for receiver, one_way in ONE_WAY_S.items():
        a, b = statistics.median(_latencies(r1, receiver)), statistics.median(_latencies(r5, receiver))
        assert abs(a - b) < 0.05 * one_way, (receiver, a, b)
        assert b - one_way < 0.02 * one_way + 0.001, (receiver, one_way, b)


BUSY = """\
name: {name}
topology: {{kind: tree, nodes: 3, degree: 2}}
links: {{rate: 100mbit, delay: 1ms, queue: 1000}}
protocol: {{direct: {{transport: udp}}}}
workload: {{senders: [h1, h2], rate_per_s: 100000, size_bytes: 64}}
duration: 6s
time: {{dilation: {n}}}
nodes: {{cpu: {cpu}, packing: {packing}}}
seed: 1
"""


@pytest.mark.slow
def test_budgets_hold_for_members_and_packs(tmp_path, state_dir):
    # The senders try to send 100 000 messages a second: each wants a whole core. With cpu 0.1 at N = 2 each
    # process gets 0.05 real cores = 0.1 virtual cores, measured over the run from its cgroup.
    run_dir, _ = _run(tmp_path, 2, BUSY, cpu=0.1, packing="process")
    b = json.loads((run_dir / "manifest.json").read_text())["cpu_budget"]
    assert b["enforced"] and b["dilation"] == 2 and set(b["units"]) == {"h0", "h1", "h2"}
    for unit in ("h1", "h2"):
        r = b["units"][unit]["run"]
        virtual = r["usage_s"] / (r["wall_s"] / 2)
        assert virtual == pytest.approx(0.1, abs=0.01), (unit, r)
        assert r["nr_throttled"] > 0.5 * r["nr_periods"]
    judges = json.loads((run_dir / "judges.json").read_text())
    assert judges["budget_bound"] >= 2 and judges["throttled_share_max"] > 0.5
    # packed: the three members in one process share 3 x 0.1 = 0.3 virtual cores
    run_dir, _ = _run(tmp_path, 2, BUSY, cpu=0.1, packing=3)
    b = json.loads((run_dir / "manifest.json").read_text())["cpu_budget"]
    assert set(b["units"]) == {"pack-0"}
    r = b["units"]["pack-0"]["run"]
    assert b["units"]["pack-0"]["virtual_cores"] == pytest.approx(0.3)
    assert r["usage_s"] / (r["wall_s"] / 2) == pytest.approx(0.3, abs=0.03), r
    # nothing of the budgets is left
    assert not list(Path("/sys/fs/cgroup/cpu").glob("orchestrator/vt*"))
