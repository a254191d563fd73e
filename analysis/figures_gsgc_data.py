"""The GSGC figures' rows and numbers (analysis/figures_gsgc.py), pure given the files: the sweep analysis's
points.csv rows normalised (one per run), or the committed STEM_runs.csv read back, grouped per point (figlib's
mean ± 95 % CI, Student t), the §4.3 window on a measured grid and Welch's tests. No per-run number is computed
here: a run's TPR and steps are its `run_values`' round 0 (`tpr_round0_s`, `steps_round0` in points.csv)."""
from __future__ import annotations

import csv
from collections import defaultdict
from functools import partial
from pathlib import Path
from typing import Any

from analysis import figlib, figtables
from analysis.doc import fmt
from analysis.figlib import as_number, number
from analysis.stats import welch

# the paper's numbers, from its text (seed 000 §4.3, §4.4)
PAPER_SIM1_B3 = {"b": 3, "s": 9.0, "f_s": 28.6, "window": (4.0, 10.0), "tpr_range": (28.6, 31.2)}
PAPER_FIG12_N500 = {"n": 500, "tpr_s": 71.0}
E = 0.1   # §4.3's fluctuation index


class NoPoints(Exception):
    """A sweep directory without analysis/points.csv (or a results directory without its runs CSV)."""


# --- reading ------------------------------------------------------------------------------------------------------

def _int(v: Any) -> int | None:
    x = number(v)
    return int(x) if x is not None and x == int(x) else None


def normalise(row: dict[str, str], sweep: str, default_scheme: str = "global") -> dict[str, Any]:
    """One points.csv row with the numbers parsed and the grouping coordinates derived: b (subgroup, else the
    sweep's c.subgroup), step_s (else c.step), n (members, else c.n), scheme (c.scheme, else `default_scheme`),
    phase (c.start_phase); tpr = tpr_round0_s, steps = steps_round0; `ran` = the row has a point group."""
    b = _int(row.get("subgroup"))
    b = b if b is not None else _int(row.get("c.subgroup"))
    step = number(row.get("step_s"))
    step = step if step is not None or row.get("c.step") in (None, "") else as_number(row.get("c.step"))
    n = _int(row.get("members"))
    n = n if n is not None else _int(row.get("c.n"))
    return {"sweep": sweep, "point": row.get("point"), "group": row.get("group") or None,
            "rep": _int(row.get("rep")), "status": row.get("status") or None,
            "ran": bool(row.get("group")), "completed": row.get("status") == "completed",
            "unfaithful": str(row.get("unfaithful")).strip().lower() in ("true", "1", "yes"),
            "fidelity": row.get("fidelity") or None,
            "b": b, "step_s": step, "n": n, "scheme": row.get("c.scheme") or default_scheme,
            "phase": row.get("c.start_phase") or None, "duration": row.get("c.duration") or None,
            "tpr": number(row.get("tpr_round0_s")), "steps": number(row.get("steps_round0")),
            "run_dir": row.get("run_dir") or None}


def load_points(dirs: list[Path], default_scheme: str = "global") -> list[dict[str, Any]]:
    """The pooled, normalised rows of every DIR's analysis/points.csv; NoPoints names the first DIR without one."""
    rows = []
    for d in dirs:
        f = Path(d) / "analysis" / "points.csv"
        if not f.is_file():
            raise NoPoints(f"{d}: no analysis/points.csv; run python -m analysis.sweep {d} --engine events first")
        with f.open(newline="") as fh:
            rows += [normalise(r, str(d), default_scheme) for r in csv.DictReader(fh)]
    return rows


def read_runs(path: Path) -> list[dict[str, Any]]:
    """A STEM_runs.csv as the subcommands wrote it (`runs_csv`), back into rows (the tables mode)."""
    if not Path(path).is_file():
        raise NoPoints(f"{path}: not found (the tables mode reads a results directory's committed runs CSV)")
    rows = figlib.read_csv(path)
    for r in rows:
        for k in ("completed", "unfaithful"):
            r[k] = r.get(k) in (True, "True")
        for k in ("point", "group", "scheme", "phase", "duration", "status", "fidelity", "run_dir", "sweep"):
            if r.get(k) is not None:
                r[k] = str(r[k])
        r["ran"] = r.get("group") is not None
    return rows


