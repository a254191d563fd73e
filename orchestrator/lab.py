"""Lab lifecycle: experiment file -> plan -> backend.up, and back to nothing. No UI code here (see cli.py)."""
from __future__ import annotations

import json
import os
import re
import shutil
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from orchestrator import runschema as schema
from orchestrator import signals
from orchestrator.backends.base import Backend, NullProgress, Progress
from orchestrator.backends import registry
from orchestrator.backends.registry import get_backend
from orchestrator.errors import LabExists, LabNotFound, OrchestratorError, ShapingError, SpecError
from orchestrator.mcast.realise import status as mcast_status
from orchestrator.plan import NetworkPlan, build_plan
from orchestrator.shaping import shapers
from orchestrator.shaping.params import DirParams
from orchestrator.shaping.probe import Capabilities, probe_kernel
from orchestrator.spec import Experiment, check_name, load_experiment
from orchestrator.state import LabState, list_labs, load_state, state_root
from orchestrator.units import format_time


@dataclass
class Prepared:
    experiment: Experiment
    plan: NetworkPlan
    lab: str


def prepare(experiment_path: str | Path, name: str | None = None, variables: dict | None = None,
            seed: int | None = None, dilation: float | str | None = None, check_configs: bool = True) -> Prepared:
    """Everything that can be checked before anything is created (bad input raises exit-code-2 errors): the
    whole file, its schedule against the plan included, and the members' node configs as `run` would write them
    (the protocol's own checks, e.g. a vsync committee larger than the group) (`seed` overrides the file's)."""
    exp = load_experiment(experiment_path, variables, seed, dilation)
    lab = check_name(name or exp.name or Path(experiment_path).stem.split(".")[0], "lab name")
    plan = build_plan(exp)
    # what `run` would refuse in the members' configs (`run` builds them itself: check_configs=False)
    if check_configs and exp.protocol is not None and plan.members:
        from orchestrator.nodeconfig import node_configs
        from orchestrator.source import FieldError
        from orchestrator.spec import locate
        try:
            node_configs(exp, plan, Path("/run-dir-not-created"), Path("/ctl-dir-not-created"), check_only=True)
        except FieldError as exc:
            raise locate(experiment_path, exc, variables) from None
    if lab in list_labs():
        raise LabExists(f"lab {lab!r} is already up (use `orchestrator teardown {lab}` or --name)")
    return Prepared(exp, plan, lab)


def lab_dilation(prep: Prepared):
    """The time dilation `up` builds the lab for (orchestrator.timebase: `auto` from the members' budgets on this
    machine, nothing measured yet)."""
    from orchestrator.packs import decide_here
    from orchestrator.timebase import resolve_dilation

    exp, members = prep.experiment, len(prep.plan.members)
    try:
        return resolve_dilation(exp.time.dilation, exp.nodes.cpu, members,
                                decide_here(exp, members).members_per_process, float(os.cpu_count() or 1))
    except ValueError as exc:
        raise SpecError(f"time.dilation: {exc}") from None


def live_link_params(prep: Prepared) -> tuple[tuple[str, DirParams], ...]:
    """What the schedule's `link` actions will set, each on the planned parameters ((where, parameters) pairs): a
    shaper that cannot render one is refused at `up`, not when the action comes (Capabilities.unrenderable)."""
    from orchestrator.schedule import OpKind, expand, parse_schedule

    exp, plan = prep.experiment, prep.plan
    if not exp.schedule:
        return ()
    out = []
    for op in expand(parse_schedule(exp.schedule), plan, exp.duration_s, exp.seed).ops:
        if op.kind == OpKind.LINK_SET:
            for lid, direction in op.links:
                planned = getattr(next(lk for lk in plan.links if lk.id == lid), direction)
                out.append((f"the link action at {op.t:g} s, link {lid} ({direction})", op.params.apply(planned)))
    return tuple(out)


def shaping_warnings(plan: NetworkPlan, shaper: str) -> list[str]:
    """What the chosen shaper will not emulate: one line per lost parameter, counted over link directions."""
    lost: dict[str, list[DirParams]] = {}
    s = shapers.get(shaper)
    for link in plan.links:
        for d in (link.down, link.up):
            for param in s.fidelity(d).lost():
                lost.setdefault(param, []).append(d)
    out = []
    for param, dirs in sorted(lost.items()):
        example = {"delay": lambda d: format_time(d.delay_s), "jitter": lambda d: format_time(d.jitter_s),
                   "loss": lambda d: "Gilbert-Elliott"}.get(param, lambda d: "")(dirs[0])
        out.append(f"{param} ({example}) is NOT emulated on {len(dirs)} link directions with shaper "
                   f"{shaper!r}: the kernel cannot do it that way")
    return out


def shaping_parameters(plan: NetworkPlan, shaper: str) -> dict[str, dict[str, int]]:
    """What each link parameter really gets with `shaper` (orchestrator.shaping.shapers.parameters)."""
    return shapers.parameters(plan, shaper)


def probe(cache: bool = True) -> Capabilities:
    return probe_kernel(state_root() if cache else None)


