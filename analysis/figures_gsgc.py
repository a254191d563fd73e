"""The GSGC paper's figures (seed 000, §4.2-§5) from one or more analysed sweep directories, with 95 % confidence
intervals: Figures 6 / 8 (steps and TPR against the step interval, one line per sub-group size b), the start-phase
comparison of one b, and Figures 12 / 13 (TPR against the group size, global and local gossip).

Input: `DIR/analysis/points.csv` of each sweep directory (one row per selected point, written by
`python -m analysis.sweep DIR --engine events`; the script exits 2 when a DIR has none). The rows of all DIRs are
pooled, so sweeps of the same experiment at different b, step grids or durations merge. The TPR is the paper's:
`tpr_round0_s`, one round from the members' common start to the first S (local gossip: to the first global S an
SC constructs), and `steps_round0` its steps. Per group: the runs (rows with a point group: run or being run),
how many completed, how many have a TPR (an empty cell: failed, still running, or no S within the run: counted,
never dropped), the mean ± the half-width of the 95 % confidence interval (Student t, analysis.sweep.mean_ci)
over the runs with a value, and the runs the fidelity judges call unfaithful (kept in the numbers). Selected points
not run yet (no point group in points.csv) are listed apart.

    .venv/bin/python -m analysis.figures_gsgc fig6 DIR [DIR ...] --out OUT [--title T] [--sim I|II] [--e 0.1]
    .venv/bin/python -m analysis.figures_gsgc startphase DIR [DIR ...] --out OUT [--title T]
    .venv/bin/python -m analysis.figures_gsgc fig12_13 DIR [DIR ...] --out OUT [--title T] [--scheme global]
    .venv/bin/python -m analysis.figures_gsgc sims --sim1 DIR [DIR ...] --sim2 DIR [DIR ...] --out OUT [--e 0.1]
    .venv/bin/python -m analysis.figures_gsgc tune TUNE.json [TUNE.json ...] --out OUT [--grid DIR ...] [--b 3]

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
import csv
import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from analysis.doc import Doc, Figure, Heading, Para, Table, fmt, write
from analysis.runlogs import write_csv
from analysis.stats import mean_ci, welch  # noqa: F401 - the figures' tests import them from here

# the paper's numbers, from its text (seed 000 §4.3, §4.4)
PAPER_SIM1_B3 = {"b": 3, "s": 9.0, "f_s": 28.6, "window": (4.0, 10.0), "tpr_range": (28.6, 31.2)}
PAPER_FIG12_N500 = {"n": 500, "tpr_s": 71.0}
E = 0.1   # §4.3's fluctuation index


class NoPoints(Exception):
    """A sweep directory without analysis/points.csv."""


# --- reading (pure given the files) ---------------------------------------------------------------------------

def _num(v: Any) -> float | None:
    if v is None or v == "":
        return None
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _seconds(v: Any) -> float | None:
    """'4s', '700ms', '9' -> seconds; None when empty or not a time."""
    x = _num(v)
    if x is not None or v in (None, ""):
        return x
    from orchestrator.units import parse_time
    try:
        return parse_time(str(v))
    except ValueError:
        return None


def _int(v: Any) -> int | None:
    x = _num(v)
    return int(x) if x is not None and x == int(x) else None


def _label(v: float | None) -> Any:
    return None if v is None else int(v) if v == int(v) else v


def normalise(row: dict[str, str], sweep: str, default_scheme: str = "global") -> dict[str, Any]:
    """One points.csv row with the numbers parsed and the grouping coordinates derived: b (subgroup, else the
    sweep's c.subgroup), step_s (else c.step), n (members, else c.n), scheme (c.scheme, else `default_scheme`),
    phase (c.start_phase); tpr = tpr_round0_s, steps = steps_round0; `ran` = the row has a point group."""
    b = _int(row.get("subgroup"))
    b = b if b is not None else _int(row.get("c.subgroup"))
    step = _num(row.get("step_s"))
    step = step if step is not None else _seconds(row.get("c.step"))
    n = _int(row.get("members"))
    n = n if n is not None else _int(row.get("c.n"))
    return {"sweep": sweep, "point": row.get("point"), "group": row.get("group") or None,
            "rep": _int(row.get("rep")), "status": row.get("status") or None,
            "ran": bool(row.get("group")), "completed": row.get("status") == "completed",
            "unfaithful": str(row.get("unfaithful")).strip().lower() in ("true", "1", "yes"),
            "fidelity": row.get("fidelity") or None,
            "b": b, "step_s": step, "n": n, "scheme": row.get("c.scheme") or default_scheme,
            "phase": row.get("c.start_phase") or None, "duration": row.get("c.duration") or None,
            "tpr": _num(row.get("tpr_round0_s")), "steps": _num(row.get("steps_round0")),
            "run_dir": row.get("run_dir") or None}


def load_points(dirs: list[Path], default_scheme: str = "global") -> list[dict[str, Any]]:
    """The pooled, normalised rows of every DIR's analysis/points.csv; NoPoints names the first DIR without one."""
    rows = []
    for d in dirs:
        f = Path(d) / "analysis" / "points.csv"
        if not f.is_file():
            raise NoPoints(f"{d}: no analysis/points.csv; run python -m analysis.sweep {d} --engine events first")
        with f.open(newline="") as fh:
            rows += [normalise(r, str(d), default_scheme) for r in csv.DictReader(fh)]
    return rows


# --- aggregation (pure) ----------------------------------------------------------------------------------------

def _key_sort(k: tuple) -> tuple:
    return tuple((x is None, x if not isinstance(x, str) else 0, x if isinstance(x, str) else "") for x in k)


def aggregate(rows: list[dict], keys: tuple[str, ...]) -> list[dict[str, Any]]:
    """Per combination of `keys` over the rows that ran: runs, completed, runs_with_tpr, unfaithful, the TPR and
    steps values (`tpr_values`, `steps_values`), their mean, 95 % CI half-width and count, and the member counts
    and durations pooled into the group (several when sweeps of different n or duration merge)."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        if r["ran"]:
            groups[tuple(r[k] for k in keys)].append(r)
    out = []
    for k in sorted(groups, key=_key_sort):
        rs = groups[k]
        tprs = [r["tpr"] for r in rs if r["tpr"] is not None]
        steps = [r["steps"] for r in rs if r["steps"] is not None]
        row: dict[str, Any] = dict(zip(keys, k))
        row.update(runs=len(rs), completed=sum(r["completed"] for r in rs), runs_with_tpr=len(tprs),
                   unfaithful=sum(r["unfaithful"] for r in rs),
                   members=sorted({r["n"] for r in rs if r["n"] is not None}),
                   durations=sorted({r["duration"] for r in rs if r["duration"]}),
                   sweeps=sorted({Path(r["sweep"]).name for r in rs}))
        row["tpr_mean"], row["tpr_ci95"] = mean_ci(tprs)
        row["steps_mean"], row["steps_ci95"] = mean_ci(steps)
        row["steps_n"] = len(steps)
        row["tpr_values"], row["steps_values"] = tprs, steps
        out.append(row)
    return out


def not_run(rows: list[dict]) -> list[dict]:
    return [r for r in rows if not r["ran"]]


def window(curve: list[tuple[float, float | None]], e: float = E) -> dict[str, Any] | None:
    """§4.3's window on a measured grid: `curve` is (step, mean TPR or None) per grid step. s = the step with the
    lowest mean TPR f(s) (the smaller step on a tie); the window [lo, hi] is the contiguous run of grid steps around
    s whose mean TPR is <= (1 + e) f(s) — a grid step without a mean TPR (no run with a TPR) ends it, as does a step
    above the bound. Only the grid's points are tried (the paper's part II probes in between); `lo_at_edge` /
    `hi_at_edge`: the window reaches the grid's first / last step, so it may extend beyond the grid. None when no
    step has a mean TPR."""
    pts = sorted(curve)
    measured = [(x, y) for x, y in pts if y is not None]
    if not measured:
        return None
    s, f_s = min(measured, key=lambda p: (p[1], p[0]))
    bound = (1 + e) * f_s
    i = next(j for j, p in enumerate(pts) if p[0] == s and p[1] == f_s)
    lo = hi = i
    while lo > 0 and pts[lo - 1][1] is not None and pts[lo - 1][1] <= bound:
        lo -= 1
    while hi < len(pts) - 1 and pts[hi + 1][1] is not None and pts[hi + 1][1] <= bound:
        hi += 1
    inside = [p[1] for p in pts[lo:hi + 1]]
    return {"s": s, "f_s": f_s, "e": e, "bound": bound, "lo": pts[lo][0], "hi": pts[hi][0],
            "steps_in_window": [p[0] for p in pts[lo:hi + 1]], "tpr_max_in_window": max(inside),
            "lo_at_edge": lo == 0, "hi_at_edge": hi == len(pts) - 1, "grid": [p[0] for p in pts]}


def windows_per_b(agg: list[dict], e: float = E) -> list[dict[str, Any]]:
    """`window` of every b's curve (agg rows keyed by b and step_s)."""
    by_b: dict[Any, list[tuple[float, float | None]]] = defaultdict(list)
    for r in agg:
        if r["step_s"] is not None:
            by_b[r["b"]].append((r["step_s"], r["tpr_mean"]))
    out = []
    for b in sorted(by_b, key=lambda x: (x is None, x)):
        w = window(by_b[b], e)
        out.append({"b": b, **(w or {"s": None, "f_s": None, "e": e, "bound": None, "lo": None, "hi": None,
                                     "steps_in_window": [], "tpr_max_in_window": None, "lo_at_edge": None,
                                     "hi_at_edge": None, "grid": sorted(x for x, _ in by_b[b])})})
    return out


