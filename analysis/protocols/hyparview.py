"""HyParView's analysis plug-in (seed 003 §5), and `OverlayAnalysis`, what the plug-ins of its baselines (Cyclon,
Scamp, CyclonAcked) share: reliability per broadcast, reliability after the first crash and cycles to heal, the
crash itself and the failure detector's suspicions, hops to delivery, and the overlay's graph properties
(in-degree distribution, clustering coefficient, average shortest path) of the dissemination view before the first
crash and at the end of the run. All of them are `run_values`, pure over the run's events (definitions:
analysis/protocols/overlay.py); the plug-ins have no Spark metrics of their own (the generic ones stay)."""
from __future__ import annotations

from typing import Any

from analysis.doc import Doc, Heading, Para, Table, fmt
from analysis.protocols import (GENERIC_SWEEP_COLUMNS, ProtocolAnalysis, ReportContext, generic_sweep_values,
                                generic_values, register)
from analysis.protocols import overlay


class OverlayAnalysis(ProtocolAnalysis):
    """The numbers every peer-sampling protocol of seed 003 shares; `view` names its dissemination view."""

    view = "active"
    timeline_events = ("data_received", "view_changed", "connection_failed")
    compare_columns = ("reliability_before", "reliability_after", "reliability_after_first", "cycles_to_heal",
                       "cycles_to_heal_mean", "clustering_before", "shortest_path_before", "max_hops_before")
    # Figure 2 (reliability after the crash) and Figure 4 (cycles to heal) as sweep values, beside the generic ones
    sweep_columns = (("reliability_before", "reliability before the crash"),
                     ("reliability_after", "reliability after the crash"),
                     ("reliability_after_first", "reliability, first 2 cycles (by time) after the crash"),
                     ("cycles_to_heal", "cycles to heal (every later broadcast)"),
                     ("cycles_to_heal_mean", "cycles to heal (mean over 4 cycles)")) + GENERIC_SWEEP_COLUMNS

    def run_values(self, run) -> dict[str, Any]:
        """The generic values (delivery, latency) and the overlay's (`overlay.values` over `view`)."""
        return {**generic_values(run), **overlay.values(run, self.view)}

    def sweep_values(self, summary: dict[str, Any], queue: dict[str, Any]) -> dict[str, Any]:
        return {**{k: summary.get(k) for k, _ in self.sweep_columns[:5]}, **generic_sweep_values(summary, queue)}

    def key_metrics(self, s: dict[str, Any]) -> list[list[Any]]:
        return [["reliability before the crash", fmt(s.get("reliability_before"))],
                ["reliability after the crash", fmt(s.get("reliability_after"))],
                ["reliability, first 2 cycles (by time) after the crash", fmt(s.get("reliability_after_first"))],
                ["cycles to heal", fmt(s.get("cycles_to_heal"))],
                ["cycles to heal (mean over 4 cycles)", fmt(s.get("cycles_to_heal_mean"))],
                ["clustering coefficient (before)", fmt(s.get("clustering_before"))],
                ["average shortest path (before)", fmt(s.get("shortest_path_before"))],
                ["maximum hops to delivery (mean over broadcasts before the crash)", fmt(s.get("max_hops_before"))]]

    def report(self, doc: Doc, ctx: ReportContext) -> None:
        s = ctx.summary
        doc.add(Heading(2, f"{self.title}: overlay and reliability"))
        rows = [[label, fmt(s.get(f"members_{label}")), fmt(s.get(f"edges_{label}")),
                 fmt(s.get(f"clustering_{label}")), fmt(s.get(f"shortest_path_{label}")),
                 ", ".join(f"{r['indegree']}: {r['members']}" for r in s.get(f"indegree_{label}") or [])]
                for label in ("before", "end") if s.get(f"members_{label}") is not None]
        doc.add(Table(["overlay", "members", "edges", "clustering", "avg shortest path", "in-degree: members"], rows))
        after = s.get("reliability_after_failure") or []
        if after:
            doc.add(Para("Reliability of the broadcasts after the first crash, in send order: "
                         + ", ".join(fmt(r) for r in after[:50])))


class HyParViewAnalysis(OverlayAnalysis):
    name = "hyparview"
    title = "HyParView"
    view = "active"

    def describe(self, run) -> str:
        p = run.params
        return (f"hyparview: active {p.get('active_size')}, passive {p.get('passive_size')}, ARWL "
                f"{p.get('arwl', 6)}, PRWL {p.get('prwl', 3)}, ka {p.get('ka', 3)}, kp {p.get('kp', 4)}")

    def run_values(self, run) -> dict[str, Any]:
        """The overlay's values and `join_interval_s` (> 0: the paper's one-by-one joins, Table 1's own row)."""
        return {**super().run_values(run), "join_interval_s": run.params.get("join_interval_s") or 0.0}


PLUGIN = register(HyParViewAnalysis())
