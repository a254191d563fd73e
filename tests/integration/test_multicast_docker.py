"""IP multicast on the Docker backend (root + a running Docker engine): members are containers, the routers of a
sparse tree plain namespaces; the same daemon holds their multicast routes, a group works as on Mininet, and
teardown leaves no container, namespace or daemon."""
from __future__ import annotations

import subprocess

import pytest

from orchestrator.backends import docker as dk
from orchestrator.mcast.probe import probe_group
from orchestrator.state import load_state

from .helpers import cli, in_node, lab_namespaces, unique_lab

pytestmark = [pytest.mark.root, pytest.mark.docker]


@pytest.fixture(scope="module")
def node_image():
    """The node image, built (base cached) when this machine has none, or one of other gossipnode sources."""
    from orchestrator import images

    c = dk.client()
    try:
        current = (c.images.get(dk.node_image()).labels or {}).get(dk.LABEL_SOURCE) == dk.source_digest()
    except Exception:  # noqa: BLE001 - ImageNotFound
        current = False
    if not current:
        images.build_all(node_tag=dk.node_image())
    return dk.node_image()


def mrouted_pids(lab: str | None = None) -> list[int]:
    """The multicast daemons running — of lab `lab` only when given (its config lives in the lab's state
    directory): other labs may come and go on a shared machine while a test runs."""
    pattern = "orchestrator.mcast.mrouted" + (f" --config .*/{lab}/" if lab else "")
    out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


def test_group_on_docker_containers_and_router_namespaces(tmp_path, state_dir, node_image):
    lab = unique_lab("md")
    f = tmp_path / "m.yaml"
    f.write_text("topology: {kind: tree, nodes: 14, degree: 3, members: {count: 6, seed: 4}}\n"
                 "links: {rate: 10mbit, delay: 1ms, queue: 1000}\n"
                 "multicast: {groups: [{name: data, address: 239.1.0.1, members: all}]}\n")
    r = cli("up", str(f), "--name", lab, "--backend", "docker", timeout=600)
    try:
        assert r.returncode == 0, r.stderr[-3000:]
        state = load_state(lab)
        plan = state.load_plan()
        group = plan.groups[0]
        assert any(plan.node(n).role == "router" for n in group.nodes)
        assert len(dk.lab_containers(dk.client(), lab)) == len(plan.members)
        res = probe_group(plan, lambda node, argv, **kw: in_node(state, node, argv, **kw), "data", count=200,
                          sender=group.members[-1])
        assert res["ok"], res["problems"]
        assert all(r["distinct"] == 200 and r["duplicates"] == 0 for r in res["receivers"].values())
        assert sum(c["copies"] for c in res["links"].values()) == 200 * len(group.links)
    finally:
        t = cli("teardown", lab, timeout=600)
    assert t.returncode == 0, t.stderr
    assert lab_namespaces(lab) == [] and dk.lab_containers(dk.client(), lab) == []
    assert mrouted_pids(lab) == []
