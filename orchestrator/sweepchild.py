"""`sweep --parallel K` (docs/sweeps.md): up to K points at once, each in a child process
(`python -m orchestrator.sweepchild JOB`) that runs exactly what `orchestrator run` runs (orchestrator.runner.run)
in its slot's lab name and address pools; the parent alone writes sweep.json, judges each finished run, and on
Ctrl-C/SIGTERM stops every child so that each tears its lab down."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from orchestrator import signals
from orchestrator import sweep as sw
from orchestrator.backends.base import Progress
from orchestrator.errors import OrchestratorError
from orchestrator import sweepfit
from orchestrator.sweepstate import (SweepOptions, _begin, _finish, _interrupts_as_keyboardinterrupt, _leave_nothing,
                                     _leave_nothing_now, _signals_ignored)
from orchestrator.timebase import Measured


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
    """Start `python -m orchestrator.sweepchild JOB` in its own session (a terminal's Ctrl-C reaches the parent
    only; the parent stops every child with one SIGINT of its own, so a child's cleanup is never cut short)."""
    job_file.write_text(json.dumps(job, indent=1))
    with log_file.open("w") as log:
        return subprocess.Popen([sys.executable, "-m", "orchestrator.sweepchild", str(job_file)],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)


Launcher = Callable[[dict, Path, Path], Any]


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
    m = sweepfit.measured_cpu(index.data["points"]) or opts.cpu_from
    job = {"experiment": str(exp_file), "out": str(pdir), "result": str(result), "backend": opts.backend,
           "shaper": opts.shaper, "strict": opts.strict, "probe_links": opts.probe_links,
           "probe_paths": opts.probe_paths, "measured": m.__dict__ if m else None,
           "cores": sweepfit.machine()[0] / opts.parallel}      # time.dilation auto: this point's share of the cores
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




if __name__ == "__main__":              # a --parallel child: python -m orchestrator.sweepchild JOB
    sys.exit(child_main(sys.argv[1]))
