"""The fault and perturbation schedule (docs/architecture.md §5), pure: faults are typed data, as in Jepsen's
nemesis — one pydantic model per action, told apart by `action` (a discriminated union), each expanding itself
into timed operations (`Op`, of an `OpKind`); a node driver declares the kinds it supports, and
`check_supported` is the one "not supported on this backend" check, before anything is built.

An experiment's `schedule:` is a list of actions at times relative to the run start:

    - {at: 20s, action: crash, fraction: 0.25}            # a seeded random draw among the live members
    - {at: 20s, action: crash, nodes: [h3, h5]}
    - {at: 20s, action: crash, count: 2, mode: silent}   # the network is not told: no FIN/RST (see Crash)
    - {at: 40s, action: restart, nodes: [h3]}             # or `crashed: true`: every member crashed so far
    - {at: 10s, action: pause, nodes: [h4], duration: 5s}
    - {at: 10s, action: perturb, count: 2, p: 0.1, duration: 30s}   # sleep 100 ms intervals with probability p
    - {at: 15s, action: link, links: [[h0, h1]], direction: both, set: {delay: 50ms, loss: 5%}}
    - {at: 25s, action: partition, subtree: h5}           # cut the subtree's uplink (both directions)
    - {at: 35s, action: heal}                             # restore every link changed or cut so far
    - {at: 30s, action: join, nodes: [h7]}                # start a member that was held back (`join` lists it)
    - {at: 5s, action: workload, op: stop}                # stop (or start) the senders

`expand()` turns the validated schedule into timed operations on concrete targets; the same seed gives the same
targets and the same perturbation sleeps.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator, model_validator

from orchestrator.models import DirSpec
from orchestrator.plan import NetworkPlan
from orchestrator.source import FieldError
from orchestrator.units import parse_time

PERTURB_INTERVAL_S = 0.1  # "Fighting fire with fire": a perturbed member sleeps for 100 ms intervals
MAX_OPS = 1_000_000       # operations a schedule may expand to (a week-long perturbation of 1000 nodes is not)


class OpKind(StrEnum):
    """The operations a schedule expands to; a node driver declares which of them it supports."""

    CRASH = "crash"                 # SIGKILL (params "silent": the member's traffic dropped first; "leave": a
                                    # departure the membership service announces at once)
    START = "start"                 # restart a crashed member, or a joiner's first start
    STOP_SIGNAL = "stop_signal"     # SIGSTOP (pause, perturb)
    CONT_SIGNAL = "cont_signal"     # SIGCONT
    LINK_SET = "link_set"
    LINK_CUT = "link_cut"
    LINK_RESTORE = "link_restore"
    WORKLOAD_START = "workload_start"
    WORKLOAD_STOP = "workload_stop"
    GMS_VIEW = "gms_view"           # the membership service's next view (with_gms): params the changes so far


LINK_OPS = frozenset({OpKind.LINK_SET, OpKind.LINK_CUT, OpKind.LINK_RESTORE})


@dataclass(frozen=True, order=True)
class Op:
    """One timed operation on concrete targets. `index` is the schedule entry it came from."""

    t: float
    seq: int
    kind: OpKind = field(compare=False)
    index: int = field(compare=False)
    targets: tuple[str, ...] = field(compare=False, default=())
    # for links: (link id, direction) pairs; params as DirSpec for link_set
    links: tuple[tuple[str, str], ...] = field(compare=False, default=())
    params: Any = field(compare=False, default=None)


# --- the actions ---------------------------------------------------------------------------------------------------

class _Action(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    at: str | float
    OPS: ClassVar[frozenset[OpKind]] = frozenset()      # what the action may expand to

    @field_validator("at", "duration", check_fields=False)
    @classmethod
    def _time(cls, v):
        if v is not None:
            parse_time(v)
        return v

    @property
    def at_s(self) -> float:
        return parse_time(self.at)

    @property
    def duration_s(self) -> float:
        d = getattr(self, "duration", None)
        return parse_time(d) if d is not None else 0.0

    def expand(self, i: int, x: "_Expansion") -> None:
        raise NotImplementedError


class _Nodes(_Action):
    """Node targets: explicit, or a seeded draw."""

    nodes: list[str] | None = None
    count: int | None = Field(None, ge=1)
    fraction: float | None = Field(None, gt=0, le=1)

    def _selectors(self) -> int:
        return sum(x is not None for x in (self.nodes, self.count, self.fraction))

    @model_validator(mode="after")
    def _one_selector(self):
        if self._selectors() != 1 and not getattr(self, "crashed", False):
            raise ValueError(f"{self.action} needs exactly one of nodes, count, fraction")   # type: ignore[attr-defined]
        return self


class _Links(_Action):
    """Link targets: explicit pairs or a subtree; one direction or both."""

    links: list[tuple[str, str]] | None = None
    subtree: str | None = None
    direction: Literal["both", "up", "down"] = "both"
    NEED_TARGET: ClassVar[bool] = True

    @model_validator(mode="after")
    def _one_target(self):
        n = sum(x is not None for x in (self.links, self.subtree))
        if n > 1 or (self.NEED_TARGET and n != 1):
            raise ValueError(f"{self.action} needs exactly one of links: [[a, b], ...] or "   # type: ignore[attr-defined]
                             "subtree: NODE")
        return self


class Crash(_Nodes):
    """`mode: kill` (the default): SIGKILL; the dead process's kernel closes its sockets, so every TCP peer hears
    FIN/RST at once. `mode: silent`: the member's own traffic is dropped from that instant in both directions (no
    FIN, no RST; traffic it forwards for others still passes), then the process is killed: peers find out only
    when they send to it and get no answer (TCP's user timeout), as a crashed host's peers do."""

    action: Literal["crash"]
    mode: Literal["kill", "silent"] = "kill"
    OPS = frozenset({OpKind.CRASH, OpKind.GMS_VIEW})    # the view after it, for a protocol with a GMS (with_gms)

    def expand(self, i, x):
        _take_down(self, i, x, "silent" if self.mode == "silent" else None)


def _take_down(a: _Nodes, i: int, x: "_Expansion", params: str | None) -> None:
    """A crash or a leave: its running targets stop (a CRASH op with `params`)."""
    targets = x.draw(i, a, x.alive)
    for n in targets:
        if n not in x.alive:
            raise x.fail(i, f"{n} is not running at that time", "nodes", a.nodes.index(n) if a.nodes else 0)
    x.alive = [m for m in x.alive if m not in targets]
    x.crashed += targets
    x.add(a.at_s, OpKind.CRASH, i, targets=tuple(targets), params=params)


class Restart(_Nodes):
    action: Literal["restart"]
    crashed: bool = False                # every member crashed so far
    OPS = frozenset({OpKind.START})

    @model_validator(mode="after")
    def _restart_selector(self):
        if self._selectors() + self.crashed != 1:
            raise ValueError("restart needs exactly one of nodes, count, fraction, crashed: true")
        return self

    def expand(self, i, x):
        targets = list(x.crashed) if self.crashed else x.draw(i, self, x.crashed)
        for n in targets:
            if n not in x.crashed:
                raise x.fail(i, f"{n} has not crashed before", "nodes", self.nodes.index(n) if self.nodes else 0)
        x.crashed = [m for m in x.crashed if m not in targets]
        x.alive += targets
        x.add(self.at_s, OpKind.START, i, targets=tuple(targets))


class Leave(_Nodes):
    """A member departs: for a protocol whose membership service the orchestrator plays (QSM), the view without it
    is announced at once (a departure is told, not detected: no `failure_detection` delay), and its process is
    killed. A protocol without one refuses it (runner: exit 2): `crash` is the action there."""

    action: Literal["leave"]
    OPS = frozenset({OpKind.CRASH, OpKind.GMS_VIEW})

    def expand(self, i, x):
        _take_down(self, i, x, "leave")


class Join(_Nodes):
    action: Literal["join"]
    OPS = frozenset({OpKind.START, OpKind.GMS_VIEW})    # the view with the joiners, for a protocol with a GMS

    def expand(self, i, x):
        targets = x.draw(i, self, [])
        x.alive += targets
        x.add(self.at_s, OpKind.START, i, targets=tuple(targets))


class Pause(_Nodes):
    action: Literal["pause"]
    duration: str | float
    OPS = frozenset({OpKind.STOP_SIGNAL, OpKind.CONT_SIGNAL, OpKind.GMS_VIEW})   # a missed view again (with_gms)

    def expand(self, i, x):
        targets = tuple(x.draw(i, self, x.alive))
        x.add(self.at_s, OpKind.STOP_SIGNAL, i, targets=targets)
        x.add(self.at_s + self.duration_s, OpKind.CONT_SIGNAL, i, targets=targets)


class Perturb(_Nodes):
    """Sleep 100 ms intervals with probability p ("Fighting fire with fire")."""

    action: Literal["perturb"]
    duration: str | float
    p: float = Field(ge=0, le=1)
    OPS = frozenset({OpKind.STOP_SIGNAL, OpKind.CONT_SIGNAL, OpKind.GMS_VIEW})   # a missed view again (with_gms)

    def expand(self, i, x):
        targets = x.draw(i, self, x.alive)
        t = self.at_s
        rng = random.Random(f"{x.seed}/{i}/sleep")
        steps = int(round(self.duration_s / PERTURB_INTERVAL_S))
        if steps * len(targets) + len(x.ops) > MAX_OPS:
            raise x.fail(i, f"{len(targets)} members perturbed for {self.duration} would be more than {MAX_OPS} "
                            "operations", "duration")
        for n in targets:
            asleep = False
            for s in range(steps):
                sleep = rng.random() < self.p
                ts = t + s * PERTURB_INTERVAL_S
                if sleep and not asleep:
                    x.add(ts, OpKind.STOP_SIGNAL, i, targets=(n,))
                elif asleep and not sleep:
                    x.add(ts, OpKind.CONT_SIGNAL, i, targets=(n,))
                asleep = sleep
            if asleep:
                x.add(t + steps * PERTURB_INTERVAL_S, OpKind.CONT_SIGNAL, i, targets=(n,))


class LinkChange(_Links):
    action: Literal["link"]
    set: DirSpec
    OPS = frozenset({OpKind.LINK_SET})

    def expand(self, i, x):
        lt = x.link_targets(i, self)
        x.changed_links += lt
        x.add(self.at_s, OpKind.LINK_SET, i, links=tuple(lt), params=self.set)


class Partition(_Links):
    action: Literal["partition"]
    OPS = frozenset({OpKind.LINK_CUT})

    def expand(self, i, x):
        lt = x.link_targets(i, self)
        x.changed_links += lt
        x.add(self.at_s, OpKind.LINK_CUT, i, links=tuple(lt))


class Heal(_Links):
    """Restore the given links, or without targets every link changed or cut so far."""

    action: Literal["heal"]
    NEED_TARGET = False
    OPS = frozenset({OpKind.LINK_RESTORE})

    def expand(self, i, x):
        lt = (x.link_targets(i, self) if (self.links or self.subtree) else list(dict.fromkeys(x.changed_links)))
        x.changed_links = [c for c in x.changed_links if c not in lt]
        x.add(self.at_s, OpKind.LINK_RESTORE, i, links=tuple(lt))


class Workload(_Action):
    action: Literal["workload"]
    op: Literal["start", "stop"]
    OPS = frozenset({OpKind.WORKLOAD_START, OpKind.WORKLOAD_STOP})

    def expand(self, i, x):
        x.add(self.at_s, OpKind(f"workload_{self.op}"), i)


ACTION_TYPES = (Crash, Restart, Pause, Perturb, LinkChange, Partition, Heal, Join, Leave, Workload)
ACTIONS = tuple(c.model_fields["action"].annotation.__args__[0] for c in ACTION_TYPES)
Action = Annotated[Union[ACTION_TYPES], Field(discriminator="action")]   # type: ignore[valid-type]
_ADAPTER: TypeAdapter = TypeAdapter(Action)


@dataclass
class Timeline:
    actions: list[_Action]
    ops: list[Op]
    joiners: list[str]          # members that start only when a `join` action starts them

    def applied_summary(self) -> list[dict]:
        return [{"index": i, "at_s": a.at_s, "action": a.action} for i, a in enumerate(self.actions)]


def parse_schedule(raw: list[dict], path: str = "schedule") -> list[_Action]:
    """Validate each entry. Errors are FieldErrors located at `schedule[i].field` (the experiment loader adds
    the file and line)."""
    actions = []
    for i, item in enumerate(raw):
        try:
            actions.append(_ADAPTER.validate_python(item))
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = first["loc"]
            if loc and isinstance(item, dict) and loc[0] == item.get("action"):
                loc = loc[1:]                                 # the union's tag: not a field of the file
            loc = tuple(x for x in loc if isinstance(x, int) or not (str(x)[:1].isupper() or "[" in str(x)))
            msg = first["msg"].removeprefix("Value error, ")
            if first["type"] == "extra_forbidden":
                msg = "unknown key" + (f" for {item.get('action')}" if isinstance(item, dict) else "")
            elif first["type"] == "missing" and loc:
                msg = f"{item.get('action')} needs {loc[-1]}"
            elif first["type"] in ("union_tag_invalid", "union_tag_not_found", "model_attributes_type"):
                name = item.get("action") if isinstance(item, dict) else None
                loc = ("action",)
                msg = (f"unknown action {name!r} (one of {', '.join(ACTIONS)})" if name is not None
                       else f"each entry needs `action:` (one of {', '.join(ACTIONS)})")
            raise FieldError((path, i, *loc), msg) from None
    return actions


class _Expansion:
    """The state an expansion carries from one action to the next (who is alive, crashed, which links changed)."""

    def __init__(self, actions: list[_Action], plan: NetworkPlan, seed: int):
        self.actions, self.plan, self.seed = actions, plan, seed
        self.members = [n.name for n in plan.members]
        self.all_names = {n.name for n in plan.nodes}
        self.joiners = [n for a in actions if isinstance(a, Join) for n in (a.nodes or [])]
        self.alive = [m for m in self.members if m not in self.joiners]
        self.crashed: list[str] = []
        self.ops: list[Op] = []
        self.changed_links: list[tuple[str, str]] = []

    def add(self, t: float, kind: OpKind, index: int, **kw) -> None:
        self.ops.append(Op(t=t, seq=len(self.ops), kind=kind, index=index, **kw))

    def fail(self, i: int, msg: str, *where) -> FieldError:
        a = self.actions[i]
        return FieldError(("schedule", i, *where), f"{a.action} at {a.at}: {msg}")

    def draw(self, i: int, a: _Nodes, pool: list[str]) -> list[str]:
        if a.nodes is not None:
            for j, n in enumerate(a.nodes):
                if n not in self.all_names:
                    raise self.fail(i, f"unknown node {n!r}", "nodes", j)
                if n not in self.members:
                    raise self.fail(i, f"{n} is a router, not a group member", "nodes", j)
            return list(a.nodes)
        k = a.count if a.count is not None else max(1, round(a.fraction * len(pool)))  # type: ignore[operator]
        if k > len(pool):
            raise self.fail(i, f"wants {k} members but only {len(pool)} are eligible",
                            "count" if a.count is not None else "fraction")
        rng = random.Random(f"{self.seed}/{i}")
        return sorted(rng.sample(sorted(pool), k), key=lambda n: self.plan.node(n).index)

    def link_targets(self, i: int, a: _Links) -> list[tuple[str, str]]:
        plan = self.plan
        dirs = ("down", "up") if a.direction == "both" else (a.direction,)
        ids = []
        if a.links is not None:
            for j, (p, q) in enumerate(a.links):
                for n in (p, q):
                    if n not in self.all_names:
                        raise self.fail(i, f"unknown node {n!r}", "links", j)
                try:
                    ids.append(plan.link_of(p, q).id)
                except Exception:
                    raise self.fail(i, f"{p} and {q} are not linked", "links", j) from None
        else:
            if a.subtree not in self.all_names:
                raise self.fail(i, f"unknown node {a.subtree!r}", "subtree")
            node = plan.node(a.subtree)  # type: ignore[arg-type]
            if node.parent is None:
                raise self.fail(i, "the root has no uplink to cut", "subtree")
            if isinstance(a, Partition):
                ids.append(plan.link_of(node.parent, node.name).id)
            else:
                sub = set(plan.subtree(node.name))
                ids += [lk.id for lk in plan.links if lk.child in sub]
        return [(lid, d) for lid in ids for d in dirs]


def expand(actions: list[_Action], plan: NetworkPlan, duration_s: float, seed: int) -> Timeline:
    """Resolve targets (seeded) and turn actions into timed ops; raise FieldError for anything impossible."""
    x = _Expansion(actions, plan, seed)
    for i in sorted(range(len(actions)), key=lambda i: (actions[i].at_s, i)):
        a = actions[i]
        if a.at_s > duration_s:
            raise x.fail(i, f"time {a.at} is beyond the duration ({duration_s:g} s)", "at")
        if a.at_s + a.duration_s > duration_s:
            raise x.fail(i, f"ends at {a.at_s + a.duration_s:g} s, beyond the duration ({duration_s:g} s)",
                         "duration")
        a.expand(i, x)
    x.ops.sort()
    return Timeline(actions=actions, ops=x.ops, joiners=x.joiners)


def most_down(timeline: Timeline) -> int:
    """The most members the timeline has down at once: crashed and not restarted yet (a crash of a member already
    down counts once; a paused member is not down). Pure."""
    down: set[str] = set()
    most = 0
    for op in sorted(timeline.ops):
        if op.kind == OpKind.CRASH:
            down.update(op.targets)
        elif op.kind == OpKind.START:
            down.difference_update(op.targets)
        most = max(most, len(down))
    return most


def with_gms(timeline: Timeline, plan: NetworkPlan, detect_s: float, duration_s: float,
             batch_s: float = 0.0) -> Timeline:
    """The timeline with the views of a group membership service the orchestrator plays (a protocol adapter's
    `gms_detect_s`: QSM's GMS, §2.1 of its paper, "listens to ... messages from a failure detector"): each crash
    is followed, `detect_s` later (the failure detector's delay), by a GMS_VIEW op without the members it
    crashed (a `leave` at once: a departure is told), and each joiner's first start, `detect_s` later, by one with
    the members it started, from the same schedule entry. Its params: every view's change so far, ("remove" or "add", member ids) (the node installs
    the ones it has not, in order), and the members down by then (crashed, not restarted, or joiners not started
    yet), whom the view is not sent to. A member paused when a view came gets it again as it resumes (a GMS_VIEW
    op at its CONT_SIGNAL, from the pause's entry, targets the resumed members; the others ignore a view they
    have). A view due after the run's end is not announced. A restart of a member a view removed is a join
    (QSM §2.3.2: "if that node is actually not dead, it would need to rejoin the system"): `detect_s` after it, a
    view adds it back; a crash after that removes it again.
    `batch_s` > 0: the GMS "groups requests in batches and performs changes at a predefined maximum rate" (QSM
    §2.1): views come at least `batch_s` apart, a change due before the next view's announcement joins it, and
    changes of one kind in a row in a batch make one view (two crashes, one view without both)."""
    ids = {m.name: i for i, m in enumerate(plan.members)}
    removed: set[int] = set()
    started: set[str] = set()
    pending: list[tuple[float, int, int, tuple[str, ...], str, tuple[int, ...]]] = []
    for op in timeline.ops:
        if op.kind == OpKind.CRASH:
            new = sorted(ids[n] for n in op.targets if ids[n] not in removed)
            kind = "remove"
        elif op.kind == OpKind.START:       # a joiner's first start, or a restart of a member a view removed
            new = sorted(ids[n] for n in op.targets if (n in timeline.joiners and n not in started)
                         or ids[n] in removed)
            started.update(op.targets)
            kind = "add"
        else:
            continue
        delay = 0.0 if op.kind == OpKind.CRASH and op.params == "leave" else detect_s     # a leave is told
        if new and op.t + delay <= duration_s:
            (removed.update if kind == "remove" else removed.difference_update)(new)
            pending.append((op.t + delay, len(pending), op.index, op.targets, kind, tuple(new)))
    # the views in the order they are announced (a leave's may come before an earlier crash's), each with every
    # change announced so far
    changes: list[tuple[str, tuple[int, ...]]] = []
    due: list[tuple[float, int, tuple[str, ...], tuple[tuple[str, tuple[int, ...]], ...]]] = []
    batch_from = 0                      # the index in `changes` of the current batch's first view
    for t, _, index, targets, kind, ids_ in sorted(pending):
        if batch_s > 0 and due and t <= due[-1][0]:         # due before the batch goes out: it joins the batch
            at, first, joined, _ = due.pop()
            if len(changes) > batch_from and changes[-1][0] == kind:
                changes[-1] = (kind, tuple(sorted({*changes[-1][1], *ids_})))
            else:
                changes.append((kind, ids_))
            due.append((at, first, tuple(sorted({*joined, *targets})), tuple(changes)))
            continue
        if batch_s > 0 and due:
            t = max(t, due[-1][0] + batch_s)                 # at most one view per batch_s
        batch_from = len(changes)
        changes.append((kind, ids_))
        due.append((t, index, targets, tuple(changes)))
    due = [d for d in due if d[0] <= duration_s]            # a batch pushed past the run's end is not announced
    # one walk in time order over the schedule's ops and the views (an op before a view at the same time)
    marks = sorted([(op.t, 0, k) for k, op in enumerate(timeline.ops)] + [(v[0], 1, k) for k, v in enumerate(due)])
    down: set[str] = set(timeline.joiners)
    paused: set[str] = set()
    missed: set[str] = set()
    latest: tuple[tuple[str, tuple[int, ...]], ...] = ()
    extra: list[Op] = []

    def view(t: float, index: int, targets: tuple[str, ...], views: tuple[tuple[str, tuple[int, ...]], ...]) -> None:
        extra.append(Op(t=t, seq=len(timeline.ops) + len(extra), kind=OpKind.GMS_VIEW, index=index,
                        targets=targets, params=(views, tuple(sorted(down)))))

    for t, kind, k in marks:
        if kind == 1:
            _, index, targets, latest = due[k]
            view(t, index, targets, latest)
            missed |= paused
            continue
        op = timeline.ops[k]
        if op.kind == OpKind.CRASH:
            down.update(op.targets)
            paused.difference_update(op.targets)
            missed.difference_update(op.targets)
        elif op.kind == OpKind.START:
            down.difference_update(op.targets)
        elif op.kind == OpKind.STOP_SIGNAL:
            paused.update(op.targets)
        elif op.kind == OpKind.CONT_SIGNAL:
            paused.difference_update(op.targets)
            back = missed & set(op.targets)
            if back:
                view(op.t, op.index, tuple(sorted(back)), latest)
                missed -= back
    return Timeline(actions=timeline.actions, ops=sorted(timeline.ops + extra), joiners=timeline.joiners)


def check_leaves(timeline: Timeline, has_gms: bool, protocol: str | None) -> None:
    """A `leave` needs a protocol whose membership service the orchestrator plays (it announces the departure);
    elsewhere a departure is a crash (FieldError: exit 2, before anything is built)."""
    if has_gms:
        return
    for op in timeline.ops:
        if op.kind == OpKind.CRASH and op.params == "leave":
            a = timeline.actions[op.index]
            raise FieldError(("schedule", op.index, "action"),
                             f"leave at {a.at}: {protocol or 'this experiment'} has no membership service the "
                             "orchestrator plays (QSM has), so nobody would announce the departure; use crash")


def check_supported(timeline: Timeline, supported: frozenset[OpKind], backend: str, why: str = "",
                    silent_crash: bool = True) -> None:
    """The one "not supported on this backend" check, before anything is built (exit 2). `silent_crash`: the
    backend can cut a member off the network (a crash's `mode: silent`)."""
    for op in timeline.ops:
        if op.kind == OpKind.CRASH and op.params == "silent" and not silent_crash:
            a = timeline.actions[op.index]
            raise FieldError(("schedule", op.index, "mode"),
                             f"{a.action} at {a.at}: mode silent is not supported on the {backend} backend (it "
                             "cannot drop a member's traffic); mode kill is")
        if op.kind not in supported:
            a = timeline.actions[op.index]
            raise FieldError(("schedule", op.index),
                             f"{a.action} at {a.at}: not supported on the {backend} backend "
                             f"({why or 'its driver cannot ' + op.kind.value.replace('_', ' ')})")
