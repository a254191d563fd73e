"""The experiment file's models (pydantic; docs/architecture.md §1): topology, links, addressing, capture and the
whole `Experiment`. Pure. Loading a file (YAML, templates, located errors) is `orchestrator.source`; validating
one against its plan and schedule is `orchestrator.spec`."""
from __future__ import annotations

import ipaddress
import re
from typing import Any, Literal

from pydantic import (BaseModel, ConfigDict, Field, ValidationInfo, field_validator,
                      model_validator)

from orchestrator.errors import SpecError
from orchestrator.mcast.spec import MulticastSpec
from orchestrator.protocols import ProtocolSection
from orchestrator.shaping.params import DirParams, GilbertElliott
from orchestrator.units import parse_probability, parse_rate, parse_time

NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,15}$")


def check_name(name: str, what: str = "name") -> str:
    """Lab and node names end up in namespace, file and interface names: keep them boring."""
    if not NAME_RE.match(name):
        raise SpecError(
            f"{what} {name!r} is invalid: use 1-16 characters a-z, 0-9 and '-', starting with a letter "
            "(no spaces or shell metacharacters)"
        )
    return name


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SparseMembers(Strict):
    count: int = Field(ge=1)
    seed: int = 0


class TreeTopology(Strict):
    kind: Literal["tree"]
    nodes: int = Field(ge=2, le=30000)
    degree: int = Field(ge=2, le=64, description="links of an interior node (root: degree children)")
    members: Literal["all"] | SparseMembers = "all"

    @field_validator("members")
    @classmethod
    def _members_fit(cls, v, info: ValidationInfo):
        nodes = info.data.get("nodes")
        if isinstance(v, SparseMembers) and nodes is not None and v.count > nodes:
            raise ValueError(f"members.count ({v.count}) is larger than nodes ({nodes})")
        return v


class GEModel(Strict):
    p: float = Field(ge=0, le=1)
    r: float = Field(ge=0, le=1)
    loss_bad: float = Field(1.0, ge=0, le=1)
    loss_good: float = Field(0.0, ge=0, le=1)


class DirSpec(Strict):
    """Shaping of one direction; every field optional so overrides can change one thing."""

    rate: str | int | None = None
    delay: str | float | None = None
    jitter: str | float | None = None
    jitter_dist: Literal["uniform", "normal"] | None = None
    loss: str | float | None = None
    gemodel: GEModel | None = None
    queue: int | None = Field(None, ge=1, le=100000)
    reorder: str | float | None = None

    @field_validator("rate")
    @classmethod
    def _rate(cls, v):
        if v is not None:
            parse_rate(v)
        return v

    @field_validator("delay", "jitter")
    @classmethod
    def _time(cls, v):
        if v is not None:
            parse_time(v)
        return v

    @field_validator("loss", "reorder")
    @classmethod
    def _prob(cls, v):
        if v is not None:
            parse_probability(v)
        return v

    def apply(self, base: DirParams) -> DirParams:
        """Overlay the fields given here on `base`."""
        changes: dict[str, Any] = {}
        if self.rate is not None:
            changes["rate_bps"] = parse_rate(self.rate)
        if self.delay is not None:
            changes["delay_s"] = parse_time(self.delay)
        if self.jitter is not None:
            changes["jitter_s"] = parse_time(self.jitter)
        if self.jitter_dist is not None:
            changes["jitter_dist"] = self.jitter_dist
        if self.loss is not None:
            changes["loss"] = parse_probability(self.loss)
        if self.gemodel is not None:
            changes["gemodel"] = GilbertElliott(**self.gemodel.model_dump())
        if self.queue is not None:
            changes["queue_pkts"] = self.queue
        if self.reorder is not None:
            changes["reorder"] = parse_probability(self.reorder)
        return DirParams(**{**base.__dict__, **changes})


class LinkSpec(DirSpec):
    """Both directions (the plain fields), refined per direction: `down` = parent->child, `up` = child->parent."""

    up: DirSpec | None = None
    down: DirSpec | None = None

    def resolve(self, base_down: DirParams, base_up: DirParams) -> tuple[DirParams, DirParams]:
        both = DirSpec(**{k: getattr(self, k) for k in DirSpec.model_fields})
        down, up = both.apply(base_down), both.apply(base_up)
        if self.down:
            down = self.down.apply(down)
        if self.up:
            up = self.up.apply(up)
        return down, up


class LinkOverride(LinkSpec):
    link: tuple[str, str] | None = Field(None, description="the link between these two nodes")
    subtree: str | None = Field(None, description="every link below this node, and its own uplink")

    @model_validator(mode="after")
    def _one_target(self) -> "LinkOverride":
        if (self.link is None) == (self.subtree is None):
            raise ValueError("an override names exactly one of `link: [a, b]` or `subtree: NODE`")
        return self


