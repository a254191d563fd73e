"""The node's asyncio runtime: the transports, the core's timers, the control endpoint and the event log.

Everything protocol-specific is in the sans-IO core (`protocols/<name>/core.py`, chosen by `protocol.name`
through `protocols.registry`); this module moves bytes and time. Time is virtual unix seconds (`vclock.py`, the
config's `clock`: one virtual second lasts `dilation` real seconds; at the default dilation 1 it is the wall
clock, `time.time()`), so event timestamps of different nodes on one machine, or on NTP-synchronised hosts, are
comparable. The core, the event log and the rate limiters see only the virtual now; every wait that stands for
protocol time (the core's timers, `duration_s`, a control `start`'s `at`, the TCP timeouts) is scaled to real
time. The log's flush interval is real.

Transports (all carry the same packets: the common envelope, then the protocol's header and body):
- UDP unicast on `listen`; a datagram must come from the `addr` of the member it names as sender.
- IP multicast: per configured group a receiving socket bound to (group address, port) and joined on
  `join_ifs`, and a sending socket bound to the member's `source` address, sending on `send_if` with the group's
  TTL. Multicast loopback stays on (kernel multicast routing forwards a member's own packets from their
  looped-back copy); the member's own packets are discarded here. A datagram must come from the IP address of
  the member it names.
- TCP: a listening socket on `listen` (TCP's port space), and one connection per peer pair that both ends send
  on, opened on the first `stream` send to a peer. Frames are the packets themselves (the envelope's length
  delimits them).
  The core hears `up` when a connection is established (connected, or accepted and its first frame named a
  member from that member's IP) and `failed` when it ends without the core having asked: EOF, RST, a timeout
  (TCP_USER_TIMEOUT for unacknowledged data, keepalive for an idle connection across a cut link) or a refused
  or timed-out connect. When both ends connect at once, both send on the connection the lower member id opened;
  the other stays open and is only read from (closing it could lose frames in flight), and ends silently.
Packets from unknown sources, or that do not decode, are counted and logged (rate-limited), never trusted; such
a TCP frame ends its connection (the stream is not trusted after it). A message that decodes and authenticates but
that the core rejects (`BadMessage`) is counted and logged the same way and dropped alone.
"""
from __future__ import annotations

import asyncio
import os
import signal
import socket
import struct
import time
import traceback
from collections import Counter
from collections.abc import Callable
from typing import Any

from . import control, netns, wire
from .config import MulticastGroup, NodeConfig, parse_addr
from .eventlog import EventLog
from .protocols import registry
from .protocols.base import BadMessage, Core, Output
from .vclock import VirtualClock

LOG_FLUSH_S = 0.5          # real seconds (not protocol time)
RCVBUF_BYTES = 1 << 21
TCP_QUEUE_LIMIT = 10_000    # frames queued for a connection that is still being opened
SOL_TCP = getattr(socket, "SOL_TCP", 6)
TCP_USER_TIMEOUT = getattr(socket, "TCP_USER_TIMEOUT", 18)


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
    def __init__(self, node: NodeRuntime, via: str) -> None:
        self.node = node
        self.via = via

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.node.on_packet(data, addr, self.via)

    def error_received(self, exc: Exception) -> None:
        self.node.on_send_error(exc)


def _mreqn(group: str, ifname: str | None) -> bytes:
    """struct ip_mreqn {imr_multiaddr, imr_address, imr_ifindex}: the group on that interface (None: the route's)."""
    index = socket.if_nametoindex(ifname) if ifname else 0
    return socket.inet_aton(group) + socket.inet_aton("0.0.0.0") + struct.pack("@i", index)


def multicast_sockets(group: MulticastGroup) -> tuple[socket.socket, socket.socket]:
    """(receiving, sending) UDP sockets of a group. The receiving one is bound to (group address, port) and joined
    on `join_ifs` (not at all by a send-only sender, `receive` false); the sending one is bound to the member's
    `source` address (the multicast routes are keyed on it) and sends on `send_if` with the group's TTL, loopback
    on (the kernel forwards a member's own packet from its looped-back copy)."""
    recv = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        send = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    except OSError:
        recv.close()
        raise
    try:
        recv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        recv.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF_BYTES)
        recv.bind((group.address, group.port))
        for ifname in (group.join_ifs or [None]) if group.receive else []:
            recv.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, _mreqn(group.address, ifname))
        send.bind((group.source or "0.0.0.0", 0))
        if group.send_if:
            send.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, _mreqn(group.address, group.send_if))
        send.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, group.ttl)
        send.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
    except OSError:
        recv.close()
        send.close()
        raise
    return recv, send


