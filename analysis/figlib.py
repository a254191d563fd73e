"""The shared layer of the reproductions' scripts (issue #38): run directories -> each run's numbers from its
protocol's plug-in (`run_values`) -> one row per run (every run kept; an excluded one with the reason) ->
aggregated per point (mean ± 95 % CI, Student t) -> CSV, Markdown tables and figures. A paper's script declares
which runs, which point keys, which values, which tables and figures; it computes no per-run number itself.

    rows = collect(paths, plugin_values("qsm"), point=("members", "R"))
    agg = aggregate(rows, point=("members", "R"), values=("throughput", "delivery"))
    write_csv(out / "runs.csv", rows); write_csv(out / "summary.csv", agg)
    (out / "tables.md").write_text(md_table(agg, [Col("members"), Col("throughput", "msgs/s", ci=True)]))
    line_figure(agg, x="members", y="throughput", series=("R",), path=out / "fig9.png", ...)

A row's identity columns: `run` (the run directory's name), `run_dir`, `point` and the sweep coordinates (`c.<axis>`)
when the run belongs to a sweep, `seed`, `status`, `verdict` and `judged` (the judges' reasons), `dilation`, `cpu`
(the budget), with an enforced budget `budget_bound` (how many members ran at their budget: throttled in most
periods) and `throttled_share_max`, `load_mean`/`load_max` (from a load log), and `excluded`: None, or why the row is not in the
aggregates (not completed; the values function's own reason; unfaithful when `faithful_only`).

analysis/figtables.py is the other half: the per-point summary as the scripts' summary.csv files lay it out
(`summarise`), the Markdown cells, the summary files and the scripts' two-mode command line.
"""
from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from analysis.doc import fmt
from analysis.rundir import AnalysisError, RunDir, load
from analysis.stats import mean_ci

Values = Callable[[RunDir], dict[str, Any]]


# --- finding the runs ---------------------------------------------------------------------------------------------

def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def run_paths(paths: Iterable[Path]) -> list[tuple[Path, dict]]:
    """(run directory, sweep context) for every run under `paths`: a sweep directory (sweep.json) gives every run of
    every point — all attempts, the last one of a point marked `latest` —, a run directory itself, any other
    directory the run directories below it. The context: {"point", "coords", "rep", "latest"} for sweep runs."""
    out: list[tuple[Path, dict]] = []
    for p in map(Path, paths):
        index = _json(p / "sweep.json")
        if isinstance(index, dict) and "points" in index:
            for pid, e in sorted(index["points"].items()):
                pdir = p / "points" / pid
                runs = sorted(d for d in pdir.iterdir() if (d / "manifest.json").exists()) if pdir.is_dir() else []
                latest = str(p / e["run_dir"]) if e.get("run_dir") else None
                for d in runs:
                    out.append((d, {"point": pid, "coords": dict(e.get("coords") or {}), "rep": e.get("rep"),
                                    "latest": latest is None or str(d) == latest}))
        elif (p / "manifest.json").exists():
            out.append((p, {}))
        elif p.is_dir():
            out += [(f.parent, {}) for f in sorted(p.glob("**/manifest.json")) if f.parent != p]
    return out


# --- one row per run ----------------------------------------------------------------------------------------------

class Exclude(Exception):
    """Raised by a values function: the run cannot give the figure's numbers (the message says why); its row is
    kept, marked excluded."""


def read_load(path: Path | None) -> list[tuple[float, float]]:
    """(unix time, 1-min load) from a `unix-time load1 load5 load15` log."""
    out = []
    if path and Path(path).exists():
        for line in Path(path).read_text().splitlines():
            parts = line.split()
            try:
                out.append((float(parts[0]), float(parts[1])))
            except (ValueError, IndexError):
                continue
    return out


def identity(run: RunDir, ctx: dict, load: list[tuple[float, float]] | None = None) -> dict[str, Any]:
    m, j = run.manifest, run.judges or {}
    row: dict[str, Any] = {"run": run.path.name, "run_dir": str(run.path)}
    if ctx:
        row["point"] = ctx.get("point")
        row.update({f"c.{k}": v for k, v in (ctx.get("coords") or {}).items()})
        row["rep"] = ctx.get("rep")
    row.update(seed=m.get("seed"), status=run.status, verdict=j.get("verdict"),
               judged="; ".join(j.get("reasons") or []) or None, dilation=run.dilation,
               cpu=(m.get("cpu_budget") or {}).get("cpu"))
    if j.get("budget_bound") is not None:       # the CPU budget judges: members that ran at their budget
        row.update(budget_bound=j["budget_bound"], throttled_share_max=j.get("throttled_share_max"))
    speed = m.get("host_speed") or {}
    if speed.get("memory") is not None:         # the host's work per CPU-second over the run (hostspeed)
        row.update(host_speed_memory=speed["memory"], host_speed_compute=speed.get("compute"))
    if load is not None:
        a, b = m.get("started_at"), m.get("ended_at")
        xs = [v for t, v in load if a is not None and b is not None and a <= t <= b]
        row["load_mean"], row["load_max"] = (sum(xs) / len(xs), max(xs)) if xs else (None, None)
    return row


