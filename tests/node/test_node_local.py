"""Local gossip (§5): local groups first, then the stability controllers; global S sent to every member (and
piggybacked unless `piggyback_stability: false`). The paper's settings (S by multicast, no piggybacking, m = 50) are in
test_node_paper.py."""
from __future__ import annotations

from gossipnode.protocols.gsgc.core import GsgcNode
from gossipnode.protocols.gsgc.wire import Message, MsgType, Stable

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
    assert sc.sc_step(1.0).send == []  # no local array yet: the SC round has not begun, the SC is silent
    # member 8 constructed its group's array of local round 0 and tells the group's SCs (5 and 6)
    sc.receive(Message(MsgType.LOCAL_STABLE, 8, 1, 0, Stable((0, 0))), 1.1)
    out = sc.sc_step(1.2)
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


def sc_rounds_and_local_arrays(sim):
    """Per SC: its SC round starts (ts, via) and the local arrays it learnt (ts, local round)."""
    starts = [(i, e.ts, e.fields["via"], e.fields["round"]) for i, e in sim.of("round_started")
              if e.fields["level"] == "sc"]
    learnt = [(i, e.ts, e.fields["round"], e.fields["via"]) for i, e in sim.of("stable")
              if e.fields["level"] == "local"]
    return starts, learnt


def test_sc_rounds_begin_only_with_arrays_of_completed_local_rounds():
    sim = Sim(configs(stop_s=None), seed=13)
    sim.run(40.0)
    starts, learnt = sc_rounds_and_local_arrays(sim)
    built: dict[tuple[int, int], float] = {}  # (group, local round) -> its first construction
    for i, e in sim.of("round_completed"):
        if e.fields["level"] == "local" and e.fields["via"] == "constructed":
            key = (sim.nodes[i].group_index, e.fields["round"])
            built[key] = min(e.ts, built.get(key, e.ts))
    assert starts
    for i, ts, via, rnd in starts:
        assert via in ("local_array", "gossip", "next_round", "jump"), via
        if via == "local_array":  # it contributed a local array it had learnt, from a local round completed
            mine = [(t, r) for j, t, r, _ in learnt if j == i and t <= ts]
            assert mine, f"SC {i} began SC round {rnd} at {ts} without a local array"
            t, r = mine[-1]
            assert built[(sim.nodes[i].group_index, r)] <= t
        else:  # it heard an SC's gossip of that round: some SC began that round with a local array first
            assert any(v == "local_array" and r == rnd and t <= ts for _, t, v, r in starts)
    # SC rounds follow the local rounds: at most one SC round per local array (a group's local round)
    sc_rounds = {e.fields["round"] for _, e in sim.of("round_completed")
                 if e.fields["level"] == "sc" and e.fields["via"] == "constructed"}
    assert 3 <= len(sc_rounds) <= len(built)


def test_an_sc_that_never_constructed_a_local_array_takes_part():
    sim = Sim(configs(stop_s=None), seed=14)
    sim.run(40.0)
    starts, learnt = sc_rounds_and_local_arrays(sim)
    scs = {c for g in GROUPS for c in g["controllers"]}
    told = {i for i, _, _, via in learnt if via == "local_stable"}
    assert told <= scs and {i for i, *_ in starts} <= scs
    # the array each SC round began with at an SC: the latest it learnt, constructed there or sent to it
    began_with = [max((t, via) for j, t, _, via in learnt if j == i and t <= ts)[1]
                  for i, ts, how, _ in starts if how == "local_array"]
    assert "local_stable" in began_with, "no SC round began with an array the SC had not constructed itself"
    assert scs <= told  # every SC was sent its group's arrays


def test_local_stable_goes_only_to_the_groups_other_controllers():
    cfgs = configs(stop_s=None)
    sim = Sim(cfgs, seed=15)
    sent = []
    sim.observers.append(lambda s: None)
    record = sim._record

    def spy(node_id, out):
        sent.extend((node_id, d) for d, m in out.send if m.type is MsgType.LOCAL_STABLE)
        record(node_id, out)

    sim._record = spy
    sim.run(20.0)
    assert sent
    group_of = {i: k for k, g in enumerate(GROUPS) for i in g["members"]}
    for src, dest in sent:
        assert dest != src and dest in GROUPS[group_of[src]]["controllers"]