@contextmanager
def _sigterm_as_interrupt():
    """SIGTERM and SIGHUP during a build are handled like Ctrl-C: tear down what was built."""
    with signals.interrupts():
        yield


def up(prep: Prepared, backend_name: str = "mininet", shaper: str = "auto", strict: bool = False,
       experiment_path: str = "", progress: Progress | None = None,
       backend_options: dict | None = None, backend: Backend | None = None, dilation: float = 1.0) -> LabState:
    """Build the lab; `backend` (an instance, e.g. the one a run configured) or `backend_name` + options.
    `dilation`: the time dilation its shaping realises (the plan's link parameters are virtual)."""
    progress = progress or NullProgress()
    backend = backend or get_backend(backend_name, **(backend_options or {}))
    if prep.plan.groups and not backend.routes_groups:
        raise SpecError("multicast: groups need the mininet, docker or --machines backend (real hosts' own network "
                        "would have to route them)")
    if backend.remote_shaping:
        # Real hosts: each host's kernel is probed when the backend deploys it (it then sets the shaper, the
        # capabilities and the warnings); until then `shaper` is the request.
        chosen, caps_json, warnings = shaper, {}, []
    else:
        caps = probe()
        chosen = caps.choose(shaper)
        refused = caps.unrenderable(chosen, prep.plan, live_link_params(prep))
        if refused:
            raise SpecError(f"{experiment_path or prep.lab}: shaper {chosen} cannot render "
                            f"{len(refused)} link direction(s): " + "; ".join(refused[:5])
                            + (" ..." if len(refused) > 5 else ""))
        warnings = shaping_warnings(prep.plan, chosen)
        if warnings and strict:
            raise ShapingError("--strict-shaping: " + "; ".join(warnings))
        caps_json = caps.to_json()
    state = LabState(lab=prep.lab, backend=backend.name, shaper=chosen, experiment=str(experiment_path),
                     capabilities=caps_json, warnings=warnings, persistent=backend.state_survives_reboot,
                     dilation=dilation)
    state.save_plan(prep.plan)
    state.save()
    for w in warnings:
        progress.note(f"WARNING: {w}")
    with _sigterm_as_interrupt():
        try:
            backend.up(prep.plan, state, progress)
        except BaseException:
            try:
                progress.note("build failed or interrupted: tearing down what was created")
            except (OSError, ValueError):      # a terminal that hung up (SIGHUP) must not stop the teardown
                pass
            state.status = "failed"
            state.save()
            try:
                with signals.shielded():
                    _teardown(backend, state, NullProgress())
            except OrchestratorError as exc:   # keep the build's own error; the state stays for a retry
                progress.note(f"WARNING: tearing down after the failed build failed too: {exc}")
            raise
    return state


CTL_ROOT = "/tmp"