def sweeps_of(rows: list[dict]) -> list[str]:
    """The sweep directories of the rows, in their first row's order (the command line's)."""
    return list(dict.fromkeys(r["sweep"] for r in rows))


def runs_csv(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "ran"} for r in rows]


# --- aggregation ------------------------------------------------------------------------------------------------

def key_sort(k: tuple) -> tuple:
    return tuple((x is None, x if not isinstance(x, str) else 0, x if isinstance(x, str) else "") for x in k)


def aggregate(rows: list[dict], keys: tuple[str, ...]) -> list[dict[str, Any]]:
    """Per combination of `keys` over the rows that ran: runs, completed, runs_with_tpr, unfaithful, the TPR and
    steps values (`tpr_values`, `steps_values`), their mean, 95 % CI half-width (figlib.aggregate) and count, and
    the member counts and durations pooled into the group (several when sweeps of different n or duration merge).
    A run without a TPR is counted and left out of the mean."""
    extra = {"completed": lambda rs: sum(r["completed"] for r in rs),
             "runs_with_tpr": lambda rs: sum(number(r["tpr"]) is not None for r in rs),
             "unfaithful": lambda rs: sum(r["unfaithful"] for r in rs),
             "members": lambda rs: sorted({r["n"] for r in rs if r["n"] is not None}),
             "durations": lambda rs: sorted({r["duration"] for r in rs if r["duration"]}),
             "sweeps": lambda rs: sorted({Path(r["sweep"]).name for r in rs})}
    after = {f"{v}_values": _values(v) for v in ("tpr", "steps")}
    return figtables.summarise([r for r in rows if r["ran"]], keys, ("tpr", "steps"), excluded=False, extra=extra,
                               after=after, counts=("steps",), mean="{}_mean",
                               order=lambda a: key_sort(tuple(a[k] for k in keys)))


def _values(key: str) -> figtables.Column:
    return lambda rs: [r[key] for r in rs if r[key] is not None]


def not_run(rows: list[dict]) -> list[dict]:
    return [r for r in rows if not r["ran"]]


def window(curve: list[tuple[float, float | None]], e: float = E) -> dict[str, Any] | None:
    """§4.3's window on a measured grid: `curve` is (step, mean TPR or None) per grid step. s = the step with the
    lowest mean TPR f(s) (the smaller step on a tie); the window [lo, hi] is the contiguous run of grid steps around
    s whose mean TPR is <= (1 + e) f(s) — a grid step without a mean TPR (no run with a TPR) ends it, as does a step
    above the bound. Only the grid's points are tried (the paper's part II probes in between); `lo_at_edge` /
    `hi_at_edge`: the window reaches the grid's first / last step, so it may extend beyond the grid. None when no
    step has a mean TPR."""
    pts = sorted(curve)
    measured = [(x, y) for x, y in pts if y is not None]
    if not measured:
        return None
    s, f_s = min(measured, key=lambda p: (p[1], p[0]))
    bound = (1 + e) * f_s
    i = next(j for j, p in enumerate(pts) if p[0] == s and p[1] == f_s)
    lo = hi = i
    while lo > 0 and pts[lo - 1][1] is not None and pts[lo - 1][1] <= bound:
        lo -= 1
    while hi < len(pts) - 1 and pts[hi + 1][1] is not None and pts[hi + 1][1] <= bound:
        hi += 1
    inside = [p[1] for p in pts[lo:hi + 1]]
    return {"s": s, "f_s": f_s, "e": e, "bound": bound, "lo": pts[lo][0], "hi": pts[hi][0],
            "steps_in_window": [p[0] for p in pts[lo:hi + 1]], "tpr_max_in_window": max(inside),
            "lo_at_edge": lo == 0, "hi_at_edge": hi == len(pts) - 1, "grid": [p[0] for p in pts]}


