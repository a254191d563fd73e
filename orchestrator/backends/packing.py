"""Packed members, the orchestrator's side (issue #21, docs/packing.md): N members in one node process.

The experiment's `nodes: {packing: process | auto | N}` is decided here (`decide`, pure: the machine's available
memory and cores are arguments), the members are split into packs (`assign_packs`, pure), and `PackedDriver`
runs them on the namespace backend: each pack is one `python -m gossipnode --manifest packs/pack-K.txt` started
in its first member's namespace (so the teardown's kill of a namespace's processes takes it down), every
member's sockets opened in the member's own namespace (the config's `netns`), its own event log, seed and control
socket (node_image/gossipnode/packed.py). Faults act per member through the member's control socket where a
process of its own gets a signal: crash -> {"cmd": "crash"}, pause -> {"cmd": "pause"}, resume ->
{"cmd": "resume"}, a START of a member that ran before -> {"cmd": "restart"}; joiners never started form new
packs. The backends whose nodes are not processes of this machine in named namespaces (docker, hosts) refuse a
decision to pack (`refuse`, called by their `check_run`).
"""
from __future__ import annotations

import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from orchestrator.backends.local import LocalDriver
from orchestrator.errors import OrchestratorError, SpecError
from orchestrator.packs import (MEMBER_PROCESS_BYTES, PACKS_PER_CPU, PackingDecision, decide,  # noqa: F401
                                decide_here, mem_available)
from orchestrator.rundir import tail

STOP_WAIT_S = 15.0                     # packs exit on SIGTERM within this, else they are killed


def refuse(backend: str, exp, members: int) -> None:
    """SpecError (exit 2, before anything is built) if the experiment's packing decides packs: for the backends
    whose nodes are not processes of this machine in named namespaces."""
    d = decide_here(exp, members)
    if d.packed:
        raise SpecError(f"nodes.packing: the {backend} backend runs a process per member and cannot pack members "
                        f"({d.reason}); use `nodes: {{packing: process}}` or the mininet backend")


def assign_packs(members: list[str], per: int) -> list[list[str]]:
    """Consecutive members in packs of `per` (the last may be smaller). Pure."""
    if per < 1:
        raise ValueError("members per pack must be >= 1")
    return [members[i:i + per] for i in range(0, len(members), per)]


# --- the driver --------------------------------------------------------------------------------------------------

RUNNING, PAUSED, CRASHED = "running", "paused", "crashed"


@dataclass
class Pack:
    index: int
    members: list[str]
    proc: subprocess.Popen
    started: float = field(default_factory=time.monotonic)


