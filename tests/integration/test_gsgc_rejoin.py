"""GSGC rejoin on Mininet (root): topologies/gsgc-partition-heal.yaml -- a subtree of a sparse tree cut off,
then healed -- ends as one group (issue #22 item 8; node_image/README.md, GSGC: Rejoin).

Checked from the run's events: each side declared every member of the other failed during the cut; after the
heal each side readmitted every member of the other within the bound (P + 1) + K steps (tests/node/
test_node_rejoin.py derives it) plus slack for the emulated links and a loaded machine's timers; every member's
failed set is empty when it stops."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from orchestrator.plan import build_plan
from orchestrator.spec import load_experiment

from .helpers import REPO, cli, event_lines, lab_namespaces, unique_lab

pytestmark = [pytest.mark.root, pytest.mark.mininet]

TOPOLOGY = REPO / "topologies" / "gsgc-partition-heal.yaml"
SLACK_S = 5.0  # link delays, scheduling lag of the heal op, timers on a loaded machine (not a wall-clock bound
               # on the protocol: the bound itself is in steps)


def events(run_dir: Path, node: str) -> list[dict]:
    f = run_dir / "events" / f"{node}.jsonl"
    return event_lines(f)


def test_a_healed_partition_ends_as_one_group(tmp_path, state_dir):
    spec = yaml.safe_load(TOPOLOGY.read_text())
    name = unique_lab("g")
    spec["name"] = name
    f = tmp_path / f"{name}.yaml"
    f.write_text(yaml.safe_dump(spec))
    gsgc = spec["protocol"]["gsgc"]
    k, p = gsgc["fail_k"], gsgc["rejoin_probe_steps"]
    step_s = float(re.fullmatch(r"([\d.]+)s", gsgc["step"]).group(1))
    bound_s = (p + 1 + k) * step_s

    r = cli("run", str(f), "--out", str(tmp_path / "runs"), timeout=170)
    assert r.returncode == 0, r.stderr[-3000:]
    run_dir = Path(r.stdout.strip().splitlines()[-1])
    assert lab_namespaces(name) == []

    plan = build_plan(load_experiment(f))
    members = [m.name for m in plan.members]
    ids = {m: i for i, m in enumerate(members)}
    cut_root = next(a["subtree"] for a in spec["schedule"] if a["action"] == "partition")
    inside = {m for m in members if m in set(plan.subtree(cut_root))}
    assert inside and len(inside) < len(members)

    applied = [json.loads(x) for x in (run_dir / "events" / "orchestrator.jsonl").read_text().splitlines()]
    t0 = next(e["ts"] for e in applied if e["event"] == "run_started")
    heal = next(e for e in applied if e.get("action") == "heal")
    heal_ts = t0 + heal["actual_s"]

    delays = []
    for m in members:
        others = {ids[o] for o in members if (o in inside) != (m in inside)}
        ev = events(run_dir, m)
        declared = {e["member"] for e in ev if e["event"] == "declared_failed" and e["ts"] < heal_ts}
        assert declared == others, f"{m} declared {sorted(declared)} during the cut, the other side is {others}"
        readmitted = {e["member"]: e for e in ev if e["event"] == "readmitted" and e["ts"] >= heal_ts}
        assert set(readmitted) == others, f"{m} readmitted {sorted(readmitted)} after the heal, not {others}"
        late = {j: round(e["ts"] - heal_ts, 2) for j, e in readmitted.items() if e["ts"] > heal_ts + bound_s + SLACK_S}
        assert not late, f"{m} readmitted these members later than {bound_s} s + {SLACK_S} s after the heal: {late}"
        assert all(e["after_s"] > 0 and e["declared_ts"] < heal_ts for e in readmitted.values())
        delays += [e["ts"] - heal_ts for e in readmitted.values()]
        stopped = next(e for e in ev if e["event"] == "node_stopped")
        assert stopped["protocol"]["failed"] == [], f"{m} ended with {stopped['protocol']['failed']} failed"
        assert any(e["event"] == "round_completed" and e["ts"] > heal_ts + bound_s for e in ev)
    print(f"readmissions {len(delays)}, {min(delays):.2f}-{max(delays):.2f} s after the heal (bound {bound_s:g} s)")
