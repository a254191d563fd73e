"""The orchestrator's side of the delay line: start the daemon (and wait for READY), talk to its control
socket (`DelayLineClient`), stop it. Everything here runs in the orchestrator's process."""
from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

from orchestrator.errors import DelayLineDied, OrchestratorError
from orchestrator.shaping.delayline.config import QueueSpec
from orchestrator.shaping.params import DirParams


def _tail(path: str | os.PathLike | None, n: int = 4000) -> str:
    if not path:
        return ""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - n))
            return f.read().decode(errors="replace").strip()
    except OSError:
        return ""


class DelayLineClient:
    """JSON-lines client of the control socket. Every transport failure (daemon gone, no answer) raises
    DelayLineDied; a request the daemon refuses raises OrchestratorError."""

    def __init__(self, control_path: str | os.PathLike, timeout: float = 10.0):
        self.path = str(control_path)
        self.timeout = timeout
        self._sock: socket.socket | None = None
        self._rbuf = b""

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
            self._rbuf = b""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def call(self, req: dict) -> dict:
        try:
            if self._sock is None:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.settimeout(self.timeout)
                s.connect(self.path)
                self._sock = s
            self._sock.sendall((json.dumps(req) + "\n").encode())
            while b"\n" not in self._rbuf:
                chunk = self._sock.recv(1 << 16)
                if not chunk:
                    raise ConnectionResetError("the delay line closed the control connection")
                self._rbuf += chunk
        except socket.timeout:
            self.close()
            raise DelayLineDied(f"delay line at {self.path} did not answer {req.get('op')!r} "
                                f"within {self.timeout} s") from None
        except OSError as e:
            self.close()
            raise DelayLineDied(f"delay line at {self.path} is gone ({e.strerror or e})") from None
        line, _, self._rbuf = self._rbuf.partition(b"\n")
        resp = json.loads(line)
        if not resp.get("ok"):
            raise OrchestratorError(f"delay line refused {req.get('op')!r}: {resp.get('error')}")
        return resp

    def ping(self) -> dict:
        """Raises DelayLineDied when the daemon is gone or reports a fatal condition (kernel drops)."""
        r = self.call({"op": "ping"})
        if r.get("fatal"):
            raise DelayLineDied("delay line reports: " + "; ".join(r["fatal"]))
        return r

    def set(self, id: str, params: DirParams | dict) -> dict:
        p = params.to_json() if isinstance(params, DirParams) else dict(params)
        return self.call({"op": "set", "id": id, "params": p})

    def cut(self, id: str) -> dict:
        return self.call({"op": "cut", "id": id})

    def heal(self, id: str) -> dict:
        return self.call({"op": "heal", "id": id})

    def stats(self, ids: Sequence[str] | None = None, reset: bool = False, kernel: bool = True) -> dict:
        """ids=None: every direction; ids=[]: only the global summary (cheap with thousands of queues).
        reset: start new hold-error samples after this answer. kernel=False: skip reading /proc now."""
        req: dict = {"op": "stats", "reset": reset, "kernel": kernel}
        if ids is not None:
            req["ids"] = list(ids)
        return self.call(req)

    def add(self, queues: Sequence[QueueSpec | dict]) -> dict:
        return self.call({"op": "add", "queues": [q.to_json() if isinstance(q, QueueSpec) else q for q in queues]})

    def remove(self, ids: Sequence[str]) -> dict:
        return self.call({"op": "remove", "ids": list(ids)})

    def shutdown(self) -> dict:
        r = self.call({"op": "shutdown"})
        self.close()
        return r


QUEUE_PROC = "/proc/net/netfilter/nfnetlink_queue"


def load_queue_module() -> None:
    """Load nfnetlink_queue when it is a module not loaded yet (a stock Debian kernel until something binds a
    queue): the daemon opens each namespace's /proc counters before it binds, and that file exists only once the
    module is in. A failed modprobe is left to the daemon's own error (which names the missing file)."""
    if not os.path.exists(QUEUE_PROC):
        subprocess.run(["modprobe", "nfnetlink_queue"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=False)


def start_delayline(config_path: str | os.PathLike, rt_priority: int | None = 50, timeout: float = 30.0,
                    log_path: str | os.PathLike | None = None, die_with_parent: bool = True,
                    extra_argv: Sequence[str] = ()) -> subprocess.Popen:
    """Start the daemon on `config_path`, wait for READY; raise DelayLineDied with its stderr otherwise.
    Its stderr goes to `log_path` (default: the config path with suffix .log). The returned Popen carries
    `.control_path` and `.log_path`. With `die_with_parent`, the daemon shuts down when this process exits."""
    config_path = Path(config_path)
    with open(config_path) as f:
        control = json.load(f)["control"]
    load_queue_module()
    log_path = Path(log_path) if log_path else config_path.with_suffix(".log")
    argv = [sys.executable, "-m", "orchestrator.shaping.delayline", "--config", str(config_path)]
    if rt_priority:
        argv += ["--rt-priority", str(int(rt_priority))]
    if die_with_parent:
        argv += ["--die-with-parent", str(os.getpid())]
    argv += list(extra_argv)
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[3])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log, env=env,
                                start_new_session=True, close_fds=True)
    proc.control_path = control
    proc.log_path = str(log_path)
    deadline = time.monotonic() + timeout
    line = b""
    try:
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            r, _, _ = select.select([proc.stdout], [], [], left)
            if not r:
                continue
            ch = os.read(proc.stdout.fileno(), 4096)
            if not ch:
                break
            line += ch
    except TimeoutError:
        proc.kill()
        proc.wait()
        raise DelayLineDied(f"delay line did not become ready within {timeout} s; stderr:\n{_tail(log_path)}") \
            from None
    text = line.decode(errors="replace").strip()
    if text.startswith("READY "):
        return proc
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    why = text[len("ERROR "):] if text.startswith("ERROR ") else f"exited with status {proc.returncode}"
    raise DelayLineDied(f"delay line failed to start: {why}; stderr:\n{_tail(log_path)}")


def stop_delayline(proc: subprocess.Popen, client: DelayLineClient | None = None, timeout: float = 10.0) -> int:
    """Graceful stop (shutdown request, then SIGTERM, then SIGKILL); returns the exit status. Idempotent."""
    if proc.poll() is None:
        try:
            (client or DelayLineClient(proc.control_path, timeout=timeout)).shutdown()
        except OrchestratorError:
            proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stdout:
        proc.stdout.close()
    return proc.returncode
