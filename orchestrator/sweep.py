"""Sweeps, pure: an experiment's `sweep:` block → axes → points (coordinates, repetition, seeds, point id) → the
experiment of each point. No I/O; `orchestrator.sweeprun` runs the points.

```yaml
sweep:
  axes:
    protocol.gsgc.subgroup: [1, 3]        # a plain axis: a path into the experiment and its values
    protocol.gsgc.step: [2s, 5s, 9s]
    scheme:                               # a named axis: each labelled value sets several paths at once
      global: {protocol.gsgc.local: null, protocol.gsgc.step: 2s}
      local: {protocol.gsgc.local: {group_size: 50, controllers: 5}, protocol.gsgc.step: 700ms}
  repetitions: 2                          # or {count: 20, seed_paths: [seed, topology.members.seed]}
```

Points are the cartesian product of the axes (in the order written, the last axis varying fastest) times the
repetitions. Repetition r sets every seed path to its value in the experiment plus r, so repetitions have distinct
seeds and the same repetition of two points shares its seeds (common random numbers). A point's id names its
coordinates and repetition, e.g. `subgroup-3_step-9s_r1`; an axis is named by the last component of its path
unless that is ambiguous (then by the whole path) or it is a named axis.
"""
from __future__ import annotations

import copy
import hashlib
import itertools
import json
import re
from dataclasses import dataclass, field
from typing import Any

from orchestrator.errors import SpecError

REP = "rep"
_SAFE = re.compile(r"[^A-Za-z0-9.+]+")
_MISSING = object()


@dataclass(frozen=True)
class AxisValue:
    label: str
    sets: tuple[tuple[str, Any], ...]  # (path, value) pairs


@dataclass(frozen=True)
class Axis:
    name: str                   # short name used in point ids and --only
    key: str                    # as written in the file (a path for plain axes)
    values: tuple[AxisValue, ...]


@dataclass(frozen=True)
class SweepSpec:
    axes: tuple[Axis, ...]
    repetitions: int = 1
    seed_paths: tuple[str, ...] = ("seed",)


@dataclass(frozen=True)
class Point:
    id: str
    coords: tuple[tuple[str, str], ...]     # (axis name, value label), in axis order
    rep: int
    sets: tuple[tuple[str, Any], ...] = field(default=())   # (path, value): axis values, then seeds

    @property
    def group(self) -> str:
        """The id without the repetition: the points whose runs are averaged together."""
        return point_id(self.coords, None)

    def coord(self, name: str) -> str | None:
        return dict(self.coords).get(name)


# --- parsing ----------------------------------------------------------------------------------------------------

