"""The delay line's control protocol: JSON lines on a unix stream socket, served from the event loop.

Every request is `{"op": OP, ...}`; `HANDLERS` maps each op to a function (daemon, request) -> answer fields.
Every answer carries `ok` and `fatal` (the fatal conditions found so far); a refused request is
`{"ok": false, "error": ..., "fatal": [...]}`. See DELAYLINE.md for the table of requests and answers.
"""
from __future__ import annotations

import errno
import json
import os
import select
import socket
from typing import TYPE_CHECKING, Callable

from orchestrator.shaping.delayline.config import QueueSpec
from orchestrator.shaping.delayline.loop import log
from orchestrator.shaping.delayline.model import params_from_json

if TYPE_CHECKING:
    from orchestrator.shaping.delayline.daemon import DelayLine


def _dir(dl: "DelayLine", req: dict):
    return dl.dirs[str(req["id"])]


def op_ping(dl: "DelayLine", req: dict) -> dict:
    return {"pid": os.getpid(), "queues": len(dl.dirs), "namespaces": len(dl.namespaces)}


def op_set(dl: "DelayLine", req: dict) -> dict:
    d = _dir(dl, req)
    p = params_from_json(req["params"])
    d.set(p)
    log(f"set {d.id} {json.dumps(p.to_json())}")
    return {}


def op_cut(dl: "DelayLine", req: dict) -> dict:
    d = _dir(dl, req)
    was = d.cut
    n = dl.cut(d)
    log(f"cut {d.id} (dropped {n} held)")
    return {"dropped_held": n, "was_cut": was}


def op_heal(dl: "DelayLine", req: dict) -> dict:
    d = _dir(dl, req)
    was = d.heal()
    log(f"heal {d.id}")
    return {"was_cut": was}


def op_stats(dl: "DelayLine", req: dict) -> dict:
    out = dl.stats(req.get("ids"), kernel=bool(req.get("kernel", True)))
    if req.get("hist"):   # the histogram's bins (a shard router merges them)
        out["hold_error"]["bins"] = dl.hist_bins()
    if req.get("reset"):
        dl.reset_samples()
    return out


def op_add(dl: "DelayLine", req: dict) -> dict:
    specs = [QueueSpec.from_json(q) for q in req.get("queues", [])]
    added = dl.add_queues(specs)
    log(f"added {added}")
    return {"added": added}


def op_remove(dl: "DelayLine", req: dict) -> dict:
    ids = [str(i) for i in req.get("ids", [])]
    dl.remove_queues(ids)
    log(f"removed {ids}")
    return {"removed": ids}


def op_shutdown(dl: "DelayLine", req: dict) -> dict:
    dl.stopping = True
    return {}


HANDLERS: dict[str, Callable[["DelayLine", dict], dict]] = {
    "ping": op_ping, "set": op_set, "cut": op_cut, "heal": op_heal, "stats": op_stats,
    "add": op_add, "remove": op_remove, "shutdown": op_shutdown,
}


def handle(dl: "DelayLine", line: bytes, handlers: dict | None = None) -> dict:
    """The answer to one request line (`handlers`: the op table, HANDLERS by default)."""
    try:
        req = json.loads(line)
        if not isinstance(req, dict):
            raise ValueError("a request is a JSON object")
        op = req.get("op")
        h = (handlers or HANDLERS).get(op) if isinstance(op, str) else None
        if h is None:
            raise ValueError(f"unknown op {op!r}")
        out = h(dl, req)
        out.update(ok=True, fatal=list(dl.fatal))
        return out
    except KeyError as e:
        return {"ok": False, "error": f"unknown id or missing field {e}", "fatal": list(dl.fatal)}
    except (ValueError, TypeError, OSError) as e:
        return {"ok": False, "error": str(e), "fatal": list(dl.fatal)}


class ControlServer:
    """The listening socket and its clients, registered in the loop's epoll (`dl.ep`, `dl.handlers`)."""

    def __init__(self, dl: "DelayLine", path: str, handlers: dict | None = None):
        self.dl = dl
        self.handlers = handlers
        self.path = path
        self.clients: dict[int, list] = {}   # fd -> [socket, input buffer, output buffer]
        self.listener: socket.socket | None = None

    def listen(self) -> None:
        path = self.path
        if os.path.exists(path):
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(path)
            except OSError:
                os.unlink(path)  # stale socket of a dead daemon
            else:
                raise OSError(errno.EADDRINUSE, f"control socket {path} is served by a live process")
            finally:
                probe.close()
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        old = os.umask(0o077)
        try:
            s.bind(path)
        finally:
            os.umask(old)
        s.listen(16)
        s.setblocking(False)
        self.listener = s
        self.dl.ep.register(s.fileno(), select.EPOLLIN)
        self.dl.handlers[s.fileno()] = self._on_accept

    def _on_accept(self, _ev) -> None:
        while True:
            try:
                c, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            c.setblocking(False)
            fd = c.fileno()
            self.clients[fd] = [c, bytearray(), bytearray()]
            self.dl.ep.register(fd, select.EPOLLIN)
            self.dl.handlers[fd] = lambda ev, fd=fd: self._client_event(fd, ev)

    def _drop_client(self, fd: int) -> None:
        c = self.clients.pop(fd, None)
        if c:
            self.dl.ep.unregister(fd)
            del self.dl.handlers[fd]
            c[0].close()

    def _client_event(self, fd: int, ev: int) -> None:
        c = self.clients.get(fd)
        if c is None:
            return
        sock, inbuf, outbuf = c
        if ev & select.EPOLLIN:
            try:
                data = sock.recv(1 << 16)
            except (BlockingIOError, InterruptedError):
                data = None
            except OSError:
                data = b""
            if data == b"":
                self._drop_client(fd)
                return
            if data:
                inbuf += data
                while b"\n" in inbuf:
                    line, _, rest = bytes(inbuf).partition(b"\n")
                    inbuf[:] = rest
                    if line.strip():
                        outbuf += (json.dumps(handle(self.dl, line, self.handlers)) + "\n").encode()
                if len(inbuf) > 1 << 20:
                    self._drop_client(fd)
                    return
        if outbuf:
            try:
                k = sock.send(outbuf)
                del outbuf[:k]
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                self._drop_client(fd)
                return
        self.dl.ep.modify(fd, select.EPOLLIN | (select.EPOLLOUT if outbuf else 0))

    def close(self) -> None:
        """Send what is still owed to each client (1 s each), close them, the listener, and unlink the socket."""
        for fd in list(self.clients):
            c = self.clients[fd]
            try:
                c[0].setblocking(True)
                c[0].settimeout(1.0)
                if c[2]:
                    c[0].sendall(c[2])
            except OSError:
                pass
            self._drop_client(fd)
        if self.listener is not None:
            self.listener.close()
            try:
                os.unlink(self.path)
            except OSError:
                pass
