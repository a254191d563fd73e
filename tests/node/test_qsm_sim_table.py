"""docs/qsm.md's simulator table is what the simulator gives today: regenerated, byte for byte
(experiments/qsm_sim_table.py; `make repro-qsm-sim` writes the committed copy)."""
from __future__ import annotations

from pathlib import Path

from experiments.qsm_sim_table import main

COMMITTED = Path(__file__).parents[2] / "docs" / "results" / "qsm-sim"


def test_the_committed_simulator_table_regenerates_byte_for_byte(tmp_path):
    assert main(["--out", str(tmp_path)]) == 0          # every run delivered every packet exactly once
    for name in ("runs.csv", "table.md"):
        assert (tmp_path / name).read_text() == (COMMITTED / name).read_text(), name
