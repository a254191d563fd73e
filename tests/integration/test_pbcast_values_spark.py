"""The Spark path against run_values on real runs of the pbcast family (issue #38: a protocol's numbers are defined
once, in its plug-in's `run_values`; the Spark tables the report shows must give the same numbers). One lab run of
each protocol — pbcast with one member perturbed and 30 % of the members crashed mid-stream (the user's report:
the delivery histogram must count the members alive at each send), vsync (k = 1, view changes, one member
perturbed), tradvsync (one member perturbed) — analysed in-process (analysis.run.analyze_run, then the report),
and per run:

- the generic Spark per-message delivery table (members alive at the send), binned by tenths, is run_values'
  `delivery_histogram`, and its mean ratio `delivery_ratio_mean`; the report's delivery table shows that histogram;
- the report's per-member throughput tables (Figure 1's 500 ms windows, 1 s windows) give run_values' medians at
  the unperturbed members, the perturbed member's value and the number of windows;
- pbcast: the arrival-phase table's share of repairs is `repair_fraction`; vsync: the Gseq latency table's mean and
  max are `own_`/`gseq_` in ms, the view-change table's durations `view_changes`, `vc_mean_s`, `vc_max_s`.

Small groups at dilation 2 with a CPU budget per member (docs/virtual-time.md), so a busy machine does not decide
the outcome; the comparison holds whatever the runs measured (both sides read the same logs). The three labs run at
once (a module fixture: their members' budgets bound what each takes, and the runs are mostly waits), then each test
analyses its run."""
from __future__ import annotations

import statistics
from collections import Counter
from pathlib import Path

import pytest
import yaml

from .helpers import cli, lab_namespaces, runs_together, unique_lab

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.spark, pytest.mark.slow]

MEMBERS = 10
WORKLOAD = {"senders": ["h1"], "rate_per_s": 50, "size_bytes": 64, "start": "1s", "stop": "10s"}
PERTURB = {"at": "2s", "action": "perturb", "nodes": ["h5"], "p": 0.3, "duration": "7s"}
CRASH = {"at": "5s", "action": "crash", "nodes": ["h7", "h8", "h9"]}         # 30 % of the members, mid-stream


