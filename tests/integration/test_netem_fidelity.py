"""Link fidelity measured on netem (issue #37), in the VM `make test-netem` boots: the delay line's checks
(tests/integration/test_delayline.py, test_lab_delayline.py) against the netem path. Each test prints what it
measured (`make test-netem` runs pytest with -s): docs/netem.md's table is read from that output."""
from __future__ import annotations

import re

import pytest
from scipy.stats import binom

from .helpers import run_in_node, running_lab, udp_transfer

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


def test_netem_queue_bounds_the_packets_waiting_for_the_link_not_those_being_delayed(tmp_path, state_dir):
    # One hop h1 -> h0 at 1 Mbit/s with 300 ms of delay and a queue of 10: 150 datagrams of 1000 B, 4 ms apart
    # (twice what the link carries). The queue fills and then admits what the link serialises; the delay holds
    # ~36 packets on their way, which one netem's `limit 10` counts (render.netem_stages). Expected: the delay
    # line's link model (delayline/model.py) fed the same sends. Then the same burst through the one-netem
    # rendering this replaced, for the record.
    from orchestrator.shaping.delayline.model import LinkModel
    from orchestrator.shaping.params import DirParams

    rate, delay, queue, n, size, gap = 1_000_000, 0.3, 10, 150, 1000, 0.004
    exp = f"topology: {{kind: tree, nodes: 3, degree: 2}}\nlinks: {{rate: 1mbit, delay: 300ms, queue: {queue}}}\n"
    model = LinkModel(DirParams(rate_bps=rate, delay_s=delay, queue_pkts=queue))
    expected = sum(model.admit(i * gap, size + 28) is not None for i in range(n))
    with running_lab(exp, tmp_path, shaper="netem") as (state, plan):
        dev = plan.link_of("h0", "h1").child_if
        q = run_in_node(state, "h1", ["tc", "qdisc", "show", "dev", dev]).stdout
        assert "root refcnt 3 limit 100000 delay 300ms" in q and "parent 1:1 limit 10 rate 1Mbit" in q, q
        # neighbours resolved first: packets sent before the ARP reply wait in the neighbour's queue and reach
        # the qdisc in one burst when it comes
        assert run_in_node(state, "h1", ["ping", "-c", "2", "-W", "3", plan.node("h0").address]).returncode == 0
        got = len(udp_transfer(state, plan, "h1", "h0", count=n, size=size, gap=gap, idle=2.0)["times"])
        for line in (["qdisc", "del", "dev", dev, "root"],
                     ["qdisc", "add", "dev", dev, "root", "netem", "delay", "300ms", "rate", "1mbit", "limit", "10"]):
            assert run_in_node(state, "h1", ["tc", *line]).returncode == 0
        one = len(udp_transfer(state, plan, "h1", "h0", count=n, size=size, gap=gap, idle=2.0)["times"])
    print(f"netem queue: {got} of {n} delivered (two stages); the link model {expected}; one netem with "
          f"limit {queue}: {one}")
    # the sender's pacing in the VM is not exact: a tenth either way
    assert abs(got - expected) <= max(3, expected // 10), (got, expected)
