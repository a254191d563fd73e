"""Cyclon's analysis plug-in: the overlay metrics of seed 003 (analysis/protocols/overlay.py) over its partial
views (view "partial"), as for HyParView."""
from __future__ import annotations

from analysis.protocols import register
from analysis.protocols.hyparview import OverlayAnalysis


class CyclonAnalysis(OverlayAnalysis):
    name = "cyclon"
    title = "Cyclon"
    view = "partial"

    def describe(self, run) -> str:
        p = run.params
        return (f"cyclon: view {p.get('view_size', 35)}, shuffle {p.get('shuffle_length', 14)}, walk ttl "
                f"{p.get('walk_ttl', 5)}, fanout {p.get('fanout', 4)}")


PLUGIN = register(CyclonAnalysis())
