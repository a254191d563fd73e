"""Named network namespaces, driven in batches: one `ip -batch` / `tc -batch` per namespace, never one process
per route or qdisc. Every command is an argument list; batch input goes through stdin."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gossipnode.netns import entered

from orchestrator.errors import BackendError

NETNS_DIR = Path("/run/netns")


def run_checked(argv: list[str], stdin: str | None = None, what: str | None = None) -> str:
    r = subprocess.run(argv, input=stdin, capture_output=True, text=True)
    if r.returncode != 0:
        detail = r.stderr.strip() or r.stdout.strip() or f"exit {r.returncode}"
        raise BackendError(f"{what or argv[0]} failed: {' '.join(argv[:6])}{' ...' if len(argv) > 6 else ''}: "
                           f"{detail}")
    return r.stdout


def ip_batch(lines: list[str], ns: str | None = None, force: bool = False, tool: str = "ip") -> None:
    """Run `ip|tc [-n NS] [-force] -batch -` with `lines`; raise with the failing line on error."""
    if not lines:
        return
    argv = [tool] + (["-n", ns] if ns else []) + (["-force"] if force else []) + ["-batch", "-"]
    r = subprocess.run(argv, input="\n".join(lines) + "\n", capture_output=True, text=True)
    if r.returncode != 0 and not force:
        raise BackendError(f"{tool} -batch{' in ' + ns if ns else ''} failed: {r.stderr.strip()}")


def iptables_restore(ns: str, text: str) -> None:
    run_checked(["ip", "netns", "exec", ns, "iptables-restore", "--noflush", "-w"], stdin=text,
                what=f"iptables-restore in {ns}")


SILENT_COMMENT = "testbed-silent"


def silent_rules(on: bool) -> str:
    """iptables-restore input (with --noflush) for a member's namespace that drops (on) or stops dropping (off)
    every packet the namespace itself sends or receives (filter INPUT and OUTPUT; loopback excepted): a silent
    crash. Packets the namespace forwards for others (FORWARD) pass, so the tree stays connected; the mangle
    table, which the shapers rewrite whole, is not touched."""
    op, at = ("-I", " 1") if on else ("-D", "")
    return ("*filter\n"
            f"{op} INPUT{at} ! -i lo -m comment --comment {SILENT_COMMENT} -j DROP\n"
            f"{op} OUTPUT{at} ! -o lo -m comment --comment {SILENT_COMMENT} -j DROP\n"
            "COMMIT\n")


def write_sysctls(ns: str, values: dict[str, str]) -> None:
    """Write /proc/sys entries inside namespace `ns` (setns in this thread, then back)."""
    with in_netns(ns):
        for key, value in values.items():
            with open("/proc/sys/" + key.replace(".", "/"), "w") as f:
                f.write(value)


NEIGH_GC = "/proc/sys/net/ipv4/neigh/default/gc_thresh{}"


def neigh_thresholds(namespaces: int, current: tuple[int, int, int]) -> tuple[int, int, int]:
    """The kernel's ARP table is ONE table for every network namespace, with one size limit (gc_thresh3, 1024 by
    default, set in the initial namespace): past it no new neighbour entry is made ("neighbor table overflow!")
    and packets to an unresolved next hop are dropped. Every namespace of a tree holds about two entries per
    link end; 2 000 members on a 2 500-node tree lost three quarters of their traffic to it. Pure: the thresholds
    for `namespaces` namespaces on the machine (4 entries each, above the defaults), never lower than `current`."""
    want = (128 + 2 * namespaces, 512 + 3 * namespaces, 1024 + 4 * namespaces)
    return tuple(max(c, w) for c, w in zip(current, want))  # type: ignore[return-value]


def fit_neigh_table(namespaces: int) -> tuple[int, int, int] | None:
    """Raise the kernel's global ARP table limits for `namespaces` namespaces (never lowers them; a machine
    setting, left raised after teardown). Returns the new thresholds when it changed them. Outside the initial
    network namespace (a "machine" of tests/integration/test_machines.py) the limits are not there to read: None."""
    try:
        current = tuple(int(open(NEIGH_GC.format(i)).read()) for i in (1, 2, 3))
    except FileNotFoundError:
        return None
    new = neigh_thresholds(namespaces, current)  # type: ignore[arg-type]
    if new == current:
        return None
    for i in (3, 2, 1):                       # the kernel wants thresh1 <= thresh2 <= thresh3 at every step
        with open(NEIGH_GC.format(i), "w") as f:
            f.write(str(new[i - 1]))
    return new


def disable_offloads(ns: str, ifnames: Iterable[str]) -> None:
    """`ethtool -K IF tso off gso off gro off` for each interface of namespace `ns`, in process (pyroute2's
    ethtool, setns in this thread): one packet per wire packet for a userspace shaper, no process per interface."""
    from pyroute2.ethtool import Ethtool

    with in_netns(ns):
        tool = Ethtool()      # its sockets belong to the namespace they are opened in
        try:
            for ifname in ifnames:
                feats = tool.get_features(ifname)
                for name, feat in feats.features.items():
                    if name in ("tx-generic-segmentation", "rx-gro") or (
                            name.startswith("tx-tcp") and name.endswith("segmentation")):
                        feat.enable = False
                tool.set_features(ifname, feats)
        except OSError as exc:
            raise BackendError(f"disabling offloads in {ns}: {exc}") from exc
        finally:
            tool.close()


# Move the calling thread (only it) into named namespace `ns`, and back — thread-safe, never creating a missing
# namespace: the node's `gossipnode.netns.entered` (setns(2) on this thread; the way back is its own namespace).
in_netns = entered


def parallel(fn, items: Iterable, workers: int = 4, on_done=None) -> None:
    """Apply `fn` to every item with a few threads (each spawns a process); first error wins."""
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for _ in pool.map(lambda it: (fn(it), on_done and on_done()), items):
            pass


def existing(namespaces: Iterable[str]) -> list[str]:
    return [ns for ns in namespaces if (NETNS_DIR / ns).exists()]


def existing_all() -> list[str]:
    """Every named namespace on the machine (every lab's, and others')."""
    try:
        return os.listdir(NETNS_DIR)
    except FileNotFoundError:
        return []


def pids_in(namespaces: Iterable[str]) -> list[int]:
    """Processes whose network namespace is one of `namespaces` (by inode; one pass over /proc)."""
    inodes = set()
    for ns in namespaces:
        try:
            inodes.add(os.stat(NETNS_DIR / ns).st_ino)
        except OSError:
            pass
    if not inodes:
        return []
    pids = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry.name}/ns/net").st_ino in inodes:
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def kill_and_wait(pids: list[int], timeout_s: float = 5.0) -> list[int]:
    """SIGKILL `pids` and wait until they are gone; return those still alive after `timeout_s`."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout_s
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if Path(f"/proc/{p}").exists() and not _is_zombie(p)]
        if alive:
            time.sleep(0.02)
    return alive


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def delete_namespaces(namespaces: list[str]) -> None:
    ip_batch([f"netns del {ns}" for ns in existing(namespaces)], force=True)
    left = existing(namespaces)
    if left:
        raise BackendError(f"could not delete {len(left)} namespaces, e.g. {left[0]}")
