"""Link fidelity measured on netem (issue #37), in the VM `make test-netem` boots: the delay line's checks
(tests/integration/test_delayline.py, test_lab_delayline.py) against the netem path. Each test prints what it
measured (`make test-netem` runs pytest with -s): docs/netem.md's table is read from that output."""
from __future__ import annotations

import re

import pytest
from scipy.stats import binom

from .helpers import run_in_node, running_lab

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.netem]


def binomial_interval(n: int, p: float, alpha: float = 1e-3) -> tuple[int, int]:
    """The central (1 - alpha) interval of Binomial(n, p), exact (scipy's quantiles)."""
    lo, hi = binom.interval(1 - alpha, n, p)
    return int(lo), int(hi)


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
        print(f"netem loss: {lost}/{n} round trips lost, expected {n * p_rt:.0f} in [{lo}, {hi}] (99.9%)")
        assert lo <= lost <= hi
