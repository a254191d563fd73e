"""tradvsync's analysis plug-in: the shared throughput, delivery and load measures (analysis/protocols/pbcast.py)
plus the sender's flow control: send attempts refused because the buffer was full (`send_blocked`)."""
from __future__ import annotations

from typing import Any

from pyspark.sql import functions as F

from analysis.doc import Doc, Heading, Para
from analysis.protocols import GENERIC_SWEEP_COLUMNS, MetricsContext, ProtocolAnalysis, ReportContext, register
from analysis.protocols.pbcast import common_key_metrics, common_metrics, common_report, common_summary, raw


class TradVsync(ProtocolAnalysis):
    name = "tradvsync"
    title = "traditional virtual synchrony"
    timeline_events = ("data_received", "send_blocked")
    compare_columns = ("throughput_unperturbed_per_s", "send_blocked")
    sweep_columns = GENERIC_SWEEP_COLUMNS

    def describe(self, run) -> str:
        p = run.params
        return f"tradvsync: window {p.get('window')}, transport {p.get('transport')}"

    def metrics(self, ctx: MetricsContext) -> dict[str, Any]:
        d = common_metrics(ctx)
        blocked = ctx.events.where(F.col("event") == "send_blocked")
        d["blocked"] = [r.asDict() for r in blocked.agg(F.sum(raw("attempts", "long")).alias("n")).collect()]
        return d

    def summary(self, run, d: dict[str, Any]) -> dict[str, Any]:
        s = common_summary(d)
        s["send_blocked"] = (d["blocked"][0]["n"] or 0) if d["blocked"] else 0
        return s

    def key_metrics(self, s: dict[str, Any]) -> list[list[Any]]:
        return [*common_key_metrics(s), ["send attempts refused (sender buffer full)", s.get("send_blocked")]]

    def report(self, doc: Doc, ctx: ReportContext) -> None:
        common_report(doc, ctx)
        doc.add(Heading(1, "Flow control"),
                Para(f"{ctx.summary.get('send_blocked')} send attempts found the sender's buffer full."))


PLUGIN = register(TradVsync())
