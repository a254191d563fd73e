"""analysis.figures_gsgc: the GSGC figures from synthetic points.csv files (hand-worked means and 95 % CIs, runs
without a TPR counted, unfaithful runs counted and kept), the §4.3 window on hand-made curves, the pooling of two
sweep directories, Welch's test of the start phases, the exit-2 path without points.csv, the written files, and the
tables mode (the same files again from the written runs CSV alone)."""
from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from analysis import figures_gsgc as fg
from analysis.stats import welch

COLUMNS = ["point", "group", "c.subgroup", "c.step", "c.start_phase", "c.scheme", "c.n", "c.duration", "rep",
           "status", "run_dir", "unfaithful", "fidelity", "members", "subgroup", "step_s", "tpr_s", "tpr_round0_s",
           "steps_round0", "steps", "rounds", "tpr_all_s", "avg_queue", "max_queue", "queue_drops"]
CI3 = 4.302652729911275 * 2 / math.sqrt(3)      # t975(2) * stdev(30, 32, 34) / sqrt(3) = 4.968


def run(b=3, step="4s", tpr=None, steps=None, rep=0, status="completed", unfaithful=False, phase="per-step",
        scheme=None, n=200, duration="75s") -> dict:
    """One points.csv row as analysis.sweep writes it (tpr None: the empty cell of a run without an S)."""
    group = f"subgroup-{b}_step-{step}_start-phase-{phase}" + (f"_scheme-{scheme}_n-{n}" if scheme else "")
    done = status == "completed"
    step_s = float(step[:-2]) / 1000 if step.endswith("ms") else float(step[:-1])
    return {"point": f"{group}_r{rep}", "group": group, "c.subgroup": b, "c.step": step, "c.start_phase": phase,
            "c.scheme": scheme or "", "c.n": n if scheme else "", "c.duration": duration, "rep": rep,
            "status": status, "run_dir": f"points/{group}_r{rep}/run" if done else "",
            "unfaithful": unfaithful if done else "", "fidelity": ("unfaithful" if unfaithful else "faithful")
            if done else "", "members": n if done else "", "subgroup": b if done else "",
            "step_s": step_s if done else "", "tpr_s": tpr if tpr is not None else "",
            "tpr_round0_s": tpr if tpr is not None else "", "steps_round0": steps if steps is not None else "",
            "steps": steps if steps is not None else "", "rounds": 1 if tpr is not None else 0, "tpr_all_s": "",
            "avg_queue": "", "max_queue": "", "queue_drops": ""}


def not_run(point: str) -> dict:
    return {k: "" for k in COLUMNS} | {"point": point, "rounds": 0}


