"""HyParView's analysis plug-in (seed 003 §5): reliability per broadcast, reliability after the first crash and
cycles to heal, and the overlay's graph properties (in-degree distribution, clustering coefficient, average
shortest path) of the active views before the first crash and at the end of the run, computed in Spark from the
`view_changed` events (definitions: analysis/protocols/overlay.py)."""
from __future__ import annotations

from typing import Any

from analysis.doc import Doc, Heading, Para, Table, fmt
from analysis.protocols import (GENERIC_SWEEP_COLUMNS, MetricsContext, ProtocolAnalysis, ReportContext,
                                generic_sweep_values, register)
from analysis.protocols import overlay


class OverlayAnalysis(ProtocolAnalysis):
    """The metrics every peer-sampling protocol of seed 003 shares; `view` names its dissemination view."""

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

    def metrics(self, ctx: MetricsContext) -> dict[str, Any]:
        from pyspark.sql import functions as F

        events, members, crash, life, table = ctx.events, ctx.members, ctx.crash, ctx.life, ctx.table
        d: dict[str, Any] = {}
        rel_df = overlay.reliability(events, members, life)
        d["reliability"] = table("reliability", rel_df)
        first = crash.agg(F.min("crash_ts")).first()[0]
        end = events.agg(F.max("ts")).first()[0]
        d["crash_ts"] = first
        rel = (overlay.since_crash(d["reliability"], overlay.member_crash_cycles(events, first))
               if first is not None else d["reliability"])
        cycle_s = ctx.run.params.get("cycle_s") or 1.0
        crash_end = (events.where((F.col("event") == "action_applied") & (F.col("op") == "crash"))
                     .agg(F.max("ts")).first()[0])
        d["healing"] = overlay.healing(rel, first, overlay.crash_cycle(events, first) if first is not None else None,
                                       first_s=2 * float(cycle_s), first_from=crash_end)
        d["hops"] = overlay.hops_to_delivery(events, rel_df, first)
        d["graph"] = {}
        for label, t in (("before", first - 1e-3 if first is not None else end), ("end", end)):
            if t is None:
                continue
            edges = overlay.edges_at(events, members, crash, t, self.view)
            d["graph"][label] = {"t": t, **overlay.graph_metrics(edges, overlay.live_members(members, crash, life, t))}
        return d

    def summary(self, run, d: dict[str, Any]) -> dict[str, Any]:
        h = d["healing"]
        g = d["graph"]
        return {
            "reliability_before": h["reliability_before"], "reliability_after": h["reliability_after"],
            "broadcasts_before": h["broadcasts_before"], "broadcasts_after": h["broadcasts_after"],
            "cycles_to_heal": h["cycles_to_heal"], "heal_broadcast": h["heal_broadcast"],
            "reliability_after_first": h.get("reliability_after_first"),
            "cycles_to_heal_mean": h.get("cycles_to_heal_mean"), "crash_cycle": h.get("crash_cycle"),
            "reliability_by_cycle": h.get("by_cycle"),
            "clustering_before": g.get("before", {}).get("clustering"),
            "shortest_path_before": g.get("before", {}).get("shortest_path_mean"),
            "clustering_end": g.get("end", {}).get("clustering"),
            "shortest_path_end": g.get("end", {}).get("shortest_path_mean"),
            "indegree_before": g.get("before", {}).get("indegree"),
            "max_hops_before": (d.get("hops") or {}).get("max_hops_mean"),
            "degree_before": g.get("before", {}).get("undirected_degree_mean"),
            "members_before": g.get("before", {}).get("members"),
            "edges_before": g.get("before", {}).get("edges"),
            "reliability_after_failure": [r["reliability"] for r in h["after_failure"]],
        }

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
        d = ctx.data
        doc.add(Heading(2, f"{self.title}: overlay and reliability"))
        rows = [[label, fmt(g["members"]), fmt(g["edges"]), fmt(g["clustering"]), fmt(g["shortest_path_mean"]),
                 ", ".join(f"{r['indegree']}: {r['members']}" for r in g["indegree"])]
                for label, g in d["graph"].items()]
        doc.add(Table(["overlay", "members", "edges", "clustering", "avg shortest path", "in-degree: members"], rows))
        after = d["healing"]["after_failure"]
        if after:
            doc.add(Para("Reliability of the broadcasts after the first crash, in send order: "
                         + ", ".join(fmt(r["reliability"]) for r in after[:50])))


class HyParViewAnalysis(OverlayAnalysis):
    name = "hyparview"
    title = "HyParView"
    view = "active"

    def describe(self, run) -> str:
        p = run.params
        return (f"hyparview: active {p.get('active_size')}, passive {p.get('passive_size')}, ARWL "
                f"{p.get('arwl', 6)}, PRWL {p.get('prwl', 3)}, ka {p.get('ka', 3)}, kp {p.get('kp', 4)}")


PLUGIN = register(HyParViewAnalysis())