def phase_tests(agg: list[dict]) -> list[dict[str, Any]]:
    """Per (b, step) and each pair of start phases (sorted by name): `welch` of the TPR and of the steps."""
    cells: dict[tuple, dict[str, dict]] = defaultdict(dict)
    for r in agg:
        cells[(r["b"], r["step_s"])][r["phase"]] = r
    out = []
    for (b, step) in sorted(cells, key=_key_sort):
        phases = sorted(cells[(b, step)], key=lambda p: (p is None, p or ""))
        for i, pa in enumerate(phases):
            for pb in phases[i + 1:]:
                ra, rb = cells[(b, step)][pa], cells[(b, step)][pb]
                t, s = welch(ra["tpr_values"], rb["tpr_values"]), welch(ra["steps_values"], rb["steps_values"])
                out.append({"b": b, "step_s": step, "phase_a": pa, "phase_b": pb,
                            "tpr_a": ra["tpr_mean"], "tpr_b": rb["tpr_mean"], "n_a": t["n_a"], "n_b": t["n_b"],
                            "tpr_diff": t["diff"], "tpr_t": t["t"], "tpr_df": t["df"], "tpr_p": t["p"],
                            "steps_a": ra["steps_mean"], "steps_b": rb["steps_mean"],
                            "steps_diff": s["diff"], "steps_t": s["t"], "steps_df": s["df"], "steps_p": s["p"]})
    return out


