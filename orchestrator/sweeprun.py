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

`--parallel K` runs up to K points at once, each in a child process (`python -m orchestrator.sweeprun JOB`) with
its slot's lab name and address pools (`sweep.slot_experiment`); the parent alone writes sweep.json. Before it
starts, the points' needs are checked against the machine (`sweep.fit`): K points that would not fit are refused.
Every finished run is judged (`fidelity.run_judges`: the delay line's hold error, the members' and the schedule's
timer lag); a point whose judges exceed their thresholds is flagged `unfaithful` and `--rerun-unfaithful` runs it
again. docs/sweeps.md.
"""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import yaml

from orchestrator import fidelity as fid
from orchestrator import signals
from orchestrator import sweep as sw
from orchestrator.backends.base import NullProgress, Progress
from orchestrator.errors import OrchestratorError, SpecError
from orchestrator.spec import parse_document, parse_experiment, read_input
from orchestrator.timebase import Measured
from orchestrator.tune import TuneResult, finite, tune
from orchestrator.units import parse_time

INDEX = "sweep.json"
FINISHED = "completed"


@dataclass
class SweepOptions:
    out: Path | None = None                    # the sweep directory (default runs/sweeps/<experiment name>)
    only: list[str] = field(default_factory=list)
    axes: dict[str, list[Any]] = field(default_factory=dict)   # --axis overrides
    repetitions: int | None = None
    backend: str = "mininet"
    shaper: str = "auto"
    strict: bool = False
    analyze: bool = True
    master: str = "local[*]"
    engine: str = "spark"                      # the sweep analysis: spark | events (analysis.sweep)
    probe_links: int = 1                       # a lighter fidelity probe per point than `run`'s
    probe_paths: int = 1
    retries: int = 2                           # runs again a point whose run is invalid (`run_problem`)
    parallel: int = 1                          # points at once (child processes, one lab per slot)
    rerun_unfaithful: bool = False             # run again the points whose fidelity judges failed
    measure_first: bool = False                # --parallel refused on the CPU guess: run one point alone, re-fit
    max_hold_p99_ms: float = fid.MAX_HOLD_P99_MS
    max_lag_p99_ms: float = fid.MAX_LAG_P99_MS
    stop_timeout_s: float = 300.0              # --parallel, Ctrl-C: how long a child may take to stop and tear down
    dilation: float | str | None = None        # --dilation: every point's time.dilation (docs/virtual-time.md)
    cpu_from: Measured | None = None           # --cpu-from: sizes auto before this sweep has measured anything


PointCallback = Callable[[int, int, "float | None", str, str], None]   # done, total, eta_s, point id, status


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


class _Index:
    """sweep.json: read once, rewritten atomically after every change."""

    def __init__(self, path: Path, header: dict):
        self.path = path
        old = json.loads(path.read_text()) if path.exists() else {}
        self.data = {**old, **header, "points": old.get("points", {})}
        self.save()

    def save(self) -> None:
        self.data["updated"] = time.time()
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, default=str))
        tmp.replace(self.path)

    def point(self, pid: str) -> dict:
        return self.data["points"].setdefault(pid, {})


def _manifest_status(run_dir: Path) -> str | None:
    try:
        return json.loads((run_dir / "manifest.json").read_text()).get("status")
    except (OSError, json.JSONDecodeError):
        return None


def run_problem(run_dir: Path) -> str | None:
    """Why a completed run does not measure what it should, or None: a member that never logged `node_started`,
    or, in a run whose members did not wait for a common start (runs made before the runner started them together,
    where 200 Python processes took minutes to come up), no round completed that started after every member was
    running (the analysis uses only those rounds: the run's plug-in's `run_values`, `tpr_values_s`; protocols
    without rounds have no such check). Members that started the protocol together (their configs say
    wait_for_start) and completed no round within the run are a measurement (the TPR exceeds the run), not a
    problem."""
    from analysis import protocols
    from analysis.rundir import AnalysisError, load

    try:
        run = load(Path(run_dir))
        values = protocols.get(run.protocol).run_values(run)
    except (AnalysisError, OSError, ValueError, KeyError) as exc:
        return f"unreadable run directory: {exc}"
    if not any((run.path / "configs").glob("*.json")):
        return "no node configs"
    names = {m.name for m in run.members}
    missing = len(names - {e.get("node") for e in run.events if e.get("event") == "node_started"})
    if missing:
        return f"{missing} of {len(names)} members never started"
    if "tpr_values_s" in values and not values["tpr_values_s"] and not values.get("common_start"):
        return (f"no round completed after every member was running (the last started "
                f"{values.get('start_spread_s') or 0.0:.1f} s after the first)")
    return None


def is_finished(entry: dict, root: Path, digest: str, rerun_unfaithful: bool = False) -> bool:
    rd = entry.get("run_dir")
    return (entry.get("status") == FINISHED and entry.get("digest") == digest and rd is not None
            and not (rerun_unfaithful and entry.get("unfaithful"))
            and _manifest_status(root / rd) == FINISHED and run_problem(root / rd) is None)


def judge(entry: dict, run_dir: Path, opts: SweepOptions) -> None:
    """Record a finished run's fidelity judges in its sweep.json entry (`fidelity`, `unfaithful`)."""
    j = fid.run_judges(run_dir, opts.max_hold_p99_ms, opts.max_lag_p99_ms)
    entry["fidelity"] = j
    entry["unfaithful"] = j["verdict"] == "unfaithful"


