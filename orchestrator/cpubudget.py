"""A CPU budget per member process, enforced by the kernel's CFS bandwidth control (issue #33, docs/virtual-time.md).

A member's budget `nodes: {cpu: C}` is in virtual cores; at dilation N its process gets C / N real cores (a pack of
P members P x C / N). Each member process gets a cgroup of its own, `<hierarchy>/orchestrator/<lab>/<unit>`, whose
quota per period is that share (`quota`): the quota is an upper bound, and the `orchestrator` and `<lab>` levels
carry the highest weight the kernel takes (v1 cpu.shares 262144, v2 cpu.weight 10000), so against other work on
the machine the members get their budgets first (their total stays capped by the quotas), which is the lower bound.

Hand-written because it is a handful of file writes (mkdir, cpu.cfs_quota_us/cpu.cfs_period_us or cpu.max,
cpu.shares or cpu.weight, cgroup.procs, rmdir) and no library in our stack does CFS bandwidth on both cgroup v1 and
v2: the hierarchies are found in /proc/self/mounts (`find_hierarchy`; the text is injectable): cgroup v1 with `cpu`
mounted alone and `cpuacct` separately (this project's 2-core machine), v1 with both co-mounted
(/sys/fs/cgroup/cpu,cpuacct), or cgroup v2 with the cpu controller available at its root (enabled down the tree
through each parent's cgroup.subtree_control; on v2 the root's `+cpu` is left in place at removal, other cgroups may
rely on it). No shell: every change is one write(2) to an existing control file (`SysOps`; the unit tests pass a
fake kernel working on a tmp directory).

What it records: every directory it will make, before making it (`Cgroups.plan`, or the `record` callback of
`create`, called before the first mkdir), so the lab state holds them and a teardown after a crash removes exactly
those (`Cgroups.remove`: tasks still inside go back to the hierarchy's root cgroup, then rmdir, deepest first; the
shared `orchestrator` directory only when no other lab is left in it). And what each unit got (`Cgroups.stats`:
CPU seconds used, CFS periods, periods throttled, seconds throttled), which tells whether a member ran into its
budget. `quota` is pure; what an experiment's budgets need is checked before anything is built by
`orchestrator.timebase.check_budgets`.
"""
from __future__ import annotations

import errno
import math
import os
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import CgroupError

PERIOD_US = 100_000          # the kernel's default CFS period
MAX_PERIOD_US = 1_000_000    # the kernel's longest period (max_cfs_quota_period, 1 s)
MIN_QUOTA_US = 1_000         # the kernel's smallest quota (min_cfs_quota_period, 1 ms)
MIN_REAL_CORES = MIN_QUOTA_US / MAX_PERIOD_US   # 0.001: less cannot be enforced
V1_SHARES_MAX = 262_144      # v1 cpu.shares maximum (MAX_SHARES); the default is 1024
V2_WEIGHT_MAX = 10_000       # v2 cpu.weight maximum; the default is 100
TOP = "orchestrator"         # <hierarchy>/orchestrator/<lab>/<unit>
NO_CPU = "cgroup: no cpu controller mounted (v1 /sys/fs/cgroup/cpu or v2 with the cpu controller)"
REMOVE_WAIT_S = 2.0          # rmdir retries this long while a moved-out task is still exiting (EBUSY)

_EPS = 1e-9                  # 30 x 0.2 / 3 is 2.0000000000000004 in floats: not more than 2 cores
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")   # no dot: never a control file's name (cpu.*, ...)
_RESERVED = {"tasks", "notify_on_release", "release_agent"}  # v1 control files without a dot


# --- pure ---------------------------------------------------------------------------------------------------------

