"""The node driver of the backends whose nodes this machine runs (Mininet's namespaces, Docker's containers): a
node is a process started in its namespace (`Backend.popen`), reached on its control socket; captures are
tcpdump processes; tc statistics are read in every node at the end. Docker's driver changes where the node runs
(orchestrator/backends/docker.py)."""
from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from orchestrator import procstat
from orchestrator.backends.base import NodeDriver, StopReport
from orchestrator.backends.budgets import LocalBudgets
from orchestrator.errors import OrchestratorError
from orchestrator.rundir import tail


@dataclass
class Capture:
    node: str
    ifname: str
    file: Path
    proc: subprocess.Popen
    dropped: int | None = None
    captured: int | None = None


def tcpdump_counts(text: str) -> tuple[int | None, int | None]:
    """(captured, dropped by kernel) from tcpdump's closing lines."""
    cap = re.search(r"(\d+) packets? captured", text or "")
    drop = re.search(r"(\d+) packets? dropped by kernel", text or "")
    return (int(cap.group(1)) if cap else None), (int(drop.group(1)) if drop else None)


def capture_targets(plan, mode: str) -> list[tuple[str, str, list[str]]]:
    """(node, interface, filter) of every capture of `capture.interfaces: mode`. Pure."""
    if mode == "none":
        return []
    if mode == "access":
        # One capture per member on all its interfaces, filtered to its own traffic: every packet the member
        # sends or receives appears once, forwarded traffic of interior members does not.
        targets = [(m.name, "any", ["host", m.address]) for m in plan.members]
        if plan.groups:
            # Group packets it receives, once: inbound on the tree link they arrive on (the copy the kernel then
            # loops back through mc0 is never seen by a capture; copies it forwards are outbound).
            targets = [(n, i, f + ["or", "(", "dst", "net", "224.0.0.0/4", "and", "inbound", ")"])
                       for n, i, f in targets]
        return targets
    out: list[tuple[str, str, list[str]]] = []
    for lk in plan.links:
        out += [(lk.parent, lk.parent_if, []), (lk.child, lk.child_if, [])]
    return out


