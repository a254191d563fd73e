"""Shaping rendering: the exact tc / iptables input each shaper produces for a link direction (no root)."""
import pytest

from orchestrator.backends.mininet import node_ip_lines, node_shaping
from orchestrator.plan import build_plan
from orchestrator.shaping import render, shapers
from orchestrator.shaping.params import DirParams, GilbertElliott
from orchestrator.shaping.probe import Capabilities
from orchestrator.spec import parse_experiment

GSGC = DirParams(rate_bps=30_000, delay_s=0.005, queue_pkts=64)


def test_netem_full():
    d = DirParams(rate_bps=30_000, delay_s=0.005, jitter_s=0.001, jitter_dist="normal", loss=0.001,
                  queue_pkts=64)
    # two stages: loss, delay and jitter in the root with no limit; the rate and the queue in its child (netem's
    # limit would count the packets being delayed: render.netem_stages)
    assert shapers.get("netem").tc_lines("h1-eth0", d) == [
        "qdisc add dev h1-eth0 root handle 1: netem delay 5ms 1ms distribution normal rate 100gbit loss random 0.1% "
            "limit 100000",
        "qdisc add dev h1-eth0 parent 1:1 handle 10: netem rate 30000bit limit 64"]
    # a rate alone: one netem, the queue its limit; nothing but delay and loss: one netem, no queue (the model
    # ignores a queue without a rate)
    assert shapers.get("netem").tc_lines("d", DirParams(rate_bps=1e6, queue_pkts=10)) == [
        "qdisc add dev d root handle 1: netem rate 1000000bit limit 10"]
    assert shapers.get("netem").tc_lines("d", DirParams(delay_s=0.01, loss=0.1, queue_pkts=10)) == [
        "qdisc add dev d root handle 1: netem delay 10ms loss random 10% limit 100000"]


def test_netem_gemodel_and_reorder():
    d = DirParams(delay_s=0.01, reorder=0.25, gemodel=GilbertElliott(p=0.01, r=0.3, loss_bad=0.9))
    assert render.netem_stages(d) == (["delay", "10ms", "reorder", "25%", "loss", "gemodel", "1%", "30%", "90%",
                                       "0%", "limit", str(render.UNBOUNDED_QUEUE)], [])


def test_tbf_rate_and_queue_and_statistic_loss():
    assert shapers.get("tbf").tc_lines("r3-eth1", GSGC) == [
        "qdisc add dev r3-eth1 root handle 1: tbf rate 30000bit burst 1600 latency 60s",
        "qdisc add dev r3-eth1 parent 1:1 handle 10: pfifo limit 64",
    ]
    assert shapers.get("tbf").iptables_lines("r3-eth1", DirParams(loss=0.01)) == [
        "-A POSTROUTING -o r3-eth1 -m statistic --mode random --probability 0.01000000 -j DROP"]
    assert shapers.get("tbf").tc_lines("x", DirParams()) == []


def test_tbf_fidelity_says_delay_is_not_emulated():
    f = shapers.get("tbf").fidelity(GSGC)
    assert f.lost() == ["delay"]
    assert shapers.get("tbf").fidelity(DirParams(rate_bps=1000)).lost() == []
    assert shapers.get("netem").fidelity(GSGC).lost() == []


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
    # every interface queued twice: forwarded packets in FORWARD (with their kernel arrival time), the node's own
    # in OUTPUT (orchestrator/shaping/DELAYLINE.md)
    assert tc == [] and rules.count("-A FORWARD") == rules.count("-A OUTPUT") == 4
    assert rules.count("NFQUEUE --queue-num") == 8 and "POSTROUTING" not in rules


def test_the_three_shapers_share_one_interface():
    d = DirParams(rate_bps=1_000_000, delay_s=0.01, jitter_s=0.002, loss=0.01, queue_pkts=50)
    assert list(shapers.SHAPERS) == ["netem", "delayline", "tbf"]          # auto's order of preference
    for s in shapers.SHAPERS.values():
        assert isinstance(s, shapers.Shaper) and shapers.get(s.name) is s
        f = s.fidelity(d)
        assert set(f.__dict__) == {"rate", "delay", "jitter", "loss", "queue"}
    assert shapers.get("delayline").tc_lines("x", d) == [] and shapers.get("delayline").userspace
    assert shapers.get("tbf").fidelity(d).lost() == ["delay", "jitter"]
    assert not shapers.get("tbf").emulates_serialisation and shapers.get("netem").emulates_serialisation
    rules = shapers.get("delayline").node_rules([("a", DirParams()), ("b", d)])
    assert "-o b" in rules and "--queue-num 1" in rules and "-o a" not in rules   # queue numbers per egress index
    assert shapers.get("netem").node_rules([("a", d)]) is None
    assert [s.name for s in shapers.SHAPERS.values() if s.on_hosts] == ["netem", "tbf"]
    import pytest

    with pytest.raises(ValueError, match="unknown shaper 'fq'"):
        shapers.get("fq")
    with pytest.raises(ValueError, match="not available on real hosts"):
        shapers.get("delayline").host_tc_ops(d, 7000)


class _FakeNetns:
    def __init__(self):
        self.calls = []

    def ip_batch(self, lines, ns, tool="ip", force=False):
        self.calls.append(("batch", tool, tuple(lines)))

    def iptables_restore(self, ns, rules):
        self.calls.append(("restore", rules))

    def run_checked(self, argv, stdin="", what=""):
        self.calls.append(("restore", stdin))

    def disable_offloads(self, ns, devs):
        self.calls.append(("offloads", tuple(devs)))


