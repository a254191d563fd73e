"""The netem rendering, proven on a kernel that has sch_netem (`make test-netem` boots one in a VM).

Kept small on purpose: Python in the VM is ~20x slower than on the host.
"""
from __future__ import annotations

import re
import statistics

import pytest

from orchestrator.backends.registry import get_backend
from orchestrator.shaping.params import DirParams

from .helpers import VM_TOLERANCE, fidelity_row, run_in_node, running_lab, typical, udp_transfer, vm_allows

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.netem]

# h1 - h0 - h2: a 3-node chain (the root of a degree-2 tree has two children).
CHAIN = "topology: {kind: tree, nodes: 3, degree: 2}\nlinks: {rate: 30kbit, delay: 5ms, queue: 64}\n"


def rtts(state, src, dst_addr, count, size):
    r = run_in_node(state, src, ["ping", "-c", str(count), "-i", "0.3", "-s", str(size), "-W", "3", dst_addr])
    assert r.returncode == 0, r.stdout + r.stderr
    return [float(x) for x in re.findall(r"time=([\d.]+) ms", r.stdout)]


def test_netem_chain_rtt_rate_and_live_change(tmp_path, state_dir):
    with running_lab(CHAIN, tmp_path, shaper="netem") as (state, plan):
        assert state.shaper == "netem" and not state.warnings
        q = run_in_node(state, "h0", ["tc", "qdisc", "show", "dev", plan.link_of("h0", "h1").parent_if]).stdout
        assert "netem" in q and "delay 5ms" in q and "rate 30Kbit" in q and "limit 64" in q, q

        # 100-byte IP packets (72 B ICMP payload): RTT = 2 x hops x (delay + serialisation of 100 + 14 bytes).
        hops, d = 2, plan.links[0].down
        expected_ms = 2 * hops * (d.delay_s + d.serialisation_s(100)) * 1000
        samples = rtts(state, "h1", plan.node("h2").address, 10, 72)
        assert fidelity_row("RTT, 2 hops, 100 B IP packets", f"5 ms + 30 kbit/s per hop: {expected_ms:.1f} ms",
                            f"10 pings: lower quartile {typical(samples):.1f} ms, median "
                            f"{statistics.median(samples):.1f} ms", VM_TOLERANCE,
                            len(samples) == 10 and vm_allows(samples, expected_ms, 4))

        # Rate sample: a burst of 1000-byte datagrams arrives at 30 kbit/s (+ L2 overhead) after the first.
        size = 1000
        times = udp_transfer(state, plan, "h1", "h2", count=12, size=size, gap=0, idle=3.0)["times"]
        assert len(times) == 12
        measured = (len(times) - 1) * (size + 28 + 14) * 8 / (times[-1] - times[0])
        assert fidelity_row("rate, a burst of 12 x 1000 B UDP", "30 kbit/s", f"{measured:.0f} bit/s", "+-10 %",
                            measured == pytest.approx(30_000, rel=0.10))

        # A live change is del + add: the old rate must not survive a change that omits it.
        link = plan.link_of("h0", "h2")
        get_backend("mininet").set_link(state, plan, link.id, "down", DirParams(delay_s=0.001))
        q = run_in_node(state, "h0", ["tc", "qdisc", "show", "dev", link.parent_if]).stdout
        assert fidelity_row("live change (del + add)", "delay 1 ms, the rate omitted",
                            "`delay 1ms`, " + ("no `rate` left" if "rate" not in q else "a `rate` left"), "exact",
                            "delay 1ms" in q and "rate" not in q), q