def lab_run(protocol: str, params: dict, schedule: list[dict], tmp: Path) -> Path:
    name = unique_lab(protocol[:2])
    doc = {
        "name": name, "topology": {"kind": "tree", "nodes": MEMBERS, "degree": 4, "members": "all"},
        "links": {"rate": "10mbit", "delay": "1ms", "loss": "1%", "queue": 1000}, "protocol": {protocol: params},
        "workload": WORKLOAD, "schedule": schedule, "duration": "13s", "seed": 3,
        "multicast": {"groups": [{"name": "data", "address": "239.1.31.1"}]},
        "capture": {"interfaces": "access", "snaplen": 128},
        "time": {"dilation": 2}, "nodes": {"cpu": 0.5, "packing": "process"},
    }
    f = tmp / f"{name}.yaml"
    f.write_text(yaml.safe_dump(doc))
    r = cli("run", str(f), "--out", str(tmp / "runs"), env_extra={"ORCHESTRATOR_STATE_DIR": str(tmp / "state")},
            timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert lab_namespaces(name) == [], "namespaces outlived the run"
    return Path(r.stdout.strip().splitlines()[-1])


def analyse(spark, run_dir: Path):
    """(the RunResult of the Spark analysis, the plug-in's run_values, the report's Markdown)."""
    from analysis import protocols
    from analysis.report import run_report
    from analysis.run import analyze_run
    from analysis.rundir import load

    run = load(run_dir)
    res = analyze_run(spark, run)
    values = protocols.get(run.protocol).run_values(load(run_dir))
    md, _html = run_report(res)
    return res, values, Path(md).read_text()


def check_common(res, v: dict, report: str) -> None:
    from analysis.protocols.pbcast_values import delivery_bin

    # the summary carries run_values (analysis/run.py merges them after the Spark plug-in's)
    assert all(res.summary[k] == v[k] for k in v)
    # the delivery fraction: the generic Spark table counts the members alive at each send, as run_values
    hist = Counter(delivery_bin(r["delivery_ratio"]) for r in res.delivery)
    assert {f"{b:.1f}": n for b, n in sorted(hist.items())} == v["delivery_histogram"]
    assert res.delivery_summary["delivery_ratio_mean"] == pytest.approx(v["delivery_ratio_mean"], rel=1e-9)
    assert len(res.delivery) == v["data_messages"]
    for b, n in v["delivery_histogram"].items():
        assert f"| {b} | {n} |" in report
    # Figure 1's throughput from the report's per-member tables
    fig1 = {r["node"]: r for r in res.data["fig1"]}
    per_s = {r["node"]: r["mean_per_s"] for r in res.data["per_s"]}
    calm, pert = v["unperturbed_members"], v["perturbed_members"]
    assert calm and pert == ["h5"]
    assert {fig1[m]["windows"] for m in calm} == {v["throughput_unperturbed_windows"]}
    assert v["throughput_unperturbed_per_s"] == pytest.approx(statistics.median(fig1[m]["mean_per_s"] for m in calm),
                                                              rel=1e-9)
    assert v["throughput_unperturbed_min_per_s"] == pytest.approx(min(fig1[m]["mean_per_s"] for m in calm), rel=1e-9)
    assert v["throughput_perturbed_per_s"] == pytest.approx(fig1["h5"]["mean_per_s"], rel=1e-9)
    assert v["throughput_unperturbed_1s_per_s"] == pytest.approx(statistics.median(per_s[m] for m in calm), rel=1e-9)


RUNS = {
    "pbcast": ({"round": "100ms", "fanout": 1, "gc_c": 2, "mode": "push_pull", "first_phase": "mcast",
                "group": "data"}, [PERTURB, CRASH]),
    "vsync": ({"k": 1, "sender_buffer": 5, "view_period": "4s", "round": "100ms", "first_phase": "mcast",
               "group": "data"}, [PERTURB]),
    "tradvsync": ({"window": 5, "transport": "udp"}, [PERTURB]),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """protocol -> a Future of its run directory: the three lab runs started together."""
    return runs_together({p: (lab_run, p, *RUNS[p]) for p in RUNS}, tmp_path_factory.mktemp("pbcast-family"))


def test_pbcast_spark_equals_run_values_with_crashed_members(spark, runs):
    res, v, report = analyse(spark, runs["pbcast"].result())
    check_common(res, v, report)
    assert v["unperturbed_members"] == ["h0", "h2", "h3", "h4", "h6"]          # h7-h9 crashed, h5 perturbed
    # the crashed members count only for what was sent before their crash: the messages after it are not pulled to
    # 6/9 (bin 0.6), where dividing by every other member put about half of them
    assert v["delivery_histogram"].get("0.6", 0) < 0.1 * v["data_messages"], v["delivery_histogram"]
    assert v["delivered_to_all_fraction"] > 0.8, v["delivery_histogram"]
    by = {r["phase"]: r["deliveries"] for r in res.data["phases"]}
    assert v["repair_fraction"] == pytest.approx(by.get("repair", 0) / sum(by.values()), rel=1e-9)
    assert v["bimodal_crashed"] == ["h7", "h8", "h9"]


def test_vsync_spark_equals_run_values(spark, runs):
    res, v, report = analyse(spark, runs["vsync"].result())
    check_common(res, v, report)
    g = {r["event"]: r for r in res.data["gseq"]}
    assert v["own_n"] == g["own_delivered"]["messages"] > 0
    assert v["own_mean_ms"] == pytest.approx(g["own_delivered"]["mean_s"] * 1000, rel=1e-9)
    assert v["own_max_ms"] == pytest.approx(g["own_delivered"]["max_s"] * 1000, rel=1e-9)
    assert v["gseq_mean_ms"] == pytest.approx(g["gseq_acked"]["mean_s"] * 1000, rel=1e-9)
    durations = [r["duration_s"] for r in res.data["views"] if r["duration_s"] is not None]
    assert v["view_changes"] == len(durations) > 0
    assert v["vc_mean_s"] == pytest.approx(statistics.fmean(durations), rel=1e-9)
    assert v["vc_max_s"] == pytest.approx(max(durations), rel=1e-9)


def test_tradvsync_spark_equals_run_values(spark, runs):
    res, v, report = analyse(spark, runs["tradvsync"].result())
    check_common(res, v, report)
    assert f"{v['refused']} send attempts found the sender's buffer full" in report
