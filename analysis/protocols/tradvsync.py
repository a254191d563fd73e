"""tradvsync's analysis plug-in: the measures it shares with pbcast and vsync (analysis/protocols/pbcast.py:
parameters, delivery distribution, Figure 1's throughput, the sender's numbers — among them the sender's flow
control, `refused`: send attempts refused because its buffer was full, the `attempts` of `send_blocked`), plus its
`buffer` (the spec's `window`)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from analysis.doc import Doc, Heading, Para
from analysis.protocols import GENERIC_SWEEP_COLUMNS, MetricsContext, ProtocolAnalysis, ReportContext, register
from analysis.protocols.pbcast import common_key_metrics, common_metrics, common_report
from analysis.protocols.pbcast_values import common_values, spec_section

if TYPE_CHECKING:
    from analysis.rundir import RunDir


class TradVsync(ProtocolAnalysis):
    name = "tradvsync"
    title = "traditional virtual synchrony"
    timeline_events = ("data_received", "send_blocked")
    compare_columns = ("throughput_unperturbed_per_s", "refused", "sender_pkts_per_msg")
    sweep_columns = GENERIC_SWEEP_COLUMNS

    def describe(self, run) -> str:
        p = run.params
        return f"tradvsync: window {p.get('window')}, transport {p.get('transport')}"

    def run_values(self, run: RunDir) -> dict[str, Any]:
        return {**common_values(run), "buffer": spec_section(run).get("window")}

    def metrics(self, ctx: MetricsContext) -> dict[str, Any]:
        return common_metrics(ctx)

    def key_metrics(self, s: dict[str, Any]) -> list[list[Any]]:
        return [*common_key_metrics(s), ["send attempts refused (sender buffer full)", s.get("refused")],
                ["packets the sender sent and received per multicast", s.get("sender_pkts_per_msg")]]

    def report(self, doc: Doc, ctx: ReportContext) -> None:
        common_report(doc, ctx)
        doc.add(Heading(1, "Flow control"),
                Para(f"{ctx.summary.get('refused')} send attempts found the sender's buffer full."))


PLUGIN = register(TradVsync())
