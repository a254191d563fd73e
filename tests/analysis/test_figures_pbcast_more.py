"""analysis.figures_pbcast_more (Figure 4, the bimodal histogram) and analysis.figures_vsync (Figure 10, Table 2):
the scripts declare their columns from the pbcast / vsync plug-ins' run_values (the numbers are tested in
tests/analysis/test_pbcast_values.py); the least-squares fits on points that lie exactly on a + b log2 n; the
aggregates with Student-t intervals; the command line of the four kinds on synthetic run directories; the tables
regenerated from a runs.csv alone — the committed results byte for byte."""
from __future__ import annotations

import csv
import json
import math
import statistics
from pathlib import Path

import pytest

from analysis import figures_pbcast_more as fm
from analysis import figures_vsync as fv
from analysis.protocols.pbcast_values import packing_of
from tests.analysis.test_pbcast_values import (bimodal_log, make_run, recv, sent, started, stopped, vsync_log,
                                               vsync_section)

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"


def test_fits_on_exact_log_points_and_the_linear_alternative():
    ns = [8, 16, 32, 64]
    ys = [2 + 3 * math.log2(n) for n in ns]                # 11, 14, 17, 20
    f = fm.fits(ns, ys)
    assert f["log2"]["a"] == pytest.approx(2.0) and f["log2"]["b"] == pytest.approx(3.0)
    assert f["log2"]["r2"] == pytest.approx(1.0)
    # linear by hand: mean n 30, mean y 15.5, Sxx 1840, Sxy 276 -> b 0.15, a 11; residuals -1.2, 0.6, 1.2, -0.6:
    # SSE 3.6, SST 45 -> R^2 0.92
    assert f["linear"]["b"] == pytest.approx(0.15) and f["linear"]["a"] == pytest.approx(11.0)
    assert f["linear"]["r2"] == pytest.approx(0.92)
    assert f["linear"]["n"] == 4
    one = fm.fit_line([5, 5], [1, 2])
    assert one["b"] is None and one["r2"] is None


def test_aggregate_student_t_and_tables():
    runs = [{"k": 2, "offered_per_s": 100, "buffer": 20, "own_mean_ms": 2.0, "throughput_1s": 98.0},
            {"k": 2, "offered_per_s": 100, "buffer": 20, "own_mean_ms": 3.0, "throughput_1s": 97.0},
            {"k": 1, "offered_per_s": 100, "buffer": 15, "own_mean_ms": 1.5, "throughput_1s": None},
            {"k": 1, "offered_per_s": 100, "buffer": 15, "own_mean_ms": 9.0, "excluded": "unfaithful: lag"}]
    agg = fv.aggregate("table2", runs)
    assert [(a["k"], a["runs"], a["excluded"]) for a in agg] == [(1, 1, 1), (2, 2, 0)]
    assert agg[1]["own_mean_ms"] == pytest.approx(2.5)
    # Student t with 1 degree of freedom: 12.706 * stdev / sqrt(2) = 12.706 * 0.7071 / 1.4142 = 6.353
    assert agg[1]["own_mean_ms_ci95"] == pytest.approx(12.706 * statistics.stdev([2.0, 3.0]) / 2 ** 0.5, rel=1e-3)
    assert agg[0]["own_mean_ms_ci95"] is None and agg[0]["throughput_1s_n"] == 0 and agg[0]["own_mean_ms"] == 1.5
    md = fv.markdown("table2", agg)
    assert "| 2 | - | 2 | 2.50 ± 6.35 (2) | 1.68 |" in md and "192.09" in md
    b = fm.aggregate("bimodal", [{"members": 6, "crash_fraction": 0.25, "loss": "5%", "hist_all": [1, 2],
                                  "hist_last": [0, 1], "messages": 3},
                                 {"members": 6, "crash_fraction": 0.25, "loss": "5%", "hist_all": [3, 4],
                                  "hist_last": [1, 1], "messages": 7}])
    assert b[0]["hist_all"] == [4, 6] and b[0]["hist_last"] == [1, 2] and b[0]["messages"] == 5.0
    assert "excluded" not in b[0]                   # the column appears when a run is excluded


