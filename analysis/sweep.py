"""Sweep analysis: the runs of a sweep directory (`orchestrator sweep`, sweep.json), each run's numbers from its
protocol's plug-in (`ProtocolAnalysis.run_values`, analysis.protocols: the one definition of a run's numbers),
aggregated per point over the repetitions (mean and 95 % confidence interval, Student t), the plug-in's figures.

Nothing here knows a protocol: the plug-in says which values a point has (`sweep_values`, from the run's values;
`sweep_columns`: those aggregated and their labels), which figures the sweep draws (`sweep_figures`: GSGC's are
the paper's Figures 5-8 and 12-13), and optionally `sweep_point_keys` (the point's parameters carried into
summary.csv), `sweep_measured` ((count column, noun) of the first value) and `sweep_note` (the text under the
table). A protocol without its own takes the generic ones: delivery ratio, latency median and p90, control share
of the bytes, messages per member-second.

A run's values, by engine:
- "events": `run_values` of the run directory (pure Python over its event logs and small files; seconds per
  sweep): what `orchestrator tune` and CI use. Numbers that need the packets (control overhead, message rates) are
  absent.
- "spark": analysis.run's summary.json (a Spark pass per run not yet analysed, with its report and a comparison
  report), whose run values are taken afresh from `run_values` (the same numbers; a summary.json written before a
  definition changed is brought up to date).

Writes under <sweep>/analysis/: points.csv (a row per selected point), summary.csv (a row per point group),
sweep_context.json (sweep.json without its points: what sweep.md says of the sweep), figures/*.png, sweep.md,
sweep.html. `python -m analysis.sweep tables DIR --out OUT` regenerates summary.csv and sweep.md (and the figures)
from DIR's points.csv and sweep_context.json alone (a committed copy under docs/results/).
"""
from __future__ import annotations

import csv
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from analysis import protocols
from analysis.doc import Doc, Figure, Heading, Para, Table, fmt, write
from analysis.figlib import as_number, pyplot, save, write_csv
from analysis.protocols import ProtocolAnalysis
from analysis.rundir import AnalysisError, load
from analysis.stats import mean_ci

GENERIC_NOTE = ("Per point the mean over the repetitions ± the half-width of the 95 % confidence interval (Student t) "
                "of each run's mean delivery ratio, latency median and p90 over all receipts, control share of the "
                "bytes sent and messages sent per member-second (analysis.metrics).")


# --- each run's values --------------------------------------------------------------------------------------------

def run_record(run_dir: Path) -> dict[str, Any]:
    """A run's protocol, member count and its plug-in's `run_values` (no Spark)."""
    run = load(Path(run_dir))
    return {"protocol": run.protocol, "members": len(run.members), **protocols.get(run.protocol).run_values(run)}


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def run_values_of(root: Path, run_dirs: list[str], master: str = "local[*]",
                  engine: str = "spark") -> dict[str, dict]:
    """run directory (relative to `root`) -> its values, by `engine` (the module's docstring). A run whose
    directory cannot be read, or whose Spark analysis failed, has none."""
    if engine not in ("spark", "events"):
        raise ValueError(f"engine {engine!r}: spark or events")
    if engine == "spark":
        todo = [root / rd for rd in run_dirs if not (root / rd / "analysis" / "metrics" / "summary.json").exists()]
        if todo:
            from analysis.cli import run_analysis
            run_analysis(todo, master, root / "analysis" / "comparison")
    out = {}
    for rd in run_dirs:
        try:
            values = run_record(root / rd)
        except (AnalysisError, OSError, ValueError) as exc:
            print(f"sweep analysis: {rd}: {exc}", file=sys.stderr)
            continue
        if engine == "spark":
            s = _read_json(root / rd / "analysis" / "metrics" / "summary.json")
            if not isinstance(s, dict):
                continue
            values = {**s, **values}
        out[rd] = values
    return out


def run_summaries(root: Path, run_dirs: list[str], master: str = "local[*]",
                  engine: str = "spark") -> tuple[dict[str, dict], dict[str, dict]]:
    """`run_values_of` and an empty dict: the signature analysis/virtual_time.py calls (the second dict was the
    queue statistics, now GSGC's run values)."""
    return run_values_of(root, run_dirs, master, engine), {}