def machine() -> tuple[int, int]:
    """(usable cores, MemAvailable bytes) of this machine."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    mem = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                mem = int(line.split()[1]) * 1024
    except OSError:
        pass
    return cores, mem


def measured(points: dict) -> bool:
    """Has any point of this sweep measured its members' CPU (fidelity `member_cores_each`)?"""
    return any(isinstance(e.get("fidelity"), dict) and e["fidelity"].get("member_cores_each") is not None
               for e in points.values())


def _virtual(j: dict, key: str) -> float | None:
    """A judge's CPU figure in virtual cores (runs from before virtual time: the real figure, dilation 1)."""
    v = j.get(f"{key.replace('_cores', '_virtual_cores')}")
    if v is None and j.get(key) is not None:
        v = j[key] * (j.get("dilation") or 1.0)
    return v


def measured_cpu(points: dict) -> Measured | None:
    """What the finished points of this sweep measured, in virtual cores (the largest of each): the members' CPU
    per member and the delay line's. `time: {dilation: auto}` sizes the next points with it."""
    judged = [e["fidelity"] for e in points.values() if isinstance(e.get("fidelity"), dict)]
    each = [v for j in judged if (v := _virtual(j, "member_cores_each")) is not None]
    dl = [v for j in judged if (v := _virtual(j, "delayline_cores")) is not None]
    if not each and not dl:
        return None
    return Measured(max(each) if each else None, max(dl) if dl else None,
                    f"the largest of {len(judged)} finished point(s) of this sweep")


def measured_from(path: str | Path) -> Measured:
    """`--cpu-from`: what a finished run directory (its judges) or sweep directory (its points' judges) measured,
    for `time: {dilation: auto}`. SpecError when it measured nothing."""
    p = Path(path)
    if (p / INDEX).exists():
        m = measured_cpu(json.loads((p / INDEX).read_text()).get("points", {}))
    elif (p / "manifest.json").exists():
        m = measured_cpu({"run": {"fidelity": fid.run_judges(p)}})
    else:
        raise SpecError(f"--cpu-from {path}: not a run directory (manifest.json) nor a sweep directory ({INDEX})")
    if m is None or m.member_cores_each is None:
        raise SpecError(f"--cpu-from {path}: it measured no member CPU (a run of this version on a local backend "
                        f"measures it)")
    return Measured(m.member_cores_each, m.daemon_cores, f"--cpu-from {path}")


def check_fit(prepared: dict[str, tuple[dict, str]], todo: list[sw.Point], k: int, old_points: dict) -> sw.Fit:
    """Refuse (SpecError, exit 2) K points at once that would not fit this machine. The delay line's load and the
    members' CPU are taken from the points of this sweep that ran before (their tc/delayline.json and the
    manifest's member_cpu; the largest of each, in virtual cores), when there are any."""
    judged = [e["fidelity"] for e in old_points.values() if isinstance(e.get("fidelity"), dict)]
    rates = [j["delayline_pkts_per_s"] * (j.get("dilation") or 1.0) for j in judged
             if j.get("delayline_pkts_per_s") is not None]
    m = measured_cpu(old_points)
    cores, mem = machine()
    needs = [sw.point_need(prepared[p.id][0], pkt_hops_per_s=max(rates) if rates else None,
                           delayline_cores=m.daemon_cores if m else None,
                           member_cores=m.member_cores_each if m else None,
                           share=cores * sw.CPU_HEADROOM / k) for p in todo]
    f = sw.fit(needs, k, cores, mem)
    if not f.ok:
        worst = max(needs, key=lambda n: n.cpu_cores)
        raise SpecError(f"{f.message()} (the largest point: {worst.describe()}; this machine: {cores} cores, "
                        f"{mem / 2 ** 30:.1f} GiB available)")
    return f


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