class _TcpConn(asyncio.Protocol):
    """One TCP connection: frames in, frames out, and how it ended."""

    def __init__(self, node: NodeRuntime, peer: int | None, outgoing: bool) -> None:
        self.node = node
        self.peer = peer                 # None until an accepted connection's first frame names its member
        self.outgoing = outgoing
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.quiet = False               # closed on purpose (by the core, or as the loser of a double connect)
        self.ip = ""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        self.ip = (transport.get_extra_info("peername") or ("", 0))[0]
        if sock is not None:
            self.node.tune_tcp(sock)
        if self.node.paused:         # accepted while paused: the kernel completed the handshake, nobody reads
            self.transport.pause_reading()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while len(self.buf) >= wire.ENVELOPE_SIZE:
            try:
                env = wire.parse_envelope(memoryview(self.buf)[:wire.ENVELOPE_SIZE], exact=False)
            except wire.DecodeError as exc:      # the stream cannot be resynchronised: drop the connection
                self.node.bad_frame(self, bytes(self.buf[:16]), str(exc))
                return
            size = wire.ENVELOPE_SIZE + env.length
            if len(self.buf) < size:
                return
            frame = bytes(self.buf[:size])
            del self.buf[:size]
            self.node.on_frame(self, frame)
            if self.transport is not None and self.transport.is_closing():   # aborted on a bad frame
                return

    def connection_lost(self, exc: Exception | None) -> None:
        self.node.on_tcp_lost(self, exc)

    def close(self) -> None:
        self.quiet = True
        if self.transport is not None:
            self.transport.close()


