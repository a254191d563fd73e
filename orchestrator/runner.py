"""`orchestrator run`: deploy the protocol node on every member, capture, apply the schedule, collect.

run directory (docs/architecture.md §6):
    manifest.json  plan.json  fidelity.json  orchestrator.log
    configs/<node>.json  events/<node>.jsonl  events/orchestrator.jsonl  logs/<node>.log
    pcaps/<node>-any.pcap  tc/<node>.json

The nodes' configuration files come from `orchestrator.nodeconfig` (pure); the
`Runner` drives a backend and never prints (progress goes through a `Progress`).
"""
from __future__ import annotations

import json
import os
import platform
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from orchestrator import fidelity as fid
from orchestrator import lab as labmod
from orchestrator import signals
from orchestrator.backends.base import Backend, NullProgress, Progress, get_backend
from orchestrator.errors import DelayLineDied, OrchestratorError, SpecError
from orchestrator.nodeconfig import node_configs
from orchestrator.plan import NetworkPlan
from orchestrator.schedule import Op, Timeline, expand, parse_schedule
from orchestrator.shaping.params import DirParams
from orchestrator.spec import Experiment
from orchestrator.state import LabState

START_TIMEOUT_S = 30.0       # nodes must answer on their control socket within this + START_PER_NODE_S each
START_PER_NODE_S = 0.5
START_MARGIN_S = 0.5         # the common start is this far after the last node answered


def _tail(path: Path, lines: int = 5) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:]) or "(empty log)"
    except OSError:
        return "(no log)"


# --- the run ----------------------------------------------------------------------------------------------------

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


@dataclass
class Capture:
    node: str
    ifname: str
    file: Path
    proc: subprocess.Popen
    dropped: int | None = None
    captured: int | None = None