def _interrupts_as_keyboardinterrupt():
    """SIGTERM, SIGHUP (and SIGINT even when inherited as ignored) raise KeyboardInterrupt, so the run cleans up."""
    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    return lambda: [signal.signal(s, h) for s, h in old.items()]


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
    if opts.parallel > 1:
        _run_parallel(base, todo, prepared, root, index, opts, progress, on_point, skipped, len(points), where)
    else:
        _run_sequential(todo, prepared, root, index, opts, progress, on_point, skipped, len(points))
    return index.data


def _begin(entry: dict, p: sw.Point, digest: str, attempt: int) -> None:
    entry.update(id=p.id, group=p.group, coords=dict(p.coords), rep=p.rep, sets=[[k, v] for k, v in p.sets],
                 digest=digest, status="running", started_at=time.time(), run_dir=None, error=None,
                 attempt=attempt, fidelity=None, unfaithful=None, slot=None, lab=None)


def _finish(entry: dict, run_dir: Path, root: Path, opts: SweepOptions, progress: Progress, pid: str,
            attempt: int) -> None:
    """A run returned: its status from the manifest, then whether it measured anything (`run_problem`: invalid)
    and, when it did, its fidelity judges."""
    entry["run_dir"] = str(run_dir.resolve().relative_to(root.resolve()))
    entry["status"] = _manifest_status(run_dir) or "unknown"
    problem = run_problem(run_dir) if entry["status"] == FINISHED else None
    if problem:                     # the run did not measure the protocol: run it again
        entry["status"], entry["error"] = "invalid", problem
        progress.note(f"point {pid}: run invalid ({problem}); "
                      f"{'running it again' if attempt < opts.retries else 'giving up'}")
    elif entry["status"] == FINISHED:
        judge(entry, run_dir, opts)
        if entry["unfaithful"]:
            progress.note(f"WARNING point {pid}: unfaithful ({'; '.join(entry['fidelity']['reasons'])})")


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


# --- --parallel: one child process per running point --------------------------------------------------------------

@dataclass
class Child:
    """A point running in a child process (`launch_child`), or a stand-in for one in the tests."""
    point: sw.Point
    slot: int
    attempt: int
    doc: dict                       # the experiment as the slot runs it (its lab name: what to tear down)
    result_file: Path
    proc: Any                       # .poll() -> exit code | None, .send_signal(sig), .kill(), .wait(timeout)
    started: float = field(default_factory=time.monotonic)


def launch_child(job: dict, job_file: Path, log_file: Path) -> Any:
    """Start `python -m orchestrator.sweeprun JOB` in its own session (a terminal's Ctrl-C reaches the parent
    only; the parent stops every child with one SIGINT of its own, so a child's cleanup is never cut short)."""
    job_file.write_text(json.dumps(job, indent=1))
    with log_file.open("w") as log:
        return subprocess.Popen([sys.executable, "-m", "orchestrator.sweeprun", str(job_file)],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)


Launcher = Callable[[dict, Path, Path], Any]
LOCAL_BACKENDS = ("mininet", "docker")


def _warm_probe(opts: SweepOptions) -> None:
    """Probe the kernel once in the parent (the result is cached per boot), so K children starting together do not
    all probe and write the cache at once."""
    from orchestrator import lab as labmod

    if os.geteuid() == 0:
        try:
            labmod.probe()
        except (OrchestratorError, OSError) as exc:
            raise OrchestratorError(f"probing the kernel before the parallel points: {exc}") from None


