"""Figure 2 / Figure 4 metrics of seed 003 without Spark: overlay.healing's per-cycle grouping, its paper-style
cycles to heal and the reliability of the first cycles after the crash (hand-worked series), and
analysis.figures_hyparview's per-broadcast reliability from event logs and aggregation over runs."""
from __future__ import annotations

import json

import pytest

from analysis import figures_hyparview as fh
from analysis.protocols import overlay
from analysis.protocols.hyparview import PLUGIN


def test_healing_groups_by_cycle_since_the_crash_and_finds_the_first_healed_cycle():
    # crash at t = 4 in cycle 10; pre-failure reliability 1.0
    series = [{"sent_ts": 1.0, "reliability": 1.0, "cycle": 9},
              {"sent_ts": 5.0, "reliability": 0.5, "cycle": 9},      # a lagging sender: counted in cycle 0
              {"sent_ts": 5.5, "reliability": 0.7, "cycle": 10},
              {"sent_ts": 6.0, "reliability": 0.9, "cycle": 11},
              {"sent_ts": 7.0, "reliability": 1.0, "cycle": 12},
              {"sent_ts": 7.5, "reliability": 0.995, "cycle": 12},
              {"sent_ts": 8.0, "reliability": 0.8, "cycle": 13},    # relapse: the strict definition waits
              {"sent_ts": 9.0, "reliability": 1.0, "cycle": 14}]
    h = overlay.healing(series, 4.0, 10)
    assert [(g["cycle"], g["broadcasts"]) for g in h["by_cycle"]] == [(0, 2), (1, 1), (2, 2), (3, 1), (4, 1)]
    assert h["by_cycle"][0]["reliability"] == pytest.approx(0.6)
    # window 4: cycles 0-3 average 0.816, 1-4 0.939, 2-5 0.949, 3-6 0.9, 4-7 1.0 >= 1.0 - 0.01
    assert h["cycles_to_heal_mean"] == 4
    assert overlay.healing(series, 4.0, 10, window=1)["cycles_to_heal_mean"] == 2     # cycle 2 alone: 0.9975
    assert h["cycles_to_heal"] == 4                 # every broadcast from cycle 14 on
    assert h["reliability_after_first"] is None and h["broadcasts_after_first"] == 0   # none in [4, 5)
    h2 = overlay.healing(series, 4.0, 10, first_s=2.0)                                   # [4, 6): 5.0, 5.5
    assert (h2["reliability_after_first"], h2["broadcasts_after_first"]) == (pytest.approx(0.6), 2)
    h3 = overlay.healing(series, 4.0, 10, first_s=1.0, first_from=5.2)      # the crash ended at 5.2: 5.5, 6.0
    assert (h3["reliability_after_first"], h3["broadcasts_after_first"]) == (pytest.approx(0.8), 2)
    assert h["reliability_after"] == pytest.approx((0.5 + 0.7 + 0.9 + 1.0 + 0.995 + 0.8 + 1.0) / 7)


def test_cycles_since_the_crash_are_the_senders_own():
    # member a was at cycle 50 at the crash, b at 53 (counters drift on a loaded machine); the median says 51
    rel = [{"origin": "a", "cycle": 51, "reliability": 0.5, "sent_ts": 5.0},
           {"origin": "b", "cycle": 54, "reliability": 1.0, "sent_ts": 5.1},
           {"origin": "c", "cycle": 57, "reliability": 1.0, "sent_ts": 6.0}]      # c: no cycle logged
    rows = overlay.since_crash(rel, {"a": 50, "b": 53})
    assert [r.get("since_crash") for r in rows] == [1, 1, None]
    h = overlay.healing(rows, 4.0, 51)
    assert [(g["cycle"], g["broadcasts"]) for g in h["by_cycle"]] == [(1, 2), (6, 1)]


