"""The HyParView paper's Table 1 and Figure 5 (seed 003 §5.4) from runs of topologies/hyparview-table1.yaml:
the overlay's graph properties after 50 membership cycles — average clustering coefficient, average shortest path,
maximum hops to delivery — and the in-degree distribution, per protocol and group size.

The graph numbers are the Spark plug-in's (analysis/protocols/overlay.py `graph_metrics` and `hops_to_delivery`,
read from each run's analysis/metrics/summary.json: run `orchestrator analyze RUN...` first); the hops are also
computed here from the event logs in plain Python (`figures_hyparview.max_hops`) and a disagreement is reported.
Beside every clustering coefficient stands the yardstick that separates a protocol from its group size: a random
graph with the same members and the same mean undirected degree k has clustering ~ k / (n - 1); and beside every
average shortest path a random directed graph's ~ ln n / ln d (d: mean out-degree).

    .venv/bin/python -m analysis.table1_hyparview RUN_DIR... --out docs/results/hyparview-table1

Writes runs.csv, summary.csv (per protocol and n: mean, 95 % CI half-width (Student t), n), indegree.csv,
table1.md and fig5_indegree.png.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from analysis.figures_hyparview import MARKERS, PROTOCOLS, TITLES, _plt, max_hops
from analysis.runlogs import analyse_completed, read_events, write_csv as _write_csv

# §5.4, Table 1 (10 000 nodes, PeerSim, after 50 cycles); CyclonAcked is not in the table
PAPER = {"cyclon": {"clustering": 0.006836, "shortest_path": 2.60426, "max_hops": 10.6},
         "scamp": {"clustering": 0.022476, "shortest_path": 3.35398, "max_hops": 14.1},
         "hyparview": {"clustering": 0.00092, "shortest_path": 6.38542, "max_hops": 9.0}}
PAPER_N = 10_000
SEQUENTIAL = "hyparview, joins one by one"
ORDER = (*PROTOCOLS[:1], SEQUENTIAL, *PROTOCOLS[1:])
VALUES = ("clustering", "clustering_random", "shortest_path", "shortest_path_random", "max_hops", "degree",
          "out_degree")


def random_clustering(n: int, degree: float) -> float | None:
    """Clustering coefficient of a random graph with n members and mean undirected degree `degree`: the chance
    that two neighbours of a member are linked, degree / (n - 1)."""
    return degree / (n - 1) if n > 1 and degree is not None else None


def random_path(n: int, out_degree: float) -> float | None:
    """Average shortest path of a random directed graph with n members and mean out-degree d: ~ ln n / ln d."""
    return math.log(n) / math.log(out_degree) if n > 1 and out_degree and out_degree > 1 else None


def analyse_run(run_dir: Path) -> dict[str, Any]:
    manifest, events = read_events(run_dir)
    spec = manifest.get("spec") or {}
    protocol = next(iter(spec.get("protocol") or {}), None)
    if ((spec.get("protocol") or {}).get(protocol) or {}).get("join_interval"):
        protocol = SEQUENTIAL          # the paper's one-by-one joins (docs/reproduction-hyparview.md)
    path = run_dir / "analysis" / "metrics" / "summary.json"
    if not path.exists():
        raise SystemExit(f"{run_dir}: no {path.relative_to(run_dir)} - run `orchestrator analyze {run_dir}` first")
    s = json.loads(path.read_text())
    n = s.get("members_before") or 0
    degree, edges = s.get("degree_before"), s.get("edges_before")
    out_degree = edges / n if edges is not None and n else None
    plain_hops = max_hops(events, None)
    return {"run_dir": run_dir.name, "protocol": protocol, "members": n, "seed": manifest.get("seed"),
            "status": manifest.get("status"),
            "clustering": s.get("clustering_before"), "clustering_random": random_clustering(n, degree),
            "shortest_path": s.get("shortest_path_before"), "shortest_path_random": random_path(n, out_degree),
            "max_hops": s.get("max_hops_before"), "max_hops_plain": plain_hops,
            "degree": degree, "out_degree": out_degree, "indegree": s.get("indegree_before") or []}


def aggregate(runs: list[dict]) -> list[dict]:
    from analysis.stats import mean_ci

    groups: dict[tuple[str, int], list[dict]] = {}
    for r in runs:
        groups.setdefault((r["protocol"], r["members"]), []).append(r)
    out = []
    for (p, n), rs in sorted(groups.items(), key=lambda kv: (kv[0][1], ORDER.index(kv[0][0])
                                                             if kv[0][0] in ORDER else 99)):
        row: dict[str, Any] = {"protocol": p, "members": n, "runs": len(rs)}
        for k in VALUES:
            m, ci = mean_ci([x[k] for x in rs if x.get(k) is not None])
            row[k], row[f"{k}_ci95"] = m, ci
        out.append(row)
    return out


def indegree_rows(runs: list[dict]) -> list[dict]:
    """Per (protocol, members, in-degree): the fraction of members with it, pooled over the runs."""
    pooled: dict[tuple[str, int], dict[int, int]] = {}
    for r in runs:
        d = pooled.setdefault((r["protocol"], r["members"]), {})
        for x in r["indegree"]:
            d[int(x["indegree"])] = d.get(int(x["indegree"]), 0) + int(x["members"])
    out = []
    for (p, n), d in sorted(pooled.items()):
        total = sum(d.values())
        out += [{"protocol": p, "members": n, "indegree": k, "fraction": v / total} for k, v in sorted(d.items())]
    return out


def markdown(agg: list[dict]) -> str:
    def cell(r: dict | None, k: str, fmt: str) -> str:
        if r is None or r.get(k) is None:
            return "-"
        ci = r.get(f"{k}_ci95")
        return fmt.format(r[k]) + (f" ± {fmt.format(ci)}" if ci is not None else "")

    sizes = sorted({r["members"] for r in agg})
    by = {(r["protocol"], r["members"]): r for r in agg}
    protos = [p for p in ORDER if any(r["protocol"] == p for r in agg)]
    out = []
    for key, rand, fmt, title in (("clustering", "clustering_random", "{:.4f}", "average clustering coefficient"),
                                  ("shortest_path", "shortest_path_random", "{:.2f}", "average shortest path"),
                                  ("max_hops", None, "{:.1f}", "maximum hops to delivery (mean over broadcasts)")):
        pk = {"clustering": "clustering", "shortest_path": "shortest_path", "max_hops": "max_hops"}[key]
        out += [f"**{title}** (mean ± 95 % CI over the runs" + ("; in brackets a random graph with the same n and "
                                                                  "degree" if rand else "") + ")", "",
                "| members | " + " | ".join(TITLES.get(p, p) for p in protos) + " |", "|---|" + "---|" * len(protos)]
        for n in sizes:
            cells = []
            for p in protos:
                r = by.get((p, n))
                c = cell(r, key, fmt)
                if rand and r is not None and r.get(rand) is not None:
                    c += f" [{fmt.format(r[rand])}]"
                if r is not None:
                    c += f" ({r['runs']})"
                cells.append(c)
            out.append(f"| {n} | " + " | ".join(cells) + " |")
        out.append(f"| paper, {PAPER_N} | " + " | ".join(
            fmt.format(PAPER[p][pk]) if p in PAPER else "-" for p in protos) + " |")
        out.append("")
    return "\n".join(out)


def fig_indegree(rows: list[dict], path: Path) -> None:
    plt = _plt()
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
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run directories, analysed (orchestrator analyze)")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    runs = analyse_completed(a.runs, analyse_run)
    for r in runs:
        if (r["max_hops"] is None) != (r["max_hops_plain"] is None) or (
                r["max_hops"] is not None and abs(r["max_hops"] - r["max_hops_plain"]) > 1e-9):
            print(f"{r['run_dir']}: hops from Spark {r['max_hops']} != plain {r['max_hops_plain']}", file=sys.stderr)
    a.out.mkdir(parents=True, exist_ok=True)
    _write_csv(a.out / "runs.csv", [{k: v for k, v in r.items() if k != "indegree"} for r in runs])
    agg = aggregate(runs)
    _write_csv(a.out / "summary.csv", agg)
    rows = indegree_rows(runs)
    _write_csv(a.out / "indegree.csv", rows)
    (a.out / "table1.md").write_text(markdown(agg))
    fig_indegree(rows, a.out / "fig5_indegree.png")
    print(markdown(agg))
    return 0


if __name__ == "__main__":
    sys.exit(main())
