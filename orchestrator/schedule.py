"""The fault and perturbation schedule (docs/architecture.md §5), pure: faults are data, as in Jepsen's nemesis.

An experiment's `schedule:` is a list of actions at times relative to the run start:

    - {at: 20s, action: crash, fraction: 0.25}            # a seeded random draw among the live members
    - {at: 20s, action: crash, nodes: [h3, h5]}
    - {at: 40s, action: restart, nodes: [h3]}             # or `crashed: true`: every member crashed so far
    - {at: 10s, action: pause, nodes: [h4], duration: 5s}
    - {at: 10s, action: perturb, count: 2, p: 0.1, duration: 30s}   # sleep 100 ms intervals with probability p
    - {at: 15s, action: link, links: [[h0, h1]], direction: both, set: {delay: 50ms, loss: 5%}}
    - {at: 25s, action: partition, subtree: h5}           # cut the subtree's uplink (both directions)
    - {at: 35s, action: heal}                             # restore every link changed or cut so far
    - {at: 30s, action: join, nodes: [h7]}                # start a member that was held back (`join` lists it)
    - {at: 5s, action: workload, op: stop}                # stop (or start) the senders

`expand()` turns the validated schedule into timed operations (`Op`) on concrete targets; the same seed gives
the same targets and the same perturbation sleeps.
"""
from __future__ import annotations

import random
from enum import StrEnum
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from orchestrator.plan import NetworkPlan
from orchestrator.models import DirSpec
from orchestrator.source import FieldError
from orchestrator.units import parse_time

ACTIONS = ("crash", "restart", "pause", "perturb", "link", "partition", "heal", "join", "workload")
PERTURB_INTERVAL_S = 0.1  # "Fighting fire with fire": a perturbed member sleeps for 100 ms intervals
MAX_OPS = 1_000_000       # operations a schedule may expand to (a week-long perturbation of 1000 nodes is not)


class OpKind(StrEnum):
    """The operations a schedule expands to; a node driver declares which of them it supports."""

    CRASH = "crash"                 # SIGKILL
    START = "start"                 # restart a crashed member, or a joiner's first start
    STOP_SIGNAL = "stop_signal"     # SIGSTOP (pause, perturb)
    CONT_SIGNAL = "cont_signal"     # SIGCONT
    LINK_SET = "link_set"
    LINK_CUT = "link_cut"
    LINK_RESTORE = "link_restore"
    WORKLOAD_START = "workload_start"
    WORKLOAD_STOP = "workload_stop"


LINK_OPS = frozenset({OpKind.LINK_SET, OpKind.LINK_CUT, OpKind.LINK_RESTORE})


