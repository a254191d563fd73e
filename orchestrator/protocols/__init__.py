"""The experiment file's `protocol:` section: one key naming the protocol, its parameters below it.

    protocol:
      gsgc: {subgroup: 3, step: 2s, fail_k: 10}

The section is a union discriminated by that key. Each protocol's experiment-side model is derived from the
node's own parameter model (`gossipnode.protocols.<name>.params`), so a parameter exists, and is checked, in one
place: a node field `x_s` (seconds) is written `x` in the experiment file with a unit (`2s`, `700ms`), every other
field keeps its name, and constraints (ranges, literals, unknown keys) are the node's. A protocol may add
orchestrator-side keys that are turned into node fields once the plan is known, and checks that need the plan
(GSGC's `local`, drawn local groups, and `sender_drops_per_step`): its module `orchestrator/protocols/<name>.py`
exports them as `ADAPTER`, found by name like the node's protocol packages. Errors come out like every spec error
(`file.yaml:LINE: protocol.gsgc.subgroup: ...`), before anything is built.
"""
from __future__ import annotations

import copy
import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, create_model, model_serializer, model_validator

from orchestrator.errors import SpecError
from orchestrator.units import parse_time


def _seconds(v: Any) -> Any:
    if isinstance(v, str):
        try:
            return parse_time(v)
        except SpecError as exc:
            raise ValueError(str(exc)) from None
    return v


@dataclass(frozen=True)
class Context:
    """What the node parameters may depend on besides the section: the plan's members and the experiment; `down`:
    the most members the schedule has down at once (crashed, not restarted yet; schedule.most_down); `joiners`:
    the members the schedule's `join` actions start late."""

    members: int
    seed: int
    down: int = 0
    joiners: tuple[str, ...] = ()


@dataclass(frozen=True)
class GroupContext:
    """What a protocol's multicast groups may depend on: the members' names in id order, the workload's senders'
    names, and the groups the experiment's `multicast:` section already declares (by name)."""

    names: list[str]
    senders: list[str]
    declared: list[str]


@dataclass(frozen=True)
class Adapter:
    """A protocol's orchestrator-side keys: their models, and how they become node fields."""

    extra_fields: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    to_node: Callable[[dict[str, Any], Context], dict[str, Any]] = lambda params, _ctx: params
    # warnings for a schedule that needs a way back into the group (`comebacks`: "heals a partition", "restarts
    # members", "joins members") that these parameters do not give; the run's manifest and report carry them
    schedule_warnings: Callable[[dict[str, Any], list[str]], list[str]] = lambda params, _comebacks: []
    # warnings for a schedule that changes who is in the group (`changes`: "crashes members", "restarts members",
    # "joins members") where the protocol's membership cannot follow; the manifest and report carry them too
    membership_warnings: Callable[[dict[str, Any], list[str]], list[str]] = lambda params, _changes: []
    # the IP multicast groups the protocol needs that the experiment does not declare, from the node parameters
    # (defaults included) and the members: [{name, members, senders}] (addresses are assigned by the plan)
    multicast_groups: Callable[[dict[str, Any], GroupContext], list[dict[str, Any]]] = lambda params, _ctx: []
    # a protocol whose group membership service the orchestrator plays (QSM's GMS): from the node parameters
    # (defaults included), how long after a crash the view without the crashed members is announced (the failure
    # detector's delay; schedule.with_gms), or None for no GMS
    gms_detect_s: Callable[[dict[str, Any]], float | None] = lambda params: None
    # and how far apart its views come at least (it batches the changes due meanwhile; schedule.with_gms)
    gms_batch_s: Callable[[dict[str, Any]], float] = lambda params: 0.0


def _adapters() -> dict[str, Adapter]:
    """Each protocol's orchestrator-side module `orchestrator/protocols/<name>.py` (optional): its `ADAPTER`."""
    from gossipnode.protocols import names

    found = {}
    for name in names():
        if (Path(__file__).parent / f"{name}.py").is_file():
            found[name] = importlib.import_module(f"{__name__}.{name}").ADAPTER
    return found


ADAPTERS: dict[str, Adapter] = _adapters()


def _experiment_model(name: str, params: type[BaseModel]) -> tuple[type[BaseModel], dict[str, str]]:
    """The experiment-side model of a node parameter model, and the renames (experiment key -> node field)."""
    fields: dict[str, Any] = {}
    renames: dict[str, str] = {}
    for fname, info in params.model_fields.items():
        if fname == "name":
            continue
        info = copy.copy(info)
        annotation = info.annotation
        key = fname
        if fname.endswith("_s"):
            key = fname[:-2]
            annotation = Annotated[annotation, BeforeValidator(_seconds)]
            renames[key] = fname
        fields[key] = (annotation, info)
    adapter = ADAPTERS.get(name, Adapter())
    fields.update(adapter.extra_fields)
    model = create_model(f"{params.__name__}Section", __config__=ConfigDict(extra="forbid", frozen=True),
                         **fields)
    return model, renames


