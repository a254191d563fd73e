"""Figure 2 / Figure 4 of seed 003: overlay.healing's per-cycle grouping, its paper-style cycles to heal and the
reliability of the first cycles after the crash (hand-worked series); analysis/figures_hyparview.py's rows (the
plug-ins' run_values through figlib), the runs it leaves out, its tables from runs.csv alone (the committed ones
byte for byte) and its figures."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis import figlib
from analysis import figures_hyparview as fh
from analysis.hyparview_common import read_runs
from analysis.protocols import overlay
from analysis.protocols.hyparview import PLUGIN
from tests.analysis.test_hyparview_values import T0, hand_worked, make_run

REPO = Path(__file__).resolve().parents[2]


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


def _sweepish(tmp_path):
    """Three runs of the hand-worked log (tests/analysis/test_hyparview_values.py): cyclon f = 0.25 seeds 1 and 2,
    and hyparview seed 1 (its view events renamed `active`)."""
    runs = tmp_path / "runs"
    make_run(runs, "c1", "cyclon", hand_worked(), params={"cycle_s": 0.5}, fraction=0.25, seed=1)
    ev = hand_worked()
    ev["h1"] = [e for e in ev["h1"] if not (e["event"] == "data_received" and e["seq"] == 2)]  # (0, 2) reaches nobody
    make_run(runs, "c2", "cyclon", ev, params={"cycle_s": 0.5}, fraction=0.25, seed=2)
    make_run(runs, "h1", "hyparview", hand_worked("active"), params={"cycle_s": 0.5}, fraction=0.25, seed=1)
    return runs


def test_rows_are_the_plugins_values(tmp_path):
    runs = _sweepish(tmp_path)
    load = [(T0 - 10, 9.0), (T0 + 1, 2.0), (T0 + 15, 4.0), (T0 + 30, 50.0)]     # started_at t0 - 5, ended_at t0 + 20
    rows = {r["run"]: r for r in fh.collect([runs], load)}
    r = rows["c1"]
    assert (r["protocol"], r["fail"], r["seed"], r["crashed"], r["survivors"], r["members"]) == (
        "cyclon", 0.25, 1, 1, 3, 4)
    assert (r["load_mean"], r["load_max"], r["excluded"], r["verdict"]) == (3.0, 4.0, None, None)   # unjudged
    assert (r["false_suspicions_before"], r["suspicions_after"], r["max_hops_before"]) == (1, 1, 3.0)
    assert r["reliability_before"] == 1.0 and r["reliability_after"] == pytest.approx(5 / 6)
    assert r["after_failure"] == pytest.approx([2 / 3, 1.0]) and r["by_cycle"][0]["cycle"] == 2
    assert (r["cycles_to_heal_mean"], r["cycles_to_heal"], r["reliability_after_first"]) == (3, 4, pytest.approx(2 / 3))
    assert rows["c2"]["after_failure"] == pytest.approx([1 / 3, 1.0]) and rows["h1"]["protocol"] == "hyparview"


def test_tables_from_runs_csv_mean_and_ci_per_protocol_and_fraction(tmp_path):
    runs = _sweepish(tmp_path)
    out = tmp_path / "out"
    assert fh.main([str(runs), "--out", str(out)]) == 0
    agg = {r["protocol"]: r for r in figlib.read_csv(out / "summary.csv")}
    assert list(agg) == ["hyparview", "cyclon"]                  # the paper's order
    cyc = agg["cyclon"]
    assert (cyc["fail"], cyc["members"], cyc["runs"]) == (0.25, 4, 2)
    assert cyc["reliability_after"] == pytest.approx((5 / 6 + 2 / 3) / 2)
    # t(0.975, 1) x s / sqrt(2), s = (5/6 - 2/3) / sqrt(2)
    assert cyc["reliability_after_ci95"] == pytest.approx(12.706 * (1 / 6) / 2, rel=1e-4)
    assert (agg["hyparview"]["runs"], agg["hyparview"]["reliability_after_ci95"]) == (1, None)
    cycles = [r for r in figlib.read_csv(out / "per_cycle.csv") if r["protocol"] == "cyclon"]
    assert [(r["cycle"], r["runs"]) for r in cycles] == [(2, 2), (4, 2)]
    assert cycles[0]["reliability"] == pytest.approx((2 / 3 + 1 / 3) / 2)
    text = (out / "tables.md").read_text()
    assert "| f | HyParView | Cyclon |" in text and "| 25 % | 0.833 (1) | 0.750 ± 1.059 (2) |" in text
    assert json.loads((out / "summary.json").read_text())["valid_runs"] == 3
    assert all((out / f).stat().st_size > 1000 for f in ("fig2_reliability.png", "fig3_after_failure.png",
                                                         "fig4_healing.png", "fig2_reliability_first_cycles.png"))
    # `tables` regenerates every table from runs.csv alone, byte for byte
    again = tmp_path / "again"
    assert fh.main(["tables", str(out), "--out", str(again)]) == 0
    for f in ("summary.csv", "per_cycle.csv", "summary.json", "tables.md"):
        assert (again / f).read_bytes() == (out / f).read_bytes(), f


def test_the_committed_tables_regenerate_from_the_committed_runs_csv(tmp_path):
    committed = REPO / "docs" / "results" / "hyparview-fig2"
    assert fh.main(["tables", str(committed), "--out", str(tmp_path)]) == 0
    for f in ("summary.csv", "summary.json", "tables.md"):
        assert (tmp_path / f).read_bytes() == (committed / f).read_bytes(), f
    assert not (tmp_path / "per_cycle.csv").exists()        # the committed runs.csv predates its `by_cycle` column


def test_gossip_model_bounds_and_seeding():
    # every member forwards to every other: all survivors are reached
    assert fh.gossip_model(20, 0.5, view=19, fanout=19, trials=5) == 1.0
    # nobody forwards: the origin alone, 1 of the 10 survivors
    assert fh.gossip_model(20, 0.5, view=19, fanout=0, trials=5) == pytest.approx(0.1)
    # seeded, and fewer live targets reach fewer members
    assert fh.gossip_model(50, 0.4, trials=50, seed=3) == fh.gossip_model(50, 0.4, trials=50, seed=3)
    assert fh.gossip_model(50, 0.2, trials=100) > fh.gossip_model(50, 0.6, trials=100)


def test_runs_left_out_keep_their_row_and_reason(tmp_path, monkeypatch):
    runs = _sweepish(tmp_path)
    make_run(runs, "u", "cyclon", hand_worked(), params={"cycle_s": 0.5}, fraction=0.25, seed=3,
             judges={"verdict": "unfaithful", "reasons": ["cpu starved"]})
    make_run(runs, "x", "cyclon", hand_worked(), fraction=0.25, seed=4, status="failed")
    rows = {r["run"]: r for r in fh.collect([runs])}
    assert rows["u"]["excluded"] == "unfaithful: cpu starved" and rows["u"]["reliability_before"] == 1.0
    assert rows["x"]["excluded"] == "not completed (failed)" and "reliability_before" not in rows["x"]
    assert rows["c1"]["excluded"] is None
    monkeypatch.setattr(fh, "MAX_FALSE_SUSPICIONS", 0)      # the log's one no_ack removal before the crash
    monkeypatch.setattr(fh, "MAX_CRASH_SPREAD_S", 0.1)      # the crash record came 0.2 s after its start
    rows = {r["run"]: r for r in fh.collect([runs])}
    assert rows["c1"]["excluded"] == "the crash took 0.2 s; 1 false suspicions before the crash"
    out = tmp_path / "out"
    figlib.write_csv(out / "runs.csv", list(rows.values()))
    agg, _, n = fh.tables(read_runs(out / "runs.csv"), out)
    assert n == 4 and agg == [] and json.loads((out / "summary.json").read_text())["runs"] == 5
