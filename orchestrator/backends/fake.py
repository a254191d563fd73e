"""A fake backend and driver, pure: no namespace, no process, no root. `up` only records, the nodes are entries
in a dict, signals and control requests are appended to `calls`. The Runner's unit tests (tests/unit/
test_runner.py) drive a whole run through it; it is registered as the hidden backend `fake` (not offered by the
CLI). `FakeDriver.OPS` may be narrowed by a test to see the generic "not supported" check."""
from __future__ import annotations

import signal
from typing import ClassVar

from orchestrator.backends.base import Backend, NodeDriver, Progress, StopReport
from orchestrator.plan import NetworkPlan
from orchestrator.schedule import OpKind
from orchestrator.shaping.params import DirParams
from orchestrator.state import LabState

_STATES = {signal.SIGKILL: "dead", signal.SIGSTOP: "paused", signal.SIGCONT: "running", signal.SIGTERM: "dead"}


class FakeDriver(NodeDriver):
    OPS: ClassVar[frozenset[OpKind]] = frozenset(OpKind)

    def __init__(self, backend, ctx):
        super().__init__(backend, ctx)
        self.nodes: dict[str, str] = {}           # name -> "running" | "paused" | "dead"
        self.calls: list[tuple] = backend.calls
        backend.drivers.append(self)

    def start_captures(self) -> int:
        self.calls.append(("start_captures",))
        return 0

    def start_nodes(self, names: list[str]) -> dict[str, dict]:
        for n in names:
            self.nodes[n] = "running"
        self.calls.append(("start_nodes", tuple(names)))
        return {}

    def await_ready(self, names: list[str], timeout_s: float) -> None:
        self.calls.append(("await_ready", tuple(names)))

    def start_protocol(self, names: list[str], at_unix: float) -> None:
        self.calls.append(("start_protocol", tuple(names)))

    def signal(self, names: list[str], sig: int, wait: bool = False) -> dict[str, dict]:
        for n in names:
            if self.nodes.get(n) not in (None, "dead"):
                self.nodes[n] = _STATES[sig]
        self.calls.append(("signal", tuple(names), signal.Signals(sig).name))
        return {}

    def control_senders(self, request: dict) -> dict[str, dict]:
        senders = [m for m, c in self.configs.items() if c["senders"] and c["id"] in c["senders"]
                   and self.nodes.get(m) == "running"]
        self.calls.append(("control", tuple(senders), request["op"]))
        return {}

    def control_members(self, request: dict, skip: tuple[str, ...] = ()) -> dict[str, dict]:
        running = [m for m in self.configs if self.nodes.get(m) == "running" and m not in skip]
        self.calls.append(("control_members", tuple(running), request["cmd"]))
        return {}

    def alive(self) -> int:
        return sum(1 for s in self.nodes.values() if s != "dead")

    def stop(self) -> StopReport:
        self.reconnect_all()
        for n in self.nodes:
            self.nodes[n] = "dead"
        self.calls.append(("stop",))
        return StopReport()


class FakeBackend(Backend):
    name = "fake"
    driver_class = FakeDriver
    fidelity_probe = False

    def __init__(self, calls: list | None = None):
        self.calls: list[tuple] = calls if calls is not None else []
        self.drivers: list[FakeDriver] = []

    def up(self, plan: NetworkPlan, state: LabState, progress: Progress) -> None:
        self.calls.append(("up", len(plan.nodes)))
        state.status = "up"
        state.save()

    def teardown(self, state: LabState, progress: Progress) -> None:
        self.calls.append(("teardown",))

    def exec(self, state: LabState, node: str, argv: list[str]) -> int:
        return 0

    def set_link(self, state: LabState, plan: NetworkPlan, link_id: str, direction: str,
                 params: DirParams | None) -> None:
        key = f"{link_id}/{direction}"
        if params is None:
            state.link_overrides[key] = "cut"
        else:
            state.link_overrides[key] = params.to_json()
        self.calls.append(("set_link", key, None if params is None else params.to_json()))

    def isolate(self, state: LabState, names: list[str], on: bool) -> dict[str, str]:
        self.calls.append(("isolate", tuple(names), on))
        return {}

    def multicast_routes(self, state: LabState, changes: dict[str, dict]) -> dict:
        self.calls.append(("multicast_routes", changes))
        return {"nodes": len(changes), "set": sum(len(c["set"]) for c in changes.values()),
                "deleted": sum(len(c["delete"]) for c in changes.values())}

    def health(self, state: LabState) -> list[str]:
        return []
