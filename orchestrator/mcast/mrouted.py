"""The multicast routing daemon: ONE orchestrator-owned process holds the kernel multicast routing socket of every
namespace on a group's tree (docs/multicast.md).

The kernel's multicast forwarding cache (MFC) and its interfaces (vifs) live only while the socket that set them
(MRT_INIT) stays open, so something must hold one socket per namespace for the lab's lifetime. As the delay line
does for its NFQUEUEs, this process enters each namespace (setns), opens a raw IGMP socket there, registers the
vifs and the (S,G) routes the plan gives (orchestrator.mcast.tree.node_mroute), returns to its own namespace,
prints `READY <pid>` and then only drains the sockets (kernel upcalls: packets without a route) and answers a
control socket. Closing a socket (exit, SIGKILL) removes that namespace's routes and vifs: the kernel cleans up.

    python -m orchestrator.mcast.mrouted --config CONFIG.json

Config (JSON, written by the orchestrator):
    {"control": "/path/mr.sock",
     "namespaces": [{"node": "h3", "netns": "/run/netns/lab-h3", "vifs": ["mc0", "h3-eth0"],
                     "mfc": [{"group": "239.1.0.1", "origin": "10.0.0.3", "iif": "mc0", "oifs": ["h3-eth0"]}]}]}

Control channel: one JSON request per line on a unix stream socket, one JSON answer per line:
    {"op": "ping"}  -> {"ok": true, "pid", "namespaces", "vifs", "mfc"}   (what was installed)
    {"op": "stats"} -> {"ok": true, "nodes": {node: {"mfc": resolved entries, "packets", "wrong_if"}}, "upcalls"}
    {"op": "mfc", "nodes": {node: {"set": [route...], "delete": [{"group", "origin"}...]}}}
                    -> {"ok": true, "set": n, "deleted": n}   (the routes change while members join and leave:
                       orchestrator.mcast.tree.mfc_changes; the vifs stay as installed)
    {"op": "shutdown"}

There is no library for the kernel's MRT_* socket options (pyroute2 speaks netlink, and the MFC is only writable
through setsockopt on the IGMP socket, as mrouted/pimd/smcroute do), so the structs are packed here with `struct`
(include/uapi/linux/mroute.h).
"""
from __future__ import annotations

import argparse
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

from orchestrator.errors import BackendError, OrchestratorError

# include/uapi/linux/mroute.h
MRT_INIT, MRT_DONE, MRT_ADD_VIF, MRT_DEL_VIF, MRT_ADD_MFC, MRT_DEL_MFC = 200, 201, 202, 203, 204, 205
VIFF_USE_IFINDEX = 0x8
MAXVIFS = 32
# struct vifctl { u16 vifi; u8 flags; u8 threshold; u32 rate_limit; union {in_addr lcl_addr; int lcl_ifindex};
#                 in_addr rmt_addr; }
VIFCTL = struct.Struct("=HBBIi4s")
# struct mfcctl { in_addr origin; in_addr mcastgrp; u16 parent; u8 ttls[32]; (pad) u32 pkt, byte, wrong_if;
#                 int expire; }
MFCCTL = struct.Struct("=4s4sH32s2xIIIi")
IPPROTO_IGMP = 2


def _log(msg: str) -> None:
    sys.stderr.write(f"{time.strftime('%H:%M:%S')} mrouted[{os.getpid()}]: {msg}\n")
    sys.stderr.flush()


def vifctl(vifi: int, ifindex: int, threshold: int = 1) -> bytes:
    return VIFCTL.pack(vifi, VIFF_USE_IFINDEX, threshold, 0, ifindex, b"\0" * 4)


def mfcctl(origin: str, group: str, parent: int, oifs: list[int]) -> bytes:
    ttls = bytearray(MAXVIFS)
    for v in oifs:
        ttls[v] = 1                 # forward when the packet's TTL > 1 (then decremented)
    return MFCCTL.pack(socket.inet_aton(origin), socket.inet_aton(group), parent, bytes(ttls), 0, 0, 0, 0)


def in_netns(path: str):
    """The delay line's namespace entry (orchestrator.shaping.nfqueue.in_netns), imported when first used."""
    from orchestrator.shaping.nfqueue import in_netns as enter

    return enter(path)


