"""Virtual time and CPU budgets of a lab (issue #33, docs/virtual-time.md), pure.

A lab runs with a dilation N (one virtual second lasts N real seconds) and an epoch (a real unix time chosen
before anything starts); `gossipnode.vclock.VirtualClock` is the one definition of the arithmetic, used by the
nodes and the orchestrator alike. A member's CPU budget `nodes.cpu` = C is in virtual cores: its process gets
C / N real cores (a pack of P members P x C / N), enforced by CFS bandwidth control (orchestrator.cpubudget).

`resolve_dilation` turns the experiment's `time.dilation` (a number or `auto`) into N with its reasons:
`auto` is the smallest whole N at which

    (sum over members of min(C, measured)  +  daemons' measured virtual cores) / N  +  LAB_CPU  <=  HEADROOM x cores

(`measured`: a member's CPU in virtual cores from an earlier run of the same setup, e.g. a sweep's finished
point, times MEASURED_MARGIN; without a measurement the budget C itself, or without budgets the sweep's per-member
guess) and at which no member process is given more than one real core (a process is one thread: a budget above
a core could not be delivered). `check_budgets` is what `up`/`run` refuse before anything is built (exit 2).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from gossipnode.vclock import MAX_DILATION, VirtualClock
from orchestrator.cpubudget import MIN_REAL_CORES

__all__ = ["VirtualClock", "Dilation", "Measured", "resolve_dilation", "check_budgets", "CPU_HEADROOM",
           "LAB_CPU", "MEMBER_CPU_GUESS", "MEASURED_MARGIN", "PROCESS_MAX_CORES", "MIN_REAL_CORES"]

CPU_HEADROOM = 0.8          # the share of the cores planned; the rest keeps the orchestrator and timers on time
TARGET_CPU_WAIT_MS = 0.5    # auto: a member's measured wait for a CPU per wakeup, in virtual ms, at most this (half
                            # the CPU-wait judge's 1 ms)
LAB_CPU = 0.1               # real cores of the orchestrator and idle daemons, whatever N (not dilated)
MEMBER_CPU_GUESS = 0.02     # virtual cores of a member without budget or measurement (the sweep's guess)
MEASURED_MARGIN = 1.25      # a measured mean is not a peak
PROCESS_MAX_CORES = 1.0     # a member process (one asyncio thread) cannot use more than one real core


@dataclass(frozen=True)
class Measured:
    """CPU measured on an earlier run of the same setup, in virtual cores (real CPU seconds per virtual second):
    `member_cores_each` (the member processes' total / members) and `daemon_cores` (delay line, captures); and
    `cpu_wait_real_ms`: how long a member waited for a CPU each time it ran, in REAL ms (the CPU-wait judge's
    virtual ms x that run's dilation) — members woken together (a multicast) queue for the cores whatever the
    average load, and the dilation divides that wait."""

    member_cores_each: float | None = None
    daemon_cores: float | None = None
    source: str = ""
    cpu_wait_real_ms: float | None = None


@dataclass(frozen=True)
class Dilation:
    n: float
    requested: float | str
    reasons: list[str] = field(default_factory=list)
    inputs: dict = field(default_factory=dict)

    def manifest(self, epoch: float) -> dict:
        return {"dilation": self.n, "epoch": epoch, "requested": self.requested, "reasons": list(self.reasons),
                "inputs": dict(self.inputs)}

    def clock(self, epoch: float) -> VirtualClock:
        return VirtualClock(self.n, epoch)


def _fmt(x: float) -> str:
    return f"{x:.3g}"


def member_demand(cpu: float | None, measured: Measured | None) -> tuple[float, str]:
    """Virtual cores planned per member, and where the number comes from."""
    m = measured.member_cores_each if measured else None
    if m is not None:
        d = m * MEASURED_MARGIN
        if cpu is not None and cpu < d:
            return cpu, f"its budget {cpu:g} (measured {_fmt(m)} x {MEASURED_MARGIN:g} is more)"
        return d, f"measured {_fmt(m)} x {MEASURED_MARGIN:g}" + (f" (budget {cpu:g})" if cpu is not None else "")
    if cpu is not None:
        return cpu, f"its budget {cpu:g} (nothing measured)"
    return MEMBER_CPU_GUESS, f"the guess {MEMBER_CPU_GUESS:g} (no budget, nothing measured)"


def resolve_dilation(requested: float | str, cpu: float | None, members: int, members_per_process: int,
                     cores: float, measured: Measured | None = None) -> Dilation:
    """N for `requested` (a number: itself; `auto`: see the module docstring). `cores`: the cores this lab may
    plan with (the machine's, or its share when several labs run at once). ValueError when `auto` finds no N up to
    MAX_DILATION."""
    if requested != "auto":
        return Dilation(float(requested), requested, [f"dilation {float(requested):g} as configured"])
    per, why = member_demand(cpu, measured)
    daemons = (measured.daemon_cores if measured else None) or 0.0
    planned = cores * CPU_HEADROOM - LAB_CPU
    virtual = members * per + daemons
    inputs = {"members": members, "members_per_process": members_per_process, "cores": cores,
              "headroom": CPU_HEADROOM, "lab_cpu": LAB_CPU, "member_virtual_cores": per,
              "daemon_virtual_cores": daemons, "budget": cpu, "measured_from": measured.source if measured else None}
    if planned <= 0:
        raise ValueError(f"dilation auto: {cores:g} cores leave nothing to plan with after the lab's own "
                         f"{LAB_CPU:g}")
    by_load = virtual / planned
    reasons = [f"{members} members x {_fmt(per)} virtual cores ({why})"
               + (f" + daemons {_fmt(daemons)}" if daemons else "")
               + f" = {_fmt(virtual)} virtual cores must fit in {CPU_HEADROOM:.0%} of {cores:g} cores less "
                 f"{LAB_CPU:g} for the orchestrator = {_fmt(planned)}: N >= {_fmt(by_load)}"]
    by_process = 0.0
    if cpu is not None:
        by_process = cpu * members_per_process / PROCESS_MAX_CORES
        reasons.append(f"a process of {members_per_process} member(s) x budget {cpu:g} must get at most one real "
                       f"core: N >= {_fmt(by_process)}")
    by_wait = 0.0
    wait = measured.cpu_wait_real_ms if measured else None
    if wait:
        by_wait = wait / TARGET_CPU_WAIT_MS
        reasons.append(f"members woken together waited {_fmt(wait)} ms (real) for a CPU each time they ran "
                       f"({measured.source}); at most {TARGET_CPU_WAIT_MS:g} ms virtual: N >= {_fmt(by_wait)}")
    n = float(max(1, math.ceil(max(by_load, by_process, by_wait) - 1e-9)))
    if n > MAX_DILATION:
        raise ValueError(f"dilation auto: needs N = {n:g}, more than {MAX_DILATION:g} ({'; '.join(reasons)})")
    reasons.append(f"auto: N = {n:g}")
    return Dilation(n, "auto", reasons, inputs)


def check_budgets(cpu: float | None, dilation: float | str, members_per_process: int) -> str | None:
    """Why the budget `cpu` cannot be enforced (text for an exit-2 error on `nodes.cpu`), or None. With `auto`
    only what no N up to MAX_DILATION could fix."""
    if cpu is None:
        return None
    per_process = cpu * members_per_process
    if per_process / MAX_DILATION > PROCESS_MAX_CORES:
        return (f"{cpu:g} virtual cores x {members_per_process} member(s) per process is more than one real core "
                f"even at dilation {MAX_DILATION:g} (a member process runs on one core)")
    if dilation == "auto":
        return None
    n = float(dilation)
    real = cpu / n
    if real < MIN_REAL_CORES:
        return (f"{cpu:g} virtual cores at dilation {n:g} is {real:.2g} real cores per member, below what CFS "
                f"bandwidth control can enforce ({MIN_REAL_CORES:g}: 1 ms per 1 s period)")
    if per_process / n > PROCESS_MAX_CORES:
        return (f"{members_per_process} member(s) per process x {cpu:g} virtual cores / dilation {n:g} = "
                f"{per_process / n:.3g} real cores, but a member process runs on one core: use a dilation >= "
                f"{math.ceil(per_process / PROCESS_MAX_CORES):g} (or `time: {{dilation: auto}}`)")
    return None


def budget_overcommit(cpu: float | None, members: int, dilation: float, cores: float) -> str | None:
    """A warning when the members' budgets together exceed the planned share of the cores at a fixed dilation:
    members that use their whole budgets at once will be starved (the CPU judges will say which). Pure."""
    if cpu is None:
        return None
    real = members * cpu / dilation
    planned = cores * CPU_HEADROOM - LAB_CPU
    if real <= planned:
        return None
    return (f"nodes.cpu: {members} members x {cpu:g} virtual cores / dilation {dilation:g} = {real:.3g} real cores, "
            f"more than the {planned:.3g} planned on {cores:g} cores: members that use their whole budgets at once "
            f"will get less (judged per run); `time: {{dilation: auto}}` would choose N = "
            f"{math.ceil(members * cpu / planned - 1e-9)}")
