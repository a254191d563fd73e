"""`orchestrator sweep` and `orchestrator tune`: run the points of a sweep (or the step intervals the adaptive
search asks for) one after another, one run directory per point, resumable.

Sweep directory:
    sweep.json                    the index: axes, repetitions, and per point its coordinates, settings, digest,
                                  status, run directory and time; rewritten after every change
    points/<point id>/experiment.yaml          the point's experiment (plain YAML, no templating left)
    points/<point id>/<lab>-<UTC time>/        the run directory (`orchestrator run`'s)
    points/<point id>/experiment.k<slot>.yaml  --parallel: the experiment as its slot ran it (the slot's lab name
                                               and address pools), job-<n>.json, result-<n>.json, log-<n>.txt
    analysis/                     the sweep analysis (analysis.sweep)

A point is finished when sweep.json records it `completed`, with the same experiment digest, and its run
directory's manifest says `completed`; a re-run of the same command skips finished points and runs the others
(a point interrupted half-way is run again in a new run directory; the old one is left for inspection).

`--parallel K` runs up to K points at once, each in a child process (`python -m orchestrator.sweepchild JOB`, orchestrator/sweepchild.py) with
its slot's lab name and address pools (`sweep.slot_experiment`); the parent alone writes sweep.json. Before it
starts, the points' needs are checked against the machine (`sweep.fit`): K points that would not fit are refused.
Every finished run is judged (`fidelity.run_judges`: the delay line's hold error, the members' and the schedule's
timer lag); a point whose judges exceed their thresholds is flagged `unfaithful` and `--rerun-unfaithful` runs it
again. docs/sweeps.md.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import yaml

from orchestrator import sweep as sw
from orchestrator.backends.base import NullProgress, Progress
from orchestrator.errors import OrchestratorError, SpecError
from orchestrator.spec import parse_document, parse_experiment, read_input
from orchestrator.sweepchild import _run_parallel
from orchestrator.sweepfit import check_fit, measured, measured_cpu
from orchestrator.sweepstate import (INDEX, LOCAL_BACKENDS, SweepOptions, _begin, _finish, _Index,
                                     _interrupts_as_keyboardinterrupt, _leave_nothing, is_finished,
                                     judge_host_speed)
from orchestrator.sweepstate import PointCallback
from orchestrator.units import parse_time


def load_base(path: str | Path, variables: dict[str, Any] | None = None,
              dilation: float | str | None = None) -> dict:
    """The experiment file as a dict (templating rendered); SpecError if unreadable or not a mapping. `dilation`
    (--dilation) replaces its time.dilation: part of every point's experiment (and digest)."""
    # Read, rendered and validated (all of it, the schedule against the plan included) as `run` reads it.
    base = parse_document(read_input(path, "experiment"), str(path), variables)
    if dilation is not None:
        base = sw.set_path(base, "time.dilation", dilation)
    return base


def parse_axis_option(item: str, flag: str = "--axis") -> tuple[str, list[Any]]:
    """`--axis protocol.gsgc.step=2s,5s,9s` → ("protocol.gsgc.step", ["2s", "5s", "9s"]); numbers stay numbers."""
    if "=" not in item:
        raise SpecError(f"{flag} {item!r}: expected PATH=V1,V2,...")
    key, vals = item.split("=", 1)
    values = [yaml.safe_load(v) for v in vals.split(",") if v != ""]
    if not values:
        raise SpecError(f"{flag} {item!r}: no values")
    return key, values


def sweep_spec(base: dict, opts: SweepOptions, where: str) -> sw.SweepSpec:
    spec = sw.parse_sweep(base.get("sweep") or {"axes": {}}, f"{where}: sweep")
    for key, values in opts.axes.items():
        spec = sw.override_axis(spec, key, values)
    if opts.repetitions is not None:
        if opts.repetitions < 1:
            raise SpecError("--repetitions must be at least 1")
        spec = sw.SweepSpec(spec.axes, opts.repetitions, spec.seed_paths)
    return spec


def _prepare(base: dict, points: list[sw.Point], root: Path, where: str) -> dict[str, tuple[dict, str]]:
    """Every point's experiment, validated before anything runs: id → (experiment dict, digest)."""
    out = {}
    for p in points:
        doc = sw.point_experiment(base, p)
        try:
            parse_experiment(yaml.safe_dump(doc, sort_keys=False), f"{where} [{p.id}]")
        except SpecError as exc:
            raise SpecError(f"sweep point {p.id}: {exc}") from None
        out[p.id] = (doc, sw.digest(doc))
    return out


