"""Persistent paramiko SSH sessions, one per host, each running the agent (`agent.py`), for the time-critical
schedule actions (crash, pause, perturb, restart) and the clock-offset measurement.

Host keys are verified against a known_hosts file: an unknown host is refused unless `accept_new` (the CLI's
`--accept-new-host-keys`), which records its key in that file; a changed key is always refused.
"""
from __future__ import annotations

import json
import shlex
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import paramiko

from orchestrator.hosts import clock
from orchestrator.hosts.ansible import HostsError, explain
from orchestrator.hosts.hostsfile import Host


class _RecordNewKey(paramiko.MissingHostKeyPolicy):
    """--accept-new-host-keys: accept a host not in known_hosts and record its key there."""

    def __init__(self, path: Path, lock: threading.Lock):
        self.path, self.lock = path, lock

    def missing_host_key(self, client, hostname, key):
        with self.lock:
            hk = paramiko.HostKeys()
            if self.path.exists():
                hk.load(str(self.path))
            hk.add(hostname, key.get_name(), key)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            hk.save(str(self.path))
            self.path.chmod(0o600)


def openssh_argv(host: Host, known_hosts: str | Path, tty: bool = False) -> list[str]:
    """The OpenSSH client to `host` (its key only, its key checked against `known_hosts`, nothing prompted): the
    command line `exec` hands the user's terminal to; the remote command follows as one string."""
    return ["ssh", "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "-o", f"UserKnownHostsFile={known_hosts}",
            "-o", "GlobalKnownHostsFile=/dev/null", "-o", "StrictHostKeyChecking=yes", "-i", host.key,
            "-p", str(host.ssh_port), *(["-t"] if tty else []), f"{host.user}@{host.ssh_host}"]


def open_client(host: Host, known_hosts: Path, accept_new: bool = False, lock: threading.Lock | None = None,
                timeout_s: float = 5.0) -> paramiko.SSHClient:
    """A connected SSH client to `host`, its key checked against `known_hosts`; HostsError naming the host and
    the reason (unreachable, refused key, changed host key) otherwise."""
    client = paramiko.SSHClient()
    if known_hosts.exists():
        client.load_host_keys(str(known_hosts))
    elif not accept_new:
        raise HostsError(f"known_hosts file {known_hosts} does not exist",
                         {host.name: explain("Host key verification failed", host.user, str(known_hosts))})
    client.set_missing_host_key_policy(
        _RecordNewKey(known_hosts, lock or threading.Lock()) if accept_new else paramiko.RejectPolicy())
    try:
        client.connect(host.ssh_host, port=host.ssh_port, username=host.user, key_filename=host.key,
                       look_for_keys=False, allow_agent=False, timeout=timeout_s, banner_timeout=timeout_s,
                       auth_timeout=timeout_s)
    except paramiko.BadHostKeyException as exc:
        client.close()
        raise HostsError("ssh", {host.name: explain(f"REMOTE HOST IDENTIFICATION HAS CHANGED: {exc}", host.user,
                                                    str(known_hosts))}) from None
    except paramiko.AuthenticationException as exc:
        client.close()
        raise HostsError("ssh", {host.name: explain(f"Permission denied (publickey): {exc}", host.user)}) from None
    except paramiko.SSHException as exc:
        client.close()
        raise HostsError("ssh", {host.name: explain(str(exc), host.user, str(known_hosts))}) from None
    except (OSError, socket.timeout) as exc:
        client.close()
        raise HostsError("ssh", {host.name: explain(f"{host.ssh_host}:{host.ssh_port}: {exc}")}) from None
    return client


class AgentSession:
    def __init__(self, host: Host, lab: str, known_hosts: Path, accept_new: bool = False,
                 lock: threading.Lock | None = None, timeout_s: float = 5.0):
        self.host, self.lab = host, lab
        self.lock = threading.Lock()
        self.client = open_client(host, known_hosts, accept_new, lock, timeout_s)
        try:
            tr = self.client.get_transport()
            tr.set_keepalive(5)
            d = host.lab_dir(lab)
            argv = [f"{d}/venv/bin/python", "-u", f"{d}/agent.py", f"{d}/run/agent.json"]
            if host.become:
                argv = ["sudo", "-n", "--", *argv]
            self.chan = tr.open_session()
            self.chan.exec_command(shlex.join(argv))       # paths validated by the hosts file, quoted
            self.rfile = self.chan.makefile("rb")
            self.chan.settimeout(30)
            hello = self._readline()
            if not hello.get("ok"):
                raise HostsError("agent", {host.name: f"the agent did not start: {hello.get('error')}"})
        except BaseException:
            self.client.close()
            raise

    def _readline(self) -> dict:
        try:
            line = self.rfile.readline()
        except socket.timeout:
            line = b""
        if not line:
            err = b""
            while self.chan.recv_stderr_ready():
                err += self.chan.recv_stderr(65536)
            return {"ok": False, "error": explain(err.decode(errors="replace").strip() or "the session closed",
                                                  self.host.user)}
        return json.loads(line)

    def request(self, req: dict) -> dict:
        with self.lock:
            self.chan.sendall(json.dumps(req).encode() + b"\n")
            return self._readline()

    def measure_clock(self, n: int = 15) -> clock.Offset:
        def ask() -> float:
            r = self.request({"op": "time"})
            if not r.get("ok"):
                raise HostsError("clock", {self.host.name: r.get("error", "no answer")})
            return r["t"]
        return clock.measure(ask, n)

    def close(self) -> None:
        try:
            if not self.chan.closed:
                self.chan.sendall(b'{"op": "bye"}\n')
                self.chan.shutdown_write()
        except (OSError, paramiko.SSHException):
            pass
        self.client.close()


class Sessions:
    """One AgentSession per host, opened in parallel; errors collected per host."""

    def __init__(self, hosts: list[Host], lab: str, known_hosts: Path, accept_new: bool = False):
        self.by_member: dict[str, AgentSession] = {}
        lock = threading.Lock()
        errors: dict[str, str] = {}

        def open_one(h: Host):
            try:
                self.by_member[h.member] = AgentSession(h, lab, known_hosts, accept_new, lock)
            except HostsError as exc:
                errors.update(exc.per_host or {h.name: str(exc)})
            except Exception as exc:  # noqa: BLE001 - reported per host
                errors[h.name] = f"{type(exc).__name__}: {exc}"

        with ThreadPoolExecutor(max_workers=min(16, len(hosts))) as ex:
            list(ex.map(open_one, hosts))
        if errors:
            self.close()
            raise HostsError(f"cannot open the control sessions on {len(errors)} host(s):", errors)

    def each(self, members: list[str], req: dict) -> dict[str, dict]:
        """Send `req` (with "node" filled in) to the agents of `members`, in parallel."""
        def one(m: str):
            t = time.monotonic()
            r = self.by_member[m].request({**req, "node": m})
            r["rtt_s"] = time.monotonic() - t
            return m, r
        if len(members) == 1:
            return dict([one(members[0])])
        with ThreadPoolExecutor(max_workers=min(16, len(members))) as ex:
            return dict(ex.map(one, members))

    def close(self) -> None:
        for s in self.by_member.values():
            s.close()
        self.by_member.clear()
