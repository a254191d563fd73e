"""HyParView against Cyclon on a real lab (seed 003 §5.2, reduced): 60 members, 60 % of them crash at once
(SIGKILL); HyParView's reliability after the first few broadcasts stays >= 0.95 while Cyclon's is measurably
lower; HyParView's active views are symmetric before the crash. (The overlay's graph metrics in Spark against
networkx on a real run: test_hyparview_values_spark.py, which runs beside other labs.)"""
from __future__ import annotations

import json
import os
import statistics
from pathlib import Path

import pytest
import yaml

from .helpers import cli, event_lines, lab_namespaces, unique_lab

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.slow]

# HYPARVIEW_IT_MEMBERS: a smaller group where 60 node processes cannot start within the runner's timeout
MEMBERS = int(os.environ.get("HYPARVIEW_IT_MEMBERS", "60"))
CRASH_AT, DURATION = 22.0, 34
SKIP_FIRST = 5           # "after the first few broadcasts": the ones in flight while the crash is detected


def run(protocol: str, params: dict, tmp: Path) -> Path:
    name = unique_lab("hv")
    doc = {
        "name": name, "description": f"{protocol}: {MEMBERS} members, 60 % crash",
        "topology": {"kind": "tree", "nodes": MEMBERS, "degree": 4, "members": "all"},
        "links": {"rate": "10mbit", "delay": "1ms", "queue": 1000},
        "protocol": {protocol: params},
        "workload": {"senders": MEMBERS, "rate_per_s": 4, "size_bytes": 100, "start": "12s", "stop": "32s"},
        "schedule": [{"at": f"{CRASH_AT:g}s", "action": "crash", "fraction": 0.6}],
        "duration": f"{DURATION}s", "seed": 3,
    }
    f = tmp / f"{name}.yaml"
    f.write_text(yaml.safe_dump(doc))
    r = cli("run", str(f), "--out", str(tmp / "runs"), env_extra={"ORCHESTRATOR_STATE_DIR": str(tmp / "state")},
            timeout=170)
    assert r.returncode == 0, r.stderr[-3000:]
    assert lab_namespaces(name) == [], "namespaces outlived the run"
    return Path(r.stdout.strip().splitlines()[-1])


def load(run_dir: Path) -> tuple[dict[str, int], list[dict], dict[str, float]]:
    ids = {json.loads(p.read_text())["name"]: json.loads(p.read_text())["id"]
           for p in (run_dir / "configs").glob("*.json")}
    events = []
    for p in (run_dir / "events").glob("*.jsonl"):
        events += event_lines(p)
    # a crash starts at t0 + actual_s (the record's own ts is when the last target was killed, a second later
    # with 36 targets on a loaded machine)
    t0 = json.loads((run_dir / "manifest.json").read_text())["t0_unix"]
    crashed = {t: t0 + e["actual_s"] for e in events if e.get("event") == "action_applied" and e.get("op") == "crash"
               for t in e["targets"]}
    return ids, events, crashed


def reliability(ids, events, crashed) -> list[tuple[float, float]]:
    """(sent_ts, fraction of the members alive at the send, origin included, that delivered it)."""
    got: dict[tuple[int, int], set[str]] = {}
    for e in events:
        if e.get("event") == "data_received":
            got.setdefault((e["origin"], e["seq"]), set()).add(e["node"])
    out = []
    for e in events:
        if e.get("event") == "data_sent":
            alive = {m for m in ids if m not in crashed or crashed[m] > e["ts"]}
            out.append((e["ts"], len((got.get((ids[e["node"]], e["seq"]), set()) | {e["node"]}) & alive) / len(alive)))
    return sorted(out)


def after_crash(series: list[tuple[float, float]], crash_ts: float) -> list[float]:
    return [r for ts, r in series if ts > crash_ts][SKIP_FIRST:]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hyparview")
    # The paper's view sizes, not the formula's for 60 nodes (ceil(log10 60) + 1 = 3): seed 003 §5, "In all our
    # experiments we have used c = 1 and k = 6. These parameters imply that, for a network of 10.000 nodes, the
    # active views are of size 5 and the passive views of size 30." With 3, the 24 survivors of a 60 % crash split
    # for good in 2 of 13 make test runs (16 + 8: the paper's repair runs only on a failure, and most of the
    # survivors' views were full, so the smaller part's low-priority NEIGHBOR requests were refused).
    return {"hyparview": run("hyparview", {"cycle": "1s", "active_size": 5, "passive_size": 30}, tmp),
            "cyclon": run("cyclon", {"cycle": "1s", "view_size": min(20, MEMBERS - 1),
                                     "shuffle_length": min(8, MEMBERS - 1)}, tmp)}


def test_hyparview_stays_reliable_after_a_60_percent_crash_where_cyclon_does_not(runs):
    values = {}
    for protocol, run_dir in runs.items():
        ids, events, crashed = load(run_dir)
        assert len(crashed) == int(0.6 * MEMBERS)
        after = after_crash(reliability(ids, events, crashed), min(crashed.values()))
        assert len(after) >= 10, f"{protocol}: too few broadcasts after the crash"
        values[protocol] = after
    assert statistics.fmean(values["hyparview"]) >= 0.95 and min(values["hyparview"]) >= 0.9
    assert statistics.fmean(values["cyclon"]) < statistics.fmean(values["hyparview"]) - 0.05


def test_the_active_views_are_symmetric_before_the_crash(runs):
    ids, events, crashed = load(runs["hyparview"])
    t = min(crashed.values()) - 0.5
    views: dict[int, set[int]] = {i: set() for i in ids.values()}
    for e in sorted((e for e in events if e.get("event") == "view_changed" and e.get("view") == "active"
                     and e["ts"] <= t), key=lambda e: (e["ts"], e["change"])):
        (views[ids[e["node"]]].add if e["op"] == "add" else views[ids[e["node"]]].discard)(e["peer"])
    assert sum(len(v) for v in views.values()) >= MEMBERS
    assert all(i in views[j] for i in views for j in views[i])
