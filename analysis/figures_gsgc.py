"""The GSGC paper's figures (seed 000, §4.2-§5) from one or more analysed sweep directories, with 95 % confidence
intervals: Figures 6 / 8 (steps and TPR against the step interval, one line per sub-group size b), the start-phase
comparison of one b, Figures 12 / 13 (TPR against the group size, global and local gossip), Simulation II against I,
and the adaptive method's runs (figures_gsgc_tune.py).

Input: `DIR/analysis/points.csv` of each sweep directory (one row per selected point, written by
`python -m analysis.sweep DIR --engine events`: each run's numbers are its GSGC plug-in's `run_values`; the script
exits 2 when a DIR has none). The rows of all DIRs are pooled, so sweeps of the same experiment at different b,
step grids or durations merge. The TPR is the paper's: `tpr_round0_s`, one round from the members' common start to
the first S (local gossip: to the first global S an SC constructs), and `steps_round0` its steps. Per group: the
runs (rows with a point group: run or being run), how many completed, how many have a TPR (an empty cell: failed,
still running, or no S within the run: counted, never dropped), the mean ± the half-width of the 95 % confidence
interval (Student t, analysis.figlib) over the runs with a value, and the runs the fidelity judges call unfaithful
(the verdict sweep recorded; kept in the numbers). Selected points not run yet (no point group in points.csv) are
listed apart.

    .venv/bin/python -m analysis.figures_gsgc fig6 DIR [DIR ...] --out OUT [--title T] [--sim I|II] [--e 0.1]
    .venv/bin/python -m analysis.figures_gsgc startphase DIR [DIR ...] --out OUT [--title T]
    .venv/bin/python -m analysis.figures_gsgc fig12_13 DIR [DIR ...] --out OUT [--title T] [--scheme global]
    .venv/bin/python -m analysis.figures_gsgc sims --sim1 DIR [DIR ...] --sim2 DIR [DIR ...] --out OUT [--e 0.1]
    .venv/bin/python -m analysis.figures_gsgc tune TUNE.json [TUNE.json ...] --out OUT [--grid DIR ...]
        [--grid-runs STEM_runs.csv ...] [--b 3]

The tables mode: `--tables RESULTS` in place of the sweep directories (fig6, startphase, fig12_13, sims) reads the
committed `RESULTS/STEM_runs.csv` (e.g. docs/results/gsgc-fig6/fig6_runs.csv) instead of the sweeps and writes
everything below again from it alone (no sweep or run directory): with the same options (--sim, --title, --e,
--scheme) the CSVs and the Markdown are byte-identical to the committed ones. `tune` reads committed tune files
(docs/results/tune-*.json) already; `--grid-runs` takes the grid's curve from a committed fig6_runs.csv.

Outputs under OUT (STEM = fig6, fig8 with --sim II, startphase, fig12_13, sims):
- STEM_runs.csv: the pooled rows, one per run, with the sweep directory and the derived b, step_s, n, scheme,
  start phase, tpr (tpr_round0_s), steps (steps_round0);
- STEM.csv: per group the counts, mean, CI half-width and number of values of TPR and steps, the member counts
  and durations pooled;
- STEM.md / STEM.html: the tables and the figure; STEM.png: the figure;
- fig6 also STEM_window.csv: per b the §4.3 window from the measured means (`window`); startphase also
  startphase_welch.csv: per (b, step) and pair of start phases the difference of the means and Welch's t-test;
- sims (Simulation II against I, Figure 8 against Figure 6): sims.csv per (b, step) measured in both, the two
  means and CIs, II - I and Welch's t-test; sims_window.csv: per b and simulation the §4.3 window on the grid;
  sims.png: TPR against the step, a panel per b, both simulations;
- tune (the adaptive method's runs, `orchestrator tune`'s tune.json): tune.csv per evaluated step interval in
  search order, f(x) = the mean TPR with its 95 % CI over the runs, whether x lies in the window found; tune.png:
  f(x) with the runs as dots and the search order, the window found, the paper's window and, with --grid, the
  same b's curve measured on a sweep grid.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from analysis.doc import Doc, Figure, Heading, Para, Table, fmt, write
from analysis.figlib import write_csv
from analysis.figures_gsgc_data import (E, PAPER_SIM1_B3, NoPoints, agg_csv, aggregate, key_sort, load_points,
                                        not_run, normalise, phase_tests, pm, read_runs, runs_cell, runs_csv,
                                        sim_tests, sweeps_of, window, window_cell, windows_per_b)
from analysis.figures_gsgc_plots import fig_sims, fig_vs_n, fig_vs_step

__all__ = ["aggregate", "normalise", "load_points", "not_run", "window", "windows_per_b", "main"]


def _source(dirs: list[Path], tables: Path | None, stem: str, scheme: str = "global") -> tuple[list[dict], list]:
    """The rows and the sweep directories they pool: the sweeps' points.csv, or (tables mode) the committed
    STEM_runs.csv under `tables`."""
    if tables is not None:
        rows = read_runs(Path(tables) / f"{stem}_runs.csv")
        return rows, sweeps_of(rows)
    return load_points(dirs, scheme), dirs


COUNT_NOTE = ("runs / completed / with TPR: the runs of the group (rows with a point group in points.csv: completed, "
              "failed or still running), those completed, and those with a TPR — a run without one (failed, not "
              "finished, or no S within the run) is counted here and left out of the mean. Mean ± half-width of "
              "the 95 % confidence interval (Student t) over the runs with a value. Unfaithful: runs the fidelity "
              "judges call unfaithful; they are kept in the numbers.")


def _common_paras(doc: Doc, rows: list[dict], dirs: list[Path]) -> None:
    doc.add(Para(f"Sweeps pooled: {', '.join(f'`{d}`' for d in dirs)}; {sum(r['ran'] for r in rows)} run(s), "
                 f"{sum(r['completed'] for r in rows)} completed, {sum(r['tpr'] is not None for r in rows)} with a "
                 f"TPR, {sum(r['unfaithful'] for r in rows)} unfaithful (kept in the numbers)."))
    doc.add(Para("TPR: the paper's time per round, `tpr_round0_s` (one round from the members' common start to "
                 "the first S; local gossip: to the first global S an SC constructs); steps: `steps_round0`, the "
                 "steps of that round."))


def _not_run_para(doc: Doc, rows: list[dict]) -> None:
    nr = not_run(rows)
    if nr:
        doc.add(Heading(1, f"Selected points not run yet ({len(nr)})"))
        doc.add(Para(", ".join(f"{r['point']} ({Path(r['sweep']).name})" for r in nr)))


def _mixed_warning(doc: Doc, agg: list[dict], what: str) -> None:
    mixed = [r for r in agg if len(r["members"]) > 1 or len(r["durations"]) > 1]
    if mixed:
        doc.add(Para(f"**Note:** {len(mixed)} {what} pool runs of several member counts or durations (see the "
                     f"n and duration columns)."))


def _table_counts(r: dict) -> list[Any]:
    return [runs_cell(r), pm(r["tpr_mean"], r["tpr_ci95"]), pm(r["steps_mean"], r["steps_ci95"]),
            r["unfaithful"], fmt(r["members"]) if r["members"] else "—",
            fmt(r["durations"]) if r["durations"] else "—"]


COUNT_COLS = ["runs / completed / with TPR", "TPR (s)", "steps", "unfaithful", "n", "duration"]


def cmd_fig6(dirs: list[Path], out: Path, title: str | None, sim: str | None, e: float = E,
             tables: Path | None = None) -> dict[str, Any]:
    stem = "fig8" if sim == "II" else "fig6"
    rows, dirs = _source(dirs, tables, stem)
    title = title or {"I": "Figure 6 (Simulation I)", "II": "Figure 8 (Simulation II)"}.get(
        sim, "TPR and steps against the step interval")
    agg = aggregate(rows, ("b", "step_s"))
    wins = windows_per_b(agg, e)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / f"{stem}_runs.csv", runs_csv(rows))
    write_csv(out / f"{stem}.csv", agg_csv(agg))
    write_csv(out / f"{stem}_window.csv", wins)
    png = fig_vs_step(agg, lambda r: r["b"], lambda b: f"b = {b}", out / f"{stem}.png", title, sim)
    doc = Doc(title)
    _common_paras(doc, rows, dirs)
    doc.add(Heading(1, "Per sub-group size b and step interval"))
    doc.add(Table(["b", "step (s)"] + COUNT_COLS,
                  [[fmt(r["b"]), fmt(r["step_s"])] + _table_counts(r) for r in agg], note=COUNT_NOTE))
    _mixed_warning(doc, agg, "groups")
    doc.add(Heading(1, f"§4.3 window of near-minimum TPR per b (e = {e:g}, grid points only)"))
    doc.add(Para(f"s: the grid step with the lowest mean TPR f(s); the window: the contiguous grid steps around s "
                 f"whose mean TPR is <= (1 + e) f(s) (a step without a mean TPR ends it). Only the sweep's grid "
                 f"points are tried — the paper's part II (Figure 11) probes steps in between, so each end of the "
                 f"true window lies between the window's last grid step and the next grid step outside it (if the "
                 f"curve has no dip between grid steps); 'edge' marks a window that reaches the grid's end, so it "
                 f"may extend beyond the grid."))
    wrows = [[fmt(w["b"]), fmt(w["s"]), fmt(w["f_s"]), fmt(w["bound"]),
              window_cell(w), fmt(w["tpr_max_in_window"]), fmt(w["grid"])] for w in wins]
    if sim == "I":
        p = PAPER_SIM1_B3
        wrows.append(["3 (paper)", fmt(p["s"]), fmt(p["f_s"]), fmt((1 + e) * p["f_s"]), "[4, 10]",
                      fmt(p["tpr_range"][1]), "golden-ratio search on 0-20 s"])
    doc.add(Table(["b", "s (s)", "f(s) (s)", "(1 + e) f(s)", "window (s)", "max TPR in window", "grid (s)"],
                  wrows))
    doc.add(Heading(1, "Figure"))
    doc.add(Figure(png, f"{title}: (A) steps, (B) TPR against the step interval, mean ± 95 % CI"))
    _not_run_para(doc, rows)
    write(doc, out, stem)
    return {"rows": rows, "agg": agg, "windows": wins, "stem": stem}


def cmd_startphase(dirs: list[Path], out: Path, title: str | None, tables: Path | None = None) -> dict[str, Any]:
    rows, dirs = _source(dirs, tables, "startphase")
    title = title or "Start phase: TPR and steps against the step interval"
    agg = aggregate(rows, ("b", "phase", "step_s"))
    tests = phase_tests(agg)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "startphase_runs.csv", runs_csv(rows))
    write_csv(out / "startphase.csv", agg_csv(agg))
    write_csv(out / "startphase_welch.csv", tests)
    several_b = len({r["b"] for r in agg}) > 1
    png = fig_vs_step(agg, lambda r: (r["b"], r["phase"]),
                      lambda k: (f"b = {k[0]}, " if several_b else "") + f"start phase {k[1]}",
                      out / "startphase.png", title)
    doc = Doc(title)
    _common_paras(doc, rows, dirs)
    doc.add(Heading(1, "Per start phase and step interval"))
    doc.add(Table(["b", "start phase", "step (s)"] + COUNT_COLS,
                  [[fmt(r["b"]), fmt(r["phase"]), fmt(r["step_s"])] + _table_counts(r) for r in agg],
                  note=COUNT_NOTE))
    _mixed_warning(doc, agg, "groups")
    doc.add(Heading(1, "Difference of the means per step (Welch's t-test)"))
    doc.add(Para("Per step and pair of start phases A, B (by name): mean(A) - mean(B) of the TPR and of the "
                 "steps, with Welch's unequal-variance t-test (scipy.stats.ttest_ind, equal_var=False; two-sided p, "
                 "Welch-Satterthwaite df) over the runs with a value. '—': fewer than 2 values on a side or no "
                 "variance on either."))
    doc.add(Table(["b", "step (s)", "phase A", "phase B", "n A / B", "TPR A", "TPR B", "TPR A - B", "t", "df",
                   "p", "steps A - B", "p (steps)"],
                  [[fmt(t["b"]), fmt(t["step_s"]), t["phase_a"], t["phase_b"], f"{t['n_a']} / {t['n_b']}",
                    fmt(t["tpr_a"]), fmt(t["tpr_b"]), fmt(t["tpr_diff"]), fmt(t["tpr_t"]), fmt(t["tpr_df"]),
                    fmt(t["tpr_p"]), fmt(t["steps_diff"]), fmt(t["steps_p"])] for t in tests]))
    doc.add(Heading(1, "Figure"))
    doc.add(Figure(png, f"{title}: (A) steps, (B) TPR, one line per start phase, mean ± 95 % CI"))
    _not_run_para(doc, rows)
    write(doc, out, "startphase")
    return {"rows": rows, "agg": agg, "tests": tests}


def cmd_fig12_13(dirs: list[Path], out: Path, title: str | None, scheme: str = "global",
                  tables: Path | None = None) -> dict[str, Any]:
    rows, dirs = _source(dirs, tables, "fig12_13", scheme)
    title = title or "Figures 12 and 13: TPR against the group size, global and local gossip"
    agg = aggregate(rows, ("scheme", "n"))
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "fig12_13_runs.csv", runs_csv(rows))
    write_csv(out / "fig12_13.csv", agg_csv(agg))
    png = fig_vs_n(rows, agg, out / "fig12_13.png", title)
    doc = Doc(title)
    _common_paras(doc, rows, dirs)
    doc.add(Para(f"Scheme: the sweep's `scheme` coordinate; rows of a sweep without one count as `{scheme}`. "
                 f"n: the run's member count (else the sweep's `n` coordinate). The paper (§4.4, Figure 12): "
                 f"20 runs per n, sub-group size 1 and a near-optimal step; 71 s at n = 500 with global gossip."))
    doc.add(Heading(1, "Per scheme and group size"))
    doc.add(Table(["scheme", "n"] + COUNT_COLS[:4] + ["min TPR (s)", "max TPR (s)"],
                  [[r["scheme"], fmt(r["n"])] + _table_counts(r)[:4]
                   + [fmt(min(r["tpr_values"], default=None)), fmt(max(r["tpr_values"], default=None))]
                   for r in agg], note=COUNT_NOTE))
    by = {(r["scheme"], r["n"]): r for r in agg}
    ratio = [[fmt(n), fmt(by[("global", n)]["tpr_mean"]), fmt(by[("local", n)]["tpr_mean"]),
              fmt(by[("global", n)]["tpr_mean"] / by[("local", n)]["tpr_mean"])]
             for n in sorted({n for _, n in by if n is not None})
             if by.get(("global", n), {}).get("tpr_mean") and by.get(("local", n), {}).get("tpr_mean")]
    if ratio:
        doc.add(Heading(1, "Global against local gossip (Figure 13's comparison)"))
        doc.add(Table(["n", "global TPR (s)", "local TPR (s)", "global / local"], ratio))
    doc.add(Heading(1, "Figure"))
    doc.add(Figure(png, f"{title}: a dot per run, mean ± 95 % CI per scheme"))
    _not_run_para(doc, rows)
    write(doc, out, "fig12_13")
    return {"rows": rows, "agg": agg}


def cmd_sims(dirs1: list[Path], dirs2: list[Path], out: Path, title: str | None, e: float = E,
             tables: Path | None = None) -> dict[str, Any]:
    if tables is not None:
        both = read_runs(Path(tables) / "sims_runs.csv")
        rows1, rows2 = ([{k: v for k, v in r.items() if k != "sim"} for r in both if r.get("sim") == s]
                        for s in ("I", "II"))
        dirs1, dirs2 = sweeps_of(rows1), sweeps_of(rows2)
    else:
        rows1, rows2 = load_points(dirs1), load_points(dirs2)
    title = title or "Simulation II against Simulation I (Figure 8 against Figure 6)"
    agg1, agg2 = aggregate(rows1, ("b", "step_s")), aggregate(rows2, ("b", "step_s"))
    tests = sim_tests(agg1, agg2)
    wins = [{"sim": sim, **w} for sim, agg in (("I", agg1), ("II", agg2)) for w in windows_per_b(agg, e)]
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "sims_runs.csv", [{"sim": sim, **r} for sim, rows in (("I", rows1), ("II", rows2))
                                      for r in runs_csv(rows)])
    write_csv(out / "sims.csv", tests)
    write_csv(out / "sims_window.csv", wins)
    png = fig_sims(agg1, agg2, out / "sims.png", title)
    doc = Doc(title)
    doc.add(Para(f"Simulation I: {', '.join(f'`{d}`' for d in dirs1)}; Simulation II: "
                 f"{', '.join(f'`{d}`' for d in dirs2)}. TPR: `tpr_round0_s` (the paper's, one round from the "
                 f"common start to the first S). Runs the fidelity judges call unfaithful are kept: I "
                 f"{sum(r['unfaithful'] for r in rows1)}, II {sum(r['unfaithful'] for r in rows2)}."))
    doc.add(Heading(1, "Per sub-group size b and step interval measured in both"))
    doc.add(Para("Mean ± half-width of the 95 % confidence interval (Student t); II - I: the difference of the means "
                 "with Welch's unequal-variance t-test (two-sided p; '—' with fewer than 2 values on a side)."))
    doc.add(Table(["b", "step (s)", "runs I / II", "TPR I (s)", "steps I", "TPR II (s)", "steps II",
                   "II - I (s)", "t", "p"],
                  [[fmt(t["b"]), fmt(t["step_s"]), f"{t['n_1']} / {t['n_2']}", pm(t["tpr_1"], t["ci_1"]),
                    fmt(t["steps_1"]), pm(t["tpr_2"], t["ci_2"]), fmt(t["steps_2"]), fmt(t["diff"]), fmt(t["t"]),
                    fmt(t["p"])] for t in tests]))
    only = sorted({(r["b"], r["step_s"]) for r in agg1} ^ {(r["b"], r["step_s"]) for r in agg2}, key=key_sort)
    if only:
        doc.add(Para("Measured in one simulation only (b, step): " + ", ".join(f"({fmt(b)}, {fmt(x)} s)"
                                                                            for b, x in only)))
    doc.add(Heading(1, f"§4.3 window per b and simulation (e = {e:g}, grid points only)"))
    doc.add(Table(["b", "simulation", "s (s)", "f(s) (s)", "window (s)", "grid (s)"],
                  [[fmt(w["b"]), w["sim"], fmt(w["s"]), fmt(w["f_s"]), window_cell(w), fmt(w["grid"])]
                   for w in sorted(wins, key=lambda w: (key_sort((w["b"],)), w["sim"]))]))
    doc.add(Heading(1, "Figure"))
    doc.add(Figure(png, f"{title}: TPR against the step interval per b, mean ± 95 % CI"))
    write(doc, out, "sims")
    return {"tests": tests, "windows": wins, "agg": agg1 + agg2}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m analysis.figures_gsgc", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    f6 = sub.add_parser("fig6", help="Figures 6 / 8: steps and TPR against the step interval, a line per b")
    f6.add_argument("--sim", choices=("I", "II"), default=None,
                    help="I: mark the paper's Simulation I b = 3 numbers (28.6 s at 9 s, window [4, 10] s)")
    f6.add_argument("--e", type=float, default=E, help="§4.3's fluctuation index (default 0.1)")
    sp = sub.add_parser("startphase", help="per start phase: TPR and steps against the step, Welch's t-test")
    f12 = sub.add_parser("fig12_13", help="Figures 12 / 13: TPR against n, global and local gossip")
    f12.add_argument("--scheme", default="global", help="the scheme of rows without a scheme coordinate")
    sims = sub.add_parser("sims", help="Simulation II against I per b and step: both means, Welch's t-test")
    sims.add_argument("--sim1", nargs="+", type=Path, default=[], help="Simulation I sweep directories")
    sims.add_argument("--sim2", nargs="+", type=Path, default=[], help="Simulation II sweep directories")
    sims.add_argument("--e", type=float, default=E, help="§4.3's fluctuation index (default 0.1)")
    tn = sub.add_parser("tune", help="the adaptive method's evaluations from tune.json file(s), with a figure")
    tn.add_argument("files", nargs="+", type=Path, help="tune.json files (orchestrator tune)")
    tn.add_argument("--grid", nargs="*", type=Path, default=[], help="sweep directories: the same b on a grid")
    tn.add_argument("--grid-runs", nargs="*", type=Path, default=[],
                    help="the grid from committed STEM_runs.csv files instead (e.g. docs/results/gsgc-fig6)")
    tn.add_argument("--b", type=int, default=3, help="the sub-group size of the --grid curve (default 3)")
    for p in (f6, sp, f12):
        p.add_argument("dirs", nargs="*", type=Path, help="sweep directories (with analysis/points.csv)")
    for p in (f6, sp, f12, sims):
        p.add_argument("--tables", type=Path, default=None, metavar="RESULTS",
                       help="the tables mode: from RESULTS/STEM_runs.csv (committed) instead of sweep directories")
    for p in (f6, sp, f12, sims, tn):
        p.add_argument("--out", type=Path, required=True)
        p.add_argument("--title", default=None)
    a = ap.parse_args(argv)
    if a.cmd in ("fig6", "startphase", "fig12_13") and not a.dirs and a.tables is None \
            or a.cmd == "sims" and a.tables is None and not (a.sim1 and a.sim2):
        ap.error(f"{a.cmd}: sweep directories, or --tables RESULTS")
    try:
        if a.cmd == "fig6":
            res = cmd_fig6(a.dirs, a.out, a.title, a.sim, a.e, a.tables)
            for w in res["windows"]:
                print(f"b={w['b']}: s={fmt(w['s'])} f(s)={fmt(w['f_s'])} window=[{fmt(w['lo'])}, {fmt(w['hi'])}]")
        elif a.cmd == "startphase":
            res = cmd_startphase(a.dirs, a.out, a.title, a.tables)
        elif a.cmd == "tune":
            from analysis.figures_gsgc_tune import cmd_tune
            res = cmd_tune(a.files, a.out, a.title, a.grid, a.b, a.grid_runs)
            for label, d, _ in res["tunes"]:
                r = d["result"]
                print(f"{label}: s={fmt(r['s'])} f(s)={fmt(r['f_s'])} window=[{fmt(r['window'][0])}, "
                      f"{fmt(r['window'][1])}]")
            print(f"written under {a.out}")
            return 0
        elif a.cmd == "sims":
            res = cmd_sims(a.sim1, a.sim2, a.out, a.title, a.e, a.tables)
            for t in res["tests"]:
                print(f"b={fmt(t['b'])} step={fmt(t['step_s'])}: I {pm(t['tpr_1'], t['ci_1'])} "
                      f"II {pm(t['tpr_2'], t['ci_2'])} II-I {fmt(t['diff'])} p {fmt(t['p'])}")
            print(f"written under {a.out}")
            return 0
        else:
            res = cmd_fig12_13(a.dirs, a.out, a.title, a.scheme, a.tables)
    except NoPoints as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for r in res["agg"]:
        keys = ", ".join(f"{k}={fmt(r[k])}" for k in ("scheme", "n", "b", "phase", "step_s") if k in r)
        print(f"{keys}: runs {runs_cell(r)} TPR {pm(r['tpr_mean'], r['tpr_ci95'])} "
              f"steps {pm(r['steps_mean'], r['steps_ci95'])} unfaithful {r['unfaithful']}")
    print(f"written under {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
