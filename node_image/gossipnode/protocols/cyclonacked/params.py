"""CyclonAcked's parameters: Cyclon's (seed 003 §5.1) plus the acknowledgement timeout."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from ..cyclon.params import CyclonParams


class CyclonAckedParams(CyclonParams):
    name: Literal["cyclonacked"]  # type: ignore[assignment]
    ack_timeout_s: float = Field(default=0.5, gt=0, description="a gossip target that has not acknowledged a DATA "
                                                                "after this long is removed from the view")

PARAMS = CyclonAckedParams