def sim_tests(agg1: list[dict], agg2: list[dict]) -> list[dict[str, Any]]:
    """Per (b, step) measured in both simulations (agg rows keyed by b and step_s): each one's runs with a TPR,
    TPR mean ± CI and mean steps, and `welch`(II, I) of the TPR: diff = mean(II) - mean(I)."""
    one = {(r["b"], r["step_s"]): r for r in agg1}
    two = {(r["b"], r["step_s"]): r for r in agg2}
    out = []
    for k in sorted(set(one) & set(two), key=_key_sort):
        r1, r2 = one[k], two[k]
        t = welch(r2["tpr_values"], r1["tpr_values"])
        out.append({"b": k[0], "step_s": k[1], "n_1": t["n_b"], "n_2": t["n_a"],
                    "tpr_1": r1["tpr_mean"], "ci_1": r1["tpr_ci95"], "steps_1": r1["steps_mean"],
                    "tpr_2": r2["tpr_mean"], "ci_2": r2["tpr_ci95"], "steps_2": r2["steps_mean"],
                    "diff": t["diff"], "t": t["t"], "df": t["df"], "p": t["p"]})
    return out


# --- output helpers --------------------------------------------------------------------------------------------

def pm(m: float | None, ci: float | None) -> str:
    """'mean ± CI' ('mean (no CI)' for one value, '—' for none)."""
    if m is None:
        return "—"
    return f"{fmt(float(m))} ± {fmt(float(ci))}" if ci is not None else f"{fmt(float(m))} (one value, no CI)"


def _csv_rows(agg: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in ("tpr_values", "steps_values")} for r in agg]


