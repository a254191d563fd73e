"""The other half of the reproductions' shared layer (analysis/figlib.py finds the runs, makes their rows and
aggregates them): the per-point summary as the paper scripts' summary.csv files lay it out (`summarise`), the
Markdown cells "mean ± 95 % CI half-width (n)", the summary files, and the two-mode command line every paper script
has (`command_line`):

    SCRIPT tables [KIND] RESULTS [--out DIR] [--figures]   everything again from a committed RESULTS/runs.csv
    SCRIPT [KIND] DIRS... --out DIR [--load LOG]           from sweep or run directories: runs.csv, then the same

A script declares its columns, point, values, tables and figures over these; it re-implements none of them.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Callable, Iterable

from analysis import figlib

Column = Callable[[list[dict]], Any]       # a summary column: a function of a point's counted rows


# --- the per-point summary (pure) -----------------------------------------------------------------------------------

def largest(key: str) -> Column:
    """The largest `key` over the rows (None without one)."""
    return lambda rs: max((r[key] for r in rs if r.get(key) is not None), default=None)


def summed(key: str) -> Column:
    """The rows' `key` lists summed element by element (a histogram over the runs)."""
    return lambda rs: [sum(c) for c in zip(*(r[key] for r in rs if isinstance(r.get(key), list)))]


def summarise(rows: list[dict], point: tuple[str, ...], values: Iterable[str], *,
              lead: tuple[str, ...] | None = None, excluded: bool | None = None,
              extra: dict[str, Column] | None = None, after: dict[str, Column] | None = None,
              counts: bool | tuple[str, ...] = True, largest_max: bool = False, mean: str = "{}",
              order: Callable[[dict], Any] | None = None) -> list[dict[str, Any]]:
    """figlib.aggregate per point, laid out as a summary.csv: the `lead` columns (default: the point's keys, then
    `runs`), `excluded` (the rows left out) after `runs` — None: when some row is excluded, True: always, False:
    never —, the `extra` columns (each a function of the point's counted rows), then per value its mean (named by
    `mean`, '{}' the value), `_ci95`, `_n` (with `counts`: True, or the values that have one) and, with
    `largest_max`, `_largest` (the largest run's) for a value whose name says max; then the `after` columns. The
    points in figlib.aggregate's order, or sorted by `order` (a function of the summary row)."""
    values = tuple(values)
    lead = tuple(lead or (*point, "runs"))
    if excluded or excluded is None and any(r.get("excluded") for r in rows):
        i = lead.index("runs") + 1
        lead = (*lead[:i], "excluded", *lead[i:])
    groups: dict[tuple, list[dict]] = {}
    for r in figlib.kept(rows):
        groups.setdefault(tuple(r.get(k) for k in point), []).append(r)
    out = []
    for a in figlib.aggregate(rows, point, values):
        rs = groups.get(tuple(a[k] for k in point), [])
        row = {k: a[k] for k in lead}
        row.update({k: f(rs) for k, f in (extra or {}).items()})
        for v in values:
            row[mean.format(v)], row[f"{v}_ci95"] = a[v], a[f"{v}_ci95"]
            if counts is True or counts and v in counts:
                row[f"{v}_n"] = a[f"{v}_n"]
            if largest_max and "max" in v:
                row[f"{v}_largest"] = largest(v)(rs)
        row.update({k: f(rs) for k, f in (after or {}).items()})
        out.append(row)
    return sorted(out, key=order) if order else out


# --- cells --------------------------------------------------------------------------------------------------------

def show(x: Any, spec: str | Callable[[Any], str] = "{:.1f}", none: str = "-") -> str:
    """A value as the tables print it: a float by `spec` (a format string; a function formats any value), `none`
    for None, anything else as its str."""
    if x is None:
        return none
    if callable(spec):
        return spec(x)
    return spec.format(x) if isinstance(x, float) else str(x)


def pm(mean: Any, ci: Any, spec: str | Callable[[Any], str] = "{:.2f}", none: str = "-", alone: str = "") -> str:
    """'mean ± half-width' (`show`'s `spec`); a mean without a half-width (one run) followed by `alone`; `none`
    without a mean."""
    if mean is None:
        return none
    return show(float(mean), spec) + (f" ± {show(float(ci), spec)}" if ci is not None else alone)


