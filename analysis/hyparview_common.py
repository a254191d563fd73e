"""What the HyParView reproduction's scripts share (analysis/figures_hyparview.py: Figures 2-4;
analysis/table1_hyparview.py: Table 1 and Figure 5): the protocols' order, titles and markers, the values of a run
as a figure's columns (a projection of the overlay plug-ins' `run_values`), reading a runs.csv (the committed ones
predate figlib's `excluded` column), the per-point summary in the shape of the committed summary.csv files, and the
Markdown cell "mean ± 95 % CI (runs)". Pure; no per-run number is computed here."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from analysis import figlib

PROTOCOLS = ("hyparview", "cyclonacked", "cyclon", "scamp")
TITLES = {"hyparview": "HyParView", "cyclon": "Cyclon", "scamp": "Scamp", "cyclonacked": "CyclonAcked"}
MARKERS = {"hyparview": "o", "cyclon": "s", "scamp": "^", "cyclonacked": "D"}


def projection(columns: dict[str, str]) -> figlib.Values:
    """A figlib values function: {column: the run's plug-in's `run_values`[key]} for `columns` {column: key}."""
    values = figlib.plugin_values()

    def f(run) -> dict[str, Any]:
        v = values(run)
        return {col: v.get(key) for col, key in columns.items()}
    return f


def read_runs(path: Path) -> list[dict[str, Any]]:
    """A runs.csv as rows with `excluded` (None: counted). Rows written before figlib have `valid` and
    `invalid_because` instead: excluded = invalid_because."""
    rows = figlib.read_csv(path)
    for r in rows:
        if "excluded" not in r:
            r["excluded"] = r.get("invalid_because") or (None if str(r.get("valid", True)) == "True" else "invalid")
    return rows


def summarise(rows: list[dict], point: tuple[str, ...], values: tuple[str, ...], order: Callable[[dict], Any],
              maxes: tuple[str, ...] = (), counts: bool = True) -> list[dict[str, Any]]:
    """Per point, over the counted rows (`excluded` None): figlib.aggregate's runs and mean, 95 % CI half-width
    (and, with `counts`, how many runs measured it) of every value, beside the point keys the largest of each
    `maxes` column; sorted by `order`. (The shape of the committed summary.csv files: no `excluded` count, the runs
    left out are in runs.csv with their reason.)"""
    kept = [r for r in rows if not r.get("excluded")]
    out = []
    for a in sorted(figlib.aggregate(kept, point, values), key=order):
        group = [r for r in kept if tuple(r.get(k) for k in point) == tuple(a[k] for k in point)]
        row = {**{k: a[k] for k in point}, "runs": a["runs"]}
        for m in maxes:
            row[m] = max((r[m] for r in group if r.get(m) is not None), default=None)
        for v in values:
            row.update({v: a[v], f"{v}_ci95": a[f"{v}_ci95"], **({f"{v}_n": a[f"{v}_n"]} if counts else {})})
        out.append(row)
    return out


def cell(r: dict | None, key: str, fmt: str, runs: bool = False) -> str:
    """`fmt` of the mean, ` ± ` the half-width when there is one, ` (n)` runs with `runs`; "-" without a value."""
    if r is None or r.get(key) is None:
        return "-"
    ci = r.get(f"{key}_ci95")
    return fmt.format(r[key]) + (f" ± {fmt.format(ci)}" if ci is not None else "") + (
        f" ({r.get(f'{key}_n', r['runs'])})" if runs else "")
