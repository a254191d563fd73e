"""How many members run per node process (issue #21, docs/packing.md), pure: the experiment's
`nodes: {packing: process | auto | N}` decided from the machine's available memory and cores. The packed driver
is orchestrator/backends/packing.py; this module is what the experiment checks need without the driver."""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

from orchestrator.errors import SpecError

MEMBER_PROCESS_BYTES = 40 * 2**20      # budget of a member with a process of its own (~35 MB RSS measured, #21)
PACKS_PER_CPU = 4                      # auto: ceil(members / (4 x cpus)) members per pack


@dataclass(frozen=True)
class PackingDecision:
    mode: str                          # "process" | "packed"
    members_per_process: int
    processes: int
    reason: str

    @property
    def packed(self) -> bool:
        return self.mode == "packed"

    def manifest(self) -> dict:
        """manifest["packing"] (benchmarks/bench_scale.py reads it)."""
        return {"mode": self.mode, "members_per_process": self.members_per_process, "processes": self.processes,
                "reason": self.reason}


def decide(packing: str | int, members: int, mem_available: int | None, cpus: int | None) -> PackingDecision:
    """How `members` members run under `packing` (process | auto | N). Pure: `mem_available` (bytes, None when
    unknown) and `cpus` are the machine's. auto: a process per member while members x 40 MB <= half the
    available memory, else packs of ceil(members / (4 x cpus))."""
    members = max(1, members)
    if packing == "process":
        return PackingDecision("process", 1, members, "packing: process")
    if isinstance(packing, int) and not isinstance(packing, bool):
        if packing < 1:
            raise SpecError(f"nodes.packing: {packing} members per process (at least 1)")
        per = min(packing, members)
        return PackingDecision("packed", per, math.ceil(members / per), f"packing: {packing}")
    if packing != "auto":
        raise SpecError(f"nodes.packing: {packing!r} is not process, auto or a number of members per process")
    need_mb = members * MEMBER_PROCESS_BYTES / 2**20
    if mem_available is None:
        return PackingDecision("process", 1, members, "auto: available memory unknown, a process per member")
    half_mb = mem_available / 2 / 2**20
    if members * MEMBER_PROCESS_BYTES <= mem_available / 2:
        return PackingDecision("process", 1, members,
                               f"auto: {members} processes x 40 MB = {need_mb:.0f} MB fit in half the available "
                               f"memory ({half_mb:.0f} MB)")
    cpus = max(1, cpus or 1)
    per = math.ceil(members / (PACKS_PER_CPU * cpus))
    return PackingDecision("packed", per, math.ceil(members / per),
                           f"auto: {members} processes x 40 MB = {need_mb:.0f} MB exceed half the available memory "
                           f"({half_mb:.0f} MB): packs of ceil({members} / ({PACKS_PER_CPU} x {cpus} cpus))")


def mem_available(meminfo: str = "/proc/meminfo") -> int | None:
    """MemAvailable in bytes, None where the kernel does not say."""
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def decide_here(exp, members: int) -> PackingDecision:
    """`decide` for this machine, now."""
    return decide(exp.nodes.packing, members, mem_available(), os.cpu_count())
