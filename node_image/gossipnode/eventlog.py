"""The node's event log: JSON Lines, one object per event with `ts` (virtual unix seconds:
the runtime's clock, `vclock.py`; the wall clock at dilation 1), `node`, `event` and fields."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class EventLog:
    """Appends (a restarted node continues its file); buffered, flushed by the runtime and at close."""

    def __init__(self, path: Path, node: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.node = node
        self._file = path.open("a", encoding="utf-8", buffering=1 << 16)

    def write(self, ts: float, event: str, fields: dict[str, Any]) -> None:
        record = {"ts": round(ts, 6), "node": self.node, "event": event, **fields}
        self._file.write(json.dumps(record, separators=(",", ":")) + "\n")

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()
