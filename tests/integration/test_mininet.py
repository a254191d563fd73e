"""The Mininet backend on a real kernel: build, reach, shape, measure, change live, tear down (root)."""
from __future__ import annotations

import json
import math
import signal
import statistics
import subprocess
import time

import pytest

from orchestrator import lab as labmod
from orchestrator.backends.registry import get_backend
from orchestrator.plan import path
from orchestrator.shaping.params import DirParams

from .helpers import ORCH, REPO, cli, lab_namespaces, run_in_node, running_lab, udp_transfer, unique_lab

pytestmark = [pytest.mark.root, pytest.mark.mininet]

TREE_40 = "topology: {kind: tree, nodes: 40, degree: 4}\nlinks: {rate: 30kbit, delay: 5ms, queue: 64}\n"


def farthest_members(plan):
    """Two members with the longest path between them (two BFS sweeps over the tree)."""
    members = [n.name for n in plan.members]
    a = max(members, key=lambda m: len(path(plan, plan.nodes[0].name, m)))
    b = max(members, key=lambda m: len(path(plan, a, m)))
    return a, b


def test_up_reach_farthest_and_tc_shows_shaping(tmp_path, state_dir):
    with running_lab(TREE_40, tmp_path, shaper="tbf") as (state, plan):
        a, b = farthest_members(plan)
        hops = len(path(plan, a, b)) - 1
        assert hops >= 5
        r = run_in_node(state, a, ["ping", "-c", "3", "-W", "5", plan.node(b).address])
        assert r.returncode == 0 and " 0% packet loss" in r.stdout, r.stdout + r.stderr
        # The configured shaping is what the kernel has, on both ends of a link.
        link = plan.links[0]
        for node, dev in ((link.parent, link.parent_if), (link.child, link.child_if)):
            q = run_in_node(state, node, ["tc", "-s", "qdisc", "show", "dev", dev]).stdout
            assert "tbf 1: root" in q and "rate 30Kbit" in q and "pfifo 10: parent 1:1 limit 64p" in q, q
        # status --json lists every node with name, role and address.
        s = json.loads(cli("status", state.lab, "--json").stdout)
        assert {(n["name"], n["role"], n["address"]) for n in s["nodes"]} == {
            (n.name, n.role, n.address) for n in plan.nodes}
        assert s["links"][0]["down"]["rate_kbit"] == 30 and s["links"][0]["up"]["queue"] == 64
        assert s["shaper"] == "tbf" and any("delay" in w for w in s["warnings"])


def test_rate_within_10_percent(tmp_path, state_dir):
    rate = 200_000
    text = f"topology: {{kind: tree, nodes: 7, degree: 3}}\nlinks: {{rate: {rate}bit, queue: 200}}\n"
    with running_lab(text, tmp_path, shaper="tbf") as (state, plan):
        src, dst = farthest_members(plan)
        size = 500                                   # UDP payload; on the wire + 8 UDP + 20 IP + 14 Ethernet
        got = udp_transfer(state, plan, src, dst, count=120, size=size, gap=0)
        times = got["times"]
        assert len(times) == 120                      # the queue (200) holds the whole burst
        # Skip the first packets (tbf's bucket starts full), then bytes over time.
        steady = times[10:]
        measured = (len(steady) - 1) * (size + 42) * 8 / (steady[-1] - steady[0])
        assert measured == pytest.approx(rate, rel=0.10), f"measured {measured:.0f} bit/s for {rate}"


def test_loss_within_binomial_tolerance(tmp_path, state_dir):
    p, n = 0.10, 2000
    text = ("topology: {kind: tree, nodes: 4, degree: 3}\n"
            "links:\n  overrides:\n    - {link: [h0, h1], down: {loss: 10%}}\n")
    with running_lab(text, tmp_path, shaper="tbf") as (state, plan):
        got = udp_transfer(state, plan, "h0", "h1", count=n, size=100, gap=0.0005)
        lost = n - len(got["times"])
        sigma = math.sqrt(n * p * (1 - p))
        assert abs(lost - n * p) <= 3 * sigma, f"lost {lost} of {n}, expected {n * p:.0f} ± {3 * sigma:.0f}"
        # The other direction is clean.
        back = udp_transfer(state, plan, "h1", "h0", count=500, size=100, gap=0.0005)
        assert len(back["times"]) == 500


def test_cut_and_heal_a_link_live(tmp_path, state_dir):
    text = "topology: {kind: tree, nodes: 4, degree: 3}\nlinks: {rate: 1mbit, queue: 64}\n"
    with running_lab(text, tmp_path, shaper="tbf") as (state, plan):
        backend = get_backend("mininet")
        link = plan.link_of("h0", "h2")
        target = plan.node("h2").address
        assert run_in_node(state, "h0", ["ping", "-c", "1", "-W", "2", target]).returncode == 0
        backend.set_link(state, plan, link.id, "down", None)
        assert run_in_node(state, "h0", ["ping", "-c", "2", "-W", "1", target]).returncode != 0
        backend.set_link(state, plan, link.id, "down", link.down)
        assert run_in_node(state, "h0", ["ping", "-c", "1", "-W", "2", target]).returncode == 0
        # A live rate change is what the kernel then has (del + add, no stale options).
        backend.set_link(state, plan, link.id, "down", DirParams(rate_bps=64_000, queue_pkts=10))
        q = run_in_node(state, "h0", ["tc", "qdisc", "show", "dev", link.parent_if]).stdout
        assert "rate 64Kbit" in q and "limit 10p" in q


