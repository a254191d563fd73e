"""The backend and node-driver interfaces (docs/architecture.md §3, §6).

A `Backend` builds the network of a plan and removes it (up, teardown, health, live link changes). A `NodeDriver`
drives the protocol nodes of one run on a built lab: start, signal, control, captures, collection, and the set of
schedule operations (`OPS`) it supports. The runner (orchestrator/runner.py) is the same for every backend: it
asks the backend for its driver. Backends are found by name in `orchestrator.backends.registry`; this module
imports no concrete backend. Nothing here prints: progress goes through a `Progress` the caller supplies.
"""
from __future__ import annotations

import json

import signal
import subprocess
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Protocol

from gossipnode.vclock import VirtualClock
from orchestrator.errors import BackendError
from orchestrator.plan import NetworkPlan
from orchestrator.schedule import OpKind
from orchestrator.shaping.params import DirParams
from orchestrator.state import LabState

if TYPE_CHECKING:
    from orchestrator.rundir import RunDir
    from orchestrator.spec import Experiment


class Progress(Protocol):
    def start(self, step: str, total: int) -> None: ...
    def advance(self, step: str, n: int = 1) -> None: ...
    def note(self, message: str) -> None: ...


class NullProgress:
    def start(self, step: str, total: int) -> None:
        pass

    def advance(self, step: str, n: int = 1) -> None:
        pass

    def note(self, message: str) -> None:
        pass


ALL_OPS = frozenset(OpKind)


@dataclass
class RunContext:
    """What a driver gets about the run it drives."""

    exp: "Experiment"
    plan: NetworkPlan
    state: LabState
    run: "RunDir"
    ctl_dir: Path
    first: list[str]                       # members started at the beginning (the others join later)
    progress: Progress
    clock: VirtualClock = field(default_factory=VirtualClock)   # the lab's virtual time (docs/virtual-time.md)


@dataclass
class StopReport:
    """What the driver found when it stopped: captures (manifest `captures`) and extra manifest fields."""

    captures: list[dict] = field(default_factory=list)
    manifest: dict = field(default_factory=dict)