class LinksSpec(LinkSpec):
    overrides: list[LinkOverride] = []


class Addressing(Strict):
    nodes: str = "10.0.0.0/16"
    links: str = "10.128.0.0/15"

    @field_validator("nodes", "links")
    @classmethod
    def _network(cls, v: str) -> str:
        try:
            ipaddress.IPv4Network(v)
        except ValueError as exc:
            raise ValueError(f"{v!r} is not an IPv4 network like 10.0.0.0/16 ({exc})") from None
        return v


class CaptureSpec(Strict):
    interfaces: Literal["access", "all", "none"] = "access"
    snaplen: int = Field(128, ge=64, le=65535)


class NodesSpec(Strict):
    """How the members' protocol nodes run (issue #21, docs/packing.md): `packing: process` (a process per member),
    `N` (N members per process: packed members, each with its own sockets in its own namespace) or `auto`
    (processes while they fit in memory, else packs; `orchestrator.backends.packing.decide`)."""

    packing: Literal["process", "auto"] | int = "auto"
    # A CPU budget per member in virtual cores (issue #33): 1.0 = one CPU per node, as the papers had. Enforced
    # by CFS bandwidth control on a cgroup per member process (a pack gets its members' sum), real quota cpu / N.
    cpu: float | None = Field(None, gt=0, allow_inf_nan=False)

    @field_validator("packing", mode="before")
    @classmethod
    def _packing(cls, v):
        if isinstance(v, str) and v.strip().isdigit():
            v = int(v.strip())
        if isinstance(v, bool) or not (v in ("process", "auto") or (isinstance(v, int) and v >= 1)):
            raise ValueError(f"packing is `process`, `auto` or a number of members per process (an integer >= 1), "
                             f"not {v!r}")
        return v


class TimeSpec(Strict):
    """Virtual time (issue #33, docs/virtual-time.md): one virtual second lasts `dilation` real seconds everywhere
    the testbed controls time (node clocks and timers, schedule, delay line, probe, duration). `auto`: the
    smallest dilation at which the members' CPU budgets (or their measured CPU) and the lab's daemons fit in
    CPU_HEADROOM of the cores (orchestrator.timebase.resolve_dilation)."""

    dilation: float | Literal["auto"] = 1.0

    @field_validator("dilation", mode="before")
    @classmethod
    def _dilation(cls, v):
        return check_dilation(v)


MAX_DILATION = 1000.0


def check_dilation(v):
    """A dilation as the experiment file or `--dilation` gives it: `auto`, or a number in (0, 1000]. ValueError."""
    if isinstance(v, str):
        text = v.strip()
        if text == "auto":
            return "auto"
        try:
            v = float(text)
        except ValueError:
            raise ValueError(f"dilation is a number > 0 or `auto`, not {v!r}") from None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
        raise ValueError(f"dilation is a number > 0 or `auto`, not {v!r}")
    if not 0 < v <= MAX_DILATION:
        raise ValueError(f"dilation {v:g} is outside (0, {MAX_DILATION:g}]: one virtual second lasts that many "
                         f"real seconds")
    return float(v)


class Experiment(Strict):
    name: str | None = None
    description: str | None = None
    topology: TreeTopology
    links: LinksSpec = LinksSpec()
    addressing: Addressing = Addressing()
    # The protocol section is checked against the node's own parameter models (orchestrator/protocols.py);
    # workload and schedule are validated by the node and the runner, which own their meaning.
    protocol: ProtocolSection | None = None
    workload: dict[str, Any] = {}
    schedule: list[dict[str, Any]] = []
    capture: CaptureSpec = CaptureSpec()
    duration: str | float = "60s"
    seed: int = 1
    # Parameter axes and repetitions for `orchestrator sweep` (validated by orchestrator.sweep; `run` ignores it).
    sweep: dict[str, Any] | None = None
    multicast: MulticastSpec | None = None   # IP multicast groups (orchestrator/mcast, docs/multicast.md)
    nodes: NodesSpec = NodesSpec()            # how the members' nodes run: packing (docs/packing.md), CPU budget
    time: TimeSpec = TimeSpec()               # virtual time: the dilation (docs/virtual-time.md)

    @field_validator("name")
    @classmethod
    def _name(cls, v):
        if v is not None:
            try:
                check_name(v, "experiment name")
            except SpecError as exc:
                raise ValueError(str(exc)) from None
        return v

    @field_validator("duration")
    @classmethod
    def _duration(cls, v):
        parse_time(v)
        return v

    @property
    def duration_s(self) -> float:
        return parse_time(self.duration)
