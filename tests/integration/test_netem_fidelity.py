"""Link fidelity measured on netem (issue #37), in the VM `make test-netem` boots: the delay line's checks
(tests/integration/test_delayline.py, test_lab_delayline.py) against the netem path.

NETEM_RESULTS=FILE appends each measured parameter (configured, measured, tolerance, pass) as a JSON line.
"""
from __future__ import annotations

import json
import math
import os
import re

import pytest

from .helpers import run_in_node, running_lab

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.netem]


def record(parameter: str, configured: str, measured: str, tolerance: str, ok: bool) -> None:
    path = os.environ.get("NETEM_RESULTS")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"parameter": parameter, "configured": configured, "measured": measured,
                                "tolerance": tolerance, "pass": ok}) + "\n")


def binomial_interval(n: int, p: float, alpha: float = 1e-3) -> tuple[int, int]:
    """The central (1 - alpha) interval of Binomial(n, p), exact: [lo, hi] with P(X < lo), P(X > hi) <= alpha/2."""
    pmf = [math.comb(n, k) * p ** k * (1 - p) ** (n - k) for k in range(n + 1)]
    acc, lo = 0.0, 0
    while acc + pmf[lo] <= alpha / 2:
        acc += pmf[lo]
        lo += 1
    acc, hi = 0.0, n
    while acc + pmf[hi] <= alpha / 2:
        acc += pmf[hi]
        hi -= 1
    return lo, hi


def test_binomial_interval_is_exact():
    lo, hi = binomial_interval(400, 0.19)
    assert lo < 400 * 0.19 < hi and 40 < lo and hi < 115


def test_netem_loss_within_binomial_interval(tmp_path, state_dir):
    # h1 - h0 (- h2): one hop, loss p on both directions, so an echo round trip is lost with 1 - (1 - p)^2.
    p, n = 0.10, 400
    exp = "topology: {kind: tree, nodes: 3, degree: 2}\nlinks: {delay: 1ms, loss: 10%}\n"
    with running_lab(exp, tmp_path, shaper="netem") as (state, plan):
        assert state.shaper == "netem" and not state.warnings
        q = run_in_node(state, "h0", ["tc", "qdisc", "show", "dev", plan.link_of("h0", "h1").parent_if]).stdout
        assert "loss 10%" in q, q
        r = run_in_node(state, "h1", ["ping", "-q", "-c", str(n), "-i", "0.02", "-W", "2",
                                      plan.node("h0").address], timeout=180)
        m = re.search(r"(\d+) packets transmitted, (\d+) received", r.stdout)
        assert m, r.stdout + r.stderr
        sent, got = int(m.group(1)), int(m.group(2))
        assert sent == n
        p_rt = 1 - (1 - p) ** 2
        lo, hi = binomial_interval(n, p_rt)
        lost = sent - got
        ok = lo <= lost <= hi
        print(f"netem loss: {lost}/{n} round trips lost, expected {n * p_rt:.0f} in [{lo}, {hi}] (99.9%)")
        record("loss (per direction, 1 hop)", "10%", f"{lost}/{n} round trips = {lost / n:.1%} "
               f"(rt {1 - math.sqrt(1 - lost / n):.1%}/dir)", f"[{lo}, {hi}] of {n} (exact binomial 99.9%)", ok)
        assert ok