def finished_runs(index: dict) -> list[str]:
    """The run directories of the selected points that completed."""
    selected = set(index.get("selected") or index.get("points", {}))
    return [e["run_dir"] for e in index.get("points", {}).values()
            if e.get("run_dir") and e.get("status") == "completed" and e.get("id") in selected]


# --- points and their aggregation (pure) ----------------------------------------------------------------------------

def sweep_plugin(summaries: dict[str, dict]) -> ProtocolAnalysis:
    """The plug-in of the sweep's protocol (from its runs' values; GSGC when there are none). A sweep over several
    protocols takes their plug-ins' sweep values when they all share them (HyParView, Cyclon, Scamp and
    CyclonAcked: OverlayAnalysis's), else the generic ones."""
    names = sorted({protocols.summary_protocol(s) for s in summaries.values() if s})
    if not names:
        return protocols.get("gsgc")
    plugins = [protocols.get(n) for n in names]
    first = type(plugins[0])
    if all(type(p).sweep_values is first.sweep_values and type(p).sweep_columns is first.sweep_columns
           for p in plugins):
        return plugins[0]
    return protocols.GENERIC


def point_rows(index: dict, values: dict[str, dict], plugin: ProtocolAnalysis | None = None) -> list[dict]:
    """One row per selected point of sweep.json: its coordinates, status and judges' verdict, the run's member count
    and the plug-in's `sweep_values` of its run (None where the run is missing)."""
    plugin = plugin or sweep_plugin(values)
    rows = []
    for pid in index.get("selected") or list(index.get("points", {})):
        e = index["points"].get(pid, {})
        rd = e.get("run_dir")
        v = values.get(rd) or {}
        rows.append({
            "point": pid, "group": e.get("group"), **{f"c.{k}": x for k, x in (e.get("coords") or {}).items()},
            "rep": e.get("rep"), "status": e.get("status"), "run_dir": rd,
            "unfaithful": e.get("unfaithful"), "fidelity": (e.get("fidelity") or {}).get("verdict"),
            "members": v.get("members"), **plugin.sweep_values(v, {}),
        })
    return rows


def sweep_values_of(plugin: ProtocolAnalysis, rows: list[dict]) -> tuple[str, ...]:
    """The values the sweep aggregates: the plug-in's columns, and the round count when its rows have one."""
    keys = tuple(k for k, _ in plugin.sweep_columns)
    return keys + tuple(k for k in ("rounds",) if rows and k in rows[0] and k not in keys)


