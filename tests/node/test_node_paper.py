"""GSGC as the paper ran it (issue 17): S multicast once per construction, gossip without S at the paper's
message size, §5's two phases in sequence -- and the default behaviour unchanged for configs that do not ask."""
from __future__ import annotations

import hashlib
import json

import pytest
from pydantic import ValidationError

from gossipnode.protocols.gsgc import wire

from .gsgc_sim import Sim, local_gossip_counts, make_configs, paper_local_configs
from .test_node_wire import HEADER_DIFFERENCE, paper_gossip_size

# ---- the default behaviour is the one before these options existed -------------------------------------------

# Digests of every packet (source, destination, bytes) and every event of these runs, computed at commit ae63db0
# (before stable_via, piggyback_stability and the §5 changes): global gossip without the new options must not change.
UNCHANGED = [
    (dict(n=12, subgroup=2, fail_k=8, senders=[0, 3], rate_per_s=3.0, loss=0.1), "b8d4b2ea1056c5af"),
    (dict(n=10, subgroup=3, multicast_stable=True, senders=[1], rate_per_s=2.0, stop_s=8.0), "9f5c8386a9b24f7f"),
    (dict(n=9, subgroup=1, fail_k=6, senders=[2, 4, 6], multicast_stable=True, loss=0.3), "af9f4d47611b29a2"),
]


@pytest.mark.parametrize(("kw", "expected"), UNCHANGED)
def test_global_gossip_without_the_new_options_is_unchanged(kw, expected):
    kw = dict(kw)
    loss = kw.pop("loss", 0.0)
    sim = Sim(make_configs(**kw), loss=loss, seed=5)
    h = hashlib.sha256()
    record = sim._record

    def spy(node_id, out):
        for dest, msg in out.send:
            h.update(f"{node_id}>{dest}:".encode() + wire.encode(msg))
        assert not out.mcast
        record(node_id, out)

    sim._record = spy
    sim.run(20.0)
    for i, e in sim.events:
        h.update(json.dumps([i, e.ts, e.event, e.fields], sort_keys=True, default=str).encode())
    assert h.hexdigest()[:16] == expected


# ---- parameters ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("kw", "error"), [
    (dict(stable_via="multicast", multicast_stable=True), "needs a multicast group"),
    (dict(stable_via="multicast", multicast_stable=True, stable_group="nope", multicast=["all"]),
     "no multicast group 'nope'"),
    (dict(stable_group="all", multicast=["all"]), "stable_group names the multicast group"),
    (dict(piggyback_stability=False), "needs multicast_stable"),
])
def test_bad_combinations_are_refused(kw, error):
    with pytest.raises((ValidationError, ValueError), match=error):
        make_configs(4, **kw)


def test_piggyback_off_is_fine_with_local_gossip_or_a_multicast_s():
    make_configs(4, piggyback_stability=False, multicast_stable=True)
    make_configs(4, piggyback_stability=False, local_groups=[{"members": [0, 1], "controllers": [0]},
                                                    {"members": [2, 3], "controllers": [3]}])


# ---- global gossip, the optimised scheme ---------------------------------------------------------------------

def test_global_s_by_one_multicast_and_gossip_without_s():
    cfgs = make_configs(20, subgroup=2, senders=[0, 5], rate_per_s=2.0, stop_s=6.0, multicast_stable=True,
                        stable_via="multicast", piggyback_stability=False, multicast=["all"])
    sim = Sim(cfgs, seed=3)
    sim.run(30.0)
    constructions = [e for _, e in sim.of("round_completed") if e.fields["via"] == "constructed"]
    assert constructions and sim.sent_by_type["STABLE"] == len(constructions)  # one datagram each
    assert not sim.sent_by_type["GOSSIP"] and sim.sent_by_type["GOSSIP_M"]
    assert sim.sizes["GOSSIP_M"] == {paper_gossip_size(20, 2) - HEADER_DIFFERENCE}
    for i, node in sim.nodes.items():  # S reached everyone by the multicasts alone
        assert list(node.stability) == [12, 12] and node.buffer.count == 0, i
    heard = {i for i, e in sim.of("stable") if e.fields["via"] == "multicast"}
    assert heard >= set(range(20)) - {i for i, e in sim.of("stable") if e.fields["via"] == "constructed"}


