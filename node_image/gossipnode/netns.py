"""Open sockets inside a network namespace: `with entered("h3"): sock = socket.socket(...)`.

A socket belongs to the network namespace its creating thread was in when it was created, for its whole life;
entering a namespace is setns(2) on the calling thread only. So a packed process (several members, one thread)
enters a member's namespace around the creation of each of its sockets and goes back to its own at once.

Hand-written because nothing else does it here: `os.setns` only exists from Python 3.12 (the node image and the
venv run 3.11), pyroute2's netns helpers fork a helper process per call (a socket made there would have to be
passed back over a unix socket), and the node must not import the orchestrator. The orchestrator uses this one
(`orchestrator.shaping.nfqueue.in_netns` for the delay line and the multicast daemon,
`orchestrator.backends.netns.in_netns` for the backends). setns(2) through ctypes is ten lines.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Iterator
from contextlib import contextmanager

CLONE_NEWNET = 0x40000000
NETNS_DIR = "/run/netns"           # where `ip netns add NAME` (and the orchestrator) bind-mount named namespaces

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def setns(fd: int, nstype: int = CLONE_NEWNET) -> None:
    """setns(2) on the calling thread (needs CAP_SYS_ADMIN)."""
    if _libc.setns(fd, nstype) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def path_of(netns: str) -> str:
    """A namespace name (`ip netns` style, under /run/netns) or an absolute path (/proc/PID/ns/net, ...)."""
    return netns if netns.startswith("/") else os.path.join(NETNS_DIR, netns)


@contextmanager
def entered(netns: str | None) -> Iterator[None]:
    """Run the body inside `netns` (None: where we are), then return to the thread's own namespace. Sockets
    created in the body stay in `netns`. OSError if the namespace does not exist or we may not enter it."""
    if netns is None:
        yield
        return
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        target = os.open(path_of(netns), os.O_RDONLY | os.O_CLOEXEC)
        try:
            setns(target)
        finally:
            os.close(target)
        try:
            yield
        finally:
            setns(own)
    finally:
        os.close(own)