def write_points(sweep: Path, rows: list[dict]) -> Path:
    (sweep / "analysis").mkdir(parents=True, exist_ok=True)
    with (sweep / "analysis" / "points.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, COLUMNS)
        w.writeheader()
        w.writerows(rows)
    return sweep


def read_csv(path: Path) -> list[dict]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture
def sweep_b3(tmp_path) -> Path:
    """b = 3: at 4 s TPR 30, 32, 34 (steps 9, 8, 7) plus a failed run without a TPR; one run unfaithful; at 9 s
    TPR 28, 30 (steps 3, 3); one selected point not run yet."""
    return write_points(tmp_path / "b3", [
        run(tpr=30, steps=9, rep=0), run(tpr=32, steps=8, rep=1, unfaithful=True), run(tpr=34, steps=7, rep=2),
        run(rep=3, status="failed"),
        run(step="9s", tpr=28, steps=3, rep=0), run(step="9s", tpr=30, steps=3, rep=1),
        not_run("subgroup-3_step-12s_start-phase-per-step_r0")])


def test_mean_and_ci_by_hand_with_runs_without_tpr_and_unfaithful_counted(sweep_b3):
    rows = fg.load_points([sweep_b3])
    agg = {(r["b"], r["step_s"]): r for r in fg.aggregate(rows, ("b", "step_s"))}
    assert set(agg) == {(3, 4.0), (3, 9.0)}                 # the not-run row makes no group
    g = agg[(3, 4.0)]
    assert (g["runs"], g["completed"], g["runs_with_tpr"], g["unfaithful"]) == (4, 3, 3, 1)
    assert g["tpr_mean"] == pytest.approx(32.0)
    assert g["tpr_ci95"] == pytest.approx(CI3, rel=1e-9)
    assert g["tpr_ci95"] == pytest.approx(4.968, abs=1e-3)
    assert g["steps_mean"] == pytest.approx(8.0)            # steps 9, 8, 7: stdev 1
    assert g["steps_ci95"] == pytest.approx(4.302652729911275 / math.sqrt(3), rel=1e-9)
    assert g["members"] == [200] and g["durations"] == ["75s"]
    g9 = agg[(3, 9.0)]
    assert (g9["runs"], g9["runs_with_tpr"], g9["tpr_mean"]) == (2, 2, pytest.approx(29.0))
    assert g9["tpr_ci95"] == pytest.approx(12.706204736174698 * math.sqrt(2) / math.sqrt(2), rel=1e-9)
    assert g9["steps_ci95"] == pytest.approx(0.0)
    assert [r["point"] for r in fg.not_run(rows)] == ["subgroup-3_step-12s_start-phase-per-step_r0"]


def test_coordinates_come_from_the_sweep_axes_when_a_run_has_no_summary():
    r = fg.normalise({"group": "g", "status": "failed", "c.subgroup": "2", "c.step": "700ms", "c.n": "300",
                      "members": "", "subgroup": "", "step_s": "", "tpr_round0_s": ""}, "d")
    assert (r["b"], r["step_s"], r["n"], r["scheme"], r["tpr"], r["ran"]) == (2, pytest.approx(0.7), 300, "global",
                                                                             None, True)
    r = fg.normalise({"group": "", "point": "p"}, "d")
    assert not r["ran"] and r["b"] is None


def test_window_on_a_hand_made_curve():
    curve = [(2, 50.0), (3, 33.5), (4, 31.0), (6, 30.0), (9, 32.5), (12, 34.0), (15, 40.0)]
    w = fg.window(curve, e=0.1)            # f(s) = 30 at 6 s; bound 33: 4 and 9 in, 3 (33.5) and 12 (34) out
    assert (w["s"], w["f_s"]) == (6, 30.0)
    assert w["bound"] == pytest.approx(33.0)
    assert (w["lo"], w["hi"], w["steps_in_window"]) == (4, 9, [4, 6, 9])
    assert w["tpr_max_in_window"] == 32.5
    assert not w["lo_at_edge"] and not w["hi_at_edge"]
    # unordered input; a step without a mean TPR ends the window; the window reaches the grid's end
    w = fg.window([(12, 31.0), (4, 31.0), (6, None), (9, 30.0)], e=0.1)
    assert (w["s"], w["lo"], w["hi"], w["hi_at_edge"], w["lo_at_edge"]) == (9, 9, 12, True, False)
    # a tie takes the smaller step; a wider e takes more of the curve
    assert fg.window([(4, 30.0), (6, 30.0), (9, 40.0)], e=0.1)["s"] == 4
    assert fg.window(curve, e=0.2)["steps_in_window"] == [3, 4, 6, 9, 12]
    assert fg.window([(4, None)]) is None


def test_windows_per_b_from_the_aggregate(sweep_b3):
    agg = fg.aggregate(fg.load_points([sweep_b3]), ("b", "step_s"))
    (w,) = fg.windows_per_b(agg)
    # means 32 at 4 s, 29 at 9 s: s = 9, bound 31.9, 32 is above it
    assert (w["b"], w["s"], w["f_s"], w["lo"], w["hi"]) == (3, 9.0, pytest.approx(29.0), 9.0, 9.0)
    assert w["hi_at_edge"] and w["grid"] == [4.0, 9.0]


def test_two_directories_merge(tmp_path):
    a = write_points(tmp_path / "a", [run(tpr=30, steps=9, rep=0), run(tpr=32, steps=9, rep=1)])
    b = write_points(tmp_path / "b", [run(tpr=34, steps=9, rep=0, duration="120s"),
                                      run(b=2, tpr=40, steps=12, rep=0, duration="120s")])
    out = tmp_path / "out"
    assert fg.main(["fig6", str(a), str(b), "--out", str(out)]) == 0
    rows = {(r["b"], r["step_s"]): r for r in read_csv(out / "fig6.csv")}
    assert set(rows) == {("2", "4.0"), ("3", "4.0")}
    r3 = rows[("3", "4.0")]
    assert (r3["runs"], r3["runs_with_tpr"]) == ("3", "3")
    assert float(r3["tpr_mean"]) == pytest.approx(32.0) and float(r3["tpr_ci95"]) == pytest.approx(CI3)
    assert r3["sweeps"] == '["a", "b"]' and r3["durations"] == '["120s", "75s"]'
    assert rows[("2", "4.0")]["tpr_ci95"] == ""                 # one value: no CI
    assert len(read_csv(out / "fig6_runs.csv")) == 4
    md = (out / "fig6.md").read_text()
    assert "several member counts or durations" in md
    assert "32 ± 4.968" in md


def test_fig6_outputs_and_the_paper_marks(sweep_b3, tmp_path):
    out = tmp_path / "fig6"
    assert fg.main(["fig6", str(sweep_b3), "--out", str(out), "--sim", "I"]) == 0
    assert (out / "fig6.png").stat().st_size > 1000
    md = (out / "fig6.md").read_text()
    assert "| 3 | 4 | 4 / 3 / 3 | 32 ± 4.968 | 8 ± 2.484 | 1 | 200 | 75s |" in md
    assert "kept in the numbers" in md
    assert "| 3 (paper) | 9 | 28.6 |" in md and "[4, 10]" in md
    assert "grid points only" in md
    assert "Selected points not run yet (1)" in md and "step-12s" in md
    (w,) = read_csv(out / "fig6_window.csv")
    assert (w["b"], w["s"], w["lo"], w["hi"]) == ("3", "9.0", "9.0", "9.0")
    out2 = tmp_path / "fig8"
    assert fg.main(["fig6", str(sweep_b3), "--out", str(out2), "--sim", "II"]) == 0
    assert (out2 / "fig8.png").stat().st_size > 1000 and "(paper)" not in (out2 / "fig8.md").read_text()


def test_welch_by_hand():
    w = welch([30.0, 32.0, 34.0], [36.0, 38.0, 40.0])
    # variances 4 and 4: se = sqrt(4/3 + 4/3), t = -6 / se = -3.674, df = (8/3)^2 / (2 * (4/3)^2 / 2) = 4
    assert w["diff"] == pytest.approx(-6.0)
    assert w["t"] == pytest.approx(-6 / math.sqrt(8 / 3))
    assert w["df"] == pytest.approx(4.0)
    assert w["p"] == pytest.approx(0.021311641, rel=1e-6)
    assert welch([30.0], [36.0, 38.0])["p"] is None          # one value on a side
    assert welch([9.0, 9.0], [9.0, 9.0])["p"] is None        # no variance on either
    assert welch([], [1.0])["diff"] is None


def test_startphase_table_and_welch(tmp_path):
    d = write_points(tmp_path / "sp", [
        run(tpr=36, steps=9, rep=0, phase="per-step"), run(tpr=38, steps=9, rep=1, phase="per-step"),
        run(tpr=40, steps=10, rep=2, phase="per-step"),
        run(tpr=30, steps=7, rep=0, phase="fixed"), run(tpr=32, steps=8, rep=1, phase="fixed"),
        run(tpr=34, steps=9, rep=2, phase="fixed"), run(rep=3, phase="fixed", status="running")])
    out = tmp_path / "out"
    assert fg.main(["startphase", str(d), "--out", str(out)]) == 0
    assert (out / "startphase.png").stat().st_size > 1000
    (t,) = read_csv(out / "startphase_welch.csv")
    assert (t["phase_a"], t["phase_b"], t["n_a"], t["n_b"]) == ("fixed", "per-step", "3", "3")
    assert float(t["tpr_diff"]) == pytest.approx(-6.0) and float(t["tpr_p"]) == pytest.approx(0.0213116, rel=1e-5)
    assert float(t["tpr_df"]) == pytest.approx(4.0)
    agg = {r["phase"]: r for r in read_csv(out / "startphase.csv")}
    assert (agg["fixed"]["runs"], agg["fixed"]["completed"], agg["fixed"]["runs_with_tpr"]) == ("4", "3", "3")
    md = (out / "startphase.md").read_text()
    assert "Welch" in md and "| 3 | fixed | 4 | 4 / 3 / 3 | 32 ± 4.968 |" in md
    assert "| 3 | 4 | fixed | per-step | 3 / 3 | 32 | 38 | -6 | -3.674 | 4 | 0.021 |" in md


def test_fig12_13_schemes_dots_and_table(tmp_path):
    d = write_points(tmp_path / "scale", [
        run(b=1, step="3s", scheme="global", n=100, tpr=30, steps=10, rep=0),
        run(b=1, step="3s", scheme="global", n=100, tpr=32, steps=11, rep=1),
        run(b=1, step="3s", scheme="global", n=100, tpr=34, steps=12, rep=2),
        run(b=1, step="3s", scheme="global", n=500, tpr=70, steps=23, rep=0),
        run(b=1, step="3s", scheme="global", n=500, rep=1, status="failed"),
        run(b=1, step="700ms", scheme="local", n=100, tpr=8, steps=5, rep=0),
        run(b=1, step="700ms", scheme="local", n=100, tpr=10, steps=6, rep=1)])
    plain = write_points(tmp_path / "plain", [run(b=1, step="3s", n=200, tpr=50, steps=17)])   # no scheme axis
    out = tmp_path / "out"
    assert fg.main(["fig12_13", str(d), str(plain), "--out", str(out)]) == 0
    assert (out / "fig12_13.png").stat().st_size > 1000
    agg = {(r["scheme"], r["n"]): r for r in read_csv(out / "fig12_13.csv")}
    assert set(agg) == {("global", "100"), ("global", "200"), ("global", "500"), ("local", "100")}
    g100 = agg[("global", "100")]
    assert float(g100["tpr_mean"]) == pytest.approx(32.0) and float(g100["tpr_ci95"]) == pytest.approx(CI3)
    g500 = agg[("global", "500")]
    assert (g500["runs"], g500["runs_with_tpr"], float(g500["tpr_mean"])) == ("2", "1", 70.0)
    md = (out / "fig12_13.md").read_text()
    assert "| global | 100 | 3 / 3 / 3 | 32 ± 4.968 | 11 ± 2.484 | 0 | 30 | 34 |" in md
    assert "| 100 | 32 | 9 | 3.556 |" in md              # Figure 13's comparison: global / local = 32 / 9
    assert "71 s at n = 500" in md


@pytest.mark.parametrize("cmd", ["fig6", "startphase", "fig12_13"])
def test_exit_2_without_points_csv(cmd, sweep_b3, tmp_path, capsys):
    missing = tmp_path / "not-analysed"
    missing.mkdir()
    out = tmp_path / "out"
    assert fg.main([cmd, str(sweep_b3), str(missing), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert str(missing) in err and "analysis/points.csv" in err
    assert f"run python -m analysis.sweep {missing} --engine events first" in err
    assert not out.exists()


def test_sims_compares_the_two_simulations_per_b_and_step(tmp_path):
    one = write_points(tmp_path / "s1", [
        run(tpr=36, steps=9, rep=0), run(tpr=38, steps=9, rep=1), run(tpr=40, steps=10, rep=2),
        run(step="9s", tpr=31, steps=3, rep=0), run(step="12s", tpr=33, steps=3, rep=0)])
    two = write_points(tmp_path / "s2", [
        run(tpr=30, steps=7, rep=0), run(tpr=32, steps=8, rep=1), run(tpr=34, steps=9, rep=2),
        run(step="9s", tpr=30, steps=3, rep=0), run(b=1, step="3s", tpr=26, steps=9, rep=0)])
    out = tmp_path / "out"
    assert fg.main(["sims", "--sim1", str(one), "--sim2", str(two), "--out", str(out)]) == 0
    assert (out / "sims.png").stat().st_size > 1000
    t4, t9 = read_csv(out / "sims.csv")
    assert (t4["b"], t4["step_s"], t4["n_1"], t4["n_2"]) == ("3", "4.0", "3", "3")
    # II - I = 32 - 38 = -6 with variances 4 and 4 on 3 runs each: the hand-worked Welch case above
    assert float(t4["diff"]) == pytest.approx(-6.0) and float(t4["p"]) == pytest.approx(0.0213116, rel=1e-5)
    assert float(t4["ci_2"]) == pytest.approx(CI3)
    assert (t9["step_s"], float(t9["diff"]), t9["p"]) == ("9.0", -1.0, "")     # one run a side: no test
    wins = {(w["sim"], w["b"]): w for w in read_csv(out / "sims_window.csv")}
    assert (wins[("I", "3")]["s"], wins[("I", "3")]["lo"], wins[("I", "3")]["hi"]) == ("9.0", "9.0", "12.0")
    assert (wins[("II", "3")]["s"], wins[("II", "3")]["lo"]) == ("9.0", "4.0")     # 32 <= 1.1 x 30
    assert wins[("I", "3")]["lo"] == "9.0"                                          # 38 > 1.1 x 31
    assert ("II", "1") in wins
    md = (out / "sims.md").read_text()
    assert "| 3 | 4 | 3 / 3 | 38 ± 4.968 | 9.333 | 32 ± 4.968 | 8 | -6 |" in md
    assert "one simulation only (b, step): (1, 3 s), (3, 12 s)" in md
    assert len(read_csv(out / "sims_runs.csv")) == 10


def _tune_json(path: Path, finished: bool = True) -> Path:
    import json
    evs = [(0, "part1", 7.64, [30.0, 32.0, 34.0]), (1, "part1", 12.36, [36.0, 38.0, None]),
           (2, "s", 7.43, [29.0, 31.0, 33.0])]
    d = {"kind": "tune", "experiment_file": "e.yaml", "param": "protocol.gsgc.step", "fixed": {"nodes.packing": 20},
         "inputs": {"a0": 0, "b0": 20, "g": 2, "e": 0.1, "p": 1, "reps": 3, "metric": "round0"},
         "evaluations": [{"x": x, "f": sum(v for v in vs if v) / len([v for v in vs if v]),
                          "runs": [{"point": f"p{i}", "tpr_s": v} for i, v in enumerate(vs)]} for _, _, x, vs in evs],
         "result": {"s": 7.43, "f_s": 31.0, "window": [6.43, 10.43], "part1_iterations": 2, "part2_iterations": 0,
                    "evaluations": [{"x": x, "fx": sum(v for v in vs if v) / len([v for v in vs if v]),
                                     "phase": ph, "order": o} for o, ph, x, vs in evs]} if finished else None}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(d))
    return path


def test_tune_table_and_figure_from_tune_json(tmp_path, sweep_b3):
    f = _tune_json(tmp_path / "r5" / "tune.json")
    out = tmp_path / "out"
    assert fg.main(["tune", str(f), "--grid", str(sweep_b3), "--out", str(out)]) == 0
    assert (out / "tune.png").stat().st_size > 1000
    rows = read_csv(out / "tune.csv")
    assert [(r["order"], r["x"], r["in_window"]) for r in rows] == [("0", "7.64", "True"), ("1", "12.36", "False"),
                                                                     ("2", "7.43", "True")]
    assert float(rows[0]["tpr_mean"]) == pytest.approx(32.0) and float(rows[0]["tpr_ci95"]) == pytest.approx(CI3)
    assert (rows[1]["runs"], rows[1]["runs_with_tpr"], float(rows[1]["tpr_mean"])) == ("3", "2", 37.0)
    md = (out / "tune.md").read_text()
    assert "r5 (3 run(s) per x)" in md and "window [6.43, 10.43] s" in md and "nodes.packing" in md
    assert "| 0 | part1 | 7.64 | 32 | 3 / 3 | 32 ± 4.968 | 30 | 34 | yes |" in md
    unfinished = _tune_json(tmp_path / "run" / "tune.json", finished=False)
    assert fg.main(["tune", str(unfinished), "--out", str(tmp_path / "o2")]) == 2


def _same_files(a: Path, b: Path, names: list[str]) -> None:
    for n in names:
        assert (b / n).read_text() == (a / n).read_text(), n


def test_the_tables_mode_writes_the_same_files_from_the_runs_csv_alone(tmp_path, sweep_b3):
    """Every subcommand again from its STEM_runs.csv (what docs/results/ keeps), no sweep directory: the CSVs and
    the Markdown byte for byte (the sweep directories named in them come from the runs CSV's `sweep` column)."""
    other = write_points(tmp_path / "b2", [run(b=2, tpr=40, steps=12, rep=0, duration="120s"),
                                           run(b=2, step="9s", tpr=33, steps=4, rep=0, duration="120s")])
    out, again = tmp_path / "out", tmp_path / "again"
    assert fg.main(["fig6", str(sweep_b3), str(other), "--sim", "I", "--out", str(out / "f6")]) == 0
    assert fg.main(["fig6", "--tables", str(out / "f6"), "--sim", "I", "--out", str(again / "f6")]) == 0
    _same_files(out / "f6", again / "f6", ["fig6_runs.csv", "fig6.csv", "fig6_window.csv", "fig6.md"])
    assert fg.main(["startphase", str(sweep_b3), "--out", str(out / "sp")]) == 0
    assert fg.main(["startphase", "--tables", str(out / "sp"), "--out", str(again / "sp")]) == 0
    _same_files(out / "sp", again / "sp", ["startphase_runs.csv", "startphase.csv", "startphase_welch.csv",
                                           "startphase.md"])
    assert fg.main(["fig12_13", str(sweep_b3), "--title", "T", "--out", str(out / "n")]) == 0
    assert fg.main(["fig12_13", "--tables", str(out / "n"), "--title", "T", "--out", str(again / "n")]) == 0
    _same_files(out / "n", again / "n", ["fig12_13_runs.csv", "fig12_13.csv", "fig12_13.md"])
    assert fg.main(["sims", "--sim1", str(sweep_b3), "--sim2", str(other), "--out", str(out / "s")]) == 0
    assert fg.main(["sims", "--tables", str(out / "s"), "--out", str(again / "s")]) == 0
    _same_files(out / "s", again / "s", ["sims_runs.csv", "sims.csv", "sims_window.csv", "sims.md"])
    assert f"`{sweep_b3}`" in (again / "f6" / "fig6.md").read_text()
    # tune: a committed copy tune-NAME.json is labelled NAME; the grid from a runs CSV
    f = _tune_json(tmp_path / "r5" / "tune.json")
    copy = tmp_path / "results" / "tune-r5.json"
    copy.parent.mkdir()
    copy.write_text(f.read_text())
    assert fg.main(["tune", str(f), "--grid", str(sweep_b3), "--out", str(out / "t")]) == 0
    assert fg.main(["tune", str(copy), "--grid-runs", str(out / "f6" / "fig6_runs.csv"), "--out",
                    str(again / "t")]) == 0
    _same_files(out / "t", again / "t", ["tune.csv", "tune.md"])


def test_the_tables_mode_without_the_runs_csv_exits_2(tmp_path, capsys):
    assert fg.main(["fig6", "--tables", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "fig6_runs.csv: not found" in capsys.readouterr().err