def _runs_csv(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "ran"} for r in rows]


def _runs_cell(r: dict) -> str:
    return f"{r['runs']} / {r['completed']} / {r['runs_with_tpr']}"


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


def _window_cell(w: dict) -> str:
    """A `window` as '[lo, hi]', '(edge)' when it reaches the grid's end, '—' without one."""
    if w["lo"] is None:
        return "—"
    return f"[{fmt(w['lo'])}, {fmt(w['hi'])}]" + (" (edge)" if w["lo_at_edge"] or w["hi_at_edge"] else "")


def _mixed_warning(doc: Doc, agg: list[dict], what: str) -> None:
    mixed = [r for r in agg if len(r["members"]) > 1 or len(r["durations"]) > 1]
    if mixed:
        doc.add(Para(f"**Note:** {len(mixed)} {what} pool runs of several member counts or durations (see the "
                     f"n and duration columns)."))


# --- figures ---------------------------------------------------------------------------------------------------

def _errorbar(ax, pts: list[dict], value: str, **kw) -> None:
    pts = [p for p in pts if p[f"{value}_mean"] is not None]
    if pts:
        ax.errorbar([p["step_s"] for p in pts], [p[f"{value}_mean"] for p in pts],
                    yerr=[p[f"{value}_ci95"] or 0 for p in pts], marker="o", ms=4, capsize=3, **kw)


def _annotate_missing(ax, pts: list[dict], value: str, color) -> None:
    """'k/n' beside points where only k of n runs have a value."""
    for p in pts:
        k = p["runs_with_tpr"] if value == "tpr" else p["steps_n"]
        if k < p["runs"] and p[f"{value}_mean"] is not None:
            ax.annotate(f"{k}/{p['runs']}", (p["step_s"], p[f"{value}_mean"]), fontsize=6, color=color,
                        xytext=(3, 3), textcoords="offset points")


def fig_vs_step(agg: list[dict], line_key, label_of, path: Path, title: str, sim: str | None = None) -> Path:
    """(A) steps and (B) TPR against the step interval, one line per `line_key(row)`, 95 % CI bars; with sim I the
    paper's b = 3 point (28.6 s at 9 s) and §4.3 window [4, 10] s on (B)."""
    from analysis.figures import _save, plt
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    lines: dict[Any, list[dict]] = defaultdict(list)
    for r in agg:
        if r["step_s"] is not None:
            lines[line_key(r)].append(r)
    for i, k in enumerate(sorted(lines, key=lambda x: _key_sort(x if isinstance(x, tuple) else (x,)))):
        pts = sorted(lines[k], key=lambda r: r["step_s"])
        color = f"C{i % 10}"
        _errorbar(ax1, pts, "steps", color=color, label=label_of(k))
        _errorbar(ax2, pts, "tpr", color=color, label=label_of(k))
        _annotate_missing(ax1, pts, "steps", color)
        _annotate_missing(ax2, pts, "tpr", color)
    if sim == "I":
        p = PAPER_SIM1_B3
        ax2.axvspan(*p["window"], color="grey", alpha=0.15, label="paper §4.3 window, b = 3: [4, 10] s")
        ax2.plot([p["s"]], [p["f_s"]], "*", color="k", ms=12, label="paper b = 3: 28.6 s at 9 s")
    ax1.set(xlabel="step interval (s)", ylabel="steps", title="(A) number of steps in a round")
    ax2.set(xlabel="step interval (s)", ylabel="seconds", title="(B) time per round (TPR)")
    for ax in (ax1, ax2):
        ax.set_xlim(left=0)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:   # (B)'s curves sit above ~25 s: its legend goes below them
            ax.legend(fontsize=7, **({"loc": "lower center", "ncol": 2} if ax is ax2 else {}))
    fig.suptitle(title + " — mean ± 95 % CI; k/n: runs with a value", fontsize=9)
    return _save(fig, path)