def test_healing_without_a_crash_cycle_or_never_healed():
    series = [{"sent_ts": 1.0, "reliability": 1.0, "cycle": 1}, {"sent_ts": 5.0, "reliability": 0.5, "cycle": 3}]
    h = overlay.healing(series, 4.0, None)
    assert h["by_cycle"] == [] and h["reliability_after_first"] is None and h["cycles_to_heal_mean"] is None
    h = overlay.healing(series, 4.0, 2)
    assert h["cycles_to_heal_mean"] is None and h["cycles_to_heal"] is None
    assert overlay.healing(series, 4.0, 2, first_s=1.5)["reliability_after_first"] == 0.5


def test_plugin_sweep_values_carry_the_figure_metrics():
    s = {"reliability_after": 0.7, "reliability_after_first": 0.6, "cycles_to_heal_mean": 3, "cycles_to_heal": 5,
         "reliability_before": 0.99, "delivery_ratio_mean": 0.8}
    v = PLUGIN.sweep_values(s, {})
    assert {k for k, _ in PLUGIN.sweep_columns} <= set(v)
    assert (v["reliability_after"], v["reliability_after_first"], v["cycles_to_heal_mean"], v["delivery_ratio"]) \
        == (0.7, 0.6, 3, 0.8)


def _log(tmp_path):
    """4 members; h3 crashes at t0 + 10; h0 broadcasts before (seq 1) and after (seq 2) the crash, h1 after (1)."""
    t0 = 1000.0
    ev = {"orchestrator": [{"ts": t0, "node": "orchestrator", "event": "run_started",
                            "members": ["h0", "h1", "h2", "h3"]},
                           {"ts": t0 + 10.2, "node": "orchestrator", "event": "action_applied", "op": "crash",
                            "actual_s": 10.0, "targets": ["h3"]}]}
    for i in range(4):
        ev[f"h{i}"] = [{"ts": t0 - 1 + 0.1 * i, "node": f"h{i}", "event": "node_started", "id": i}]
        ev[f"h{i}"] += [{"ts": t0 + 0.5 * c, "node": f"h{i}", "event": "cycle", "cycle": c} for c in range(40)
                        if i != 3 or 0.5 * c <= 10]
    ev["h0"] += [{"ts": t0 + 5, "node": "h0", "event": "data_sent", "seq": 1, "cycle": 10},
                 {"ts": t0 + 11, "node": "h0", "event": "data_sent", "seq": 2, "cycle": 22}]
    ev["h1"] += [{"ts": t0 + 12, "node": "h1", "event": "data_sent", "seq": 1, "cycle": 24}]
    ev["h0"] += [{"ts": t0 + t, "node": "h0", "event": "view_changed", "view": "partial", "op": "remove", "peer": 2,
                  "reason": why} for t, why in [(3, "no_ack"), (4, "shuffle"), (11, "no_ack")]]
    for n, o, s, t in [("h1", 0, 1, 5.1), ("h2", 0, 1, 5.1), ("h3", 0, 1, 5.2), ("h1", 0, 2, 11.1),
                       ("h1", 0, 2, 11.3), ("h0", 1, 1, 12.1), ("h2", 1, 1, 12.2), ("h3", 1, 1, 12.3)]:
        ev[n].append({"ts": t0 + t, "node": n, "event": "data_received", "origin": o, "seq": s})
    (tmp_path / "events").mkdir()
    for n, rows in ev.items():
        (tmp_path / "events" / f"{n}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"torn')
    (tmp_path / "manifest.json").write_text(json.dumps({
        "t0_unix": t0, "seed": 3, "status": "completed", "started_at": t0 - 5, "ended_at": t0 + 20,
        "spec": {"protocol": {"cyclon": {}}, "schedule": [{"at": "10s", "action": "crash", "fraction": 0.25}]}}))
    return t0


def test_run_reliability_from_event_logs(tmp_path):
    t0 = _log(tmp_path)
    _, events = fh.read_events(tmp_path)
    rows, crash_ts, crash_cyc, n = fh.run_reliability(events, t0)
    assert (crash_ts, crash_cyc, n) == (t0 + 10.0, 20, 4)
    got = {(r["origin_id"], r["seq"]): (r["delivered"], r["correct"], r["cycle"]) for r in rows}
    # before the crash every member counts; after it h3 does not (its receipt of (1, 1) is a crashed member's)
    assert got == {(0, 1): (4, 4, 10), (0, 2): (2, 3, 22), (1, 1): (3, 3, 24)}
    r = fh.analyse_run(tmp_path, [(t0 - 10, 9.0), (t0 + 1, 2.0), (t0 + 15, 4.0), (t0 + 30, 50.0)])
    assert (r["protocol"], r["fail"], r["seed"], r["crashed"], r["survivors"]) == ("cyclon", 0.25, 3, 1, 3)
    assert (r["load_mean"], r["load_max"]) == (3.0, 4.0)
    assert (r["false_suspicions_before"], r["suspicions_after"]) == (1, 1)
    assert r["reliability_before"] == 1.0 and r["reliability_after"] == pytest.approx((2 / 3 + 1) / 2)
    assert r["after_failure"] == pytest.approx([2 / 3, 1.0])
    assert r["by_cycle"] == [{"cycle": 2, "broadcasts": 1, "reliability": pytest.approx(2 / 3)},
                             {"cycle": 4, "broadcasts": 1, "reliability": 1.0}]
    # the window from cycle 3 (empty) holds cycles 3-6: only cycle 4's broadcast, at 1.0
    # no cycle_s logged: 1 s cycles; the first 2 s after the crash's end (10.2 s) hold (0, 2) and (1, 1)
    assert r["cycles_to_heal_mean"] == 3 and r["reliability_after_first"] == pytest.approx((2 / 3 + 1) / 2)


def test_aggregate_mean_and_ci_per_protocol_and_fraction():
    runs = [{"protocol": "cyclon", "fail": 0.2, "load_mean": 2.0, "reliability_after": x, "cycles_to_heal_mean": c,
             "by_cycle": []} for x, c in [(0.6, 3), (0.8, None)]]
    runs.append({"protocol": "hyparview", "fail": 0.2, "load_mean": None, "reliability_after": 1.0, "by_cycle": []})
    agg = fh.aggregate(runs)
    assert [(a["protocol"], a["runs"]) for a in agg] == [("hyparview", 1), ("cyclon", 2)]
    cyc = agg[1]
    assert cyc["reliability_after"] == pytest.approx(0.7) and cyc["reliability_after_ci95"] == pytest.approx(
        12.706 * 0.1414 / 1.4142, rel=1e-3)
    assert (cyc["cycles_to_heal_mean"], cyc["cycles_to_heal_mean_ci95"], cyc["cycles_to_heal_mean_n"]) == (3, None, 1)
    assert agg[0]["load_mean"] is None and agg[0]["reliability_after_ci95"] is None and cyc["load_mean"] == 2.0


def test_gossip_model_bounds_and_seeding():
    # every member forwards to every other: all survivors are reached
    assert fh.gossip_model(20, 0.5, view=19, fanout=19, trials=5) == 1.0
    # nobody forwards: the origin alone, 1 of the 10 survivors
    assert fh.gossip_model(20, 0.5, view=19, fanout=0, trials=5) == pytest.approx(0.1)
    # seeded, and fewer live targets reach fewer members
    assert fh.gossip_model(50, 0.4, trials=50, seed=3) == fh.gossip_model(50, 0.4, trials=50, seed=3)
    assert fh.gossip_model(50, 0.2, trials=100) > fh.gossip_model(50, 0.6, trials=100)


def test_a_run_whose_failure_detector_fired_on_load_is_left_out(tmp_path, monkeypatch):
    t0 = _log(tmp_path)
    r = fh.analyse_run(tmp_path)
    assert r["valid"] and r["invalid_because"] == "" and r["max_hops_before"] is None   # no hops logged
    monkeypatch.setattr(fh, "MAX_FALSE_SUSPICIONS", 0)      # the log's one no_ack removal before the crash
    r = fh.analyse_run(tmp_path)
    assert not r["valid"] and r["invalid_because"] == "1 false suspicions before the crash"
    assert t0 > 0
