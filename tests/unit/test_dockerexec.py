"""DockerNodeProcess, the Popen-like handle of a node started with `docker exec`, against a fake engine API."""
from __future__ import annotations

import os
import subprocess
from types import SimpleNamespace

import pytest

from orchestrator.backends.dockerexec import DockerNodeProcess


class _Api:
    def __init__(self, pid: int):
        self.pid = pid

    def exec_inspect(self, exec_id):
        return {"Pid": self.pid, "Running": True, "ExitCode": None}


def test_wait_past_its_timeout_raises_timeout_expired_as_popen_does():
    """The runner's stop (backends/local.py) kills a node that outlives SIGTERM by catching TimeoutExpired."""
    proc = DockerNodeProcess(SimpleNamespace(api=_Api(os.getpid())), SimpleNamespace(name="c1"), "e1")
    assert proc.pid == os.getpid() and proc.poll() is None       # this process: running, not a zombie
    with pytest.raises(subprocess.TimeoutExpired, match="node in c1"):
        proc.wait(timeout=0.05)
