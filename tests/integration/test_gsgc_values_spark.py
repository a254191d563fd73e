"""The Spark path equals run_values on a real GSGC run (issue #38): a small lab run (12 members of a degree-4 tree,
1 Mbit/s links, b = 2 every 500 ms, three senders, one member crashed half way; dilation 2, half a core each, so a
busy machine cannot decide the outcome) analysed as `orchestrator analyze` does (analysis.run.analyze_run); then
GSGC's Spark transforms, the report's tables, agree with the plug-in's pure run_values:

- per round (level, group, round): the first start, who constructed S and when, TPR, steps, the members that
  completed it and their own means (`tpr` against `event_rounds`), and the global rounds' summary (`tpr_summary`)
  against the key numbers;
- per data message the members counted and reached and the stable time (`time_to_stable` against
  `stable_messages`), and its summary against tts_*;
- per (crash, observer) the first declaration (`failure_detection` against `detections`), the crashes, observers
  and latencies, and the false declarations;
- the generic delivery summary (messages, delivery ratio, latency) against the generic values;
- summary.json carries run_values, and the gossip traffic only Spark has.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from analysis.protocols import gsgc, gsgc_values
from analysis.rundir import load

from .helpers import cli, lab_namespaces, unique_lab

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.spark, pytest.mark.slow]

MEMBERS = 12


def lab_run(tmp: Path) -> Path:
    name = unique_lab("gv")
    doc = {
        "name": name, "topology": {"kind": "tree", "nodes": MEMBERS, "degree": 4, "members": "all"},
        "links": {"rate": "1mbit", "delay": "5ms", "queue": 1000},
        "protocol": {"gsgc": {"subgroup": 2, "step": "500ms", "fail_k": 8}},
        "workload": {"senders": 3, "rate_per_s": 1, "size_bytes": 64, "start": "2s", "stop": "14s"},
        "schedule": [{"at": "9s", "action": "crash", "count": 1}],
        "duration": "18s", "seed": 7, "time": {"dilation": 2}, "nodes": {"cpu": 0.5, "packing": "process"},
    }
    f = tmp / f"{name}.yaml"
    f.write_text(yaml.safe_dump(doc))
    r = cli("run", str(f), "--out", str(tmp / "runs"), env_extra={"ORCHESTRATOR_STATE_DIR": str(tmp / "state")},
            timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert lab_namespaces(name) == [], "namespaces outlived the run"
    return Path(r.stdout.strip().splitlines()[-1])


def same(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    return a == b


def differences(spark_rows: dict, pure_rows: dict, fields: tuple[str, ...]) -> dict:
    """key -> {field: (Spark, run_values)} where they differ; keys only one side has, as such."""
    out: dict = {k: "only in Spark" for k in spark_rows.keys() - pure_rows.keys()}
    out.update({k: "only in run_values" for k in pure_rows.keys() - spark_rows.keys()})
    for k in spark_rows.keys() & pure_rows.keys():
        d = {f: (spark_rows[k][f], pure_rows[k][f]) for f in fields if not same(spark_rows[k][f], pure_rows[k][f])}
        if d:
            out[k] = d
    return out


def test_the_spark_path_equals_run_values(spark, tmp_path):
    from analysis.run import analyze_run

    run = load(lab_run(tmp_path))
    res = analyze_run(spark, run)
    fresh = load(run.path)
    v = gsgc.PLUGIN.run_values(fresh)
    assert res.values == v
    assert v["tpr_rounds"] >= 3 and v["tts_messages"] > 5 and v["crashes"] == 1 and v["fd_observers"] >= 1, v
    d = res.data

    # per round, and the global rounds' summary
    pure = {(r["level"], r["group"], r["round"]): r
            for r in gsgc_values.event_rounds(fresh.events, {m.name: m.local_group for m in fresh.members})}
    spark_rounds = {(r["level"], r["group"], r["round"]): r for r in d["tpr"]}
    assert differences(spark_rounds, pure, ("started_ts", "constructed_ts", "constructed_by", "tpr_s", "steps",
                                            "members_completed", "member_tpr_mean_s", "steps_mean")) == {}
    g = next(r for r in d["tpr_summary"] if r["level"] == "global")
    assert differences({0: {"tpr_rounds": g["rounds"], **{k: g[k] for k in (
        "tpr_mean_s", "tpr_std_s", "steps_mean", "steps_std", "member_tpr_mean_s")}}}, {0: v},
        ("tpr_rounds", "tpr_mean_s", "tpr_std_s", "steps_mean", "steps_std", "member_tpr_mean_s")) == {}

    # time to stable, per message and summarised
    life = gsgc_values.lives(fresh)
    pure = {(r["origin"], r["seq"], r["sent_ts"]): r for r in gsgc_values.stable_messages(fresh, life)}
    spark_tts = {(r["origin"], r["seq"], r["sent_ts"]): r for r in d["tts"]}
    assert differences(spark_tts, pure, ("members", "members_reached", "stable_ts", "time_to_stable_s")) == {}
    t = d["tts_summary"]
    assert differences({0: {"tts_messages": t["messages"], "tts_stable": t["stable"], "tts_mean_s": t["mean_s"],
                            "tts_median_s": t["median_s"], "tts_p90_s": t["p90_s"], "tts_max_s": t["max_s"]}},
                       {0: v}, ("tts_messages", "tts_stable", "tts_mean_s", "tts_median_s", "tts_p90_s",
                                "tts_max_s")) == {}

    # failure detection and false declarations
    pure = {(r["member"], r["crash_ts"], r["observer"]): r for r in gsgc_values.detections(fresh, life)}
    spark_fd = {(r["member"], r["crash_ts"], r["observer"]): r for r in d["fd"]}
    assert differences(spark_fd, pure, ("declared_ts", "latency_s")) == {}
    lat = [r["latency_s"] for r in d["fd"] if r["latency_s"] is not None]
    assert (len(d["fd_summary"]), len(d["fd"]), len(lat)) == (v["crashes"], v["fd_observers"], v["fd_detected"])
    assert sum(r["declarations"] for r in d["false_declarations"]) == v["false_declarations"]

    # the generic Spark delivery summary against the generic values run_values carries
    ds = res.delivery_summary
    keys = ("delivery_ratio_mean", "delivery_ratio_min", "latency_median_s", "latency_p90_s", "latency_max_s")
    assert differences({0: {"data_messages": ds["messages"], **{k: ds[k] for k in keys}}}, {0: v},
                       ("data_messages", *keys)) == {}

    # summary.json: run_values merged after the Spark summary, which adds the gossip traffic
    summary = json.loads((run.out / "metrics" / "summary.json").read_text())
    assert {k: summary[k] for k in v} == json.loads(json.dumps(v))
    assert summary["gossip_msgs_per_member_s"] > 0 and summary["gossip_bytes_per_member_s"] > 0