def quota(cores_real: float, machine_cores: float | None = None) -> tuple[int, int]:
    """(quota_us, period_us) giving `cores_real` real cores: the default 100 000 µs period, or, when the quota
    would be below the kernel's 1 000 µs minimum, the period (up to 1 000 000 µs) at which a 1 000 µs quota is
    `cores_real`. ValueError (saying the budget, the real cores and why) when even 1 s is too short, or when
    `cores_real` is more than `machine_cores` (None: not checked)."""
    if not isinstance(cores_real, (int, float)) or isinstance(cores_real, bool) or not 0 < cores_real < math.inf:
        raise ValueError(f"cpu budget: {cores_real!r} real cores is not a positive number of cores")
    if machine_cores is not None and cores_real > machine_cores * (1 + _EPS):
        raise ValueError(f"cpu budget of {cores_real:.4g} real cores: more than the machine's {machine_cores:g} "
                         f"cores, a quota it could never deliver")
    q = round(cores_real * PERIOD_US)
    if q >= MIN_QUOTA_US:
        return q, PERIOD_US
    period = round(MIN_QUOTA_US / cores_real)
    if period > MAX_PERIOD_US:
        raise ValueError(f"cpu budget of {cores_real:.4g} real cores: {cores_real * MAX_PERIOD_US:.3g} µs per "
                         f"{MAX_PERIOD_US} µs period, below the kernel's minimum quota of {MIN_QUOTA_US} µs even "
                         f"at its longest period (CFS bandwidth control cannot enforce less than {MIN_REAL_CORES:g} "
                         f"cores)")
    return MIN_QUOTA_US, period


@dataclass(frozen=True)
class Mount:
    path: str                     # mount point, with /proc/self/mounts' octal escapes (\040 ...) decoded
    fstype: str
    options: tuple[str, ...]


def parse_mounts(text: str) -> list[Mount]:
    """The cgroup and cgroup2 mounts of a /proc/self/mounts text, in order. Pure."""
    out = []
    for line in text.splitlines():
        f = line.split()
        if len(f) < 4 or f[2] not in ("cgroup", "cgroup2"):
            continue
        path = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), f[1])
        out.append(Mount(path, f[2], tuple(f[3].split(","))))
    return out


@dataclass(frozen=True)
class Hierarchy:
    version: int                  # 1 or 2
    cpu: str                      # mount point holding the cpu controller (v1) or the cgroup2 mount (v2)
    cpuacct: str | None           # v1: mount point of cpuacct (== cpu when co-mounted, None when not mounted); v2 None

    @property
    def mounts(self) -> list[str]:
        """The hierarchies a unit has a directory in: cpu, then a separately mounted cpuacct."""
        return [self.cpu] + ([self.cpuacct] if self.cpuacct not in (None, self.cpu) else [])


def find_hierarchy(mounts_text: str, v2_controllers: Callable[[str], str | None]) -> Hierarchy:
    """Where the cpu controller is: a v1 mount with the `cpu` option (cpuacct from the mount with the `cpuacct`
    option, the same one when co-mounted), else a cgroup2 mount whose root lists `cpu` in cgroup.controllers
    (`v2_controllers(mount point)` -> that file's text, None when unreadable). CgroupError when neither is."""
    mounts = parse_mounts(mounts_text)
    v1 = [m for m in mounts if m.fstype == "cgroup"]
    cpu = next((m for m in v1 if "cpu" in m.options), None)
    if cpu is not None:
        acct = next((m for m in v1 if "cpuacct" in m.options), None)
        return Hierarchy(1, cpu.path, acct.path if acct else None)
    for m in mounts:
        if m.fstype == "cgroup2" and "cpu" in (v2_controllers(m.path) or "").split():
            return Hierarchy(2, m.path, None)
    raise CgroupError(NO_CPU)


def _kv(text: str) -> dict[str, int]:
    out = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) == 2 and f[1].lstrip("-").isdigit():
            out[f[0]] = int(f[1])
    return out


# --- the system ---------------------------------------------------------------------------------------------------

class SysOps:
    """The three system calls that change cgroups. `write` opens without O_CREAT: a control file that is not there
    is an error, never a new regular file."""

    def mkdir(self, path: Path) -> None:
        os.mkdir(path)

    def rmdir(self, path: Path) -> None:
        os.rmdir(path)

    def write(self, path: Path, text: str) -> None:
        fd = os.open(path, os.O_WRONLY)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)


