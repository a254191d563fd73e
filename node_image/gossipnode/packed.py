"""Packed members: N members in one process and one asyncio loop (`python -m gossipnode --configs a.json b.json`).

Each member is a `NodeRuntime` of its own config: its own sockets (opened inside its config's `netns`), event log,
seed and control socket. Nothing the protocol or the analysis sees changes; what changes is CPU scheduling (the
members of a process share one thread: one member's long callback delays its process-mates' packets and timers,
where separate processes would run on another core or be time-sliced by the kernel).

Faults act per member through its control socket, where a process of its own gets signals:
  {"cmd": "crash"}                  SIGKILL: sockets closed at once without a goodbye, timers gone, no further
                                    event (the control socket stays: it answers `restart`, and refuses the rest)
  {"cmd": "pause", "duration_s": d} SIGSTOP (then SIGCONT after d seconds if given; virtual seconds of the
                                    member's clock, d x dilation real): the member reads nothing (its socket
                                    buffers fill) and no timer fires; its process-mates run on
  {"cmd": "resume"}                 SIGCONT: timers that came due fire late and skip, as after SIGSTOP
  {"cmd": "restart"}                a fresh NodeRuntime from the member's config (a running member is crashed
                                    first), like the orchestrator starting a new process
Every other request (state, start, stop, workload, protocol commands) goes to the member's runtime. While
paused the member answers only `state` (with "paused": true), `resume`, `crash` and `stop` (a stopped process
would answer nothing at all; the host must answer `resume`). A crashed member refuses everything but `restart`
and `stop` (which releases it: the process ends when no member is running, paused or crashed).

A member's exception never takes down the others: it is printed (one line on stderr) and the member counts as
failed.
"""
from __future__ import annotations

import asyncio
import json
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import control
from .config import NodeConfig
from .runtime import NodeRuntime

RUNNING, PAUSED, CRASHED, STOPPED, FAILED = "running", "paused", "crashed", "stopped", "failed"