# --- the command line of the four kinds on synthetic run directories ------------------------------------------------

def log_overhead(n: int) -> list[dict]:
    """n members, h1 sends 4 multicasts, every member's overhead is 2 + 3 log2 n digests per multicast."""
    per = int(2 + 3 * math.log2(n))
    ev = started(n) + [sent(s, 1.0 + s) for s in range(1, 5)]
    ev += [recv(f"h{i}", s) for i in range(n) if i != 1 for s in range(1, 5)]
    return ev + [stopped(f"h{i}", sent_digest=4 * per) for i in range(n)]


def same_tables(out: Path, kind: str, tmp: Path) -> None:
    """`tables` regenerates summary.csv/.json and tables.md from out/runs.csv, byte for byte, without figures."""
    again = tmp / f"again-{kind}"
    assert fm.main(["tables", kind, str(out), "--out", str(again)]) == 0
    for f in ("summary.csv", "summary.json", "tables.md"):
        assert (again / f).read_bytes() == (out / f).read_bytes(), f
    assert not list(again.glob("*.png"))


def test_cli_all_four(tmp_path):
    pytest.importorskip("matplotlib")
    faithful = {"verdict": "faithful", "reasons": []}
    d4 = [make_run(tmp_path / f"f4-{n}-{s}", log_overhead(n), n, loss=0.001, workload={"rate_per_s": 20}, seed=s,
                   judges=faithful) for n in (4, 8, 16) for s in (1, 2)]
    out = tmp_path / "out4"
    assert fm.main(["fig4", *map(str, d4), "--out", str(out)]) == 0
    for f in ("runs.csv", "summary.csv", "summary.json", "tables.md", "fig4.png"):
        assert (out / f).stat().st_size > 0, f
    s = json.loads((out / "summary.json").read_text())
    # overhead 8, 11, 14 at n = 4, 8, 16: exactly 2 + 3 log2 n
    assert [p["overhead"] for p in s["points"]] == pytest.approx([8.0, 11.0, 14.0])
    fit = s["fits"]["runs"]["overhead"]["log2"]
    assert (fit["a"], fit["b"], fit["r2"]) == pytest.approx((2.0, 3.0, 1.0))
    assert s["fits"]["faithful"]["overhead"]["log2"]["n"] == 6
    assert s["fits"]["runs"]["overhead"]["linear"]["r2"] < 1.0
    rows = list(csv.DictReader((out / "runs.csv").open()))
    assert len(rows) == 6 and rows[0]["members"] == "4" and rows[0]["loss"] == "0.1%"
    assert float(rows[0]["delivery_ratio"]) == pytest.approx(1.0) and rows[0]["multicasts"] == "4"
    assert float(rows[0]["mean_hops"]) == pytest.approx(5 / 3)
    same_tables(out, "fig4", tmp_path)

    sched = [{"at": "6s", "action": "crash", "nodes": ["h1"]}, {"at": "6s", "action": "crash", "fraction": 0.25}]
    db = make_run(tmp_path / "bm", bimodal_log(), 6, section={"first_phase": "none", "gc_c": 2},
                  workload={"rate_per_s": 20}, schedule=sched, loss=0.05)
    load = tmp_path / "load.log"
    load.write_text("1000.0 2.0 1 1\n1030.0 4.0 1 1\n2000.0 50.0 1 1\n")
    out = tmp_path / "outb"
    assert fm.main(["bimodal", str(db), "--out", str(out), "--load", str(load)]) == 0
    row = next(csv.DictReader((out / "runs.csv").open()))
    # seq 7, 8 extrapolated at 20/s (test_pbcast_values)
    assert (row["messages"], row["almost_all"], row["almost_none"], row["between"]) == ("8", "3", "3", "2")
    assert row["crash_fraction"] == "0.25" and row["phase"] == "none" and float(row["load_mean"]) == pytest.approx(3.0)
    assert (out / "bimodal.png").stat().st_size > 0
    assert "| [0.95, 1.00] | 3 | 1 |" in (out / "tables.md").read_text()
    same_tables(out, "bimodal", tmp_path)

    dv = [make_run(tmp_path / f"vs{n}", vsync_log() + [e for e in started(n) if e["id"] >= 4], n, "vsync",
                   section=vsync_section(1), workload={"rate_per_s": 100}) for n in (4, 6)]
    out = tmp_path / "out10"
    assert fm.main(["fig10", *map(str, dv), "--out", str(out)]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert [(p["members"], p["vc_mean_s"], p["refused"]) for p in s["points"]] == [(4, 0.75, 4.0), (6, 0.75, 4.0)]
    assert (out / "fig10.png").stat().st_size > 0
    same_tables(out, "fig10", tmp_path)

    dt = [make_run(tmp_path / f"t2-{k}", vsync_log(), 4, "vsync", section=vsync_section(k),
                   workload={"rate_per_s": 100}) for k in (1, 2)]
    dt.append(make_run(tmp_path / "t2-pb", log_overhead(4), 4))       # not a vsync run: kept, excluded
    out = tmp_path / "out2"
    assert fm.main(["table2", *map(str, dt), "--out", str(out)]) == 0
    md = (out / "tables.md").read_text()
    assert "| 1 | 500ms | 1 | 3.00 (1) | 1.39 | 6.00 (1) | 192.09 | 6.00 | 10.00 (1) | 97.64 |" in md
    assert (out / "table2.png").stat().st_size > 0
    rows = {r["run"]: r for r in csv.DictReader((out / "runs.csv").open())}
    assert rows["t2-pb"]["excluded"] == "protocol pbcast, not vsync" and rows["t2-1"]["excluded"] == ""
    assert md.endswith("**runs left out of the aggregates**\n\n- t2-pb: protocol pbcast, not vsync\n")
    same_tables(out, "table2", tmp_path)


@pytest.mark.parametrize("kind,name", [("fig4", "pbcast-fig4"), ("fig4", "pbcast-fig4-loss1"),
                                       ("bimodal", "pbcast-bimodal"), ("fig10", "pbcast-fig10"),
                                       ("table2", "pbcast-table2")])
def test_the_committed_tables_regenerate_byte_for_byte(tmp_path, kind, name):
    assert fm.main(["tables", kind, str(RESULTS / name), "--out", str(tmp_path)]) == 0
    for f in ("summary.csv", "summary.json", "tables.md"):
        assert (tmp_path / f).read_bytes() == (RESULTS / name / f).read_bytes(), f


def test_the_columns_name_run_values_keys(tmp_path):
    from analysis import protocols
    from analysis.rundir import load
    pb = protocols.get("pbcast").run_values(load(make_run(tmp_path / "pb", bimodal_log(), 6)))
    for kind in fm.KINDS:
        assert {key for _, key in fm.COLUMNS[kind]} <= set(pb), kind
    vs = protocols.get("vsync").run_values(load(make_run(tmp_path / "vs", vsync_log(), 4, "vsync")))
    assert {key for _, key in fv.COLUMNS} <= set(vs)


def test_view_change_model_and_helpers():
    # the last of n - 1 deferrals U(0, D): E[max] = D (n - 1) / n; 8 members, D = 0.5 s: 0.4375 s
    assert fv.vc_model(8, 0.5) == pytest.approx(0.4375) and fv.vc_model(2, 0.5) == pytest.approx(0.25)
    assert [fv.seconds(v) for v in ("500ms", "1s", 0.05, "100us", "2")] == pytest.approx([0.5, 1.0, 0.05, 1e-4, 2.0])
    assert fv.seconds(None) is None
    with pytest.raises(ValueError):
        fv.seconds("soon")
    assert packing_of({"packing": {"mode": "process"}}) == "process" and packing_of({}) == "process"
    assert packing_of({"packing": {"mode": "packed", "members_per_process": 16}}) == "packs of 16"


# --- the bimodal points: the earlier rows, the model beside them (issue #34) ---------------------------------------

def test_an_earlier_bimodal_row_gets_this_definitions_columns_from_its_counters():
    # a committed row counted from the events and the rate: 398 messages, 34 without data_sent of which 0 never
    # received, 5 extrapolated -> 359 logged, 34 received, 0 gap, 5 extrapolated; the rate's estimate the 5
    old = {"members": 32, "messages": 398, "sent_unlogged": 34, "sent_unseen": 0, "sent_extrapolated": 5}
    r = fm.earlier_definition(old)
    assert (r["src_log"], r["src_pcap"], r["src_received"], r["src_gap"], r["src_extrapolated"]) == (359, 0, 34, 0, 5)
    assert (r["crash_mode"], r["source"], r["fanout"], r["round_s"], r["sent_rate_estimate"]) == \
        ("kill", "events+rate", 1, 0.1, 5)
    new = {**old, "source": "pcap", "crash_mode": "silent"}
    assert fm.earlier_definition(new) is new                  # a row of this definition stays as it is
    assert fm.earlier_definition({"run": "x", "excluded": "not completed"})["run"] == "x"


def test_the_model_beside_a_bimodal_point():
    from analysis import pbcast_model
    assert fm.loss_fraction("5%") == pytest.approx(0.05) and fm.loss_fraction(0.01) == 0.01
    assert fm.loss_fraction(None) is None
    a = {"members": 32, "fanout": 1, "gc_c": 2.0, "loss": "5%", "n_crashed": 9, "round_s": 0.1, "phase": "none"}
    m = fm.model_of(a)
    want = pbcast_model.model_histogram(32, 1, 2.0, 0.05, 9, 10)
    assert m["model_one"] == want["from_one"] and m["model_last"] == want["last"]
    assert (m["model_rounds"], m["model_alive"], m["model_window"], m["model_first"]) == (10, 23, 10, 0)
    # a first phase: the chain from the sender alone is not its last second: only `model_one`
    t = fm.model_of({**a, "phase": "tree"})
    assert t["model_last"] is None and t["model_one"] == want["from_one"]
    assert fm.model_of({**a, "fanout": None})["model_one"] is None
    assert fm.model_split([0.1, 0.2, 0.3, 0.4]) == pytest.approx([0.1, 0.5, 0.4])
    # counted from the capture: the messages of the crash's own round (never gossiped) are left out
    c = fm.model_of({**a, "source": "pcap"})
    assert c["model_first"] == 1 and c["model_last"] == pbcast_model.model_histogram(32, 1, 2.0, 0.05, 9, 10, 1)["last"]
    # the table: the model's expected messages in the last second = its probability x the messages measured there
    agg = fm.aggregate("bimodal", [{**a, "crash_fraction": 0.25, "crash_mode": "kill", "source": "events+rate",
                                    "messages": 10, "hist_all": [1] + [0] * 18 + [9],
                                    "hist_last": [1] + [0] * 18 + [9]}])
    md = fm.markdown("bimodal", agg)
    assert f"| [0.00, 0.05) | 1 | 1 | {want['last'][0] * 10:.1f} |" in md
    assert "none, C 2.0, kill, events+rate: model, last 1 s" in md
    # the model's parameters: n, fanout, rounds, loss, crashed, alive, window, then its split
    assert (f"| none, C 2.0, kill, events+rate | 32 | 1 | 10 | 5% | 9 | 23 | 0-9 | {want['from_one'][0]:.4f} | "
            f"{sum(want['from_one'][1:-1]):.4f} | {want['from_one'][-1]:.4f} | {want['last'][0]:.4f} |") in md