class NodeDriver(ABC):
    """Drives the protocol nodes of one run. Every method that acts on nodes returns per-node replies (a dict,
    possibly empty: {node: {"rtt_s", "pid", "ok", "error", ...}}) that the runner records with the action."""

    OPS: ClassVar[frozenset[OpKind]] = ALL_OPS
    WHY_UNSUPPORTED: ClassVar[str] = ""          # why OPS lacks some operations (the error message says it)
    COMMON_START: ClassVar[bool] = True          # nodes wait for one `start` at a common wall-clock time

    def __init__(self, backend: "Backend", ctx: RunContext):
        self.backend, self.ctx = backend, ctx
        self.configs: dict[str, dict] = {}
        self.isolated: set[str] = set()          # members silently crashed (their traffic dropped)
        self._started_later: set[str] = set()   # members started by a START of the schedule (run_at_once)

    def configure(self, configs: dict[str, dict]) -> dict[str, dict]:
        """The node configs as the nodes get them (a backend that runs them elsewhere rewrites paths)."""
        self.configs = configs
        return configs

    def run_at_once(self, names: list[str]) -> list[str]:
        """A START during the schedule (a restart, or a joiner's first start): no common start will come again,
        so a member whose config waited for it (`wait_for_start`) runs the protocol as soon as it is up, as a
        joiner does; a member that ran before gets the next `incarnation` (its protocol knows it is a restart).
        Changes the driver's config and the run directory's record (what a process started from it reads)."""
        for n in names:
            cfg = self.configs.get(n)
            if cfg is None:
                continue
            update = {"wait_for_start": False} if cfg.get("wait_for_start") else {}
            if n in self.ctx.first or n in self._started_later:
                update["incarnation"] = cfg.get("incarnation", 0) + 1
            self._started_later.add(n)
            if not update:
                continue
            cfg.update(update)
            record = self.ctx.run.path / "configs" / f"{n}.json"
            if record.exists():
                on_disk = json.loads(record.read_text())
                on_disk.update(update)
                record.write_text(json.dumps(on_disk, indent=1))
        return names

    def prepare(self) -> None:
        """Before captures and nodes: stage files, open sessions, measure clocks (manifest fields via notes())."""

    def manifest_fields(self) -> dict:
        return {}

    @abstractmethod
    def start_captures(self) -> int:
        """Start the packet captures the experiment asks for; the number running."""

    @abstractmethod
    def start_nodes(self, names: list[str]) -> dict[str, dict]:
        """Start the protocol node on each of `names` (also a restart or a join during the schedule)."""

    @abstractmethod
    def await_ready(self, names: list[str], timeout_s: float) -> None:
        """Wait until every node in `names` runs (and answers, where the driver can ask)."""

    def start_protocol(self, names: list[str], at_unix: float) -> None:
        """Tell the nodes to start the protocol at `at_unix` (virtual time; drivers with COMMON_START)."""

    def mark_start(self) -> None:
        """The protocol has started (t0): what the driver measures over the run (CPU, budgets) starts here."""

    @abstractmethod
    def signal(self, names: list[str], sig: int, wait: bool = False) -> dict[str, dict]:
        """Send `sig` to the nodes' processes; `wait`: until they exited (SIGKILL)."""

    # The schedule's faults (runner.DISPATCH): a process of its own per node gets a signal; a driver whose nodes
    # share a process (orchestrator/backends/packing.py) acts per member through the member's control socket.
    def crash(self, names: list[str], silent: bool = False) -> dict[str, dict]:
        """Kill the nodes without a goodbye, and wait until they are gone. `silent` (the schedule's `crash: {mode:
        silent}`): their traffic is dropped first (`isolate`), so the kernel's FIN/RST for their sockets never
        leaves and nothing sent to them is answered. A member whose isolation failed is still killed; the reply
        names the error."""
        cut = self.isolate(names) if silent else {}
        replies = self.kill(names)
        for m, r in cut.items():
            replies[m] = {**replies.get(m, {}), **r}
        return replies

    def kill(self, names: list[str]) -> dict[str, dict]:
        """SIGKILL, and wait until the processes are gone."""
        return self.signal(names, signal.SIGKILL, wait=True)

    @classmethod
    def can_isolate(cls, backend: "Backend") -> bool:
        """Whether `isolate` works with `backend` (a silent crash is refused before anything is built if not)."""
        return type(backend).isolate is not Backend.isolate

    def isolate(self, names: list[str], on: bool = True) -> dict[str, dict]:
        """Drop (on) or stop dropping (off) every packet to or from the members themselves, both directions;
        what a member forwards for others passes. Per-member failures as {name: {"ok": False, "error": ...}}."""
        errors = self.cut_off(names, on)
        (self.isolated.update if on else self.isolated.difference_update)(n for n in names if n not in errors)
        return {m: {"ok": False, "error": e} for m, e in errors.items()}

    def cut_off(self, names: list[str], on: bool) -> dict[str, str]:
        """`isolate`'s side effect, {member: error} for those that failed: the backend's rules by default."""
        return self.backend.isolate(self.ctx.state, names, on)

    def reconnect(self, names: list[str]) -> list[str]:
        """Before a (re)start: members silently crashed earlier get their network back. Returns `names`."""
        cut = [n for n in names if n in self.isolated]
        for m, r in (self.isolate(cut, on=False) if cut else {}).items():
            self.ctx.run.log(f"giving {m} its network back failed: {r['error']}")
        return names

    def reconnect_all(self) -> None:
        """At the end of a run: no member of the lab stays isolated (a lab kept with `up` is used again)."""
        self.reconnect(sorted(self.isolated))

    def pause(self, names: list[str]) -> dict[str, dict]:
        """The nodes handle nothing until `resume` (SIGSTOP)."""
        return self.signal(names, signal.SIGSTOP)

    def resume(self, names: list[str]) -> dict[str, dict]:
        """Paused nodes run on (SIGCONT)."""
        return self.signal(names, signal.SIGCONT)

    @abstractmethod
    def control_senders(self, request: dict) -> dict[str, dict]:
        """Send a control request to every running sender (the workload)."""

    @abstractmethod
    def control_members(self, request: dict, skip: tuple[str, ...] = ()) -> dict[str, dict]:
        """Send a control request to every running member but `skip` (a membership service's view); returns the
        members that did not take it, {name: {"ok": False, "error": ...}} (one paused, or ended meanwhile)."""

    def multicast_routes(self, changes: dict[str, dict]) -> dict:
        """The multicast routes that change as members join and leave (orchestrator.mcast.tree.mfc_changes)."""
        return self.backend.multicast_routes(self.ctx.state, changes)

    def set_link(self, link_id: str, direction: str, params: DirParams | None) -> dict[str, dict]:
        self.backend.set_link(self.ctx.state, self.ctx.plan, link_id, direction, params)
        return {}

    def alive(self) -> int | None:
        """Running nodes, when the driver knows it without asking over the network."""
        return None

    def check(self) -> None:
        """Cheap check once a second during the run (the shaper's health)."""
        self.backend.check(self.ctx.state)

    @abstractmethod
    def stop(self) -> StopReport:
        """Stop the nodes and captures and collect everything into the run directory; never raises for a
        single node's or file's failure (they are logged in the run directory)."""