class PackedMember:
    """One member of a packed process: its config, its current runtime and its control endpoint."""

    def __init__(self, host: PackedHost, cfg: NodeConfig, sock: socket.socket | None = None) -> None:
        self.host = host
        self.cfg = cfg
        # the runtime gets no control path: the member's control socket is served here, so that it outlives a
        # crash (restart) and answers `resume` while the member is paused
        self.runtime_cfg = cfg.model_copy(update={"control": None})
        self._sock = sock                        # tests: a pre-bound UDP socket for the first incarnation only
        self.runtime: NodeRuntime | None = None
        self.task: asyncio.Task[str] | None = None
        self.state = STOPPED
        self.reason = ""
        self.incarnations = 0
        self._resume_handle: asyncio.TimerHandle | None = None
        self.clock = cfg.clock.make()            # a pause's duration_s is virtual, as the runtime's times
        self._server: asyncio.AbstractServer | None = None

    @property
    def name(self) -> str:
        return self.cfg.name

    async def serve_control(self) -> None:
        if self.cfg.control is not None:
            self._server = await control.serve(self.cfg.control, self.on_control)

    async def close_control(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
            assert self.cfg.control is not None
            self.cfg.control.unlink(missing_ok=True)

    def start(self) -> None:
        """A new incarnation: a fresh runtime from the config (its event log continues the same file)."""
        sock, self._sock = self._sock, None
        self.incarnations += 1
        try:
            runtime = NodeRuntime(self.runtime_cfg, sock)
        except Exception as exc:  # noqa: BLE001 - one member's failure must not end its process-mates
            self._failed(exc, sock)
            return
        self.runtime, self.state, self.reason = runtime, RUNNING, ""
        self.task = asyncio.ensure_future(self._run(runtime, sock))

    def _failed(self, exc: Exception, sock: socket.socket | None) -> None:
        self.state, self.reason = FAILED, f"{exc.__class__.__name__}: {exc}"
        print(f"gossipnode: {self.name}: cannot run: {self.reason}", file=sys.stderr)
        if sock is not None:
            sock.close()
        self.host.changed()

    async def _run(self, runtime: NodeRuntime, sock: socket.socket | None) -> str:
        try:
            reason = await runtime.run()
        except Exception as exc:  # noqa: BLE001 - one member's failure must not end its process-mates
            if self.runtime is runtime:
                self._failed(exc, sock)
            return f"{exc.__class__.__name__}: {exc}"
        if self.runtime is runtime and self.state != CRASHED:      # not superseded by a restart
            self.state, self.reason = STOPPED, reason
            self.host.changed()
        return reason

    # ---- faults ----------------------------------------------------------------------------------------------

    def crash(self) -> None:
        if self.state not in (RUNNING, PAUSED):
            return
        self._cancel_resume()
        self.state, self.reason = CRASHED, "crash"
        assert self.runtime is not None
        self.runtime.crash()

    def pause(self, duration_s: float | None) -> None:
        """`duration_s`: virtual seconds (None: until `resume`)."""
        assert self.runtime is not None
        self._cancel_resume()
        self.runtime.pause()
        self.state = PAUSED
        if duration_s is not None:
            self._resume_handle = asyncio.get_running_loop().call_later(self.clock.real_s(duration_s), self.resume)

    def resume(self) -> None:
        self._cancel_resume()
        if self.state != PAUSED or self.runtime is None:
            return
        self.state = RUNNING
        self.runtime.resume()

    def stop(self, reason: str) -> None:
        self._cancel_resume()
        if self.state in (RUNNING, PAUSED) and self.runtime is not None:
            self.runtime.stop(reason)
        elif self.state == CRASHED:
            self.state = STOPPED                 # released: nothing will restart it
            self.host.changed()

    def _cancel_resume(self) -> None:
        if self._resume_handle is not None:
            self._resume_handle.cancel()
            self._resume_handle = None

    # ---- control ---------------------------------------------------------------------------------------------

    def on_control(self, req: dict[str, Any]) -> tuple[dict[str, Any], Callable[[], None] | None]:
        cmd = req.get("cmd")
        if cmd == "crash":
            if self.state not in (RUNNING, PAUSED):
                return {"ok": False, "error": f"member {self.name} is {self.state}"}, None
            self.crash()                     # before the reply: once it is answered, the member is gone
            return {"ok": True}, None
        if cmd == "restart":
            if self.state in (RUNNING, PAUSED):
                self.crash()
            # no common start comes again: the new incarnation runs the protocol at once (a process the
            # orchestrator restarts does the same: NodeDriver.run_at_once); it is the member's next incarnation
            self.runtime_cfg = self.runtime_cfg.model_copy(update={"wait_for_start": False,
                                                                   "incarnation": self.runtime_cfg.incarnation + 1})
            self.start()
            if self.state == FAILED:
                return {"ok": False, "error": f"member {self.name}: {self.reason}"}, None
            return {"ok": True, "incarnation": self.incarnations}, None
        if cmd == "pause":
            duration = req.get("duration_s")
            if duration is not None and (not isinstance(duration, (int, float)) or duration <= 0):
                return {"ok": False, "error": "pause duration_s must be a positive number of (virtual) seconds"}, None
            if self.state not in (RUNNING, PAUSED):
                return {"ok": False, "error": f"member {self.name} is {self.state}"}, None
            self.pause(duration)
            return {"ok": True}, None
        if cmd == "resume":
            if self.state != PAUSED:
                return {"ok": False, "error": f"member {self.name} is {self.state}, not paused"}, None
            self.resume()
            return {"ok": True}, None
        if cmd == "stop" and self.state == CRASHED:
            return {"ok": True}, lambda: self.stop("control")
        if self.state in (CRASHED, STOPPED, FAILED) or self.runtime is None:
            return {"ok": False, "error": f"member {self.name} is {self.state} (restart starts it again)"}, None
        if self.state == PAUSED and cmd not in ("state", "stop"):
            return {"ok": False, "error": f"member {self.name} is paused (resume first)"}, None
        reply, then = self.runtime._on_control(req)
        if cmd == "state" and reply.get("ok"):
            reply["state"]["paused"] = self.state == PAUSED
            reply["state"]["incarnation"] = self.incarnations
        return reply, then


class PackedHost:
    """Runs members in the current event loop until every member has stopped (or failed), or `stop_all`."""

    def __init__(self, cfgs: list[NodeConfig], socks: list[socket.socket] | None = None) -> None:
        check_packable(cfgs)
        socks_: list[socket.socket | None] = list(socks) if socks is not None else [None] * len(cfgs)
        self.members = [PackedMember(self, cfg, sock) for cfg, sock in zip(cfgs, socks_, strict=True)]
        self.by_name = {m.name: m for m in self.members}
        self._changed: asyncio.Event | None = None

    def changed(self) -> None:
        if self._changed is not None:
            self._changed.set()

    def done(self) -> bool:
        return all(m.state in (STOPPED, FAILED) for m in self.members)

    def stop_all(self, reason: str) -> None:
        for m in self.members:
            m.stop(reason)

    async def run(self, handle_signals: bool = False) -> dict[str, str]:
        """Run every member; returns {member name: stop reason, or the error that kept it from running}."""
        loop = asyncio.get_running_loop()
        self._changed = asyncio.Event()
        if handle_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.stop_all, f"signal {sig.name}")
        try:
            for m in self.members:
                try:
                    await m.serve_control()
                except OSError as exc:
                    m.state, m.reason = FAILED, f"control socket: {exc}"
                    print(f"gossipnode: {m.name}: cannot run: {m.reason}", file=sys.stderr)
                    continue
                m.start()
            while not self.done():
                self._changed.clear()
                await self._changed.wait()
        finally:
            self.stop_all("host stopped")
            pending = [m.task for m in self.members if m.task is not None and not m.task.done()]
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
            for m in self.members:
                await m.close_control()
            if handle_signals:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(sig)
        return {m.name: m.reason for m in self.members}


def check_packable(cfgs: list[NodeConfig]) -> None:
    """ValueError if two members of one process would share a file or socket that must be their own."""
    if not cfgs:
        raise ValueError("no member configs")
    for what, values in (("name", [c.name for c in cfgs]),
                         ("event_log", [str(c.event_log) for c in cfgs]),
                         ("control", [str(c.control) for c in cfgs if c.control is not None]),
                         ("listen address in one namespace", [f"{c.netns}|{c.listen}" for c in cfgs])):
        seen = set()
        for v in values:
            if v in seen:
                raise ValueError(f"two packed members share a {what}: {v}")
            seen.add(v)


def read_manifest(path: Path) -> list[Path]:
    """A manifest lists member configs: a JSON list of paths, or one path per line ('#' comments); relative
    paths are relative to the manifest's directory. ValueError naming the file if it cannot be read."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ValueError(f"{path}: {exc}") from None
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            entries = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: {exc}") from None
        if not all(isinstance(e, str) for e in entries):
            raise ValueError(f"{path}: a JSON manifest is a list of config paths")
    else:
        entries = [line.split("#", 1)[0].strip() for line in text.splitlines()]
        entries = [e for e in entries if e]
    if not entries:
        raise ValueError(f"{path}: lists no member configs")
    return [p if p.is_absolute() else path.parent / p for p in map(Path, entries)]
