"""The controller's SSH to the machines of a lab over several machines (paramiko, host keys checked as for the
hosts backend: orchestrator.hosts.ssh.open_client); every remote command an argument list quoted with shlex.join."""
from __future__ import annotations

import shlex
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO

import paramiko

from orchestrator import machines as mach
from orchestrator.errors import BackendError
from orchestrator.hosts.ansible import HostsError
from orchestrator.hosts.hostsfile import Host
from orchestrator.hosts.ssh import open_client

SSH_TIMEOUT_S = 10.0


class Machine:
    """One machine's SSH connection and its commands."""

    def __init__(self, host: Host, client: paramiko.SSHClient):
        self.host, self.client = host, client

    def call_bytes(self, argv: list[str], stdin: bytes = b"", timeout_s: float = 600.0,
                   sink: BinaryIO | None = None) -> tuple[int, bytes, str]:
        """`argv` on the machine (one SSH channel): (exit status, stdout, stderr); stdout written to `sink` as it
        comes instead (then b"": a run's files need not fit in memory)."""
        tr = self.client.get_transport()
        if tr is None or not tr.is_active():
            raise BackendError(f"machine {self.host.name}: the SSH connection is gone")
        chan = tr.open_session(timeout=SSH_TIMEOUT_S)
        chan.settimeout(timeout_s)
        chan.exec_command(shlex.join(argv))
        if stdin:
            chan.sendall(stdin)
        chan.shutdown_write()
        out, err = bytearray(), bytearray()
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                got = False
                if chan.recv_ready():
                    chunk = chan.recv(65536)
                    if sink is not None:
                        sink.write(chunk)
                    else:
                        out += chunk
                    got = True
                if chan.recv_stderr_ready():
                    err += chan.recv_stderr(65536)
                    got = True
                if chan.exit_status_ready() and not chan.recv_ready() and not chan.recv_stderr_ready():
                    break
                if not got:
                    if time.monotonic() > deadline:
                        raise BackendError(f"machine {self.host.name}: `{shlex.join(argv[-6:])}` took longer than "
                                           f"{timeout_s:.0f} s")
                    if chan.closed and not chan.exit_status_ready():
                        raise BackendError(f"machine {self.host.name}: the SSH session closed during "
                                           f"`{shlex.join(argv[-6:])}`")
                    time.sleep(0.02)
            rc = chan.recv_exit_status()
        except OSError as exc:
            raise BackendError(f"machine {self.host.name}: the SSH session failed: {exc}") from None
        finally:
            chan.close()
        return rc, bytes(out), err.decode(errors="replace")

    def call(self, argv: list[str], stdin: bytes = b"", timeout_s: float = 600.0) -> tuple[int, str, str]:
        rc, out, err = self.call_bytes(argv, stdin, timeout_s)
        return rc, out.decode(errors="replace"), err

    def orchestrator(self, args: list[str], timeout_s: float = 600.0,
                     module: str = "orchestrator.cli") -> tuple[int, str, str]:
        return self.call(mach.remote_argv(self.host, args, sys.executable, module), timeout_s=timeout_s)

    def close(self) -> None:
        self.client.close()


def connect(hosts: list[Host], known_hosts: Path, accept_new: bool) -> tuple[dict[str, Machine], dict[str, str]]:
    """SSH to every machine at once: (connected machines, {name: why not})."""
    machines: dict[str, Machine] = {}
    problems: dict[str, str] = {}
    lock = threading.Lock()

    def one(h: Host) -> None:
        try:
            machines[h.name] = Machine(h, open_client(h, known_hosts, accept_new, lock, SSH_TIMEOUT_S))
        except HostsError as exc:
            problems.update({h.name: f"unreachable: {why}" for why in (exc.per_host or {}).values()}
                            or {h.name: f"unreachable: {exc}"})
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(hosts)))) as ex:
        list(ex.map(one, hosts))
    return machines, problems


def each(machines: list[Machine], fn) -> dict[str, object]:
    """fn(machine) on every machine at once: {name: result or the exception}."""
    def one(m: Machine):
        try:
            return m.host.name, fn(m)
        except Exception as exc:  # noqa: BLE001 - reported per machine
            return m.host.name, exc
    if not machines:
        return {}
    with ThreadPoolExecutor(max_workers=min(16, len(machines))) as ex:
        return dict(ex.map(one, machines))