class NodeRuntime:
    def __init__(self, cfg: NodeConfig, sock: socket.socket | None = None) -> None:
        """`sock`: an already bound UDP socket to use instead of binding `cfg.listen` (tests)."""
        self.cfg = cfg
        self.clock: VirtualClock = cfg.clock.make()
        self._sock = sock
        self.addr_of = {m.id: parse_addr(m.addr) for m in cfg.members}
        self.core: Core | None = None
        self._codec = wire.BY_NAME[cfg.protocol.name]
        self.counters: Counter[str] = Counter()
        self._log = EventLog(cfg.event_log, cfg.name)
        self._bad_log = RateLimiter(20)
        self._error_log = RateLimiter(5)
        self._transport: asyncio.DatagramTransport | None = None
        self._mcast: dict[str, tuple[asyncio.DatagramTransport, tuple[str, int], bool]] = {}
        self._mcast_recv: list[asyncio.DatagramTransport] = []
        self._tcp_server: asyncio.AbstractServer | None = None
        self._conns: dict[int, _TcpConn] = {}
        self._spares: set[_TcpConn] = set()             # second connections of a double connect (read only)
        self._pending: dict[int, list[bytes]] = {}       # frames waiting for a connection being opened
        self._timer: asyncio.TimerHandle | None = None
        self._due = float("inf")
        self._start_handle: asyncio.TimerHandle | None = None
        self._duration_handle: asyncio.TimerHandle | None = None
        self._stopped = asyncio.Event()
        self.stop_reason = ""
        self.paused = False            # a packed member's pause: nothing read, no timer fires (like SIGSTOP)
        self._late_start = False       # a start that came due while paused
        self._late_stop = False        # the end of duration_s, come while paused
        self._unpaused = asyncio.Event()
        self._unpaused.set()
        self.crashed = False           # a packed member's crash: sockets gone, no goodbye, no further event
        self._torn_down = False
        self._announced = False        # node_started was written (node_stopped is written only after it)
        self._control_server: asyncio.AbstractServer | None = None

    # ---- lifecycle -------------------------------------------------------------------------------------------

    async def run(self, handle_signals: bool = False) -> str:
        """Run until stopped (SIGTERM/SIGINT when `handle_signals`, control `stop`, or `duration_s`).
        Returns the stop reason."""
        loop = asyncio.get_running_loop()
        try:
            return await self._run(loop, handle_signals)
        finally:
            self._teardown()

    async def _run(self, loop: asyncio.AbstractEventLoop, handle_signals: bool) -> str:
        sock = self._sock or self._bind()
        self._transport, _ = await loop.create_datagram_endpoint(lambda: _Udp(self, "udp"), sock=sock)
        for group in self.cfg.multicast:
            with netns.entered(self.cfg.netns):
                rsock, ssock = multicast_sockets(group)
            rtransport, _ = await loop.create_datagram_endpoint(lambda: _Udp(self, "mcast"), sock=rsock)
            stransport, _ = await loop.create_datagram_endpoint(lambda: _Udp(self, "mcast"), sock=ssock)
            self._mcast[group.name] = (stransport, (group.address, group.port), group.may_send)
            self._mcast_recv.append(rtransport)
        if self._uses_tcp():
            host, port = parse_addr(self.cfg.listen)
            if self._sock is not None:      # tests: TCP on the UDP socket's port
                host, port = self._sock.getsockname()[:2]
            with netns.entered(self.cfg.netns):
                lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                lsock.setblocking(False)
                lsock.bind((host, port))
            except OSError:
                lsock.close()
                raise
            self._tcp_server = await loop.create_server(lambda: _TcpConn(self, None, False), sock=lsock)
        ctl_path = self.cfg.control
        if ctl_path:
            self._control_server = await control.serve(ctl_path, self._on_control)
        if handle_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.stop, f"signal {sig.name}")
        self._event("node_started", id=self.cfg.id, pid=os.getpid(), listen=self.cfg.listen, n=self.cfg.n,
                    senders=self.cfg.senders, protocol=self.cfg.protocol.model_dump(mode="json"),
                    multicast=[g.name for g in self.cfg.multicast], wait_for_start=self.cfg.wait_for_start,
                    clock=self.clock.to_json())
        self._announced = True
        flusher = asyncio.ensure_future(self._flush_periodically())
        if not self.cfg.wait_for_start:
            self.start_protocol()
        try:
            await self._stopped.wait()
        finally:
            flusher.cancel()
            if self._control_server is not None:
                self._control_server.close()
                await self._control_server.wait_closed()
        return self.stop_reason

    def _teardown(self) -> None:
        """Close every socket and timer; then, unless crashed, write node_stopped. Idempotent. A crash closes
        without a goodbye: TCP connections are aborted (their unsent data dropped), no event is written."""
        if self._torn_down:
            return
        self._torn_down = True
        self._unpaused.set()                       # wakes connects waiting for a resume: they see the teardown
        for handle in (self._timer, self._start_handle, self._duration_handle):
            if handle is not None:
                handle.cancel()
        self._timer = self._start_handle = self._duration_handle = None
        if self._transport is not None:
            self._transport.close()
        for transport, _, _ in self._mcast.values():
            transport.close()
        for transport in self._mcast_recv:
            transport.close()
        for conn in [*self._conns.values(), *self._spares]:
            conn.quiet = True
            if self.crashed and conn.transport is not None:
                conn.transport.abort()
            else:
                conn.close()
        self._pending.clear()
        if self._tcp_server is not None:
            self._tcp_server.close()
        if self._control_server is not None and self.cfg.control is not None:
            self._control_server.close()
            self.cfg.control.unlink(missing_ok=True)
        if self._announced and not self.crashed:
            self._event("node_stopped", reason=self.stop_reason, runtime=dict(sorted(self.counters.items())),
                        protocol=self.core.snapshot() if self.core else None)
        self._log.close()

    def _uses_tcp(self) -> bool:
        return bool(getattr(self.cfg.protocol, "uses_tcp", False) or getattr(self.cfg.protocol, "transport", "")
                    == "tcp")

    def _bind(self) -> socket.socket:
        with netns.entered(self.cfg.netns):
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF_BYTES)
            sock.bind(parse_addr(self.cfg.listen))
        except OSError:
            sock.close()
            raise
        return sock

    def start_protocol(self) -> None:
        if self.core is not None or self._stopped.is_set():
            return
        if self.paused:                  # came due while paused: runs at resume, late
            self._late_start = True
            return
        loop = asyncio.get_running_loop()
        self.core = registry.create(self.cfg, self.clock.now())
        self._event("protocol_started")   # sweeps' start-lag judge (fidelity.py)
        self._emit(self.core.startup)
        self._schedule()
        if self.cfg.duration_s is not None:
            self._duration_handle = loop.call_later(self.clock.real_s(self.cfg.duration_s), self._duration_over)

    def _duration_over(self) -> None:
        if self.paused:                  # as under SIGSTOP: noticed at resume
            self._late_stop = True
        else:
            self.stop("duration")

    def stop(self, reason: str) -> None:
        if not self._stopped.is_set():
            self.stop_reason = reason
            self._stopped.set()

    # ---- faults of a packed member (a process of its own gets signals instead) --------------------------------

    def _read_transports(self) -> list[asyncio.BaseTransport]:
        conns = [c.transport for c in [*self._conns.values(), *self._spares] if c.transport is not None]
        return [t for t in [self._transport, *self._mcast_recv, *conns] if t is not None and not t.is_closing()]

    def pause(self) -> None:
        """Like SIGSTOP: stop reading every socket (datagrams queue in the kernel's buffers, then drop) and let no
        timer fire. Sending stops with it (nothing runs that would send). Idempotent."""
        if self.paused or self._stopped.is_set():
            return
        self.paused = True
        self._unpaused.clear()
        for transport in self._read_transports():
            transport.pause_reading()  # type: ignore[attr-defined]

    def resume(self) -> None:
        """Like SIGCONT: read again (what queued meanwhile comes first) and fire the timers that came due, late:
        the core's clocks skip the steps missed while paused, as after SIGSTOP."""
        if not self.paused:
            return
        self.paused = False
        self._unpaused.set()
        if self._stopped.is_set():
            return
        if self._late_stop:
            self.stop("duration")
            return
        for transport in self._read_transports():
            transport.resume_reading()  # type: ignore[attr-defined]
        if self._late_start:
            self._late_start = False
            self.start_protocol()
        elif self.core is not None:
            self._reschedule()

    def crash(self) -> None:
        """Like SIGKILL: the sockets close at once without a goodbye, the timers are gone, the member writes no
        further event (what it had written is flushed, where a killed process loses its unflushed buffer)."""
        if self._torn_down:
            return
        self.crashed = True
        self.stop("crash")
        self._teardown()

    async def _flush_periodically(self) -> None:
        while True:
            await asyncio.sleep(LOG_FLUSH_S)
            self._log.flush()

    # ---- timers ----------------------------------------------------------------------------------------------

    def _schedule(self) -> None:
        assert self.core is not None
        wake = self._due = self.core.next_wakeup()
        if wake == float("inf"):
            self._timer = None
            return
        delay = max(0.0, self.clock.to_real(wake) - time.time())
        self._timer = asyncio.get_running_loop().call_later(delay, self._on_timer)

    def _reschedule(self) -> None:
        """The core's next wakeup may have moved earlier (a control command or a received message changed it)."""
        if self._timer is not None:
            self._timer.cancel()
        self._schedule()

    def _on_timer(self) -> None:
        assert self.core is not None
        if self.paused:              # fires at resume, late (resume reschedules)
            self._timer = None
            return
        self._emit(self.core.tick(self.clock.now()))
        self._schedule()

    # ---- packets ---------------------------------------------------------------------------------------------

    def on_packet(self, data: bytes, addr: tuple[str, int], via: str = "udp") -> None:
        self.counters["packets_in"] += 1
        self.counters["bytes_in"] += len(data)
        if self.core is None:
            self.counters["packets_before_start"] += 1
            return
        now = self.clock.now()
        try:
            msg = wire.decode(data)
            expected = self.addr_of.get(msg.sender)
            if via == "mcast":
                if msg.sender == self.cfg.id and expected is not None and expected[0] == addr[0]:
                    self.counters["own_multicast"] += 1      # our own packet, looped back
                    return
                if expected is None or expected[0] != addr[0]:
                    raise BadMessage(f"claims sender {msg.sender} but comes from {addr[0]}")
            elif expected != addr:
                raise BadMessage(f"claims sender {msg.sender} but comes from {addr[0]}:{addr[1]}")
            self._deliver(msg, now, via)
        except (wire.DecodeError, BadMessage) as exc:
            self._bad_packet(now, data, f"{addr[0]}:{addr[1]}", str(exc))

    def _deliver(self, msg: Any, now: float, via: str) -> None:
        """Hand a decoded, authenticated message to the core (BadMessage propagates to the caller)."""
        assert self.core is not None
        if type(msg).CODEC is not self._codec:
            raise BadMessage(f"a {type(msg).CODEC.name} packet; this node runs {self.cfg.protocol.name}")
        try:
            out = self.core.receive(msg, now, via)
        except BadMessage:
            raise
        except Exception as exc:  # noqa: BLE001 - one packet must not end a run; the event names the bug
            self._internal_error(now, "receive", exc)
            return
        self._emit(out)
        if self.core.next_wakeup() < self._due:
            self._reschedule()

    def _internal_error(self, now: float, where: str, exc: Exception) -> None:
        self.counters["internal_errors"] += 1
        suppressed = self._error_log.allow(now)
        if suppressed is not None:
            self._log.write(now, "error", {"where": where, "error": repr(exc), "suppressed": suppressed,
                                           "traceback": traceback.format_exc(limit=4)})

    def _bad_packet(self, now: float, data: bytes, src: str, reason: str) -> None:
        self.counters["bad_packets"] += 1
        suppressed = self._bad_log.allow(now)
        if suppressed is not None:
            self._log.write(now, "bad_packet", {"src": src, "size": len(data), "reason": reason,
                                                "head": data[:16].hex(), "suppressed": suppressed})

    def on_send_error(self, exc: Exception) -> None:
        self.counters["send_errors"] += 1
        now = self.clock.now()
        suppressed = self._error_log.allow(now)
        if suppressed is not None:
            self._log.write(now, "send_error", {"error": repr(exc), "suppressed": suppressed})

    def _emit(self, out: Output) -> None:
        for ts, event, fields in out.events:
            self._log.write(ts, event, fields)
        encoded: dict[int, bytes] = {}  # one encoding per message, however many destinations

        def encode(msg: Any) -> bytes:
            data = encoded.get(id(msg))
            if data is None:
                data = encoded[id(msg)] = wire.encode(msg)
            return data

        if out.send:
            assert self._transport is not None
            for dest, msg in out.send:
                data = encode(msg)
                self._transport.sendto(data, self.addr_of[dest])
                self.counters["packets_out"] += 1
                self.counters["bytes_out"] += len(data)
        for group, msg in out.mcast:
            transport, dest, may_send = self._mcast[group]
            if not may_send:     # the plan routes no packets from this member: they would go nowhere
                self.counters["mcast_not_routed"] += 1
                continue
            data = encode(msg)
            transport.sendto(data, dest)
            self.counters["mcast_packets_out"] += 1
            self.counters["mcast_bytes_out"] += len(data)
        for dest, msg in out.stream:
            self._tcp_send(dest, encode(msg))
        for peer in out.close:
            self._tcp_close(peer)

    def _event(self, event: str, **fields: Any) -> None:
        self._log.write(self.clock.now(), event, fields)

    # ---- TCP -------------------------------------------------------------------------------------------------

    def tune_tcp(self, sock: socket.socket) -> None:
        """Fail a connection to a dead or cut-off peer within seconds, not the kernel's default minutes. The
        timeouts are virtual seconds: the kernel gets them times the dilation (keepalive in whole seconds, at
        least 1)."""
        t = self.cfg.tcp
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        keep = max(1, round(self.clock.real_s(t.keepalive_s)))
        for opt, value in (("TCP_KEEPIDLE", keep), ("TCP_KEEPINTVL", keep), ("TCP_KEEPCNT", 3)):
            if hasattr(socket, opt):
                sock.setsockopt(SOL_TCP, getattr(socket, opt), value)
        sock.setsockopt(SOL_TCP, TCP_USER_TIMEOUT, int(self.clock.real_s(t.user_timeout_s) * 1000))

    def _tcp_send(self, dest: int, frame: bytes) -> None:
        if self._torn_down:
            self.counters["tcp_frames_dropped"] += 1
            return
        conn = self._conns.get(dest)
        if conn is not None and conn.transport is not None:
            if conn.transport.is_closing():      # lost; the core hears `failed` from connection_lost
                self.counters["tcp_frames_dropped"] += 1
                return
            conn.transport.write(frame)
            self.counters["tcp_frames_out"] += 1
            self.counters["tcp_bytes_out"] += len(frame)
            return
        queue = self._pending.get(dest)
        if queue is None:
            queue = self._pending[dest] = []
            asyncio.ensure_future(self._tcp_connect(dest))
        if len(queue) < TCP_QUEUE_LIMIT:
            queue.append(frame)
        else:
            self.counters["tcp_frames_dropped"] += 1

    async def _tcp_connect(self, dest: int) -> None:
        loop = asyncio.get_running_loop()
        host, port = self.addr_of[dest]
        conn = _TcpConn(self, dest, True)

        async def connect() -> None:
            with netns.entered(self.cfg.netns):
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.setblocking(False)
                await loop.sock_connect(sock, (host, port))
                await loop.create_connection(lambda: conn, sock=sock)
            except BaseException:
                sock.close()
                raise

        error: OSError | asyncio.TimeoutError | None = None
        try:
            await asyncio.wait_for(connect(), timeout=self.clock.real_s(self.cfg.tcp.connect_timeout_s))
        except (OSError, asyncio.TimeoutError) as exc:
            error = exc
        if self.paused:                          # a paused member hears of it at resume
            if conn.transport is not None:
                conn.transport.pause_reading()
            await self._unpaused.wait()
            if conn.transport is not None and not conn.transport.is_closing():
                conn.transport.resume_reading()
        if error is not None:
            exc = error
            if self._torn_down:
                return
            if dest in self._conns:              # the peer connected to us meanwhile: its connection serves
                return
            queued = self._pending.pop(dest, [])
            self.counters["tcp_frames_dropped"] += len(queued)
            reason = "timeout" if isinstance(exc, asyncio.TimeoutError) else f"connect: {exc.strerror or exc}"
            self._connection_event(dest, "failed", reason)
            return
        if self._torn_down:                      # stopped or crashed while connecting
            conn.quiet = True
            if conn.transport is not None:
                conn.transport.abort()
            return
        self._adopt(conn)

    def _adopt(self, conn: _TcpConn) -> None:
        """A connection to `conn.peer` is established. When both ends connected at once, both connections stay
        open (closing one could lose frames already in flight on it) and both ends send on the one the lower
        member id opened; the other is a spare that is only read from, and that ends silently."""
        assert conn.peer is not None
        peer = conn.peer
        existing = self._conns.get(peer)
        if existing is not None and existing is not conn:
            opener_new = self.cfg.id if conn.outgoing else peer
            winner, spare = (conn, existing) if opener_new == min(self.cfg.id, peer) else (existing, conn)
            self._conns[peer] = winner
            self._spares.add(spare)
            self.counters["tcp_double_connections"] += 1
            self._flush_pending(peer)
            return
        self._conns[peer] = conn
        self._connection_event(peer, "up", "connected" if conn.outgoing else "accepted")
        self._flush_pending(peer)

    def _flush_pending(self, peer: int) -> None:
        conn = self._conns.get(peer)
        if conn is None or conn.transport is None:
            return
        for frame in self._pending.pop(peer, []):
            conn.transport.write(frame)
            self.counters["tcp_frames_out"] += 1
            self.counters["tcp_bytes_out"] += len(frame)

    def on_frame(self, conn: _TcpConn, frame: bytes) -> None:
        self.counters["tcp_frames_in"] += 1
        self.counters["tcp_bytes_in"] += len(frame)
        now = self.clock.now()
        if self.core is None:
            self.counters["packets_before_start"] += 1
            return
        try:
            msg = wire.decode(frame)
            if conn.peer is None:             # an accepted connection names its member with its first frame
                expected = self.addr_of.get(msg.sender)
                if expected is None or expected[0] != conn.ip or msg.sender == self.cfg.id:
                    raise BadMessage(f"TCP connection from {conn.ip} names sender {msg.sender}")
                conn.peer = msg.sender
                self._adopt(conn)
            elif msg.sender != conn.peer:
                raise BadMessage(f"frame names sender {msg.sender} on the connection of member {conn.peer}")
        except (wire.DecodeError, BadMessage) as exc:
            self.bad_frame(conn, frame, str(exc))
            return
        try:
            self._deliver(msg, now, "tcp")
        except BadMessage as exc:
            # a frame that decodes and comes from its member, which the core rejects (one message it had no use
            # for, e.g. a QSM token of a round given up for lost): that message is dropped; the stream is sound
            # and the frames behind it on it are not lost with it
            self._bad_packet(now, frame, f"tcp:{conn.ip}", str(exc))

    def bad_frame(self, conn: _TcpConn, head: bytes, reason: str) -> None:
        """A frame that does not decode or authenticate: the stream is not trusted any more; drop the connection
        (the core hears `failed` if it knew the peer)."""
        self._bad_packet(self.clock.now(), head, f"tcp:{conn.ip}", reason)
        if conn.transport is not None:
            conn.transport.abort()

    def on_tcp_lost(self, conn: _TcpConn, exc: Exception | None) -> None:
        peer = conn.peer
        if conn in self._spares:
            self._spares.discard(conn)
            return
        if peer is None or self._conns.get(peer) is not conn:
            return                            # never adopted
        del self._conns[peer]
        if conn.quiet or self._stopped.is_set():
            return
        if exc is None:
            reason = "eof"
        elif isinstance(exc, ConnectionResetError):
            reason = "reset"
        elif isinstance(exc, TimeoutError) or getattr(exc, "errno", None) == 110:
            reason = "timeout"
        else:
            reason = f"error: {exc}"
        self._connection_event(peer, "failed", reason)

    def _tcp_close(self, peer: int) -> None:
        conn = self._conns.pop(peer, None)
        self._pending.pop(peer, None)
        if conn is not None:
            conn.close()
        for spare in [c for c in self._spares if c.peer == peer]:
            self._spares.discard(spare)
            spare.close()

    def _connection_event(self, peer: int, event: str, reason: str) -> None:
        self.counters[f"tcp_{event}"] += 1
        if self.core is None or self._torn_down:
            return
        now = self.clock.now()
        try:
            out = self.core.on_connection(peer, event, now, reason)
        except Exception as exc:  # noqa: BLE001 - as for a packet: the event names the bug
            self._internal_error(now, "on_connection", exc)
            return
        self._emit(out)
        self._reschedule()

    # ---- control ---------------------------------------------------------------------------------------------

    def _on_control(self, req: dict[str, Any]) -> tuple[dict[str, Any], Callable[[], None] | None]:
        cmd = req.get("cmd")
        if cmd == "state":
            return {"ok": True, "state": {
                "node": self.cfg.name,
                "id": self.cfg.id,
                "protocol_name": self.cfg.protocol.name,
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
        if self.core is None:
            return {"ok": False, "error": f"unknown command {cmd!r} (state, start, stop, workload), or the "
                                          "protocol has not started"}, None
        try:
            reply, out = self.core.control(req, self.clock.now())
        except ValueError as exc:
            return {"ok": False, "error": f"{exc} (the runtime knows state, start, stop, workload)"}, None
        self._emit(out)
        self._reschedule()
        return reply, None

    def _control_start(self, at: Any) -> dict[str, Any]:
        if self.core is not None or self._start_handle is not None:
            return {"ok": False, "error": "already started"}
        if at is not None and not isinstance(at, (int, float)):
            return {"ok": False, "error": "`at` must be a virtual unix time in seconds (the node's clock: "
                                          "real unix time at dilation 1)"}
        # `at` is virtual: the orchestrator sends times of the lab's clock
        delay = 0.0 if at is None else max(0.0, self.clock.to_real(at) - time.time())
        self._start_handle = asyncio.get_running_loop().call_later(delay, self.start_protocol)
        return {"ok": True}

    def _control_workload(self, op: Any) -> dict[str, Any]:
        if op not in ("start", "stop"):
            return {"ok": False, "error": "workload needs op: start or stop"}
        if self.core is None:
            return {"ok": False, "error": "the protocol has not started"}
        try:
            out = self.core.set_workload(op == "start", self.clock.now())
        except ValueError as exc:
            return {"ok": False, "error": str(exc)}
        self._emit(out)
        self._reschedule()
        return {"ok": True}