class PackedDriver(LocalDriver):
    """The namespace backend's driver with packed members (a subclass of its process-per-member driver: captures,
    tc statistics and collection are the same). `self.nodes` maps a member to its pack's process."""

    def __init__(self, backend, ctx, decision: PackingDecision):
        super().__init__(backend, ctx)
        self.decision = decision
        self.packs: list[Pack] = []
        self.pack_of: dict[str, Pack] = {}
        self.status: dict[str, str] = {}

    # -- configs: every member's sockets in its own namespace
    def configure(self, configs: dict[str, dict]) -> dict[str, dict]:
        from orchestrator.nodeconfig import with_netns
        from orchestrator.state import ns_name

        lab = self.ctx.state.lab
        return super().configure(with_netns(configs, lambda member: ns_name(lab, member)))

    # -- packs
    def _start_pack(self, members: list[str]) -> Pack:
        run_dir = self.ctx.run.path
        k = len(self.packs)
        (run_dir / "packs").mkdir(exist_ok=True)
        listing = run_dir / "packs" / f"pack-{k}.txt"
        listing.write_text("".join(f"{run_dir / 'configs' / f'{m}.json'}\n" for m in members))
        log = open(run_dir / "logs" / f"pack-{k}.log", "ab")
        try:
            proc = self.backend.popen(self.ctx.state, members[0],
                                      [sys.executable, "-m", "gossipnode", "--manifest", str(listing)],
                                      stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        finally:
            log.close()
        pack = Pack(k, list(members), proc)
        self.packs.append(pack)
        self.budgets.attach(f"pack-{k}", len(members), proc.pid)     # the pack shares its members' budgets
        for m in members:
            self.pack_of[m], self.nodes[m], self.status[m] = pack, proc, RUNNING
        return pack

    def start_nodes(self, names: list[str]) -> dict[str, dict]:
        """New members (the first ones, joiners) start in new packs; a member that ran before restarts in its
        pack ({"cmd": "restart"}), or in a new pack if its pack's process is gone."""
        replies: dict[str, dict] = {}
        new: list[str] = []
        for n in names:
            pack = self.pack_of.get(n)
            if pack is None or pack.proc.poll() is not None:
                new.append(n)
                continue
            replies[n] = self._call(n, {"cmd": "restart"})
            if replies[n]["ok"]:
                self.status[n] = RUNNING
        chunks = assign_packs(new, self.decision.members_per_process)
        progress = self.ctx.progress
        if chunks:
            progress.start("packs", len(chunks))
        for chunk in chunks:
            pack = self._start_pack(chunk)
            replies.update({m: {"pid": pack.proc.pid} for m in chunk})
            progress.advance("packs")
        if chunks:
            progress.note(f"{len(new)} members in {len(chunks)} {'new ' if len(self.packs) > len(chunks) else ''}"
                          f"processes of up to {self.decision.members_per_process}")
        return replies

    READY_WHAT = "members"

    def _exited(self, name: str) -> str | None:
        pack = self.pack_of[name]
        if pack.proc.poll() is None:
            return None
        return (f"the process of pack {pack.index} ({name} and {len(pack.members) - 1} others) exited with status "
                f"{pack.proc.returncode} before the start: "
                f"{tail(self.ctx.run.path / 'logs' / f'pack-{pack.index}.log')}")

    def _cannot_run(self, name: str, exc: Exception) -> str | None:
        if " is failed" not in str(exc):          # not up yet; "failed": the member could not open its sockets
            return None
        pack = self.pack_of[name]
        log = self.ctx.run.path / "logs" / f"pack-{pack.index}.log"
        return f"member {name} (pack {pack.index}) cannot run: {tail(log)}"

    # -- faults, per member, through its control socket
    def _call(self, name: str, req: dict) -> dict:
        from gossipnode import control

        t = time.monotonic()
        pid = self.nodes[name].pid if name in self.nodes else None
        try:
            reply = self._request(name, req)
        except control.ControlError as exc:
            return {"ok": False, "error": str(exc), "rtt_s": time.monotonic() - t, "pid": pid}
        out = {"ok": True, "rtt_s": time.monotonic() - t, "pid": pid}
        if "incarnation" in reply:
            out["incarnation"] = reply["incarnation"]
        return out

    def _each(self, names: list[str], req: dict, when: tuple[str, ...], then: str) -> dict[str, dict]:
        """`req` to every member of `names` in state `when`, all requests under way at once: one after the other,
        a crash of 400 members of busy packs took 33-55 s (a round trip each through a pack's busy event loop),
        not the "at once" a massive failure means."""
        targets = []
        for n in names:
            pack = self.pack_of.get(n)
            if self.status.get(n) not in when or pack is None or pack.proc.poll() is not None:
                continue                   # like a signal to a process that is gone: nothing to do
            targets.append(n)
        if len(targets) <= 1:
            replies = {n: self._call(n, req) for n in targets}
        else:
            with ThreadPoolExecutor(max_workers=min(64, len(targets))) as pool:
                replies = dict(zip(targets, pool.map(lambda n: self._call(n, req), targets)))
        for n, r in replies.items():
            if r["ok"]:
                self.status[n] = then
        return replies

    def kill(self, names: list[str]) -> dict[str, dict]:
        return self._each(names, {"cmd": "crash"}, (RUNNING, PAUSED), CRASHED)

    def pause(self, names: list[str]) -> dict[str, dict]:
        return self._each(names, {"cmd": "pause"}, (RUNNING,), PAUSED)

    def resume(self, names: list[str]) -> dict[str, dict]:
        return self._each(names, {"cmd": "resume"}, (PAUSED,), RUNNING)

    def signal(self, names: list[str], sig: int, wait: bool = False) -> dict[str, dict]:
        """A signal's meaning, per member (the process is shared)."""
        if sig in (signal.SIGKILL, signal.SIGTERM):
            return self.kill(names)
        if sig == signal.SIGSTOP:
            return self.pause(names)
        if sig == signal.SIGCONT:
            return self.resume(names)
        raise OrchestratorError(f"packed members take no signal {signal.Signals(sig).name}")

    def control_senders(self, request: dict) -> dict[str, dict]:
        for name, cfg in self.configs.items():
            pack = self.pack_of.get(name)
            if (cfg["senders"] and cfg["id"] in cfg["senders"] and self.status.get(name) == RUNNING
                    and pack is not None and pack.proc.poll() is None):
                self._request(name, request)
        return {}

    def control_members(self, request: dict, skip: tuple[str, ...] = ()) -> dict[str, dict]:
        targets = [n for n in self.configs if n not in skip and self.status.get(n) in (RUNNING, PAUSED)
                   and (pack := self.pack_of.get(n)) is not None and pack.proc.poll() is None]
        return {n: r for n in targets if not (r := self._call(n, request))["ok"]}

    def alive(self) -> int:
        """Members running or paused (a paused process is alive too) in a running pack."""
        return sum(1 for m, s in self.status.items() if s != CRASHED and self.pack_of[m].proc.poll() is None)

    # -- stop: every member stops (SIGTERM to a pack stops each of its members, as SIGTERM stops a process of
    #    its own: node_stopped "signal SIGTERM"), then the packs end; one that does not is killed
    def _stop_nodes(self) -> None:
        for pack in self.packs:
            if pack.proc.poll() is None:
                pack.proc.terminate()
        deadline = time.monotonic() + STOP_WAIT_S
        for pack in self.packs:
            try:
                pack.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.ctx.run.log(f"pack {pack.index} did not stop within {STOP_WAIT_S:.0f} s of SIGTERM: killed")
                pack.proc.kill()
                pack.proc.wait()

    def stop(self):
        report = super().stop()
        report.manifest["packing"] = {**self.decision.manifest(), "processes": len(self.packs),
                                      "exit_status": {f"pack-{p.index}": p.proc.returncode for p in self.packs}}
        return report