class Router:
    """One namespace's multicast routing socket, its vifs and routes."""

    def __init__(self, spec: dict):
        self.node = spec["node"]
        self.netns = spec["netns"]
        self.vifs: list[str] = list(spec["vifs"])
        if len(self.vifs) > MAXVIFS:
            raise ValueError(f"{self.node}: {len(self.vifs)} vifs, the kernel allows {MAXVIFS}")
        self.mfc = spec["mfc"]
        self.mfc_count = len(self.mfc)
        self.sock: socket.socket | None = None
        self.upcalls = 0
        self.index: dict[str, int] = {}

    def install(self) -> None:
        """setns into the namespace, open the socket there, register vifs and routes, come back."""
        with in_netns(self.netns):
            try:
                s = socket.socket(socket.AF_INET, socket.SOCK_RAW, IPPROTO_IGMP)
                self.sock = s
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
                s.setsockopt(socket.IPPROTO_IP, MRT_INIT, 1)
                index = {}
                for vifi, ifname in enumerate(self.vifs):
                    s.setsockopt(socket.IPPROTO_IP, MRT_ADD_VIF, vifctl(vifi, socket.if_nametoindex(ifname)))
                    index[ifname] = vifi
                self.index = index
                for e in self.mfc:
                    s.setsockopt(socket.IPPROTO_IP, MRT_ADD_MFC,
                                 mfcctl(e["origin"], e["group"], index[e["iif"]], [index[i] for i in e["oifs"]]))
                s.setblocking(False)
            except OSError as exc:
                raise OSError(exc.errno, f"{self.node}: {exc.strerror}") from None

    def change(self, routes: list[dict], delete: list[dict]) -> tuple[int, int]:
        """Delete routes (one that is not there is no error), then add or update `routes` (MRT_ADD_MFC replaces
        the route of the same origin and group). The socket is this namespace's: no setns needed."""
        deleted = 0
        for d in delete:
            try:
                self.sock.setsockopt(socket.IPPROTO_IP, MRT_DEL_MFC, mfcctl(d["origin"], d["group"], 0, []))
                deleted += 1
            except FileNotFoundError:
                pass
        for e in routes:
            self.sock.setsockopt(socket.IPPROTO_IP, MRT_ADD_MFC, mfcctl(
                e["origin"], e["group"], self.index[e["iif"]], [self.index[i] for i in e["oifs"]]))
        return len(routes), deleted

    def drain(self) -> None:
        while True:
            try:
                self.sock.recv(2048)
                self.upcalls += 1
            except (BlockingIOError, InterruptedError):
                return

    def cache(self) -> dict:
        """The namespace's MFC as the kernel shows it (/proc/net/ip_mr_cache read inside the namespace)."""
        with in_netns(self.netns):
            text = Path("/proc/thread-self/net/ip_mr_cache").read_text()
        return parse_cache(text)


def parse_cache(text: str) -> dict:
    """/proc/net/ip_mr_cache -> resolved entries, packets and wrong-interface arrivals, in all and per group.
    Addresses are printed as the hex of the network-order word read in host order (%08X)."""
    out = {"mfc": 0, "packets": 0, "wrong_if": 0, "groups": {}}
    for line in text.splitlines()[1:]:
        f = line.split()
        if len(f) < 6 or f[2] == "-1":          # unresolved (queued) entries have no incoming interface
            continue
        group = socket.inet_ntoa(struct.pack("=I", int(f[0], 16)))
        g = out["groups"].setdefault(group, {"mfc": 0, "packets": 0, "wrong_if": 0})
        for d in (out, g):
            d["mfc"] += 1
            d["packets"] += int(f[3])
            d["wrong_if"] += int(f[5])
    return out


