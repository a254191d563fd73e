"""`orchestrator sweep` and `orchestrator tune`: `register(app)` adds them to orchestrator.cli's app."""
from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import List, Optional

import typer
from rich.progress import TextColumn
from rich.table import Column, Table

from rich.console import Console

from orchestrator.clikit import (CPU_FROM_HELP, DILATION_HELP, MACHINES_HELP, BackendName, BarProgress, ShaperName,
                                 machines_options, parse_cpu_from, parse_dilation, parse_sets)
from orchestrator.errors import OrchestratorError, SpecError
from orchestrator.units import parse_time

err = Console(stderr=True)
out = Console()


def register(app: typer.Typer) -> None:
    app.command()(sweep)
    app.command()(tune)


def _fmt_eta(s: float | None) -> str:
    if s is None:
        return "?"
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


class PointsProgress(BarProgress):
    """One bar over the points (with an ETA from the points run so far) and, below it, the current run's steps
    (replaced at every run instead of piling up)."""

    def __init__(self):
        super().__init__(err, 34, TextColumn("{task.fields[eta]}"))
        self.points = None

    # the runner's Progress
    def start(self, step: str, total: int) -> None:
        if step in self.tasks:
            self.bar.remove_task(self.tasks[step])
        self.tasks[step] = self.bar.add_task(f"  {step}", total=total, eta="")

    def note(self, message: str) -> None:
        if message.startswith("WARNING") or "failed" in message:
            self.bar.console.print(message, style="yellow", markup=False)

    # the sweep's points
    def on_point(self, done: int, total: int, eta_s: float | None, pid: str, status: str) -> None:
        if self.points is None:
            self.points = self.bar.add_task("points", total=total, eta="")
        self.bar.update(self.points, completed=done, eta=f"ETA {_fmt_eta(eta_s)}")
        if pid:
            self.bar.console.print(f"point {pid}: {status}", markup=False)
        elif status:
            self.bar.console.print(status, markup=False)


def _sweep_options(cls, out_dir, only, axis, repetitions, backend, shaper, strict, analyze, master,
                   axis_flag="--axis", **kw):
    from orchestrator.sweeprun import parse_axis_option

    axes = dict(parse_axis_option(a, axis_flag) for a in axis or [])
    return cls(out=out_dir, only=list(only or []), axes=axes, repetitions=repetitions,
               backend=getattr(backend, "value", backend), shaper=getattr(shaper, "value", shaper), strict=strict, analyze=analyze, master=master, **kw)


