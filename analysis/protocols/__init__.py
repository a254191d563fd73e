"""The analysis' protocol plug-ins, by protocol name (the node's `protocol.name`, the wire registry's
`Codec.name`).

Every run gets the generic metrics of analysis.metrics (delivery ratio and latency from `data_sent` /
`data_received`, traffic by message type, control overhead, throughput timeline, the schedule against them).
A protocol adds its own through a `ProtocolAnalysis` registered here (`register`): its Spark metrics, the key
numbers it adds to summary.json, its report sections, its part of a comparison of several runs and its columns
of the sweep analysis. A protocol without a plug-in (or a run whose protocol is unknown) gets `Generic`: the
generic metrics only. docs/analysis.md, "Adding a protocol: the analysis plug-in", walks through it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from analysis.doc import Doc
    from analysis.rundir import RunDir


@dataclass
class MetricsContext:
    """What a plug-in's `metrics` gets: the run's tables (Spark DataFrames, cached by the caller) and `table`,
    which collects a DataFrame's rows (list of dicts) and writes them to analysis/metrics/<name>.csv."""

    spark: SparkSession
    run: RunDir
    packets: DataFrame
    events: DataFrame
    members: DataFrame
    crash: DataFrame
    life: DataFrame
    table: Callable[[str, DataFrame], list[dict]]
    bin_s: float = 1.0


@dataclass
class ReportContext:
    """What a plug-in's `report` gets: the run, its summary (generic and the plug-in's keys), the plug-in's own
    collected data (what `metrics` returned), the schedule's applied operations and where figures go."""

    run: RunDir
    summary: dict[str, Any]
    data: dict[str, Any]
    actions: list[dict]
    figdir: Path
    bin_s: float = 1.0
    extra: dict[str, Any] = field(default_factory=dict)


class ProtocolAnalysis:
    """A protocol's part of the analysis. Subclass, set `name`, override what the protocol has; every method has
    a default that adds nothing, so `Generic` is this class itself."""

    name: ClassVar[str] = ""
    title: ClassVar[str] = ""
    # events counted per second in the timeline figure (beside the generic throughput)
    timeline_events: ClassVar[tuple[str, ...]] = ("data_received",)
    # columns of the comparison of several runs (keys of `summary`), after the generic ones
    compare_columns: ClassVar[tuple[str, ...]] = ()
    # the sweep analysis: values aggregated per point (mean and 95 % CI over repetitions) and the table's columns
    # (value key, label); the generic ones are used when a plug-in leaves them empty
    sweep_columns: ClassVar[tuple[tuple[str, str], ...]] = ()

    def describe(self, run: RunDir) -> str:
        """The report's `protocol` row: the name and the parameters that matter."""
        params = ", ".join(f"{k} = {v}" for k, v in sorted(run.params.items()) if not isinstance(v, (list, dict)))
        return f"{run.protocol or 'unknown'}" + (f": {params}" if params else "")

    def metrics(self, ctx: MetricsContext) -> dict[str, Any]:
        """Compute the protocol's own metrics (Spark); return what `summary` and `report` need (collected)."""
        return {}

    def summary(self, run: RunDir, data: dict[str, Any]) -> dict[str, Any]:
        """Key numbers merged into summary.json (and the row of a comparison)."""
        return {}

    def key_metrics(self, s: dict[str, Any]) -> list[list[Any]]:
        """Rows [metric, value] of the report's key metrics table, after the generic ones."""
        return []

    def report(self, doc: Doc, ctx: ReportContext) -> None:
        """Add the protocol's sections to the run's report."""

    def timeline_marks(self, data: dict[str, Any]) -> list[dict]:
        """Marks on the timeline's member rows: dicts with member, t_s, label, color."""
        return []

    def compare(self, summaries: list[dict], doc: Doc, out: Path) -> None:
        """Add the protocol's sections to a comparison of several runs of this protocol (files under `out`)."""

    def run_values(self, run: RunDir) -> dict[str, Any]:
        """The run's numbers, pure over its files (`run.events`, `run.manifest`, `run.members`, ...; the packets
        only where a number needs them): THE definition of every per-run number of the protocol (issue #38). The
        Spark summary (analysis/run.py merges it into summary.json), the sweep analysis, `tune`, sweep's validity
        check and the paper scripts (through analysis/figlib.py) all read it; a test per protocol checks that the
        Spark metrics agree with it on a real run. The default: the generic values."""
        return generic_values(run)

    def sweep_values(self, summary: dict[str, Any], queue: dict[str, Any]) -> dict[str, Any]:
        """A run's values for the sweep analysis (keys of `sweep_columns`; None when unmeasured)."""
        return generic_sweep_values(summary, queue)

    def sweep_figures(self, index: dict, agg: list[dict], figdir: Path) -> list[tuple[str, Path]]:
        """(title, png) figures of the sweep analysis."""
        return []


GENERIC_SWEEP_COLUMNS = (("delivery_ratio", "delivery ratio"), ("latency_median_s", "latency median (s)"),
                         ("latency_p90_s", "latency p90 (s)"), ("control_bytes_fraction", "control bytes"),
                         ("msgs_per_member_s", "msgs/member/s"))


