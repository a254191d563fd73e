"""`orchestrator run` (docs/architecture.md §6), one path for every backend: validate everything, build the lab
(`Backend`), drive the nodes (the backend's `NodeDriver`), apply the schedule, stop, collect, tear down.

The nodes' configuration files come from `orchestrator.nodeconfig` (pure); the run directory, the manifest and
the versions from `orchestrator.rundir`. The `Runner` applies timed operations through the driver and never
prints (progress goes through a `Progress`); its unit tests drive it on the fake backend
(orchestrator/backends/fake.py) without root.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from orchestrator import fidelity as fid
from orchestrator import hostspeed
from orchestrator import lab as labmod
from orchestrator import signals
from orchestrator.backends import packing as packmod
from orchestrator.backends.base import Backend, NodeDriver, NullProgress, Progress, RunContext
from orchestrator.backends.registry import get_backend
from orchestrator.errors import DelayLineDied, OrchestratorError, SpecError
from orchestrator.mcast.tree import mfc_changes, narrowed
from orchestrator.nodeconfig import node_configs
from orchestrator import runschema as schema
from orchestrator.plan import NetworkPlan, build_plan
from orchestrator.rundir import RunDir, check_out_dir, new_run_id, versions
from orchestrator.schedule import (Op, OpKind, Timeline, check_leaves, check_supported, expand, parse_schedule,
                                   with_gms)
from orchestrator.shaping import shapers
from orchestrator.shaping.params import DirParams
from orchestrator.source import FieldError
from orchestrator.spec import locate
from orchestrator.state import LabState, load_state
from orchestrator.timebase import Dilation, Measured, budget_overcommit, check_budgets, resolve_dilation

if TYPE_CHECKING:
    from gossipnode.vclock import VirtualClock
    from orchestrator.spec import Experiment

START_TIMEOUT_S = 30.0       # nodes must answer on their control socket within this + START_PER_NODE_S each
START_PER_NODE_S = 0.5
START_MARGIN_S = 0.5         # the common start is this far after the last node answered,
START_MARGIN_PER_NODE_S = 0.001   # + this per node (the start requests go out one after another)

__all__ = ["RunOptions", "Runner", "run", "check_out_dir"]


@dataclass
class RunOptions:
    backend: str = "mininet"
    out: Path = Path("runs")
    keep: bool = False
    seed: int | None = None
    shaper: str = "auto"
    strict: bool = False
    lab: str | None = None          # reuse this running lab instead of building one
    name: str | None = None
    backend_options: dict = field(default_factory=dict)   # hosts: inventory, known_hosts, accept_new_host_keys
    on_run_dir: Callable[[Path], None] | None = None      # told the run directory as soon as it exists
    probe_paths: int = 2
    probe_links: int = 3
    dilation: float | str | None = None     # overrides the experiment's time.dilation (--dilation)
    measured: Measured | None = None        # CPU measured on an earlier run of the setup (time.dilation auto)
    cores: float | None = None              # the cores this run may plan with (default: the machine's)


# --- the schedule: one dispatch for every driver ------------------------------------------------------------

def _link_params(state: LabState, plan: NetworkPlan, op: Op, lid: str, direction: str) -> DirParams | None:
    planned = getattr(next(lk for lk in plan.links if lk.id == lid), direction)
    if op.kind == OpKind.LINK_CUT:
        return None
    if op.kind == OpKind.LINK_RESTORE:
        return planned
    current = state.link_overrides.get(f"{lid}/{direction}")
    base = planned if current in (None, "cut") else DirParams.from_json(current)
    return op.params.apply(base)


def _links(d: NodeDriver, op: Op) -> dict:
    out: dict = {}
    for lid, direction in op.links:
        out.update(d.set_link(lid, direction, _link_params(d.ctx.state, d.ctx.plan, op, lid, direction)))
    return out


DISPATCH: dict[OpKind, Callable[[NodeDriver, Op], dict]] = {
    OpKind.CRASH: lambda d, op: d.crash(list(op.targets), silent=op.params == "silent"),
    OpKind.START: lambda d, op: d.start_nodes(d.run_at_once(d.reconnect(list(op.targets)))),
    OpKind.STOP_SIGNAL: lambda d, op: d.pause(list(op.targets)),
    OpKind.CONT_SIGNAL: lambda d, op: d.resume(list(op.targets)),
    OpKind.LINK_SET: _links,
    OpKind.LINK_CUT: _links,
    OpKind.LINK_RESTORE: _links,
    OpKind.WORKLOAD_START: lambda d, op: d.control_senders({"cmd": "workload", "op": "start"}),
    OpKind.WORKLOAD_STOP: lambda d, op: d.control_senders({"cmd": "workload", "op": "stop"}),
    OpKind.GMS_VIEW: lambda d, op: d.control_members(
        {"cmd": "gms_view", "changes": [{kind: list(m)} for kind, m in op.params[0]]}, skip=op.params[1]),
}
assert set(DISPATCH) == set(OpKind)


def joiners_of(op: Op, names: list[str]) -> list[str]:
    """The members a GMS_VIEW op adds to the group (its targets that its last change adds and that are not down),
    `names` the plan's members by id. Pure."""
    changes, down = op.params
    kind, ids = changes[-1]
    added = {names[i] for i in ids} if kind == "add" else set()
    return [t for t in op.targets if t in added and t not in down]


