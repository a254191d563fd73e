"""analysis.figures_pbcast (Figures 1 and 12): the script declares its columns from the tradvsync / vsync
plug-ins' run_values (their numbers are tested in tests/analysis/test_pbcast_values.py), keeps every run (an
excluded one with the reason), aggregates over repetitions with Student-t intervals, draws, and regenerates its
tables from a runs.csv alone — the committed results byte for byte; and one check that the plug-in's Spark
throughput tables give the run_values' numbers on the same log."""
from __future__ import annotations

import csv
import json
import random
import statistics
from pathlib import Path

import pytest

from analysis import figlib
from analysis import figures_pbcast as fp
from tests.analysis.test_pbcast_values import fig1_log, make_run, started

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"


def run(d: Path, protocol: str, p: float, scale: float = 1.0, seed: int = 1, **kw) -> Path:
    """The hand-made Figure 1 log (test_pbcast_values.fig1_log: 10 msgs/s at the unperturbed members) as a run of
    `protocol`; at p = 0 without the perturbation; `scale` < 1 drops every 10th delivery at h0, h3, h4."""
    ev = fig1_log(perturb=bool(p))
    if scale != 1.0:
        ev = [e for e in ev if not (e["event"] == "data_received" and e["node"] in ("h0", "h3", "h4")
                                    and e["seq"] % 10 == 0)]
    sched = [{"at": "1s", "action": "perturb", "nodes": ["h5"], "p": p, "duration": "5s"}] if p else []
    return make_run(d, ev, 6, protocol, section={"window": 5, "sender_buffer": 5}, schedule=sched,
                    workload={"rate_per_s": 10}, seed=seed, **kw)


