"""Local gossip (§5): local groups first, then the stability controllers; global S multicast and piggybacked."""
from __future__ import annotations

from gossipnode.protocols.gsgc.core import GsgcNode
from gossipnode.protocols.gsgc.wire import MsgType

from .gsgc_sim import Sim, make_configs

GROUPS = [
    {"members": [0, 1, 2, 3, 4], "controllers": [0, 1]},
    {"members": [5, 6, 7, 8, 9], "controllers": [5, 6]},
    {"members": [10, 11, 12, 13, 14], "controllers": [10, 11]},
]
SENDERS = [3, 7]


def configs(**kw):
    args = {"subgroup": 2, "senders": SENDERS, "rate_per_s": 2.0, "stop_s": 10.0, "local_groups": GROUPS}
    return make_configs(15, **{**args, **kw})


def test_gossip_stays_inside_the_local_group_and_among_controllers():
    cfgs = configs(fail_k=8)
    member = GsgcNode(cfgs[8], 0.0)
    sc = GsgcNode(cfgs[5], 0.0)
    for t in range(1, 6):  # (alone, it would declare everyone failed after K = 8 steps)
        out = member.step(float(t))
        assert {d for d, m in out.send if m.type in (MsgType.GOSSIP, MsgType.LIVE)} <= {5, 6, 7, 9}
        gossip = [m for _, m in out.send if m.type is MsgType.GOSSIP]
        assert gossip[0].body.nbits == 5  # W has one bit per local group member
    assert member.sc_step(1.0).send == [] and member.sc is None
    sc.local_stability = (0, 0)  # as after its first local round
    out = sc.sc_step(1.0)
    assert {d for d, _ in out.send} <= {0, 1, 6, 10, 11}
    assert [m.body.nbits for _, m in out.send if m.type is MsgType.SC_GOSSIP] == [3, 3]  # one bit per group


def test_two_phases_reach_global_stability_and_collect_every_buffer():
    sim = Sim(configs(), seed=11)
    sim.run(40.0)
    levels = {(e.fields["level"], e.fields["via"]) for _, e in sim.of("round_completed")}
    assert {("local", "constructed"), ("sc", "constructed")} <= levels
    multicasts = [i for i, e in sim.of("stable") if e.fields["via"] == "multicast"]
    assert set(multicasts) >= set(range(15)) - {0, 1, 5, 6, 10, 11}  # ordinary members hear S from their SCs
    local = [e.fields["s"] for _, e in sim.of("stable") if e.fields["level"] == "local"]
    assert local
    for i, node in sim.nodes.items():
        assert node.snapshot()["R"] == [20, 20], f"member {i}"  # 10 s at 2/s from each sender, no loss
        assert node.snapshot()["S"] == [20, 20], f"member {i}"
        assert node.buffer.count == 0, f"member {i}"
    assert all(node.counters["sent_sc_gossip"] == 0 for i, node in sim.nodes.items() if not node.is_sc)


def test_a_group_without_live_controllers_stops_global_stability_but_stays_safe():
    sim = Sim(configs(fail_k=8, stop_s=None), seed=12)
    sim.crash(5, 5.0)
    sim.crash(6, 5.0)
    sim.run(30.0)
    dark = {(i, e.fields["group"]) for i, e in sim.of("group_unrepresented")}
    assert dark == {(sc, 1) for sc in (0, 1, 10, 11)}
    frozen = {i: node.stability for i, node in sim.nodes.items() if i not in (5, 6)}
    sim.run(50.0)
    for i, s in frozen.items():
        assert sim.nodes[i].stability == s, f"member {i}: S moved without group 1's controllers"
    for i in (7, 8, 9):  # group 1's members still agree on local stability among themselves
        assert sim.nodes[i].main.round > 10
