"""analysis.figures_pbcast: Figure 1's throughput at unperturbed members from hand-made event logs (hand-worked
windows, the unperturbed / perturbed split, the p = 0 run whose would-be target is set apart), aggregation over
repetitions with Student-t intervals, the figures, and one check that the plain-Python throughput equals the
pbcast Spark plug-in's (analysis/protocols/pbcast.py) on the same log."""
from __future__ import annotations

from tests.analysis import synthetic  # noqa: E402

import json
import random
from pathlib import Path

import pytest

from analysis import figures_pbcast as fp


def started(n: int, sender: int = 1) -> list[dict]:
    return [{"ts": 0.5, "node": f"h{i}", "event": "node_started", "id": i, "senders": [sender]} for i in range(n)]


def hand_log() -> list[dict]:
    """6 members, h1 sends 10 msgs/s from t = 1.0 to 5.9 (seq 1..50); the Figure 1 span is [2.0, 5.9): 7 windows of
    500 ms, [2.0, 5.5). h5 is perturbed (an action_applied record) and gets every other message; h2 misses
    everything sent in [3.0, 4.0); the others get every message 10 ms after its send."""
    ev = started(6)
    ev.append({"ts": 1.0, "node": "orchestrator", "event": "action_applied", "action": "perturb", "op": "stop_signal",
               "targets": ["h5"]})
    for s in range(1, 51):
        t = 1.0 + (s - 1) / 10
        ev.append({"ts": t, "node": "h1", "event": "data_sent", "seq": s})
        for m in ("h0", "h2", "h3", "h4", "h5"):
            if m == "h2" and 3.0 <= t < 4.0 or m == "h5" and s % 2:
                continue
            ev.append({"ts": t + 0.01, "node": m, "event": "data_received", "origin": 1, "seq": s})
    return ev


def test_throughput_windows_and_the_unperturbed_members_by_hand():
    t = fp.run_throughput(hand_log())
    assert t["windows"] == 7 and t["span"] == (pytest.approx(2.0), pytest.approx(5.5))
    assert t["senders"] == ["h1"] and t["perturbed"] == ["h5"]
    assert t["unperturbed"] == ["h0", "h2", "h3", "h4"]
    # h0: deliveries at 2.01 .. 5.41 inside [2.0, 5.5): 35 in 3.5 s = 10/s; h2 misses the 10 sent in [3.0, 4.0)
    assert t["per_member"]["h0"] == pytest.approx(10.0)
    assert t["per_member"]["h2"] == pytest.approx(25 / 3.5)
    assert t["throughput"] == pytest.approx(10.0)             # median of 10, 7.14, 10, 10
    assert t["throughput_min"] == pytest.approx(25 / 3.5)
    assert t["per_member"]["h5"] == pytest.approx(17 / 3.5)   # even seqs 12..44 (delivered at 2.11 .. 5.41)
    assert t["throughput_perturbed"] == pytest.approx(17 / 3.5)
    assert t["sent_per_s"] == pytest.approx(10.0)
    # per second: 3 windows of 1 s in [2.0, 5.0) (the last send at 5.9)
    assert t["per_s"] == pytest.approx(10.0)


def test_p0_sets_the_would_be_target_apart_and_no_sends_give_nothing():
    ev = [e for e in hand_log() if e["event"] != "action_applied"]
    plugin = fp.run_throughput(ev)
    assert plugin["unperturbed"] == ["h0", "h2", "h3", "h4", "h5"]
    ours = fp.run_throughput(ev, also_exclude={"h5"})
    assert ours["unperturbed"] == ["h0", "h2", "h3", "h4"]
    assert ours["throughput_perturbed"] == pytest.approx(17 / 3.5)
    none = fp.run_throughput(started(3))
    assert none["throughput"] is None and none["windows"] == 0


def test_at_most_80_windows():
    ev = started(3) + [{"ts": 1.0 + i / 10, "node": "h1", "event": "data_sent", "seq": i} for i in range(600)]
    ev += [{"ts": 1.0 + i / 10, "node": m, "event": "data_received", "origin": 1, "seq": i} for i in range(600)
           for m in ("h0", "h2")]
    t = fp.run_throughput(ev)
    assert t["windows"] == 80 and t["span"] == (pytest.approx(2.0), pytest.approx(42.0))
    assert t["throughput"] == pytest.approx(10.0)


def write_run(d: Path, events: list[dict], protocol: str, p: float, seed: int = 1) -> Path:
    synthetic.write_event_logs(d, events)
    sched = [{"at": "1s", "action": "perturb", "nodes": ["h5"], "p": p, "duration": "5s"}] if p else []
    spec = {"protocol": {protocol: {"window": 5}}, "workload": {"rate_per_s": 10}, "schedule": sched}
    (d / "manifest.json").write_text(json.dumps({"spec": spec, "seed": seed, "status": "completed", "t0_unix": 0.5,
                                                 "started_at": 0.0, "ended_at": 7.0}))
    return d


