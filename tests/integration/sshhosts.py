"""Real SSH hosts on this machine for the hosts backend's tests: network namespaces running openssh-server.

    root namespace  <id>c 10.250.N.1/24 ──┐
                                         br0 in namespace <id>sw (a switch: hosts reach each other and us)
    namespace <id>h1 eth0 10.250.N.11/24 ┘ ... one per host, each with its own sshd (own config, host key,
                                               pid file), listening only on its own address

Only addresses in a 10.250.N.0/24 this machine does not use yet are created. Users: `<id>u` (passwordless
sudo, via a sudoers.d file) and `<id>n` (no sudo), homes and authorized keys under the temp dir. `close()`
removes everything: sshd processes, any process left in the namespaces, the namespaces (their veths go with
them), the users, the sudoers file, the temp dir.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

SSHD = "/usr/sbin/sshd"


def sh(argv: list[str], check: bool = True, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(argv, capture_output=True, text=True, **kw)
    if check and r.returncode != 0:
        raise RuntimeError(f"{argv}: exit {r.returncode}: {r.stderr.strip()}")
    return r


def free_subnet() -> int:
    used = sh(["ip", "-4", "-o", "addr"]).stdout + sh(["ip", "-4", "route"]).stdout
    for n in range(200, 255):
        if f"10.250.{n}." not in used:
            return n
    raise RuntimeError("no free 10.250.N.0/24 on this machine")


@dataclass
class SshHosts:
    count: int
    ident: str = field(default_factory=lambda: f"gt{os.getpid() % 100000}")
    dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="gth-")))
    subnet: int = 0
    sshd: list[subprocess.Popen] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)
    users: list[str] = field(default_factory=list)
    sudoers: Path | None = None
    made_privsep: bool = False
    # sshd (and so every command run over SSH) in the host's network namespace only, with this machine's mounts:
    # the "machines" tests build labs over SSH, whose namespaces (bind mounts in /run/netns) must be seen here.
    # `ip netns exec` gives a private mount namespace, where they would not be.
    share_mounts: bool = False

    # addresses and names
    def addr(self, i: int) -> str:
        return f"10.250.{self.subnet}.{10 + i}"

    def ns(self, i: int) -> str:
        return f"{self.ident}h{i}"

    @property
    def sudo_user(self) -> str:
        return f"{self.ident}u"

    @property
    def plain_user(self) -> str:
        return f"{self.ident}n"

    @property
    def key(self) -> Path:
        return self.dir / "keys" / "client"

    @property
    def wrong_key(self) -> Path:
        return self.dir / "keys" / "wrong"

    @property
    def known_hosts(self) -> Path:
        return self.dir / "known_hosts"

    def workdir(self, i: int) -> str:
        return str(self.dir / "w" / f"h{i}")

    # build
    def start(self) -> "SshHosts":
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def _start(self) -> None:
        os.chmod(self.dir, 0o755)
        self.subnet = free_subnet()
        keys = self.dir / "keys"
        keys.mkdir()
        for k in (self.key, self.wrong_key):
            sh(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", k.name, "-f", str(k)])
        auth = self.dir / "authorized"
        auth.mkdir()
        # users: one with passwordless sudo, one without; '*' password: not locked, no password login
        (self.dir / "home").mkdir()
        for user in (self.sudo_user, self.plain_user):
            sh(["useradd", "-M", "-d", str(self.dir / "home" / user), "-s", "/bin/sh", "-p", "*", user])
            self.users.append(user)
            (self.dir / "home" / user).mkdir()
            shutil.chown(self.dir / "home" / user, user, user)
        self.sudoers = Path(f"/etc/sudoers.d/gossip-testbed-{self.ident}")
        self.sudoers.write_text(f"{self.sudo_user} ALL=(ALL:ALL) NOPASSWD: ALL\n")
        self.sudoers.chmod(0o440)
        pub = self.key.with_suffix(".pub").read_text()
        for user in ("root", self.sudo_user, self.plain_user):
            (auth / user).write_text(pub)
        if not Path("/run/sshd").exists():
            Path("/run/sshd").mkdir(mode=0o755)
            self.made_privsep = True
        # the switch and the controller's port
        sw = f"{self.ident}sw"
        sh(["ip", "netns", "add", sw])
        self.namespaces.append(sw)
        sh(["ip", "-n", sw, "link", "add", "br0", "type", "bridge"])
        sh(["ip", "-n", sw, "link", "set", "br0", "up"])
        sh(["ip", "link", "add", f"{self.ident}c", "type", "veth", "peer", "name", f"{self.ident}cp", "netns", sw])
        sh(["ip", "-n", sw, "link", "set", f"{self.ident}cp", "master", "br0", "up"])
        sh(["ip", "addr", "add", f"10.250.{self.subnet}.1/24", "dev", f"{self.ident}c"])
        sh(["ip", "link", "set", f"{self.ident}c", "up"])
        known = []
        for i in range(1, self.count + 1):
            ns = self.ns(i)
            sh(["ip", "netns", "add", ns])
            self.namespaces.append(ns)
            sh(["ip", "-n", ns, "link", "set", "lo", "up"])
            sh(["ip", "-n", sw, "link", "add", f"p{i}", "type", "veth", "peer", "name", "eth0", "netns", ns])
            sh(["ip", "-n", sw, "link", "set", f"p{i}", "master", "br0", "up"])
            sh(["ip", "-n", ns, "addr", "add", f"{self.addr(i)}/24", "dev", "eth0"])
            sh(["ip", "-n", ns, "link", "set", "eth0", "up"])
            hd = self.dir / "sshd" / f"h{i}"
            hd.mkdir(parents=True)
            sh(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"h{i}", "-f", str(hd / "host_key")])
            (hd / "sshd_config").write_text("\n".join([
                f"ListenAddress {self.addr(i)}", "Port 22", f"HostKey {hd / 'host_key'}",
                f"PidFile {hd / 'sshd.pid'}", f"AuthorizedKeysFile {auth}/%u", "StrictModes no",
                "PasswordAuthentication no", "KbdInteractiveAuthentication no", "PermitRootLogin prohibit-password",
                "UsePAM no", "PrintMotd no", "Subsystem sftp internal-sftp", "LogLevel ERROR", ""]))
            log = open(hd / "sshd.log", "w")
            enter = ["nsenter", f"--net=/run/netns/{ns}"] if self.share_mounts else ["ip", "netns", "exec", ns]
            self.sshd.append(subprocess.Popen([*enter, SSHD, "-D", "-e", "-f",
                                               str(hd / "sshd_config")], stdout=log, stderr=subprocess.STDOUT,
                                              stdin=subprocess.DEVNULL))
            log.close()
            hostkey = (hd / "host_key.pub").read_text().split()
            known.append(f"{self.addr(i)} {hostkey[0]} {hostkey[1]}\n")
        self.known_hosts.write_text("".join(known))
        deadline = time.monotonic() + 15
        for i in range(1, self.count + 1):
            while True:
                try:
                    socket.create_connection((self.addr(i), 22), timeout=0.5).close()
                    break
                except OSError:
                    if time.monotonic() > deadline or self.sshd[i - 1].poll() is not None:
                        raise RuntimeError(f"sshd of h{i} does not listen: "
                                           f"{(self.dir / 'sshd' / f'h{i}' / 'sshd.log').read_text()}")
                    time.sleep(0.05)

    def hosts_file(self, path: Path, entries: list[dict] | None = None, user: str | None = None) -> Path:
        """A hosts file for hosts 1..count (or `entries`: overrides per host, keyed like the file)."""
        import yaml

        hosts = entries or [{} for _ in range(self.count)]
        doc = {"defaults": {"user": user or self.sudo_user, "key": str(self.key)},
               "hosts": [{"name": f"host{i}", "ssh": self.addr(i), "address": self.addr(i),
                          "workdir": self.workdir(i), **e} for i, e in enumerate(hosts, start=1)]}
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return path

    def inventory_file(self, path: Path, entries: list[dict] | None = None) -> Path:
        """The same hosts as an Ansible INI inventory (group `testbed`, the defaults as group vars)."""
        var = {"ssh": "ansible_host", "address": "testbed_address", "workdir": "testbed_workdir",
               "key": "ansible_ssh_private_key_file", "user": "ansible_user", "port": "ansible_port",
               "orchestrator": "testbed_orchestrator", "state_dir": "testbed_state_dir"}
        lines = ["[testbed]"]
        for i, e in enumerate(entries or [{} for _ in range(self.count)], start=1):
            h = {"ssh": self.addr(i), "address": self.addr(i), "workdir": self.workdir(i), **e}
            lines.append(f"host{i} " + " ".join(f"{var[k]}={v}" for k, v in h.items()))
        lines += ["", "[testbed:vars]", f"ansible_user={self.sudo_user}", f"ansible_ssh_private_key_file={self.key}"]
        path.write_text("\n".join(lines) + "\n")
        return path

    def processes_in(self, i: int) -> list[int]:
        r = sh(["ip", "netns", "pids", self.ns(i)], check=False)
        sshd_pids = set()
        for p in self.sshd:
            sshd_pids.add(p.pid)
        return [int(x) for x in r.stdout.split()]

    # remove
    def close(self) -> None:
        for p in self.sshd:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.sshd:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for ns in self.namespaces:           # anything still running inside our namespaces (ours only)
            r = sh(["ip", "netns", "pids", ns], check=False)
            for pid in r.stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
        time.sleep(0.1)
        for ns in reversed(self.namespaces):
            sh(["ip", "netns", "del", ns], check=False)
        self.namespaces.clear()
        sh(["ip", "link", "del", f"{self.ident}c"], check=False)   # normally gone with its peer
        if self.sudoers is not None:
            self.sudoers.unlink(missing_ok=True)
        for user in self.users:
            sh(["userdel", user], check=False)
        self.users.clear()
        if self.made_privsep:
            shutil.rmtree("/run/sshd", ignore_errors=True)
        shutil.rmtree(self.dir, ignore_errors=True)
