"""A QSM experiment that names only its groups (root, Mininet; under a minute): topologies/qsm-small.yaml (which
declares no `multicast:` section), shortened, its members packed in one process. The plan derives one IP multicast
group per region (the senders into a region they are not in send only), and every member delivers every packet of
its groups exactly once and nothing else."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from orchestrator.source import render_template

from .helpers import REPO, cli, lab_namespaces, unique_lab
from .test_qsm import events

pytestmark = [pytest.mark.root, pytest.mark.mininet]


def test_qsm_with_derived_region_groups_delivers_each_groups_packets_once(tmp_path):
    name = unique_lab("qg")
    text = render_template((REPO / "topologies" / "qsm-small.yaml").read_text(), "qsm-small.yaml")
    head, _, rest = text.partition("duration:")
    text = (head + "nodes: {packing: 24}\nduration:" + rest) \
        .replace("name: qsm-small", f"name: {name}").replace("start: 1s, stop: 21s", "start: 1s, stop: 7s") \
        .replace("duration: 30s", "duration: 15s")
    assert "multicast:" not in text
    f = tmp_path / f"{name}.yaml"
    f.write_text(text)
    r = cli("run", str(f), "--out", str(tmp_path / "runs"),
            env_extra={"ORCHESTRATOR_STATE_DIR": str(tmp_path / "state")}, timeout=150)
    assert r.returncode == 0, r.stderr[-3000:]
    assert lab_namespaces(name) == [], "namespaces outlived the run"
    run_dir = Path(r.stdout.strip().splitlines()[-1])
    plan = (run_dir / "plan.json").read_text()
    assert "239.192.0.3" in plan and "r-a-b" in plan                 # the derived groups are in the run's plan
    log = events(run_dir)
    ids = {e["node"]: e["id"] for e in log if e["event"] == "node_started"}
    assert len(ids) == 24
    groups = {"a": {f"h{i}" for i in range(16)}, "b": {f"h{i}" for i in range(8, 24)}}
    sent = {(ids[e["node"]], e["seq"]): e["group_name"] for e in log if e["event"] == "data_sent"}
    # non-vacuous, not a rate: a starved sender's timer skips sends, so only "each group got some" is guaranteed
    per_group = {g: sum(1 for x in sent.values() if x == g) for g in ("a", "b")}
    assert min(per_group.values()) >= 10, per_group
    got = Counter((e["node"], e["origin"], e["seq"]) for e in log if e["event"] == "data_received")
    assert max(got.values()) == 1, "a packet was delivered twice"
    for node, mid in ids.items():
        expected = {(o, s) for (o, s), g in sent.items() if node in groups[g] and o != mid}
        mine = {(o, s) for (n, o, s) in got if n == node}
        assert mine == expected, f"{node}: missing {sorted(expected - mine)[:5]}, extra {sorted(mine - expected)[:5]}"