class _FakeClient:
    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        return lambda *a: self.calls.append((name, *a))


def test_live_set_cut_heal_per_shaper():
    d = DirParams(rate_bps=30_000, loss=0.02)
    n = _FakeNetns()
    shapers.get("tbf").set_link(n, "ns", "e0", None, [("e0", None), ("e1", d)])
    assert n.calls[0] == ("batch", "tc", ("qdisc del dev e0 root",)) and n.calls[1] == ("batch", "tc", ())
    assert "-A POSTROUTING -o e0 -j DROP" in n.calls[2][1] and "-o e1 -m statistic" in n.calls[2][1]
    n = _FakeNetns()
    shapers.get("netem").set_link(n, "ns", "e0", d, [("e0", d)])
    assert "netem" in n.calls[1][2][0] and n.calls[2] == ("restore", "*mangle\nCOMMIT\n")   # netem drops itself
    c = _FakeClient()
    dl = shapers.get("delayline")
    dl.set_link(n, "ns", "e0", None, [], client=c, key="l1/down")
    dl.set_link(n, "ns", "e0", d, [], client=c, key="l1/down", was_cut=True)
    dl.set_link(n, "ns", "e0", d, [], client=c, key="l1/down")
    assert c.calls == [("cut", "l1/down"), ("heal", "l1/down"), ("set", "l1/down", d), ("set", "l1/down", d)]
    n = _FakeNetns()
    dl.apply(n, "ns", [("e0", DirParams()), ("e1", d)])
    assert n.calls[0] == ("offloads", ("e1",)) and n.calls[-1][0] == "restore" and "--queue-num 1" in n.calls[-1][1]


def test_a_silent_crash_drops_what_the_namespace_sends_and_receives_itself_not_what_it_forwards():
    from orchestrator.backends.netns import silent_rules

    on, off = silent_rules(True).splitlines(), silent_rules(False).splitlines()
    assert on[0] == off[0] == "*filter" and on[-1] == off[-1] == "COMMIT"        # not the shapers' mangle table
    assert on[1:3] == ["-I INPUT 1 ! -i lo -m comment --comment testbed-silent -j DROP",
                       "-I OUTPUT 1 ! -o lo -m comment --comment testbed-silent -j DROP"]
    assert off[1:3] == [r.replace("-I ", "-D ").replace(" 1 ", " ") for r in on[1:3]]   # exactly those deleted
    assert "FORWARD" not in silent_rules(True)


def test_an_experiment_netem_cannot_render_here_is_refused_before_anything_is_built(tmp_path, monkeypatch):
    from orchestrator import lab as labmod
    from orchestrator.backends import fake
    from orchestrator.errors import SpecError

    plan = build_plan(parse_experiment("topology: {kind: tree, nodes: 3, degree: 2}\n"
                                       "links: {delay: 10ms, jitter: 2ms, jitter_dist: normal}\n"))
    lacking = Capabilities(kernel="x", netem=True, tbf=True, nfqueue=True, statistic=True, netem_dists=(),
                           notes=("netem distribution normal: No distribution data for normal",))
    refused = lacking.unrenderable("netem", plan)
    assert len(refused) == 4 and refused[0].startswith(f"link {plan.links[0].id} (down): jitter distribution normal")
    assert "No distribution data" in refused[0]
    assert lacking.unrenderable("delayline", plan) == []                            # the delay line draws it itself
    assert Capabilities(kernel="x", netem=True, tbf=True, nfqueue=True, statistic=True).unrenderable("netem",
                                                                                                   plan) == []
    monkeypatch.setenv("ORCHESTRATOR_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(labmod, "probe", lambda cache=True: lacking)
    f = tmp_path / "j.yaml"
    f.write_text("name: j\ntopology: {kind: tree, nodes: 3, degree: 2}\n"
                 "links: {delay: 10ms, jitter: 2ms, jitter_dist: normal}\n")
    backend = fake.FakeBackend()
    with pytest.raises(SpecError, match=r"j.yaml: shaper netem cannot render 4 link direction\(s\): link h0-h1 "
                                        r"\(down\): jitter distribution normal") as e:
        labmod.up(labmod.prepare(f), backend=backend, shaper="netem", experiment_path=str(f))
    assert e.value.exit_code == 2 and backend.calls == [] and labmod.list_labs() == []
    # a live link action that would set it mid-run is refused the same way, before anything is built
    f.write_text("name: j\ntopology: {kind: tree, nodes: 3, degree: 2}\nlinks: {delay: 10ms, jitter: 2ms}\n"
                 "duration: 20s\nschedule:\n"
                 "  - {at: 12s, action: link, links: [[h0, h1]], set: {jitter_dist: normal}}\n")
    prep = labmod.prepare(f)
    assert [w for w, _ in labmod.live_link_params(prep)] == ["the link action at 12 s, link h0-h1 (down)",
                                                             "the link action at 12 s, link h0-h1 (up)"]
    with pytest.raises(SpecError, match=r"cannot render 2 link direction\(s\): the link action at 12 s, link h0-h1 "
                                        r"\(down\): jitter distribution normal") as e:
        labmod.up(prep, backend=backend, shaper="netem", experiment_path=str(f))
    assert e.value.exit_code == 2 and backend.calls == [] and labmod.list_labs() == []
    # uniform jitter set live renders
    f.write_text(f.read_text().replace("jitter_dist: normal", "jitter: 5ms"))
    prep = labmod.prepare(f)
    live = labmod.live_link_params(prep)
    assert [d.jitter_s for _, d in live] == [0.005, 0.005] and lacking.unrenderable("netem", prep.plan, live) == []