def test_rows_aggregate_tables_and_figures(tmp_path):
    pytest.importorskip("matplotlib")
    faithful = {"verdict": "faithful", "reasons": []}
    for i, (proto, p, scale) in enumerate([("tradvsync", 0.0, 1.0), ("tradvsync", 0.0, 0.9), ("tradvsync", 0.3, 1.0),
                                           ("vsync", 0.0, 1.0), ("vsync", 0.3, 1.0)]):
        run(tmp_path / "runs" / f"r{i}", proto, p, scale, seed=i, judges=faithful if i != 1 else None)
    run(tmp_path / "runs" / "r5", "tradvsync", 0.3, status="failed: boom")
    make_run(tmp_path / "runs" / "r6", started(3), 3, "pbcast")
    out = tmp_path / "out"
    load = tmp_path / "load.log"
    load.write_text(f"{1000.0} 2.0 1 1\n{1030.0} 4.0 1 1\n")
    assert fp.main([str(tmp_path / "runs"), "--out", str(out), "--load", str(load)]) == 0
    for f in ("runs.csv", "summary.csv", "summary.json", "tables.md", "fig1_fig12.png", "fig12_perturbed.png",
              "summary_faithful.csv", "tables_faithful.md", "fig1_fig12_faithful.png"):
        assert (out / f).stat().st_size > 0, f
    rows = {r["run"]: r for r in figlib.read_csv(out / "runs.csv")}
    # every run kept; the failed one and the pbcast one with the reason
    assert rows["r5"]["excluded"] == "not completed (failed: boom)"
    assert rows["r6"]["excluded"] == "protocol pbcast, not tradvsync or vsync"
    r0 = rows["r0"]
    assert (r0["protocol"], r0["members"], r0["p"], r0["buffer"], r0["offered_per_s"]) == ("tradvsync", 6, 0.0, 5, 10)
    # at p = 0 h5 is set apart (throughput: h0, h2, h3, h4); the plug-in's value counts it: median of 10, 7.1, 10,
    # 10, 4.9 = 10 as well
    assert r0["unperturbed"] == 4 and r0["throughput"] == pytest.approx(10.0)
    assert r0["throughput_plugin"] == pytest.approx(10.0) and r0["throughput_perturbed"] == pytest.approx(17 / 3.5)
    assert r0["load_mean"] == pytest.approx(3.0) and r0["load_max"] == 4.0 and r0["verdict"] == "faithful"
    assert rows["r1"]["verdict"] is None                     # no judges.json: unjudged, never judged again here
    assert rows["r1"]["throughput"] == pytest.approx(32 / 3.5)      # seqs 20, 30, 40 dropped inside the span
    agg = fp.aggregate(list(rows.values()))
    assert [(a["protocol"], a["p"], a["runs"], a["excluded"]) for a in agg] == [
        ("tradvsync", 0.0, 2, 0), ("tradvsync", 0.3, 1, 0), ("vsync", 0.0, 1, 0), ("vsync", 0.3, 1, 0),
        (None, None, 0, 2)]
    a = agg[0]
    assert a["throughput"] == pytest.approx((10.0 + 32 / 3.5) / 2)
    # Student t, 1 degree of freedom: 12.706 * stdev / sqrt(2)
    assert a["throughput_ci95"] == pytest.approx(12.706 * statistics.stdev([10.0, 32 / 3.5]) / 2 ** 0.5, rel=1e-3)
    assert a["unfaithful"] == 0 and a["load_max"] == 4.0
    assert agg[1]["throughput_ci95"] is None and agg[1]["throughput_n"] == 1
    rel = {(r["protocol"], r["p"]): r["relative"] for r in fp.relative(agg)}
    assert rel[("vsync", 0.3)] == pytest.approx(1.0)
    md = (out / "tables.md").read_text()
    assert md.startswith("Offered: 10 msgs/s.") and "| 0.3 |" in md and "tradvsync 6" in md
    assert "| 0 | 9.6 ± 5.4 (2) | 10.0 (1) |" in md
    assert md.endswith("- r5: not completed (failed: boom)\n- r6: protocol pbcast, not tradvsync or vsync\n")
    # the faithful table leaves out the unjudged run r1
    assert "| 0 | 10.0 (1) | 10.0 (1) |" in (out / "tables_faithful.md").read_text()
    # `tables` regenerates the same files from runs.csv alone
    again = tmp_path / "again"
    assert fp.main(["tables", str(out), "--out", str(again)]) == 0
    for f in ("summary.csv", "summary.json", "tables.md", "summary_faithful.csv", "tables_faithful.md"):
        assert (again / f).read_bytes() == (out / f).read_bytes(), f
    assert not (again / "fig1_fig12.png").exists()


@pytest.mark.parametrize("name", ["pbcast-fig1", "pbcast-fig1-iso", "pbcast-fig1q"])
def test_the_committed_tables_regenerate_byte_for_byte(tmp_path, name):
    assert fp.main(["tables", str(RESULTS / name), "--out", str(tmp_path)]) == 0
    for f in ("summary.csv", "summary.json", "tables.md", "summary_faithful.csv", "tables_faithful.md"):
        if (RESULTS / name / f).exists():
            assert (tmp_path / f).read_bytes() == (RESULTS / name / f).read_bytes(), f


def test_the_columns_name_run_values_keys(tmp_path):
    """Every run_values key a column names exists for both protocols (vsync's view changes and drops are vsync's)."""
    from analysis import protocols
    from analysis.rundir import load
    for proto in fp.PROTOCOLS:
        v = protocols.get(proto).run_values(load(run(tmp_path / proto, proto, 0.3)))
        missing = {key for _, key in fp.COLUMNS} - set(v)
        assert missing == (set() if proto == "vsync" else {"view_changes", "dropped"}), proto


def random_log(seed: int = 7) -> list[dict]:
    """A messier log: 8 members, h1 sends ~50/s with jitter for 12 s, h5 perturbed, random losses and delays,
    deliveries near the window edges."""
    rng = random.Random(seed)
    ev = started(8) + [{"ts": 1.2, "node": "orchestrator", "event": "action_applied", "action": "perturb",
                        "op": "stop_signal", "targets": ["h5"]}]
    t = 1.0
    for s in range(1, 600):
        t += rng.uniform(0.01, 0.03)
        ev.append({"ts": t, "node": "h1", "event": "data_sent", "seq": s})
        for m in range(8):
            if m != 1 and rng.random() > (0.4 if m == 5 else 0.05):
                ev.append({"ts": t + rng.choice([0.0005, rng.uniform(0, 0.3)]), "node": f"h{m}",
                           "event": "data_received", "origin": 1, "seq": s})
    return ev


