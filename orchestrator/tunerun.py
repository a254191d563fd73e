"""`orchestrator tune` (orchestrator/tune.py is the pure search): each f(x) the mean of `--reps` runs of one step
interval, handed to the sweep's `run_points` together (so `--parallel K` runs them K at once); tune.json records
every evaluation and the result."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from orchestrator import sweep as sw
from orchestrator.backends.base import Progress
from orchestrator.errors import SpecError
from orchestrator.sweeprun import default_dir, load_base, run_points
from orchestrator.sweepstate import SweepOptions
from orchestrator.tune import TuneResult, finite, tune
from orchestrator.units import parse_time


# --- tune -------------------------------------------------------------------------------------------------------

@dataclass
class TuneOptions(SweepOptions):
    param: str = "protocol.gsgc.step"
    a0: float = 0.0
    b0: float = 20.0
    g: float = 2.0
    e: float = 0.10
    p: float = 1.0
    resolution: float = 0.01
    upper: float | None = None
    steps_per_run: float | None = None     # duration = max(base duration, steps_per_run * x)
    reps: int = 1
    duration: float | None = None          # replaces the experiment's duration (s) before steps_per_run
    metric: str = "rounds"                 # f(x): "rounds" (mean over a run's rounds) or "round0" (the paper's)


def _fmt_x(x: float) -> str:
    return f"{x:.3f}".rstrip("0").rstrip(".")


def tune_points(base: dict, opts: TuneOptions, x: float) -> list[sw.Point]:
    """The runs measuring f(x): `reps` repetitions with the parameter set to x seconds (and the duration)."""
    spec = sw.parse_sweep({"axes": {opts.param: [f"{_fmt_x(x)}s"]}, "repetitions": opts.reps})
    pts = sw.expand(spec, base)
    fixed = tuple((k, v[0]) for k, v in opts.axes.items())      # --fix PATH=VALUE: the same in every run
    if fixed:
        pts = [sw.Point(p.id, p.coords, p.rep, p.sets + fixed) for p in pts]
    if opts.steps_per_run or opts.duration:
        dur = opts.duration or parse_time(base.get("duration", "60s"))
        if opts.steps_per_run:
            dur = max(dur, opts.steps_per_run * x)
        pts = [sw.Point(p.id, p.coords, p.rep, p.sets + (("duration", f"{math.ceil(dur)}s"),)) for p in pts]
    return pts


def run_tune(path: str | Path, opts: TuneOptions, measure: Callable[[Path, list[dict]], list[float | None]],
             variables: dict | None = None, progress: Progress | None = None,
             on_eval: Callable[[float, float, list], None] | None = None) -> tuple[Path, TuneResult]:
    """The adaptive search with f(x) = the mean of `measure(root, entries)` (one TPR per finished run of x,
    None for a run in which no round completed: f is infinite if no run completed one)."""
    for key, values in opts.axes.items():
        if len(values) != 1 or key in (opts.param, "duration"):
            raise SpecError(f"--fix {key}: one value, and not the tuned parameter or the duration "
                            "(--duration, --steps-per-run)")
    base = load_base(path, variables, opts.dilation)
    sw.get_path(base, opts.param)
    root = (opts.out or default_dir(base, path, "tune")).resolve()
    header = {"kind": "tune", "experiment_file": str(path), "variables": variables or {}, "param": opts.param,
              "inputs": {k: getattr(opts, k) for k in ("a0", "b0", "g", "e", "p", "resolution", "upper",
                                                        "steps_per_run", "reps", "duration", "metric")},
              "fixed": {k: v[0] for k, v in opts.axes.items()}}
    evaluations: list[dict] = []

    def f(x: float) -> float:
        pts = tune_points(base, opts, x)
        data = run_points(base, pts, root, header, opts, progress, None, str(path))
        entries = [data["points"][p.id] for p in pts]
        values = measure(root, entries)
        ok = [v for v in values if v is not None]
        fx = sum(ok) / len(ok) if ok else math.inf
        evaluations.append({"x": x, "f": finite(fx), "runs": [{"point": e["id"], "run_dir": e.get("run_dir"), "tpr_s": v}
                                                       for e, v in zip(entries, values)]})
        _write_tune(root, header, evaluations, None)
        if on_eval:
            on_eval(x, fx, values)
        return fx

    result = tune(f, opts.a0, opts.b0, opts.g, opts.e, opts.p, opts.resolution, opts.upper)
    _write_tune(root, header, evaluations, result)
    return root, result


def _write_tune(root: Path, header: dict, evaluations: list[dict], result: TuneResult | None) -> None:
    root.mkdir(parents=True, exist_ok=True)
    out = {**header, "evaluations": evaluations, "result": result.to_json() if result else None,
           "written_at": datetime.now(timezone.utc).isoformat()}
    (root / "tune.json").write_text(json.dumps(out, indent=1, default=str))
