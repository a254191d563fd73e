"""Lab state files: what a backend created, written as it creates it, so teardown removes exactly that.

`<root>/<lab>/state.json` plus the lab's `plan.json`, where the root depends on what the lab's things outlive:
- labs made of network namespaces (mininet) keep it in `/run/orchestrator` ($ORCHESTRATOR_RUN_STATE_DIR): it
  vanishes at reboot together with the namespaces it describes;
- labs whose things survive a reboot (Docker containers with a restart policy or simply stopped, qdiscs and
  processes on remote hosts: `Backend.state_survives_reboot`) keep it in `/var/lib/orchestrator`
  ($ORCHESTRATOR_PERSISTENT_STATE_DIR), so `teardown` still finds them after a reboot.
$ORCHESTRATOR_STATE_DIR, when set, is the one root of both (the tests use it). Writes are atomic (temp file +
rename).
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.errors import LabNotFound

if TYPE_CHECKING:       # the plan (and the models under it) only where a plan is read or written: a machine's check
    from orchestrator.plan import NetworkPlan         # (orchestrator.machinecheck) imports this module, fast

RUN_STATE_DIR = "/run/orchestrator"
PERSISTENT_STATE_DIR = "/var/lib/orchestrator"


def state_root(persistent: bool = False) -> Path:
    one = os.environ.get("ORCHESTRATOR_STATE_DIR")
    if one:
        return Path(one)
    if persistent:
        return Path(os.environ.get("ORCHESTRATOR_PERSISTENT_STATE_DIR", PERSISTENT_STATE_DIR))
    return Path(os.environ.get("ORCHESTRATOR_RUN_STATE_DIR", RUN_STATE_DIR))


def state_roots() -> list[Path]:
    return list(dict.fromkeys([state_root(False), state_root(True)]))


@dataclass
class LabState:
    lab: str
    backend: str
    shaper: str
    status: str = "building"            # building -> up; "failed" if up did not finish
    created_at: float = field(default_factory=time.time)
    experiment: str = ""                # path of the experiment file, as given
    plan_digest: str = ""
    namespaces: list[str] = field(default_factory=list)   # every namespace we (may) have created
    capabilities: dict = field(default_factory=dict)
    delayline: dict | None = None       # {"pid", "control", "config"} when the delay line runs
    mroute: dict | None = None          # {"pid", "control", "config", ...}: the multicast daemon (mcast/)
    warnings: list[str] = field(default_factory=list)
    link_overrides: dict = field(default_factory=dict)    # live changes: "<link>/<dir>" -> DirParams json | "cut"
    backend_data: dict = field(default_factory=dict)      # what else a backend created (e.g. Docker containers)
    run: dict | None = None             # the `orchestrator run` using the lab: {"dir", "pid", "pid_start"}
    persistent: bool = False            # the state lives where it survives a reboot (see the module docstring)
    dilation: float = 1.0               # time dilation the lab's shaping realises (docs/virtual-time.md)
    cgroups: list[str] = field(default_factory=list)     # CPU-budget cgroups (orchestrator/cpubudget.py)

    @property
    def dir(self) -> Path:
        return state_root(self.persistent) / self.lab

    def save(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.dir / "state.json.tmp"
        tmp.write_text(json.dumps(asdict(self), indent=1, sort_keys=True))
        os.replace(tmp, self.dir / "state.json")

    def save_plan(self, plan: NetworkPlan) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        text = plan.to_json()                  # ~0.2 s for a 1000-node tree: made once for the file and its digest
        (self.dir / "plan.json").write_text(text)
        self.plan_digest = type(plan).digest_of(text)

    def load_plan(self) -> NetworkPlan:
        from orchestrator.plan import NetworkPlan

        return NetworkPlan.from_dict(json.loads((self.dir / "plan.json").read_text()))

    def remove(self) -> None:
        for f in self.dir.glob("*"):
            if f.is_file():
                f.unlink()
        try:
            self.dir.rmdir()
        except OSError:
            pass


def ns_name(lab: str, node: str) -> str:
    """The network namespace of `node` in a lab of namespaces (the Mininet and Docker backends, a machine's part)."""
    return f"{lab}-{node}"


def load_state(lab: str) -> LabState:
    for root in state_roots():
        f = root / lab / "state.json"
        if f.exists():
            return LabState(**json.loads(f.read_text()))
    raise LabNotFound(f"no lab named {lab!r} is up (see `orchestrator status`)")


def list_labs() -> list[str]:
    return sorted({p.name for root in state_roots() if root.is_dir() for p in root.iterdir()
                   if (p / "state.json").exists()})