def _run_parallel(base, todo, prepared, root, index, opts, progress, on_point, done, total, where,
                  launch: Launcher | None = None) -> None:
    launch = launch or launch_child
    k = opts.parallel
    base_name = base.get("name") or Path(str(where)).stem.split(".")[0] or "sweep"
    free = list(range(k))
    queue = [(p, 0) for p in todo]
    running: dict[int, Child] = {}
    elapsed: list[float] = []
    first_start: dict[str, float] = {}
    _warm_probe(opts)
    restore = _interrupts_as_keyboardinterrupt()
    try:
        while queue or running:
            while queue and free:
                p, attempt = queue.pop(0)
                slot = free.pop(0)
                with signals.shielded() as late:    # a started child is always in `running` (to be stopped)
                    running[slot] = _start_child(p, attempt, slot, prepared, root, index, opts, base_name, launch)
                if late:
                    raise KeyboardInterrupt(f"signal {late[0]}")
                first_start.setdefault(p.id, running[slot].started)
                progress.note(f"point {p.id}: started in slot {slot} (lab {running[slot].doc['name']})")
            time.sleep(0.2)
            for slot, ch in list(running.items()):
                code = ch.proc.poll()
                if code is None:
                    continue
                del running[slot]
                free.append(slot)
                free.sort()
                entry = index.point(ch.point.id)
                _collect_child(ch, code, entry, root, opts, progress)
                entry["elapsed_s"] = time.monotonic() - first_start[ch.point.id]
                entry["ended_at"] = time.time()
                index.save()
                if entry["status"] == "invalid" and ch.attempt < opts.retries:
                    queue.insert(0, (ch.point, ch.attempt + 1))
                    continue
                elapsed.append(entry["elapsed_s"])
                done += 1
                if on_point:
                    left = total - done
                    est = sw.eta(elapsed, left)
                    on_point(done, total, est / k if est else est, ch.point.id, entry["status"])
    except BaseException:               # Ctrl-C, SIGTERM, SIGHUP, or a failure of the parent itself
        _stop_children(running, index, opts, progress)
        raise
    finally:
        restore()


