"""The fidelity probe's pure part: which links and paths, what RTT and rate to expect, how to read a train."""
from __future__ import annotations

import pytest

from orchestrator import fidelity as fid
from orchestrator.lab import shaping_parameters
from orchestrator.plan import build_plan, path
from orchestrator.spec import parse_experiment

GSGC_LINKS = "links: {rate: 30kbit, delay: 5ms, queue: 64}\n"


def plan_of(nodes: int, degree: int = 3, links: str = GSGC_LINKS):
    return build_plan(parse_experiment(f"topology: {{kind: tree, nodes: {nodes}, degree: {degree}}}\n{links}"))


def test_hop_rtt_is_twice_delay_plus_serialisation():
    plan = plan_of(10)
    (p,) = fid.plan_hop_probes(plan, "delayline", 1)
    # 100-byte IP packet + 14 bytes L2 at 30 kbit/s = 30.4 ms, plus 5 ms, each way.
    assert p.hops == 1
    assert p.expected_rtt_ms == pytest.approx(2 * (5 + 114 * 8 / 30))
    assert p.emulated_rtt_ms == pytest.approx(p.expected_rtt_ms)


def test_tbf_emulates_neither_delay_nor_serialisation():
    plan = plan_of(10)
    (p,) = fid.plan_hop_probes(plan, "tbf", 1)
    assert p.emulated_rtt_ms == 0
    assert p.expected_rtt_ms > 70


def test_choose_links_is_deterministic_distinct_and_bounded():
    plan = plan_of(40, 4)
    a = fid.choose_links(plan, 6, seed=3)
    assert a == fid.choose_links(plan, 6, seed=3)
    assert len({lk.id for lk in a}) == 6
    assert a[0] is plan.links[0] and a[1] is plan.links[-1]
    assert len(fid.choose_links(plan, 1000, seed=3)) == len(plan.links)
    assert fid.choose_links(plan, 0, seed=3) == []


def test_disjoint_batches_never_share_a_link():
    plan = plan_of(40, 4)
    probes = fid.plan_hop_probes(plan, "delayline", 10, seed=1) + fid.plan_probes(plan, "delayline", 6, seed=1)
    batches = fid.disjoint_batches(plan, probes)
    assert sorted(id(p) for b in batches for p in b) == sorted(id(p) for p in probes)
    for batch in batches:
        used: list[str] = []
        for p in batch:
            hops = path(plan, p.src, p.dst)
            used += [plan.link_of(a, b).id for a, b in zip(hops, hops[1:])]
        assert len(used) == len(set(used))
    # The one-hop probes on distinct links all fit in the first round.
    assert len(batches[0]) >= 10


def test_rate_sample_fits_the_queue_and_lasts_about_the_train_time():
    plan = plan_of(4)
    s = fid.plan_rate_sample(plan, "delayline")
    assert s.count <= 62 and s.configured_bps == 30_000 and s.emulated
    assert s.count * s.wire_bytes * 8 / s.configured_bps == pytest.approx(1.5, rel=0.1)
    fast = fid.plan_rate_sample(plan_of(4, links="links: {rate: 1gbit, queue: 10}\n"), "tbf")
    assert fast.count == 8 and fast.payload == 1400
    assert fid.plan_rate_sample(plan_of(4, links=""), "delayline") is None


def test_train_rate_uses_the_steady_part():
    wire = 1000
    # A burst of 10 at once (a full token bucket), then one packet per 8 ms = 1 Mbit/s.
    times = [0.0] * 10 + [0.008 * i for i in range(1, 21)]
    assert fid.train_rate_bps(times, wire) == pytest.approx(1e6)
    assert fid.train_rate_bps([1.0, 1.0], wire) is None


def test_summary_counts_errors_loss_and_rate():
    plan = plan_of(4)
    probes = fid.plan_hop_probes(plan, "delayline", 2)
    probes[0].sent, probes[0].rtt_ms, probes[0].received = 10, [72.0] * 9, 9
    probes[1].sent, probes[1].rtt_ms, probes[1].received = 10, [], 0
    s = fid.summary(probes, "delayline", None, {"rate": {"x": 1}})
    assert s["max_abs_error_ms"] == pytest.approx(72.0 - probes[0].emulated_rtt_ms)
    assert s["sent"] == 20 and s["received"] == 9
    assert s["paths"][1]["median_rtt_ms"] is None and s["rate"] is None


def test_shaping_parameters_say_what_each_shaper_gives():
    plan = plan_of(4)
    dl = shaping_parameters(plan, "delayline")
    assert set(dl) == {"rate", "delay", "jitter", "loss", "queue"}
    assert all(n == 6 for hows in dl.values() for n in hows.values())
    tbf = shaping_parameters(plan, "tbf")
    assert any(how.startswith("NOT") for how in tbf["delay"])


def test_a_path_across_cut_links_is_held_to_the_formula_plus_the_underlay():
    """A lab over several machines: each cut link adds its underlay's round trip (real ms, / the dilation) to the
    paths crossing it; paths that cross none keep the formula."""
    plan = plan_of(13)
    a, b = plan.links[0], plan.links[-1]              # two links taken as cut links
    probes = [fid._probe(plan, "delayline", x, y) for x, y in
              ((a.parent, a.child), (b.child, a.child), (plan.links[1].parent, plan.links[1].child))]
    hops = path(plan, b.child, a.child)
    assert a.id in {plan.link_of(x, y).id for x, y in zip(hops, hops[1:])}
    fid.with_underlay(probes, plan, {a.id: 0.4, b.id: 0.6}, dilation=2.0)
    assert (probes[0].cut_links, probes[0].underlay_ms) == (1, pytest.approx(0.2))
    crossed = {plan.link_of(x, y).id for x, y in zip(hops, hops[1:])} & {a.id, b.id}
    assert probes[1].cut_links == len(crossed) and probes[1].underlay_ms == pytest.approx(
        sum({a.id: 0.4, b.id: 0.6}[x] for x in crossed) / 2)
    if plan.links[1].id not in (a.id, b.id):
        assert (probes[2].cut_links, probes[2].underlay_ms) == (0, 0.0)
    p = probes[0]
    p.sent, p.rtt_ms, p.received = 3, [p.emulated_rtt_ms + 0.2 + 0.05] * 3, 3
    assert p.to_json()["error_ms"] == pytest.approx(0.05)   # against formula + underlay, not the formula alone
    s = fid.summary([p], "delayline", underlay_ms={a.id: 0.4})
    assert s["underlay_rtt_ms"] == {a.id: 0.4} and s["max_abs_error_ms"] == pytest.approx(0.05)
    assert "underlay_rtt_ms" not in fid.summary([p], "delayline")
