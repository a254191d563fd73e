"""pbcast alone (not under vsync), which no other lab test runs, once on a real lab (issue #38, "tests that always
test"; Scamp and CyclonAcked, HyParView's baselines, run in test_hyparview_values_spark.py). A small group, a short
run, at dilation 2 with a CPU budget per member (docs/virtual-time.md), so a busy machine cannot decide the outcome;
what is asserted is what the protocol guarantees without failures: every member ran and logged no internal error and
every member delivers every message exactly once."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from .helpers import cli, event_lines, lab_namespaces, unique_lab

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.slow]

MEMBERS = 12


def run(protocol: str, params: dict, workload: dict, tmp: Path, duration: str = "14s") -> Path:
    name = unique_lab(protocol[:2])
    doc = {
        "name": name, "topology": {"kind": "tree", "nodes": MEMBERS, "degree": 4, "members": "all"},
        "links": {"rate": "10mbit", "delay": "1ms", "queue": 1000}, "protocol": {protocol: params},
        "workload": workload, "duration": duration, "seed": 5,
        "time": {"dilation": 2}, "nodes": {"cpu": 0.5, "packing": "process"},
    }
    if protocol == "pbcast":
        doc["multicast"] = {"groups": [{"name": "data", "address": "239.1.30.1"}]}
    f = tmp / f"{name}.yaml"
    f.write_text(yaml.safe_dump(doc))
    r = cli("run", str(f), "--out", str(tmp / "runs"), env_extra={"ORCHESTRATOR_STATE_DIR": str(tmp / "state")},
            timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    assert lab_namespaces(name) == [], "namespaces outlived the run"
    return Path(r.stdout.strip().splitlines()[-1])


def events(run_dir: Path) -> dict[str, list[dict]]:
    return {p.stem: event_lines(p)
            for p in sorted((run_dir / "events").glob("h*.jsonl"))}


def check_ran(run_dir: Path) -> dict[str, list[dict]]:
    m = json.loads((run_dir / "manifest.json").read_text())
    assert m["status"] == "completed"
    evs = events(run_dir)
    assert len(evs) == MEMBERS
    for node, e in evs.items():
        kinds = {x["event"] for x in e}
        assert "node_started" in kinds and "protocol_started" in kinds, node
        assert "error" not in kinds, (node, [x for x in e if x["event"] == "error"][:2])
    return evs


def test_pbcast_alone_delivers_every_message_once(tmp_path):
    wl = {"senders": ["h1"], "rate_per_s": 20, "size_bytes": 200, "start": "1s", "stop": "10s"}
    evs = check_ran(run("pbcast", {"first_phase": "mcast", "group": "data"}, wl, tmp_path))
    sent = [(x["node"], x["seq"]) for x in evs["h1"] if x["event"] == "data_sent"]
    assert len(sent) >= 150
    for node, e in evs.items():
        if node == "h1":
            continue
        got = [(x["origin"], x["seq"]) for x in e if x["event"] == "data_received"]
        assert len(got) == len(set(got)), node                 # never twice
        assert len(set(got)) == len(sent), (node, len(set(got)), len(sent))     # every one (repair fills gaps)
