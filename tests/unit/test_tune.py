"""The adaptive step-interval search (GSGC §4.3, Figures 10-11) on synthetic TPR curves."""
from __future__ import annotations

import pytest

from orchestrator.tune import golden_section, tune, window


def counting(f):
    calls = []

    def g(x):
        calls.append(x)
        return f(x)
    return g, calls


def tpr_curve(x: float) -> float:
    """The shape of Figure 6(B): steps fall to a floor at the critical point, TPR = steps * x."""
    steps = max(3.2, 40.0 / x)
    return steps * x


def test_golden_section_finds_the_minimum_of_a_convex_function_within_g():
    s, it = golden_section(lambda x: (x - 7.3) ** 2, 0.0, 20.0, 0.5)
    assert abs(s - 7.3) < 0.5
    assert it == 8   # 20 * 0.618**8 = 0.43 <= 0.5


def test_paper_inputs_take_five_iterations():
    # a0 = 0, b0 = 20, g = 2: the paper's Part I "finishes after 5 iterations"
    _, it = golden_section(tpr_curve, 0.0, 20.0, 2.0)
    assert it == 5


def test_window_on_a_v_shape_follows_figure_11_literally():
    f = lambda x: 28.6 + abs(x - 9.0)          # noqa: E731  band: |x - 9| < 2.86
    s1, s2, it, lo, hi = window(f, 9.0, 28.6, 0.10, 1.0, 0.01, 20.0)
    # lower: 8 in, 6 out -> k = 1: 7 in; upper: 10 in, 12 out -> k = 1: 11 in
    assert (s1, s2) == (7.0, 11.0) and not lo and not hi and it == 6


def test_tune_memoises_evaluations_and_reports_every_point():
    f, calls = counting(tpr_curve)
    res = tune(f, 0.0, 20.0, 2.0, 0.10, 1.0)
    assert len(calls) == len(set(calls)) == len(res.evaluations)
    assert sorted(calls) == sorted(e.x for e in res.evaluations)
    assert res.evaluations[0].phase == "part1"
    # the flat bottom of steps*x is at the critical point 12.5 s (TPR 40): s lands near it and the window
    # holds every x with TPR within 10 %
    assert tpr_curve(res.s) == res.fs
    assert res.s1 <= res.s <= res.s2
    for x in (res.s1, res.s2):
        assert abs(tpr_curve(x) - res.fs) < 0.1 * res.fs
    j = res.to_json()
    assert j["window"] == [res.s1, res.s2] and len(j["evaluations"]) == len(calls)


def test_golden_ratio_points_are_reused_at_the_resolution():
    f, calls = counting(lambda x: (x - 9) ** 2 + 28)
    tune(f, 0.0, 20.0, 2.0, 0.10, 1.0, resolution=0.01)
    part1 = 2 + 4   # the first iteration measures two points, each later one a single new point
    assert len([x for x in calls]) >= part1
    assert len(calls) == len(set(calls))


def test_window_stops_at_the_guards():
    flat = lambda x: 30.0                       # noqa: E731
    s1, s2, _, lo, hi = window(flat, 5.0, 30.0, 0.1, 1.0, 0.5, 12.0)
    assert lo and hi and s1 >= 0.5 and s2 <= 12.0
    assert s1 == 2.0 and s2 == 12.0             # 5-1-2 = 2, then -2 and 0 are below the guard; 5+1+2+4 = 12


def test_unusable_inputs_are_errors():
    with pytest.raises(ValueError, match="empty"):
        golden_section(tpr_curve, 5.0, 5.0, 1.0)
    with pytest.raises(ValueError, match="positive"):
        window(tpr_curve, 5.0, 30.0, 0.0, 1.0, 0.1, 20.0)


def test_infinite_f_means_outside_the_band():
    f = lambda x: float("inf") if x < 4 else 30.0 + (x - 9) ** 2 / 10   # noqa: E731  no round completed below 4 s
    res = tune(f, 0.0, 20.0, 2.0, 0.10, 1.0)
    assert res.s1 >= 4.0 and res.fs < 40
