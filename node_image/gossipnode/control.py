"""The node's control endpoint: a unix stream socket speaking one JSON line each way.

A unix socket is reachable from any network namespace that shares the filesystem (Mininet hosts; a Docker
container with the run directory mounted; over ssh on real hosts), without routes to the node's own address.

Requests: {"cmd": "state"} -> {"ok": true, "state": {...}}
          {"cmd": "start", "at": <virtual unix time, optional>} -> {"ok": true}  (nodes configured with
                                                                  wait_for_start; `at` is on the node's clock,
                                                                  the config's `clock`: real at dilation 1)
          {"cmd": "stop"} -> {"ok": true}, then a clean stop (event node_stopped, log flushed)
          {"cmd": "workload", "op": "start" | "stop"} -> {"ok": true}  (a sender starts or stops sending data)
Errors:   {"ok": false, "error": "..."}
"""
from __future__ import annotations

import asyncio
import json
import socket
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

MAX_REQUEST = 64 * 1024


class ControlError(RuntimeError):
    """The node answered with an error, or could not be reached."""


def request(path: str | Path, req: dict[str, Any], timeout: float = 5.0) -> dict[str, Any]:
    """Send one request to the node at `path` and return its reply (ControlError if it failed)."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(str(path))
            s.sendall(json.dumps(req).encode() + b"\n")
            chunks: list[bytes] = []
            while not chunks or not chunks[-1].endswith(b"\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
    except OSError as exc:
        raise ControlError(f"control socket {path}: {exc}") from None
    try:
        reply = json.loads(b"".join(chunks))
    except json.JSONDecodeError:
        reply = None
    if not isinstance(reply, dict):
        raise ControlError(f"control socket {path}: malformed or empty reply")
    if not reply.get("ok"):
        raise ControlError(f"control socket {path}: {reply.get('error', 'request failed')}")
    return reply


def dump_state(path: str | Path, timeout: float = 5.0) -> dict[str, Any]:
    """The node's state: runtime counters and, once started, the protocol core's snapshot."""
    state: dict[str, Any] = request(path, {"cmd": "state"}, timeout)["state"]
    return state


def start(path: str | Path, at: float | None = None, timeout: float = 5.0) -> None:
    """Start the protocol now, or at virtual unix time `at` (so that many nodes start together; the node's clock,
    real unix time at dilation 1)."""
    request(path, {"cmd": "start"} if at is None else {"cmd": "start", "at": at}, timeout)


def stop(path: str | Path, timeout: float = 5.0) -> None:
    """Ask the node to stop cleanly (like SIGTERM)."""
    request(path, {"cmd": "stop"}, timeout)


Handler = Callable[[dict[str, Any]], tuple[dict[str, Any], Callable[[], None] | None]]


async def serve(path: Path, handle: Handler) -> asyncio.AbstractServer:
    """Listen at `path` (replacing a stale socket left by a killed node). `handle` maps a request to a reply and,
    optionally, an action to run once the reply is sent (a stop must not cut its own reply short)."""
    try:
        if stat.S_ISSOCK(path.lstat().st_mode):
            path.unlink()
    except FileNotFoundError:
        pass

    async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        then = None
        try:
            line = await asyncio.wait_for(reader.readline(), timeout=5.0)
            req = json.loads(line)
            if not isinstance(req, dict):
                raise ValueError("request must be a JSON object")
            reply, then = handle(req)
        except (ValueError, TimeoutError) as exc:  # JSON errors and over-long lines are ValueErrors
            reply = {"ok": False, "error": f"bad request: {exc.__class__.__name__}: {exc}"}
        try:
            writer.write(json.dumps(reply).encode() + b"\n")
            await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()
            if then is not None:
                then()

    return await asyncio.start_unix_server(on_client, path=str(path), limit=MAX_REQUEST)