def label_of(value: Any) -> str:
    """A short, file-name-safe label for an axis value: 9s, 3, 0.7, none, true."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, (dict, list)):
        value = json.dumps(value, sort_keys=True, separators=(",", ":"))
    text = _SAFE.sub("-", str(value)).strip("-")
    return text or "empty"


def _short_names(keys: list[str], named: set[str]) -> dict[str, str]:
    last = {k: (k if k in named else k.rsplit(".", 1)[-1]) for k in keys}
    counts: dict[str, int] = {}
    for v in last.values():
        counts[v] = counts.get(v, 0) + 1
    return {k: (v if counts[v] == 1 else k) for k, v in last.items()}


def parse_sweep(block: Any, where: str = "sweep") -> SweepSpec:
    """Validate a `sweep:` block. Raises SpecError naming the problem."""
    if not isinstance(block, dict):
        raise SpecError(f"{where}: expected a mapping with `axes:` (and optionally `repetitions:`)")
    unknown = set(block) - {"axes", "repetitions"}
    if unknown:
        raise SpecError(f"{where}: unknown key(s) {sorted(unknown)} (known: axes, repetitions)")
    raw_axes = block.get("axes") or {}
    if not isinstance(raw_axes, dict):
        raise SpecError(f"{where}.axes: expected a mapping of axis → values")
    named = {k for k, v in raw_axes.items() if isinstance(v, dict)}
    names = _short_names(list(raw_axes), named)
    axes = []
    for key, vals in raw_axes.items():
        if not isinstance(key, str) or not key or key == REP:
            raise SpecError(f"{where}.axes: {key!r} is not a valid axis name")
        if isinstance(vals, dict):          # named axis: label → {path: value}
            values = []
            for label, sets in vals.items():
                if not isinstance(sets, dict) or not sets:
                    raise SpecError(f"{where}.axes.{key}.{label}: expected a mapping of path → value")
                values.append(AxisValue(label_of(label), tuple((str(p), v) for p, v in sets.items())))
        elif isinstance(vals, list):
            values = [AxisValue(label_of(v), ((key, v),)) for v in vals]
        else:
            raise SpecError(f"{where}.axes.{key}: expected a list of values (or a mapping label → settings)")
        if not values:
            raise SpecError(f"{where}.axes.{key}: no values")
        labels = [v.label for v in values]
        if len(set(labels)) != len(labels):
            raise SpecError(f"{where}.axes.{key}: two values have the same label ({labels})")
        axes.append(Axis(names[key], key, tuple(values)))
    reps = block.get("repetitions", 1)
    seed_paths: tuple[str, ...] = ("seed",)
    if isinstance(reps, dict):
        extra = set(reps) - {"count", "seed_paths"}
        if extra:
            raise SpecError(f"{where}.repetitions: unknown key(s) {sorted(extra)} (known: count, seed_paths)")
        sp = reps.get("seed_paths", ["seed"])
        if not isinstance(sp, list) or not all(isinstance(p, str) for p in sp):
            raise SpecError(f"{where}.repetitions.seed_paths: expected a list of paths")
        seed_paths, reps = tuple(sp), reps.get("count", 1)
    if not isinstance(reps, int) or isinstance(reps, bool) or reps < 1:
        raise SpecError(f"{where}.repetitions: {reps!r} is not a positive integer")
    return SweepSpec(tuple(axes), reps, seed_paths)


def override_axis(spec: SweepSpec, key: str, values: list[Any]) -> SweepSpec:
    """Replace (or add) a plain axis: `--axis protocol.gsgc.step=2s,5s`."""
    kept = [a for a in spec.axes if a.key != key and a.name != key]
    raw = {a.key: [v.sets[0][1] for v in a.values] if len(a.values[0].sets) == 1 and a.values[0].sets[0][0] == a.key
           else {v.label: dict(v.sets) for v in a.values} for a in kept}
    replaced = next((a for a in spec.axes if a.key == key or a.name == key), None)
    raw[replaced.key if replaced else key] = list(values)
    order = [a.key for a in spec.axes] + ([] if replaced else [key])
    new = parse_sweep({"axes": {k: raw[k] for k in order}, "repetitions": spec.repetitions})
    return SweepSpec(new.axes, spec.repetitions, spec.seed_paths)


# --- paths into the experiment ----------------------------------------------------------------------------------

def get_path(doc: dict, path: str, default: Any = _MISSING) -> Any:
    cur: Any = doc
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            if default is _MISSING:
                raise SpecError(f"{path}: not found in the experiment")
            return default
        cur = cur[part]
    return cur


def set_path(doc: dict, path: str, value: Any) -> dict:
    """A deep copy of `doc` with `path` (dotted) set to `value`; intermediate mappings are created."""
    out = copy.deepcopy(doc)
    cur = out
    parts = path.split(".")
    for part in parts[:-1]:
        nxt = cur.get(part)
        if nxt is None:
            nxt = cur[part] = {}
        if not isinstance(nxt, dict):
            raise SpecError(f"{path}: {part!r} is not a mapping in the experiment")
        cur = nxt
    cur[parts[-1]] = copy.deepcopy(value)
    return out


# --- expansion --------------------------------------------------------------------------------------------------

def point_id(coords: tuple[tuple[str, str], ...], rep: int | None) -> str:
    parts = [f"{label_of(name.rsplit('.', 1)[-1] if '.' in name else name)}-{label}" for name, label in coords]
    if rep is not None:
        parts.append(f"r{rep}")
    return "_".join(parts) or "base"


def parse_only(items: list[str] | None, spec: SweepSpec) -> dict[str, set[str]]:
    """`--only k=v` (repeatable; one key several times = any of those values). Keys: an axis name or key, or
    `rep`. Unknown keys or values are errors listing what exists."""
    out: dict[str, set[str]] = {}
    by_key = {a.name: a for a in spec.axes} | {a.key: a for a in spec.axes}
    for item in items or []:
        if "=" not in item:
            raise SpecError(f"--only {item!r}: expected AXIS=VALUE")
        k, v = item.split("=", 1)
        if k == REP:
            if not v.isdigit() or int(v) >= spec.repetitions:
                raise SpecError(f"--only rep={v}: repetitions are 0..{spec.repetitions - 1}")
            out.setdefault(REP, set()).add(v)
            continue
        axis = by_key.get(k)
        if axis is None:
            raise SpecError(f"--only {item!r}: no axis {k!r} (axes: {', '.join(a.name for a in spec.axes) or 'none'})")
        label = label_of(v)
        if label not in {x.label for x in axis.values}:
            raise SpecError(f"--only {item!r}: {axis.name} has no value {v!r} "
                            f"(values: {', '.join(x.label for x in axis.values)})")
        out.setdefault(axis.name, set()).add(label)
    return out


def expand(spec: SweepSpec, base: dict, only: dict[str, set[str]] | None = None) -> list[Point]:
    """Every point (filtered by `only`), repetitions innermost. `base` is the experiment (for the seeds)."""
    only = only or {}
    seeds0 = {p: get_path(base, p, None) for p in spec.seed_paths}
    missing = [p for p, v in seeds0.items() if not isinstance(v, int)]
    if missing:
        raise SpecError(f"sweep.repetitions.seed_paths: {missing} are not integers in the experiment")
    points = []
    for combo in itertools.product(*(a.values for a in spec.axes)):
        coords = tuple((a.name, v.label) for a, v in zip(spec.axes, combo))
        if any(name in only and label not in only[name] for name, label in coords):
            continue
        sets = tuple(s for v in combo for s in v.sets)
        for rep in range(spec.repetitions):
            if REP in only and str(rep) not in only[REP]:
                continue
            seeds = tuple((p, seeds0[p] + rep) for p in spec.seed_paths)
            points.append(Point(point_id(coords, rep), coords, rep, sets + seeds))
    return points


def point_experiment(base: dict, point: Point) -> dict:
    """The experiment of one point: the base with the point's settings, without the `sweep:` block."""
    doc = {k: v for k, v in base.items() if k != "sweep"}
    for path, value in point.sets:
        doc = set_path(doc, path, value)
    return doc


