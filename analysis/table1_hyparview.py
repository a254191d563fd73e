"""The HyParView paper's Table 1 and Figure 5 (seed 003 §5.4) from runs of topologies/hyparview-table1.yaml:
the overlay's graph properties after 50 membership cycles — average clustering coefficient, average shortest path,
maximum hops to delivery — and the in-degree distribution, per protocol and group size.

Every per-run number is the overlay plug-ins' `run_values` (analysis/protocols/overlay.py, through
analysis/figlib.py; no Spark analysis of the runs is needed): the graph of the dissemination views before the first
crash (these runs have none: at the run's end), and beside every clustering coefficient and shortest path the
yardstick of a random graph with the same members and degree (clustering ~ k / (n - 1), k the mean undirected
degree; shortest path ~ ln n / ln d, d the mean out-degree). HyParView runs with `join_interval` (the paper's
one-by-one joins) are their own row. A run that did not complete, or that its judges call unfaithful, stays in
runs.csv with the reason and is not counted.

    .venv/bin/python -m analysis.table1_hyparview RUN_DIR... --out docs/results/hyparview-table1 [--load LOG]
    .venv/bin/python -m analysis.table1_hyparview tables docs/results/hyparview-table1 [--out DIR] [--figures]

Writes runs.csv, and from runs.csv alone (what `tables` regenerates from a committed runs.csv): summary.csv (per
protocol and n: mean, 95 % CI half-width (Student t)), indegree.csv (needs runs.csv's `indegree`), table1.md; and
fig5_indegree.png.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from analysis import figlib
from analysis.figlib import kept
from analysis.figtables import ci_cell, command_line, summarise
from analysis.hyparview_common import MARKERS, PROTOCOLS, TITLES, read_runs

# §5.4, Table 1 (10 000 nodes, PeerSim, after 50 cycles); CyclonAcked is not in the table
PAPER = {"cyclon": {"clustering": 0.006836, "shortest_path": 2.60426, "max_hops": 10.6},
         "scamp": {"clustering": 0.022476, "shortest_path": 3.35398, "max_hops": 14.1},
         "hyparview": {"clustering": 0.00092, "shortest_path": 6.38542, "max_hops": 9.0}}
PAPER_N = 10_000
SEQUENTIAL = "hyparview, joins one by one"
ORDER = (*PROTOCOLS[:1], SEQUENTIAL, *PROTOCOLS[1:])
POINT = ("protocol", "members")
# runs.csv's columns: the overlay plug-ins' run_values keys (the graph before the first crash)
COLUMNS = {"protocol": "protocol", "join_interval_s": "join_interval_s", "members": "members_before",
           **{k: f"{k}_before" for k in ("clustering", "clustering_random", "shortest_path", "shortest_path_random",
                                         "max_hops", "degree", "out_degree")},
           "indegree": "indegree_before"}
VALUES = ("clustering", "clustering_random", "shortest_path", "shortest_path_random", "max_hops", "degree",
          "out_degree")
TABLES = (("clustering", "clustering_random", "{:.4f}", "average clustering coefficient"),
          ("shortest_path", "shortest_path_random", "{:.2f}", "average shortest path"),
          ("max_hops", None, "{:.1f}", "maximum hops to delivery (mean over broadcasts)"))


def collect(paths: list[Path], load: list[tuple[float, float]] | None = None) -> list[dict[str, Any]]:
    """One row per run (figlib.collect over the plug-ins' values); a HyParView run with one-by-one joins has the
    row label SEQUENTIAL as its `protocol`."""
    rows = figlib.collect(paths, figlib.projection(COLUMNS), POINT, faithful_only=True, load=load)
    for r in rows:
        if r.get("join_interval_s"):
            r["protocol"] = SEQUENTIAL
    return rows


# --- from runs.csv (pure) -----------------------------------------------------------------------------------------

def _order(r: dict) -> tuple:
    return (r["members"], ORDER.index(r["protocol"]) if r["protocol"] in ORDER else 99)


def indegree_rows(runs: list[dict]) -> list[dict]:
    """Per (protocol, members, in-degree): the fraction of members with it, pooled over the runs."""
    pooled: dict[tuple[str, int], dict[int, int]] = {}
    for r in runs:
        d = pooled.setdefault((r["protocol"], r["members"]), {})
        for x in r.get("indegree") or []:
            d[int(x["indegree"])] = d.get(int(x["indegree"]), 0) + int(x["members"])
    out = []
    for (p, n), d in sorted(pooled.items()):
        total = sum(d.values())
        out += [{"protocol": p, "members": n, "indegree": k, "fraction": v / total} for k, v in sorted(d.items())]
    return out


def tables(rows: list[dict], out: Path) -> tuple[list[dict], list[dict] | None]:
    """summary.csv, indegree.csv (when runs.csv has the in-degrees) and table1.md from runs.csv's rows; (the
    points, the in-degree rows or None)."""
    agg = summarise(kept(rows), POINT, VALUES, excluded=False, counts=False, order=_order)
    out.mkdir(parents=True, exist_ok=True)
    figlib.write_csv(out / "summary.csv", agg)
    indeg = None
    if any("indegree" in r for r in rows):
        indeg = indegree_rows(kept(rows))
        figlib.write_csv(out / "indegree.csv", indeg)
    (out / "table1.md").write_text(markdown(agg))
    return agg, indeg


def markdown(agg: list[dict]) -> str:
    sizes = sorted({r["members"] for r in agg})
    by = {(r["protocol"], r["members"]): r for r in agg}
    protos = [p for p in ORDER if any(r["protocol"] == p for r in agg)]
    out = []
    for key, rand, fmt, title in TABLES:
        out += [f"**{title}** (mean ± 95 % CI over the runs" + ("; in brackets a random graph with the same n and "
                                                                  "degree" if rand else "") + ")", "",
                "| members | " + " | ".join(TITLES.get(p, p) for p in protos) + " |", "|---|" + "---|" * len(protos)]
        for n in sizes:
            cells = []
            for p in protos:
                r = by.get((p, n))
                c = ci_cell(r, key, fmt, n=False)
                if rand and r is not None and r.get(rand) is not None:
                    c += f" [{fmt.format(r[rand])}]"
                if r is not None:
                    c += f" ({r['runs']})"
                cells.append(c)
            out.append(f"| {n} | " + " | ".join(cells) + " |")
        out.append(f"| paper, {PAPER_N} | " + " | ".join(
            fmt.format(PAPER[p][key]) if p in PAPER else "-" for p in protos) + " |")
        out.append("")
    return "\n".join(out)


def fig_indegree(rows: list[dict], path: Path) -> None:
    plt = figlib.pyplot()
    sizes = sorted({r["members"] for r in rows})
    fig, axes = plt.subplots(1, len(sizes), figsize=(5 * len(sizes), 3.6), squeeze=False)
    for ax, n in zip(axes[0], sizes):
        for p in ORDER:
            pts = [(r["indegree"], r["fraction"]) for r in rows if r["protocol"] == p and r["members"] == n]
            if pts:
                ax.plot(*zip(*pts), marker=MARKERS.get(p, "v"), ms=3, label=TITLES.get(p, p))
        ax.set_xlabel("in-degree")
        ax.set_ylabel("fraction of members")
        ax.set_title(f"Figure 5: in-degree after ~80 cycles, {n} members", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    figlib.save(fig, path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    def runs(a) -> list[dict]:
        rows = collect(a.dirs, figlib.read_load(a.load) if a.load else None)
        for r in rows:
            if r["excluded"]:
                print(f"{r['run']}: {r['excluded']}, not counted", file=sys.stderr)
        return rows

    # everything but runs.csv from runs.csv, as `tables` does
    a, rows = command_line(argv, __doc__, runs, read=read_runs, reread=True)
    agg, indeg = tables(rows, a.out)
    if a.draw and indeg:
        fig_indegree(indeg, a.out / "fig5_indegree.png")
    if not a.tables:
        print(markdown(agg))
    return 0


if __name__ == "__main__":
    sys.exit(main())