def fig_vs_n(rows: list[dict], agg: list[dict], path: Path, title: str) -> Path:
    """Figures 12 / 13: a dot per run (TPR against n, jittered per scheme) and the mean line with 95 % CI bars,
    one colour per scheme; the paper's 71 s at n = 500 (global, Figure 12)."""
    from analysis.figures import _save, plt
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    schemes = sorted({r["scheme"] for r in agg}, key=lambda s: (s != "global", s != "local", s))
    ns = sorted({r["n"] for r in agg if r["n"] is not None})
    jitter = 0.012 * (max(ns) - min(ns) if len(ns) > 1 else (ns[0] if ns else 1) or 1)
    for i, sc in enumerate(schemes):
        color, off = f"C{i % 10}", (i - (len(schemes) - 1) / 2) * jitter
        dots = [r for r in rows if r["ran"] and r["scheme"] == sc and r["n"] is not None and r["tpr"] is not None]
        ax.plot([r["n"] + off for r in dots], [r["tpr"] for r in dots], ".", color=color, alpha=0.45, ms=5)
        pts = sorted((r for r in agg if r["scheme"] == sc and r["n"] is not None and r["tpr_mean"] is not None),
                     key=lambda r: r["n"])
        if pts:
            ax.errorbar([r["n"] + off for r in pts], [r["tpr_mean"] for r in pts],
                        yerr=[r["tpr_ci95"] or 0 for r in pts], color=color, marker="o", ms=4, capsize=3,
                        label=f"{sc}: mean ± 95 % CI (dots: runs)")
        for r in pts:
            if r["runs_with_tpr"] < r["runs"]:
                ax.annotate(f"{r['runs_with_tpr']}/{r['runs']}", (r["n"] + off, r["tpr_mean"]), fontsize=6,
                            color=color, xytext=(3, 3), textcoords="offset points")
    ax.plot([PAPER_FIG12_N500["n"]], [PAPER_FIG12_N500["tpr_s"]], "*", color="k", ms=12,
            label="paper Figure 12 (global): 71 s at n = 500")
    ax.set(xlabel="group size n (members)", ylabel="TPR (s)", title=title)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return _save(fig, path)


def fig_sims(agg1: list[dict], agg2: list[dict], path: Path, title: str) -> Path:
    """TPR against the step interval, a panel per b (shared TPR axis), Simulation I and II with 95 % CI bars."""
    from analysis.figures import _save, plt
    bs = sorted({r["b"] for r in agg1 + agg2 if r["b"] is not None})
    fig, axes = plt.subplots(1, max(len(bs), 1), figsize=(2.6 * max(len(bs), 2), 3.6), sharey=True, squeeze=False)
    for ax, b in zip(axes[0], bs):
        for agg, label, color in ((agg1, "Simulation I", "C0"), (agg2, "Simulation II", "C3")):
            pts = sorted((r for r in agg if r["b"] == b and r["step_s"] is not None), key=lambda r: r["step_s"])
            _errorbar(ax, pts, "tpr", color=color, label=label)
            _annotate_missing(ax, pts, "tpr", color)
        ax.set(xlabel="step interval (s)", title=f"b = {b}")
        ax.set_xlim(left=0)
        ax.grid(alpha=0.3)
    tops = [r["tpr_mean"] + (r["tpr_ci95"] or 0) for r in agg1 + agg2 if r["tpr_mean"] is not None]
    axes[0][0].set_ylim(0, 1.08 * max(tops) if tops else 1)       # shared: after every panel is drawn
    axes[0][0].set_ylabel("TPR (s)")
    labels: dict[str, Any] = {}
    for ax in axes[0]:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            labels.setdefault(lab, h)
    if labels:
        axes[0][-1].legend(list(labels.values()), list(labels), fontsize=7, loc="lower right")
    fig.suptitle(title + " — mean ± 95 % CI; k/n: runs with a TPR", fontsize=9)
    return _save(fig, path)


# --- the subcommands -------------------------------------------------------------------------------------------

def _table_counts(r: dict) -> list[Any]:
    return [_runs_cell(r), pm(r["tpr_mean"], r["tpr_ci95"]), pm(r["steps_mean"], r["steps_ci95"]),
            r["unfaithful"], fmt(r["members"]) if r["members"] else "—",
            fmt(r["durations"]) if r["durations"] else "—"]


COUNT_COLS = ["runs / completed / with TPR", "TPR (s)", "steps", "unfaithful", "n", "duration"]