class Backend(ABC):
    name: ClassVar[str]
    remote_shaping: ClassVar[bool] = False      # shaping probed on the remote hosts at `up`, not on this machine
    fidelity_probe: ClassVar[bool] = True       # `popen` in nodes works: the runner probes the shaping
    state_survives_reboot: ClassVar[bool] = False   # what it creates outlives a reboot: keep the state where it does
    enforces_cpu: ClassVar[bool] = True         # its driver enforces `nodes.cpu` (cgroups, Docker's CPU quota)
    routes_groups: ClassVar[bool] = True        # it builds multicast groups' routes (real hosts' network does not)
    packs_remotely: ClassVar[bool] = False      # its driver packs members itself, where they run (machines' agents)
    members_here: ClassVar[bool] = True         # the members run on this machine (its host speed is theirs)

    @abstractmethod
    def up(self, plan: NetworkPlan, state: LabState, progress: Progress) -> None:
        """Create the network of `plan`, recording in `state` (saved as it goes) everything created."""

    @abstractmethod
    def teardown(self, state: LabState, progress: Progress) -> None:
        """Remove everything `state` records; idempotent, and fine after a crashed orchestrator."""

    @abstractmethod
    def exec(self, state: LabState, node: str, argv: list[str]) -> int:
        """Run `argv` inside `node` with the caller's terminal; return its exit status."""

    def popen(self, state: LabState, node: str, argv: list[str], **kwargs) -> subprocess.Popen:
        """Start `argv` inside `node` and return the process."""
        raise BackendError(f"the {self.name} backend cannot start processes in a node directly")

    def set_link(self, state: LabState, plan: NetworkPlan, link_id: str, direction: str,
                 params: DirParams | None) -> None:
        """Change one direction ("up"/"down") of a link live; `params=None` cuts it (drops everything)."""
        raise BackendError(f"the {self.name} backend cannot change links live")

    def isolate(self, state: LabState, names: list[str], on: bool) -> dict[str, str]:
        """Drop (on) or stop dropping (off) the members' own traffic, both directions (a silent crash);
        {member: error} for those that failed."""
        raise BackendError(f"the {self.name} backend cannot cut a member off the network (crash mode silent)")

    @abstractmethod
    def health(self, state: LabState) -> list[str]:
        """Problems with a running lab (missing namespaces, a dead shaper); empty when healthy."""

    def check(self, state: LabState) -> None:
        """Cheap check during a run: raise DelayLineDied when the shaper died or the kernel dropped queued
        packets (the run's link emulation can no longer be trusted)."""

    def shaper_stats(self, state: LabState) -> dict | None:
        """The shaper's own per-link-direction counters, when it keeps any (the delay line does)."""
        return None

    def underlay_rtts(self, state: LabState, plan: NetworkPlan) -> dict[str, float] | None:
        """A lab over several machines: each cut link's underlay round trip now (real ms, by link id), which the
        fidelity probe adds to the formula of the paths crossing it. None: every link is emulated here."""
        return None

    def multicast_routes(self, state: LabState, changes: dict[str, dict]) -> dict:
        """Change the lab's multicast routes at run time (only backends that route groups: `up` refuses groups
        on the others)."""
        raise BackendError(f"the {self.name} backend does not route multicast groups")

    # --- labs whose state is gone (containerlab's `destroy --all`) -------------------------------------------
    def orphan_labs(self, known: set[str], progress: Progress) -> list[str]:
        """Labs this backend finds on the machine (e.g. by label) that have no state; `known`: labs with state."""
        return []

    def teardown_orphan(self, lab: str, progress: Progress) -> None:
        """Remove what `orphan_labs` found of `lab`."""

    # --- runs ---------------------------------------------------------------------------------------------------
    # The driver of this backend's runs; its OPS are checked against the schedule before anything is built.
    driver_class: ClassVar[type[NodeDriver]]

    def check_run(self, exp: "Experiment", plan: NetworkPlan, lab: str, state: LabState | None) -> None:
        """Backend-specific checks of a run before anything is built (SpecError, exit 2)."""

    def for_run(self, run: "RunDir", exp: "Experiment") -> None:
        """Told the run directory before `up` (a backend that stages files for the run keeps them there)."""

    def realised(self, plan: NetworkPlan, state: LabState | None) -> dict | None:
        """What the backend learns that the plan does not say (the hosts' real addresses): the run manifest's
        `realised`. None: the plan is what was built."""
        return None

    def driver(self, ctx: RunContext) -> NodeDriver:
        return self.driver_class(self, ctx)