def generic_sweep_values(summary: dict[str, Any], queue: dict[str, Any]) -> dict[str, Any]:
    return {"delivery_ratio": summary.get("delivery_ratio_mean"), "latency_median_s": summary.get("latency_median_s"),
            "latency_p90_s": summary.get("latency_p90_s"),
            "control_bytes_fraction": summary.get("control_bytes_fraction"),
            "msgs_per_member_s": summary.get("msgs_per_member_s")}


def crash_times(events: list[dict], t0: float) -> dict[str, float]:
    """member -> when the schedule crashed it first (t0 + the operation's `actual_s`; virtual unix seconds)."""
    out: dict[str, float] = {}
    for e in events:
        if e.get("event") == "action_applied" and e.get("op") == "crash" and e.get("actual_s") is not None:
            for m in e.get("targets") or []:
                out.setdefault(m, t0 + float(e["actual_s"]))
    return out


def message_receipts(events: list[dict], ids: dict[str, int],
                     crashed: dict[str, float]) -> list[tuple[int, Any, float, list[str], list[float]]]:
    """Per data message, in (origin id, seq) order: (origin id, seq, sent ts, the members alive at the send --
    started by it, not crashed at or before it, not the origin --, the latencies of the first `data_received` of
    those of them that logged one). analysis.metrics' definitions, which the Spark path computes; the generic
    delivery values and pbcast's delivery distribution both stand on it."""
    started: dict[str, float] = {}
    sent: dict[tuple[int, Any], float] = {}
    got: dict[tuple[str, Any, Any], float] = {}
    for e in events:
        ev, node, ts = e.get("event"), e.get("node"), e.get("ts")
        if ev == "node_started":
            started[node] = min(ts, started.get(node, ts))
        elif ev == "data_sent" and node in ids:
            key = (ids[node], e.get("seq"))
            sent[key] = min(ts, sent.get(key, ts))
        elif ev == "data_received":
            key = (node, e.get("origin"), e.get("seq"))
            got[key] = min(ts, got.get(key, ts))
    name_of = {i: n for n, i in ids.items()}
    out = []
    for (origin, seq), ts in sorted(sent.items()):
        alive = [m for m, st in started.items() if m != name_of.get(origin) and st <= ts
                 and (m not in crashed or crashed[m] > ts)]
        out.append((origin, seq, ts, alive, [got[(m, origin, seq)] - ts for m in alive if (m, origin, seq) in got]))
    return out


def event_delivery(events: list[dict], ids: dict[str, int], crashed: dict[str, float]) -> dict[str, Any]:
    """Delivery over the events (`message_receipts`): per data message with anyone alive at its send, the fraction
    of those members that logged `data_received`, and the latency of each such receipt."""
    import math
    import statistics

    rows = message_receipts(events, ids, crashed)
    ratios = [len(rec) / len(alive) for *_, alive, rec in rows if alive]
    lat = sorted(x for *_, alive, rec in rows for x in rec)

    def q(p: float) -> float | None:
        if not lat:
            return None
        k = (len(lat) - 1) * p
        lo = math.floor(k)
        return lat[lo] + (lat[min(lo + 1, len(lat) - 1)] - lat[lo]) * (k - lo)

    return {"data_messages": len(rows), "delivery_ratio_mean": statistics.fmean(ratios) if ratios else None,
            "delivery_ratio_min": min(ratios) if ratios else None, "latency_median_s": q(0.5),
            "latency_p90_s": q(0.9), "latency_max_s": lat[-1] if lat else None}


def generic_values(run: RunDir) -> dict[str, Any]:
    """Every protocol's numbers from the events: delivery ratio and latency (`event_delivery`)."""
    events = run.events
    ids = {m.name: m.id for m in run.members}
    return event_delivery(events, ids, crash_times(events, run.t0))


class Generic(ProtocolAnalysis):
    """The generic metrics only: a protocol without a plug-in, or a run whose protocol is unknown."""

    sweep_columns = GENERIC_SWEEP_COLUMNS


PLUGINS: dict[str, ProtocolAnalysis] = {}


def register(plugin: ProtocolAnalysis) -> ProtocolAnalysis:
    if not plugin.name:
        raise ValueError(f"{type(plugin).__name__}: a plug-in needs a name")
    PLUGINS[plugin.name] = plugin
    return plugin


def get(name: str | None) -> ProtocolAnalysis:
    """The plug-in of a protocol; `Generic` for a protocol without one (or None)."""
    _load()
    return PLUGINS.get(name or "", GENERIC)


def summary_protocol(summary: dict[str, Any]) -> str:
    """The protocol of a summary.json; summaries written before the protocol platform (no `protocol` key) are
    GSGC's, the only protocol then."""
    return summary.get("protocol") or "gsgc"


GENERIC = Generic()


def _load() -> None:
    """Import every module of this package (`analysis/protocols/<name>.py`): each registers its plug-in."""
    import importlib
    import pkgutil

    for mod in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{mod.name}")
