"""`direct`'s analysis plug-in: the baseline has no metrics of its own beyond the generic ones (delivery ratio,
latency, traffic by type, control overhead, throughput); its report says which transport carried the data."""
from __future__ import annotations

from typing import Any

from analysis.protocols import GENERIC_SWEEP_COLUMNS, ProtocolAnalysis, register


class Direct(ProtocolAnalysis):
    name = "direct"
    title = "direct"
    timeline_events = ("data_received", "connection_failed")
    compare_columns = ("transport",)
    sweep_columns = GENERIC_SWEEP_COLUMNS

    def describe(self, run) -> str:
        p = run.params
        group = f", group {p['group']}" if p.get("group") else ""
        return f"direct: transport {p.get('transport', 'udp')}{group}"

    def summary(self, run, data: dict[str, Any]) -> dict[str, Any]:
        return {"transport": run.params.get("transport", "udp")}


PLUGIN = register(Direct())