@dataclass
class GroupMembers:
    """The members the lab's multicast routing reaches, as the schedule changes them (docs/multicast.md, "Members
    joining and leaving"): with a membership service (the timeline has its views) a member is routed to from the
    view that adds it until the view that removes it, as the paper's GMS "updates the whole structure" (QSM
    §2.1); without one, from its process's start (its sockets join the groups) until it leaves (a `leave`: the
    departure is told). A crashed member's branch stays, as a querier keeps a silent member's until its report
    times out (minutes: longer than a run). Pure."""

    plan: NetworkPlan
    first: frozenset[str]           # the members started at the beginning
    gms: bool
    present: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        self.present = self.first

    def after(self, op: Op) -> frozenset[str]:
        if self.gms:
            if op.kind != OpKind.GMS_VIEW:
                return self.present
            names = [m.name for m in self.plan.members]
            now = set(self.first)
            for kind, ids in op.params[0]:         # every change so far, in order
                for i in ids:
                    (now.add if kind == "add" else now.discard)(names[i])
            return frozenset(now)
        if op.kind == OpKind.START:
            return self.present | set(op.targets)
        if op.kind == OpKind.CRASH and op.params == "leave":
            return self.present - set(op.targets)
        return self.present


@dataclass
class Runner:
    timeline: Timeline
    driver: NodeDriver
    run: RunDir
    progress: Progress = field(default_factory=NullProgress)
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    applied: list[dict] = field(default_factory=list)
    stopped_reason: str = "completed"
    dilation: float = 1.0           # real seconds per virtual second: the schedule's times are virtual
    _groups: GroupMembers | None = field(default=None, init=False, repr=False)
    _routed: tuple[frozenset[str], list] = field(default=(frozenset(), []), init=False, repr=False)   # installed

    def _await_joiners(self, op: Op) -> float | None:
        """Before the GMS's view that adds joiners, wait (bounded) until those it adds are running: a view
        announced while a joiner's process is still starting never reaches it (its control socket is not there
        yet), and the others' new region views would hold a member that takes part in nothing, every token dying
        there. The GMS acts on requests ("The GMS listens to client requests as well as messages from a failure
        detector", QSM §2.1): a member that asks to join is up. On a busy machine an interpreter takes a second or more to start. Returns the wait (virtual ms), None
        when the view adds nobody of this op."""
        joiners = joiners_of(op, [m.name for m in self.driver.ctx.plan.members])
        if not joiners:
            return None
        t = self.clock()
        self.driver.await_ready(joiners, timeout_s=START_TIMEOUT_S + START_PER_NODE_S * len(joiners))
        return (self.clock() - t) / self.dilation * 1000

    def apply(self, op: Op) -> dict:
        if op.kind not in self.driver.OPS:      # validation refused this before anything was built
            raise OrchestratorError(f"operation {op.kind} is not supported by {type(self.driver).__name__}")
        return DISPATCH[op.kind](self.driver, op)

    def execute(self, t0: float, duration_s: float) -> None:
        """Apply the schedule from `t0` (a reading of `clock`, real) for `duration_s` virtual seconds. Every time
        the runner records is virtual (seconds since t0); it sleeps the real equivalent (x dilation). A lab with
        multicast groups has its routes follow the members (`GroupMembers`) and gets the plan's back at the end."""
        plan = self.driver.ctx.plan
        if not plan.groups:
            return self._execute(t0, duration_s)
        everyone = frozenset(m.name for m in plan.members)
        self._groups = GroupMembers(plan, frozenset(self.driver.ctx.first),
                                    any(op.kind == OpKind.GMS_VIEW for op in self.timeline.ops))
        self._routed = (everyone, plan.groups)          # what `up` installed
        try:
            counts = self._route(self._groups.first)
            if counts:
                self.run.record({"event": "multicast_routes", "actual_s": 0.0, "members": len(self._groups.first),
                                 **counts})
            self._execute(t0, duration_s)
        except BaseException:
            try:
                self._route(everyone)
            except OrchestratorError:       # (the daemon may be what failed): the run's own error is reported
                pass
            raise
        self._route(everyone)

    def _route(self, members: frozenset[str]) -> dict | None:
        """The routes for `members` instead of the installed ones (nothing when they are the same)."""
        now, groups = self._routed
        if members == now:
            return None
        plan = self._groups.plan
        nxt = narrowed(plan, set(members))
        changes = mfc_changes(plan, groups, nxt)
        self._routed = (members, nxt)
        return self.driver.multicast_routes(changes) if changes else None

    def _execute(self, t0: float, duration_s: float) -> None:
        ops = list(self.timeline.ops)
        n = self.dilation
        self.progress.start("experiment (s)", int(duration_s))
        shown = 0
        last_check = -1.0
        while True:
            now = (self.clock() - t0) / n
            while ops and ops[0].t <= now:
                op = ops.pop(0)
                before = (self.clock() - t0) / n
                waited = self._await_joiners(op) if op.kind == OpKind.GMS_VIEW else None
                routes: list[dict | None] = []
                if self._groups is not None:
                    # graft before the op (a joiner's copies must reach it from its view on), prune after it
                    target = self._groups.present = self._groups.after(op)
                    routes.append(self._route(self._routed[0] | target))
                replies = self.apply(op)
                if self._groups is not None:
                    routes.append(self._route(target))
                entry = {"event": "action_applied", "index": op.index,
                         "action": self.timeline.actions[op.index].action, "op": op.kind.value,
                         "planned_s": op.t, "actual_s": before, "lag_ms": (before - op.t) * 1000,
                         "targets": list(op.targets), "links": [f"{a}/{b}" for a, b in op.links]}
                if op.kind == OpKind.CRASH:
                    entry["mode"] = op.params or "kill"
                if waited is not None:
                    entry["joiners_ready_ms"] = waited
                if any(routes):
                    entry["multicast_routes"] = {k: sum(r[k] for r in routes if r) for k in ("nodes", "set",
                                                                                               "deleted")}
                if replies:                     # a driver that acts over the network: its round trips
                    entry["rtt_ms"] = {m: r.get("rtt_s", 0) * 1000 for m, r in replies.items()}
                    entry["pids"] = {m: r.get("pid") for m, r in replies.items()}
                    errors = {m: r.get("error") for m, r in replies.items() if not r.get("ok", True)}
                    if errors:
                        entry["errors"] = errors
                self.applied.append(entry)
                self.run.record(entry)
                if op.kind not in (OpKind.STOP_SIGNAL, OpKind.CONT_SIGNAL) or len(self.timeline.ops) < 200:
                    alive = self.driver.alive()
                    self.progress.note(
                        f"t={before:6.1f}s {entry['action']:<9} {op.kind.value:<12} "
                        f"{','.join(op.targets or [f'{a}/{b}' for a, b in op.links])[:60]} "
                        f"(lag {entry['lag_ms']:.1f} ms"
                        + (f", {alive} nodes alive" if alive is not None else "")
                        + (f", over the network {max(entry['rtt_ms'].values(), default=0):.1f} ms"
                           if "rtt_ms" in entry else "")
                        + (f") ERRORS {entry['errors']}" if "errors" in entry else ")"))
            if int(now) > shown:
                self.progress.advance("experiment (s)", min(int(now), int(duration_s)) - shown)
                shown = min(int(now), int(duration_s))
            if (now - last_check) * n >= 1.0:    # the shaper's health, once a (real) second
                self.driver.check()
                last_check = now
            if now >= duration_s:
                return
            nxt = ops[0].t if ops else duration_s
            self.sleep(max(0.0, min((nxt - now) * n, 0.2, (duration_s - now) * n)))

    def schedule_summary(self) -> dict:
        lags = sorted(a["lag_ms"] for a in self.applied)
        out = {"actions": len(self.timeline.actions), "applied_ops": len(self.applied),
               "lag_ms_median": lags[len(lags) // 2] if lags else None, "lag_ms_max": lags[-1] if lags else None}
        rtts = sorted(r for a in self.applied for r in a.get("rtt_ms", {}).values())
        if rtts:
            out.update(agent_rtt_ms_median=rtts[len(rtts) // 2], agent_rtt_ms_max=rtts[-1])
        return out


# --- the run ------------------------------------------------------------------------------------------------------

def decide_packing(backend: Backend, exp, members: int) -> packmod.PackingDecision:
    """The experiment's `nodes.packing` on this machine; SpecError if it packs members on a backend whose driver
    the packed driver does not extend (only the namespace backend's nodes are processes of this machine in named
    namespaces). docker and hosts refuse it already in their `check_run`, with their own words. Over several
    machines each machine's agent decides again for its own members; this decision sizes the time dilation."""
    decision = packmod.decide_here(exp, members)
    if decision.packed and not backend.packs_remotely and not issubclass(packmod.PackedDriver, backend.driver_class):
        raise SpecError(f"nodes.packing: the {backend.name} backend cannot pack members ({decision.reason}); use "
                        f"`nodes: {{packing: process}}`")
    return decision


def decide_dilation(exp, packing: packmod.PackingDecision, members: int, opts: RunOptions,
                    state: LabState | None) -> Dilation:
    """The run's time dilation: `--dilation`, else the experiment's `time.dilation`; `auto` resolved from the
    budgets (or an earlier run's measured CPU) and this machine's cores. A reused lab (`--lab`) was built for one
    dilation: the run must have it (`auto` takes the lab's). SpecError (exit 2) when it cannot be."""
    requested = exp.time.dilation           # --dilation was applied when the experiment was loaded
    if state is not None:
        if requested != "auto" and float(requested) != state.dilation:
            raise FieldError(("time", "dilation"), f"lab {state.lab!r} was built for dilation {state.dilation:g}, "
                                                   f"not {float(requested):g}")
        requested = state.dilation
    problem = check_budgets(exp.nodes.cpu, requested, packing.members_per_process)
    if problem:
        raise FieldError(("nodes", "cpu"), problem)
    try:
        return resolve_dilation(requested, exp.nodes.cpu, members, packing.members_per_process,
                                opts.cores or float(os.cpu_count() or 1), opts.measured)
    except ValueError as exc:
        raise FieldError(("time", "dilation"), str(exc)) from None


def write_judges(rd: RunDir) -> None:
    """judges.json: the run's fidelity judges (orchestrator.fidelity.run_judges, default thresholds), written when
    the run ends, so the analysis reads them from the run directory (and never imports the orchestrator)."""
    try:
        (rd.path / "judges.json").write_text(json.dumps(fid.run_judges(rd.path), indent=1))
    except (OSError, ValueError) as exc:
        rd.log(f"judging the run failed: {exc}")


HOST_SPEED_EVERY_S = 5.0


def start_host_speed(rd: RunDir) -> subprocess.Popen | None:
    """The host-speed sampler beside the run (orchestrator.hostspeed): a process on this machine, a sample every
    HOST_SPEED_EVERY_S into the run directory; it ends with the run (terminated) or with this process."""
    try:
        return subprocess.Popen([sys.executable, "-m", "orchestrator.hostspeed", "sample",
                                 str(rd.path / schema.HOST_SPEED), "--every", str(HOST_SPEED_EVERY_S),
                                 "--parent", str(os.getpid())],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError as exc:
        rd.log(f"host speed not sampled: {exc}")
        return None


def stop_host_speed(proc: subprocess.Popen | None, rd: RunDir, start_real: float | None,
                    end_real: float) -> dict | None:
    """Stop the sampler; the manifest's `host_speed`: the samples taken from the common start to the stop (all of
    them when the run never started or no sample fell in between)."""
    if proc is None:
        return None
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    samples = hostspeed.read_samples(rd.path / schema.HOST_SPEED)
    during = [x for x in samples if start_real is not None and start_real <= x.get("ts", 0) <= end_real]
    return hostspeed.summarise(during or samples)


def make_driver(backend: Backend, ctx: RunContext, decision: packmod.PackingDecision) -> NodeDriver:
    if decision.packed and not backend.packs_remotely:     # a machine's agent packs its own members
        return packmod.PackedDriver(backend, ctx, decision)
    return backend.driver(ctx)


def _note(progress: Progress, message: str) -> None:
    """A progress note during cleanup: a terminal that hung up (SIGHUP) must not stop the cleanup."""
    try:
        progress.note(message)
    except (OSError, ValueError):
        pass


def run(experiment_path: str | Path, opts: RunOptions, progress: Progress | None = None,
        variables: dict | None = None) -> Path:
    """Ctrl-C, SIGTERM and SIGHUP all stop the run the same way (orchestrator.signals): stop, collect, manifest
    `interrupted (<signal>)`, teardown."""
    progress = progress or NullProgress()
    check_out_dir(opts.out)
    with signals.interrupts():
        return _run(experiment_path, opts, progress, variables)


@dataclass
class Planned:
    """Everything a run decided before anything exists (`plan_run`): the experiment, the plan, the backend, the
    schedule, how the members run and in what time, the run's names, and the members' node configs (built once
    here; the driver only says where its nodes see their files)."""

    exp: "Experiment"
    plan: NetworkPlan
    backend: Backend
    lab: str
    built: bool                      # this run builds the lab (else it reuses `state`'s)
    prep: "labmod.Prepared | None"
    state: LabState | None
    timeline: Timeline
    packing: packmod.PackingDecision
    dilation: Dilation
    run_id: str
    run_path: Path
    ctl_dir: Path
    clock: "VirtualClock"
    configs: dict[str, dict]

    @property
    def first(self) -> list[str]:
        """The members started at the beginning (the others join later)."""
        return [m.name for m in self.plan.members if m.name not in self.timeline.joiners]


def plan_run(experiment_path: str | Path, opts: RunOptions, variables: dict | None) -> Planned:
    """1. Everything that can be checked, before anything exists: the whole experiment file, its schedule against
    the plan with this run's seed, what the backend's driver supports, the backend's own checks, how the members
    run, the dilation, and the members' node configs (SpecError naming the file and the line)."""
    state: LabState | None = None
    if opts.lab:
        from orchestrator.spec import load_experiment

        exp = load_experiment(experiment_path, variables, opts.seed, opts.dilation)
        state = load_state(opts.lab)
        if opts.backend_options and state.backend != opts.backend:
            raise SpecError(f"lab {opts.lab!r} runs on backend {state.backend!r}, not {opts.backend}")
        plan = state.load_plan()
        lab_name, built, prep = opts.lab, False, None
        if build_plan(exp).digest() != state.plan_digest:
            raise SpecError(f"lab {opts.lab!r} was built from a different plan than {experiment_path}")
        backend = get_backend(state.backend)
    else:
        # the members' configs are built (and checked) below, once, not by `prepare`
        prep = labmod.prepare(experiment_path, opts.name, variables, opts.seed, opts.dilation, check_configs=False)
        exp, plan, lab_name, built = prep.experiment, prep.plan, prep.lab, True
        backend = get_backend(opts.backend, **(opts.backend_options or {}))
    timeline = expand(parse_schedule(exp.schedule), plan, exp.duration_s, exp.seed)
    detect = exp.protocol.gms_detect_s() if exp.protocol is not None else None
    if detect is not None:      # the orchestrator is the protocol's membership service: views follow the crashes
        timeline = with_gms(timeline, plan, detect, exp.duration_s, exp.protocol.gms_batch_s())
    dcls = backend.driver_class
    try:
        check_leaves(timeline, detect is not None, exp.protocol.name if exp.protocol is not None else None)
        check_supported(timeline, dcls.OPS, backend.name, dcls.WHY_UNSUPPORTED, dcls.can_isolate(backend))
        backend.check_run(exp, plan, lab_name, state)
        packing = decide_packing(backend, exp, len(plan.members))
        dilation = decide_dilation(exp, packing, len(plan.members), opts, state)
    except FieldError as exc:                       # a field of the file: say its line
        raise locate(experiment_path, exc, variables) from None
    if backend.fidelity_probe and shutil.which("tcpdump") is None and exp.capture.interfaces != "none":
        raise OrchestratorError("tcpdump is not installed (run `make setup`)")
    run_id = new_run_id(lab_name)
    run_path = (opts.out / run_id).resolve()
    ctl_dir = Path(labmod.CTL_ROOT) / f"orch-ctl-{run_id}"      # teardown of the lab removes it too
    # The lab's clock: virtual time from this epoch on (docs/virtual-time.md); every node and record uses it.
    clock = dilation.clock(time.time())
    try:
        configs = node_configs(exp, plan, run_path, ctl_dir, timeline=timeline)
    except FieldError as exc:
        raise locate(experiment_path, exc, variables) from None
    for name, cfg in configs.items():
        if dcls.COMMON_START:       # joiners run the protocol as soon as they start
            cfg["wait_for_start"] = name not in timeline.joiners
        cfg["clock"] = clock.to_json()
    return Planned(exp, plan, backend, lab_name, built, prep, state, timeline, packing, dilation, run_id, run_path,
                   ctl_dir, clock, configs)


def _open_run_dir(p: Planned, opts: RunOptions, progress: Progress, experiment_path: str | Path) -> RunDir:
    """2. The run directory, the plan as planned and the manifest `starting` (one write)."""
    rd = RunDir(p.run_path, opts.out, p.clock)
    p.ctl_dir.mkdir(parents=True, exist_ok=True)
    if opts.on_run_dir is not None:
        opts.on_run_dir(p.run_path)
    rd.write_plan(p.plan.to_dict())
    exp, backend = p.exp, p.backend
    fields = dict(run_id=p.run_id, experiment_file=str(experiment_path), spec=exp.model_dump(mode="json"),
                  seed=exp.seed, backend=backend.name, lab=p.lab, plan_digest=p.plan.digest(),
                  realised=backend.realised(p.plan, p.state), versions=versions(), started_at=time.time(),
                  status=schema.STARTING, packing=p.packing.manifest(), time=p.dilation.manifest(p.clock.epoch))
    if exp.nodes.cpu is not None and not backend.enforces_cpu:      # allowed by the backend's check (a flag)
        fields["cpu_budget"] = {"enforced": False, "cpu": exp.nodes.cpu,
                                "reason": f"the {backend.name} backend cannot enforce it"}
    cores = opts.cores or float(os.cpu_count() or 1)
    over = budget_overcommit(exp.nodes.cpu, len(p.plan.members), p.dilation.n, cores)
    warnings = ([over] if over else []) + exp.protocol.schedule_warnings(
        [a.action for a in sorted(p.timeline.actions, key=lambda a: a.at_s)])
    for w in warnings:
        rd.log(f"WARNING: {w}")
        progress.note(f"WARNING: {w}")
    if warnings:
        fields["warnings"] = warnings
    rd.write_manifest(**fields)
    for reason in p.dilation.reasons:
        rd.log(f"time: {reason}")
    if p.dilation.requested == "auto":
        progress.note(f"time dilation {p.dilation.n:g} (auto: {p.dilation.reasons[0]})")
    return rd


def _build(p: Planned, rd: RunDir, opts: RunOptions, progress: Progress, experiment_path: str | Path) -> LabState:
    """The lab, when this run builds it (a failure or Ctrl-C: the lab removed what it built, the manifest ends)."""
    if not p.built:
        return p.state
    try:
        return labmod.up(p.prep, p.backend.name, opts.shaper, opts.strict, str(experiment_path), progress,
                         backend=p.backend, dilation=p.dilation.n)
    except BaseException as exc:      # lab.up removed what it built; the manifest must not say "starting"
        with signals.shielded():
            rd.write_manifest(status=(f"interrupted ({signals.describe(exc)})"
                                      if isinstance(exc, KeyboardInterrupt) else f"failed: {exc}"),
                              ended_at=time.time())
            shutil.rmtree(p.ctl_dir, ignore_errors=True)
        raise


def _run(experiment_path: str | Path, opts: RunOptions, progress: Progress, variables: dict | None) -> Path:
    p = plan_run(experiment_path, opts, variables)
    rd = _open_run_dir(p, opts, progress, experiment_path)
    p.backend.for_run(rd, p.exp)
    state = _build(p, rd, opts, progress, experiment_path)
    exp, plan, backend, clock, first = p.exp, p.plan, p.backend, p.clock, p.first
    # The lab knows the run using it, so `teardown` after a killed orchestrator can finish the manifest.
    state.run = {"dir": str(p.run_path), "pid": os.getpid(), "pid_start": labmod.process_start(os.getpid())}
    state.save()
    running: dict = dict(shaper=state.shaper, capabilities=state.capabilities, shaping_warnings=state.warnings)
    if state.backend_data.get("image"):
        running["versions"] = {**rd.manifest["versions"],
                               "node_image": f"{state.backend_data['image']} {state.backend_data.get('image_id', '')}"}
    driver = make_driver(backend, RunContext(exp, plan, state, rd, p.ctl_dir, first, progress, clock), p.packing)
    runner = Runner(p.timeline, driver, rd, progress, dilation=clock.dilation)
    sampler, start_real = None, None
    try:
        # 3. The members' configs as their nodes will read them (a driver that runs a node elsewhere, in a
        #    container or on a host, says where its files are), written once; fidelity probe, captures, nodes.
        rd.write_configs(driver.configure(p.configs))
        rd.log(f"run {p.run_id}: lab {p.lab} ({'built' if p.built else 'reused'}) on {backend.name}, "
               f"shaper {state.shaper}, " + ("node processes decided on each machine" if backend.packs_remotely
                                             else f"{p.packing.processes} node processes ({p.packing.reason})"))
        if backend.fidelity_probe:
            progress.note("fidelity probe ...")
            fsum = fid.probe(plan, state.shaper, lambda node, argv, **kw: backend.popen(state, node, argv, **kw),
                             links=opts.probe_links, paths=opts.probe_paths, seed=exp.seed,
                             parameters=shapers.parameters(plan, state.shaper), dilation=clock.dilation,
                             underlay_ms=backend.underlay_rtts(state, plan))
            (p.run_path / schema.FIDELITY).write_text(json.dumps(fsum, indent=1))
            running["fidelity"] = {**{k: fsum[k] for k in ("max_abs_error_ms", "max_rel_error", "sent", "received",
                                                          "expected_lost")},
                                   "rate_error": (fsum["rate"] or {}).get("error")}
            running["shaping_parameters"] = fsum["parameters"]
        driver.prepare()
        running.update(driver.manifest_fields())
        if backend.members_here:
            sampler = start_host_speed(rd)
        rd.log(f"{driver.start_captures()} captures running")
        driver.start_nodes(first)
        # The first members wait for a common start (their configs say wait_for_start): on a busy machine
        # 200 Python processes take tens of seconds to come up, and the protocol must not start staggered.
        driver.await_ready(first, timeout_s=START_TIMEOUT_S + START_PER_NODE_S * len(first))
        rd.log(f"{len(first)} nodes ready")
        if driver.COMMON_START:
            margin = START_MARGIN_S + START_MARGIN_PER_NODE_S * len(first)
            start_unix = time.time() + margin
            t0 = runner.clock() + margin
            driver.start_protocol(first, clock.to_virtual(start_unix))     # the nodes' clocks are virtual
            late = runner.clock() - t0
            running["start"] = {"margin_s": margin, "requests_done_s": late + margin}
            if late > 0:            # some members got their request after t0: they start late (judged)
                rd.log(f"WARNING: the start requests were still going out {late * 1000:.0f} ms after the common "
                       f"start ({len(first)} members, margin {margin:.2f} s)")
        else:
            start_unix, t0 = time.time(), runner.clock()
        # 4. Running (one write): t0_unix is virtual, as every event's ts; t0_real_unix is when that was on the
        #    machine's clock.
        rd.write_manifest(status=schema.RUNNING, t0_unix=clock.to_virtual(start_unix), t0_real_unix=start_unix,
                          **running)
        runner.sleep(max(0.0, t0 - runner.clock()))
        start_real = time.time()
        driver.mark_start()
        rd.record({"event": "run_started", "members": first, "duration_s": exp.duration_s})
        runner.execute(t0, exp.duration_s)
    except KeyboardInterrupt as exc:      # Ctrl-C, SIGTERM, SIGHUP (orchestrator.signals)
        runner.stopped_reason = f"interrupted ({signals.describe(exc)})"
        raise
    except DelayLineDied as exc:
        runner.stopped_reason = f"shaper failed: {exc}"
        raise
    except Exception as exc:
        runner.stopped_reason = f"failed: {exc}"
        raise
    finally:
        # 5. Stop cleanly, collect what there is, tear down. Runs on success, error and every interruption
        #    alike; further signals during it are recorded, not raised (it must finish). The end: one write.
        with signals.shielded() as late:
            _note(progress, f"stopping ({runner.stopped_reason}) and collecting ...")
            rd.log(f"stopping: {runner.stopped_reason}")
            end_real = time.time()
            report = driver.stop()
            rd.record({"event": "run_stopped", "reason": runner.stopped_reason})
            speed = stop_host_speed(sampler, rd, start_real, end_real)
            if speed:
                running["host_speed"] = speed
            done = {k: v for k, v in running.items() if k not in rd.manifest}   # an early failure: what was learned
            rd.write_manifest(status=runner.stopped_reason, ended_at=time.time(),
                              schedule=runner.schedule_summary(), captures=report.captures, **done,
                              **report.manifest)
            write_judges(rd)
            shutil.rmtree(p.ctl_dir, ignore_errors=True)
            if p.built and not opts.keep:
                _note(progress, "tearing down ...")
                try:
                    labmod.teardown(p.lab)
                except OrchestratorError as exc:
                    rd.log(f"teardown failed: {exc}")
                    if runner.stopped_reason == "completed":
                        raise
                    _note(progress, f"WARNING: teardown failed too: {exc}")   # keep the run's own error
            else:
                state.run = None
                state.save()
            if late:
                rd.log(f"signals during the cleanup (ignored until it finished): {late}")
    return p.run_path