def test_exec_cli_substitutes_node_names(tmp_path, state_dir):
    with running_lab("topology: {kind: tree, nodes: 5, degree: 4}\n", tmp_path, shaper="tbf") as (state, plan):
        r = cli("exec", state.lab, "h1", "--", "ping", "-c", "1", "-W", "2", "h4")
        assert r.returncode == 0 and plan.node("h4").address in r.stdout
        assert cli("exec", state.lab, "h1", "--", "false").returncode == 1
        r = cli("exec", state.lab, "h77", "--", "true")
        assert r.returncode == 1 and "does not exist" in r.stderr
    assert not subprocess.run(["pgrep", "-f", "mininet:h1"], capture_output=True).stdout


def test_mininets_cli_on_a_lab(tmp_path, state_dir):
    """`orchestrator cli LAB`: Mininet's CLI on our namespaces, as a user types it (stdin) or sources it."""
    with running_lab("topology: {kind: tree, nodes: 5, degree: 2}\n", tmp_path, shaper="tbf") as (state, plan):
        typed = "h1 ping -c1 -W2 h4\npingall\nlink h0 h1 down\nh0 ping -c1 -W1 h1\nlink h0 h1 up\n" \
                "h0 ping -c1 -W2 h1\niperf\nh9 true\nnodes\nexit\n"
        r = subprocess.run([*ORCH, "cli", state.lab], input=typed, capture_output=True, text=True, timeout=300,
                           cwd=REPO)
        out = r.stdout + r.stderr
        assert r.returncode == 0, out
        assert f"PING {plan.node('h4').address}" in out                      # h4 became its address
        assert "*** Results: 0% dropped (20/20 received)" in out
        pings = [ln for ln in out.splitlines() if "packets transmitted" in ln]
        assert [("1 received" in p) for p in pings] == [True, False, True]   # cut, then restored
        assert "link h0-h1 (h0 - h1) cut" in out and "restored to the plan" in out
        assert "not available on an orchestrator lab: iperf" in out
        assert "h0 h1 h2 h3 h4" in out
        assert load_state_overrides(state.lab) == {}                          # `up` put the plan back
        script = tmp_path / "cmds"
        script.write_text("h2 ping -c1 -W2 h3\n")
        r = cli("cli", state.lab, "--script", str(script))
        assert r.returncode == 0 and "1 received" in r.stdout + r.stderr
    assert cli("cli", "nosuchlab").returncode == 2
    assert not subprocess.run(["pgrep", "-f", "mininet:h1"], capture_output=True).stdout


def load_state_overrides(lab: str) -> dict:
    from orchestrator.state import load_state

    return {k: v for k, v in load_state(lab).link_overrides.items() if v == "cut"}


def test_up_of_a_lab_that_is_up_is_refused(tmp_path, state_dir):
    with running_lab("topology: {kind: tree, nodes: 3, degree: 2}\n", tmp_path, shaper="tbf") as (state, _):
        r = cli("up", str(tmp_path / f"{state.lab}.yaml"), "--name", state.lab)
        assert r.returncode == 2 and "already up" in r.stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_up_removes_what_it_built(tmp_path, state_dir, sig):
    lab = unique_lab("i")
    f = tmp_path / "big.yaml"
    f.write_text("topology: {kind: tree, nodes: 1500, degree: 4}\nlinks: {rate: 30kbit, queue: 64}\n")
    p = subprocess.Popen([*ORCH, "up", str(f), "--name", lab, "--shaper", "tbf"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not lab_namespaces(lab) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    p.send_signal(sig)
    out, errs = p.communicate(timeout=120)
    assert p.returncode != 0, "up finished before the signal: make the tree bigger"
    assert lab_namespaces(lab) == []
    assert not (state_dir / lab).exists()


def test_teardown_after_killed_orchestrator(tmp_path, state_dir):
    lab = unique_lab("k")
    f = tmp_path / "big.yaml"
    f.write_text("topology: {kind: tree, nodes: 1500, degree: 4}\n")
    p = subprocess.Popen([*ORCH, "up", str(f), "--name", lab, "--shaper", "tbf"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while len(lab_namespaces(lab)) < 100 and time.monotonic() < deadline:
        time.sleep(0.05)
    p.kill()
    p.wait()
    assert lab_namespaces(lab), "nothing was built before the kill"
    r = cli("teardown", "--all")
    assert r.returncode == 0, r.stderr
    assert lab_namespaces(lab) == []
    veths = subprocess.run(["ip", "-o", "link", "show", "type", "veth"], capture_output=True, text=True).stdout
    assert lab not in veths


def test_status_lists_labs_and_health(tmp_path, state_dir):
    with running_lab("topology: {kind: tree, nodes: 5, degree: 4}\n", tmp_path, shaper="tbf") as (state, plan):
        r = cli("status")
        assert state.lab in r.stdout and "5 nodes" in r.stdout
        # A namespace removed behind our back shows up as a problem.
        subprocess.run(["ip", "netns", "del", f"{state.lab}-h4"], check=True)
        s = labmod.status(state.lab)
        assert s["health"] and "missing" in s["health"][0]
