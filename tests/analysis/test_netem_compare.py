"""analysis.netem_compare's table (pure): agreement is overlapping 95 % intervals, excluded runs are listed."""
from __future__ import annotations

from analysis.netem_compare import compare_table, overlap


def rows(shaper, values, exp="pbcast-small", **extra):
    return [{"experiment": exp, "shaper": shaper, "protocol": "pbcast", "point": f"p{i}", "excluded": "",
             "delivered_to_all_fraction": v, "dilation": 5 if shaper == "netem" else 1,
             "verdict": "faithful", **extra} for i, v in enumerate(values)]


def test_overlap_by_hand():
    assert overlap(1.0, 0.1, 1.15, 0.1) is True        # [0.9, 1.1] and [1.05, 1.25]
    assert overlap(1.0, 0.1, 1.25, 0.1) is False       # [0.9, 1.1] and [1.15, 1.35]
    assert overlap(1.0, None, 1.0, 0.1) is None


def test_table_verdicts_and_excluded_runs():
    same = rows("netem", [0.98, 0.99, 1.0]) + rows("delayline", [0.99, 1.0, 0.98])
    apart = rows("netem", [0.5, 0.51, 0.52], exp="x") + rows("delayline", [0.9, 0.91, 0.92], exp="x")
    gone = [{**rows("netem", [None], exp="x")[0], "point": "p9", "excluded": "not completed (failed: boom)"}]
    t = compare_table(same + apart + gone)
    line = next(x for x in t.splitlines() if x.startswith("| pbcast-small | delivered_to_all_fraction"))
    assert line.endswith("| yes |") and "(3)" in line
    line = next(x for x in t.splitlines() if x.startswith("| x | delivered_to_all_fraction"))
    assert line.endswith("| **no** |")
    assert "1 of 2 metrics agree" in t
    assert "- x (netem), p9: not completed (failed: boom)" in t
    assert "- pbcast-small, netem: 3 runs at dilation 5, 3 faithful" in t
    assert "- pbcast-small, delayline: 3 runs at dilation 1, 3 faithful" in t
