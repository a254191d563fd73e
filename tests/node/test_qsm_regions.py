"""QSM region identities without the old limits (issue 34): more than 256 regions (a u16 index on the wire) and a
region of more than 28 groups (its name a digest once "r-" + the joined group names passes 64 characters), end to
end through the wire in the seeded simulator, with loss.

520 members in 260 two-member groups h0..h259 (260 regions); the two members of one of them are also in 30 groups
l0..l29, so their region has 31 groups. Only that region's two members run (nobody else is sent anything): the
sender multicasts into its 31 groups, all of them that one region, whose index is above 255.
"""
from __future__ import annotations

from collections import Counter

from gossipnode.config import NodeConfig
from gossipnode.protocols.qsm.membership import compute_regions

from .qsm_sim import Sim

N = 520


def setup() -> tuple[dict[str, list[int]], int, int]:
    groups = {f"h{k}": [2 * k, 2 * k + 1] for k in range(N // 2)}
    plain = compute_regions(groups, N, 1)
    k = next(r for r in plain if r.index >= 256).groups[0]           # a region past index 255 (sorted by key)
    a, b = groups[k]
    for j in range(30):
        groups[f"l{j}"] = [a, b]
    return groups, a, b


def configs(groups: dict[str, list[int]], run: list[int], sender: int) -> list[NodeConfig]:
    members = [{"id": i, "name": f"m{i}", "addr": f"127.0.0.1:{20000 + i}"} for i in range(N)]
    params = {"name": "qsm", "groups": [{"name": g, "members": ms} for g, ms in groups.items()],
              "partition_size": 1, "token_interval_s": 0.5, "rate_control": False}
    regions = compute_regions(groups, N, 1)
    region = next(r for r in regions if sender in r.members)
    return [NodeConfig.model_validate({
        "name": f"m{i}", "id": i, "listen": members[i]["addr"], "members": members, "protocol": params,
        "senders": [sender], "workload": {"rate_per_s": 31, "size_bytes": 64, "stop_s": 4.0}, "seed": 1000 + i,
        "event_log": f"/nonexistent/m{i}.jsonl",
        "multicast": [{"name": region.name, "address": "239.2.1.1", "port": 7300}]}) for i in run]


def test_a_region_past_index_255_with_31_groups_delivers_through_the_wire():
    groups, a, b = setup()
    cfgs = configs(groups, [a, b], a)
    sim = Sim(cfgs, loss=0.2, seed=5)
    region = sim.nodes[a].region
    assert region.index >= 256 and len(region.groups) == 31 and region.members == (a, b)
    assert region.name.startswith("r--") and len(region.name) == 27 and "-".join(region.groups) not in region.name
    sim.run_until(20)
    sent = {e.fields["seq"]: e.fields["group_name"] for i, e in sim.of("data_sent") if i == a}
    got = Counter(e.fields["seq"] for i, e in sim.of("data_received") if i == b)
    assert len(sent) >= 100 and set(got) == set(sent) and set(got.values()) == {1}
    assert len(set(sent.values())) == 31                                # round robin over its 31 groups
    assert sim.lost["mcast"] > 0 and sim.of("recovered")
    # p = 2 partitions of one member: b's pulls of a's even packets cross partitions and wait for the replicas
    assert sim.nodes[b].counters["pull_delayed"] > 0
    assert sim.nodes[a].snapshot()["sender"]["buffered"] == {region.name: 0}
    assert {e.fields["region"] for _, e in sim.of("ack_received")} == {region.name}
