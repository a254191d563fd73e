"""A sweep's state (orchestrator/sweeprun.py): its options, its index (sweep.json, written by the parent alone),
what makes a point finished or invalid, and the bookkeeping of one point's run that the sequential and the parallel
paths share. No run is started here."""
from __future__ import annotations

import json
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from orchestrator import fidelity as fid
from orchestrator import hostspeed
from orchestrator import sweep as sw
from orchestrator.backends.base import Progress
from orchestrator.timebase import Measured


INDEX = "sweep.json"
FINISHED = "completed"


@dataclass
class SweepOptions:
    out: Path | None = None                    # the sweep directory (default runs/sweeps/<experiment name>)
    only: list[str] = field(default_factory=list)
    axes: dict[str, list[Any]] = field(default_factory=dict)   # --axis overrides
    repetitions: int | None = None
    backend: str = "mininet"
    backend_options: dict = field(default_factory=dict)   # --machines: the inventory and host-key options
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


def judge_host_speed(points: dict) -> list[str]:
    """The sweep's host-speed judge (pure, over sweep.json's entries; idempotent): a finished point whose run had
    a member at its CPU budget (`fidelity.budget_bound` > 0: CPU time decided the result) and whose memory speed
    (`fidelity.host_speed_memory`, orchestrator.hostspeed) is below MIN_SPEED_SHARE of the best repetition of the
    same coordinates did its work on a slower machine: `fidelity.host_speed_reason` says so and the point is
    `unfaithful` (`--rerun-unfaithful` runs it again). Only repetitions are compared: the lab's own processes take
    cache from the sampler too, so points with more work measure lower. A run no budget bound is not flagged: its
    result did not wait on the CPU (QSM's Figure 9 at one core per member gave the same 5 000 messages/s at memory
    speeds of 89 and 304). Returns the points it newly flagged."""
    done = {pid: e for pid, e in points.items() if e.get("status") == FINISHED and e.get("fidelity")}
    point_of = {pid: json.dumps(e.get("coords") or {}, sort_keys=True) for pid, e in done.items()}
    best: dict[str, float] = {}
    for pid, e in done.items():
        v, key = e["fidelity"].get("host_speed_memory"), point_of[pid]
        if isinstance(v, (int, float)):
            best[key] = max(best.get(key, v), v)
    flagged = []
    for pid, e in done.items():
        f, key = e["fidelity"], point_of[pid]
        reason = hostspeed.slower_than(f.get("host_speed_memory"), best.get(key)) if f.get("budget_bound") else None
        f["host_speed_best"], f["host_speed_reason"] = best.get(key), reason
        unfaithful = f.get("verdict") == "unfaithful" or reason is not None
        if unfaithful and not e.get("unfaithful"):
            flagged.append(pid)
        e["unfaithful"] = unfaithful
    return flagged


def _interrupts_as_keyboardinterrupt():
    """SIGTERM, SIGHUP (and SIGINT even when inherited as ignored) raise KeyboardInterrupt, so the run cleans up."""
    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    return lambda: [signal.signal(s, h) for s, h in old.items()]


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


LOCAL_BACKENDS = ("mininet", "docker")


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
