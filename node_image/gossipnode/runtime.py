"""The node's asyncio runtime: a UDP socket, the core's timers, the control endpoint and the event log.

Everything protocol-specific is in the sans-IO core (`gsgc.GsgcNode`); this module moves bytes and time.
Time is wall-clock unix seconds (`time.time()`), so event timestamps of different nodes on one machine, or on
NTP-synchronised hosts, are comparable.
"""
from __future__ import annotations

import asyncio
import os
import signal
import socket
import time
import traceback
from collections import Counter
from collections.abc import Callable
from typing import Any

from . import control, wire
from .config import NodeConfig, parse_addr
from .core import BadMessage, Output
from .eventlog import EventLog
from .gsgc import GsgcNode

LOG_FLUSH_S = 0.5
RCVBUF_BYTES = 1 << 21


class RateLimiter:
    """At most `per_s` log records per second; tells how many were suppressed since the last one let through."""

    def __init__(self, per_s: int) -> None:
        self.per_s = per_s
        self.window = 0
        self.used = 0
        self.suppressed = 0

    def allow(self, now: float) -> int | None:
        """None: suppress this record; else the number suppressed before it."""
        if int(now) != self.window:
            self.window, self.used = int(now), 0
        if self.used >= self.per_s:
            self.suppressed += 1
            return None
        self.used += 1
        suppressed, self.suppressed = self.suppressed, 0
        return suppressed


class _Udp(asyncio.DatagramProtocol):
    def __init__(self, node: NodeRuntime) -> None:
        self.node = node

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.node.on_packet(data, addr)

    def error_received(self, exc: Exception) -> None:
        self.node.on_send_error(exc)