def windows_per_b(agg: list[dict], e: float = E) -> list[dict[str, Any]]:
    """`window` of every b's curve (agg rows keyed by b and step_s)."""
    by_b: dict[Any, list[tuple[float, float | None]]] = defaultdict(list)
    for r in agg:
        if r["step_s"] is not None:
            by_b[r["b"]].append((r["step_s"], r["tpr_mean"]))
    out = []
    for b in sorted(by_b, key=lambda x: (x is None, x)):
        w = window(by_b[b], e)
        out.append({"b": b, **(w or {"s": None, "f_s": None, "e": e, "bound": None, "lo": None, "hi": None,
                                     "steps_in_window": [], "tpr_max_in_window": None, "lo_at_edge": None,
                                     "hi_at_edge": None, "grid": sorted(x for x, _ in by_b[b])})})
    return out


def phase_tests(agg: list[dict]) -> list[dict[str, Any]]:
    """Per (b, step) and each pair of start phases (sorted by name): `welch` of the TPR and of the steps."""
    cells: dict[tuple, dict[str, dict]] = defaultdict(dict)
    for r in agg:
        cells[(r["b"], r["step_s"])][r["phase"]] = r
    out = []
    for (b, step) in sorted(cells, key=key_sort):
        phases = sorted(cells[(b, step)], key=lambda p: (p is None, p or ""))
        for i, pa in enumerate(phases):
            for pb in phases[i + 1:]:
                ra, rb = cells[(b, step)][pa], cells[(b, step)][pb]
                t, s = welch(ra["tpr_values"], rb["tpr_values"]), welch(ra["steps_values"], rb["steps_values"])
                out.append({"b": b, "step_s": step, "phase_a": pa, "phase_b": pb,
                            "tpr_a": ra["tpr_mean"], "tpr_b": rb["tpr_mean"], "n_a": t["n_a"], "n_b": t["n_b"],
                            "tpr_diff": t["diff"], "tpr_t": t["t"], "tpr_df": t["df"], "tpr_p": t["p"],
                            "steps_a": ra["steps_mean"], "steps_b": rb["steps_mean"],
                            "steps_diff": s["diff"], "steps_t": s["t"], "steps_df": s["df"], "steps_p": s["p"]})
    return out


def sim_tests(agg1: list[dict], agg2: list[dict]) -> list[dict[str, Any]]:
    """Per (b, step) measured in both simulations (agg rows keyed by b and step_s): each one's runs with a TPR,
    TPR mean ± CI and mean steps, and `welch`(II, I) of the TPR: diff = mean(II) - mean(I)."""
    one = {(r["b"], r["step_s"]): r for r in agg1}
    two = {(r["b"], r["step_s"]): r for r in agg2}
    out = []
    for k in sorted(set(one) & set(two), key=key_sort):
        r1, r2 = one[k], two[k]
        t = welch(r2["tpr_values"], r1["tpr_values"])
        out.append({"b": k[0], "step_s": k[1], "n_1": t["n_b"], "n_2": t["n_a"],
                    "tpr_1": r1["tpr_mean"], "ci_1": r1["tpr_ci95"], "steps_1": r1["steps_mean"],
                    "tpr_2": r2["tpr_mean"], "ci_2": r2["tpr_ci95"], "steps_2": r2["steps_mean"],
                    "diff": t["diff"], "t": t["t"], "df": t["df"], "p": t["p"]})
    return out


# --- cells ---------------------------------------------------------------------------------------------------------

# 'mean ± CI' ('mean (one value, no CI)' for one value, '—' for none)
pm = partial(figtables.pm, spec=fmt, none="—", alone=" (one value, no CI)")


def agg_csv(agg: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in ("tpr_values", "steps_values")} for r in agg]


def runs_cell(r: dict) -> str:
    return f"{r['runs']} / {r['completed']} / {r['runs_with_tpr']}"


def window_cell(w: dict) -> str:
    """A `window` as '[lo, hi]', '(edge)' when it reaches the grid's end, '—' without one."""
    if w["lo"] is None:
        return "—"
    return f"[{fmt(w['lo'])}, {fmt(w['hi'])}]" + (" (edge)" if w["lo_at_edge"] or w["hi_at_edge"] else "")
