"""The CPU budgets of one run's member processes on this machine (issue #33, docs/virtual-time.md).

`nodes: {cpu: C}` gives every member C virtual cores; at dilation N its process gets C / N real cores, a pack of P
members P x C / N: one cgroup per member process (a unit: the member's name, or `pack-K`), made through
orchestrator.cpubudget, its paths recorded in the lab state before they exist (so `teardown` removes them after
a crash too). The driver attaches each process it starts (`attach`), the runner marks the common start
(`mark_start`), and at the stop `report` gives the manifest's `cpu_budget`: per unit the budget, the quota and what
the kernel counted over the run — CPU used, CFS periods, periods throttled, time throttled, and the time the
process waited on a run queue and the times it was given a CPU (/proc/PID/schedstat) — from which
`orchestrator.fidelity.cpu_judges` tells a member that ran at its budget from one that waited for a CPU.
"""
from __future__ import annotations

import time
from pathlib import Path

from orchestrator.errors import CgroupError


def run_delay_s(pid: int, proc: Path = Path("/proc")) -> tuple[float, int] | None:
    """(seconds the process waited on a run queue since it started, times it was given a CPU): /proc/PID/schedstat's
    second and third fields; None when it is gone. Hand-written: two fields of one /proc file."""
    try:
        f = (proc / str(pid) / "schedstat").read_text().split()
        return int(f[1]) / 1e9, int(f[2])
    except (OSError, ValueError, IndexError):
        return None


class LocalBudgets:
    """The budget units of one run (`ctx`: the driver's RunContext). Inactive (every method a no-op) when the
    experiment sets no `nodes.cpu`."""

    def __init__(self, ctx, cgroups=None):
        self.ctx = ctx
        self.cpu = getattr(getattr(ctx.exp, "nodes", None), "cpu", None)     # None: no budget (or no experiment)
        self.dilation = ctx.clock.dilation
        self._cgroups = cgroups
        self.units: dict[str, dict] = {}          # unit -> {"paths", "members", "real_cores", "pids"}
        self._start: dict[str, dict] | None = None

    @property
    def active(self) -> bool:
        return self.cpu is not None

    @property
    def cgroups(self):
        if self._cgroups is None:
            from orchestrator.cpubudget import Cgroups

            self._cgroups = Cgroups()
        return self._cgroups

    def attach(self, unit: str, members: int, pid: int) -> None:
        """Put process `pid` (running `members` members) under its unit's budget, making the unit on first use."""
        if not self.active:
            return
        u = self.units.get(unit)
        if u is None:
            state = self.ctx.state
            real = self.cpu * members / self.dilation

            def record(paths):
                state.cgroups = sorted(set(state.cgroups) | {str(p) for p in paths})
                state.save()

            try:
                paths = self.cgroups.create(state.lab, unit, real, record=record)
            except ValueError as exc:
                raise CgroupError(f"nodes.cpu: {exc}") from None
            u = self.units[unit] = {"paths": [str(p) for p in paths], "members": members, "real_cores": real,
                                    "pids": []}
        self.cgroups.attach(u["paths"], pid)
        u["pids"].append(pid)

    def _snapshot(self) -> dict[str, dict]:
        now = time.monotonic()
        out = {}
        for unit, u in self.units.items():
            try:
                s = dict(self.cgroups.stats(u["paths"]))
            except (OSError, ValueError, CgroupError):
                continue
            s["t"] = now
            s["delay"] = {pid: d for pid in u["pids"] if (d := run_delay_s(pid)) is not None}
            out[unit] = s
        return out

    def mark_start(self) -> None:
        """The common start: what the units counted before it (start-up, waiting) is left out of the report."""
        if self.active:
            self._start = self._snapshot()

    def report(self) -> dict | None:
        """manifest["cpu_budget"], read before the processes stop: per unit what it got from the common start
        (or from its creation, for processes started later) to now."""
        if not self.active:
            return None
        end = self._snapshot()
        start = self._start or {}
        t_end = time.monotonic()
        units = {}
        for unit, u in self.units.items():
            e, b = end.get(unit), start.get(unit)
            entry = {"members": u["members"], "virtual_cores": self.cpu * u["members"], "real_cores": u["real_cores"],
                     "pids": u["pids"]}
            if e is not None:
                zero = {"usage_s": 0.0, "nr_periods": 0, "nr_throttled": 0, "throttled_s": 0.0, "delay": {},
                        "t": e["t"] if b is None else b["t"]}
                b = b or zero
                delays = [d[0] - b["delay"].get(pid, (0.0, 0))[0] for pid, d in e["delay"].items()]
                slices = [d[1] - b["delay"].get(pid, (0.0, 0))[1] for pid, d in e["delay"].items()]
                entry["run"] = {
                    "wall_s": t_end - b["t"],
                    "usage_s": None if e.get("usage_s") is None else e["usage_s"] - (b.get("usage_s") or 0.0),
                    "nr_periods": e["nr_periods"] - b["nr_periods"],
                    "nr_throttled": e["nr_throttled"] - b["nr_throttled"],
                    "throttled_s": e["throttled_s"] - b["throttled_s"],
                    "run_delay_s": sum(delays) if delays else None,
                    "timeslices": sum(slices) if slices else None,
                }
            units[unit] = entry
        return {"enforced": True, "mechanism": f"cgroup v{self.cgroups.version} CFS bandwidth",
                "cpu": self.cpu, "dilation": self.dilation, "units": units}

    def remove(self) -> None:
        """Remove the run's units (after its processes stopped); the lab state forgets them."""
        if not self.units:
            return
        remove_recorded(self.ctx.state, self.cgroups)     # one run per lab: the lab's levels go with its units
        self.units.clear()