def sweep(
    experiment: Path = typer.Argument(..., help="Experiment file with a `sweep:` block (axes, repetitions)."),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="Sweep directory (default runs/sweeps/<name>); "
                                                                "run again with the same one to resume."),
    only: Optional[List[str]] = typer.Option(None, "--only", help="AXIS=VALUE: only these points (repeatable; "
                                                                  "the same axis twice = either value; rep=N)."),
    axis: Optional[List[str]] = typer.Option(None, "--axis", help="PATH=V1,V2,...: replace or add an axis."),
    repetitions: Optional[int] = typer.Option(None, "--repetitions", help="Override the repetitions."),
    backend: BackendName = typer.Option(BackendName.mininet, help="mininet (default)."),
    shaper: ShaperName = typer.Option(ShaperName.auto, help="auto|netem|delayline|tbf."),
    strict_shaping: bool = typer.Option(False, "--strict-shaping"),
    analyze: bool = typer.Option(True, "--analyze/--no-analyze", help="Analyse the sweep at the end (Spark)."),
    master: str = typer.Option("local[*]", help="Spark master for the analysis."),
    engine: str = typer.Option("spark", help="Sweep analysis: spark (full per-run reports) or events (TPR and "
                                             "steps from the event logs, no Spark, seconds)."),
    set_: Optional[List[str]] = typer.Option(None, "--set", help="NAME=VALUE for Jinja2 experiment templates."),
    parallel: int = typer.Option(1, "--parallel", "-j", min=1,
                                 help="Run up to K points at once (a lab per slot, own names and address pools); "
                                      "refused (exit 2, naming the largest K that fits) when K points would "
                                      "oversubscribe the machine's cores or memory."),
    rerun_unfaithful: bool = typer.Option(False, "--rerun-unfaithful",
                                          help="Run again the finished points flagged unfaithful by their judges."),
    measure_first: bool = typer.Option(False, "--measure-first",
                                       help="With --parallel: when K does not fit on the fixed per-member CPU "
                                            "estimate and no point of this sweep has run yet, run one point alone "
                                            "and size the fit from what its members and delay line used."),
    max_hold_p99_ms: float = typer.Option(1.0, "--max-hold-p99-ms",
                                          help="Judge: a point whose delay line's hold error p99 exceeds this is "
                                               "unfaithful."),
    max_lag_p99_ms: float = typer.Option(50.0, "--max-lag-p99-ms",
                                         help="Judge: a point whose timer lag p99 (members' common start, the "
                                              "schedule's actions) exceeds this is unfaithful."),
    dilation: Optional[str] = typer.Option(None, "--dilation", help=DILATION_HELP),
    cpu_from: Optional[Path] = typer.Option(None, "--cpu-from", help=CPU_FROM_HELP),
    machines: Optional[Path] = typer.Option(None, "--machines", help=MACHINES_HELP),
    known_hosts: Optional[Path] = typer.Option(None, "--known-hosts",
                                               help="--machines: known_hosts file the host keys are checked against."),
    accept_new_host_keys: bool = typer.Option(False, "--accept-new-host-keys",
                                              help="--machines: accept and record unknown host keys."),
) -> None:
    """Run every point of a sweep (the axes' cartesian product x repetitions), one run directory per point;
    resumable: finished points are skipped. --parallel K runs K points at once when they fit the machine; every
    point's fidelity judges (delay-line hold error, timer lag, CPU wait; the host's speed against the point's other
    repetitions) are recorded, unfaithful points flagged (docs/sweeps.md). Prints the sweep directory."""
    from orchestrator.sweeprun import SweepOptions, run_sweep

    if engine not in ("spark", "events"):
        raise SpecError(f"--engine {engine!r}: spark or events")
    backend_options: dict = {}
    if machines is not None:
        backend_options = machines_options(machines, getattr(backend, "value", backend), None, None, known_hosts,
                                           accept_new_host_keys, strict_shaping, set_, None)
        backend = "machines"
    elif known_hosts is not None or accept_new_host_keys:
        raise SpecError("--known-hosts and --accept-new-host-keys need --machines")
    opts = _sweep_options(SweepOptions, out_dir, only, axis, repetitions, backend, shaper, strict_shaping, analyze,
                          master, engine=engine, backend_options=backend_options, parallel=parallel,
                          rerun_unfaithful=rerun_unfaithful,
                          measure_first=measure_first, max_hold_p99_ms=max_hold_p99_ms, max_lag_p99_ms=max_lag_p99_ms,
                          dilation=parse_dilation(dilation), cpu_from=parse_cpu_from(cpu_from))
    t0 = time.monotonic()
    with PointsProgress() as progress:
        root, data = run_sweep(experiment, opts, parse_sets(set_), progress, progress.on_point)
    sel = data.get("selected") or []
    statuses = [data["points"][p].get("status") for p in sel]
    failed = [p for p, s in zip(sel, statuses) if s != "completed"]
    err.print(points_table(data))
    unfaithful = [p for p in sel if data["points"][p].get("unfaithful")]
    err.print(f"sweep: {len(sel) - len(failed)}/{len(sel)} points completed in {time.monotonic() - t0:.1f} s"
              + (f", {len(unfaithful)} unfaithful (--rerun-unfaithful runs them again)" if unfaithful else ""))
    if analyze:
        _analyze_sweep(root, master, engine)
    print(root)
    if failed:
        err.print(f"[red]not completed:[/] {', '.join(failed)}")
        raise typer.Exit(1)


def _ms(v) -> str:
    return "-" if v is None else f"{v:.2f}"


