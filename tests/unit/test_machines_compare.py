"""analysis.machines_compare: one machine against split, from rows (no run directories)."""
from __future__ import annotations

from analysis.machines_compare import compare_table, side_of


def test_the_side_is_the_backend_and_the_machines_holding_a_shard():
    assert side_of({"backend": "mininet"}) == "1 machine"
    assert side_of({"backend": "machines", "machines": {"shards": {"a": {}, "b": {}, "c": {}}}}) == "3 machines"


def row(side, v, **kw):
    return {"side": side, "experiment": "demo", "protocol": "gsgc", "point": f"p{v}", "tpr_mean_s": v,
            "backend": "machines" if side != "1 machine" else "mininet", "cut_links": 2,
            "max_abs_clock_offset_ms": 0.02, **kw}


def test_overlapping_intervals_agree_and_separate_ones_do_not():
    rows = [row("1 machine", x) for x in (1.0, 1.1, 1.2)] + [row("3 machines", x) for x in (1.05, 1.15, 1.25)]
    t = compare_table(rows)
    assert "| demo | tpr_mean_s | 1.1 ± " in t and "| yes |" in t and "1 of 1 metrics agree" in t
    rows = [row("1 machine", x) for x in (1.0, 1.01, 1.02)] + [row("3 machines", x) for x in (2.0, 2.01, 2.02)]
    assert "**no**" in compare_table(rows) and "0 of 1 metrics agree" in compare_table(rows)
    excluded = rows + [row("3 machines", 9.0, excluded="not completed (failed: x)")]
    t = compare_table(excluded)
    assert "(3) |" in t and "left out: not completed (failed: x)" in t     # in the list, not in the means


def test_one_side_only_says_so():
    assert compare_table([row("1 machine", 1.0)]).startswith("two sides needed")
