"""QSM cores in the seeded simulator (tests/node/qsm_sim.py): 24 members in two overlapping groups (three regions),
lossy IP multicast, reliable TCP for the control traffic. Safety: every member delivers every packet of its
groups, exactly once, and nothing of the others; the caches and the senders' buffers are empty once everything is
stable. Each test also checks that the mechanism it is about actually ran (recoveries, NAKs, timeouts, rate
changes), so none can pass vacuously."""
from __future__ import annotations

from collections import Counter, defaultdict

import pytest
from pydantic import ValidationError

from .qsm_sim import Sim, make_configs

GROUPS = {"a": list(range(16)), "b": list(range(8, 24))}


def deliveries(sim: Sim) -> tuple[dict[tuple[int, int], str], dict[int, list[tuple[int, int]]]]:
    sent = {(i, e.fields["seq"]): e.fields["group_name"] for i, e in sim.of("data_sent")}
    got: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for i, e in sim.of("data_received"):
        got[i].append((e.fields["origin"], e.fields["seq"]))
    return sent, got


def assert_delivered(sim: Sim, groups: dict[str, list[int]]) -> int:
    sent, got = deliveries(sim)
    assert sent
    for m in sim.nodes:
        expected = {(o, s) for (o, s), g in sent.items() if m in groups[g] and o != m}
        assert len(got[m]) == len(set(got[m])), f"member {m} delivered a packet twice"
        assert set(got[m]) == expected, f"member {m}: missing {sorted(expected - set(got[m]))[:5]}, " \
                                        f"extra {sorted(set(got[m]) - expected)[:5]}"
    return len(sent)


def assert_released(sim: Sim) -> None:
    for i, node in sim.nodes.items():
        snap = node.snapshot()
        assert not any(snap["cached"].values()), f"member {i} still caches {snap['cached']}"
        if "sender" in snap:
            assert not any(snap["sender"]["buffered"].values()), f"sender {i} still buffers {snap['sender']}"
    assert sum(e.fields["count"] for _, e in sim.of("cache_released")) > 0


def test_one_sender_with_loss_every_member_delivers_and_caches_are_released():
    cfgs = make_configs(24, GROUPS, senders=[0], rate_per_s=20, stop_s=10, token_interval_s=0.5,
                        rate_control=False)
    sim = Sim(cfgs, loss=0.05, seed=3)
    sim.run_until(25)
    assert assert_delivered(sim, GROUPS) == 200
    how = Counter(e.fields["how"] for _, e in sim.of("recovered"))
    assert how["push"] > 0 and how["pull"] > 0, how
    # recovery latency is measured from when the gap was noticed
    lats = [e.fields["latency"] for _, e in sim.of("recovered")]
    assert all(x is not None and x >= 0 for x in lats)
    assert sim.lost["mcast"] > 0
    assert_released(sim)
    # the sender learned of every packet by the collective ACK of both regions of group a
    acks = [e for i, e in sim.of("ack_received") if i == 0]
    assert {e.fields["region"] for e in acks} == {"r-a", "r-a-b"}
    assert sum(e.fields["acked"] for e in acks) == 2 * 200


def test_caching_partition_holds_a_packet_until_stable():
    cfgs = make_configs(24, GROUPS, senders=[0], rate_per_s=20, stop_s=5, token_interval_s=0.5,
                        rate_control=False)
    sim = Sim(cfgs, loss=0.05, seed=4)
    sim.run_until(2.0)
    node = sim.nodes[0]
    region = node.region
    cached = {i: set(n.cur.cache[0]) for i, n in sim.nodes.items() if 0 in n.cur.cache}
    for i, rseqs in cached.items():     # only the packet's caching partition holds it
        assert all(sim.nodes[i].region.caches(i, s) for s in rseqs)
    assert any(cached.values())
    assert region.p == 2    # 8 members, R = 3: two partitions
    sim.run_until(15)
    assert_released(sim)


def test_several_senders_heavy_loss_collective_nak_and_retransmission():
    cfgs = make_configs(24, GROUPS, senders=[0, 10, 20], rate_per_s=20, stop_s=15, token_interval_s=0.5,
                        rate_control=False)
    sim = Sim(cfgs, loss=0.3, seed=5)
    sim.run_until(60)
    assert assert_delivered(sim, GROUPS) == 900
    how = Counter(e.fields["how"] for _, e in sim.of("recovered"))
    assert how["push"] and how["pull"] and how["retransmit"], how
    assert sim.of("nak_sent") and any(e.fields["reason"] == "nak" for _, e in sim.of("retransmit"))
    assert_released(sim)
    # member 10 is in both groups: it sends round robin, half of its packets into group a's regions
    assert {e.fields["group_name"] for i, e in sim.of("data_sent") if i == 10} == {"a", "b"}