def cmd_fig6(dirs: list[Path], out: Path, title: str | None, sim: str | None, e: float = E) -> dict[str, Any]:
    rows = load_points(dirs)
    stem = "fig8" if sim == "II" else "fig6"
    title = title or {"I": "Figure 6 (Simulation I)", "II": "Figure 8 (Simulation II)"}.get(
        sim, "TPR and steps against the step interval")
    agg = aggregate(rows, ("b", "step_s"))
    wins = windows_per_b(agg, e)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / f"{stem}_runs.csv", _runs_csv(rows))
    write_csv(out / f"{stem}.csv", _csv_rows(agg))
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
              _window_cell(w), fmt(w["tpr_max_in_window"]), fmt(w["grid"])] for w in wins]
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


def cmd_startphase(dirs: list[Path], out: Path, title: str | None) -> dict[str, Any]:
    rows = load_points(dirs)
    title = title or "Start phase: TPR and steps against the step interval"
    agg = aggregate(rows, ("b", "phase", "step_s"))
    tests = phase_tests(agg)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "startphase_runs.csv", _runs_csv(rows))
    write_csv(out / "startphase.csv", _csv_rows(agg))
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


def cmd_fig12_13(dirs: list[Path], out: Path, title: str | None, scheme: str = "global") -> dict[str, Any]:
    rows = load_points(dirs, scheme)
    title = title or "Figures 12 and 13: TPR against the group size, global and local gossip"
    agg = aggregate(rows, ("scheme", "n"))
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "fig12_13_runs.csv", _runs_csv(rows))
    write_csv(out / "fig12_13.csv", _csv_rows(agg))
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


def cmd_sims(dirs1: list[Path], dirs2: list[Path], out: Path, title: str | None, e: float = E) -> dict[str, Any]:
    rows1, rows2 = load_points(dirs1), load_points(dirs2)
    title = title or "Simulation II against Simulation I (Figure 8 against Figure 6)"
    agg1, agg2 = aggregate(rows1, ("b", "step_s")), aggregate(rows2, ("b", "step_s"))
    tests = sim_tests(agg1, agg2)
    wins = [{"sim": sim, **w} for sim, agg in (("I", agg1), ("II", agg2)) for w in windows_per_b(agg, e)]
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "sims_runs.csv", [{"sim": sim, **r} for sim, rows in (("I", rows1), ("II", rows2))
                                      for r in _runs_csv(rows)])
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
    only = sorted({(r["b"], r["step_s"]) for r in agg1} ^ {(r["b"], r["step_s"]) for r in agg2}, key=_key_sort)
    if only:
        doc.add(Para("Measured in one simulation only (b, step): " + ", ".join(f"({fmt(b)}, {fmt(x)} s)"
                                                                            for b, x in only)))
    doc.add(Heading(1, f"§4.3 window per b and simulation (e = {e:g}, grid points only)"))
    doc.add(Table(["b", "simulation", "s (s)", "f(s) (s)", "window (s)", "grid (s)"],
                  [[fmt(w["b"]), w["sim"], fmt(w["s"]), fmt(w["f_s"]), _window_cell(w), fmt(w["grid"])]
                   for w in sorted(wins, key=lambda w: (_key_sort((w["b"],)), w["sim"]))]))
    doc.add(Heading(1, "Figure"))
    doc.add(Figure(png, f"{title}: TPR against the step interval per b, mean ± 95 % CI"))
    write(doc, out, "sims")
    return {"tests": tests, "windows": wins, "agg": agg1 + agg2}


def load_tune(path: Path) -> dict[str, Any]:
    """A tune.json as `orchestrator tune` writes it; NoPoints when it is missing or has no result yet."""
    try:
        d = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise NoPoints(f"{path}: not a readable tune.json ({exc})") from None
    if not d.get("result"):
        raise NoPoints(f"{path}: the search has not finished (no result)")
    return d


def tune_rows(d: dict, label: str) -> list[dict[str, Any]]:
    """Per evaluated step interval, in search order: its phase, x, f(x) as recorded, and the runs' TPR values with
    their mean ± 95 % CI (f(x) is their mean: a run without a TPR is left out of both)."""
    res = d["result"]
    lo, hi = res["window"]
    runs_at = {round(ev["x"], 6): [r.get("tpr_s") for r in ev.get("runs", [])] for ev in d["evaluations"]}
    out = []
    for ev in sorted(res["evaluations"], key=lambda e: e["order"]):
        vals = runs_at.get(round(ev["x"], 6), [])
        tprs = [v for v in vals if v is not None]
        m, ci = mean_ci(tprs)
        out.append({"tune": label, "order": ev["order"], "phase": ev["phase"], "x": ev["x"], "f": ev["fx"],
                    "runs": len(vals), "runs_with_tpr": len(tprs), "tpr_mean": m, "tpr_ci95": ci,
                    "tpr_min": min(tprs, default=None), "tpr_max": max(tprs, default=None),
                    "in_window": lo <= ev["x"] <= hi, "tpr_values": tprs})
    return out


