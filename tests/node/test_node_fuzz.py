"""Malformed and hostile input: counted and logged, never fatal -- at the core and at a running node."""
from __future__ import annotations

import asyncio
import json
import random
import socket
import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gossipnode.protocols.gsgc import wire
from gossipnode.protocols.base import BadMessage
from gossipnode.protocols.gsgc.core import GsgcNode
from gossipnode.protocols.gsgc.wire import Data, Gossip, Live, Message, MsgType, Nak, Stable

from .cluster import cluster, events, run_all
from .gsgc_sim import make_configs

u16, u32 = st.integers(0, 0xFFFF), st.integers(0, 0xFFFFFFFF)
arrays = st.integers(0, 3).flatmap(lambda m: st.tuples(st.lists(u32, min_size=m, max_size=m).map(tuple),
                                                       st.lists(u32, min_size=m, max_size=m).map(tuple)))
gossip_bodies = st.tuples(arrays, st.integers(1, 20)).flatmap(
    lambda a: st.builds(Gossip, st.just(a[0][0]), st.just(a[0][1]), st.integers(0, (1 << a[1]) - 1), st.just(a[1])))
gossip_m_bodies = st.tuples(arrays, st.integers(1, 20)).flatmap(
    lambda a: st.builds(Gossip, st.just(a[0][0]), st.none(), st.integers(0, (1 << a[1]) - 1), st.just(a[1])))
bodies = {
    MsgType.DATA: st.builds(Data, st.integers(0, 9), st.binary(max_size=20)),
    MsgType.REPAIR: st.builds(Data, st.integers(0, 9), st.binary(max_size=20)),
    MsgType.NAK: st.builds(Nak, st.integers(0, 9),
                           st.lists(st.tuples(u32, u32).map(sorted).map(tuple), max_size=4).map(tuple)),
    MsgType.GOSSIP: gossip_bodies,
    MsgType.SC_GOSSIP: gossip_bodies,
    MsgType.STABLE: st.builds(Stable, st.lists(u32, max_size=3).map(tuple)),
    MsgType.LIVE: st.builds(Live, st.binary(max_size=8)),
    MsgType.GOSSIP_M: gossip_m_bodies,
    MsgType.SC_GOSSIP_M: gossip_m_bodies,
    MsgType.LOCAL_STABLE: st.builds(Stable, st.lists(u32, max_size=3).map(tuple)),
}
assert set(bodies) == set(MsgType)
messages = st.sampled_from(list(MsgType)).flatmap(
    lambda t: st.builds(Message, st.just(t), st.integers(0, 9), u32, st.integers(0, 50), bodies[t]))

LOCAL = [{"members": [0, 1, 2], "controllers": [0]}, {"members": [3, 4, 5], "controllers": [3, 4]}]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(messages, min_size=1, max_size=30), st.booleans())
def test_core_accepts_or_refuses_any_well_formed_message(msgs, local):
    cfg = make_configs(6, senders=[0, 4], fail_k=5, local_groups=LOCAL if local else None)[3]
    core = GsgcNode(cfg, 0.0)
    now = 0.0
    told = (0, 0)  # the element-wise maximum of every S the member accepted (STABLE, GOSSIP, SC_GOSSIP)
    for msg in msgs:
        now += 0.3
        before = core.stability
        try:
            core.receive(msg, now)
        except BadMessage:
            assert core.stability == before  # refused before any state changed
        else:
            if msg.type is MsgType.STABLE or (isinstance(msg.body, Gossip) and msg.body.stability is not None):
                arr = msg.body.stability
                if msg.type is not MsgType.SC_GOSSIP or core.is_sc:
                    told = tuple(map(max, told, arr))
        core.tick(now)
        assert all(a >= b for a, b in zip(core.stability, before)), "S went down"
        assert all(a >= b for a, b in zip(core.stability, told)), f"S {core.stability} is below what it was told {told}"
    json.loads(json.dumps(core.snapshot()))


def hostile_packets(rng: random.Random) -> list[bytes]:
    good = wire.encode(Message(MsgType.GOSSIP, 1, 1, 0, Gossip((0,), (0,), 1, 3)))
    header = struct.Struct("!2sBBHIIH")
    packets = [rng.randbytes(rng.randrange(0, 200)) for _ in range(200)]
    packets += [
        header.pack(b"GS", 9, 4, 1, 1, 0, 0),  # wrong version
        header.pack(b"GS", 1, 4, 1, 1, 0, 0xFFFF) + b"\x00" * 8,  # huge length field
        header.pack(b"GS", 1, 250, 1, 1, 0, 0),  # unknown type
        good[:-3],  # truncated
        good + b"junk",  # trailing bytes
        good,  # well-formed, but claims to be member 1 and comes from elsewhere
        b"GS",
        b"",
    ]
    return packets


def test_running_node_counts_and_logs_hostile_packets_and_keeps_working(tmp_path):
    cfgs, runtimes = cluster(tmp_path, 3, subgroup=2, step_s=0.1, fail_k=20, duration_s=4.0)
    packets = hostile_packets(random.Random(3))
    target = ("127.0.0.1", int(cfgs[2].listen.rsplit(":", 1)[1]))

    async def attack():
        await asyncio.sleep(1.0)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for p in packets:
                s.sendto(p, target)
                await asyncio.sleep(0.001)

    assert asyncio.run(run_all(runtimes, attack())) == ["duration"] * 3
    log = events(cfgs[2])
    stopped = log[-1]
    assert stopped["event"] == "node_stopped"
    assert stopped["runtime"]["bad_packets"] == len(packets)
    assert "internal_errors" not in stopped["runtime"]
    bad = [e for e in log if e["event"] == "bad_packet"]
    assert 0 < len(bad) <= len(packets) and len(bad) + sum(e["suppressed"] for e in bad) <= len(packets)
    reasons = " | ".join(e["reason"] for e in bad)
    assert "foreign packet" in reasons or "truncated" in reasons
    assert all(set(e) >= {"ts", "node", "event", "src", "size", "reason", "head"} for e in bad)
    attack_end = max(e["ts"] for e in bad)
    later_rounds = [e for e in log if e["event"] == "round_completed" and e["ts"] > attack_end + 0.5]
    assert later_rounds, "the node stopped making progress after the hostile packets"


def test_each_kind_of_hostile_packet_is_rejected_by_decode_or_the_sender_check():
    rejected = 0
    for p in hostile_packets(random.Random(3)):
        try:
            msg = wire.decode(p)
        except wire.DecodeError:
            rejected += 1
            continue
        assert msg.sender == 1  # only the well-formed one decodes; the runtime refuses its source address
    assert rejected == len(hostile_packets(random.Random(3))) - 1