class LocalDriver(NodeDriver):
    _cpu_start: tuple[float, dict[int, float]] | None = None     # (monotonic, CPU s per pid) at the common start

    def __init__(self, backend, ctx):
        super().__init__(backend, ctx)
        self.nodes: dict[str, subprocess.Popen] = {}
        self.captures: list[Capture] = []
        self.budgets = LocalBudgets(ctx)            # nodes.cpu: a cgroup per member process (budgets.py)

    # -- where the node runs (Docker overrides)
    def start_process(self, name: str):
        """Start the node's process; a `subprocess.Popen`-like handle (poll, wait, send_signal, terminate, kill)."""
        run_dir = self.ctx.run.path
        log = open(run_dir / "logs" / f"{name}.log", "ab")
        try:
            return self.backend.popen(self.ctx.state, name, [sys.executable, "-m", "gossipnode", "--config",
                                                             str(run_dir / "configs" / f"{name}.json")],
                                      stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        finally:
            log.close()

    def collect_node_files(self, name: str) -> None:
        """Copy what the node wrote elsewhere into the run directory, after it stopped."""

    def _here(self, node: str) -> bool:
        """Whether `node` is on this machine (all of them, but for one machine's part of a lab over several)."""
        part = getattr(self.backend, "part", None)
        return part is None or node in part.nodes

    # -- nodes
    def start_nodes(self, names: list[str]) -> dict[str, dict]:
        for name in names:
            self.nodes[name] = proc = self.start_process(name)
            if isinstance(proc, subprocess.Popen):        # a process of this machine: its budget is a cgroup
                self.budgets.attach(name, 1, proc.pid)
        return {n: {"pid": self.nodes[n].pid} for n in names}

    def _local_pids(self) -> list[int]:
        return [p.pid for p in self.nodes.values() if isinstance(p, subprocess.Popen) and p.poll() is None]

    def mark_start(self) -> None:
        self._cpu_start = (time.monotonic(), procstat.cpu_seconds(self._local_pids()))
        self.budgets.mark_start()

    def _request(self, name: str, req: dict, timeout: float = 5.0) -> dict:
        from gossipnode import control

        return control.request(self.configs[name]["control"], req, timeout=timeout)

    READY_WHAT = "nodes"            # what the progress line and the errors of await_ready count

    def _exited(self, name: str) -> str | None:
        """Why `name` can no longer come up (its process ended), or None."""
        proc = self.nodes[name]
        if proc.poll() is None:
            return None
        return (f"node {name} exited with status {proc.returncode} before the start: "
                f"{tail(self.ctx.run.path / 'logs' / f'{name}.log')}")

    def _cannot_run(self, name: str, exc: Exception) -> str | None:
        """Why `name`, whose control socket answered `exc`, will never run, or None (not up yet)."""
        return None

    def await_ready(self, names: list[str], timeout_s: float, stall_s: float = 30.0) -> None:
        """Wait until every node answers on its control socket. Fails after `timeout_s` only if no node came up in
        the last `stall_s` either: on a loaded machine 200 interpreters starting take long, but keep coming up."""
        from gossipnode import control

        what, progress = self.READY_WHAT, self.ctx.progress
        progress.start(f"{what} ready", len(names))
        pending = list(names)
        start = last_up = time.monotonic()
        deadline = start + timeout_s
        while pending:
            for name in list(pending):
                gone = self._exited(name)
                if gone:
                    raise OrchestratorError(gone)
                try:
                    self._request(name, {"cmd": "state"}, timeout=2.0)
                except control.ControlError as exc:
                    why = self._cannot_run(name, exc)
                    if why:
                        raise OrchestratorError(why) from None
                    continue
                pending.remove(name)
                last_up = time.monotonic()
                progress.advance(f"{what} ready")
            if pending:
                now = time.monotonic()
                if now > deadline and now - last_up > stall_s:
                    raise OrchestratorError(f"{len(pending)} {what} did not come up within {now - start:.0f} s, none "
                                            f"in the last {stall_s:.0f} s (e.g. {pending[0]}): the machine may be "
                                            f"overloaded")
                time.sleep(0.1)

    def start_protocol(self, names: list[str], at_unix: float) -> None:
        """Every member's `start` request, many under way at once: one after another, 200 members' requests (a
        round trip each through busy processes) could still be going out after the common start, and a member
        whose request arrives late starts late (the start-lag judge)."""
        req = {"cmd": "start", "at": at_unix}
        if len(names) <= 1:
            for name in names:
                self._request(name, req)
            return
        with ThreadPoolExecutor(max_workers=min(32, len(names))) as pool:
            list(pool.map(lambda n: self._request(n, req), names))

    def signal(self, names: list[str], sig: int, wait: bool = False) -> dict[str, dict]:
        """Signal every node first, then (`wait`) reap them: a crash of many members happens at once (waiting
        for each before signalling the next spread a 60 % crash of 50 members over 1.5-47 s under load)."""
        procs = [p for p in (self.nodes.get(n) for n in names) if p is not None]
        for p in procs:
            if p.poll() is None:
                p.send_signal(sig)
        if wait:
            for p in procs:
                p.wait()
        return {}

    def control_senders(self, request: dict) -> dict[str, dict]:
        for name, cfg in self.configs.items():
            p = self.nodes.get(name)
            if cfg["senders"] and cfg["id"] in cfg["senders"] and p is not None and p.poll() is None:
                self._request(name, request)
        return {}

    def control_members(self, request: dict, skip: tuple[str, ...] = ()) -> dict[str, dict]:
        from gossipnode import control

        failed = {}
        for name in self.configs:
            p = self.nodes.get(name) if name not in skip else None
            if p is not None and p.poll() is None:
                try:
                    self._request(name, request)
                except control.ControlError as exc:
                    failed[name] = {"ok": False, "error": str(exc)}
        return failed

    def alive(self) -> int:
        return sum(1 for p in self.nodes.values() if p.poll() is None)

    # -- captures
    def start_captures(self) -> int:
        exp, run_dir = self.ctx.exp, self.ctx.run.path
        snap = str(exp.capture.snaplen)
        for node, ifname, filt in capture_targets(self.ctx.plan, exp.capture.interfaces):
            if not self._here(node):
                continue
            f = run_dir / "pcaps" / f"{node}-{ifname}.pcap"
            proc = self.backend.popen(
                self.ctx.state, node, ["tcpdump", "-i", ifname, "-s", snap, "-U", "-Z", "root", "-n", "-w", str(f),
                                       *filt],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
            self.captures.append(Capture(node, ifname, f, proc))
        # tcpdump creates its file once it is listening: wait for all of them (bounded).
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not all(c.file.exists() or c.proc.poll() is not None
                                                      for c in self.captures):
            time.sleep(0.05)
        dead = [c for c in self.captures if c.proc.poll() is not None]
        if dead:
            raise OrchestratorError(f"tcpdump on {dead[0].node}:{dead[0].ifname} failed: "
                                    f"{dead[0].proc.stderr.read().strip()}")
        return len(self.captures)

    def _stop_captures(self) -> None:
        for c in self.captures:
            if c.proc.poll() is None:
                c.proc.send_signal(signal.SIGINT)     # SIGINT: tcpdump flushes and closes the file
        for c in self.captures:
            try:
                _, errs = c.proc.communicate(timeout=20)
            except subprocess.TimeoutExpired:
                c.proc.kill()
                _, errs = c.proc.communicate()
            c.captured, c.dropped = tcpdump_counts(errs)

    def _stop_nodes(self) -> None:
        for p in self.nodes.values():
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)         # a paused node cannot handle SIGTERM
                p.terminate()
        deadline = time.monotonic() + 10
        for p in self.nodes.values():
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def _collect_tc(self) -> None:
        run_dir = self.ctx.run.path
        for n in (n for n in self.ctx.plan.nodes if self._here(n.name)):
            r = self.backend.popen(self.ctx.state, n.name, ["tc", "-s", "-j", "qdisc", "show"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            out, _ = r.communicate(timeout=30)
            try:
                data = json.loads(out or "[]")
            except json.JSONDecodeError:
                data = {"error": "unparseable tc output", "raw": out}
            (run_dir / "tc" / f"{n.name}.json").write_text(json.dumps(data, indent=1))
        stats = self.backend.shaper_stats(self.ctx.state)
        if stats is not None:
            (run_dir / "tc" / "delayline.json").write_text(json.dumps(stats, indent=1))

    def _member_cpu(self) -> dict | None:
        """The CPU the running member processes used so far (orchestrator/procstat.py), and from the common start
        on (`run_*`); only processes of this machine (`subprocess.Popen`: Docker's handles are `docker exec`
        sessions, whose node runs elsewhere)."""
        pids = self._local_pids()
        if not pids:
            return None
        out = procstat.processes_cpu(pids)
        if out is not None and self._cpu_start is not None:
            t, before = self._cpu_start
            out.update(procstat.over_run(before, procstat.cpu_seconds(pids), time.monotonic() - t) or {})
        return out

    def stop(self) -> StopReport:
        run = self.ctx.run
        member_cpu = self._member_cpu()
        cpu_budget = self.budgets.report()
        self._stop_nodes()
        try:
            self.budgets.remove()
        except OrchestratorError as exc:          # teardown removes what is left (the lab state records it)
            run.log(f"removing the CPU budget cgroups failed: {exc}")
        for name in self.configs:
            try:
                self.collect_node_files(name)
            except Exception as exc:  # noqa: BLE001 - collection must not hide the run's own outcome
                run.log(f"collecting {name}'s files failed: {exc}")
        self._stop_captures()
        self.reconnect_all()           # after the captures: a dead member's kernel answering is not in them
        try:
            self._collect_tc()
        except Exception as exc:  # noqa: BLE001 - collection must not hide the run's own outcome
            run.log(f"tc stats collection failed: {exc}")
        return StopReport(captures=[{"node": c.node, "ifname": c.ifname, "file": str(c.file.relative_to(run.path)),
                                     "captured": c.captured, "dropped_by_kernel": c.dropped}
                                    for c in self.captures],
                          manifest={k: v for k, v in (("member_cpu", member_cpu), ("cpu_budget", cpu_budget)) if v})
