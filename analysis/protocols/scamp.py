"""Scamp's analysis plug-in: the overlay metrics of seed 003 (analysis/protocols/overlay.py) over its PartialView
(view "partial")."""
from __future__ import annotations

from analysis.protocols import register
from analysis.protocols.hyparview import OverlayAnalysis


class ScampAnalysis(OverlayAnalysis):
    name = "scamp"
    title = "Scamp"
    view = "partial"

    def describe(self, run) -> str:
        p = run.params
        return f"scamp: c {p.get('c', 4)}, fanout {p.get('fanout', 4)}, lease {p.get('lease_s', 60.0)} s"


PLUGIN = register(ScampAnalysis())
