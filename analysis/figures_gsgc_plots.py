"""The GSGC figures' plots (analysis/figures_gsgc.py): Figures 6 / 8 and the start phases against the step interval,
Figures 12 / 13 against the group size, Simulation II against I, and the adaptive method's evaluations; each with
the paper's numbers beside the measured means ± 95 % CI."""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from analysis.doc import fmt
from analysis.figlib import pyplot, save
from analysis.figures_gsgc_data import PAPER_FIG12_N500, PAPER_SIM1_B3, key_sort


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
    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    lines: dict[Any, list[dict]] = defaultdict(list)
    for r in agg:
        if r["step_s"] is not None:
            lines[line_key(r)].append(r)
    for i, k in enumerate(sorted(lines, key=lambda x: key_sort(x if isinstance(x, tuple) else (x,)))):
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
    return save(fig, path)


def fig_vs_n(rows: list[dict], agg: list[dict], path: Path, title: str) -> Path:
    """Figures 12 / 13: a dot per run (TPR against n, jittered per scheme) and the mean line with 95 % CI bars,
    one colour per scheme; the paper's 71 s at n = 500 (global, Figure 12)."""
    plt = pyplot()
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
    return save(fig, path)


def fig_sims(agg1: list[dict], agg2: list[dict], path: Path, title: str) -> Path:
    """TPR against the step interval, a panel per b (shared TPR axis), Simulation I and II with 95 % CI bars."""
    plt = pyplot()
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
    return save(fig, path)


def fig_tune(tunes: list[tuple[str, dict, list[dict]]], grid: list[dict], b: int, path: Path, title: str) -> Path:
    plt = pyplot()
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
    return save(fig, path)
