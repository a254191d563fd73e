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
import time
from pathlib import Path

import pytest

from orchestrator.lab import prepare
from orchestrator.machinecheck import code_digest
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


# --- the controller drives the machines: `orchestrator up|status|exec|teardown` with --machines ------------------
@pytest.fixture
def ssh_machines():
    m = SshHosts(3, share_mounts=True).start()       # commands over SSH see the namespaces they make
    try:
        yield m
    finally:
        m.close()


def machine_entries(m: SshHosts, tmp_path: Path, **extra) -> list[dict]:
    """Each machine runs this same orchestrator (this interpreter) with its own state directory (on a real
    machine its default one; here the machines share one file system)."""
    return [{"orchestrator": sys.executable, "state_dir": str(tmp_path / f"state-host{i}"), **extra}
            for i in range(1, m.count + 1)]


def orch(tmp_path: Path, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([*ORCH, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200",
                               "ORCHESTRATOR_STATE_DIR": str(tmp_path / "state-controller")})


def test_up_over_three_machines_from_the_controller_and_teardown_everywhere(ssh_machines, tmp_path):
    m = ssh_machines
    lab = f"gc{os.getpid() % 100000}"
    exp = tmp_path / "exp.yaml"
    exp.write_text(EXPERIMENT.format(name=lab, delay=DELAY_MS) + "multicast:\n  groups:\n"
                   "    - {name: data, address: 239.1.0.1}\n")
    entries = machine_entries(m, tmp_path)
    del entries[1]["orchestrator"]            # host2 names none: the controller installs its own code there
    inv = m.inventory_file(tmp_path / "inventory.ini", entries)
    plan = prepare(exp).plan
    up = orch(tmp_path, "up", str(exp), "--machines", str(inv), "--known-hosts", str(m.known_hosts),
              "--shaper", "delayline")
    installed = Path(m.workdir(2), f"orchestrator-{code_digest()}", "venv", "bin", "python")
    try:
        assert up.returncode == 0, up.stderr
        print("\n" + up.stderr)
        assert "installing the orchestrator" in up.stderr and "on host2 ..." in up.stderr, up.stderr
        assert installed.exists()
        assert list(installed.parents[2].glob("src/orchestrator/shaping/delayline/_cengine*.so"))   # gcc is here
        record = json.loads((tmp_path / "state-controller" / lab / "machines.json").read_text())
        assert {h["name"]: h["orchestrator"] for h in record["hosts"]}["host2"] == str(installed)
        assert re.search(r"shards: host1 \d+ nodes .*host3 \d+ nodes .*; 2 cut link\(s\)", up.stderr), up.stderr
        assert sorted(lab_namespaces(lab)) == sorted(f"{lab}-{n.name}" for n in plan.nodes)
        assert record["built"] == ["host1", "host2", "host3"]
        shards = record["sharding"]["shards"]
        owner = {v: s["machine"] for s in shards for v in s["nodes"]}
        # every machine holds exactly its shard: its own state lists only its namespaces
        for i in (1, 2, 3):
            st = json.loads((tmp_path / f"state-host{i}" / lab / "state.json").read_text())
            assert sorted(st["namespaces"]) == sorted(f"{lab}-{v}" for v, mm in owner.items() if mm == f"host{i}")
        # across both cut links: the tree's RTT, each hop shaped by its own machine's delay line
        a = max(shards[1]["nodes"], key=lambda v: plan.node(v).depth)
        b = max(shards[2]["nodes"], key=lambda v: plan.node(v).depth)
        hops = len(path(plan, a, b)) - 1
        rtt = ping_rtts(lab, a, plan.node(b).address)
        print(f"{a} -> {b}: {hops} hops, RTT min {min(rtt):.2f} ms (formula {2 * hops * DELAY_MS:.1f} ms)")
        assert within(min(rtt), 2 * hops * DELAY_MS, 2 * hops), rtt
        st = orch(tmp_path, "status", lab)
        assert st.returncode == 0, st.stdout + st.stderr
        ex = orch(tmp_path, "exec", lab, b, "--", "ip", "-o", "-4", "addr", "show")
        assert ex.returncode == 0 and plan.node(b).address in ex.stdout, ex.stdout + ex.stderr
        # Mininet's CLI from the controller: each node's shell on its own machine; a ping across both cut links
        script = tmp_path / "cli.txt"
        first = plan.links[0]
        script.write_text(f"{a} ping -c 2 -W 2 {b}\n{b} ip -o -4 addr show lo\n"
                          f"link {first.parent} {first.child} down\n")
        cl = orch(tmp_path, "cli", lab, "--script", str(script), timeout=120)
        said = cl.stdout + cl.stderr                     # Mininet's CLI prints through its logger (stderr)
        assert cl.returncode == 0 and "Traceback" not in said, said
        assert "2 received" in said and f"inet {plan.node(b).address}/32" in said, said
        assert "cannot change links live" in said, said         # said, not a crash
        # the multicast group check from the controller: receivers and egress captures on every machine, the
        # copies per link direction counted across the cut links too
        gp = orch(tmp_path, "probe", lab, "--group", "data", "--count", "10", timeout=180)
        assert gp.returncode == 0 and "OK: every member received every packet once" in gp.stdout, \
            gp.stdout + gp.stderr
        # the fidelity probe through the controller: every cut link probed, held to the formula plus the underlay
        pr = orch(tmp_path, "probe", lab, "--links", "1", "--paths", "1", "--count", "5", "--json")
        assert pr.returncode == 0, pr.stderr
        res = json.loads(pr.stdout)
        cut_ids = {lk.id for lk in plan.links if owner[lk.parent] != owner[lk.child]}
        assert set(res["underlay_rtt_ms"]) == cut_ids and all(0 < v < 5 for v in res["underlay_rtt_ms"].values())
        hop = {(p["src"], p["dst"]): p for p in res["paths"]}
        for lk in plan.links:
            if lk.id in cut_ids:
                p = hop[(lk.parent, lk.child)]
                assert p["cut_links"] == 1 and p["received"] == 5, p
                assert -0.2 <= p["error_ms"] <= 2.0 * 2, p      # 2 traversals; the formula plus the underlay
        print(f"probe: underlay {res['underlay_rtt_ms']}, max |error| {res['max_abs_error_ms']:.3f} ms")
        # a run on the lab as it is (`run --lab`): the agents on the machines that hold it
        exp2 = tmp_path / "exp-run.yaml"
        run_part = "protocol: {direct: {transport: udp}}\nworkload: {senders: 1, rate_per_s: 2, size_bytes: 64}\n"
        exp2.write_text(exp.read_text().replace("duration: 10s", "duration: 3s") + run_part)
        rr = orch(tmp_path, "run", str(exp2), "--lab", lab, "--out", str(tmp_path / "runs"), timeout=300)
        assert rr.returncode == 0, rr.stderr[-2000:]
        rd = Path(rr.stdout.strip().splitlines()[-1])
        assert json.loads((rd / "manifest.json").read_text())["status"] == "completed"
        assert all((rd / "events" / f"{n.name}.jsonl").stat().st_size > 0 for n in plan.members)
        assert sorted(lab_namespaces(lab)) == sorted(f"{lab}-{n.name}" for n in plan.nodes)   # the lab stays
    finally:
        down = orch(tmp_path, "teardown", lab)
    assert down.returncode == 0, down.stderr
    assert lab_namespaces(lab) == []
    assert not (tmp_path / "state-controller" / lab).exists()
    for i in (1, 2, 3):
        assert "vxlan" not in sh(["ip", "-n", m.ns(i), "-d", "link", "show"]).stdout
        assert not (tmp_path / f"state-host{i}" / lab).exists()
        assert not Path(m.workdir(i), lab).exists()
    assert not [p for p in Path("/proc").iterdir() if p.name.isdigit() and lab in _cmdline(p)]
    again = orch(tmp_path, "teardown", lab)            # idempotent: nothing left to remove is not an error
    assert again.returncode in (0, 2) and "Traceback" not in again.stderr


def test_teardown_with_a_machine_unreachable_keeps_the_state_and_finishes_later(ssh_machines, tmp_path):
    m = ssh_machines
    lab = f"gd{os.getpid() % 100000}"
    exp = tmp_path / "exp.yaml"
    exp.write_text(EXPERIMENT.format(name=lab, delay=1))
    inv = m.inventory_file(tmp_path / "inventory.ini", machine_entries(m, tmp_path))
    up = orch(tmp_path, "up", str(exp), "--machines", str(inv), "--known-hosts", str(m.known_hosts),
              "--shaper", "tbf")
    port = "p2"                                        # machine 2's port on the switch
    try:
        assert up.returncode == 0, up.stderr
        sh(["ip", "-n", f"{m.ident}sw", "link", "set", port, "down"])     # the SSH connection to host2 is cut
        st = orch(tmp_path, "status", lab)
        assert st.returncode == 1 and "host2: unreachable" in st.stdout, st.stdout + st.stderr
        down = orch(tmp_path, "teardown", lab)
        assert down.returncode != 0 and "host2: unreachable" in down.stderr, down.stderr
        assert "removed from host1, host3" in down.stderr, down.stderr
        left = lab_namespaces(lab)
        assert left and all(ns[len(lab) + 1:] in _shard_of(tmp_path, lab, "host2") for ns in left), left
    finally:
        sh(["ip", "-n", f"{m.ident}sw", "link", "set", port, "up"])
        down = orch(tmp_path, "teardown", lab)
    assert down.returncode == 0, down.stderr
    assert lab_namespaces(lab) == []
    assert not (tmp_path / "state-controller" / lab).exists()


def _shard_of(tmp_path: Path, lab: str, machine: str) -> list[str]:
    record = json.loads((tmp_path / "state-controller" / lab / "machines.json").read_text())
    return next(s["nodes"] for s in record["sharding"]["shards"] if s["machine"] == machine)


def test_machines_that_cannot_take_part_are_named_before_anything_is_built(ssh_machines, tmp_path):
    m = ssh_machines
    lab = f"ge{os.getpid() % 100000}"
    exp = tmp_path / "exp.yaml"
    exp.write_text(EXPERIMENT.format(name=lab, delay=1))
    known = ["--known-hosts", str(m.known_hosts), "--shaper", "tbf"]
    entries = machine_entries(m, tmp_path)
    entries[1] = {**entries[1], "user": m.plain_user}                    # no root, no sudo
    entries[2] = {**entries[2], "orchestrator": "/nonexistent/bin/python"}
    bad = m.inventory_file(tmp_path / "bad.ini", entries)
    r = orch(tmp_path, "up", str(exp), "--machines", str(bad), *known)
    assert r.returncode == 2, r.stderr
    assert "host2: no root" in r.stderr and "host3: no orchestrator at /nonexistent/bin/python" in r.stderr, r.stderr
    assert "host1" not in r.stderr, r.stderr

    unreachable = m.inventory_file(tmp_path / "unreachable.ini", machine_entries(m, tmp_path))
    text = unreachable.read_text().replace(f"ansible_host={m.addr(3)}", f"ansible_host=10.250.{m.subnet}.99")
    unreachable.write_text(text.replace(f"testbed_address={m.addr(3)}", f"testbed_address=10.250.{m.subnet}.99"))
    r = orch(tmp_path, "up", str(exp), "--machines", str(unreachable), *known)
    assert r.returncode == 2 and "host3: unreachable" in r.stderr, r.stderr

    dup = m.inventory_file(tmp_path / "dup.ini", machine_entries(m, tmp_path))
    dup.write_text(dup.read_text().replace(f"ansible_host={m.addr(3)}", f"ansible_host={m.addr(1)}"))
    r = orch(tmp_path, "up", str(exp), "--machines", str(dup), *known)
    assert r.returncode == 2 and "host3: the same machine as host1" in r.stderr, r.stderr

    tiny = tmp_path / "tiny.yaml"
    tiny.write_text(EXPERIMENT.format(name=lab, delay=1).replace("nodes: 13", "nodes: 2"))
    ok = m.inventory_file(tmp_path / "ok.ini", machine_entries(m, tmp_path))
    r = orch(tmp_path, "up", str(tiny), "--machines", str(ok), *known)
    assert r.returncode == 2 and "host3: more machines (3) than the tree can use" in r.stderr, r.stderr

    assert lab_namespaces(lab) == []                   # nothing was built anywhere, nothing recorded
    assert not (tmp_path / "state-controller" / lab).exists()
    for i in (1, 2, 3):
        assert not (tmp_path / f"state-host{i}" / lab).exists()


RUN_EXPERIMENT = """\
name: {name}
topology: {{kind: tree, nodes: 13, degree: 3, members: all}}
links: {{rate: 1mbit, delay: 5ms, queue: 64}}
protocol:
  gsgc: {{subgroup: 3, step: 1s, fail_k: 8}}
workload: {{senders: 2, rate_per_s: 1, size_bytes: 64}}
{nodes}capture: {{interfaces: access}}
schedule:
  - {{at: 6s, action: crash, fraction: 0.2}}
  - {{at: 4s, action: perturb, count: 1, p: 0.2, duration: 4s}}
{extra}duration: {duration}s
seed: 2
"""


def test_a_run_over_three_machines_collects_every_members_files(ssh_machines, tmp_path):
    """`run --machines`: the nodes run on the machines holding them (packed three to a process there), the
    schedule's crash and partition reach them there, and the run directory gets every member's events, logs and
    pcaps back with the clock offsets."""
    m = ssh_machines
    lab = f"gr{os.getpid() % 100000}"
    exp = tmp_path / "exp.yaml"
    exp.write_text(RUN_EXPERIMENT.format(name=lab, duration=14, extra="", nodes=""))
    plan = prepare(exp).plan
    # a partition of the second shard's root: its uplink is a cut link (a tunnel), cut on both machines' sides
    cut = shard_plan(plan, ["host1", "host2", "host3"]).cut[0]
    # each member with a CPU budget, at time dilation 2, packed three to a process: every machine's agent packs its
    # members and enforces their budgets (a pack's budget its members')
    exp.write_text(RUN_EXPERIMENT.format(name=lab, duration=12, nodes="nodes: {cpu: 0.25, packing: 3}\n", extra=(
        f"  - {{at: 8s, action: partition, subtree: {cut.child}}}\n  - {{at: 10s, action: heal}}\n")))
    inv = m.inventory_file(tmp_path / "inventory.ini", machine_entries(m, tmp_path))
    r = orch(tmp_path, "run", str(exp), "--machines", str(inv), "--known-hosts", str(m.known_hosts),
             "--shaper", "delayline", "--dilation", "2", "--out", str(tmp_path / "runs"), timeout=400)
    print(r.stderr[-3000:])
    assert r.returncode == 0, r.stderr[-3000:]
    run_dir = Path(r.stdout.strip().splitlines()[-1])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "completed", manifest["status"]
    assert manifest["backend"] == "machines"
    members = [n.name for n in plan.members]
    assert manifest["time"]["dilation"] == 2
    budget = manifest["cpu_budget"]
    assert budget["enforced"] and budget["cpu"] == 0.25 and budget["dilation"] == 2
    assert sum(u["members"] for u in budget["units"].values()) == len(members)   # every machine's units
    packing = manifest["packing"]
    on = {name: s["members"] for name, s in manifest["machines"]["shards"].items() if s["members"]}
    assert packing["mode"] == "packed" and sorted(packing["machines"]) == sorted(on), packing
    assert packing["processes"] == sum(-(-k // 3) for k in on.values()), (packing, on)
    assert {f"{m}-pack-0.log" for m in on} <= {p.name for p in (run_dir / "logs").iterdir()}
    assert all(u.startswith(tuple(on)) for u in budget["units"]), budget["units"]       # per machine's packs
    assert sorted(manifest["clock_offsets_s"]) == sorted(members)
    # one kernel clock here: the true offset is 0, so each estimate lies within its own bound (RTT / 2)
    assert all(abs(o["offset_s"]) <= o["error_s"] + 1e-6 for o in manifest["clock"]["machines"].values())
    assert sorted(manifest["machines"]["stopped"]) == ["host1", "host2", "host3"]
    for mem in members:
        assert (run_dir / "events" / f"{mem}.jsonl").stat().st_size > 0, mem
        assert (run_dir / "pcaps" / f"{mem}-any.pcap").exists(), mem
    assert len(manifest["captures"]) == len(members)
    assert manifest["schedule"]["applied_ops"] >= 2
    # each action's round trip to the machines holding its targets is measured (the schedule's lag across machines)
    assert 0 < manifest["schedule"]["agent_rtt_ms_median"] <= manifest["schedule"]["agent_rtt_ms_max"]
    # the crash reached the machines: 20 % of 13 members (3) fell silent at 6 s, the others ran to the end
    last = {mem: json.loads((run_dir / "events" / f"{mem}.jsonl").read_text().splitlines()[-1])["ts"]
            - manifest["t0_unix"] for mem in members}
    silent = sorted(mem for mem, t in last.items() if t < 7.0)
    assert len(silent) == 3 and all(t > 10.0 for mem, t in last.items() if mem not in silent), last
    assert sorted(p.name for p in (run_dir / "machines").iterdir()) == [
        f"host{i}-orchestrator.log" for i in (1, 2, 3)]
    assert sorted(p.name for p in (run_dir / "tc").glob("delayline-*.json")) == [
        f"delayline-host{i}.json" for i in (1, 2, 3)]
    link = plan.link_of(cut.parent, cut.child).id
    for machine, direction in ((cut.parent_machine, "down"), (cut.child_machine, "up")):
        q = json.loads((run_dir / "tc" / f"delayline-{machine}.json").read_text())["queues"][f"{link}/{direction}"]
        assert q["cut_dropped"] > 0 and not q["cut"], (machine, direction, q)   # cut during 8-10 s, then healed
    assert lab_namespaces(lab) == []                   # the run built the lab and removed it everywhere
    for i in (1, 2, 3):
        assert not Path(m.workdir(i), lab).exists()


def _ppid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _comm(pid: int) -> str:
    return Path(f"/proc/{pid}/comm").read_text().strip()


def cut_ssh_session(m: SshHosts, i: int, needle: str) -> list[int]:
    """SIGKILL the sshd processes serving the session whose command line holds `needle` on machine i (not its
    listener): the controller's connection breaks as when the network to the machine goes away, and the remote
    command loses its stdin."""
    listener = m.sshd[i - 1].pid
    found = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and needle in _cmdline(p)]
    killed = []
    for pid in found:
        try:
            p = _ppid(pid)
            while p > 1 and p != listener:
                if _comm(p) == "sshd":
                    os.kill(p, 9)
                    killed.append(p)
                p = _ppid(p)
        except (OSError, ValueError):
            continue
    return killed


def test_a_machines_ssh_session_cut_mid_run_is_reported_and_the_lab_removed_everywhere(ssh_machines, tmp_path):
    m = ssh_machines
    lab = f"gs{os.getpid() % 100000}"
    exp = tmp_path / "exp.yaml"
    text = RUN_EXPERIMENT.format(name=lab, duration=40, extra="", nodes="")
    exp.write_text(text.replace("capture: {interfaces: access}\n", ""))
    inv = m.inventory_file(tmp_path / "inventory.ini", machine_entries(m, tmp_path))
    proc = subprocess.Popen([*ORCH, "run", str(exp), "--machines", str(inv), "--known-hosts", str(m.known_hosts),
                             "--shaper", "tbf", "--out", str(tmp_path / "runs")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "NO_COLOR": "1",
                                 "ORCHESTRATOR_STATE_DIR": str(tmp_path / "state-controller")})
    try:
        run_dir = Path(proc.stdout.readline().strip())
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if (run_dir / "manifest.json").exists() and \
                    json.loads((run_dir / "manifest.json").read_text()).get("status") == "running":
                break
            assert proc.poll() is None, proc.stderr.read()
            time.sleep(0.2)
        time.sleep(3)
        part = f"{m.workdir(2)}/{lab}/part.json"
        assert cut_ssh_session(m, 2, f"machine-agent {lab} --part {part}"), "no session to cut"
        _, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
            orch(tmp_path, "teardown", "--all")
    assert proc.returncode != 0
    manifest = json.loads((run_dir / "manifest.json").read_text())
    print(f"\nstatus: {manifest['status']}")
    assert manifest["status"].startswith("failed: machine host2:") and "session" in manifest["status"], manifest
    assert "host2" in manifest["machines"]["not_stopped"]
    log = (run_dir / "orchestrator.log").read_text()
    assert "machine host2: reconnected; its agent has stopped" in log, log[-2000:]
    # host2's members' files were collected after all, up to the cut
    assert len(list((run_dir / "events").glob("h*.jsonl"))) == 13
    # the lab is gone from every machine, and no agent or node outlived the run
    assert lab_namespaces(lab) == []
    assert not (tmp_path / "state-controller" / lab).exists()
    for i in (1, 2, 3):
        assert not Path(m.workdir(i), lab).exists()
    assert not [p for p in Path("/proc").iterdir() if p.name.isdigit() and f"machine-agent {lab}" in _cmdline(p)]


MCAST_EXPERIMENT = """\
name: {name}
topology: {{kind: tree, nodes: 13, degree: 3, members: all}}
links: {{rate: 10mbit, delay: 1ms, queue: 1000}}
protocol:
  direct: {{transport: mcast}}
workload: {{senders: 2, rate_per_s: 10, size_bytes: 100, start: 1s, stop: 5s}}
capture: {{interfaces: none}}
{schedule}duration: 7s
seed: 1
multicast:
  groups:
    - {{name: data, address: 239.1.0.1}}
"""


def test_ip_multicast_across_machines_reaches_every_member_once(ssh_machines, tmp_path):
    """A group's tree over three machines: each machine's multicast daemon routes its own nodes, a cut link's
    tunnel is the interface the plan names on both sides; every member receives every datagram exactly once."""
    m = ssh_machines
    lab = f"gm{os.getpid() % 100000}"
    exp = tmp_path / "exp.yaml"
    exp.write_text(MCAST_EXPERIMENT.format(name=lab, schedule=""))
    plan = prepare(exp).plan
    # a member of the last shard joins at 2 s: the group's routes are grafted towards it across a cut link
    shards = shard_plan(plan, ["host1", "host2", "host3"])
    joiner = max(shards.shards[2].nodes, key=lambda v: plan.node(v).depth)
    exp.write_text(MCAST_EXPERIMENT.format(name=lab, schedule=(
        f"schedule:\n  - {{at: 2s, action: join, nodes: [{joiner}]}}\n")))
    inv = m.inventory_file(tmp_path / "inventory.ini", machine_entries(m, tmp_path))
    r = orch(tmp_path, "run", str(exp), "--machines", str(inv), "--known-hosts", str(m.known_hosts),
             "--shaper", "delayline", "--out", str(tmp_path / "runs"), timeout=400)
    assert r.returncode == 0, r.stderr[-3000:]
    run_dir = Path(r.stdout.strip().splitlines()[-1])
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "completed"
    manifest = json.loads((run_dir / "manifest.json").read_text())
    sent: dict = {}
    got: dict[str, list] = {}
    ident: dict[str, int] = {}
    for mem in (n.name for n in plan.members):
        for line in (run_dir / "events" / f"{mem}.jsonl").read_text().splitlines():
            e = json.loads(line)
            if e.get("event") == "node_started":
                ident[mem] = e["id"]
            elif e.get("event") == "data_sent":
                sent[(mem, e["seq"])] = e["ts"] - manifest["t0_unix"]
            elif e.get("event") == "data_received":
                got.setdefault(mem, []).append((e["origin"], e["seq"]))
    assert len(sent) >= 60, len(sent)                      # 2 senders x 10/s x 4 s, roughly
    # (the joiner may be a sender too: it sends from its start, and every other member gets those as well)
    # (a joiner's workload runs from its own start: it may still send as the run ends; those need not arrive)
    for mem in (n.name for n in plan.members):
        if mem == joiner:
            continue
        mine = got.get(mem, [])
        assert len(mine) == len(set(mine)) and set(mine) <= {(ident[o], q) for o, q in sent}, mem   # once each
        want = {(ident[o], q) for (o, q), t in sent.items() if o != mem and t < 6.5}
        assert want <= set(mine), (mem, sorted(want - set(mine)))                                   # all of them
    # the joiner: once each, and every datagram sent from half a second after it joined
    mine = got.get(joiner, [])
    assert len(mine) == len(set(mine)) and set(mine) <= {(ident[o], q) for o, q in sent}
    # from the joiner's start on (its socket joined; the routes were grafted before the start): however late a
    # busy machine starts its process
    started = next(json.loads(x)["ts"] for x in (run_dir / "events" / f"{joiner}.jsonl").read_text().splitlines()
                   if json.loads(x)["event"] == "protocol_started") - manifest["t0_unix"]
    after = {(ident[o], q) for (o, q), t in sent.items() if started + 0.1 <= t < 6.5 and o != joiner}
    assert after and after <= set(mine), (started, len(after), len(mine))
    # every member got every datagram, and members on the machines without a sender too: across the cut links
    assert {shards.machine_of(n.name) for n in plan.members} - {shards.machine_of(o) for o, _ in sent}
    assert lab_namespaces(lab) == []
