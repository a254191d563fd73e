"""QSM: a crashed member that is restarted rejoins (§2.3.2: "if that node is actually not dead, it would need to rejoin
the system"). The GMS removed it when it crashed; its new process (the next `incarnation`) takes part in nothing,
replays the views, its own removal among them, until the GMS's view adds it back, and from then on is a joiner: it
delivers the packets sent into the views it is in, once. A restarted sender numbers its messages apart from its
earlier process's. Hand-worked membership and node cases, then the seeded simulator (tests/node/qsm_sim.py)."""
from __future__ import annotations

import random

import pytest

from gossipnode.protocols.qsm.core import SEQ_BITS_PER_INCARNATION, QsmNode

from .qsm_sim import Sim, make_configs
from .test_qsm_joins import GROUPS, deliveries, expected, membership

NEW = 1 << SEQ_BITS_PER_INCARNATION     # the first message number of a sender's second process


def test_a_removed_member_is_added_back_into_its_groups_in_new_region_views():
    ms = membership([])
    out = ms.remove([12, 20])
    assert 12 not in out.region_of and 20 not in out.sends_to and out.removed == {12, 20}
    back = out.add([12, 20])
    assert back.removed == frozenset() and back.groups == ms.groups and back.sends_to[20] == ["b"]
    # region a-b (8..15) lost 12 and got it back: a third view of it; b's (16..23) likewise with its sender
    assert [(r.index, r.groups, r.members) for r in back.regions] == [
        (0, ("a",), tuple(range(8))), (5, ("a", "b"), tuple(range(8, 16))), (6, ("b",), tuple(range(16, 24)))]
    assert back.origins_of(back.region_of[12]) == [0, 20]
    with pytest.raises(ValueError, match="neither joiners waiting to join nor removed"):
        back.add([12])                   # running: nothing to add
    assert back.remove([12]).removed == {12}          # a second crash removes it again


def test_a_restarted_process_waits_replays_its_removal_and_takes_part_from_the_view_that_adds_it():
    cfgs = make_configs(24, GROUPS, senders=[0, 20], stop_s=30)
    restarted = QsmNode(cfgs[20].model_copy(update={"incarnation": 1}), 5.0)
    assert not restarted.joined and restarted.next_wakeup() == float("inf")
    assert [(e.event, e.fields.get("incarnation")) for e in restarted.startup.events] == [("qsm_waiting_to_join", 1)]
    first = QsmNode(cfgs[20], 0.0)
    assert first.joined and first.seq == 0 and restarted.seq == NEW
    # its own removal, replayed: still out; the view that adds it back: in, in the region view everyone has
    reply, out = restarted.control({"cmd": "gms_view", "changes": [{"remove": [20]}]}, 5.1)
    assert reply["installed"] == 1 and not restarted.joined and restarted.removed_self
    member = QsmNode(cfgs[17], 0.0)
    changes = [{"remove": [20]}, {"add": [20]}]
    member.control({"cmd": "gms_view", "changes": changes}, 6.0)
    reply, out = restarted.control({"cmd": "gms_view", "changes": changes}, 6.0)
    assert reply["installed"] == 1 and restarted.joined and not restarted.removed_self
    assert [e.fields.get("added") for e in out.events] == [[20]]
    # b's view without 20 was 3; back, a-b (gaining its sender again) is succeeded by 4 and b by 5
    assert restarted.region.index == member.ms.region_of[20].index == 5
    # it sends into the new view, numbering from its incarnation's block
    restarted.tick(restarted.next_wakeup())
    sent = restarted.tick(restarted.next_wakeup()).events
    assert any(e.event == "data_sent" and e.fields["seq"] > NEW for e in sent)
    with pytest.raises(ValueError, match="at most 255 restarts"):
        QsmNode(cfgs[3].model_copy(update={"incarnation": 256}), 0.0)


def rejoin_run(seed, loss, transport="mcast", R=3, who=(12, 20), tcp=(0.0, 0.0)):
    """Members `who` crash at 3 s (the view without them 0.5 s later), are restarted at 5 s and added back 0.5 s
    after that; the senders stop at 10 s."""
    cfgs = make_configs(24, GROUPS, senders=[0, 20], rate_per_s=20, stop_s=10, token_interval_s=0.5,
                        rate_control=False, partition_size=R, transport=transport)
    sim = Sim(cfgs, loss=loss, seed=seed, tcp_late=tcp[0], tcp_lost=tcp[1])
    sim.run_until(3.0)
    sim.crash_and_remove(list(who), detect=0.5)
    sim.run_until(5.0)
    for m in who:
        sim.restart(m)
    sim.run_until(5.5)
    sim.gms_add(list(who), spread=0.3)
    sim.run_until(70)
    return sim