def remove_recorded(state, cgroups=None) -> None:
    """Remove every cgroup the lab state records (units, the lab's level, the shared top level when no other lab
    uses it); idempotent, nothing to do when it records none. Teardown calls it after the lab's processes died."""
    if not state.cgroups:
        return
    if cgroups is None:
        from orchestrator.cpubudget import Cgroups

        cgroups = Cgroups()
    cgroups.remove(state.cgroups)
    state.cgroups = []
    state.save()


# --- Docker: the container's own CPU quota -------------------------------------------------------------------------

def cgroup_dirs(pid: int, proc: Path = Path("/proc"), mounts: str | None = None) -> dict[str, Path]:
    """The cpu and cpuacct cgroup directories of process `pid` ({"cpu": ..., "cpuacct": ...}; one for both on v2),
    from /proc/PID/cgroup and the mounts. Empty when the process is gone."""
    from orchestrator.cpubudget import find_hierarchy

    try:
        lines = (proc / str(pid) / "cgroup").read_text().splitlines()
        mounts = mounts if mounts is not None else Path("/proc/self/mounts").read_text()
    except OSError:
        return {}
    h = find_hierarchy(mounts, lambda mp: (Path(mp) / "cgroup.controllers").read_text()
                       if (Path(mp) / "cgroup.controllers").exists() else None)
    out = {}
    for line in lines:
        _, controllers, path = line.split(":", 2)
        names = set(controllers.split(",")) if controllers else set()
        rel = path.lstrip("/")
        if h.version == 2 and not controllers:
            out = {"cpu": Path(h.cpu) / rel, "cpuacct": Path(h.cpu) / rel}
        elif "cpu" in names:
            out["cpu"] = Path(h.cpu) / rel
            if h.cpuacct == h.cpu:
                out["cpuacct"] = out["cpu"]
        elif "cpuacct" in names and h.cpuacct is not None:
            out["cpuacct"] = Path(h.cpuacct) / rel
    return out


def read_stats(dirs: dict[str, Path]) -> dict | None:
    """{usage_s, nr_periods, nr_throttled, throttled_s} of a cgroup found by `cgroup_dirs` (v1 or v2)."""
    try:
        stat = dict(line.split() for line in (dirs["cpu"] / "cpu.stat").read_text().splitlines() if line.strip())
    except (OSError, KeyError, ValueError):
        return None
    out = {"nr_periods": int(stat.get("nr_periods", 0)), "nr_throttled": int(stat.get("nr_throttled", 0))}
    if "usage_usec" in stat:                                         # v2
        out["usage_s"] = int(stat["usage_usec"]) / 1e6
        out["throttled_s"] = int(stat.get("throttled_usec", 0)) / 1e6
        return out
    out["throttled_s"] = int(stat.get("throttled_time", 0)) / 1e9
    try:
        out["usage_s"] = int((dirs["cpuacct"] / "cpuacct.usage").read_text()) / 1e9
    except (OSError, KeyError, ValueError):
        out["usage_s"] = None
    return out


class DockerBudgets(LocalBudgets):
    """Docker's own CPU quota on each member's container (`container.update`): the node runs in it (docker exec).
    Applied at `prepare`, reset to unlimited at the stop (the lab may serve another run); the figures are read from
    the container's cgroup (its main process's /proc/PID/cgroup). No run_delay: the CPU-wait judge is not
    measured on Docker."""

    def __init__(self, ctx, containers):
        super().__init__(ctx)
        self.containers = containers               # member -> container (docker SDK), or None for routers
        self.dirs: dict[str, dict[str, Path]] = {}

    def apply(self) -> None:
        if not self.active:
            return
        from orchestrator.cpubudget import quota

        real = self.cpu / self.dilation
        try:
            q, period = quota(real)
        except ValueError as exc:
            raise CgroupError(f"nodes.cpu: {exc}") from None
        for member, c in self.containers.items():
            c.update(cpu_period=period, cpu_quota=q)
            c.reload()
            self.units[member] = {"paths": [], "members": 1, "real_cores": real, "pids": [],
                                  "quota_us": q, "period_us": period}
            self.dirs[member] = cgroup_dirs(c.attrs["State"]["Pid"])

    def attach(self, unit: str, members: int, pid: int) -> None:
        pass                                        # docker exec puts the node in its container's cgroup

    def _snapshot(self) -> dict[str, dict]:
        now = time.monotonic()
        out = {}
        for unit in self.units:
            s = read_stats(self.dirs.get(unit, {}))
            if s is not None:
                out[unit] = {**s, "t": now, "delay": {}}
        return out

    def report(self) -> dict | None:
        out = super().report()
        if out is not None:
            out["mechanism"] = "Docker CPU quota (cgroup of the container)"
        return out

    def remove(self) -> None:
        for member, c in self.containers.items():
            if member in self.units:
                try:
                    c.update(cpu_quota=-1)
                except Exception:  # noqa: BLE001 - a container gone already has no quota to reset
                    pass
        self.units.clear()
