"""Shaping rendering: the exact tc / iptables input each shaper produces for a link direction (no root)."""
from orchestrator.backends.mininet import node_ip_lines, node_shaping
from orchestrator.plan import build_plan
from orchestrator.shaping import render
from orchestrator.shaping.params import DirParams, GilbertElliott
from orchestrator.shaping.probe import Capabilities
from orchestrator.spec import parse_experiment

GSGC = DirParams(rate_bps=30_000, delay_s=0.005, queue_pkts=64)


def test_netem_full():
    d = DirParams(rate_bps=30_000, delay_s=0.005, jitter_s=0.001, jitter_dist="normal", loss=0.001,
                  queue_pkts=64)
    assert render.tc_lines("netem", "h1-eth0", d) == [
        "qdisc add dev h1-eth0 root handle 1: netem delay 5ms 1ms distribution normal loss random 0.1% "
        "rate 30000bit limit 64"]


def test_netem_gemodel_and_reorder():
    d = DirParams(delay_s=0.01, reorder=0.25, gemodel=GilbertElliott(p=0.01, r=0.3, loss_bad=0.9))
    assert render.netem_args(d) == ["delay", "10ms", "reorder", "25%", "loss", "gemodel", "1%", "30%", "90%", "0%",
                                    "limit", str(render.UNBOUNDED_QUEUE)]


def test_tbf_rate_and_queue_and_statistic_loss():
    assert render.tc_lines("tbf", "r3-eth1", GSGC) == [
        "qdisc add dev r3-eth1 root handle 1: tbf rate 30000bit burst 1600 latency 60s",
        "qdisc add dev r3-eth1 parent 1:1 handle 10: pfifo limit 64",
    ]
    assert render.iptables_lines("tbf", "r3-eth1", DirParams(loss=0.01)) == [
        "-A POSTROUTING -o r3-eth1 -m statistic --mode random --probability 0.01000000 -j DROP"]
    assert render.tc_lines("tbf", "x", DirParams()) == []


def test_tbf_fidelity_says_delay_is_not_emulated():
    f = render.fidelity("tbf", GSGC)
    assert f.lost() == ["delay"]
    assert render.fidelity("tbf", DirParams(rate_bps=1000)).lost() == []
    assert render.fidelity("netem", GSGC).lost() == []


def test_capabilities_choose():
    no_netem = Capabilities(kernel="x", netem=False, tbf=True, nfqueue=True, statistic=True)
    assert no_netem.choose("auto") in ("delayline", "tbf")
    assert no_netem.choose("tbf") == "tbf"
    full = Capabilities(kernel="x", netem=True, tbf=True, nfqueue=True, statistic=True)
    assert full.choose("auto") == "netem"
    import pytest

    from orchestrator.errors import ShapingError

    with pytest.raises(ShapingError, match="sch_netem"):
        no_netem.choose("netem")


def test_node_rendering_covers_every_interface():
    plan = build_plan(parse_experiment(
        "topology: {kind: tree, nodes: 13, degree: 4}\nlinks: {rate: 30kbit, delay: 5ms, queue: 64, loss: 1%}\n"))
    lines = node_ip_lines(plan, "h1")
    assert lines[:2] == ["link set lo up", f"addr add {plan.node('h1').address}/32 dev lo"]
    assert sum(1 for x in lines if x.startswith("route add")) == len(plan.routes["h1"]) == 4
    tc, rules = node_shaping(plan, "h1", "tbf")
    assert sorted(x.split()[3] for x in tc if "tbf" in x) == ["h1-eth0", "h1-eth1", "h1-eth2", "h1-eth3"]
    assert rules.count("-A POSTROUTING") == 4 and rules.startswith("*mangle")
    tc, rules = node_shaping(plan, "h1", "delayline")
    assert tc == [] and rules.count("NFQUEUE --queue-num") == 4