def points_table(data: dict) -> Table:
    """The selected points: status and fidelity judges (hold error and timer lag p99, CPU wait, the host's memory
    speed, verdict: `unfaithful (host)` when only the sweep's host-speed judge flagged it)."""
    table = Table(Column("point", no_wrap=True), "status", "N", "hold p99 (ms)", "lag p99 (ms)", "CPU wait (ms)",
                  "host speed", "fidelity", title="sweep points")
    for pid in data.get("selected") or []:
        e = data["points"].get(pid, {})
        j = e.get("fidelity") or {}
        verdict = j.get("verdict") or "-"
        if verdict != "unfaithful" and j.get("host_speed_reason"):
            verdict = "unfaithful (host)"
        wait, speed = j.get("cpu_wait_ms"), j.get("host_speed_memory")
        table.add_row(pid, e.get("status") or "-", f"{j['dilation']:g}" if j.get("dilation") else "-",
                      _ms(j.get("hold_p99_ms")), _ms(j.get("lag_p99_ms")),
                      _ms(wait), "-" if speed is None else f"{speed:.0f}",
                      f"[red]{verdict}[/]" if verdict.startswith("unfaithful") else verdict)
    return table


def _analyze_sweep(root: Path, master: str, engine: str) -> None:
    from analysis.rundir import AnalysisError
    from analysis.sweep import analyze_sweep

    try:
        md = analyze_sweep(root, master, engine)
    except AnalysisError as exc:
        raise OrchestratorError(f"sweep analysis: {exc}") from None
    err.print(f"sweep analysis: {md}")


