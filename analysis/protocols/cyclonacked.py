"""CyclonAcked's analysis plug-in: Cyclon's (overlay metrics over the partial views)."""
from __future__ import annotations

from analysis.protocols import register
from analysis.protocols.cyclon import CyclonAnalysis


class CyclonAckedAnalysis(CyclonAnalysis):
    name = "cyclonacked"
    title = "CyclonAcked"


PLUGIN = register(CyclonAckedAnalysis())