def _sections() -> dict[str, tuple[type[BaseModel], dict[str, str]]]:
    from gossipnode.protocols.registry import PROTOCOLS

    return {name: _experiment_model(name, spec.params) for name, spec in PROTOCOLS.items()}


SECTIONS = _sections()


def _section_model() -> type[BaseModel]:
    fields = {name: (model | None, None) for name, (model, _) in SECTIONS.items()}

    class _Base(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        _raw: dict[str, Any]

        @model_validator(mode="wrap")
        @classmethod
        def _one(cls, data: Any, handler: Any) -> Any:
            if isinstance(data, ProtocolSection):
                return data
            names = ", ".join(SECTIONS)
            if isinstance(data, dict):
                if len(data) != 1:
                    raise ValueError(f"name exactly one protocol (available: {names}), got {len(data)} keys")
                (key, value), = data.items()
                if key not in SECTIONS:
                    raise ValueError(f"unknown protocol {key!r} (available: {names})")
                if value is None:                # `direct:` with every parameter at its default
                    data = {key: {}}
            model = handler(data)
            model._raw = copy.deepcopy(data)
            return model

        @model_serializer(mode="plain")
        def _dump(self) -> dict[str, Any]:
            return copy.deepcopy(self._raw)

        @property
        def name(self) -> str:
            return next(iter(self._raw))

        def __getitem__(self, key: str) -> Any:
            return self._raw[key]

        def __contains__(self, key: object) -> bool:
            return key in self._raw

        def keys(self) -> Any:
            return self._raw.keys()

        def schedule_warnings(self, actions: list[str]) -> list[str]:
            """What the protocol's adapter says of a schedule with these actions (in order) that brings members
            back (a heal after a partition, a restart, a join) or changes who is in the group (a crash, a restart,
            a join) with these parameters."""
            adapter, given = ADAPTERS.get(self.name, Adapter()), self._given()
            changes = [w for a, w in (("crash", "crashes members"), ("restart", "restarts members"),
                                      ("join", "joins members")) if a in actions]
            out = adapter.membership_warnings(given, changes) if changes else []
            comebacks: list[str] = []
            cut = False
            for a in actions:
                cut = cut or a == "partition"
                if a == "heal" and cut and "heals a partition" not in comebacks:
                    comebacks.append("heals a partition")
            comebacks += [w for a, w in (("restart", "restarts members"), ("join", "joins members")) if a in actions]
            if not comebacks:
                return out
            return out + adapter.schedule_warnings(given, comebacks)

        def _given(self) -> dict[str, Any]:
            """The parameters the file gives (experiment keys, validated values), defaults left out."""
            section: BaseModel = getattr(self, self.name)
            raw = self._raw[self.name] or {}
            return {k: v for k, v in section.model_dump(mode="json").items() if k in raw}

        def _all_fields(self) -> dict[str, Any]:
            """Every node parameter (defaults included), by its node field name."""
            section: BaseModel = getattr(self, self.name)
            _, renames = SECTIONS[self.name]
            return {renames.get(k, k): v for k, v in section.model_dump(mode="json").items()}

        def derived_groups(self, ctx: GroupContext) -> list[dict[str, Any]]:
            """The multicast groups this protocol needs beyond the declared ones (its adapter's), from every node
            parameter (defaults included)."""
            return ADAPTERS.get(self.name, Adapter()).multicast_groups(self._all_fields(), ctx)

        def gms_detect_s(self) -> float | None:
            """The adapter's `gms_detect_s` from every node parameter (defaults included)."""
            return ADAPTERS.get(self.name, Adapter()).gms_detect_s(self._all_fields())

        def gms_batch_s(self) -> float:
            """The adapter's `gms_batch_s` from every node parameter (defaults included)."""
            return ADAPTERS.get(self.name, Adapter()).gms_batch_s(self._all_fields())

        def node_params(self, ctx: Context) -> dict[str, Any]:
            """The node config's `protocol` section: {name, ...node fields}."""
            _, renames = SECTIONS[self.name]
            params = {renames.get(k, k): v for k, v in self._given().items()}
            params = ADAPTERS.get(self.name, Adapter()).to_node(params, ctx)
            return {"name": self.name, **params}

    return create_model("ProtocolSection", __base__=_Base, **fields)


ProtocolSection = _section_model()