@dataclass
class Runner:
    exp: Experiment
    plan: NetworkPlan
    timeline: Timeline
    state: LabState
    backend: Backend
    run_dir: Path
    ctl_dir: Path
    configs: dict[str, dict]
    progress: Progress = field(default_factory=NullProgress)
    clock: callable = time.monotonic   # type: ignore[valid-type]
    nodes: dict[str, subprocess.Popen] = field(default_factory=dict)
    captures: list[Capture] = field(default_factory=list)
    applied: list[dict] = field(default_factory=list)
    stopped_reason: str = "completed"

    # -- logging
    def log(self, msg: str) -> None:
        with open(self.run_dir / "orchestrator.log", "a") as f:
            f.write(f"{datetime.now(timezone.utc).isoformat()} {msg}\n")

    def record(self, event: dict) -> None:
        with open(self.run_dir / "events" / "orchestrator.jsonl", "a") as f:
            f.write(json.dumps({"ts": time.time(), "node": "orchestrator", **event}) + "\n")

    # -- processes
    def start_node(self, name: str) -> None:
        self.nodes[name] = self.backend.start_node(self.state, name, self.configs[name], self.run_dir)

    def await_ready(self, names: list[str], timeout_s: float) -> None:
        """Wait until every node answers on its control socket; a node that exits or never answers fails the
        run with its log's tail."""
        from gossipnode import control

        self.progress.start("nodes ready", len(names))
        pending = list(names)
        deadline = time.monotonic() + timeout_s
        while pending:
            for name in list(pending):
                proc = self.nodes[name]
                if proc.poll() is not None:
                    raise OrchestratorError(f"node {name} exited with status {proc.returncode} before the start: "
                                            f"{_tail(self.run_dir / 'logs' / f'{name}.log')}")
                try:
                    control.request(self.configs[name]["control"], {"cmd": "state"}, timeout=2.0)
                except control.ControlError:
                    continue
                pending.remove(name)
                self.progress.advance("nodes ready")
            if pending:
                if time.monotonic() > deadline:
                    raise OrchestratorError(f"{len(pending)} nodes did not come up within {timeout_s:.0f} s "
                                            f"(e.g. {pending[0]}): the machine may be overloaded")
                time.sleep(0.1)
        self.log(f"{len(names)} nodes ready")

    def start_protocol(self, names: list[str], at_unix: float) -> None:
        """Tell the nodes to start the protocol at the same wall-clock time."""
        from gossipnode import control

        for name in names:
            control.request(self.configs[name]["control"], {"cmd": "start", "at": at_unix})

    def signal_node(self, name: str, sig: int) -> None:
        p = self.nodes.get(name)
        if p is not None and p.poll() is None:
            p.send_signal(sig)

    def alive(self) -> int:
        return sum(1 for p in self.nodes.values() if p.poll() is None)

    def start_captures(self) -> None:
        mode = self.exp.capture.interfaces
        if mode == "none":
            return
        snap = str(self.exp.capture.snaplen)
        targets: list[tuple[str, str, list[str]]] = []
        if mode == "access":
            # One capture per member on all its interfaces, filtered to its own traffic: every packet the
            # member sends or receives appears once, forwarded traffic of interior members does not.
            targets = [(m.name, "any", ["host", m.address]) for m in self.plan.members]
            if self.plan.groups:
                # Group packets it receives, once: inbound on the tree link they arrive on (the copy the kernel
                # then loops back through mc0 is never seen by a capture; copies it forwards are outbound).
                targets = [(n, i, f + ["or", "(", "dst", "net", "224.0.0.0/4", "and", "inbound", ")"])
                           for n, i, f in targets]
        else:
            for lk in self.plan.links:
                targets += [(lk.parent, lk.parent_if, []), (lk.child, lk.child_if, [])]
        for node, ifname, filt in targets:
            f = self.run_dir / "pcaps" / f"{node}-{ifname}.pcap"
            proc = self.backend.popen(
                self.state, node, ["tcpdump", "-i", ifname, "-s", snap, "-U", "-Z", "root", "-n", "-w", str(f),
                                   *filt],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
            self.captures.append(Capture(node, ifname, f, proc))
        # tcpdump creates its file once it is listening: wait for all of them (bounded).
        deadline = self.clock() + 30
        while self.clock() < deadline and not all(c.file.exists() or c.proc.poll() is not None
                                                   for c in self.captures):
            time.sleep(0.05)
        dead = [c for c in self.captures if c.proc.poll() is not None]
        if dead:
            raise OrchestratorError(f"tcpdump on {dead[0].node}:{dead[0].ifname} failed: "
                                    f"{dead[0].proc.stderr.read().strip()}")

    def stop_captures(self) -> None:
        for c in self.captures:
            if c.proc.poll() is None:
                c.proc.send_signal(signal.SIGINT)     # SIGINT: tcpdump flushes and closes the file
        for c in self.captures:
            try:
                _, errs = c.proc.communicate(timeout=20)
            except subprocess.TimeoutExpired:
                c.proc.kill()
                _, errs = c.proc.communicate()
            m = re.search(r"(\d+) packets? dropped by kernel", errs or "")
            c.dropped = int(m.group(1)) if m else None
            m = re.search(r"(\d+) packets? captured", errs or "")
            c.captured = int(m.group(1)) if m else None

    def stop_nodes(self) -> None:
        for name, p in self.nodes.items():
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)         # a paused node cannot handle SIGTERM
                p.terminate()
        deadline = self.clock() + 10
        for p in self.nodes.values():
            try:
                p.wait(timeout=max(0.1, deadline - self.clock()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    # -- schedule
    def apply(self, op: Op) -> None:
        if op.kind == "crash":
            for n in op.targets:
                self.signal_node(n, signal.SIGKILL)
                if n in self.nodes:
                    self.nodes[n].wait()
        elif op.kind == "start":
            for n in op.targets:
                self.start_node(n)
        elif op.kind == "stop_signal":
            for n in op.targets:
                self.signal_node(n, signal.SIGSTOP)
        elif op.kind == "cont_signal":
            for n in op.targets:
                self.signal_node(n, signal.SIGCONT)
        elif op.kind in ("link_set", "link_cut", "link_restore"):
            by_id = {lk.id: lk for lk in self.plan.links}
            for lid, direction in op.links:
                planned = getattr(by_id[lid], direction)
                if op.kind == "link_cut":
                    params = None
                elif op.kind == "link_restore":
                    params = planned
                else:
                    current = self.state.link_overrides.get(f"{lid}/{direction}")
                    base = planned if current in (None, "cut") else DirParams.from_json(current)
                    params = op.params.apply(base)
                self.backend.set_link(self.state, self.plan, lid, direction, params)
        elif op.kind in ("workload_start", "workload_stop"):
            from gossipnode import control

            for name, cfg in self.configs.items():
                if cfg["senders"] and cfg["id"] in cfg["senders"] and self.nodes.get(name) \
                        and self.nodes[name].poll() is None:
                    control.request(cfg["control"], {"cmd": "workload", "op": op.kind.split("_")[1]})
        else:
            raise OrchestratorError(f"unknown operation {op.kind}")

    def execute(self, t0: float, duration_s: float) -> None:
        ops = list(self.timeline.ops)
        self.progress.start("experiment (s)", int(duration_s))
        shown = 0
        last_check = -1.0
        while True:
            now = self.clock() - t0
            while ops and ops[0].t <= now:
                op = ops.pop(0)
                before = self.clock() - t0
                self.apply(op)
                entry = {"event": "action_applied", "index": op.index,
                         "action": self.timeline.actions[op.index].action, "op": op.kind,
                         "planned_s": op.t, "actual_s": before, "lag_ms": (before - op.t) * 1000,
                         "targets": list(op.targets), "links": [f"{a}/{b}" for a, b in op.links]}
                self.applied.append(entry)
                self.record(entry)
                if op.kind not in ("stop_signal", "cont_signal") or len(self.timeline.ops) < 200:
                    self.progress.note(f"t={before:6.1f}s {entry['action']:<9} {op.kind:<12} "
                                       f"{','.join(op.targets or [f'{a}/{b}' for a, b in op.links])[:60]} "
                                       f"(lag {entry['lag_ms']:.1f} ms, {self.alive()} nodes alive)")
            if int(now) > shown:
                self.progress.advance("experiment (s)", min(int(now), int(duration_s)) - shown)
                shown = min(int(now), int(duration_s))
            if now - last_check >= 1.0:          # the shaper's health, once a second
                self.backend.check(self.state)
                last_check = now
            if now >= duration_s:
                return
            nxt = ops[0].t if ops else duration_s
            time.sleep(max(0.0, min(nxt - now, 0.2, duration_s - now)))

    # -- collection
    def collect_tc(self) -> None:
        for n in self.plan.nodes:
            r = self.backend.popen(self.state, n.name, ["tc", "-s", "-j", "qdisc", "show"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            out, _ = r.communicate(timeout=30)
            try:
                data = json.loads(out or "[]")
            except json.JSONDecodeError:
                data = {"error": "unparseable tc output", "raw": out}
            (self.run_dir / "tc" / f"{n.name}.json").write_text(json.dumps(data, indent=1))
        stats = self.backend.shaper_stats(self.state)
        if stats is not None:
            (self.run_dir / "tc" / "delayline.json").write_text(json.dumps(stats, indent=1))


def _versions() -> dict:
    import importlib.metadata as md

    out = {"python": platform.python_version(), "kernel": platform.release()}
    for pkg in ("gossip-testbed", "pydantic", "mininet", "pyroute2"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    return out


def check_out_dir(out: Path) -> None:
    """`--out` must be (or be creatable inside) a writable directory: checked before anything is built."""
    out = Path(out)
    probe = out
    while not probe.exists() and probe.parent != probe:
        if probe.is_symlink():
            raise SpecError(f"--out {out}: {probe} is a dangling symbolic link")
        probe = probe.parent
    if not probe.is_dir():
        raise SpecError(f"--out {out}: {probe} is not a directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise SpecError(f"--out {out}: {probe} is not writable")


def run(experiment_path: str | Path, opts: RunOptions, progress: Progress | None = None,
        variables: dict | None = None) -> Path:
    """Ctrl-C, SIGTERM and SIGHUP all stop the run the same way (orchestrator.signals): stop, collect, manifest
    `interrupted (<signal>)`, teardown."""
    progress = progress or NullProgress()
    check_out_dir(opts.out)
    with signals.interrupts():
        if opts.backend == "hosts":            # real hosts: Ansible + paramiko (orchestrator/hosts/run.py)
            from orchestrator.hosts.run import run_hosts

            return run_hosts(experiment_path, opts, progress, variables)
        return _run(experiment_path, opts, progress, variables)


def _note(progress: Progress, message: str) -> None:
    """A progress note during cleanup: a terminal that hung up (SIGHUP) must not stop the cleanup."""
    try:
        progress.note(message)
    except (OSError, ValueError):
        pass


def _run(experiment_path: str | Path, opts: RunOptions, progress: Progress, variables: dict | None) -> Path:
    # 1. Everything that can be checked is checked before the network is built: the whole experiment file,
    #    its schedule against the plan with the seed of this run included (orchestrator.spec).
    if opts.lab:
        from orchestrator.spec import load_experiment
        from orchestrator.state import load_state

        exp = load_experiment(experiment_path, variables, opts.seed)
        state = load_state(opts.lab)
        plan = state.load_plan()
        lab_name, built = opts.lab, False
        from orchestrator.plan import build_plan

        if build_plan(exp).digest() != state.plan_digest:
            raise SpecError(f"lab {opts.lab!r} was built from a different plan than {experiment_path}")
    else:
        prep = labmod.prepare(experiment_path, opts.name, variables, opts.seed)
        exp, plan, lab_name, built = prep.experiment, prep.plan, prep.lab, True
    timeline = expand(parse_schedule(exp.schedule), plan, exp.duration_s, exp.seed)
    run_id = f"{lab_name}-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}"
    run_dir = (opts.out / run_id).resolve()
    ctl_dir = Path(labmod.CTL_ROOT) / f"orch-ctl-{run_id}"      # teardown of the lab removes it too
    configs = node_configs(exp, plan, run_dir, ctl_dir)
    if shutil.which("tcpdump") is None and exp.capture.interfaces != "none":
        raise OrchestratorError("tcpdump is not installed (run `make setup`)")

    # 2. The run directory, then the network.
    try:
        for sub in ("configs", "events", "logs", "pcaps", "tc"):
            (run_dir / sub).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecError(f"--out {opts.out}: cannot create the run directory: {exc.strerror}") from None
    ctl_dir.mkdir(parents=True, exist_ok=True)
    if opts.on_run_dir is not None:
        opts.on_run_dir(run_dir)
    (run_dir / "plan.json").write_text(plan.to_json())
    for name, cfg in configs.items():
        cfg["wait_for_start"] = name not in timeline.joiners     # joiners run the protocol as soon as they start
        (run_dir / "configs" / f"{name}.json").write_text(json.dumps(cfg, indent=1))
    manifest = {
        "run_id": run_id, "experiment_file": str(experiment_path), "spec": exp.model_dump(mode="json"),
        "seed": exp.seed, "backend": opts.backend, "plan_digest": plan.digest(), "lab": lab_name,
        "versions": _versions(), "started_at": time.time(), "status": "starting",
    }

    def write_manifest() -> None:
        tmp = run_dir / "manifest.json.tmp"
        tmp.write_text(json.dumps(manifest, indent=1, default=str))
        os.replace(tmp, run_dir / "manifest.json")

    write_manifest()
    if built:
        try:
            state = labmod.up(prep, opts.backend, opts.shaper, opts.strict, str(experiment_path), progress)
        except BaseException as exc:      # lab.up removed what it built; the manifest must not say "starting"
            with signals.shielded():
                manifest.update(status=(f"interrupted ({signals.describe(exc)})" if isinstance(exc, KeyboardInterrupt)
                                        else f"failed: {exc}"), ended_at=time.time())
                write_manifest()
                shutil.rmtree(ctl_dir, ignore_errors=True)
            raise
    # The lab knows the run using it, so `teardown` after a killed orchestrator can finish the manifest.
    state.run = {"dir": str(run_dir), "pid": os.getpid(), "pid_start": labmod.process_start(os.getpid())}
    state.save()
    backend = get_backend(state.backend)
    manifest.update(shaper=state.shaper, capabilities=state.capabilities, shaping_warnings=state.warnings)
    if state.backend_data.get("image"):
        manifest["versions"]["node_image"] = f"{state.backend_data['image']} {state.backend_data.get('image_id', '')}"
    runner = Runner(exp, plan, timeline, state, backend, run_dir, ctl_dir, configs, progress)
    try:
        # The backend may run the node elsewhere (a container): its paths, as the node will see them.
        configs = {name: backend.node_config(state, name, cfg) for name, cfg in configs.items()}
        runner.configs = configs
        for name, cfg in configs.items():
            (run_dir / "configs" / f"{name}.json").write_text(json.dumps(cfg, indent=1))
        runner.log(f"run {run_id}: lab {lab_name} ({'built' if built else 'reused'}), shaper {state.shaper}")
        # 3. Fidelity probe, captures, nodes, schedule.
        progress.note("fidelity probe ...")
        fsum = fid.probe(plan, state.shaper, lambda node, argv, **kw: backend.popen(state, node, argv, **kw),
                         links=opts.probe_links, paths=opts.probe_paths, seed=exp.seed,
                         parameters=labmod.shaping_parameters(plan, state.shaper))
        (run_dir / "fidelity.json").write_text(json.dumps(fsum, indent=1))
        manifest["fidelity"] = {k: fsum[k] for k in ("max_abs_error_ms", "max_rel_error", "sent", "received",
                                                     "expected_lost")}
        manifest["fidelity"]["rate_error"] = (fsum["rate"] or {}).get("error")
        manifest["shaping_parameters"] = fsum["parameters"]
        runner.start_captures()
        runner.log(f"{len(runner.captures)} captures running")
        first = [m.name for m in plan.members if m.name not in timeline.joiners]
        for name in first:
            runner.start_node(name)
        # The first members wait for a common start (their configs say wait_for_start): on a busy machine
        # 200 Python processes take tens of seconds to come up, and the protocol must not start staggered.
        runner.await_ready(first, timeout_s=START_TIMEOUT_S + START_PER_NODE_S * len(first))
        start_unix = time.time() + START_MARGIN_S
        t0 = runner.clock() + START_MARGIN_S
        runner.start_protocol(first, start_unix)
        manifest.update(status="running", t0_unix=start_unix)
        write_manifest()
        runner.record({"event": "run_started", "members": first, "duration_s": exp.duration_s})
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
        # 4. Stop cleanly, collect what there is, tear down. Runs on success, error and every interruption
        #    alike; further signals during it are recorded, not raised (it must finish).
        with signals.shielded() as late:
            _note(progress, f"stopping ({runner.stopped_reason}) and collecting ...")
            runner.log(f"stopping: {runner.stopped_reason}")
            runner.stop_nodes()
            for name in runner.configs:
                try:
                    backend.collect_node_files(state, name, run_dir)
                except Exception as exc:  # noqa: BLE001 - collection must not hide the run's own outcome
                    runner.log(f"collecting {name}'s files failed: {exc}")
            runner.stop_captures()
            try:
                runner.collect_tc()
            except Exception as exc:  # noqa: BLE001 - collection must not hide the run's own outcome
                runner.log(f"tc stats collection failed: {exc}")
            runner.record({"event": "run_stopped", "reason": runner.stopped_reason})
            lags = sorted(a["lag_ms"] for a in runner.applied)
            manifest.update(
                status=runner.stopped_reason, ended_at=time.time(),
                schedule={"actions": len(timeline.actions), "applied_ops": len(runner.applied),
                          "lag_ms_median": lags[len(lags) // 2] if lags else None,
                          "lag_ms_max": lags[-1] if lags else None},
                captures=[{"node": c.node, "ifname": c.ifname, "file": str(c.file.relative_to(run_dir)),
                           "captured": c.captured, "dropped_by_kernel": c.dropped} for c in runner.captures],
            )
            write_manifest()
            shutil.rmtree(ctl_dir, ignore_errors=True)
            if built and not opts.keep:
                _note(progress, "tearing down ...")
                labmod.teardown(lab_name)
            else:
                state.run = None
                state.save()
            if late:
                runner.log(f"signals during the cleanup (ignored until it finished): {late}")
    return run_dir