def fig_tune(tunes: list[tuple[str, dict, list[dict]]], grid: list[dict], b: int, path: Path, title: str) -> Path:
    from analysis.figures import _save, plt
    fig, ax = plt.subplots(figsize=(8, 4.6))
    p = PAPER_SIM1_B3
    ax.axvspan(*p["window"], color="grey", alpha=0.12, label="paper's window, b = 3: [4, 10] s")
    ax.plot([p["s"]], [p["f_s"]], "*", color="k", ms=12, label="paper: 28.6 s at 9 s")
    if grid:
        pts = sorted((r for r in grid if r["b"] == b and r["step_s"] is not None), key=lambda r: r["step_s"])
        _errorbar(ax, pts, "tpr", color="C7", ls="--", label=f"sweep grid, b = {b}: mean ± 95 % CI")
    for i, (label, d, rows) in enumerate(tunes):
        color = f"C{i % 10}"
        res = d["result"]
        ax.axvline(res["window"][0], color=color, ls=":", lw=1)
        ax.axvline(res["window"][1], color=color, ls=":", lw=1)
        dots = [(r["x"], v) for r in rows for v in r["tpr_values"]]
        ax.plot([x for x, _ in dots], [v for _, v in dots], ".", color=color, alpha=0.35, ms=5)
        ax.errorbar([r["x"] for r in rows if r["tpr_mean"] is not None],
                    [r["tpr_mean"] for r in rows if r["tpr_mean"] is not None],
                    yerr=[r["tpr_ci95"] or 0 for r in rows if r["tpr_mean"] is not None], fmt="o", color=color,
                    ms=4, capsize=3, label=f"{label}: f(x) ± 95 % CI, window [{fmt(res['window'][0])}, "
                                           f"{fmt(res['window'][1])}] s (dotted)")
        for r in rows:
            if r["tpr_mean"] is not None:
                ax.annotate(str(r["order"]), (r["x"], r["tpr_mean"]), fontsize=6, color=color,
                            xytext=(3, -9), textcoords="offset points")
        ax.plot([res["s"]], [res["f_s"]], "D", color=color, ms=7, mfc="none")
    ax.set(xlabel="step interval x (s)", ylabel="TPR (s)", title=title)
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    return _save(fig, path)


