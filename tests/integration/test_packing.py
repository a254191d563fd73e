"""Packed members end to end on Mininet (root, issue #21): the same 60-member GSGC experiment and seed run once with
20 members per process and once with a process per member. The schedule crashes four members silently (their
traffic dropped, then the member stopped: a pack's member and a process alike) and pauses one briefly: in both runs
every survivor declares exactly the crashed members failed, the declaration latencies agree within two gossip
steps, the packed run used three processes, and nothing of either run is left behind."""
from __future__ import annotations

import json
import statistics
import subprocess
from pathlib import Path

import pytest

from .helpers import cli, event_lines, lab_namespaces, unique_lab

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.slow]

STEP_S = 0.5
# The crash at 6 s is declared 5.5-6 s later on a quiet machine (fail_k x step = 6 s); the run goes on 18 s past
# it, three times that, because CI's loaded machine had declared nothing by 12 s past it (2026-11-28)
EXPERIMENT = """\
name: {name}
topology: {{kind: tree, nodes: 80, degree: 4, members: {{count: 60, seed: 3}}}}
links: {{rate: 10mbit, delay: 2ms, queue: 200}}
nodes: {{packing: {packing}}}
protocol:
  gsgc: {{subgroup: 3, step: {step}s, fail_k: 12}}
workload: {{senders: 3, rate_per_s: 1, size_bytes: 64}}
schedule:
  - {{at: 6s, action: crash, count: 4, mode: silent}}
  - {{at: 4s, action: pause, nodes: [{paused}], duration: 1s}}
duration: 24s
capture: {{interfaces: none}}
seed: 11
"""


def _events(run_dir: Path, node: str) -> list[dict]:
    f = run_dir / "events" / f"{node}.jsonl"
    return event_lines(f)


def _run(tmp_path: Path, packing: str, paused: str) -> tuple[Path, dict]:
    name = unique_lab("p")
    f = tmp_path / f"{name}.yaml"
    f.write_text(EXPERIMENT.format(name=name, packing=packing, step=STEP_S, paused=paused))
    r = cli("run", str(f), "--out", str(tmp_path / "runs"), timeout=170)
    assert r.returncode == 0, r.stderr[-3000:]
    run_dir = Path(r.stdout.strip().splitlines()[-1])
    assert lab_namespaces(name) == [], "namespaces outlived the run"
    assert not subprocess.run(["pgrep", "-f", f"gossipnode .*{run_dir}/"], capture_output=True).stdout
    return run_dir, json.loads((run_dir / "manifest.json").read_text())


def _outcome(run_dir: Path) -> tuple[list[str], dict[str, set[str]], dict[str, float]]:
    """(crashed, {survivor: members it declared failed}, {crashed member: median declaration latency})."""
    applied = [json.loads(x) for x in (run_dir / "events" / "orchestrator.jsonl").read_text().splitlines()]
    t0 = next(e["ts"] for e in applied if e["event"] == "run_started")
    members = next(e["members"] for e in applied if e["event"] == "run_started")
    crash = next(e for e in applied if e.get("op") == "crash")
    assert crash["mode"] == "silent" and "errors" not in crash, crash     # cut off, then stopped, in both runs
    crash_ts = t0 + crash["actual_s"]
    ids = {m: _events(run_dir, m)[0]["id"] for m in members}
    names = {i: m for m, i in ids.items()}
    declared: dict[str, set[str]] = {}
    latencies: dict[str, list[float]] = {c: [] for c in crash["targets"]}
    for m in members:
        if m in crash["targets"]:
            continue
        ev = [e for e in _events(run_dir, m) if e["event"] == "declared_failed"]
        declared[m] = {names[e["member"]] for e in ev}
        for e in ev:
            if names[e["member"]] in latencies:
                latencies[names[e["member"]]].append(e["ts"] - crash_ts)
    return crash["targets"], declared, {c: statistics.median(v) for c, v in latencies.items() if v}


def test_packed_and_process_runs_declare_the_same_members_failed_as_fast(tmp_path, state_dir):
    from orchestrator.plan import build_plan
    from orchestrator.spec import parse_experiment

    plan = build_plan(parse_experiment(EXPERIMENT.format(name="x", packing=20, step=STEP_S, paused="h0")))
    paused = plan.members[-1].name          # a member the seeded crash may draw too: paused then crashed is fine

    packed_dir, packed_manifest = _run(tmp_path, "20", paused)
    process_dir, process_manifest = _run(tmp_path, "process", paused)

    assert packed_manifest["packing"]["mode"] == "packed" and packed_manifest["packing"]["processes"] == 3
    assert process_manifest["packing"]["mode"] == "process"
    assert sorted(p.name for p in (packed_dir / "logs").glob("pack-*.log")) == [f"pack-{k}.log" for k in range(3)]
    pids = {_events(packed_dir, m.name)[0]["pid"] for m in plan.members}
    assert len(pids) == 3                                   # 60 members, three processes

    crashed_a, declared_a, lat_a = _outcome(packed_dir)
    crashed_b, declared_b, lat_b = _outcome(process_dir)
    assert crashed_a == crashed_b and len(crashed_a) == 4  # same seed: the same draw
    for run, declared in (("packed", declared_a), ("process", declared_b)):
        wrong = {m: d ^ set(crashed_a) for m, d in declared.items() if d != set(crashed_a)}
        judges = json.loads(((packed_dir if run == "packed" else process_dir) / "judges.json").read_text())
        assert not wrong, (f"{run}: survivors whose declarations differ from the crashed set: {wrong}; "
                           f"judges: {judges['verdict']} {judges['reasons']}, lag p99 {judges['lag_p99_ms']:.0f} ms")
    for c in crashed_a:
        assert abs(lat_a[c] - lat_b[c]) <= 2 * STEP_S, (c, lat_a[c], lat_b[c])
