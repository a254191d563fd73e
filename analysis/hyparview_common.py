"""What the HyParView reproduction's scripts share beyond analysis/figlib.py and figtables.py
(analysis/figures_hyparview.py: Figures 2-4; analysis/table1_hyparview.py: Table 1 and Figure 5): the protocols'
order, titles and markers, and reading a runs.csv (the committed ones predate figlib's `excluded` column). Pure."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from analysis import figlib

PROTOCOLS = ("hyparview", "cyclonacked", "cyclon", "scamp")
TITLES = {"hyparview": "HyParView", "cyclon": "Cyclon", "scamp": "Scamp", "cyclonacked": "CyclonAcked"}
MARKERS = {"hyparview": "o", "cyclon": "s", "scamp": "^", "cyclonacked": "D"}


def read_runs(path: Path) -> list[dict[str, Any]]:
    """A runs.csv as rows with `excluded` (None: counted). Rows written before figlib have `valid` and
    `invalid_because` instead: excluded = invalid_because."""
    rows = figlib.read_csv(path)
    for r in rows:
        if "excluded" not in r:
            r["excluded"] = r.get("invalid_because") or (None if str(r.get("valid", True)) == "True" else "invalid")
    return rows