def cmd_tune(files: list[Path], out: Path, title: str | None, grid_dirs: list[Path], b: int) -> dict[str, Any]:
    tunes = []
    for f in files:
        d = load_tune(f)
        label = f"{Path(f).parent.name if Path(f).name == 'tune.json' else Path(f).stem} " \
                f"({d['inputs'].get('reps')} run(s) per x)"
        tunes.append((label, d, tune_rows(d, label)))
    grid = aggregate(load_points(grid_dirs), ("b", "step_s")) if grid_dirs else []
    title = title or "The adaptive method (§4.3, Figures 10-11) on measured runs"
    out.mkdir(parents=True, exist_ok=True)
    rows = [r for _, _, rs in tunes for r in rs]
    write_csv(out / "tune.csv", [{k: v for k, v in r.items() if k != "tpr_values"} for r in rows])
    png = fig_tune(tunes, grid, b, out / "tune.png", title)
    doc = Doc(title)
    for label, d, rs in tunes:
        res, inp = d["result"], d["inputs"]
        doc.add(Heading(1, label))
        doc.add(Para(f"`{d.get('experiment_file')}`, {d.get('param')}; inputs a0 = {fmt(inp.get('a0'))}, b0 = "
                     f"{fmt(inp.get('b0'))}, g = {fmt(inp.get('g'))}, e = {fmt(inp.get('e'))}, p = "
                     f"{fmt(inp.get('p'))} s; {inp.get('reps')} run(s) per step interval, metric "
                     f"{inp.get('metric')}; fixed: {d.get('fixed') or '—'}. Result: s = {fmt(res['s'])} s, f(s) = "
                     f"{fmt(res['f_s'])} s, window [{fmt(res['window'][0])}, {fmt(res['window'][1])}] s (Part I "
                     f"{res['part1_iterations']} iterations, Part II {res['part2_iterations']})."))
        doc.add(Table(["order", "phase", "x (s)", "f(x) (s)", "runs / with TPR", "TPR mean ± 95 % CI", "min",
                       "max", "in window"],
                      [[r["order"], r["phase"], fmt(r["x"]), fmt(r["f"]), f"{r['runs']} / {r['runs_with_tpr']}",
                        pm(r["tpr_mean"], r["tpr_ci95"]), fmt(r["tpr_min"]), fmt(r["tpr_max"]),
                        "yes" if r["in_window"] else ""] for r in rs]))
    doc.add(Para("The paper (§4.3, Simulation I, b = 3): s = 9 s, f(s) = 28.6 s, window [4, 10] s."))
    doc.add(Heading(1, "Figure"))
    doc.add(Figure(png, f"{title}: f(x) per evaluated step interval (numbers: search order), the runs as dots"))
    write(doc, out, "tune")
    return {"rows": rows, "tunes": tunes}


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
    sims.add_argument("--sim1", nargs="+", type=Path, required=True, help="Simulation I sweep directories")
    sims.add_argument("--sim2", nargs="+", type=Path, required=True, help="Simulation II sweep directories")
    sims.add_argument("--e", type=float, default=E, help="§4.3's fluctuation index (default 0.1)")
    tn = sub.add_parser("tune", help="the adaptive method's evaluations from tune.json file(s), with a figure")
    tn.add_argument("files", nargs="+", type=Path, help="tune.json files (orchestrator tune)")
    tn.add_argument("--grid", nargs="*", type=Path, default=[], help="sweep directories: the same b on a grid")
    tn.add_argument("--b", type=int, default=3, help="the sub-group size of the --grid curve (default 3)")
    for p in (f6, sp, f12):
        p.add_argument("dirs", nargs="+", type=Path, help="sweep directories (with analysis/points.csv)")
    for p in (f6, sp, f12, sims, tn):
        p.add_argument("--out", type=Path, required=True)
        p.add_argument("--title", default=None)
    a = ap.parse_args(argv)
    try:
        if a.cmd == "fig6":
            res = cmd_fig6(a.dirs, a.out, a.title, a.sim, a.e)
            for w in res["windows"]:
                print(f"b={w['b']}: s={fmt(w['s'])} f(s)={fmt(w['f_s'])} window=[{fmt(w['lo'])}, {fmt(w['hi'])}]")
        elif a.cmd == "startphase":
            res = cmd_startphase(a.dirs, a.out, a.title)
        elif a.cmd == "tune":
            res = cmd_tune(a.files, a.out, a.title, a.grid, a.b)
            for label, d, _ in res["tunes"]:
                r = d["result"]
                print(f"{label}: s={fmt(r['s'])} f(s)={fmt(r['f_s'])} window=[{fmt(r['window'][0])}, "
                      f"{fmt(r['window'][1])}]")
            print(f"written under {a.out}")
            return 0
        elif a.cmd == "sims":
            res = cmd_sims(a.sim1, a.sim2, a.out, a.title, a.e)
            for t in res["tests"]:
                print(f"b={fmt(t['b'])} step={fmt(t['step_s'])}: I {pm(t['tpr_1'], t['ci_1'])} "
                      f"II {pm(t['tpr_2'], t['ci_2'])} II-I {fmt(t['diff'])} p {fmt(t['p'])}")
            print(f"written under {a.out}")
            return 0
        else:
            res = cmd_fig12_13(a.dirs, a.out, a.title, a.scheme)
    except NoPoints as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for r in res["agg"]:
        keys = ", ".join(f"{k}={fmt(r[k])}" for k in ("scheme", "n", "b", "phase", "step_s") if k in r)
        print(f"{keys}: runs {_runs_cell(r)} TPR {pm(r['tpr_mean'], r['tpr_ci95'])} "
              f"steps {pm(r['steps_mean'], r['steps_ci95'])} unfaithful {r['unfaithful']}")
    print(f"written under {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