def digest(doc: dict) -> str:
    """A stable digest of an experiment dict: a finished point is reused only if its experiment is unchanged."""
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:16]


def eta(elapsed: list[float], remaining: int, first_guess: float | None = None) -> float | None:
    """Seconds left: the mean time of the points run so far times the points left (`first_guess` per point
    before any has finished; None if there is no basis for an estimate)."""
    if remaining <= 0:
        return 0.0
    if elapsed:
        return sum(elapsed) / len(elapsed) * remaining
    return first_guess * remaining if first_guess is not None else None


# --- parallel points: slots, and whether K points fit on this machine -------------------------------------------

def slot_name(base: str, slot: int) -> str:
    """The lab name of a parallel slot: the base name (cut to fit the 16-character lab names) plus `-k<slot>`."""
    suffix = f"-k{slot}"
    head = base[:16 - len(suffix)].rstrip("-") or "sweep"
    return head + suffix


def slot_addressing(nodes: str, links: str, slot: int, slots: int) -> tuple[str, str]:
    """The node and link address pools of `slot` out of `slots`: the experiment's pools moved up by `slot` times
    the larger pool's size, so no two slots' pools (nodes or links) overlap. SpecError if they cannot be made
    disjoint or leave the IPv4 space."""
    import ipaddress

    pools = [ipaddress.IPv4Network(nodes), ipaddress.IPv4Network(links)]
    stride = max(p.num_addresses for p in pools)
    out: list[list[ipaddress.IPv4Network]] = []
    for s in range(slots):
        moved = []
        for p in pools:
            first = int(p.network_address) + s * stride
            if first + p.num_addresses > 2 ** 32:
                raise SpecError(f"--parallel {slots}: the address pools ({nodes}, {links}) do not fit {slots} "
                                "times in IPv4; choose smaller `addressing:` pools")
            moved.append(ipaddress.IPv4Network((first, p.prefixlen)))
        out.append(moved)
    every = [(s, p) for s, ps in enumerate(out) for p in ps]
    for i, (s, p) in enumerate(every):
        for t, q in every[i + 1:]:
            if s != t and p.overlaps(q):
                raise SpecError(f"--parallel {slots}: slot {s}'s pool {p} overlaps slot {t}'s {q} (addressing "
                                f"nodes {nodes}, links {links}); choose pools further apart")
    return str(out[slot][0]), str(out[slot][1])