def aggregate(rows: list[dict], values: tuple[str, ...], point_keys: tuple[str, ...] = ("members",),
              measured: str | None = None) -> list[dict]:
    """Per point group (coordinates without the repetition): its first row's `point_keys`, runs, runs the judges
    call unfaithful, `runs_measured` (runs with the first value; also as `measured` when the plug-in names that
    count), and mean and 95 % CI of each value."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        if r["group"] is not None:      # None: a selected point not run yet (listed apart, not a group of its own)
            groups[r["group"]].append(r)
    out = []
    for g, rs in groups.items():
        first = rs[0]
        row = {"group": g, **{k: v for k, v in first.items() if k.startswith("c.")},
               **{k: first.get(k) for k in point_keys},
               "runs": len(rs), "runs_unfaithful": sum(1 for r in rs if r.get("unfaithful")),
               "runs_measured": sum(1 for r in rs if r.get(values[0]) is not None)}
        if measured:
            row[measured] = row["runs_measured"]
        for v in values:
            m, ci = mean_ci([r[v] for r in rs if r.get(v) is not None])
            row[f"{v}_mean"], row[f"{v}_ci95"] = m, ci
        out.append(row)
    return out


# --- figures (generic helpers; the plug-in chooses) ------------------------------------------------------------------

def series(agg: list[dict], x: str, x_axis: str | None) -> dict[str, list[dict]]:
    """Rows with a numeric x grouped into lines. A line's label is the coordinates that tell lines apart: not the
    x axis, not an axis with one value, and not an axis whose value is x itself (a named axis such as `n`
    whose values are the member counts: `axis_named` cannot see that it sets topology.members.count)."""
    rows = [r for r in agg if r.get(x) is not None]
    coords = sorted({k for r in rows for k in r if k.startswith("c.")})

    def separates(k: str) -> bool:
        if k[2:] == x_axis or len({r.get(k) for r in rows}) < 2:
            return False
        return not all(as_number(r.get(k)) == float(r[x]) for r in rows)

    keep = [k for k in coords if separates(k)]
    lines: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        lines[", ".join(f"{k[2:]}={r.get(k)}" for k in keep) or "all"].append(r)
    return {k: sorted(v, key=lambda r: r[x]) for k, v in lines.items()}


def axis_named(index: dict, suffixes: tuple[str, ...]) -> str | None:
    for a in index.get("axes") or []:
        if any(a["key"].endswith(s) or a["name"] == s for s in suffixes):
            return a["name"]
    return None


def plot_lines(ax, lines: dict[str, list[dict]], x: str, y: str, marker: str = "o-") -> None:
    for label, rs in lines.items():
        pts = [(r[x], r[f"{y}_mean"], r[f"{y}_ci95"] or 0.0) for r in rs if r.get(f"{y}_mean") is not None]
        if pts:
            xs, ys, es = zip(*pts)
            ax.errorbar(xs, ys, yerr=es, fmt=marker, ms=4, capsize=3, label=label)
    if lines:
        ax.legend(fontsize=7)


def pair_figure(lines: dict[str, list[dict]], x: str, xlabel: str, left: tuple[str, str, str],
                right: tuple[str, str, str], path: Path) -> Path:
    """Two panels side by side against `x`; each (value, y label, title); mean ± 95 % CI per line."""
    fig, axes = pyplot().subplots(1, 2, figsize=(10, 3.8))
    for ax, (metric, ylabel, title) in zip(axes, (left, right)):
        plot_lines(ax, lines, x, metric)
        ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
        ax.set_ylim(bottom=0)
    return save(fig, path)


def line_figure(lines: dict[str, list[dict]], x: str, y: str, xlabel: str, ylabel: str, title: str,
                path: Path) -> Path:
    """One panel: `y` against `x`, mean ± 95 % CI per line."""
    fig, ax = pyplot().subplots(figsize=(5.5, 3.8))
    plot_lines(ax, lines, x, y)
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.set_ylim(bottom=0)
    return save(fig, path)


def figures(index: dict, agg: list[dict], figdir: Path,
            plugin: ProtocolAnalysis | None = None) -> list[tuple[str, Path]]:
    """The sweep's figures: the plug-in's (GSGC's paper figures by default)."""
    return (plugin or protocols.get("gsgc")).sweep_figures(index, agg, figdir)


# --- the whole analysis -----------------------------------------------------------------------------------------

CONTEXT_KEYS = ("experiment_file", "axes", "repetitions")


def analyze_sweep(root: Path, master: str = "local[*]", engine: str = "spark") -> Path:
    """Analyse a sweep directory (engine: "spark" or "events", see `run_values_of`); returns analysis/sweep.md."""
    root = Path(root)
    index = _read_json(root / "sweep.json")
    if not isinstance(index, dict) or "points" not in index:
        raise AnalysisError(f"{root}: no sweep.json (not a sweep directory)")
    values = run_values_of(root, finished_runs(index), master, engine)
    plugin = sweep_plugin(values)
    rows = point_rows(index, values, plugin)
    context = {"name": root.name, "protocol": plugin.name or None, **{k: index.get(k) for k in CONTEXT_KEYS}}
    out = root / "analysis"
    write_csv(out / "points.csv", rows)
    (out / "sweep_context.json").write_text(json.dumps(context, indent=1) + "\n")
    return report(rows, context, plugin, out, context["name"])


def report(rows: list[dict], context: dict, plugin: ProtocolAnalysis, out: Path, name: str) -> Path:
    """summary.csv, the figures and sweep.md (.html) under `out` from the point rows and the sweep's context."""
    values = sweep_values_of(plugin, rows)
    count, noun = getattr(plugin, "sweep_measured", None) or (None, None)
    agg = aggregate(rows, values, ("members", *getattr(plugin, "sweep_point_keys", ())), count)
    write_csv(out / "summary.csv", agg)
    made = figures({"axes": context.get("axes") or []}, agg, out / "figures", plugin)
    first = plugin.sweep_columns[0][0]
    noun = noun or plugin.sweep_columns[0][1]
    doc = Doc(f"Sweep {name}")
    axes = ", ".join(f"{a['name']} ∈ {{{', '.join(a['values'])}}}" for a in context.get("axes") or [])
    doc.add(Para(f"Experiment `{context.get('experiment_file')}` (protocol {plugin.name or 'unknown'}); axes: "
                 f"{axes or 'none'}; {context.get('repetitions')} repetition(s); {len(rows)} point(s), "
                 f"{sum(1 for r in rows if r.get(first) is not None)} with a measured {noun}."))
    doc.add(Para(getattr(plugin, "sweep_note", None) or GENERIC_NOTE))
    doc.add(Heading(1, "Per point (mean ± 95 % CI over repetitions)"))
    cols = [k for k in agg[0] if k.startswith("c.")] if agg else []
    runs_key = count or "runs_measured"
    doc.add(Table([c[2:] for c in cols] + [f"runs (with {noun})" if count else "runs (measured)"]
                  + [label for _, label in plugin.sweep_columns],
                  [[r.get(c, "–") for c in cols] + [f"{r['runs']} ({r[runs_key]})",
                                           *[_pm(r, v) for v, _ in plugin.sweep_columns]] for r in agg]))
    for title, path in made:
        doc.add(Heading(1, title))
        doc.add(Figure(path, title))
    missing = [r for r in rows if r.get(first) is None]
    if missing:
        doc.add(Heading(1, f"Points without a {noun if count else 'measurement'}"))
        doc.add(Para(", ".join(f"{r['point']} ({r['status'] or 'not run'})" for r in missing)))
    md, _ = write(doc, out, "sweep")
    return md


def _pm(r: dict, v: str) -> str:
    m, ci = r[f"{v}_mean"], r[f"{v}_ci95"]
    if m is None:
        return "-"
    return f"{fmt(m)} ± {fmt(ci)}" if ci is not None else fmt(m)


# --- tables from the committed files -----------------------------------------------------------------------------

def _csv_cell(v: str) -> Any:
    """A points.csv cell: None when empty, an int or float when it reads back as the same text (so it is written
    back unchanged), True/False, else the text."""
    if v == "":
        return None
    if v in ("True", "False"):
        return v == "True"
    for cast in (int, float):
        try:
            x = cast(v)
        except ValueError:
            continue
        if str(x) == v:
            return x
    return v


def tables(src: Path, out: Path) -> Path:
    """summary.csv, sweep.md and the figures under `out` from `src`'s points.csv and sweep_context.json (an analysis
    directory, or a copy of one under docs/results/); no run directory is read."""
    src, out = Path(src), Path(out)
    context = _read_json(src / "sweep_context.json")
    if not isinstance(context, dict) or not (src / "points.csv").is_file():
        raise AnalysisError(f"{src}: needs points.csv and sweep_context.json (python -m analysis.sweep writes them)")
    with (src / "points.csv").open(newline="") as f:
        rows = [{k: _csv_cell(v) for k, v in r.items()} for r in csv.DictReader(f)]
    plugin = protocols.get(context.get("protocol")) if context.get("protocol") else protocols.GENERIC
    out.mkdir(parents=True, exist_ok=True)
    if out.resolve() != src.resolve():
        write_csv(out / "points.csv", rows)
        (out / "sweep_context.json").write_text((src / "sweep_context.json").read_text())
    return report(rows, context, plugin, out, context.get("name") or src.name)


def main(argv: list[str] | None = None) -> int:
    import argparse

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["tables"]:
        p = argparse.ArgumentParser(prog="python -m analysis.sweep tables",
                                    description="summary.csv and sweep.md from a points.csv and sweep_context.json.")
        p.add_argument("dir", type=Path, help="a sweep's analysis directory or its copy (docs/results/...)")
        p.add_argument("--out", type=Path, required=True)
        args = p.parse_args(argv[1:])
        try:
            print(tables(args.dir, args.out))
        except AnalysisError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        return 0
    p = argparse.ArgumentParser(prog="python -m analysis.sweep", description="Analyse a sweep directory "
                                "(`python -m analysis.sweep tables DIR --out OUT`: its tables from the CSV).")
    p.add_argument("sweep_dir", type=Path)
    p.add_argument("--master", default="local[*]")
    p.add_argument("--engine", choices=("spark", "events"), default="spark")
    args = p.parse_args(argv)
    try:
        print(analyze_sweep(args.sweep_dir, args.master, args.engine))
    except AnalysisError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
