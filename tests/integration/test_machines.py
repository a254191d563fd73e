"""One lab split over several machines (issue #35), with the "machines" made on this one: network namespaces on a
bridge, each with its own underlay address (tests/integration/sshhosts.py). Each machine builds its part of the
lab with the netns backend's own code (`orchestrator up --part`), run inside that machine's namespace as its agent
will run it; the cut links are VXLAN tunnels between the machines' underlay addresses, shaped like every link.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.lab import prepare
from orchestrator.plan import path
from orchestrator.shard import part_of, shard_plan
from tests.integration.sshhosts import SshHosts, sh

ORCH = [sys.executable, "-m", "orchestrator.cli"]
pytestmark = [pytest.mark.root]
DELAY_MS = 5.0

EXPERIMENT = """\
name: {name}
topology: {{kind: tree, nodes: 13, degree: 3, members: all}}
links: {{rate: 100mbit, delay: {delay}ms, queue: 100}}
duration: 10s
seed: 3
"""


def lab_namespaces(lab: str) -> list[str]:
    return [n for n in sh(["ip", "netns", "list"]).stdout.split() if n.startswith(f"{lab}-")]


def on_machine(machines: SshHosts, i: int, argv: list[str], state: Path, timeout: int = 180):
    """`argv` in machine i's network namespace, with that machine's own state directory (as its agent runs it).
    nsenter --net, not `ip netns exec`: that one also gives the command a mount namespace whose new mounts do not
    propagate back, so the lab namespaces it made (bind mounts in /run/netns) would not be seen outside."""
    return subprocess.run(["nsenter", f"--net=/run/netns/{machines.ns(i)}", "env", f"ORCHESTRATOR_STATE_DIR={state}",
                           *argv],
                          capture_output=True, text=True, timeout=timeout, env={**os.environ, "NO_COLOR": "1"})


def within(rtt_ms: float, expected_ms: float, traversals: int) -> bool:
    """The delay line never releases early (0.2 ms: the stamps); late by at most 2 ms per link traversal, a bound
    for a busy machine (the delay line runs at real-time priority; a missing delay or a shaped tunnel's absence
    shows below the formula, not above it)."""
    return expected_ms - 0.2 <= rtt_ms <= expected_ms + 2.0 * traversals


def ping_rtts(lab: str, src: str, dst_addr: str, count: int = 6) -> list[float]:
    r = sh(["ip", "netns", "exec", f"{lab}-{src}", "ping", "-n", "-c", str(count), "-i", "0.2", "-W", "2", dst_addr],
           check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    return [float(x) for x in re.findall(r"time=([\d.]+) ms", r.stdout)]


@pytest.fixture
def machines():
    m = SshHosts(3).start()
    try:
        yield m
    finally:
        m.close()


def test_a_lab_split_over_three_machines_routes_across_the_cut_links(machines, tmp_path):
    lab = f"gm{os.getpid() % 100000}"
    exp = tmp_path / "exp.yaml"
    exp.write_text(EXPERIMENT.format(name=lab, delay=DELAY_MS))
    plan = prepare(exp).plan
    names = [f"m{i}" for i in (1, 2, 3)]
    underlay = {f"m{i}": machines.addr(i) for i in (1, 2, 3)}
    sharding = shard_plan(plan, names)
    assert len(sharding.shards) == 3 and len(sharding.cut) == 2
    states = {i: tmp_path / f"state-m{i}" for i in (1, 2, 3)}
    built = []
    try:
        for i in (1, 2, 3):
            part = part_of(plan, sharding, f"m{i}", underlay, lab)
            f = tmp_path / f"part-m{i}.json"
            f.write_text(json.dumps(part.to_json()))
            r = on_machine(machines, i, [*ORCH, "up", str(exp), "--part", str(f), "--shaper", "delayline"], states[i])
            assert r.returncode == 0, r.stderr
            built.append(i)
            assert f"{len(part.nodes)} nodes" in r.stderr
        assert sorted(lab_namespaces(lab)) == sorted(f"{lab}-{n.name}" for n in plan.nodes)
        for t in (t for i in (1, 2, 3) for t in part_of(plan, sharding, f"m{i}", underlay, lab).tunnels):
            link = sh(["ip", "-n", f"{lab}-{t.node}", "-d", "link", "show", t.dev]).stdout
            assert f"vxlan id {t.vni} remote {t.remote} local {t.local}" in link, link
            # the underlay socket stays in the machine that made the device
            assert f"link-netns {machines.ns(names.index(t.machine) + 1)}" in link, link

        # Every cut link carries traffic both ways; across two cut links (the first shard's deepest member to the
        # last's) the RTT is the tree's: 2 x hops x delay, each hop shaped by its own machine's delay line.
        far_a = max(sharding.shards[1].nodes, key=lambda v: plan.node(v).depth)
        far_b = max(sharding.shards[2].nodes, key=lambda v: plan.node(v).depth)
        route = path(plan, far_a, far_b)
        hops = len(route) - 1
        crossings = sum(1 for a, b in zip(route, route[1:]) if sharding.machine_of(a) != sharding.machine_of(b))
        assert crossings >= 1
        rtt = ping_rtts(lab, far_a, plan.node(far_b).address)
        expected = 2 * hops * DELAY_MS
        print(f"\n{far_a} -> {far_b}: {hops} hops across {crossings} cut link(s), "
              f"RTT min {min(rtt):.2f} ms, median {sorted(rtt)[len(rtt) // 2]:.2f} ms (formula {expected:.1f} ms)")
        assert within(min(rtt), expected, 2 * hops), rtt
        for c in sharding.cut:
            link = plan.link_of(c.parent, c.child)
            one = ping_rtts(lab, c.child, link.parent_addr, count=3)
            assert within(min(one), 2 * DELAY_MS, 2), (c, one)
    finally:
        for i in built:
            r = on_machine(machines, i, [*ORCH, "teardown", lab], states[i])
            assert r.returncode == 0, r.stderr
    assert lab_namespaces(lab) == []
    for i in (1, 2, 3):       # nothing left in the machines: no tunnel, no delay line
        assert "vxlan" not in sh(["ip", "-n", machines.ns(i), "-d", "link", "show"]).stdout
    assert not [p for p in Path("/proc").iterdir() if p.name.isdigit() and lab in _cmdline(p)]


def _cmdline(p: Path) -> str:
    try:
        return (p / "cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""