DEFAULT_NODES_POOL = "10.0.0.0/16"      # orchestrator.models.Addressing's defaults
DEFAULT_LINKS_POOL = "10.128.0.0/15"


def slot_experiment(doc: dict, slot: int, slots: int, base_name: str) -> dict:
    """A point's experiment as parallel slot `slot` runs it: its own lab name and its own address pools (what the
    point measures is unchanged; its digest is taken before this)."""
    addressing = doc.get("addressing") or {}
    nodes, links = slot_addressing(addressing.get("nodes", DEFAULT_NODES_POOL),
                                   addressing.get("links", DEFAULT_LINKS_POOL), slot, slots)
    out = set_path(doc, "name", slot_name(doc.get("name") or base_name, slot))
    out = set_path(out, "addressing.nodes", nodes)
    return set_path(out, "addressing.links", links)


MEMBER_MEM_BYTES = 40 * 2 ** 20         # a member process (~35 MB RSS, docs/packing.md), rounded up
PACKED_MEMBER_MEM_BYTES = 3 * 2 ** 20   # a member packed with others (issue #21's target)
LAB_MEM_BYTES = 150 * 2 ** 20           # the point's orchestrator, delay line and multicast daemons
MEMBER_CPU = 0.02                       # cores a member process uses at the sweeps' rates (gossip, timers)
LAB_CPU = 0.1                           # the point's orchestrator (schedule, health checks) and idle daemons
DELAYLINE_S_PER_HOP = 56e-6             # CPU seconds per packet-hop of the delay line (docs/benchmarks.md)
CPU_HEADROOM = 0.8                      # at most this share of the cores is planned, the rest keeps timers on time
MEM_HEADROOM = 0.8                      # and of MemAvailable


@dataclass(frozen=True)
class PointNeed:
    members: int
    processes: int
    cpu_cores: float
    mem_bytes: int
    delayline_cores: float | None = None    # known (measured or from a packet rate) or None

    def describe(self) -> str:
        dl = f", delay line {self.delayline_cores:.2f}" if self.delayline_cores is not None else ""
        return (f"{self.members} members in {self.processes} processes: {self.cpu_cores:.2f} cores{dl}, "
                f"{self.mem_bytes / 2 ** 20:.0f} MiB")


def member_count(doc: dict) -> int:
    topo = doc.get("topology") or {}
    members = topo.get("members", "all")
    if isinstance(members, dict):
        return int(members.get("count", 0))
    return int(topo.get("nodes", 0))


