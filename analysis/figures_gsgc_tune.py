"""The adaptive method's runs (`orchestrator tune`'s tune.json; analysis/figures_gsgc.py's `tune` subcommand): per
evaluated step interval in search order, f(x) as recorded and the runs' TPR (each run's `run_values`, recorded by
tune) with their mean ± 95 % CI, the window found beside the paper's, optionally a sweep grid's curve of the same b.
The tune files are the committed inputs (docs/results/tune-*.json), so this is its own tables mode."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from analysis.doc import Doc, Figure, Heading, Para, Table, fmt, write
from analysis.figlib import write_csv
from analysis.figures_gsgc_data import NoPoints, aggregate, load_points, pm, read_runs
from analysis.figures_gsgc_plots import fig_tune
from analysis.stats import mean_ci


def load_tune(path: Path) -> dict[str, Any]:
    """A tune.json as `orchestrator tune` writes it; NoPoints when it is missing or has no result yet."""
    try:
        d = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise NoPoints(f"{path}: not a readable tune.json ({exc})") from None
    if not d.get("result"):
        raise NoPoints(f"{path}: the search has not finished (no result)")
    return d


def tune_label(path: Path, d: dict) -> str:
    """The tune directory's name (…/NAME/tune.json), or the file's (a committed copy tune-NAME.json: NAME)."""
    p = Path(path)
    name = p.parent.name if p.name == "tune.json" else p.stem.removeprefix("tune-")
    return f"{name} ({d['inputs'].get('reps')} run(s) per x)"


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


def cmd_tune(files: list[Path], out: Path, title: str | None, grid_dirs: list[Path], b: int,
             grid_runs: list[Path] = ()) -> dict[str, Any]:
    tunes = []
    for f in files:
        d = load_tune(f)
        label = tune_label(f, d)
        tunes.append((label, d, tune_rows(d, label)))
    grid_rows = load_points(grid_dirs) if grid_dirs else []
    for f in grid_runs:
        grid_rows += read_runs(f)
    grid = aggregate(grid_rows, ("b", "step_s")) if grid_rows else []
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
