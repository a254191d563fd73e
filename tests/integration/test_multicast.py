"""IP multicast across the emulated tree (root, Mininet, delay line): a sender streams to a group and every member
receives each packet exactly once; every link direction carries one copy per packet where the group's tree
crosses it (away from the sender) and none elsewhere (egress captures on every link end next to the tree); a
multicast hop costs what a unicast hop costs (delay + serialisation of the packet, the fidelity probe's formula);
bad groups are rejected before anything is built; nothing of a lab (namespace, daemon) is left behind."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from orchestrator import lab as labmod
from orchestrator.mcast import realise
from orchestrator.mcast.probe import count_frames, probe_group
from orchestrator.mcast.tree import mfc_entries
from orchestrator.state import load_state

from .helpers import cli, in_node, lab_namespaces, running_lab, unique_lab

pytestmark = [pytest.mark.root, pytest.mark.mininet]

GROUP = "multicast: {groups: [{name: data, address: 239.1.0.1, members: all}]}\n"


def mrouted_pids(lab: str | None = None) -> list[int]:
    """The multicast daemons running — of lab `lab` only when given (its config lives in the lab's state
    directory): other labs may come and go on a shared machine while a test runs."""
    pattern = "orchestrator.mcast.mrouted" + (f" --config .*/{lab}/" if lab else "")
    out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


def popen_in(state):
    return lambda node, argv, **kw: in_node(state, node, argv, **kw)


def access_capture(state, plan, node: str, path) -> subprocess.Popen:
    """The runner's access-mode capture of `node` (the local driver's `capture_targets` with groups)."""
    from orchestrator.backends.local import capture_targets

    (_, ifname, filt), = [t for t in capture_targets(plan, "access") if t[0] == node]
    return in_node(state, node, ["tcpdump", "-i", ifname, "-n", "-U", "-w", str(path), *filt],
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def check_stream(state, plan, tmp_path, sender: str, count: int = 1000, watch: tuple[str, ...] = ()) -> dict:
    caps = {m: access_capture(state, plan, m, tmp_path / f"{m}-any.pcap") for m in watch}
    deadline = time.monotonic() + 20
    while not all((tmp_path / f"{m}-any.pcap").exists() for m in watch) and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        res = probe_group(plan, popen_in(state), "data", count=count, size=100, sender=sender)
    finally:
        time.sleep(0.3)
        for p in caps.values():
            p.send_signal(signal.SIGINT)
            p.communicate(timeout=20)
    assert res["problems"] == [], res["problems"][:10]
    members = [m for m in plan.groups[0].members if m != sender]
    assert sorted(res["receivers"]) == sorted(members)
    for m, r in res["receivers"].items():
        assert (r["distinct"], r["duplicates"], r["missing"]) == (count, 0, 0), (m, r)
    # Copies per link direction: exactly `count` where the tree crosses it away from the sender, 0 elsewhere.
    tree = set(plan.groups[0].links)
    for d, c in res["links"].items():
        lid, direction = d.split("/")
        assert c["copies"] == c["expected"], (d, c)
        assert c["expected"] in ((count,) if lid in tree else (0,)) or (lid in tree and c["expected"] == 0)
    on_tree = [d for d, c in res["links"].items() if c["expected"]]
    assert len(on_tree) == len(tree)
    # The access capture of a member records each group packet it receives once (forwarding members too).
    for m in watch:
        assert count_frames(tmp_path / f"{m}-any.pcap") == count, m
    return res


def test_dense_40_every_member_once_one_copy_per_tree_link(tmp_path, state_dir):
    text = "topology: {kind: tree, nodes: 40, degree: 4}\nlinks: {rate: 10mbit, delay: 2ms, queue: 1000}\n" + GROUP
    with running_lab(text, tmp_path, shaper="delayline") as (state, plan):
        s = json.loads(cli("status", state.lab, "--json").stdout)["multicast"]
        # (*,G) on every node and (self,G) at every sender: 80 routes of the group (and 40 (*,*) entries).
        assert s["daemon"]["alive"] and s["groups"][0]["mfc_installed"] == s["groups"][0]["mfc_expected"] == 80
        # h5: an interior member (it forwards to its children while receiving); h39: a leaf.
        res = check_stream(state, plan, tmp_path, sender="h1", watch=("h5", "h39", "h0"))
        assert len(res["links"]) == 78
        # The delay line saw each copy once per link direction (no looped-back copy was queued on a link).
        stats = labmod.status(state.lab)
        for lk in stats["links"]:
            for d in ("down", "up"):
                key = f"{lk['id']}/{d}"
                assert lk[d]["counters"]["packets"] == res["links"][key]["copies"], key


def test_sparse_tree_routers_forward_and_nothing_leaks(tmp_path, state_dir):
    text = ("topology: {kind: tree, nodes: 40, degree: 3, members: {count: 7, seed: 2}}\n"
            "links: {rate: 10mbit, delay: 1ms, queue: 1000}\n"
            "multicast:\n  groups:\n    - {name: data, address: 239.1.0.1, members: all}\n"
            "    - {name: few, address: 239.9.9.9, members: [h5, h38], senders: [h38], port: 7100}\n"
            "    - {name: feed, address: 239.9.9.10, members: [h5, h38], senders: [h3], port: 7101}\n")
    with running_lab(text, tmp_path, shaper="delayline") as (state, plan):
        group = plan.groups[0]
        routers = [n for n in group.nodes if plan.node(n).role == "router"]
        assert routers, "the sparse tree must route through non-members"
        last = group.members[-1]
        check_stream(state, plan, tmp_path, sender=last)
        # Routers on the tree forwarded every packet (their kernel routes counted them).
        live = realise.stats(state)
        for r in routers:
            assert live["nodes"][r]["packets"] >= 1000, r
        few = probe_group(plan, popen_in(state), "few", count=50)
        assert few["ok"], few["problems"]
        assert list(few["receivers"]) == ["h5"] and few["receivers"]["h5"]["distinct"] == 50
        # A send-only sender (h3, not a member of feed): every member receives each packet once, one copy per
        # tree link (probe_group checks the copies per link direction against the plan's tree).
        feed = probe_group(plan, popen_in(state), "feed", count=50, sender="h3")
        assert feed["ok"], feed["problems"]
        assert sorted(feed["receivers"]) == ["h38", "h5"]
        assert all(r["distinct"] == 50 and r["duplicates"] == 0 for r in feed["receivers"].values())
        assert sum(c["copies"] for c in feed["links"].values()) == 50 * len(plan.groups[2].links)
        # The kernel holds exactly the plan's routes in every namespace of a tree.
        for n in group.nodes:
            assert live["nodes"][n]["mfc"] == len(mfc_entries(plan, n)), n


def test_a_multicast_hop_costs_what_a_unicast_hop_costs(tmp_path, state_dir):
    # h1 - h0 - h2 at 30 kbit/s + 5 ms: one 100-byte IP packet per hop takes 5 ms + 30.4 ms one way, so the
    # unicast formula 2 x (delay + (size + 14 B) * 8 / rate) gives 70.8 ms per hop.
    text = "topology: {kind: tree, nodes: 3, degree: 2}\nlinks: {rate: 30kbit, delay: 5ms, queue: 64}\n" + GROUP
    with running_lab(text, tmp_path, shaper="delayline") as (state, plan):
        res = probe_group(plan, popen_in(state), "data", count=12, size=72, sender="h1")
        assert res["ok"], res["problems"]
        for m, r in res["receivers"].items():
            rtt = 2 * r["median_delay_ms"]
            assert rtt == pytest.approx(70.8 * r["hops"], rel=0.03), (m, r)
        # The same through the CLI (text and --json).
        r = cli("probe", state.lab, "--group", "data", "--count", "5", "--size", "72")
        assert r.returncode == 0 and "OK: every member received every packet once" in r.stdout, r.stdout + r.stderr
        r = cli("probe", state.lab, "--group", "nosuch")
        assert r.returncode == 2 and "no multicast group 'nosuch'" in r.stderr


def test_bad_group_is_one_line_exit_2_and_builds_nothing(tmp_path, state_dir):
    lab = unique_lab("mb")
    f = tmp_path / "bad.yaml"
    f.write_text("topology: {kind: tree, nodes: 5, degree: 3}\nmulticast:\n  groups:\n"
                 "    - {name: data, address: 224.0.0.9, members: all}\n")
    r = cli("up", str(f), "--name", lab)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{f}:4: multicast.groups[0].address: 224.0.0.9 is link-local" in lines[0], r.stderr
    f.write_text("topology: {kind: tree, nodes: 5, degree: 3}\nmulticast:\n  groups:\n"
                 "    - {name: data, address: 239.0.0.9, members: [h1, h7]}\n")
    r = cli("up", str(f), "--name", lab)
    assert r.returncode == 2 and "multicast.groups[0].members: no node named 'h7'" in r.stderr
    assert lab_namespaces(lab) == [] and mrouted_pids(lab) == [] and not (state_dir / lab).exists()


def test_dead_daemon_is_reported_and_teardown_leaves_nothing(tmp_path, state_dir):
    lab = unique_lab("mk")
    f = tmp_path / "k.yaml"
    f.write_text("topology: {kind: tree, nodes: 12, degree: 3}\nlinks: {delay: 1ms}\n" + GROUP)
    r = cli("up", str(f), "--name", lab)
    assert r.returncode == 0, r.stderr
    try:
        st = load_state(lab)
        pid = st.mroute["pid"]
        assert pid in mrouted_pids()
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while pid in mrouted_pids() and time.monotonic() < deadline:
            time.sleep(0.05)
        s = json.loads(cli("status", lab, "--json").stdout)
        assert s["multicast"]["daemon"]["alive"] is False
        assert any("multicast routing daemon" in h for h in s["health"])
        r = cli("probe", lab, "--group", "data")
        assert r.returncode == 1 and "not healthy" in r.stderr
    finally:
        r = cli("teardown", lab)
    assert r.returncode == 0, r.stderr
    assert lab_namespaces(lab) == [] and pid not in mrouted_pids()
    assert not (state_dir / lab).exists()


def test_interrupted_up_leaves_no_daemon(tmp_path, state_dir):
    """SIGINT while the multicast daemon is being started (a 300-node tree): the build is torn down."""
    lab = unique_lab("mi")
    f = tmp_path / "i.yaml"
    f.write_text("topology: {kind: tree, nodes: 300, degree: 4}\nlinks: {delay: 1ms}\n" + GROUP)
    from .helpers import ORCH, REPO

    p = subprocess.Popen([*ORCH, "up", str(f), "--name", lab], cwd=REPO, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not mrouted_pids(lab) and p.poll() is None:
        time.sleep(0.01)
    p.send_signal(signal.SIGINT)
    p.communicate(timeout=120)
    if (state_dir / lab).exists():         # it had finished before the signal: tear it down as a user would
        assert cli("teardown", lab).returncode == 0
    assert lab_namespaces(lab) == []
    assert mrouted_pids(lab) == []
