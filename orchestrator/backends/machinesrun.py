"""The node driver of a lab over several machines (`orchestrator run EXPERIMENT --machines INVENTORY`,
docs/machines.md): the controller's runner, schedule and manifest as on one machine; each machine's members run
under its own agent (orchestrator/backends/machineagent.py: the Mininet backend's LocalDriver on the machine's
part), one persistent SSH session per machine.

    prepare: each machine's agent opened with its members' configs; clock offsets (NTP-style round trips)
    nodes, captures, the schedule's actions: each sent to the machines of the members (or links) it names, at once
    stop: every agent stops its part and the run directory's files are pulled back; clock offsets again

Each machine's clock offset to the controller is recorded per member in manifest.json (`clock_offsets_s`, taken out
by the analysis) and the common start is sent to each machine on its own clock. A run whose offsets drifted, or
could only be measured coarsely, over CLOCK_BOUND_S is flagged in the manifest's warnings.
"""
from __future__ import annotations

import json
import re
import shlex
import shutil
import socket
import sys
import tarfile
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import paramiko

from orchestrator import machines as mach
from orchestrator import runschema as schema
from orchestrator.backends.base import NodeDriver, StopReport
from orchestrator.backends.machinessh import connect
from orchestrator.errors import BackendError, OrchestratorError, SpecError
from orchestrator.hosts import clock
from orchestrator.hosts.hostsfile import Host
from orchestrator.shaping.params import DirParams

CLOCK_BOUND_S = 0.005           # offset uncertainty (rtt/2) or drift over the run above this: the run is flagged
CALL_TIMEOUT_S = 120.0


class AgentLink:
    """The controller's end of one machine's agent session (one request at a time)."""

    def __init__(self, machine, lab: str, part_path: str, default_python: str):
        self.machine, self.name = machine, machine.host.name
        self.lock = threading.Lock()
        tr = machine.client.get_transport()
        tr.set_keepalive(5)
        self.chan = tr.open_session(timeout=10)
        argv = mach.remote_argv(machine.host, ["machine-agent", lab, "--part", part_path], default_python)
        self.chan.exec_command(shlex.join(argv))
        self.rfile = self.chan.makefile("rb")
        self.chan.settimeout(60)
        hello = self._readline("starting the agent")
        if not hello.get("ok"):
            raise BackendError(f"machine {self.name}: the agent did not start: {hello.get('error')}")

    def _readline(self, what: str) -> dict:
        try:
            line = self.rfile.readline()
        except (socket.timeout, OSError, paramiko.SSHException) as exc:
            raise BackendError(f"machine {self.name}: no answer from its agent ({what}): {exc or 'timeout'}") \
                from None
        if not line:
            err = b""
            while self.chan.recv_stderr_ready():
                err += self.chan.recv_stderr(65536)
            tail = err.decode(errors="replace").strip()[-400:]
            raise BackendError(f"machine {self.name}: the SSH session to its agent closed ({what})"
                               + (f": {tail}" if tail else ""))
        return json.loads(line)

    def request(self, req: dict, timeout_s: float = CALL_TIMEOUT_S) -> dict:
        with self.lock:
            try:
                self.chan.settimeout(timeout_s)
                self.chan.sendall(json.dumps(req).encode() + b"\n")
            except (OSError, paramiko.SSHException) as exc:
                raise BackendError(f"machine {self.name}: the SSH session to its agent is gone: {exc}") from None
            return self._readline(req.get("method") or req.get("op"))

    def call(self, method: str, *args, timeout_s: float = CALL_TIMEOUT_S):
        r = self.request({"op": "call", "method": method, "args": list(args)}, timeout_s)
        if not r.get("ok"):
            cls = SpecError if r.get("kind") == "spec" else OrchestratorError
            raise cls(f"machine {self.name}: {r.get('error')}")
        return r.get("result")

    def measure_clock(self, n: int = 15) -> clock.Offset:
        return clock.measure(lambda: self.request({"op": "time"}, 10)["t"], n)

    def close(self) -> None:
        try:
            if not self.chan.closed:
                self.chan.sendall(b'{"op": "bye"}\n')
                self.chan.shutdown_write()
                deadline = time.monotonic() + 30
                while not self.chan.exit_status_ready() and time.monotonic() < deadline:
                    time.sleep(0.05)
        except (OSError, paramiko.SSHException):
            pass
        self.chan.close()