def tune(
    experiment: Path = typer.Argument(..., help="Experiment file (its value of --param is replaced)."),
    param: str = typer.Option("protocol.gsgc.step", "--param", help="The step-interval path in the experiment."),
    a0: float = typer.Option(0.0, help="Smallest step interval of the search (s)."),
    b0: float = typer.Option(20.0, help="Largest step interval of the search (s)."),
    g: float = typer.Option(2.0, help="Part I stops when the interval is at most g wide (s)."),
    e: float = typer.Option(0.10, help="Fluctuation index: the window keeps TPR within ±e·f(s)."),
    p: float = typer.Option(1.0, help="Part II's initial search step (s)."),
    resolution: float = typer.Option(0.01, help="Step intervals are rounded to this (s); each is measured once."),
    upper: Optional[float] = typer.Option(None, help="Part II never goes above this (default b0)."),
    reps: int = typer.Option(1, "--reps", help="Runs averaged into each f(x) (distinct seeds)."),
    steps_per_run: Optional[float] = typer.Option(None, "--steps-per-run",
                                                  help="Run duration = max(the experiment's, this many steps)."),
    duration: Optional[str] = typer.Option(None, "--duration",
                                           help="Replaces the experiment's duration (e.g. 60s; --steps-per-run "
                                                "may lengthen it)."),
    metric: str = typer.Option("rounds", help="f(x) of a run: rounds (mean TPR over its rounds that started "
                                              "once every member ran) or round0 (the paper's TPR: from the "
                                              "members' common start to the first S; one round per run)."),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="Tune directory (default runs/tune/<name>)."),
    backend: BackendName = typer.Option(BackendName.mininet),
    shaper: ShaperName = typer.Option(ShaperName.auto),
    strict_shaping: bool = typer.Option(False, "--strict-shaping"),
    master: str = typer.Option("local[*]", help="Spark master for the per-run analysis (--engine spark)."),
    engine: str = typer.Option("events", help="How f(x) reads a run's TPR: events (from the event logs, seconds) "
                                              "or spark (analysis.run, full per-run reports, minutes)."),
    json_: bool = typer.Option(False, "--json", help="Print the result as JSON on stdout."),
    set_: Optional[List[str]] = typer.Option(None, "--set", help="NAME=VALUE for Jinja2 experiment templates."),
    parallel: int = typer.Option(1, "--parallel", "-j", min=1,
                                 help="Run up to K of one step interval's --reps runs at once (as sweep "
                                      "--parallel: refused, exit 2, when K would not fit the machine)."),
    measure_first: bool = typer.Option(False, "--measure-first",
                                       help="With --parallel: when K does not fit on the fixed per-member CPU "
                                            "estimate, run the first run alone and size the fit from it."),
    fix: Optional[List[str]] = typer.Option(None, "--fix", help="PATH=VALUE set in every run (repeatable), e.g. "
                                                                "nodes.packing=20: a sweep's one-valued --axis."),
    dilation: Optional[str] = typer.Option(None, "--dilation", help=DILATION_HELP),
) -> None:
    """The GSGC paper's adaptive method (§4.3, Figures 10-11): golden-ratio search for a near-minimum-TPR step
    interval s, then the window [s1, s2] where TPR stays within e of f(s); f(x) = mean TPR of measured runs."""
    from orchestrator.tunerun import TuneOptions, run_tune

    from analysis.protocols.gsgc_values import TUNE_METRICS

    if reps < 1:
        raise SpecError("--reps must be at least 1")
    if metric not in TUNE_METRICS:
        raise SpecError(f"--metric {metric!r}: one of {', '.join(TUNE_METRICS)}")
    try:
        dur_s = parse_time(duration) if duration is not None else None
    except ValueError as exc:
        raise SpecError(f"--duration: {exc}") from None
    if dur_s is not None and dur_s <= 0:
        raise SpecError(f"--duration {duration!r}: must be positive")
    opts = _sweep_options(TuneOptions, out_dir, None, fix, None, backend, shaper, strict_shaping, True, master,
                          param=param, a0=a0, b0=b0, g=g, e=e, p=p, resolution=resolution, upper=upper,
                          steps_per_run=steps_per_run, reps=reps, duration=dur_s, metric=metric,
                          parallel=parallel, measure_first=measure_first, axis_flag="--fix",
                          dilation=parse_dilation(dilation))
    spark_holder: dict = {}

    if engine not in ("spark", "events"):
        raise SpecError(f"--engine {engine!r}: spark or events")

    def measure(root: Path, entries: list[dict]) -> list[float | None]:
        """Each run's TPR: its GSGC run values (analysis.sweep: the plug-in's `run_values`; engine spark also
        writes the per-run reports), `tune_value` of the metric."""
        from analysis.protocols.gsgc_values import tune_value
        from analysis.sweep import run_values_of

        if engine == "spark" and "spark" not in spark_holder:
            from analysis.session import get_spark
            spark_holder["spark"] = get_spark(master)     # one session for every evaluation (run_analysis uses it)
        rds = [e_["run_dir"] if e_.get("status") == "completed" and e_.get("run_dir") else None for e_ in entries]
        values = run_values_of(root, [rd for rd in rds if rd], master, engine)
        return [tune_value(values[rd], metric) if rd in values else None for rd in rds]

    with PointsProgress() as progress:
        def on_eval(x, fx, values):
            progress.bar.console.print(f"f({x:g} s) = {fx:.2f} s  (runs: {', '.join(_f(v) for v in values)})")
        try:
            root, res = run_tune(experiment, opts, measure, parse_sets(set_), progress, on_eval)
        finally:
            if "spark" in spark_holder:
                spark_holder["spark"].stop()
    table = Table("order", "phase", "step interval (s)", "f = mean TPR (s)", "in window")
    for ev in res.evaluations:
        table.add_row(str(ev.order), ev.phase, f"{ev.x:g}", _f(ev.fx), "yes" if res.s1 <= ev.x <= res.s2 else "")
    err.print(table)
    err.print(f"s = {res.s:g} s, f(s) = {_f(res.fs)} s, window \\[s1, s2] = \\[{res.s1:g}, {res.s2:g}] s "
              f"(Part I {res.part1_iterations} iterations, Part II {res.part2_iterations}; "
              f"{len(res.evaluations)} step intervals measured){' [lower guard hit]' if res.lower_clamped else ''}"
              f"{' [upper guard hit]' if res.upper_clamped else ''}")
    err.print(f"tune.json: {root / 'tune.json'}")
    if json_:
        out.print_json(json.dumps(res.to_json(), default=lambda v: None))
    else:
        print(root)


def _f(v: float | None) -> str:
    return "-" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.2f}"