def ci_cell(r: dict | None, key: str, spec: str = "{:.2f}", n: bool = True) -> str:
    """`key` of an aggregated row as `mean ± half-width (n)`, n the runs that measured it (the point's runs when
    the row has no `_n`; left out without `n`); `mean (n)` with one run; '-' without a value."""
    if not r or r.get(key) is None:
        return "-"
    return pm(r[key], r.get(f"{key}_ci95"), spec) + (f" ({r.get(f'{key}_n', r.get('runs'))})" if n else "")


def md_rows(header: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table's lines (and an empty line after it)."""
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header), *("| " + " | ".join(r) + " |"
                                                                            for r in rows), ""]


def excluded_note(rows: list[dict]) -> str:
    """The runs left out of the aggregates, each with the reason, for the end of a tables.md ('' when none)."""
    out = [f"- {r.get('run')}: {r['excluded']}" for r in rows if r.get("excluded")]
    return "\n**runs left out of the aggregates**\n\n" + "\n".join(out) + "\n" if out else ""


# --- files --------------------------------------------------------------------------------------------------------

def write_summary(out: Path, agg: list[dict], doc: Any = None, md: str | None = None, suffix: str = "") -> None:
    """OUT/summary{suffix}.csv (the points), and those given: OUT/summary{suffix}.json (`doc`),
    OUT/tables{suffix}.md (`md`)."""
    figlib.write_csv(out / f"summary{suffix}.csv", agg)
    if doc is not None:
        figlib.write_json(out / f"summary{suffix}.json", doc)
    if md is not None:
        (out / f"tables{suffix}.md").write_text(md)


# --- the command line ---------------------------------------------------------------------------------------------

def command_line(argv: list[str] | None, doc: str, collect: Callable[[argparse.Namespace], list[dict]], *,
                 kinds: tuple[str, ...] = (), options: Callable[[argparse.ArgumentParser, bool], None] | None = None,
                 read: Callable[[Path], list[dict]] = figlib.read_csv,
                 reread: bool = False) -> tuple[argparse.Namespace, list[dict]]:
    """A paper script's two modes (the module docstring's; `doc`'s first paragraph is the description):
    `tables [KIND] RESULTS` reads RESULTS/runs.csv (by `read`); `[KIND] DIRS... --out DIR` writes `collect(args)`'s
    rows to DIR/runs.csv (and, with `reread`, goes on from DIR/runs.csv as `tables` would). `kinds`: the choices of
    a first argument KIND; `options(parser, tables)` adds the script's own options. Returns the arguments, with
    `tables` (the mode), `out` (made; RESULTS without --out), `source` (where runs.csv was read: RESULTS, else
    OUT) and `draw` (draw the figures: from DIRS always, from RESULTS with --figures), and the rows."""
    argv = list(sys.argv[1:] if argv is None else argv)
    tables = argv[:1] == ["tables"]
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    if kinds:
        ap.add_argument("kind", choices=kinds)
    if tables:
        ap.add_argument("results", type=Path, help="a results directory holding runs.csv (docs/results/<dir>)")
        ap.add_argument("--out", type=Path, default=None, help="where the tables go (default: RESULTS)")
        ap.add_argument("--figures", action="store_true", help="draw the figures too")
    else:
        ap.add_argument("dirs", nargs="+", type=Path,
                        help="sweep directories, run directories, or directories holding run directories")
        ap.add_argument("--out", type=Path, required=True)
        ap.add_argument("--load", type=Path, default=None, help="a `unix-time load1 load5 load15` log")
    if options:
        options(ap, tables)
    a = ap.parse_args(argv[1:] if tables else argv)
    a.tables, a.draw = tables, not tables or a.figures
    a.out = (a.out or a.results) if tables else a.out
    a.source = a.results if tables else a.out
    a.out.mkdir(parents=True, exist_ok=True)
    if tables:
        return a, read(a.results / "runs.csv")
    rows = collect(a)
    figlib.write_csv(a.out / "runs.csv", rows)
    return a, read(a.out / "runs.csv") if reread else rows