class Action(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    at: str | float
    action: Literal["crash", "restart", "pause", "perturb", "link", "partition", "heal", "join", "workload"]
    # Node targets: explicit, or a seeded draw.
    nodes: list[str] | None = None
    count: int | None = Field(None, ge=1)
    fraction: float | None = Field(None, gt=0, le=1)
    crashed: bool = False
    # Link targets.
    links: list[tuple[str, str]] | None = None
    subtree: str | None = None
    direction: Literal["both", "up", "down"] = "both"
    set: DirSpec | None = None
    # Parameters.
    duration: str | float | None = None
    p: float | None = Field(None, ge=0, le=1)
    op: Literal["start", "stop"] | None = None

    @field_validator("at", "duration")
    @classmethod
    def _time(cls, v):
        if v is not None:
            parse_time(v)
        return v

    @model_validator(mode="after")
    def _shape(self) -> "Action":
        node_sel = sum(x is not None for x in (self.nodes, self.count, self.fraction)) + self.crashed
        link_sel = sum(x is not None for x in (self.links, self.subtree))
        a = self.action
        if a in ("crash", "pause", "perturb", "join") and node_sel != 1:
            raise ValueError(f"{a} needs exactly one of nodes, count, fraction")
        if a == "restart" and node_sel != 1:
            raise ValueError("restart needs exactly one of nodes, count, fraction, crashed: true")
        if a in ("link", "partition") and link_sel != 1:
            raise ValueError(f"{a} needs exactly one of links: [[a, b], ...] or subtree: NODE")
        if a == "link" and self.set is None:
            raise ValueError("link needs `set: {rate|delay|jitter|loss|queue: ...}`")
        if a in ("pause", "perturb") and self.duration is None:
            raise ValueError(f"{a} needs a duration")
        if a == "perturb" and self.p is None:
            raise ValueError("perturb needs p (probability of sleeping in each 100 ms interval)")
        if a == "workload" and self.op is None:
            raise ValueError("workload needs op: start|stop")
        if self.crashed and a != "restart":
            raise ValueError("crashed: true only goes with restart")
        return self

    @property
    def at_s(self) -> float:
        return parse_time(self.at)

    @property
    def duration_s(self) -> float:
        return parse_time(self.duration) if self.duration is not None else 0.0


@dataclass(frozen=True, order=True)
class Op:
    """One timed operation on concrete targets. `kind`: crash, start, stop_signal, cont_signal, link_set,
    link_cut, link_restore, workload_start, workload_stop. `index` is the schedule entry it came from."""

    t: float
    seq: int
    kind: OpKind = field(compare=False)
    index: int = field(compare=False)
    targets: tuple[str, ...] = field(compare=False, default=())
    # for links: (link id, direction) pairs; params as DirSpec for link_set
    links: tuple[tuple[str, str], ...] = field(compare=False, default=())
    params: Any = field(compare=False, default=None)


@dataclass
class Timeline:
    actions: list[Action]
    ops: list[Op]
    joiners: list[str]          # members that start only when a `join` action starts them

    def applied_summary(self) -> list[dict]:
        return [{"index": i, "at_s": a.at_s, "action": a.action} for i, a in enumerate(self.actions)]


def parse_schedule(raw: list[dict], path: str = "schedule") -> list[Action]:
    """Validate each entry. Errors are FieldErrors located at `schedule[i].field` (the experiment loader adds
    the file and line)."""
    actions = []
    for i, item in enumerate(raw):
        try:
            actions.append(Action.model_validate(item))
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = tuple(x for x in first["loc"] if isinstance(x, int) or not (str(x)[:1].isupper() or "[" in str(x)))
            msg = first["msg"].removeprefix("Value error, ")
            if first["type"] == "extra_forbidden":
                msg = "unknown key"
            if first["type"] == "literal_error" and first["loc"][:1] == ("action",):
                name = item.get("action") if isinstance(item, dict) else None
                msg = f"unknown action {name!r} (one of {', '.join(ACTIONS)})"
            raise FieldError((path, i, *loc), msg) from None
    return actions


def expand(actions: list[Action], plan: NetworkPlan, duration_s: float, seed: int) -> Timeline:
    """Resolve targets (seeded) and turn actions into timed ops; raise SpecError for anything impossible."""
    members = [n.name for n in plan.members]
    all_names = {n.name for n in plan.nodes}
    joiners = [n for a in actions if a.action == "join" for n in (a.nodes or [])]
    alive = [m for m in members if m not in joiners]
    crashed: list[str] = []
    ops: list[Op] = []
    seq = 0
    changed_links: list[tuple[str, str]] = []

    def add(t: float, kind: str, index: int, **kw) -> None:
        nonlocal seq
        ops.append(Op(t=t, seq=seq, kind=OpKind(kind), index=index, **kw))
        seq += 1

    def fail(i: int, msg: str, *where) -> FieldError:
        return FieldError(("schedule", i, *where), f"{actions[i].action} at {actions[i].at}: {msg}")

    def draw(i: int, a: Action, pool: list[str]) -> list[str]:
        if a.nodes is not None:
            for j, n in enumerate(a.nodes):
                if n not in all_names:
                    raise fail(i, f"unknown node {n!r}", "nodes", j)
                if n not in members:
                    raise fail(i, f"{n} is a router, not a group member", "nodes", j)
            return list(a.nodes)
        k = a.count if a.count is not None else max(1, round(a.fraction * len(pool)))  # type: ignore[operator]
        if k > len(pool):
            raise fail(i, f"wants {k} members but only {len(pool)} are eligible",
                       "count" if a.count is not None else "fraction")
        rng = random.Random(f"{seed}/{i}")
        return sorted(rng.sample(sorted(pool), k), key=lambda n: plan.node(n).index)

    def link_targets(i: int, a: Action) -> list[tuple[str, str]]:
        dirs = ("down", "up") if a.direction == "both" else (a.direction,)
        ids = []
        if a.links is not None:
            for j, (x, y) in enumerate(a.links):
                for n in (x, y):
                    if n not in all_names:
                        raise fail(i, f"unknown node {n!r}", "links", j)
                try:
                    ids.append(plan.link_of(x, y).id)
                except Exception:
                    raise fail(i, f"{x} and {y} are not linked", "links", j) from None
        else:
            if a.subtree not in all_names:
                raise fail(i, f"unknown node {a.subtree!r}", "subtree")
            node = plan.node(a.subtree)  # type: ignore[arg-type]
            if node.parent is None:
                raise fail(i, "the root has no uplink to cut", "subtree")
            if a.action == "partition":
                ids.append(plan.link_of(node.parent, node.name).id)
            else:
                sub = set(plan.subtree(node.name))
                ids += [lk.id for lk in plan.links if lk.child in sub]
        return [(lid, d) for lid in ids for d in dirs]

    order = sorted(range(len(actions)), key=lambda i: (actions[i].at_s, i))
    for i in order:
        a = actions[i]
        t = a.at_s
        if t > duration_s:
            raise fail(i, f"time {a.at} is beyond the duration ({duration_s:g} s)", "at")
        if a.action in ("pause", "perturb") and t + a.duration_s > duration_s:
            raise fail(i, f"ends at {t + a.duration_s:g} s, beyond the duration ({duration_s:g} s)", "duration")
        if a.action == "crash":
            targets = draw(i, a, alive)
            for n in targets:
                if n not in alive:
                    raise fail(i, f"{n} is not running at that time", "nodes", a.nodes.index(n) if a.nodes else 0)
            alive = [m for m in alive if m not in targets]
            crashed += targets
            add(t, "crash", i, targets=tuple(targets))
        elif a.action == "restart":
            targets = list(crashed) if a.crashed else draw(i, a, crashed)
            for n in targets:
                if n not in crashed:
                    raise fail(i, f"{n} has not crashed before", "nodes", a.nodes.index(n) if a.nodes else 0)
            crashed = [m for m in crashed if m not in targets]
            alive += targets
            add(t, "start", i, targets=tuple(targets))
        elif a.action == "join":
            targets = draw(i, a, [])
            alive += targets
            add(t, "start", i, targets=tuple(targets))
        elif a.action == "pause":
            targets = draw(i, a, alive)
            add(t, "stop_signal", i, targets=tuple(targets))
            add(t + a.duration_s, "cont_signal", i, targets=tuple(targets))
        elif a.action == "perturb":
            targets = draw(i, a, alive)
            rng = random.Random(f"{seed}/{i}/sleep")
            steps = int(round(a.duration_s / PERTURB_INTERVAL_S))
            if steps * len(targets) + len(ops) > MAX_OPS:
                raise fail(i, f"{len(targets)} members perturbed for {a.duration} would be more than {MAX_OPS} "
                              "operations", "duration")
            for n in targets:
                asleep = False
                for s in range(steps):
                    sleep = rng.random() < a.p  # type: ignore[operator]
                    ts = t + s * PERTURB_INTERVAL_S
                    if sleep and not asleep:
                        add(ts, "stop_signal", i, targets=(n,))
                    elif asleep and not sleep:
                        add(ts, "cont_signal", i, targets=(n,))
                    asleep = sleep
                if asleep:
                    add(t + steps * PERTURB_INTERVAL_S, "cont_signal", i, targets=(n,))
        elif a.action == "link":
            lt = link_targets(i, a)
            changed_links += lt
            add(t, "link_set", i, links=tuple(lt), params=a.set)
        elif a.action == "partition":
            lt = link_targets(i, a)
            changed_links += lt
            add(t, "link_cut", i, links=tuple(lt))
        elif a.action == "heal":
            lt = (link_targets(i, a) if (a.links or a.subtree) else list(dict.fromkeys(changed_links)))
            changed_links = [x for x in changed_links if x not in lt]
            add(t, "link_restore", i, links=tuple(lt))
        elif a.action == "workload":
            add(t, f"workload_{a.op}", i)
    ops.sort()
    return Timeline(actions=actions, ops=ops, joiners=joiners)


def check_supported(timeline: Timeline, supported: frozenset[OpKind], backend: str, why: str = "") -> None:
    """The one "not supported on this backend" check, before anything is built (exit 2)."""
    for op in timeline.ops:
        if op.kind not in supported:
            a = timeline.actions[op.index]
            raise FieldError(("schedule", op.index),
                             f"{a.action} at {a.at}: not supported on the {backend} backend "
                             f"({why or 'its driver cannot ' + op.kind.value.replace('_', ' ')})")
