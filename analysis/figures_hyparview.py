"""The HyParView paper's Figures 2, 3 and 4 (seed 003 §5.2-5.3) from a sweep of topologies/hyparview-fig2-sweep.yaml:
reliability after a massive crash against the crashed fraction f, one line per protocol (Figure 2), reliability of
successive broadcasts after the crash (Figure 3), and membership cycles to heal against f (Figure 4).

Every per-run number is the overlay plug-ins' `run_values` (analysis/protocols/overlay.py, through
analysis/figlib.py); this script declares which of them are its columns, when a run is left out, and its tables and
figures. A run is left out (kept in runs.csv with the reason) when it did not complete, when its judges
(judges.json) call it unfaithful, when the crash took more than MAX_CRASH_SPREAD_S, or when the failure detector
removed more than MAX_FALSE_SUSPICIONS live peers before the crash (the machine's load, not the protocol).

    .venv/bin/python -m analysis.figures_hyparview SWEEP_DIR [RUN_DIR ...] --out docs/results/hyparview-fig2
        [--load /tmp/h5runs/load.log] [--model docs/results/hyparview-fig2/model.json]
    .venv/bin/python -m analysis.figures_hyparview tables docs/results/hyparview-fig2 [--out DIR] [--figures]

Writes runs.csv (one row per run: identity, judges, load, why left out, the values), and from runs.csv alone (what
`tables` regenerates from a committed runs.csv): summary.csv (per protocol, f and group size over the counted runs
of the sweep's group size: mean, 95 % CI half-width (Student t), runs with a value), scale.csv (the other group
sizes), per_cycle.csv (reliability per cycle after the crash, averaged over runs; needs runs.csv's `by_cycle`),
summary.json and tables.md; and fig2_reliability.png, fig2_reliability_first_cycles.png, fig3_after_failure.png,
fig4_healing.png.
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

from analysis import figlib
from analysis.figlib import kept
from analysis.figtables import ci_cell, command_line, largest, summarise, write_summary
from analysis.hyparview_common import MARKERS, PROTOCOLS, TITLES, read_runs

MAX_CRASH_SPREAD_S = 1.0      # two 500 ms cycles: a crash that took longer is not the paper's crash "at once"
# failure-detector removals before the crash (all false: nobody had crashed) above which the run measured the
# machine's load, not the protocol: CyclonAcked's 500 ms ACK timeout fires on a member delayed by the CPU
# (isolated in docs/reproduction-hyparview.md: 0 at load 6-10, thousands at load 25-45, same seed)
MAX_FALSE_SUSPICIONS = 50
POINT = ("protocol", "fail", "members")
# runs.csv's columns: the overlay plug-ins' run_values keys
COLUMNS = {"protocol": "protocol", "fail": "crash_fraction", "members": "members", "crashed": "crashed",
           "survivors": "survivors", "crash_cycle": "crash_cycle", "crash_spread_s": "crash_spread_s",
           "false_suspicions_before": "false_suspicions_before", "suspicions_after": "suspicions_after",
           "max_hops_before": "max_hops_before",
           **{k: k for k in ("reliability_before", "reliability_after", "reliability_after_first",
                             "broadcasts_after_first", "cycles_to_heal", "cycles_to_heal_mean", "broadcasts_before",
                             "broadcasts_after")},
           "after_failure": "reliability_after_failure", "by_cycle": "reliability_by_cycle"}
VALUES = ("reliability_before", "reliability_after", "reliability_after_first", "broadcasts_after_first",
          "cycles_to_heal", "cycles_to_heal_mean", "broadcasts_before", "broadcasts_after", "survivors",
          "false_suspicions_before", "load_mean")
TABLES = (("reliability_after_first", "reliability, broadcasts of the first 2 cycles (1 s) after the crash", "{:.3f}"),
          ("reliability_after", "reliability, every broadcast of the 20 s after the crash", "{:.3f}"),
          ("reliability_before", "reliability before the crash", "{:.3f}"),
          ("cycles_to_heal_mean", "cycles to heal (4-cycle mean regains the pre-crash reliability)", "{:.1f}"),
          ("false_suspicions_before", "failure-detector removals before the crash (all false)", "{:.0f}"),
          ("load_mean", "1-min load average during the runs", "{:.1f}"))


# --- which runs count (declared over the values) ------------------------------------------------------------------

def left_out(row: dict) -> str | None:
    """Why a completed, judged-faithful run is left out of the aggregates (None: it counts)."""
    why = []
    if row.get("crash_spread_s") is not None and row["crash_spread_s"] > MAX_CRASH_SPREAD_S:
        why.append(f"the crash took {row['crash_spread_s']:.1f} s")
    if (row.get("false_suspicions_before") or 0) > MAX_FALSE_SUSPICIONS:
        why.append(f"{row['false_suspicions_before']} false suspicions before the crash")
    return "; ".join(why) or None


def collect(paths: list[Path], load: list[tuple[float, float]] | None = None) -> list[dict[str, Any]]:
    """One row per run under `paths` (figlib.collect over the plug-ins' values), `excluded` set by `left_out`."""
    rows = figlib.collect(paths, figlib.projection(COLUMNS), POINT, faithful_only=True, load=load)
    for r in rows:
        r["excluded"] = r["excluded"] or left_out(r)
    return rows


# --- from runs.csv (pure) -----------------------------------------------------------------------------------------

def _order(r: dict) -> tuple:
    return (PROTOCOLS.index(r["protocol"]) if r["protocol"] in PROTOCOLS else 99, r["fail"], r["members"] or 0)


def group_size(rows: list[dict]) -> int | None:
    """The sweep's group size: the most frequent `members` (the other sizes are the scale check)."""
    sizes = [r["members"] for r in rows if r.get("members") is not None]
    return max(set(sizes), key=sizes.count) if sizes else None


def per_cycle(runs: list[dict], max_cycle: int = 40) -> list[dict]:
    """Per (protocol, f, cycles since the crash): the mean over runs of each run's mean reliability in that cycle."""
    acc: dict[tuple[str, float, int], list[float]] = {}
    for r in runs:
        for g in r.get("by_cycle") or []:
            if g["cycle"] <= max_cycle:
                acc.setdefault((r["protocol"], r["fail"], g["cycle"]), []).append(g["reliability"])
    return [{"protocol": p, "fail": f, "cycle": c, "runs": len(v), "reliability": statistics.fmean(v)}
            for (p, f, c), v in sorted(acc.items())]


def summary(rows: list[dict]) -> list[dict]:
    """Per point over the counted rows (the committed summary.csv's shape: no `excluded` count, the runs left out
    are in runs.csv with their reason): runs, the largest load, every value's mean, 95 % CI half-width and n."""
    return summarise(kept(rows), POINT, VALUES, excluded=False, extra={"load_max": largest("load_max")}, order=_order)


def tables(rows: list[dict], out: Path) -> tuple[list[dict], list[dict], int | None]:
    """summary.csv, scale.csv, per_cycle.csv, summary.json and tables.md from runs.csv's rows; (the sweep's
    points, the other sizes' points, the sweep's group size)."""
    n = group_size(rows)
    main = [r for r in rows if r.get("members") == n]
    agg = summary(main)
    scale = summary([r for r in rows if r.get("members") not in (n, None)])
    out.mkdir(parents=True, exist_ok=True)
    doc = {"runs": len(rows), "valid_runs": len(kept(main)), "max_crash_spread_s": MAX_CRASH_SPREAD_S,
           "max_false_suspicions": MAX_FALSE_SUSPICIONS, "points": agg}
    write_summary(out, agg, doc, markdown_tables(agg) + scale_table(scale))
    if scale:
        figlib.write_csv(out / "scale.csv", scale)
    if any("by_cycle" in r for r in rows):
        figlib.write_csv(out / "per_cycle.csv", per_cycle(kept(main)))
    return agg, scale, n


def markdown_tables(agg: list[dict]) -> str:
    """Figure 2 and Figure 4 as Markdown tables: rows f, columns protocols, cells mean ± 95 % CI (runs)."""
    fails = sorted({r["fail"] for r in agg})
    by = {(r["protocol"], r["fail"]): r for r in agg}
    protos = [p for p in PROTOCOLS if any(r["protocol"] == p for r in agg)]
    out = []
    for key, title, fmt in TABLES:
        out += [f"**{title}**", "", "| f | " + " | ".join(TITLES[p] for p in protos) + " |",
                "|---|" + "---|" * len(protos)]
        for f in fails:
            cells = [ci_cell(r, key, fmt) if r is not None and r.get(key) is not None
                     else "-" if r is None else f"- (0/{r['runs']})" for r in (by.get((p, f)) for p in protos)]
            out.append(f"| {round(100 * f)} % | " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def scale_table(scale: list[dict]) -> str:
    """The runs at another group size than the sweep's (the scale check), one row per protocol, size and f."""
    if not scale:
        return ""
    out = ["**other group sizes** (mean ± 95 % CI (runs))", "",
           "| protocol | members | f | first 2 cycles | 20 s after | before |", "|---|---|---|---|---|---|"]
    for r in scale:
        cells = [ci_cell(r, k, "{:.3f}", n=False)
                 for k in ("reliability_after_first", "reliability_after", "reliability_before")]
        out.append(f"| {TITLES.get(r['protocol'], r['protocol'])} | {r['members']} | {round(100 * r['fail'])} % | "
                   + " | ".join(cells) + f" ({r['runs']}) |")
    return "\n".join(out + [""])


# --- a reference model (pure, seeded) -----------------------------------------------------------------------------

def gossip_model(n: int, f: float, view: int = 35, fanout: int = 4, trials: int = 200, seed: int = 1) -> float:
    """Mean reliability of gossip broadcast over static uniform random partial views right after a crash (the
    paper's Figure 2 setting for Cyclon and Scamp: no membership cycle, no failure detector): n members, each
    with a view of `view` distinct random others; round(f n) crash; a random survivor broadcasts; every survivor
    forwards on first receipt to `fanout` random view members other than the one it came from and the origin;
    a crashed target is a lost copy. Reliability as overlay's: survivors reached, the origin included, over
    survivors. A fresh overlay and crash per trial."""
    import random

    rng = random.Random(seed)
    total = 0.0
    for _ in range(trials):
        dead = set(rng.sample(range(n), round(f * n)))
        alive = [i for i in range(n) if i not in dead]
        views: dict[int, list[int]] = {}
        origin = rng.choice(alive)
        reached, frontier = {origin}, [(origin, None)]
        while frontier:
            v, came = frontier.pop()
            if v not in views:
                drawn = rng.sample(range(n), min(view + 1, n))
                views[v] = [j for j in drawn if j != v][:min(view, n - 1)]
            cands = [j for j in views[v] if j != came and j != origin]
            for t in rng.sample(cands, min(fanout, len(cands))):
                if t not in dead and t not in reached:
                    reached.add(t)
                    frontier.append((t, v))
        total += len(reached) / len(alive)
    return total / trials


# --- figures ------------------------------------------------------------------------------------------------------

def fig_vs_f(agg: list[dict], key: str, ylabel: str, title: str, path: Path, ylim=None,
             excluded: list[dict] | None = None, model: list[dict] | None = None,
             scale: list[dict] | None = None) -> None:
    """One line per protocol (mean, 95 % CI bars); `excluded` runs as faint crosses in the protocol's colour;
    `model` (gossip_model rows: fail, n50_view35, n10000_view35) as dashed reference lines."""
    plt = figlib.pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for i, p in enumerate(PROTOCOLS):
        color = f"C{i}"
        rows = [r for r in agg if r["protocol"] == p and r[key] is not None]
        if rows:
            xs = [100 * r["fail"] for r in rows]
            ax.errorbar(xs, [r[key] for r in rows], yerr=[r[f"{key}_ci95"] or 0 for r in rows],
                        marker=MARKERS[p], capsize=3, label=TITLES[p], color=color)
        bad = [r for r in excluded or [] if r["protocol"] == p and r.get(key) is not None]
        if bad:
            ax.scatter([100 * r["fail"] + (i - 1.5) for r in bad], [r[key] for r in bad], marker="x", s=18,
                       color=color, alpha=0.45, label=f"{TITLES[p]}: left out (runs.csv says why)")
        big = [r for r in scale or [] if r["protocol"] == p and r.get(key) is not None]
        for n in sorted({r["members"] for r in big}):
            pts = [r for r in big if r["members"] == n]
            ax.scatter([100 * r["fail"] for r in pts], [r[key] for r in pts], marker=MARKERS[p], s=70,
                       facecolors="none", edgecolors=color, linewidths=1.5, label=f"{TITLES[p]}, {n} members")
    for col, label, style in (("n10000_view35", "model, 10 000 members (Cyclon-like views)", "--"),
                              ("n500_view35", "model, 500 members", "-."),
                              ("n50_view35", "model, 50 members", ":")):
        if model and all(col in m for m in model):
            ax.plot([100 * m["fail"] for m in model], [m[col] for m in model], style, color="grey", label=label)
    ax.set_xlabel("failed members (%)")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    if ylim:
        ax.set_ylim(*ylim)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6.5, loc="lower left")
    figlib.save(fig, path)


def fig_after_failure(runs: list[dict], path: Path, first: int = 60) -> None:
    """Figure 3: reliability of the k-th broadcast after the crash (mean over runs), one panel per f."""
    plt = figlib.pyplot()
    fails = sorted({r["fail"] for r in runs})
    fig, axes = plt.subplots(1, len(fails), figsize=(3.2 * len(fails), 3.2), sharey=True, squeeze=False)
    for ax, f in zip(axes[0], fails):
        for p in PROTOCOLS:
            series = [r["after_failure"] for r in runs if r["protocol"] == p and r["fail"] == f and r["after_failure"]]
            if not series:
                continue
            k = min(first, max(len(s) for s in series))
            ys = [statistics.fmean(s[i] for s in series if len(s) > i) for i in range(k)]
            ax.plot(range(1, k + 1), ys, marker=MARKERS[p], markersize=2, linewidth=1, label=TITLES[p])
        ax.set_title(f"{round(100 * f)} % failed", fontsize=9)
        ax.set_xlabel("broadcast after the crash")
        ax.set_ylim(0, 1.05)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("reliability")
    axes[0][-1].legend(fontsize=7)
    figlib.save(fig, path)


def figures(rows: list[dict], agg: list[dict], scale: list[dict], n: int | None, out: Path,
            model: list[dict] | None = None) -> None:
    main = [r for r in rows if r.get("members") == n]
    excluded = [r for r in main if r.get("excluded")]
    fig_vs_f(agg, "reliability_after", "reliability (mean over broadcasts after the crash)",
             f"Figure 2: reliability after the crash ({n} members; 20 s = 40 cycles)",
             out / "fig2_reliability.png", (0, 1.05), excluded, model, scale)
    fig_vs_f(agg, "reliability_after_first", "reliability (broadcasts of the first 2 cycles, 1 s)",
             "Figure 2, paper's setting: broadcasts before the cycles go on",
             out / "fig2_reliability_first_cycles.png", (0, 1.05), excluded, model, scale)
    fig_vs_f(agg, "cycles_to_heal_mean", "membership cycles to heal",
             "Figure 4: cycles until the mean over 4 cycles regains the pre-crash reliability",
             out / "fig4_healing.png", None, excluded)
    fig_after_failure([r for r in main if not r.get("excluded")], out / "fig3_after_failure.png")


# --- CLI ----------------------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    def runs(a) -> list[dict]:
        rows = collect(a.dirs, figlib.read_load(a.load) if a.load else None)
        for r in rows:
            if r["excluded"]:
                print(f"{r['run']}: {r['excluded']} (load {r.get('load_mean')}), left out of the aggregates",
                      file=sys.stderr)
        return rows

    def options(ap, tables: bool) -> None:
        if not tables:
            ap.add_argument("--model", type=Path, default=None, help="gossip_model results (json: fail, n50_view35, "
                            "n10000_view35) drawn as reference lines")
    # everything but runs.csv from runs.csv, as `tables` does
    a, rows = command_line(argv, __doc__, runs, options=options, read=read_runs, reread=True)
    agg, scale, n = tables(rows, a.out)
    if a.draw:
        model = getattr(a, "model", None)
        figures(rows, agg, scale, n, a.out, json.loads(model.read_text()) if model and model.exists() else None)
    if not a.tables:
        print((a.out / "tables.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
