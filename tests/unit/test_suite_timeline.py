"""benchmarks/suite_timeline.py: a worker's shares from the lines `TEST_TIMELINE` writes."""
from __future__ import annotations

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "suite_timeline", Path(__file__).resolve().parents[2] / "benchmarks" / "suite_timeline.py")
tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tool)


def test_spans_per_worker_and_share_with_the_waits_left_out_of_busy():
    lines = ["gw0 100.0 110.0 lab tests/integration/test_a.py::t1\n",
             "gw0 110.0 130.0 lab tests/integration/test_a.py::t2\n",
             "gw1 100.0 105.0 analysis tests/analysis/test_x.py::t\n",
             "gw1 140.0 150.0 lab-beside tests/integration/test_b.py::t\n"]          # waited 35 s for the lock
    by_share, modules = tool.spans(lines)
    assert by_share == {("gw0", "lab"): (0.0, 30.0, 30.0), ("gw1", "analysis"): (0.0, 5.0, 5.0),
                        ("gw1", "lab-beside"): (40.0, 50.0, 10.0)}
    assert modules[0] == (30.0, "tests/integration/test_a.py")
