"""One machine's side of a run over several machines (`orchestrator machine-agent`, started by the controller over
SSH, docs/machines.md): the machine's members run under the Mininet backend's own drivers (LocalDriver: processes in
the part's namespaces, captures, CPU-budget cgroups; PackedDriver when the experiment's `nodes.packing`, decided
here for this machine's members, memory and cores, packs them), driven by the controller one request at a time.

Reads one JSON request per line on stdin, writes one JSON reply per line on stdout:

    {"op": "time"}                                       -> {"ok": true, "t": <this machine's clock>}
    {"op": "open", "spec", "clock", "run_dir", "ctl_dir", "first", "configs"}
                                                         -> {"ok": true, "packing": {...}}   (the run's driver,
                                                            its configs; how this machine runs its members)
    {"op": "call", "method": "start_nodes", "args": [...]} -> {"ok": true, "result": ...}
    {"op": "bye"}                                        -> exits

Errors come back as {"ok": false, "error": ..., "kind": "spec"|"orchestrator"|"other"}; the agent never dies on a
bad request. When stdin closes (the controller ended the session, or the SSH connection was cut) it stops what it
started (nodes, captures, cgroups) and exits: nothing of a run outlives its controller's session. The lab itself
stays until `teardown`.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import time
from dataclasses import asdict
from pathlib import Path

from orchestrator.errors import OrchestratorError, SpecError

# What the controller may call on the machine's driver (orchestrator.backends.base.NodeDriver's interface).
METHODS = frozenset({"start_captures", "start_nodes", "await_ready", "start_protocol", "mark_start", "signal",
                     "crash", "kill", "isolate", "pause", "resume", "reconnect", "run_at_once", "control_senders",
                     "control_members", "set_link", "multicast_routes", "alive", "check", "stop"})


class Agent:
    def __init__(self, lab: str, part: Path):
        from orchestrator.shard import Part
        from orchestrator.state import load_state

        self.state = load_state(lab)
        self.plan = self.state.load_plan()
        self.part = Part.from_json(json.loads(part.read_text()))
        self.driver = None
        self.ctl_dir: Path | None = None
        self.stopped = False

    def open(self, req: dict) -> dict:
        from orchestrator.backends.base import NullProgress, RunContext
        from orchestrator.backends.local import LocalDriver
        from orchestrator.backends.mininet import MininetBackend
        from orchestrator.backends.packing import PackedDriver, decide_here
        from orchestrator.rundir import RunDir
        from orchestrator.spec import Experiment
        from gossipnode.vclock import VirtualClock

        if self.driver is not None:
            raise SpecError("this agent has a run already")
        exp = Experiment.model_validate(req["spec"])          # the controller's experiment, as it resolved it
        clock = VirtualClock(**req["clock"])
        run = RunDir(Path(req["run_dir"]), clock=clock)
        self.ctl_dir = Path(req["ctl_dir"])
        self.ctl_dir.mkdir(parents=True, exist_ok=True)
        unknown = sorted(set(req["configs"]) - self.part.nodes)
        if unknown:
            raise SpecError(f"member(s) {unknown[:5]} are not on this machine")
        ctx = RunContext(exp, self.plan, self.state, run, self.ctl_dir, [m for m in req["first"]
                                                                          if m in req["configs"]],
                         NullProgress(), clock)
        decision = decide_here(exp, len(req["configs"]))       # this machine's members, memory and cores
        backend = MininetBackend(part=self.part)
        self.driver = PackedDriver(backend, ctx, decision) if decision.packed else LocalDriver(backend, ctx)
        run.write_configs(self.driver.configure(req["configs"]))
        run.log(f"machine agent (pid {os.getpid()}): {len(req['configs'])} member(s) of lab {self.state.lab}, "
                f"{len(self.part.nodes)} node(s), {len(self.part.tunnels)} tunnel end(s); {decision.processes} "
                f"node process(es) ({decision.reason})")
        return decision.manifest()

    def call(self, method: str, args: list):
        if method not in METHODS:
            raise SpecError(f"unknown method {method!r}")
        if self.driver is None:
            raise SpecError("no run is open")
        if method == "stop":
            if self.stopped:
                return {"captures": [], "manifest": {}}
            self.stopped = True
            return asdict(self.driver.stop())
        if method == "set_link" and len(args) == 3 and args[2] is not None:
            from orchestrator.shaping.params import DirParams

            args[2] = DirParams.from_json(args[2])
        result = getattr(self.driver, method)(*args)
        return sorted(result) if isinstance(result, set) else result

    def handle(self, req: dict) -> dict:
        op = req.get("op")
        try:
            if op == "time":
                return {"ok": True, "t": time.time()}
            if op == "open":
                return {"ok": True, "packing": self.open(req)}
            if op == "call":
                return {"ok": True, "result": self.call(req["method"], list(req.get("args") or []))}
            return {"ok": False, "error": f"unknown op {op!r}", "kind": "spec"}
        except SpecError as exc:
            return {"ok": False, "error": str(exc), "kind": "spec"}
        except OrchestratorError as exc:
            return {"ok": False, "error": str(exc), "kind": "orchestrator"}
        except Exception as exc:  # noqa: BLE001 - the agent answers every request
            return {"ok": False, "error": f"{type(exc).__name__}: {exc}", "kind": "other"}

    def close(self) -> None:
        """The session ended: stop what the run started here (the controller's `stop` may never come)."""
        if self.driver is not None and not self.stopped:
            self.stopped = True
            try:
                self.driver.stop()
            except Exception as exc:  # noqa: BLE001 - still exit; the run directory says why
                self.driver.ctx.run.log(f"machine agent: stopping after the session ended failed: {exc}")
        if self.ctl_dir is not None:
            shutil.rmtree(self.ctl_dir, ignore_errors=True)


def serve(agent: Agent, inp=None, out=None) -> None:
    inp = inp or sys.stdin.buffer
    out = out or sys.stdout
    out.write(json.dumps({"ok": True, "t": time.time()}) + "\n")
    out.flush()
    try:
        for line in inp:
            if not line.strip():
                continue
            try:
                req = json.loads(line)
            except ValueError:
                reply = {"ok": False, "error": "not JSON", "kind": "spec"}
            else:
                if req.get("op") == "bye":
                    break
                reply = agent.handle(req)
            out.write(json.dumps(reply, default=str) + "\n")
            out.flush()
    finally:
        agent.close()