class MachinesDriver(NodeDriver):
    def __init__(self, backend, ctx):
        super().__init__(backend, ctx)
        self.record = backend.load_record(ctx.state) or {}
        self.hosts = {h["name"]: Host(**h) for h in self.record.get("hosts", [])}
        self.owner = {v: s["machine"] for s in (self.record.get("sharding") or {}).get("shards", [])
                      for v in s["nodes"]}
        self.links: dict[str, AgentLink] = {}
        self.machines: dict = {}
        self.offsets: dict[str, clock.Offset] = {}
        self.fields: dict = {}
        self.rtt_s: dict[str, float] = {}        # each machine's last request's round trip
        self.packing: dict[str, dict] = {}      # how each machine's agent runs its members (`nodes.packing`)

    # -- where things are
    def remote_run_dir(self, machine: str) -> str:
        return f"{self.hosts[machine].lab_dir(self.ctx.state.lab)}/runs/{self.ctx.run.path.name}"

    def by_machine(self, names) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for n in names:
            out.setdefault(self.owner[n], []).append(n)
        return out

    def _each(self, method: str, args: dict[str, tuple], timeout_s: float = CALL_TIMEOUT_S) -> dict[str, object]:
        """`method(*args[machine])` on every machine named, at once: {machine: result}; the first error is raised
        once every machine answered."""
        if not args:
            return {}
        results: dict[str, object] = {}
        errors: list[Exception] = []

        def timed(m: str, a: tuple):
            t = time.monotonic()
            r = self.links[m].call(method, *a, timeout_s=timeout_s)
            self.rtt_s[m] = time.monotonic() - t
            return r

        with ThreadPoolExecutor(max_workers=min(16, len(args))) as ex:
            futures = {ex.submit(timed, m, a): m for m, a in args.items()}
            for f, m in futures.items():
                try:
                    results[m] = f.result()
                except Exception as exc:  # noqa: BLE001 - raised below, after every machine answered
                    errors.append(exc)
        if errors:
            raise errors[0]
        return results

    def _all(self, *args) -> dict[str, tuple]:
        return {n: args for n in self.links}

    def _merged(self, method: str, args: dict[str, tuple]) -> dict[str, dict]:
        """The machines' per-node replies as one; a member named in a machine's request also gets that machine's
        round trip (`rtt_s`: the runner records it with the action, and the schedule's summary its median and max:
        how long an action took to reach the machines)."""
        out: dict[str, dict] = {}
        for m, r in self._each(method, args).items():
            out.update(r or {})
            names = args[m][0] if args[m] and isinstance(args[m][0], list) else []
            for n in names:
                out[n] = {**out.get(n, {}), "rtt_s": self.rtt_s.get(m, 0.0), "machine": m}
        return out

    # -- the run
    def configure(self, configs: dict[str, dict]) -> dict[str, dict]:
        out = {}
        for m, cfg in configs.items():
            remote = self.remote_run_dir(self.owner[m])
            out[m] = {**cfg, "event_log": f"{remote}/events/{m}.jsonl"}
        self.configs = out
        return out

    def prepare(self) -> None:
        ctx = self.ctx
        used = sorted({self.owner[m] for m in self.configs}, key=list(self.hosts).index)
        ctx.progress.note(f"opening the agents on {len(used)} machine(s) and measuring clock offsets ...")
        self.machines, problems = connect([self.hosts[n] for n in used], Path(self.record["known_hosts"]),
                                          self.record.get("accept_new_host_keys", False))
        if problems:
            raise BackendError("machines unreachable at the start of the run:\n"
                               + "\n".join(f"  {n}: {why}" for n, why in problems.items()))
        def open_one(name: str) -> tuple[str, AgentLink]:
            part = f"{self.hosts[name].lab_dir(ctx.state.lab)}/part.json"
            link = AgentLink(self.machines[name], ctx.state.lab, part, sys.executable)
            mine = {m: c for m, c in self.configs.items() if self.owner[m] == name}
            r = link.request({"op": "open", "spec": ctx.exp.model_dump(mode="json"), "clock": ctx.clock.to_json(),
                              "run_dir": self.remote_run_dir(name), "ctl_dir": str(ctx.ctl_dir),
                              "first": list(ctx.first), "configs": mine})
            if not r.get("ok"):
                link.close()
                raise BackendError(f"machine {name}: the run could not open there: {r.get('error')}")
            self.packing[name] = r.get("packing") or {}
            return name, link

        with ThreadPoolExecutor(max_workers=min(16, len(used))) as ex:
            futures = [ex.submit(open_one, n) for n in used]
            errors = []
            for f in futures:
                try:
                    n, link = f.result()
                    self.links[n] = link
                except Exception as exc:  # noqa: BLE001 - raised below, once every agent answered
                    errors.append(exc)
        if errors:
            raise errors[0]
        self.offsets = {n: link.measure_clock() for n, link in self.links.items()}
        self.fields["clock"] = {"method": "agent round trips over SSH; offset = machine time - midpoint of the "
                                          "round trip with the smallest RTT",
                                "machines": {n: o.to_json() for n, o in self.offsets.items()}}
        self.fields["clock_offsets_s"] = {m: self.offsets[self.owner[m]].offset_s for m in self.configs}
        self.fields["machines"] = {"shards": {s["machine"]: {"nodes": len(s["nodes"]), "members": s["members"]}
                                              for s in self.record["sharding"]["shards"]},
                                   "cut_links": len(self.record["sharding"]["cut_links"])}
        for n, o in self.offsets.items():
            ctx.run.log(f"clock {n}: offset {o.offset_s * 1000:+.3f} ms, rtt {o.rtt_s * 1000:.3f} ms")
        for n, d in sorted(self.packing.items()):
            ctx.run.log(f"machine {n}: {d.get('processes')} node process(es) ({d.get('reason')})")
        self.fields["packing"] = mach.merge_packing(self.packing)

    def manifest_fields(self) -> dict:
        return dict(self.fields)

    def start_captures(self) -> int:
        return sum(self._each("start_captures", self._all()).values())

    def start_nodes(self, names: list[str]) -> dict[str, dict]:
        return self._merged("start_nodes", {m: (ms,) for m, ms in self.by_machine(names).items()})

    def await_ready(self, names: list[str], timeout_s: float) -> None:
        self.ctx.progress.note(f"waiting for {len(names)} members on {len(self.by_machine(names))} machine(s) ...")
        self._each("await_ready", {m: (ms, timeout_s) for m, ms in self.by_machine(names).items()},
                   timeout_s=timeout_s + 120)

    def start_protocol(self, names: list[str], at_unix: float) -> None:
        """The common start on each machine's own clock (its virtual time runs ahead by offset / dilation)."""
        n = self.ctx.clock.dilation
        self._each("start_protocol", {m: (ms, at_unix + self.offsets[m].offset_s / n)
                                      for m, ms in self.by_machine(names).items()})

    def mark_start(self) -> None:
        self._each("mark_start", self._all())

    def run_at_once(self, names: list[str]) -> list[str]:
        super().run_at_once(names)
        self._each("run_at_once", {m: (ms,) for m, ms in self.by_machine(names).items()})
        return names

    def signal(self, names: list[str], sig: int, wait: bool = False) -> dict[str, dict]:
        return self._merged("signal", {m: (ms, int(sig), wait) for m, ms in self.by_machine(names).items()})

    @classmethod
    def can_isolate(cls, backend) -> bool:
        return True

    def cut_off(self, names: list[str], on: bool) -> dict[str, str]:
        replies = self._merged("isolate", {m: (ms, on) for m, ms in self.by_machine(names).items()})
        return {m: r.get("error", "failed") for m, r in replies.items() if not r.get("ok", True)}

    def control_senders(self, request: dict) -> dict[str, dict]:
        return self._merged("control_senders", self._all(request))

    def control_members(self, request: dict, skip: tuple[str, ...] = ()) -> dict[str, dict]:
        return self._merged("control_members", self._all(request, list(skip)))

    def set_link(self, link_id: str, direction: str, params: DirParams | None) -> dict[str, dict]:
        """On the machine of the link direction's sending side (a cut link's tunnel end is shaped there too)."""
        state, plan = self.ctx.state, self.ctx.plan
        link = next(lk for lk in plan.links if lk.id == link_id)
        sender = link.parent if direction == "down" else link.child
        machine = self.owner[sender]
        t = time.monotonic()
        self.links[machine].call("set_link", link_id, direction, None if params is None else params.to_json())
        rtt = time.monotonic() - t
        state.link_overrides[f"{link_id}/{direction}"] = "cut" if params is None else params.to_json()
        state.save()
        return {f"{link_id}/{direction}": {"rtt_s": rtt, "machine": machine}}

    def multicast_routes(self, changes: dict[str, dict]) -> dict:
        """Each machine's multicast daemon gets the changes of its own nodes' routes (a cut link's tunnel is the
        vif the plan names on both sides)."""
        per = {m: ({n: changes[n] for n in ns},) for m, ns in self.by_machine(changes).items()}
        done = self._each("multicast_routes", per)
        return {k: sum((r or {}).get(k, 0) for r in done.values()) for k in ("nodes", "set", "deleted")}

    def check(self) -> None:
        self._each("check", self._all())

    # -- the end
    def stop(self) -> StopReport:
        run = self.ctx.run
        reports: dict[str, dict] = {}

        def stop_one(name: str):
            link = self.links[name]
            try:
                reports[name] = link.call("stop", timeout_s=600)
            except Exception as exc:  # noqa: BLE001 - one machine's failure must not stop the others' collection
                run.log(f"machine {name}: stopping its part failed: {exc}")
            try:
                end = link.measure_clock()
                self.fields.setdefault("clock_end", {})[name] = end.to_json()
            except Exception as exc:  # noqa: BLE001
                run.log(f"machine {name}: no clock offset at the end: {exc}")
            link.close()
            try:
                if name not in reports:
                    self._after_lost_session(name)
                self._collect(name)
            except Exception as exc:  # noqa: BLE001
                run.log(f"machine {name}: collecting its files failed: {exc}")

        if self.links:
            with ThreadPoolExecutor(max_workers=min(16, len(self.links))) as ex:
                list(ex.map(stop_one, list(self.links)))
        for m in self.machines.values():
            m.close()
        captures = [c for r in reports.values() for c in r.get("captures", [])]
        manifest = {k: v for k, v in (
            ("member_cpu", mach.merge_member_cpu([r["manifest"].get("member_cpu") for r in reports.values()])),
            ("cpu_budget", mach.merge_budgets({n: r["manifest"].get("cpu_budget") for n, r in reports.items()})))
            if v}
        warnings = mach.clock_warnings({n: o.to_json() for n, o in self.offsets.items()},
                                       self.fields.get("clock_end", {}), CLOCK_BOUND_S)
        for w in warnings:
            run.log(f"WARNING: {w}")
        if warnings:
            manifest["warnings"] = list(run.manifest.get("warnings") or []) + warnings
        missing = sorted(set(self.links) - set(reports))
        packs = {n: r["manifest"]["packing"] for n, r in reports.items() if "packing" in r.get("manifest", {})}
        if self.packing:
            manifest["packing"] = mach.merge_packing({**self.packing, **packs})
        manifest["machines"] = {**self.fields.get("machines", {}), "stopped": sorted(reports),
                                "not_stopped": missing, "clock_end": self.fields.get("clock_end", {})}
        return StopReport(captures=captures, manifest=manifest)

    def _after_lost_session(self, name: str, wait_s: float = 60.0) -> None:
        """The session to a machine's agent was lost (or its stop failed): the agent stops what it started once its
        stdin closes. A new connection waits (bounded) until it has, so the files collected are complete."""
        old = self.machines.pop(name, None)
        if old is not None:
            old.close()
        got, problems = connect([self.hosts[name]], Path(self.record["known_hosts"]),
                                self.record.get("accept_new_host_keys", False))
        if problems:
            raise BackendError(problems[name])
        self.machines[name] = m = got[name]
        lab = self.ctx.state.lab
        part = f"{self.hosts[name].lab_dir(lab)}/part.json"
        # "[m]achine": the pattern does not match the shell that runs pgrep (its command line holds the pattern)
        pattern = "[m]achine-agent " + re.escape(f"{lab} --part {part}")
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            rc, _, _ = m.call(["pgrep", "-f", "--", pattern], timeout_s=10)
            if rc == 1:
                self.ctx.run.log(f"machine {name}: reconnected; its agent has stopped")
                return
            time.sleep(0.5)
        self.ctx.run.log(f"machine {name}: its agent still runs {wait_s:.0f} s after its session was lost")

    def _collect(self, name: str) -> None:
        """The machine's run directory (its members' events, logs, pcaps, tc statistics, its log) into this
        one; only its own nodes' files (mach.collected_name)."""
        m, remote = self.machines[name], self.remote_run_dir(name)
        argv = ["tar", "-C", remote, "--ignore-failed-read", "-czf", "-", schema.EVENTS, schema.LOGS, schema.PCAPS,
                schema.TC, schema.LOG]
        if m.host.become:
            argv = ["sudo", "-n", "--", *argv]
        nodes = {v for v, owner in self.owner.items() if owner == name}
        got = 0
        # through a file on disk, not memory: a machine's pcaps can be gigabytes
        with tempfile.TemporaryFile(dir=self.ctx.run.path) as buf:
            rc, _, err = m.call_bytes(argv, timeout_s=600, sink=buf)
            if rc not in (0, 1) or buf.tell() == 0:
                raise BackendError(f"tar exited {rc}: {err.strip()[-300:]}")
            buf.seek(0)
            with tarfile.open(fileobj=buf, mode="r|gz") as tar:        # a stream: one pass, member by member
                for member in tar:
                    target = mach.collected_name(member.name, nodes, name)
                    if target is None or not member.isfile():
                        continue
                    dest = self.ctx.run.path / target
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    with tar.extractfile(member) as src, open(dest, "wb") as out:
                        shutil.copyfileobj(src, out, 1 << 20)
                    got += 1
        self.ctx.run.log(f"collected {got} file(s) from {name}")