def test_analyse_runs_aggregate_and_draw(tmp_path):
    runs = []
    for i, (proto, p, scale) in enumerate([("tradvsync", 0.0, 1.0), ("tradvsync", 0.0, 0.9), ("tradvsync", 0.3, 1.0),
                                           ("vsync", 0.0, 1.0), ("vsync", 0.3, 1.0)]):
        ev = hand_log()
        if not p:
            ev = [e for e in ev if e["event"] != "action_applied"]
        if scale != 1.0:             # drop every 10th delivery at h0, h3, h4
            ev = [e for e in ev if not (e["event"] == "data_received" and e["node"] in ("h0", "h3", "h4")
                                        and e["seq"] % 10 == 0)]
        runs.append(fp.analyse_run(write_run(tmp_path / f"r{i}", ev, proto, p, seed=i),
                                   load=[(1.0, 2.0), (3.0, 4.0)]))
    r0 = runs[0]
    assert (r0["protocol"], r0["members"], r0["p"], r0["buffer"], r0["offered_per_s"]) == ("tradvsync", 6, 0.0, 5, 10)
    assert r0["unperturbed"] == 4 and r0["throughput"] == pytest.approx(10.0)
    assert r0["throughput_plugin"] == pytest.approx(10.0)      # h5 counted too: median of 10, 7.1, 10, 10, 4.9
    assert r0["load_mean"] == pytest.approx(3.0) and r0["load_max"] == 4.0
    assert runs[1]["throughput"] == pytest.approx(32 / 3.5)      # seqs 20, 30, 40 dropped inside the span
    agg = fp.aggregate(runs)
    assert [(a["protocol"], a["p"], a["runs"]) for a in agg] == [("tradvsync", 0.0, 2), ("tradvsync", 0.3, 1),
                                                                 ("vsync", 0.0, 1), ("vsync", 0.3, 1)]
    a = agg[0]
    assert a["throughput"] == pytest.approx((10.0 + 32 / 3.5) / 2)
    # Student t, 1 degree of freedom: 12.706 * stdev / sqrt(2)
    import statistics
    assert a["throughput_ci95"] == pytest.approx(12.706 * statistics.stdev([10.0, 32 / 3.5]) / 2 ** 0.5, rel=1e-3)
    assert agg[1]["throughput_ci95"] is None and agg[1]["throughput_n"] == 1
    rel = {(r["protocol"], r["p"]): r["relative"] for r in fp.relative(agg)}
    assert rel[("vsync", 0.3)] == pytest.approx(1.0)
    md = fp.markdown_tables(agg)
    assert "| 0.3 |" in md and "tradvsync 6" in md
    pytest.importorskip("matplotlib")
    out = tmp_path / "out"
    assert fp.main([str(tmp_path / f"r{i}") for i in range(5)] + ["--out", str(out)]) == 0
    for f in ("runs.csv", "summary.csv", "summary.json", "tables.md", "fig1_fig12.png", "fig12_perturbed.png",
              "summary_faithful.csv", "tables_faithful.md"):
        assert (out / f).stat().st_size > 0, f


def random_log(seed: int = 7) -> list[dict]:
    """A messier log: 8 members, h1 sends ~50/s with jitter for 12 s, h5 perturbed, random losses and delays,
    deliveries near the window edges."""
    rng = random.Random(seed)
    ev = started(8)
    ev.append({"ts": 1.2, "node": "orchestrator", "event": "action_applied", "action": "perturb",
               "op": "stop_signal", "targets": ["h5"]})
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
def test_plain_python_equals_the_spark_plugin(spark):
    from analysis.protocols.pbcast import (FIGURE1_SAMPLES, FIGURE1_WINDOW_S, common_summary, disturbed, throughput,
                                           throughput_summary, workload_span)
    ev = random_log()
    rows = [(float(e["ts"]), e["node"], e["event"], e.get("origin"), e.get("seq"), e.get("action"), e.get("targets"),
             json.dumps(e)) for e in ev]
    events = spark.createDataFrame(rows, "ts double, node string, event string, origin long, seq long, "
                                         "action string, targets array<string>, raw string")
    # what common_metrics does, without the capture's load table
    first, last = workload_span(events)
    start = first + 1.0
    stop = min(last, start + FIGURE1_SAMPLES * FIGURE1_WINDOW_S)
    fig1 = [r.asDict() for r in throughput_summary(throughput(events, start, stop, FIGURE1_WINDOW_S)).collect()]
    per_s = [r.asDict() for r in throughput_summary(throughput(events, start, last, 1.0)).collect()]
    d = {"disturbed": [r.asDict() for r in disturbed(events).collect()], "senders": ["h1"], "fig1": fig1,
         "per_s": per_s, "histogram": []}
    s = common_summary(d)
    t = fp.run_throughput(ev)
    assert t["unperturbed"] == s["unperturbed_members"] and t["perturbed"] == s["perturbed_members"]
    assert t["windows"] == s["throughput_unperturbed_windows"]
    assert t["throughput"] == pytest.approx(s["throughput_unperturbed_per_s"], rel=1e-12)
    assert t["throughput_min"] == pytest.approx(s["throughput_unperturbed_min_per_s"], rel=1e-12)
    assert t["throughput_perturbed"] == pytest.approx(s["throughput_perturbed_per_s"], rel=1e-12)
    assert t["per_s"] == pytest.approx(s["throughput_unperturbed_1s_per_s"], rel=1e-12)
    for r in fig1:
        assert t["per_member"][r["node"]] == pytest.approx(r["mean_per_s"], rel=1e-12), r["node"]


def test_buffer_model():
    assert fp.buffer_model(0.0) == 1.0
    for p in (0.1, 0.3, 0.5):
        assert fp.buffer_model(p) == pytest.approx(1 - p * p, abs=1e-9)
    # a buffer of 0 loses exactly the sleeping time (fraction p); a longer buffer or a slower ack move it
    assert fp.buffer_model(0.3, buffer_s=0.0) == pytest.approx(0.7, abs=1e-9)
    assert fp.buffer_model(0.3, buffer_s=0.2) > fp.buffer_model(0.3) > fp.buffer_model(0.3, ack_s=0.02)