@pytest.mark.spark
def test_run_values_equal_the_spark_throughput_tables(spark, tmp_path):
    from analysis.protocols.pbcast import (FIGURE1_SAMPLES, FIGURE1_WINDOW_S, throughput, throughput_summary,
                                           workload_span)
    from analysis.rundir import load
    run_dir = make_run(tmp_path / "r", random_log(), 8, "tradvsync", shift=0.0)
    v = figlib.projection((("v", "throughput_unperturbed_per_s"),), fp.PROTOCOLS)   # the script's path to the plug-in
    rd = load(run_dir)
    from analysis import protocols
    values = protocols.get("tradvsync").run_values(rd)
    assert v(rd) == {"v": values["throughput_unperturbed_per_s"]}
    rows = [(float(e["ts"]), e["node"], e["event"], e.get("origin"), e.get("seq"), e.get("action"), e.get("targets"),
             json.dumps(e)) for e in rd.events]
    events = spark.createDataFrame(rows, "ts double, node string, event string, origin long, seq long, "
                                         "action string, targets array<string>, raw string")
    first, last = workload_span(events)
    start = first + 1.0
    stop = min(last, start + FIGURE1_SAMPLES * FIGURE1_WINDOW_S)
    fig1 = {r["node"]: r.asDict() for r in throughput_summary(throughput(events, start, stop, FIGURE1_WINDOW_S))
            .collect()}
    per_s = {r["node"]: r["mean_per_s"] for r in throughput_summary(throughput(events, start, last, 1.0)).collect()}
    calm = values["unperturbed_members"]
    assert calm == ["h0", "h2", "h3", "h4", "h6", "h7"] and values["perturbed_members"] == ["h5"]
    assert {r["windows"] for r in fig1.values()} == {values["throughput_unperturbed_windows"]}
    assert values["throughput_unperturbed_per_s"] == pytest.approx(
        statistics.median(fig1[m]["mean_per_s"] for m in calm), rel=1e-12)
    assert values["throughput_unperturbed_min_per_s"] == pytest.approx(min(fig1[m]["mean_per_s"] for m in calm),
                                                                       rel=1e-12)
    assert values["throughput_perturbed_per_s"] == pytest.approx(fig1["h5"]["mean_per_s"], rel=1e-12)
    assert values["throughput_unperturbed_1s_per_s"] == pytest.approx(statistics.median(per_s[m] for m in calm),
                                                                      rel=1e-12)


def test_buffer_model():
    assert fp.buffer_model(0.0) == 1.0
    for p in (0.1, 0.3, 0.5):
        assert fp.buffer_model(p) == pytest.approx(1 - p * p, abs=1e-9)
    # a buffer of 0 loses exactly the sleeping time (fraction p); a longer buffer or a slower ack move it
    assert fp.buffer_model(0.3, buffer_s=0.0) == pytest.approx(0.7, abs=1e-9)
    assert fp.buffer_model(0.3, buffer_s=0.2) > fp.buffer_model(0.3) > fp.buffer_model(0.3, ack_s=0.02)


def test_runs_csv_is_one_row_per_run(tmp_path):
    run(tmp_path / "runs" / "a", "vsync", 0.3)
    out = tmp_path / "out"
    assert fp.main([str(tmp_path / "runs" / "a"), "--out", str(out)]) == 0
    (row,) = list(csv.DictReader((out / "runs.csv").open()))
    assert row["run"] == "a" and row["protocol"] == "vsync" and row["view_changes"] == "0" and row["dropped"] == "[]"
    assert json.loads((out / "summary.json").read_text())["runs"] == 1