def test_lost_tail_is_retransmitted_after_the_timeout():
    cfgs = make_configs(24, GROUPS, senders=[20], rate_per_s=20, stop_s=1.0, token_interval_s=0.5,
                        rate_control=False, retransmit_s=1.0)
    sim = Sim(cfgs, loss=0.0, seed=6)
    sim.run_until(0.7)
    sim.loss = 1.0          # every multicast copy of the last packets is lost: nobody knows they exist
    sim.run_until(1.2)
    sim.loss = 0.0
    sim.run_until(10)
    assert any(e.fields["reason"] == "timeout" for _, e in sim.of("retransmit"))
    assert assert_delivered(sim, GROUPS) == 20
    assert_released(sim)


def test_udp_fan_out_transport():
    cfgs = make_configs(24, GROUPS, senders=[3], rate_per_s=10, stop_s=5, token_interval_s=0.5,
                        rate_control=False, transport="udp")
    sim = Sim(cfgs, loss=0.05, seed=7)
    sim.run_until(20)
    assert assert_delivered(sim, GROUPS) == 50
    assert sim.sent["udp:DATA"] == 50 * 15 and sim.lost["udp"] > 0
    assert_released(sim)


def test_rate_control_follows_the_formula_and_grows_from_the_slowest_receiver():
    groups = {"g": list(range(12))}
    cfgs = make_configs(12, groups, senders=[0], rate_per_s=10, stop_s=40, token_interval_s=1.0,
                        growth=0.1, rate_min=2.0, rate_max=60.0, rate_samples=3)
    sim = Sim(cfgs, loss=0.0, seed=8)
    sim.run_until(45)
    changes = [e.fields for i, e in sim.of("rate_changed") if i == 0]
    assert changes
    for c in changes:   # (2) with the fair share of (1) (m = 1 here, one region: share 1)
        assert c["rate"] == pytest.approx(min(60.0, max(2.0, 1.1 * c["mu_rec"])), rel=1e-3)
    assert max(c["rate"] for c in changes) > 20      # it grew from 10/s
    # no receiver rate before the first packet: the first ACKs leave the initial rate alone (no dip to μ_min)
    assert changes[0]["rate"] > 10
    assert assert_delivered(sim, groups) > 10 * 40


def test_fair_share_divides_by_the_active_senders():
    groups = {"g": list(range(12))}
    cfgs = make_configs(12, groups, senders=[0, 5], rate_per_s=10, stop_s=20, token_interval_s=1.0,
                        growth=0.1, rate_min=1.0)
    sim = Sim(cfgs, loss=0.0, seed=9)
    sim.run_until(20)
    ms = [e.fields["m"] for i, e in sim.of("ack_sent")]
    assert ms and max(ms) == 2
    # receivers get about 20/s in all; each sender is told about half of it
    late = [e.fields for i, e in sim.of("rate_changed") if e.ts > 5]
    assert late and all(c["mu_rec"] < 15 for c in late)


def test_deterministic():
    def run():
        sim = Sim(make_configs(24, GROUPS, senders=[0, 20], rate_per_s=10, stop_s=3, token_interval_s=0.5),
                  loss=0.1, seed=11)
        sim.run_until(8)
        return [(i, e.ts, e.event, sorted(e.fields.items(), key=str)) for i, e in sim.events]
    assert run() == run()


@pytest.mark.parametrize("groups, kw, message", [
    ({"a": list(range(10))}, {}, "belong to no group"),                       # member 11 is in no group
    ({"a": list(range(12))}, {"partition_size": 0}, "greater than or equal to 1"),
    ({"a": list(range(12)), "b": [3, 99]}, {}, "not a member"),              # a group names an unknown member
    ({"a": list(range(6)), "b": list(range(6, 12))}, {"senders": [7], "groups_senders": {"a": [7]}},
     "not both members"),
])
def test_bad_membership_is_rejected_by_the_config(groups, kw, message):
    senders = kw.pop("senders", [])
    gs = kw.pop("groups_senders", {})
    from gossipnode.config import NodeConfig
    members = [{"id": i, "name": f"m{i}", "addr": f"127.0.0.1:{20000 + i}"} for i in range(12)]
    cfg = {"name": "m0", "id": 0, "listen": members[0]["addr"], "members": members,
           "protocol": {"name": "qsm", "transport": "udp", "groups": [
               {"name": g, "members": ms, **({"senders": gs[g]} if g in gs else {})} for g, ms in groups.items()],
               **kw},
           "senders": senders, "workload": {"rate_per_s": 1, "size_bytes": 64} if senders else None,
           "event_log": "/nonexistent/x.jsonl"}
    with pytest.raises(ValidationError, match=message):
        NodeConfig.model_validate(cfg)


def test_mcast_needs_the_region_groups():
    with pytest.raises(ValidationError, match="needs the multicast group 'r-a'"):
        cfgs = make_configs(24, GROUPS, transport="udp")
        from gossipnode.config import NodeConfig
        d = cfgs[0].model_dump(mode="json")
        d["protocol"]["transport"] = "mcast"
        NodeConfig.model_validate(d)


def test_the_runtime_opens_its_tcp_listener_for_qsm():
    # the control traffic goes on TCP streams: without the listener every token pass is a refused connect
    assert make_configs(24, GROUPS)[0].protocol.uses_tcp
