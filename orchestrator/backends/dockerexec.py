"""A node process started with `docker exec` (the Docker driver's `start_process`), with the parts of
`subprocess.Popen` the runner uses."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from orchestrator.backends import netns
from orchestrator.errors import BackendError


class DockerNodeProcess:
    """A node process started with `docker exec`, with the parts of `subprocess.Popen` the runner uses.

    `pid` is its host pid: signals go straight to it, as on Mininet (crash SIGKILL, pause/perturb SIGSTOP and
    SIGCONT). Not `docker pause`: each pause/unpause through the engine took 20-55 ms here, too coarse for the
    100 ms perturbation intervals; SIGSTOP takes effect at once."""

    def __init__(self, c, container, exec_id: str):
        self._c, self.container, self.exec_id = c, container, exec_id
        self.returncode: int | None = None
        self.pid = 0
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:          # the exec's pid appears once it is running
            info = c.api.exec_inspect(exec_id)
            if info.get("Pid"):
                self.pid = info["Pid"]
                break
            if not info.get("Running") and info.get("ExitCode") is not None:
                self.returncode = info["ExitCode"]
                break
            time.sleep(0.01)
        else:
            raise BackendError(f"docker exec in {container.name} did not start within 10 s")

    def poll(self) -> int | None:
        if self.returncode is not None:
            return self.returncode
        if self.pid and Path(f"/proc/{self.pid}").exists() and not netns._is_zombie(self.pid):
            return None
        info = self._c.api.exec_inspect(self.exec_id)
        if info.get("Running"):
            return None
        code = info.get("ExitCode")
        self.returncode = -signal.SIGKILL if code is None else code
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"node in {self.container.name}", timeout)
            time.sleep(0.02)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)