# ---- §5 with the paper's settings ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def paper_run():
    sim = Sim(paper_local_configs(), seed=1)  # n = 100, 2 x 50, 5 SCs, m = 50, b = 1, 0.7 s / 0.2 s, loss-free
    sim.run(30.0)
    return sim


def test_every_message_has_the_papers_size_less_the_header_difference(paper_run):
    n_groups = 2
    assert paper_run.sizes == {
        "GOSSIP_M": {paper_gossip_size(50, 50) - HEADER_DIFFERENCE},        # W: one bit per local group member
        "SC_GOSSIP_M": {paper_gossip_size(n_groups, 50) - HEADER_DIFFERENCE},  # W: one bit per local group
        "STABLE": {32 + 4 * 50 + 4 - 17},
        "LOCAL_STABLE": {32 + 4 * 50 + 4 - 17},
        "DATA": {40},
    }


def test_one_stable_multicast_per_construction_and_sc_rounds_follow_local_rounds(paper_run):
    c = local_gossip_counts(paper_run)
    assert c["stable_packets"] == c["sc_constructions"]
    assert 0 < c["sc_rounds"] <= c["local_rounds"]  # an SC round needs a local array not yet used
    assert c["sc_constructions"] <= 4 * c["sc_rounds"]  # concurrent constructions of one round, not hundreds
    assert c["raised_s"] > 0
    # every member, SC or not, learnt S from the multicasts: at the end all hold the same S, the constructors' last
    final = {tuple(node.stability) for node in paper_run.nodes.values()}
    assert len(final) == 1 and max(final) > (0,) * 50


def test_the_issues_measurement_fell(paper_run):
    """Before the change the same loss-free run with m = 25, unicast S and piggybacking (docs/reproduction.md)
    gave 155 SC constructions and 15 345 STABLE packets of 26 267; now the same settings give a handful."""
    sim = Sim(paper_local_configs(m=25, paper=False), seed=1)
    sim.run(30.0)
    c = local_gossip_counts(sim)
    assert c["sc_constructions"] <= 4 * c["sc_rounds"] <= 4 * c["local_rounds"]
    assert c["stable_packets"] == 99 * c["sc_constructions"] < 15345 / 5


# ---- the paper's experiment files ----------------------------------------------------------------------------

PAPER_FILES = ["gsgc-sim1-dense-200", "gsgc-sim2-dense-200", "gsgc-sim1-sparse-1000", "gsgc-sim2-sparse-1000",
               "gsgc-local-sparse-1000", "gsgc-dense-200", "gsgc-sparse-1000"]


@pytest.mark.parametrize("name", PAPER_FILES)
def test_the_papers_files_give_node_configs_with_s_by_multicast_and_m_50(name, tmp_path):
    from pathlib import Path

    from orchestrator.nodeconfig import node_configs
    from orchestrator.plan import build_plan
    from orchestrator.spec import load_experiment

    exp = load_experiment(Path(__file__).parents[2] / "topologies" / f"{name}.yaml")
    cfgs = node_configs(exp, build_plan(exp), tmp_path / "r", tmp_path / "c")
    for cfg in cfgs.values():
        p = cfg["protocol"]
        assert (p["stable_via"], p["stable_group"], p["piggyback_stability"], p["multicast_stable"]) == (
            "multicast", "stable", False, True)
        assert len(cfg["senders"]) == 50
        (group,) = cfg["multicast"]
        assert group["name"] == "stable" and group["may_send"]
        assert len(cfg["members"]) == 200


def test_a_controller_that_may_not_send_to_the_group_is_refused():
    cfgs = make_configs(4, local_groups=[{"members": [0, 1], "controllers": [0]},
                                         {"members": [2, 3], "controllers": [3]}],
                        stable_via="multicast", multicast=["all"])
    raw = cfgs[0].model_dump(mode="json")
    raw["multicast"][0]["may_send"] = False
    with pytest.raises(ValidationError, match="may construct S but may not send"):
        type(cfgs[0]).model_validate(raw)
    raw = cfgs[1].model_dump(mode="json")  # member 1 is no SC: it never announces S
    raw["multicast"][0]["may_send"] = False
    type(cfgs[1]).model_validate(raw)
