"""The qsm plug-in's two paths on one real run (issue #38): topologies/qsm-small.yaml, shortened — 24 members in two
overlapping groups (three regions), 1 % loss on every link, senders h0 (group a) and h20 (group b), sending 1-10 s
of a 20 s run — analysed by Spark (`analysis.run.analyze_run`). The numbers the plug-in's Spark tables give
(delivery per group, messages, recoveries per way and their latency, ACK latency, the 1 s rate samples' spread,
token rounds) equal `run_values` over the same files, and summary.json carries every run_values key with its value.
Needs root, Mininet and Spark; about three minutes on two idle cores."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis.rundir import load
from tests.analysis.test_qsm_analysis import assert_same, spark_numbers

from .helpers import REPO, cli, lab_namespaces, unique_lab

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.spark, pytest.mark.slow]

DURATION_S = 20
STOP_S = 10


@pytest.fixture(scope="module")
def qsm_small_run(tmp_path_factory) -> Path:
    """One run of qsm-small, shortened, with a unique lab name; asserts it succeeded and left no namespace."""
    tmp = tmp_path_factory.mktemp("qsm-values")
    name = unique_lab("qv")
    text = (REPO / "topologies" / "qsm-small.yaml").read_text()
    for old, new in (("name: qsm-small", f"name: {name}"), ("start: 1s, stop: 21s", f"start: 1s, stop: {STOP_S}s"),
                     ("duration: 30s", f"duration: {DURATION_S}s")):
        assert old in text, old
        text = text.replace(old, new)
    f = tmp / f"{name}.yaml"
    f.write_text(text)
    r = cli("run", str(f), "--out", str(tmp / "runs"), env_extra={"ORCHESTRATOR_STATE_DIR": str(tmp / "state")},
            timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    assert lab_namespaces(name) == [], "namespaces outlived the run"
    return Path(r.stdout.strip().splitlines()[-1])


def test_the_spark_tables_equal_run_values(spark, qsm_small_run):
    from analysis.protocols.qsm import PLUGIN
    from analysis.run import analyze_run

    run = load(qsm_small_run)
    assert run.protocol == "qsm"
    res = analyze_run(spark, run)
    values = PLUGIN.run_values(load(qsm_small_run))        # a fresh load: pure over the run's files
    assert res.values == values
    theirs = spark_numbers(res.data)
    # the run exercised what is compared: both senders sent, losses were recovered, ACKs and tokens came round
    assert values["sender_names"] == ["h0", "h20"] and values["groups"] == 2 and values["members"] == 24
    assert theirs["qsm_messages"] > 0 and theirs["recovered"] > 0 and theirs["ack_latency_mean_s"] is not None
    assert theirs["token_rounds"] > 0 and theirs["rate_std_per_s_mean"] is not None
    assert_same(values, theirs)
    # per (sender, group) messages add up to run_values' messages; each sender sent into its own group only
    tp = res.data["throughput"]
    assert sum(r["messages"] for r in tp) == values["messages"]
    assert {(r["sender"], r["group_name"]) for r in tp} == {("h0", "a"), ("h20", "b")}
    assert set(values["group_throughput"]) == {"a", "b"}
    # summary.json: every run_values key with its value, beside the Spark summary's control overhead
    summary = json.loads((run.out / "metrics" / "summary.json").read_text())
    assert {k: summary.get(k) for k in values} == values
    assert 0 < summary["control_packets_fraction"] < 1 and 0 < summary["control_bytes_fraction_qsm"] < 1
