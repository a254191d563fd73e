"""What seed 001's scripts (analysis/figures_pbcast.py, figures_pbcast_more.py, figures_vsync.py) share beyond
analysis/figlib.py: a run's row as a projection of its plug-in's run_values (a script's column -> a run_values
key; renaming, no computing), the aggregated rows laid out as the committed summary.csv files have them, and the
Markdown cells of their tables ("mean ± 95 % CI half-width (n)"). Candidates for figlib (`project`, `summarise`,
`ci_cell`, `md_rows`, `excluded_note`).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Iterable

from analysis import figlib
from analysis.rundir import RunDir

Columns = tuple[tuple[str, str], ...]


def project(columns: Columns, protocols: Iterable[str], plugin: str | None = None) -> figlib.Values:
    """The values function of a script: the run's plug-in's run_values (`plugin`, or each run's own), each
    column named as the script's CSV names it. A run of another protocol is excluded (its row kept)."""
    get = figlib.plugin_values(plugin)
    protocols = tuple(protocols)

    def values(run: RunDir) -> dict[str, Any]:
        if run.protocol not in protocols:
            raise figlib.Exclude(f"protocol {run.protocol}, not {' or '.join(protocols)}")
        v = get(run)
        return {col: v.get(key) for col, key in columns}
    return values


def kept(rows: list[dict]) -> list[dict]:
    return [r for r in rows if not r.get("excluded")]


def summarise(rows: list[dict], point: tuple[str, ...], values: tuple[str, ...],
              lead: tuple[str, ...] | None = None, extra: dict[str, Callable[[list[dict]], Any]] | None = None,
              largest: bool = False, sums: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """figlib.aggregate per point, laid out: the `lead` columns (default: the point's keys, then `runs`; `excluded`
    follows `runs` when some row is excluded), the `extra` columns (a function of the point's kept rows), then
    per value its mean, `_ci95`, `_n` and, with `largest`, `_largest` (the largest run's value) for a value whose
    name says max; `sums`: list columns summed element-wise over the kept rows."""
    lead = lead or (*point, "runs")
    if any(r.get("excluded") for r in rows):
        i = lead.index("runs") + 1
        lead = (*lead[:i], "excluded", *lead[i:])
    groups: dict[tuple, list[dict]] = {}
    for r in kept(rows):
        groups.setdefault(tuple(r.get(k) for k in point), []).append(r)
    out = []
    for a in figlib.aggregate(rows, point, values):
        rs = groups.get(tuple(a[k] for k in point), [])
        row = {k: a[k] for k in lead}
        row.update({k: f(rs) for k, f in (extra or {}).items()})
        for v in values:
            row[v], row[f"{v}_ci95"], row[f"{v}_n"] = a[v], a[f"{v}_ci95"], a[f"{v}_n"]
            if largest and "max" in v:
                row[f"{v}_largest"] = max((r[v] for r in rs if r.get(v) is not None), default=None)
        for h in sums:
            row[h] = [sum(c) for c in zip(*(r[h] for r in rs if isinstance(r.get(h), list)))]
        out.append(row)
    return out


def excluded_note(rows: list[dict]) -> str:
    """The runs left out of the aggregates, each with the reason, for the end of a tables.md ('' when none)."""
    out = [f"- {r.get('run')}: {r['excluded']}" for r in rows if r.get("excluded")]
    return "\n**runs left out of the aggregates**\n\n" + "\n".join(out) + "\n" if out else ""


def write_json(path: Path, doc: dict) -> None:
    path.write_text(json.dumps(doc, indent=1, default=str))


def f(x: Any, spec: str = "{:.1f}") -> str:
    """A number as the tables print it; '-' for None."""
    return "-" if x is None else spec.format(x) if isinstance(x, float) else str(x)


def ci_cell(r: dict, key: str, spec: str = "{:.2f}") -> str:
    """`mean ± half-width (n)`; `mean (n)` with one run; '-' without a value."""
    if r.get(key) is None:
        return "-"
    ci = r.get(f"{key}_ci95")
    return f(float(r[key]), spec) + (f" ± {f(ci, spec)}" if ci is not None else "") + f" ({r.get(f'{key}_n')})"


def md_rows(header: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table's lines (and an empty line after it)."""
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header), *("| " + " | ".join(r) + " |"
                                                                            for r in rows), ""]