def process_start(pid: int) -> int | None:
    """A process's start time (clock ticks since boot, /proc/PID/stat field 22): with the pid it tells a live
    process from a new one that reuses the pid. None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


RUNNING = schema.UNFINISHED             # manifest states of a run that has not ended


def mark_orphaned_run(state: LabState) -> str | None:
    """If the run recorded in the lab state (`orchestrator run`) died without finishing its manifest (the
    orchestrator was SIGKILLed, or the machine lost power), mark it `interrupted: orchestrator gone`, so no run
    directory claims to be running when nothing is. Returns the run directory it marked."""
    run = state.run or {}
    if not run.get("dir"):
        return None
    pid = run.get("pid")
    if pid and process_start(pid) is not None and process_start(pid) == run.get("pid_start"):
        return None                     # the run is alive: it writes its own manifest
    f = Path(run["dir"]) / "manifest.json"
    try:
        manifest = json.loads(f.read_text())
    except (OSError, ValueError):
        return None
    if manifest.get("status") not in RUNNING:
        return None
    manifest.update(status=schema.ORCHESTRATOR_GONE, ended_at=time.time())
    tmp = f.with_name("manifest.json.tmp")
    tmp.write_text(json.dumps(manifest, indent=1, default=str))
    os.replace(tmp, f)
    return run["dir"]


def _teardown(backend: Backend, state: LabState, progress: Progress) -> None:
    mark_orphaned_run(state)
    backend.teardown(state, progress)
    # The nodes' control-socket directories of runs on this lab (`orchestrator run`), left by a killed run.
    for d in Path(CTL_ROOT).glob(f"orch-ctl-{state.lab}-*"):
        if re.fullmatch(r"\d{8}T\d{6}Z", d.name[len(f"orch-ctl-{state.lab}-"):]):   # not lab "<name>-x"'s
            shutil.rmtree(d, ignore_errors=True)
    state.remove()


def teardown(lab: str, progress: Progress | None = None) -> None:
    progress = progress or NullProgress()
    try:
        state = load_state(lab)
    except LabNotFound:
        for backend, orphan in _orphans(set(), NullProgress()):   # no state: a backend may find it (by label)
            if orphan == lab:
                backend.teardown_orphan(lab, progress)
                return
        raise
    _teardown(get_backend(state.backend), state, progress)


def _orphans(known: set[str], progress: Progress) -> list[tuple[Backend, str]]:
    out = []
    for name in registry.names():
        try:
            backend = get_backend(name)
        except (ImportError, OrchestratorError):      # a backend whose library is not installed has no labs
            continue
        out += [(backend, lab) for lab in backend.orphan_labs(known, progress)]
    return out


def teardown_all(progress: Progress | None = None) -> list[str]:
    """Every lab with state, then every lab a backend finds without state (containerlab's `destroy --all`)."""
    progress = progress or NullProgress()
    done, errors = [], []
    for lab in list_labs():
        try:
            teardown(lab, progress)
            done.append(lab)
        except OrchestratorError as exc:
            errors.append(f"{lab}: {exc}")
    for backend, lab in _orphans(set(done) | {e.split(":")[0] for e in errors}, progress):
        try:
            backend.teardown_orphan(lab, progress)
            done.append(lab)
        except OrchestratorError as exc:
            errors.append(f"{lab}: {exc}")
    if errors:
        raise OrchestratorError("teardown --all left labs behind:\n" + "\n".join(errors))
    return done


def addresses(state: LabState, plan: NetworkPlan) -> dict[str, str]:
    """Each node's address: the plan's, or what the backend learned instead (the lab state's `realised`; hosts:
    each member's real address)."""
    real = (state.backend_data or {}).get("realised", {}).get("addresses", {})
    return {n.name: real.get(n.name, n.address) for n in plan.nodes}


def status(lab: str) -> dict:
    state = load_state(lab)
    plan = state.load_plan()
    backend = get_backend(state.backend)
    health = backend.health(state)
    stats = backend.shaper_stats(state) if not health else None
    per_dir = (stats or {}).get("queues", {})
    real = addresses(state, plan)
    links = []
    for lk in plan.links:
        entry = {"id": lk.id, "a": lk.parent, "b": lk.child}
        for direction, planned in (("down", lk.down), ("up", lk.up)):
            live = state.link_overrides.get(f"{lk.id}/{direction}")
            d = planned if live is None else (DirParams() if live == "cut" else DirParams.from_json(live))
            entry[direction] = {
                "rate_kbit": d.rate_bps / 1000 if d.rate_bps else None,
                "delay_ms": d.delay_s * 1000, "jitter_ms": d.jitter_s * 1000, "loss": d.loss,
                "queue": d.queue_pkts, "cut": live == "cut",
            }
            counters = per_dir.get(f"{lk.id}/{direction}")
            if counters is not None:
                entry[direction]["counters"] = {k: counters.get(k) for k in (
                    "packets", "accepted", "lost", "overflowed", "cut_dropped", "max_queue", "queue", "hold_error")}
        links.append(entry)
    return {
        "lab": state.lab, "backend": state.backend, "status": state.status, "shaper": state.shaper,
        "experiment": state.experiment, "plan_digest": state.plan_digest, "created_at": state.created_at,
        "dilation": state.dilation, "cgroups": len(state.cgroups),
        "capabilities": state.capabilities, "warnings": state.warnings, "health": health,
        "nodes": [{"name": n.name, "role": n.role, "address": real[n.name], "parent": n.parent}
                  for n in plan.nodes],
        "links": links,
        "parameters": shaping_parameters(plan, state.shaper) if state.shaper else None,
        "shaper_totals": {k: v for k, v in (stats or {}).items() if k not in ("queues", "kernel")} or None,
        "multicast": mcast_status(state, plan),
    }


def _healthy_lab(lab: str):
    """(state, plan, popen in a node) of a running lab that its backend finds healthy; OrchestratorError if not."""
    state = load_state(lab)
    plan = state.load_plan()
    backend = get_backend(state.backend)
    problems = backend.health(state)
    if problems:
        raise OrchestratorError(f"lab {lab} is not healthy: {'; '.join(problems)}")
    return state, plan, lambda node, argv, **kw: backend.popen(state, node, argv, **kw)


def probe_group(lab: str, group: str, count: int = 100, size: int = 100, sender: str | None = None,
                capture: bool = True) -> dict:
    """The multicast check of one group on a running lab (see orchestrator.mcast.probe)."""
    from orchestrator.mcast.probe import probe_group as run_probe

    state, plan, popen = _healthy_lab(lab)
    return run_probe(plan, popen, group, count=count, size=size, sender=sender, capture=capture,
                     dilation=state.dilation)


def probe_network(lab: str, links: int = 4, paths: int = 2, count: int = 10, seed: int = 0,
                  rate: bool = True) -> dict:
    """The fidelity probe on a running lab (see orchestrator.fidelity.probe)."""
    from orchestrator import fidelity

    state, plan, popen = _healthy_lab(lab)
    underlay = get_backend(state.backend).underlay_rtts(state, plan)
    return fidelity.probe(plan, state.shaper, popen, links=links, paths=paths, count=count, seed=seed, rate=rate,
                          parameters=shaping_parameters(plan, state.shaper), dilation=state.dilation,
                          underlay_ms=underlay)