def _start_child(p: sw.Point, attempt: int, slot: int, prepared, root: Path, index, opts: SweepOptions,
                 base_name: str, launch: Launcher) -> Child:
    doc, digest = prepared[p.id]
    pdir = root / "points" / p.id
    pdir.mkdir(parents=True, exist_ok=True)
    (pdir / "experiment.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    run_doc = sw.slot_experiment(doc, slot, opts.parallel, base_name)
    exp_file = pdir / f"experiment.k{slot}.yaml"
    exp_file.write_text(yaml.safe_dump(run_doc, sort_keys=False))
    entry = index.point(p.id)
    _begin(entry, p, digest, attempt)
    entry["slot"], entry["lab"] = slot, run_doc["name"]
    index.save()
    result = pdir / f"result-{attempt}.json"
    result.unlink(missing_ok=True)
    m = measured_cpu(index.data["points"]) or opts.cpu_from
    job = {"experiment": str(exp_file), "out": str(pdir), "result": str(result), "backend": opts.backend,
           "shaper": opts.shaper, "strict": opts.strict, "probe_links": opts.probe_links,
           "probe_paths": opts.probe_paths, "measured": m.__dict__ if m else None,
           "cores": machine()[0] / opts.parallel}      # time.dilation auto: this point's share of the cores
    proc = launch(job, pdir / f"job-{attempt}.json", pdir / f"log-{attempt}.txt")
    return Child(p, slot, attempt, run_doc, result, proc)


def _collect_child(ch: Child, code: int, entry: dict, root: Path, opts: SweepOptions, progress: Progress) -> None:
    """A child exited: its result file says how its run went (the parent judges the run directory itself)."""
    try:
        res = json.loads(ch.result_file.read_text())
    except (OSError, ValueError):
        res = {}
    run_dir = res.get("run_dir")
    outcome = res.get("outcome")
    if outcome == "returned" and run_dir:
        _finish(entry, Path(run_dir), root, opts, progress, ch.point.id, ch.attempt)
        return
    if run_dir:
        entry["run_dir"] = str(Path(run_dir).resolve().relative_to(root.resolve()))
    if outcome == "interrupted":
        entry["status"] = "interrupted"
    else:
        entry["status"] = "failed"
        entry["error"] = res.get("error") or (f"the point's process exited with code {code} "
                                               f"(points/{ch.point.id}/log-{ch.attempt}.txt)")
        progress.note(f"point {ch.point.id} failed: {entry['error']}")
    _leave_nothing(ch.doc)


def _stop_children(running: dict[int, Child], index, opts: SweepOptions, progress: Progress) -> None:
    """Ctrl-C/SIGTERM of the parent: one SIGINT to every child (its runner stops, collects and tears its lab
    down), wait for all of them, kill a child that overruns `stop_timeout_s`, then make sure no slot's lab is
    left. Further signals meanwhile are ignored (the cleanup must finish)."""
    with _signals_ignored():
        for ch in running.values():
            try:
                ch.proc.send_signal(signal.SIGINT)
            except (ProcessLookupError, OSError):
                pass
        deadline = time.monotonic() + opts.stop_timeout_s
        for ch in running.values():
            while ch.proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
            if ch.proc.poll() is None:
                progress.note(f"WARNING point {ch.point.id}: its process did not stop in "
                              f"{opts.stop_timeout_s:.0f} s; killed")
                ch.proc.kill()
                ch.proc.wait(timeout=30)
            entry = index.point(ch.point.id)
            try:
                res = json.loads(ch.result_file.read_text())
            except (OSError, ValueError):
                res = {}
            root = index.path.parent
            if res.get("outcome") == "returned" and res.get("run_dir"):     # it had finished before the signal
                _finish(entry, Path(res["run_dir"]), root, opts, progress, ch.point.id, ch.attempt)
            else:
                if res.get("run_dir"):
                    entry["run_dir"] = str(Path(res["run_dir"]).resolve().relative_to(root.resolve()))
                entry["status"] = "interrupted"
            entry["ended_at"] = time.time()
            index.save()
            try:
                _leave_nothing_now(ch.doc)
            except OrchestratorError as exc:
                progress.note(f"WARNING point {ch.point.id}: tearing down lab {ch.doc.get('name')} failed: {exc}")


def child_main(job_file: str | Path) -> int:
    """A `--parallel` child: run one point (`orchestrator.runner.run`), write its result file, exit 0 when the
    run returned, 1 when it failed, 130 when interrupted."""
    from orchestrator.backends.base import NullProgress as _Null
    from orchestrator.runner import RunOptions, run as run_experiment

    job = json.loads(Path(job_file).read_text())
    result_file = Path(job["result"])
    result: dict = {"run_dir": None, "outcome": "running", "error": None, "pid": os.getpid()}

    def write() -> None:
        tmp = result_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(result))
        tmp.replace(result_file)

    def on_run_dir(path: Path) -> None:
        result["run_dir"] = str(Path(path).resolve())
        write()

    class Log(_Null):
        def note(self, message: str) -> None:
            print(message, flush=True)

    write()
    code = 0
    try:
        run_dir = run_experiment(job["experiment"], RunOptions(
            backend=job["backend"], out=Path(job["out"]), shaper=job["shaper"], strict=job["strict"],
            probe_links=job["probe_links"], probe_paths=job["probe_paths"], on_run_dir=on_run_dir,
            measured=Measured(**job["measured"]) if job.get("measured") else None, cores=job.get("cores")), Log())
        result.update(run_dir=str(Path(run_dir).resolve()), outcome="returned")
    except KeyboardInterrupt:
        result["outcome"], code = "interrupted", 130
    except OrchestratorError as exc:
        result.update(outcome="failed", error=str(exc))
        code = 1
    except Exception as exc:            # noqa: BLE001 - reported to the parent, which records it
        result.update(outcome="failed", error=f"{type(exc).__name__}: {exc}")
        code = 1
    write()
    print(f"point result: {result}", flush=True)
    return code


def _leave_nothing(doc: dict) -> None:
    """The runner tears its lab down in a `finally`; a second signal during that cleanup can cut it short, so
    make sure the point's lab is gone (teardown is idempotent and works from the state file alone)."""
    with _signals_ignored():
        _leave_nothing_now(doc)


def _leave_nothing_now(doc: dict) -> None:
    from orchestrator import lab as labmod
    from orchestrator.state import list_labs

    name = doc.get("name")
    if name and name in list_labs():
        labmod.teardown(name)


class _signals_ignored:
    def __enter__(self):
        self.old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}

    def __exit__(self, *exc):
        for s, h in self.old.items():
            signal.signal(s, h)


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


if __name__ == "__main__":              # a --parallel child: python -m orchestrator.sweeprun JOB
    sys.exit(child_main(sys.argv[1]))
