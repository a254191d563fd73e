"""The Spark path equals run_values on a real run, for overlay protocols of seed 003 (issue #38): a small lab run
with a crash of half the members (12 members, dilation 2, half a core each, so a busy machine cannot decide the
outcome) analysed as `orchestrator analyze` does (analysis.run.analyze_run), for HyParView (the active view), Cyclon,
and the two baselines no other lab test runs, Scamp and CyclonAcked (the partial view). The four labs run at once
(a module fixture: their members' budgets bound what each takes, and the runs are mostly waits), then each test
analyses its run:

- before the crash, with no failure, flooding over the connected overlay reaches nearly everyone;

- the generic Spark delivery per message (metrics/delivery.csv) has the per-broadcast counts of
  overlay.broadcasts, and Spark's delivery summary the generic run_values (messages, delivery ratio, latency);
- overlay's Spark transforms over the analysis' own events table (reliability per broadcast, healing, cycles to
  heal, hops to delivery) equal run_values; so do the graph metrics of the dissemination view before the crash and
  at the end (Spark's BFS against networkx), for one protocol of each view: HyParView's active view and Cyclon's
  partial view (Scamp's and CyclonAcked's partial views go through the same code; a minute of Spark jobs saved);
- summary.json carries run_values.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from analysis import protocols
from analysis.protocols import crash_times, overlay
from analysis.rundir import load
from tests.analysis.test_overlay import differences, same, spark_values

from .helpers import cli, lab_namespaces, runs_together, unique_lab

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.spark, pytest.mark.slow]

MEMBERS = 12
VIEW = {"hyparview": "active", "cyclon": "partial", "scamp": "partial", "cyclonacked": "partial"}
CRASH_S = 13.0


def lab_run(protocol: str, tmp: Path) -> Path:
    name = unique_lab(protocol[:2])
    doc = {
        "name": name, "topology": {"kind": "tree", "nodes": MEMBERS, "degree": 4, "members": "all"},
        "links": {"rate": "10mbit", "delay": "1ms", "queue": 1000}, "protocol": {protocol: {"cycle": "500ms"}},
        "workload": {"senders": MEMBERS, "rate_per_s": 4, "size_bytes": 100, "start": "6s", "stop": "20s"},
        "schedule": [{"at": f"{CRASH_S:g}s", "action": "crash", "fraction": 0.5}],
        "duration": "22s", "seed": 5, "time": {"dilation": 2}, "nodes": {"cpu": 0.5, "packing": "process"},
    }
    f = tmp / f"{name}.yaml"
    f.write_text(yaml.safe_dump(doc))
    r = cli("run", str(f), "--out", str(tmp / "runs"), env_extra={"ORCHESTRATOR_STATE_DIR": str(tmp / "state")},
            timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert lab_namespaces(name) == [], "namespaces outlived the run"
    return Path(r.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """protocol -> a Future of its run directory: the four lab runs started together."""
    return runs_together({p: (lab_run, p) for p in VIEW}, tmp_path_factory.mktemp("overlay"))


@pytest.mark.parametrize("protocol", sorted(VIEW))
def test_the_spark_path_equals_run_values(spark, runs, protocol):
    from analysis import ingest, metrics
    from analysis.run import analyze_run
    from analysis.schemas import EVENTS

    run = load(runs[protocol].result())
    res = analyze_run(spark, run)
    v = protocols.get(protocol).run_values(load(run.path))
    assert res.values == v and v["crashed"] == MEMBERS // 2 and v["broadcasts_after"] > 5

    # the generic Spark delivery, message by message, against the per-broadcast counts run_values is built on
    ids = {m.name: m.id for m in run.members}
    rows = {(r["origin_id"], r["seq"]): r
            for r in overlay.broadcasts(run.events, ids, crash_times(run.events, run.t0))}
    # the group's broadcast rate is 4/s from 6 s (peerview/broadcast.py): 6 s to 12 s, a second before the crash,
    # gives 24 slots (late timers skip a few); every one reaches nearly every member. Scamp less so: a member no
    # partial view holds yet (in-degree 0) hears nothing, and with views of ~log n entries in 12 members one often
    # misses a broadcast (11/12 = 0.917 for most of them in CI's run, mean below 0.95)
    before = [r for r in rows.values() if r["sent_ts"] - run.t0 < CRASH_S - 1.0]
    assert len(before) >= 20, len(before)
    mean_before = sum(r["reliability"] for r in before) / len(before)
    assert mean_before > (0.9 if protocol == "scamp" else 0.95), sorted(r["reliability"] for r in before)
    per_msg = {(r["origin_id"], r["seq"]): r for r in res.delivery}
    assert set(per_msg) == {k for k, r in rows.items() if r["correct"] > 1}     # Spark: a message with receivers
    for k, r in per_msg.items():
        assert (r["members"] + 1, r["received"] + 1) == (rows[k]["correct"], rows[k]["delivered"]), k
        assert same(r["sent_ts"], rows[k]["sent_ts"]), k
    d = res.delivery_summary
    assert differences({"data_messages": d["messages"], **{k: d[k] for k in (
        "delivery_ratio_mean", "delivery_ratio_min", "latency_median_s", "latency_p90_s", "latency_max_s")}}, v) == {}

    # overlay's Spark transforms over the analysis' events table
    events = ingest.read_table(spark, run.out / "events", EVENTS).cache()
    members = metrics.members_frame(spark, run.members)
    crash = metrics.crashes(events, run.t0)
    life = metrics.lifetimes(events, members, crash, run.end)
    graphs = protocol in ("hyparview", "cyclon")
    s = spark_values(run, VIEW[protocol], events, members, crash, life, graphs=graphs)
    if graphs:
        assert s["members_before"] == MEMBERS and s["edges_before"] > 0 and s["members_end"] == MEMBERS // 2
    assert s["reliability_by_cycle"] and differences(s, v) == {}

    # summary.json: the Spark summary with run_values merged
    summary = json.loads((run.out / "metrics" / "summary.json").read_text())
    assert differences({k: summary[k] for k in v}, v) == {}