def point_need(doc: dict, pkt_hops_per_s: float | None = None, delayline_cores: float | None = None,
               member_cores: float | None = None, share: float | None = None) -> PointNeed:
    """What one point's lab needs while it runs: a process per member (or per `nodes.packing` members), ~40 MB
    per member process, CPU per member — measured (`member_cores`: virtual cores per member of a finished point
    of the sweep, its manifest's `member_cpu` x its dilation) or else the fixed guess MEMBER_CPU, capped by the
    member's budget `nodes.cpu` — and the delay line's CPU when its load is known — measured (`delayline_cores`,
    virtual, from a finished point's tc/delayline.json) or from a packet rate (virtual packet-hops/s times the
    delay line's cost per packet-hop) —, all divided by the point's time dilation (docs/virtual-time.md). A point
    with `time: {dilation: auto}` sizes its dilation to `share` (its share of the planned cores): it needs that."""
    members = member_count(doc)
    packing = get_path(doc, "nodes.packing", "process")
    per = packing if isinstance(packing, int) and not isinstance(packing, bool) and packing > 1 else 1
    processes = -(-members // per)
    mem = LAB_MEM_BYTES + (processes * MEMBER_MEM_BYTES if per == 1
                           else processes * MEMBER_MEM_BYTES // 2 + members * PACKED_MEMBER_MEM_BYTES)
    dl = delayline_cores
    if dl is None and pkt_hops_per_s is not None:
        dl = pkt_hops_per_s * DELAYLINE_S_PER_HOP
    dilation = get_path(doc, "time.dilation", 1.0)
    if dilation == "auto" and share is not None:
        return PointNeed(members, processes, share, mem, dl)
    n = float(dilation) if dilation != "auto" else 1.0
    each = MEMBER_CPU if member_cores is None else member_cores
    budget = get_path(doc, "nodes.cpu", None)
    if isinstance(budget, (int, float)) and not isinstance(budget, bool):
        each = min(each, budget)
    cpu = LAB_CPU + (members * each + (dl or 0.0)) / n
    return PointNeed(members, processes, cpu, mem, None if dl is None else dl / n)


@dataclass(frozen=True)
class Fit:
    ok: bool
    k: int                      # asked for
    max_k: int                  # the largest K that fits (at least 1: one point at a time is always allowed)
    cpu_need: float             # the K largest points together
    mem_need: int
    cpu_budget: float
    mem_budget: int
    at_once: int = 0            # the points that would run at once: K, or fewer when there are fewer points

    def message(self) -> str:
        if self.ok:
            return (f"--parallel {self.k}: {self.cpu_need:.2f} of {self.cpu_budget:.2f} planned cores, "
                    f"{self.mem_need / 2 ** 20:.0f} of {self.mem_budget / 2 ** 20:.0f} MiB")
        return (f"--parallel {self.k} would oversubscribe this machine: {self.at_once or self.k} points at once need "
                f"{self.cpu_need:.2f} cores and {self.mem_need / 2 ** 20:.0f} MiB, and the emulation stays "
                f"faithful within {self.cpu_budget:.2f} cores ({CPU_HEADROOM:.0%} of the cores) and "
                f"{self.mem_budget / 2 ** 20:.0f} MiB ({MEM_HEADROOM:.0%} of MemAvailable); the largest K that "
                f"fits is {self.max_k}")


def fit(needs: list[PointNeed], k: int, cores: int, mem_available: int) -> Fit:
    """Do `k` of these points fit at once? The worst case is the `k` largest together (by CPU, then memory);
    `max_k` is the largest count whose largest points fit (at least 1, and at most the number of points)."""
    cpu_budget = cores * CPU_HEADROOM
    mem_budget = int(mem_available * MEM_HEADROOM)
    by_cpu = sorted((n.cpu_cores for n in needs), reverse=True)
    by_mem = sorted((n.mem_bytes for n in needs), reverse=True)

    def fits(j: int) -> bool:
        return sum(by_cpu[:j]) <= cpu_budget and sum(by_mem[:j]) <= mem_budget

    max_k = 1
    while max_k < len(needs) and fits(max_k + 1):
        max_k += 1
    kk = min(k, len(needs)) if needs else k
    return Fit(kk <= 1 or fits(kk), k, max_k, sum(by_cpu[:kk]), sum(by_mem[:kk]), cpu_budget, mem_budget, kk)