def collect(paths: Iterable[Path], values: Values, point: tuple[str, ...] = (), faithful_only: bool = False,
            load: list[tuple[float, float]] | None = None, latest_only: bool = True) -> list[dict[str, Any]]:
    """One row per run under `paths` (`run_paths`): identity, then `values(run)` for completed runs. A run that is
    not completed, whose values raise `Exclude`, or (with `faithful_only`) whose judges say unfaithful, keeps its row
    with `excluded` = the reason. `latest_only`: earlier attempts of a sweep point are left out altogether (they
    were run again). `point` only orders the rows."""
    rows = []
    for path, ctx in run_paths(paths):
        if latest_only and ctx and not ctx.get("latest"):
            continue
        try:
            run = load_run(path)
        except AnalysisError as exc:
            rows.append({"run": path.name, "run_dir": str(path), "excluded": f"not a run directory: {exc}"})
            continue
        row = identity(run, ctx, load)
        row["excluded"] = None
        if run.status != "completed":
            row["excluded"] = f"not completed ({run.status})"
        else:
            try:
                row.update(values(run))
            except Exclude as exc:
                row["excluded"] = str(exc)
            if row["excluded"] is None and faithful_only and row.get("verdict") == "unfaithful":
                row["excluded"] = f"unfaithful: {row.get('judged')}"
        rows.append(row)
    return sorted(rows, key=lambda r: (tuple(_sortable(r.get(k)) for k in point), r.get("seed") or 0, r["run"]))


def load_run(path: Path) -> RunDir:
    return load(Path(path))


def plugin_values(protocol: str | None = None) -> Values:
    """The values function of a protocol's analysis plug-in (`ProtocolAnalysis.run_values`); None: each run's own
    protocol."""
    from analysis import protocols

    def values(run: RunDir) -> dict[str, Any]:
        plugin = protocols.get(protocol or run.protocol)
        return plugin.run_values(run)
    return values


def projection(columns: dict[str, str] | Iterable[tuple[str, str]], protocols: Iterable[str] = (),
               plugin: str | None = None) -> Values:
    """A script's values function: the run's plug-in's run_values (`plugin`, or each run's own protocol's) as the
    script's columns, `columns` {column: run_values key} (renaming, no computing). With `protocols`, a run of
    another protocol is excluded (its row kept)."""
    get, columns, protocols = plugin_values(plugin), dict(columns), tuple(protocols)

    def values(run: RunDir) -> dict[str, Any]:
        if protocols and run.protocol not in protocols:
            raise Exclude(f"protocol {run.protocol}, not {' or '.join(protocols)}")
        v = get(run)
        return {col: v.get(key) for col, key in columns.items()}
    return values


# --- aggregation (pure) -------------------------------------------------------------------------------------------

def _sortable(v: Any) -> tuple:
    if v is None:
        return (2, "")
    if isinstance(v, (int, float)):
        return (0, v)
    return (1, str(v))


def number(v: Any) -> float | None:
    """A finite number as a float; None for anything else (None, '', a bool, a label, NaN)."""
    if isinstance(v, bool) or v is None or v == "":
        return None
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def aggregate(rows: list[dict], point: tuple[str, ...], values: tuple[str, ...]) -> list[dict[str, Any]]:
    """Per point (the values of `point` in a row): `runs` (rows not excluded), `excluded` (rows excluded), and per
    value its mean, `<value>_ci95` (the half-width; None with one run) and `<value>_n` (runs that measured it)."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault(tuple(r.get(k) for k in point), []).append(r)
    out = []
    for key in sorted(groups, key=lambda k: tuple(_sortable(x) for x in k)):
        rs = groups[key]
        ok = kept(rs)
        row: dict[str, Any] = dict(zip(point, key))
        row["runs"], row["excluded"] = len(ok), len(rs) - len(ok)
        for v in values:
            xs = [x for r in ok if (x := number(r.get(v))) is not None]
            m, ci = mean_ci(xs)
            row[v], row[f"{v}_ci95"], row[f"{v}_n"] = m, ci, len(xs)
        out.append(row)
    return out


def kept(rows: list[dict]) -> list[dict]:
    """The rows in the aggregates (`excluded` empty)."""
    return [r for r in rows if not r.get("excluded")]


def as_number(v: Any) -> float | None:
    """A coordinate's value as a number: 100, '100', '2s', '500ms' or '20us' (seconds); None when it is a label."""
    try:
        return float(v)
    except (TypeError, ValueError):
        pass
    s = str(v).strip()
    for unit, mult in (("us", 1e-6), ("ms", 1e-3), ("s", 1.0)):
        if s.endswith(unit):
            try:
                return float(s[:-len(unit)]) * mult
            except ValueError:
                return None
    return None


