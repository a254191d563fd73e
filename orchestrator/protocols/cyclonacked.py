"""CyclonAcked's orchestrator side: Cyclon's (the paper's view of 35 capped to the group, refusals)."""
from __future__ import annotations

from . import Adapter
from .cyclon import to_node

ADAPTER = Adapter(to_node=lambda params, ctx: to_node("cyclonacked", params, ctx))