class NodeRuntime:
    def __init__(self, cfg: NodeConfig, sock: socket.socket | None = None) -> None:
        """`sock`: an already bound UDP socket to use instead of binding `cfg.listen` (tests)."""
        self.cfg = cfg
        self._sock = sock
        self.addr_of = {m.id: parse_addr(m.addr) for m in cfg.members}
        self.core: GsgcNode | None = None
        self.counters: Counter[str] = Counter()
        self._log = EventLog(cfg.event_log, cfg.name)
        self._bad_log = RateLimiter(20)
        self._error_log = RateLimiter(5)
        self._transport: asyncio.DatagramTransport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._start_handle: asyncio.TimerHandle | None = None
        self._stopped = asyncio.Event()
        self.stop_reason = ""

    # ---- lifecycle -------------------------------------------------------------------------------------------

    async def run(self, handle_signals: bool = False) -> str:
        """Run until stopped (SIGTERM/SIGINT when `handle_signals`, control `stop`, or `duration_s`).
        Returns the stop reason."""
        loop = asyncio.get_running_loop()
        sock = self._sock or self._bind()
        self._transport, _ = await loop.create_datagram_endpoint(lambda: _Udp(self), sock=sock)
        ctl_path = self.cfg.control
        server = await control.serve(ctl_path, self._on_control) if ctl_path else None
        if handle_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.stop, f"signal {sig.name}")
        p = self.cfg.gsgc
        self._event("node_started", id=self.cfg.id, pid=os.getpid(), listen=self.cfg.listen, n=self.cfg.n,
                    senders=self.cfg.senders, subgroup=p.subgroup, step_s=p.step_s, fail_k=p.fail_k,
                    local_groups=p.local_groups is not None, wait_for_start=self.cfg.wait_for_start)
        flusher = asyncio.ensure_future(self._flush_periodically())
        if not self.cfg.wait_for_start:
            self.start_protocol()
        try:
            await self._stopped.wait()
        finally:
            for handle in (self._timer, self._start_handle):
                if handle is not None:
                    handle.cancel()
            flusher.cancel()
            self._transport.close()
            if server is not None and ctl_path is not None:
                server.close()
                await server.wait_closed()
                ctl_path.unlink(missing_ok=True)
            self._event("node_stopped", reason=self.stop_reason, runtime=dict(sorted(self.counters.items())),
                        protocol=self.core.snapshot() if self.core else None)
            self._log.close()
        return self.stop_reason

    def _bind(self) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF_BYTES)
        sock.bind(parse_addr(self.cfg.listen))
        return sock

    def start_protocol(self) -> None:
        if self.core is not None:
            return
        loop = asyncio.get_running_loop()
        self.core = GsgcNode(self.cfg, time.time())
        self._emit(self.core.startup)
        self._schedule()
        if self.cfg.duration_s is not None:
            loop.call_later(self.cfg.duration_s, self.stop, "duration")

    def stop(self, reason: str) -> None:
        if not self._stopped.is_set():
            self.stop_reason = reason
            self._stopped.set()

    async def _flush_periodically(self) -> None:
        while True:
            await asyncio.sleep(LOG_FLUSH_S)
            self._log.flush()

    # ---- timers ----------------------------------------------------------------------------------------------

    def _schedule(self) -> None:
        assert self.core is not None
        delay = max(0.0, self.core.next_wakeup() - time.time())
        self._timer = asyncio.get_running_loop().call_later(delay, self._on_timer)

    def _reschedule(self) -> None:
        """The core's next wakeup may have moved earlier (a control command changed a timer)."""
        if self._timer is not None:
            self._timer.cancel()
        self._schedule()

    def _on_timer(self) -> None:
        assert self.core is not None
        self._emit(self.core.tick(time.time()))
        self._schedule()

    # ---- packets ---------------------------------------------------------------------------------------------

    def on_packet(self, data: bytes, addr: tuple[str, int]) -> None:
        self.counters["packets_in"] += 1
        self.counters["bytes_in"] += len(data)
        if self.core is None:
            self.counters["packets_before_start"] += 1
            return
        now = time.time()
        try:
            msg = wire.decode(data)
            if self.addr_of.get(msg.sender) != addr:
                raise BadMessage(f"claims sender {msg.sender} but comes from {addr[0]}:{addr[1]}")
            out = self.core.receive(msg, now)
        except (wire.DecodeError, BadMessage) as exc:
            self._bad_packet(now, data, addr, str(exc))
            return
        except Exception as exc:  # noqa: BLE001 - one packet must not end a run; the event names the bug
            self.counters["internal_errors"] += 1
            suppressed = self._error_log.allow(now)
            if suppressed is not None:
                self._log.write(now, "error", {"where": "receive", "error": repr(exc), "suppressed": suppressed,
                                               "traceback": traceback.format_exc(limit=4)})
            return
        self._emit(out)

    def _bad_packet(self, now: float, data: bytes, addr: tuple[str, int], reason: str) -> None:
        self.counters["bad_packets"] += 1
        suppressed = self._bad_log.allow(now)
        if suppressed is not None:
            self._log.write(now, "bad_packet", {"src": f"{addr[0]}:{addr[1]}", "size": len(data), "reason": reason,
                                                "head": data[:16].hex(), "suppressed": suppressed})

    def on_send_error(self, exc: Exception) -> None:
        self.counters["send_errors"] += 1
        now = time.time()
        suppressed = self._error_log.allow(now)
        if suppressed is not None:
            self._log.write(now, "send_error", {"error": repr(exc), "suppressed": suppressed})

    def _emit(self, out: Output) -> None:
        for ts, event, fields in out.events:
            self._log.write(ts, event, fields)
        if not out.send:
            return
        assert self._transport is not None
        encoded: dict[int, bytes] = {}  # one encoding per message, however many destinations
        for dest, msg in out.send:
            data = encoded.get(id(msg))
            if data is None:
                data = encoded[id(msg)] = wire.encode(msg)
            self._transport.sendto(data, self.addr_of[dest])
            self.counters["packets_out"] += 1
            self.counters["bytes_out"] += len(data)

    def _event(self, event: str, **fields: Any) -> None:
        self._log.write(time.time(), event, fields)

    # ---- control ---------------------------------------------------------------------------------------------

    def _on_control(self, req: dict[str, Any]) -> tuple[dict[str, Any], Callable[[], None] | None]:
        cmd = req.get("cmd")
        if cmd == "state":
            return {"ok": True, "state": {
                "node": self.cfg.name,
                "id": self.cfg.id,
                "started": self.core is not None,
                "runtime": dict(sorted(self.counters.items())),
                "protocol": self.core.snapshot() if self.core else None,
            }}, None
        if cmd == "stop":
            return {"ok": True}, lambda: self.stop("control")
        if cmd == "start":
            return self._control_start(req.get("at")), None
        if cmd == "workload":
            return self._control_workload(req.get("op")), None
        return {"ok": False, "error": f"unknown command {cmd!r} (state, start, stop, workload)"}, None

    def _control_start(self, at: Any) -> dict[str, Any]:
        if self.core is not None or self._start_handle is not None:
            return {"ok": False, "error": "already started"}
        if at is not None and not isinstance(at, (int, float)):
            return {"ok": False, "error": "`at` must be a unix time in seconds"}
        delay = 0.0 if at is None else max(0.0, at - time.time())
        self._start_handle = asyncio.get_running_loop().call_later(delay, self.start_protocol)
        return {"ok": True}

    def _control_workload(self, op: Any) -> dict[str, Any]:
        if op not in ("start", "stop"):
            return {"ok": False, "error": "workload needs op: start or stop"}
        if self.core is None:
            return {"ok": False, "error": "the protocol has not started"}
        try:
            out = self.core.set_workload(op == "start", time.time())
        except ValueError as exc:
            return {"ok": False, "error": str(exc)}
        self._emit(out)
        self._reschedule()
        return {"ok": True}