# --- output ---------------------------------------------------------------------------------------------------------

def write_csv(path: Path, rows: list[dict]) -> None:
    """Rows with possibly different keys as one CSV (the union of the keys in first-seen order; lists and dicts as
    JSON)."""
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, keys)
        w.writeheader()
        for r in rows:
            w.writerow({k: json.dumps(v) if isinstance(v, (list, dict)) else v for k, v in r.items()})


def write_json(path: Path, doc: Any) -> None:
    """`doc` as indented JSON (what JSON cannot hold as its str)."""
    path.write_text(json.dumps(doc, indent=1, default=str))


def read_csv(path: Path, strings: bool = False) -> list[dict[str, Any]]:
    """A CSV written by `write_csv`, numbers as numbers, '' as None, lists and dicts as such (for tables regenerated
    from committed files); with `strings`, every cell as the file has it."""
    with Path(path).open() as f:
        return [r if strings else {k: _cell(v) for k, v in r.items()} for r in csv.DictReader(f)]


def _cell(v: str) -> Any:
    if v == "":
        return None
    for cast in (int, float):
        try:
            return cast(v)
        except ValueError:
            pass
    if v[:1] in "[{":
        try:
            return json.loads(v)
        except ValueError:
            pass
    return v


@dataclass(frozen=True)
class Col:
    """A table column: a key of the aggregated rows, its label, `ci`: mean ± half-width (analysis.doc.fmt's
    digits)."""

    key: str
    label: str | None = None
    ci: bool = False


def cell(row: dict, col: Col) -> str:
    v = row.get(col.key)
    if col.ci:
        ci = row.get(f"{col.key}_ci95")
        return f"{fmt(v)} ± {fmt(ci)}" if ci is not None else fmt(v)
    return fmt(v)


def md_table(rows: list[dict], cols: list[Col]) -> str:
    out = ["| " + " | ".join(c.label or c.key for c in cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(cell(r, c) for c in cols) + " |" for r in rows]
    return "\n".join(out) + "\n"


def pyplot():
    """matplotlib's pyplot on the Agg backend, imported when a figure is drawn."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save(fig, path: Path, dpi: int = 110, title: str | None = None) -> Path:
    """A figure laid out (with `title` over its panels), written to `path` (its directory made) and closed."""
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)
    return path


def line_figure(agg: list[dict], x: str, y: str, path: Path, series: tuple[str, ...] = (), title: str = "",
                xlabel: str | None = None, ylabel: str | None = None,
                paper: list[tuple[float, float]] | None = None, paper_label: str = "paper",
                hlines: list[tuple[str, float]] = ()) -> Path | None:
    """`y` (mean, 95 % CI as error bars) against `x`, one line per value of `series`, the paper's points beside them.
    None (nothing drawn) when no row has both."""
    pts = [r for r in agg if number(r.get(x)) is not None and number(r.get(y)) is not None]
    if not pts:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    lines: dict[tuple, list[dict]] = {}
    for r in pts:
        lines.setdefault(tuple(r.get(k) for k in series), []).append(r)
    for key, rs in sorted(lines.items(), key=lambda kv: tuple(_sortable(v) for v in kv[0])):
        rs.sort(key=lambda r: number(r[x]))
        label = ", ".join(f"{k} = {v}" for k, v in zip(series, key)) or "here"
        ax.errorbar([number(r[x]) for r in rs], [number(r[y]) for r in rs],
                    yerr=[number(r.get(f"{y}_ci95")) or 0 for r in rs], marker="o", capsize=3, label=label)
    if paper:
        ax.plot([p[0] for p in paper], [p[1] for p in paper], "k--", marker="s", label=paper_label)
    for label, v in hlines:
        ax.axhline(v, color="grey", linestyle=":", label=label)
    ax.set_xlabel(xlabel or x)
    ax.set_ylabel(ylabel or y)
    if title:
        ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save(fig, path, dpi=120)
