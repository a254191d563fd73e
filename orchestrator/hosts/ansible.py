"""The one module that imports ansible_runner (as AWX does: awx/main/tasks/jobs.py).

A private data dir (mode 0700) per lab or run: `inventory/hosts.yml`, `env/extravars`, `env/envvars`,
`env/settings`, and ansible-runner's `artifacts/<ident>/` (every event as JSON). Playbooks live in the repo's
`playbooks/`. Runner events are streamed to the caller's progress (task names, per-host results); the statuses
failed / timeout / canceled and every failed or unreachable host become a `HostsError` that names each host and
what went wrong there.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import signal
import shutil
import subprocess
import tempfile
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.errors import OrchestratorError

PLAYBOOKS = Path(__file__).resolve().parent.parent.parent / "playbooks"
SSH_OPT_PATH_RE = re.compile(r"^[A-Za-z0-9_./@+-]+$")


class HostsError(OrchestratorError):
    """Something failed on one or more hosts: `per_host` maps each to a one-line reason."""

    def __init__(self, message: str, per_host: dict[str, str] | None = None):
        self.per_host = dict(per_host or {})
        lines = [message] + [f"  {h}: {why}" for h, why in sorted(self.per_host.items())]
        super().__init__("\n".join(lines))


def explain(msg: str, user: str = "", known_hosts: str = "") -> str:
    """Add what to do to the errors everybody meets first."""
    m = " ".join(str(msg).split())
    low = m.lower()
    if "host key verification failed" in low or "not found in known_hosts" in low:
        return (f"{m} -- the host's key is not in {known_hosts or 'known_hosts'}: verify its fingerprint and add it, "
                "or pass --accept-new-host-keys to accept keys of hosts not seen before")
    if "remote host identification has changed" in low or "badhostkey" in low.replace(" ", ""):
        return f"{m} -- the host key CHANGED since it was recorded in {known_hosts or 'known_hosts'}: not connecting"
    if "permission denied (publickey" in low or "authentication failed" in low:
        return f"{m} -- the host does not accept this key for user {user or '?'} (wrong key or user?)"
    if ("sudo" in low and "password" in low) or "is not in the sudoers" in low:
        return (f"{m} -- user {user or '?'} cannot run sudo without a password; the hosts backend needs root "
                "(tc, tcpdump, the node) through passwordless sudo, or log in as root")
    if any(s in low for s in ("no route to host", "timed out", "connection refused", "could not resolve",
                              "network is unreachable")):
        return f"unreachable: {m}"
    return m


@dataclass
class PlaybookResult:
    status: str
    rc: int
    failures: dict[str, str] = field(default_factory=dict)     # host -> first error
    touched: set[str] = field(default_factory=set)             # hosts where at least one task succeeded
    reports: dict[str, dict] = field(default_factory=dict)     # host -> `debug: msg` of tasks named "report ..."
    elapsed_s: float = 0.0


@dataclass
class AnsibleContext:
    data_dir: Path
    inventory: str                      # rendered inventory (YAML text)
    extravars: dict
    known_hosts: Path
    accept_new_host_keys: bool = False
    users: dict[str, str] = field(default_factory=dict)    # host -> ssh user (for error hints)
    forks: int = 16
    timeout_s: int = 600
    _count: int = 0
    _cp_dir: Path | None = None

    def prepare(self) -> None:
        for sub in ("inventory", "env", "tmp"):
            (self.data_dir / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(self.data_dir, 0o700)
        (self.data_dir / "inventory" / "hosts.yml").write_text(self.inventory)
        (self.data_dir / "env" / "extravars").write_text(json.dumps(self.extravars, indent=1))
        (self.data_dir / "env" / "settings").write_text(json.dumps(
            {"suppress_ansible_output": True, "job_timeout": self.timeout_s}))
        for p in (self.known_hosts,):
            if not SSH_OPT_PATH_RE.match(str(p)):
                raise OrchestratorError(f"{p}: use a path of letters, digits and _ . / @ + - for known_hosts")
        # One SSH connection per host, reused by every task (ControlMaster); `close()` ends the masters.
        self._cp_dir = Path(tempfile.mkdtemp(prefix="gtcp-", dir="/tmp"))
        ssh_args = ["-o", "ControlMaster=auto", "-o", "ControlPersist=120s", "-o", "BatchMode=yes",
                    "-o", "IdentitiesOnly=yes", "-o", "ConnectTimeout=5", "-o", f"UserKnownHostsFile={self.known_hosts}",
                    "-o", "GlobalKnownHostsFile=/dev/null",
                    "-o", f"StrictHostKeyChecking={'accept-new' if self.accept_new_host_keys else 'yes'}"]
        envvars = {
            "ANSIBLE_HOST_KEY_CHECKING": "True",
            "ANSIBLE_SSH_ARGS": shlex.join(ssh_args),
            "ANSIBLE_PIPELINING": "True",
            "ANSIBLE_SSH_CONTROL_PATH_DIR": str(self._cp_dir),
            "ANSIBLE_TIMEOUT": "5",
            "ANSIBLE_RETRY_FILES_ENABLED": "False",
            "ANSIBLE_LOCAL_TEMP": str(self.data_dir / "tmp"),
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_FORKS": str(self.forks),
            "ANSIBLE_DEPRECATION_WARNINGS": "False",
            "ANSIBLE_ROLES_PATH": str(PLAYBOOKS / "roles"),
            # ansible-playbook from this interpreter's environment (the venv), whatever the caller's PATH
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "/usr/bin:/bin")]),
        }
        (self.data_dir / "env" / "envvars").write_text(json.dumps(envvars, indent=1))

    def run(self, playbook: str, progress=None, limit: list[str] | None = None,
            cancel: threading.Event | None = None) -> PlaybookResult:
        """Run `playbooks/<playbook>`; raise nothing (see `check`)."""
        import time

        import ansible_runner

        self._count += 1
        ident = f"{self._count:02d}-{Path(playbook).stem}"
        res = PlaybookResult(status="unknown", rc=-1)

        def on_event(ev: dict) -> bool:          # hot path: cheap, .get() only
            kind = ev.get("event")
            data = ev.get("event_data") or {}
            host = data.get("host")
            if kind == "playbook_on_task_start" and progress is not None:
                task = data.get("task") or ""
                if not task.startswith("report "):
                    progress.note(f"  [{Path(playbook).stem}] {task}")
            elif kind in ("runner_on_ok", "runner_on_skipped") and host:
                if kind == "runner_on_ok":
                    res.touched.add(host)
                task = data.get("task") or ""
                if task.startswith("report ") and kind == "runner_on_ok":
                    msg = (data.get("res") or {}).get("msg")
                    if isinstance(msg, dict):
                        res.reports.setdefault(host, {}).update(msg)
            elif kind in ("runner_on_failed", "runner_on_unreachable") and host:
                if kind == "runner_on_failed" and data.get("ignore_errors"):
                    return True
                r = data.get("res") or {}
                why = r.get("msg") or r.get("stderr") or r.get("module_stderr") or "failed"
                if r.get("stderr") and r.get("msg") and r["stderr"] not in r["msg"]:
                    why = f"{r['msg']}: {r['stderr']}"
                text = explain(str(why)[:600], self.users.get(host, ""), str(self.known_hosts))
                if host not in res.failures:
                    where = "unreachable" if kind == "runner_on_unreachable" else f"task '{data.get('task')}'"
                    res.failures[host] = text if text.startswith("unreachable") else f"{where}: {text}"
                    if progress is not None:
                        progress.note(f"  [{Path(playbook).stem}] FAILED on {host}: {res.failures[host]}")
            return True

        t0 = time.monotonic()
        # Always our own cancel callback: without one, ansible-runner installs SIGINT/SIGTERM handlers of its own
        # (and keeps them), so Ctrl-C would no longer interrupt the run afterwards. Restore them anyway.
        saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)} \
            if threading.current_thread() is threading.main_thread() else {}
        try:
            r = ansible_runner.run(
                private_data_dir=str(self.data_dir), project_dir=str(PLAYBOOKS), playbook=str(PLAYBOOKS / playbook),
                ident=ident, limit=",".join(limit) if limit else None, quiet=True, event_handler=on_event,
                cancel_callback=(lambda: cancel.is_set()) if cancel is not None else (lambda: False))
        finally:
            for s, h in saved.items():
                signal.signal(s, h)
        res.elapsed_s = time.monotonic() - t0
        res.status, res.rc = r.status, r.rc
        return res

    def close(self) -> None:
        """End the SSH master connections of this context (nothing of it outlives the command)."""
        d = getattr(self, "_cp_dir", None)
        if d is None:
            return
        for sock in d.iterdir() if d.exists() else []:
            subprocess.run(["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "gossip-testbed-control"],
                           capture_output=True, timeout=10)
        shutil.rmtree(d, ignore_errors=True)
        self._cp_dir = None

    def check(self, res: PlaybookResult, what: str) -> None:
        if res.status == "successful" and not res.failures:
            return
        if res.status in ("timeout", "canceled"):
            raise HostsError(f"{what}: ansible-runner {res.status}", res.failures)
        if not res.failures:
            raise HostsError(f"{what}: ansible-playbook failed (status {res.status}, rc {res.rc}); "
                             f"see {self.data_dir}/artifacts")
        raise HostsError(f"{what} failed on {len(res.failures)} host(s):", res.failures)