def _check_name(kind: str, name: str) -> None:
    if not isinstance(name, str) or not _NAME_RE.match(name) or name in _RESERVED:
        raise ValueError(f"cgroup: {kind} name {name!r} is not a plain name ([A-Za-z0-9_-], no dot, "
                         f"not {sorted(_RESERVED)})")


class Cgroups:
    """One machine's cpu hierarchy. `mounts`: a /proc/self/mounts text (default: this process's); `root`: the
    directory the mount points are under ("/" on a machine; a tmp directory in the unit tests); `ops`: the
    mkdir/rmdir/write (`SysOps`). CgroupError (NO_CPU) when no cpu controller is available.

    A unit is identified by its paths (one per hierarchy, cpu first: what `create` returns, str or Path) — what the
    lab state keeps; `unit_paths(lab, unit)` gives them from the names."""

    def __init__(self, mounts: str | None = None, root: str | Path = "/", ops: SysOps | None = None) -> None:
        self.root = Path(root)
        self.ops = ops or SysOps()
        if mounts is None:
            mounts = Path("/proc/self/mounts").read_text()
        self.hierarchy = find_hierarchy(mounts, self._read_controllers)
        self.version = self.hierarchy.version
        self.cpu_root = self._real(self.hierarchy.cpu)
        acct = self.hierarchy.cpuacct
        self.cpuacct_root = self._real(acct) if acct is not None else None
        self.roots = [self._real(m) for m in self.hierarchy.mounts]   # the hierarchies a unit has a directory in

    def _real(self, mount_point: str) -> Path:
        return self.root / mount_point.lstrip("/")

    def _read_controllers(self, mount_point: str) -> str | None:
        try:
            return (self._real(mount_point) / "cgroup.controllers").read_text()
        except OSError:
            return None

    # paths ---------------------------------------------------------------------------------------------------------

    def lab_dir(self, lab: str) -> Path:
        """The lab's directory in the cpu hierarchy (where the budgets are)."""
        _check_name("lab", lab)
        return self.cpu_root / TOP / lab

    def lab_dirs(self, lab: str) -> list[Path]:
        """The lab's directory in every hierarchy (cpu, then a separate cpuacct)."""
        _check_name("lab", lab)
        return [r / TOP / lab for r in self.roots]

    def unit_paths(self, lab: str, unit: str) -> list[Path]:
        """The unit's directory in every hierarchy (cpu first): what `create` returns."""
        _check_name("lab", lab)
        _check_name("unit", unit)
        return [r / TOP / lab / unit for r in self.roots]

    def plan(self, lab: str, unit: str) -> list[Path]:
        """Every directory `create(lab, unit, ...)` may make, parents first (per hierarchy: orchestrator, lab,
        unit): record them before creating, `remove` takes them."""
        _check_name("lab", lab)
        _check_name("unit", unit)
        return [p for r in self.roots for p in (r / TOP, r / TOP / lab, r / TOP / lab / unit)]

    def _locate(self, path: str | Path) -> tuple[Path, int]:
        """(hierarchy root, depth below it: 1 orchestrator, 2 lab, 3 unit) of a path this module makes; ValueError
        for any other path (remove never touches anything else)."""
        p = Path(path)
        for r in self.roots:
            try:
                rel = p.relative_to(r).parts
            except ValueError:
                continue
            if 1 <= len(rel) <= 3 and rel[0] == TOP and all(_NAME_RE.match(x) for x in rel[1:]):
                return r, len(rel)
        raise ValueError(f"cgroup: {p} is not a directory of ours (<hierarchy>/{TOP}/<lab>/<unit> under "
                         f"{', '.join(map(str, self.roots))})")

    # changes -------------------------------------------------------------------------------------------------------

    def _write(self, path: Path, text: str) -> None:
        try:
            self.ops.write(path, text)
        except OSError as exc:
            raise CgroupError(f"cgroup: writing {text!r} to {path}: {exc.strerror or exc}") from exc

    def _mkdir(self, path: Path) -> None:
        try:
            self.ops.mkdir(path)
        except FileExistsError:
            pass
        except OSError as exc:
            raise CgroupError(f"cgroup: mkdir {path}: {exc.strerror or exc}") from exc

    def _enable_cpu(self, d: Path) -> None:
        """v2: make the cpu controller available to `d`'s children (its cgroup.subtree_control)."""
        f = d / "cgroup.subtree_control"
        try:
            enabled = f.read_text().split()
        except OSError as exc:
            raise CgroupError(f"cgroup: reading {f}: {exc.strerror or exc}") from exc
        if "cpu" not in enabled:
            self._write(f, "+cpu")

    def create(self, lab: str, unit: str, cores_real: float, record: Callable[[list[Path]], None] | None = None,
               machine_cores: float | None = None) -> list[Path]:
        """Make the unit's cgroup with a quota of `cores_real` real cores and return its paths (cpu first).
        `record(self.plan(lab, unit))` is called before the first directory is made. The orchestrator and lab
        levels get the highest weight. Idempotent (an existing directory is reused and set again). ValueError from
        `quota` before anything is made; CgroupError when the kernel refuses a write."""
        quota_us, period_us = quota(cores_real, machine_cores)
        planned = self.plan(lab, unit)
        if record is not None:
            record(list(planned))
        if self.version == 2:
            self._enable_cpu(self.cpu_root)
        for r in self.roots:
            top, labd, unitd = r / TOP, r / TOP / lab, r / TOP / lab / unit
            for d in (top, labd):
                self._mkdir(d)
                if r == self.cpu_root:
                    if self.version == 1:
                        self._write(d / "cpu.shares", str(V1_SHARES_MAX))
                    else:
                        self._write(d / "cpu.weight", str(V2_WEIGHT_MAX))
                        self._enable_cpu(d)
            self._mkdir(unitd)
            # The units keep the default weight among themselves: each is capped by its quota and the quotas
            # together fit on the machine (orchestrator.timebase), so weights cannot change what a unit gets.
            if r == self.cpu_root:
                if self.version == 1:
                    # period first: the pair is valid after each write (quota >= 1 ms, period <= 1 s)
                    self._write(unitd / "cpu.cfs_period_us", str(period_us))
                    self._write(unitd / "cpu.cfs_quota_us", str(quota_us))
                else:
                    self._write(unitd / "cpu.max", f"{quota_us} {period_us}")
        return self.unit_paths(lab, unit)

    def attach(self, paths: Iterable[str | Path], pid: int) -> None:
        """Move process `pid` (all its threads; 0: the calling process) into the unit in every hierarchy."""
        for p in paths:
            self._locate(p)
            self._write(Path(p) / "cgroup.procs", str(int(pid)))

    def stats(self, paths: Sequence[str | Path]) -> dict:
        """{"usage_s": CPU seconds the unit's tasks used (None when no cpuacct is mounted on v1), "nr_periods",
        "nr_throttled": CFS periods with runnable tasks / that ran out of quota, "throttled_s": time throttled}.
        Cumulative since the unit was made. Usage: v1 cpuacct.usage (ns), v2 cpu.stat usage_usec."""
        by_root = {self._locate(p)[0]: Path(p) for p in paths}
        cpu_dir = by_root.get(self.cpu_root)
        if cpu_dir is None:
            raise ValueError(f"cgroup: none of {[str(p) for p in paths]} is in the cpu hierarchy {self.cpu_root}")
        stat = _kv(self._read(cpu_dir / "cpu.stat"))
        if self.version == 2:
            usage = stat.get("usage_usec", 0) / 1e6
            throttled = stat.get("throttled_usec", 0) / 1e6
        else:
            throttled = stat.get("throttled_time", 0) / 1e9
            usage = None
            if self.hierarchy.cpuacct is not None:
                acct_dir = cpu_dir if self.cpuacct_root == self.cpu_root else by_root.get(self.cpuacct_root)
                if acct_dir is None:
                    raise ValueError(f"cgroup: none of {[str(p) for p in paths]} is in the cpuacct hierarchy "
                                     f"{self.cpuacct_root}")
                usage = int(self._read(acct_dir / "cpuacct.usage").strip()) / 1e9
        return {"usage_s": usage, "nr_periods": stat.get("nr_periods", 0),
                "nr_throttled": stat.get("nr_throttled", 0), "throttled_s": throttled}

    @staticmethod
    def _read(f: Path) -> str:
        try:
            return f.read_text()
        except OSError as exc:
            raise CgroupError(f"cgroup: reading {f}: {exc.strerror or exc}") from exc

    def remove(self, paths: Iterable[str | Path]) -> None:
        """Remove the directories `paths` (units, labs, `orchestrator`, as `plan` gives them; repeats are fine) and
        their lab directories, deepest first: the tasks still in one go to the hierarchy's root cgroup, then rmdir;
        the `orchestrator` directory only when empty (other labs). A path already gone is skipped, so a second call
        does nothing. What cannot be removed (a lab directory holding units not listed, a write refused) is tried to
        the end and then reported in one CgroupError; ValueError for a path that is not one of ours."""
        targets: dict[Path, tuple[Path, int]] = {}
        for p in paths:
            r, depth = self._locate(p)
            p = Path(p)
            for d in range(depth, 0, -1):   # the path and its parents up to <hierarchy>/orchestrator
                targets[p] = (r, d)
                p = p.parent
        problems = []
        for d, (r, depth) in sorted(targets.items(), key=lambda t: (-t[1][1], str(t[0]))):
            try:
                if depth == 1:
                    self._rmdir_if_empty(d)
                else:
                    self._drain_and_rmdir(d, r)
            except CgroupError as exc:
                problems.append(str(exc))
        if problems:
            raise CgroupError("; ".join(problems))

    def _rmdir_if_empty(self, d: Path) -> None:
        try:
            self.ops.rmdir(d)
        except FileNotFoundError:
            pass
        except OSError as exc:
            if exc.errno not in (errno.EBUSY, errno.ENOTEMPTY):    # other labs' directories are in it
                raise CgroupError(f"cgroup: rmdir {d}: {exc.strerror or exc}") from exc

    def _drain_and_rmdir(self, d: Path, root: Path) -> None:
        deadline = time.monotonic() + REMOVE_WAIT_S
        while True:
            try:
                pids = (d / "cgroup.procs").read_text().split()
            except FileNotFoundError:
                return                                             # gone already
            except OSError as exc:
                raise CgroupError(f"cgroup: reading {d / 'cgroup.procs'}: {exc.strerror or exc}") from exc
            for pid in pids:
                try:
                    self.ops.write(root / "cgroup.procs", pid)
                except ProcessLookupError:
                    pass                                           # exited meanwhile
                except OSError as exc:
                    raise CgroupError(f"cgroup: moving pid {pid} from {d} to {root}: "
                                      f"{exc.strerror or exc}") from exc
            try:
                self.ops.rmdir(d)
                return
            except FileNotFoundError:
                return
            except OSError as exc:
                if exc.errno not in (errno.EBUSY, errno.ENOTEMPTY):
                    raise CgroupError(f"cgroup: rmdir {d}: {exc.strerror or exc}") from exc
                children = sorted(c.name for c in _subdirs(d))
                if children:
                    raise CgroupError(f"cgroup: {d} not removed: it holds {', '.join(children)}, not in the "
                                      f"list to remove") from exc
                if time.monotonic() > deadline:
                    raise CgroupError(f"cgroup: rmdir {d}: still busy after {REMOVE_WAIT_S:g} s (tasks: "
                                      f"{' '.join(pids) or 'none listed'})") from exc
                time.sleep(0.05)


def _subdirs(d: Path) -> list[Path]:
    try:
        return [c for c in d.iterdir() if c.is_dir()]
    except OSError:
        return []