def serve(config: dict) -> int:
    routers = [Router(ns) for ns in config["namespaces"]]
    stop: list[int] = []
    rfd, wfd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wfd)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda s, _f: stop.append(s))
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        t0 = time.monotonic()
        for r in routers:
            r.install()
        took = time.monotonic() - t0
        for r in routers:                       # the kernel holds the routes now: drop our copy of them
            r.mfc_count, r.mfc = len(r.mfc), None
        del config["namespaces"]
        import ctypes
        import gc

        gc.collect()
        ctypes.CDLL(None).malloc_trim(0)        # give the freed config back to the system
        try:
            os.unlink(config["control"])
        except FileNotFoundError:
            pass
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(config["control"])
        listener.listen(16)
        listener.setblocking(False)
    except (OSError, ValueError, KeyError) as exc:
        for r in routers:
            if r.sock:
                r.sock.close()
        sys.stdout.write(f"ERROR {exc}\n")
        sys.stdout.flush()
        _log(f"startup failed: {exc}")
        return 1
    installed = {"namespaces": len(routers), "vifs": sum(len(r.vifs) for r in routers),
                 "mfc": sum(r.mfc_count for r in routers), "install_s": round(took, 4)}
    _log(f"installed {installed}")
    sys.stdout.write(f"READY {os.getpid()}\n")
    sys.stdout.flush()

    ep = select.epoll()
    by_fd = {r.sock.fileno(): r for r in routers}
    for fd in by_fd:
        ep.register(fd, select.EPOLLIN)
    ep.register(listener.fileno(), select.EPOLLIN)
    ep.register(rfd, select.EPOLLIN)
    clients: dict[int, list] = {}

    def answer(line: bytes) -> dict:
        try:
            req = json.loads(line)
            op = req.get("op")
            if op == "ping":
                return {"ok": True, "pid": os.getpid(), **installed}
            if op == "stats":
                return {"ok": True, "nodes": {r.node: r.cache() for r in routers},
                        "upcalls": sum(r.upcalls for r in routers), **installed}
            if op == "mfc":
                by_node = {r.node: r for r in routers}
                unknown = sorted(set(req["nodes"]) - set(by_node))
                if unknown:
                    return {"ok": False, "error": f"no routes of node(s) {unknown[:5]} here"}
                done = [by_node[n].change(c.get("set", []), c.get("delete", [])) for n, c in req["nodes"].items()]
                counts = {"nodes": len(done), "set": sum(a for a, _ in done), "deleted": sum(b for _, b in done)}
                _log(f"routes changed: {counts}")
                return {"ok": True, **counts}
            if op == "shutdown":
                stop.append(0)
                return {"ok": True}
            return {"ok": False, "error": f"unknown op {op!r}"}
        except (ValueError, OSError, AttributeError, KeyError, TypeError) as exc:
            return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}

    while not stop:
        for fd, ev in ep.poll(1.0):
            if fd in by_fd:
                by_fd[fd].drain()
            elif fd == rfd:
                try:
                    os.read(rfd, 512)
                except BlockingIOError:
                    pass
            elif fd == listener.fileno():
                try:
                    c, _ = listener.accept()
                except (BlockingIOError, InterruptedError):
                    continue
                c.setblocking(True)
                c.settimeout(5)
                clients[c.fileno()] = [c, b""]
                ep.register(c.fileno(), select.EPOLLIN)
            elif fd in clients:
                c, buf = clients[fd]
                try:
                    data = c.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    ep.unregister(fd)
                    c.close()
                    del clients[fd]
                    continue
                buf += data
                while b"\n" in buf:
                    line, _, buf = buf.partition(b"\n")
                    try:
                        c.sendall((json.dumps(answer(line)) + "\n").encode())
                    except OSError:
                        break
                clients[fd][1] = buf
    _log(f"stopping (signal {stop[0]})" if stop[0] else "stopping (shutdown request)")
    for r in routers:
        r.sock.close()              # the kernel removes the namespace's routes and vifs
    listener.close()
    try:
        os.unlink(config["control"])
    except OSError:
        pass
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m orchestrator.mcast.mrouted", description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True)
    args = ap.parse_args(argv)
    with open(args.config) as f:
        config = json.load(f)
    return serve(config)


# --- the orchestrator's side --------------------------------------------------------------------------------------
def start(config_path: str | os.PathLike, log_path: str | os.PathLike, timeout: float = 120.0) -> subprocess.Popen:
    """Start the daemon (its own session: it outlives `up`), wait for READY; BackendError with its log otherwise."""
    argv = [sys.executable, "-m", "orchestrator.mcast.mrouted", "--config", str(config_path)]
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log, env=env,
                                start_new_session=True, close_fds=True)
    deadline = time.monotonic() + timeout
    line = b""
    while not line.endswith(b"\n") and time.monotonic() < deadline:
        r, _, _ = select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
        if not r:
            continue
        ch = os.read(proc.stdout.fileno(), 4096)
        if not ch:
            break
        line += ch
    text = line.decode(errors="replace").strip()
    if text.startswith("READY "):
        proc.stdout.close()
        return proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    proc.stdout.close()
    why = text[len("ERROR "):] if text.startswith("ERROR ") else f"no READY within {timeout} s"
    raise BackendError(f"the multicast routing daemon failed to start: {why} (log: {log_path})")


def call(control: str, req: dict, timeout: float = 10.0) -> dict:
    """One request on the control socket; BackendError when the daemon is gone or refuses."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(control)
            s.sendall((json.dumps(req) + "\n").encode())
            buf = b""
            while b"\n" not in buf:
                chunk = s.recv(1 << 20)
                if not chunk:
                    break
                buf += chunk
    except OSError as exc:
        raise BackendError(f"the multicast routing daemon at {control} is gone ({exc.strerror or exc})") from None
    resp = json.loads(buf.partition(b"\n")[0] or b"{}")
    if not resp.get("ok"):
        raise OrchestratorError(f"the multicast routing daemon refused {req.get('op')!r}: {resp.get('error')}")
    return resp


if __name__ == "__main__":
    sys.exit(main())