def check_rejoin(sim, who, restart_at=5.0, plan=None):
    """Every member delivers every packet once; a restarted member's new process exactly what each origin sent
    after installing the view that added it back (view 2), its old process a part of what was sent before its
    crash; a member that never crashed everything of its groups, but a packet whose caching partition had only
    crashed members and, of a crashed sender's old packets, one that no surviving caching replica had (the
    paper's guarantee is for cached packets: "As long as at least a single receiver in the region has the message
    cached ... it ultimately is delivered to every node that missed it in that region", §2.3) -- and when one had
    it, every survivor of the region delivers it."""
    sent, got = deliveries(sim)
    ms = sim.nodes[0].ms
    holders: dict[tuple[int, int], set[int]] = {}        # (region view, rseq) -> survivors that got it
    key: dict[tuple[int, int], tuple[int, int]] = {}      # (region view, rseq) -> (origin, seq)
    excused = set()
    for i, e in sim.of("data_received"):
        o, seq, ridx, rseq = e.fields["origin"], e.fields["seq"], e.fields["region_index"], e.fields["rseq"]
        r = ms.region(ridx)
        if all(m in who for m in r.partitions[r.caching_partition(rseq)]):
            excused.add((o, seq))
        if o in who and seq < NEW and i not in who:
            holders.setdefault((ridx, rseq), set()).add(i)
            key[(ridx, rseq)] = (o, seq)
    cached = 0
    for (ridx, rseq), have in holders.items():
        r = ms.region(ridx)
        if any(r.caches(m, rseq) for m in have):
            assert have == {m for m in r.members if m not in who}, (plan, ridx, rseq)
            cached += 1
        else:
            excused.add(key[(ridx, rseq)])
    reached = set(key.values())
    excused |= {(o, s) for (o, s) in sent if o in who and s < NEW and (o, s) not in reached}   # reached no survivor
    for m in sim.nodes:
        assert len(got[m]) == len(set(got[m])), (plan, m, "a packet delivered twice")
        if m in who:
            late = {(e.fields["origin"], e.fields["seq"]) for i, e in sim.of("data_received")
                    if i == m and e.ts >= restart_at}
            want = expected(sim, GROUPS, m, {m: 2})
            assert late == want, (plan, m, sorted(want - late)[:3], sorted(late - want)[:3])
            assert all(sent[k][1] < 3.0 for k in set(got[m]) - late), (plan, m)
        else:
            want = expected(sim, GROUPS, m, {})
            assert want - excused <= set(got[m]) <= want, (plan, m, sorted(want - excused - set(got[m]))[:3])
    for i in (0, 20):
        assert not any(sim.nodes[i].snapshot()["sender"]["buffered"].values()), (plan, i)
    assert all(not any(n.snapshot()["cached"].values()) for n in sim.nodes.values()), plan
    return sent, got, cached


def test_a_restarted_receiver_and_sender_rejoin_mid_stream_and_deliver_their_views_packets_once():
    # members 12 (regions a-b: both senders' packets) and the sender 20 crash at 3 s, 5 % loss; restarted at 5 s,
    # added back at 5.5 s. Not vacuous: 12's new process got many packets of both origins, 20's sent many with
    # its new numbers that every member of b delivered, and the old region views ended everywhere.
    sim = rejoin_run(seed=3, loss=0.05)
    sent, got, cached = check_rejoin(sim, (12, 20))
    assert cached > 20            # the crashed sender's old packets were recovered among the survivors
    late12 = [e for i, e in sim.of("data_received") if i == 12 and e.ts >= 5.0]
    assert len(late12) > 150 and {e.fields["origin"] for e in late12} == {0, 20}
    new20 = [s for (o, s) in sent if o == 20 and s > NEW]
    assert len(new20) > 60 and all((20, s) in got[m] for s in new20 for m in GROUPS["b"] if m != 20)
    retired = {e.fields["region_index"] for _, e in sim.of("view_retired")}
    assert {0, 1, 2} <= retired or {1, 2} <= retired, sorted(retired)


def test_random_restart_plans_every_member_delivers_its_views_packets_once():
    # 10 seeded plans: 1-2 members (a receiver, and the sender 20 in half) crashed at 3 s and restarted; R = 1, 3
    # or 5, loss 0-20 %, mcast or UDP, half with the lab's late and lost TCP frames
    rng = random.Random(21)
    rejoined = 0
    for _ in range(10):
        seed, loss = rng.randrange(1000), rng.choice([0.0, 0.05, 0.2])
        transport, R = rng.choice(["mcast", "udp"]), rng.choice([1, 3, 5])
        who = tuple(sorted({rng.choice([m for m in range(1, 24) if m != 20])} | ({20} if rng.random() < 0.5
                                                                                  else set())))
        tcp = (0.02, 0.01) if rng.random() < 0.5 else (0.0, 0.0)
        plan = (seed, loss, transport, R, who, tcp)
        sim = rejoin_run(seed, loss, transport, R, who, tcp)
        _, got, _ = check_rejoin(sim, who, plan=plan)
        rejoined += sum(1 for i, e in sim.of("data_received") if i in who and e.ts >= 5.0)
    assert rejoined > 1000