def run_points(base: dict, points: list[sw.Point], root: Path, header: dict, opts: SweepOptions,
               progress: Progress | None = None, on_point: PointCallback | None = None,
               where: str = "sweep") -> dict:
    """Run the unfinished points; returns the index data. Ctrl-C/SIGTERM: the current run is stopped and
    collected by the runner, the point is marked interrupted, and KeyboardInterrupt propagates. With
    `opts.parallel` > 1 the points run in child processes, up to that many at once (`_run_parallel`)."""
    progress = progress or NullProgress()
    prepared = _prepare(base, points, root, where)
    old = json.loads((root / INDEX).read_text()).get("points", {}) if (root / INDEX).exists() else {}
    todo = [p for p in points
            if not is_finished(old.get(p.id, {}), root, prepared[p.id][1], opts.rerun_unfaithful)]
    if opts.parallel < 1:
        raise SpecError("--parallel must be at least 1")
    if opts.parallel > 1 and opts.backend not in LOCAL_BACKENDS:
        raise SpecError(f"--parallel {opts.parallel}: the {opts.backend} backend's labs share the same machines; "
                        f"parallel points need a backend whose labs are local ({', '.join(LOCAL_BACKENDS)})")
    fits, calibrate = None, False
    if opts.parallel > 1 and todo:
        try:
            fits = check_fit(prepared, todo, opts.parallel, old)
        except SpecError as exc:
            # refused on the fixed per-member guess while nothing of this sweep was measured yet: with
            # --measure-first run one point alone and size the fit from what it used (check_fit); else refuse
            if measured(old) or len(todo) < 2:
                raise
            if not opts.measure_first:
                raise SpecError(f"{exc}; the members' CPU is a fixed guess until a point of this sweep has run: "
                                f"--measure-first runs one point alone and sizes the fit from it") from None
            calibrate = True
    root.mkdir(parents=True, exist_ok=True)
    index = _Index(root / INDEX, header)
    skipped = len(points) - len(todo)
    guess = None
    try:
        guess = parse_time(base.get("duration", "60s")) * 1.5 + 30
    except ValueError:
        pass
    if on_point:
        on_point(skipped, len(points), sw.eta([], len(todo), guess), "", f"{skipped} finished before, skipped")
        if fits is not None:
            on_point(skipped, len(points), sw.eta([], len(todo), guess), "", fits.message())
    if calibrate:
        if on_point:
            on_point(skipped, len(points), sw.eta([], len(todo), guess), "",
                     f"--parallel {opts.parallel} does not fit on the fixed estimate; running one point alone to "
                     f"measure what a point costs")
        _run_sequential(todo[:1], prepared, root, index, opts, progress, on_point, skipped, len(points))
        skipped, todo = skipped + 1, todo[1:]
        fits = check_fit(prepared, todo, opts.parallel, index.data.get("points", {}))
        if on_point:
            on_point(skipped, len(points), sw.eta([], len(todo), guess), "", fits.message())
    try:
        if opts.parallel > 1:
            _run_parallel(base, todo, prepared, root, index, opts, progress, on_point, skipped, len(points), where)
        else:
            _run_sequential(todo, prepared, root, index, opts, progress, on_point, skipped, len(points))
    finally:                # an interrupted sweep's finished points are judged too
        for pid in judge_host_speed(index.data["points"]):
            progress.note(f"WARNING point {pid}: unfaithful "
                          f"({index.data['points'][pid]['fidelity']['host_speed_reason']})")
        index.save()
    return index.data


def _run_sequential(todo, prepared, root, index, opts, progress, on_point, done, total) -> None:
    from orchestrator.runner import RunOptions, run as run_experiment

    elapsed: list[float] = []
    restore = _interrupts_as_keyboardinterrupt()
    try:
        for p in todo:
            doc, digest = prepared[p.id]
            pdir = root / "points" / p.id
            pdir.mkdir(parents=True, exist_ok=True)
            exp_file = pdir / "experiment.yaml"
            exp_file.write_text(yaml.safe_dump(doc, sort_keys=False))
            entry = index.point(p.id)
            t0 = time.monotonic()
            for attempt in range(1 + opts.retries):
                _begin(entry, p, digest, attempt)
                index.save()
                before = set(pdir.iterdir())
                try:
                    run_dir = run_experiment(exp_file, RunOptions(backend=opts.backend, out=pdir, shaper=opts.shaper,
                                                                  backend_options=opts.backend_options,
                                                                  strict=opts.strict, probe_links=opts.probe_links,
                                                                  probe_paths=opts.probe_paths,
                                                                  measured=measured_cpu(index.data["points"])
                                                                  or opts.cpu_from),
                                             progress)
                    _finish(entry, run_dir, root, opts, progress, p.id, attempt)
                except KeyboardInterrupt:
                    entry["status"] = "interrupted"
                    _leave_nothing(doc)
                    raise
                except OrchestratorError as exc:
                    entry["status"], entry["error"] = "failed", str(exc)
                    progress.note(f"point {p.id} failed: {exc}")
                    _leave_nothing(doc)
                finally:
                    if entry.get("run_dir") is None:        # find the run directory the runner made, if any
                        made = [d for d in set(pdir.iterdir()) - before if d.is_dir()]
                        if made:
                            entry["run_dir"] = str(made[0].resolve().relative_to(root.resolve()))
                    entry["elapsed_s"] = time.monotonic() - t0
                    entry["ended_at"] = time.time()
                    index.save()
                if entry["status"] != "invalid":
                    break
            elapsed.append(entry["elapsed_s"])
            done += 1
            if on_point:
                on_point(done, total, sw.eta(elapsed, total - done), p.id, entry["status"])
    finally:
        restore()


def default_dir(base: dict, path: str | Path, kind: str) -> Path:
    return Path("runs") / kind / (base.get("name") or Path(path).stem)


def run_sweep(path: str | Path, opts: SweepOptions, variables: dict | None = None,
              progress: Progress | None = None, on_point: PointCallback | None = None) -> tuple[Path, dict]:
    """Expand the experiment's sweep and run it. Returns (sweep directory, index data)."""
    base = load_base(path, variables, opts.dilation)
    spec = sweep_spec(base, opts, str(path))
    points = sw.expand(spec, base, sw.parse_only(opts.only, spec))
    if not points:
        raise SpecError(f"{path}: --only selects no point")
    root = (opts.out or default_dir(base, path, "sweeps")).resolve()
    header = {
        "kind": "sweep", "experiment_file": str(path), "variables": variables or {},
        "axes": [{"name": a.name, "key": a.key, "values": [v.label for v in a.values]} for a in spec.axes],
        "repetitions": spec.repetitions, "seed_paths": list(spec.seed_paths), "only": list(opts.only),
        "selected": [p.id for p in points],
    }
    data = run_points(base, points, root, header, opts, progress, on_point, str(path))
    return root, data
