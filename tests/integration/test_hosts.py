"""The hosts backend against real SSH hosts built on this machine (network namespaces running openssh-server, see
sshhosts.py): deployment through the playbooks (ansible-runner), a GSGC run with a pause and a crash applied over
paramiko, collection, analysis; per-host errors for an unreachable host, a wrong key, a user without sudo and an
unknown host key, with the good host left clean; host-key policy of the paramiko sessions; playbook syntax.

The "hosts" share this machine's filesystem, so every host gets its own workdir (a hosts-file field): Ansible
installs and runs each one separately, as on separate machines.
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
import yaml

from tests.integration.sshhosts import SshHosts, sh

REPO = Path(__file__).resolve().parents[2]
ORCH = [sys.executable, "-m", "orchestrator.cli"]
PLAYBOOKS = sorted((REPO / "playbooks").glob("*.yml"))
pytestmark = [pytest.mark.ansible]


TIMES: dict[str, float] = {}


def orch(args: list, state: Path, timeout: int = 420) -> subprocess.CompletedProcess:
    env = dict(os.environ, ORCHESTRATOR_STATE_DIR=str(state), COLUMNS="400")
    t = time.monotonic()
    r = subprocess.run([*ORCH, *map(str, args)], capture_output=True, text=True, env=env, timeout=timeout,
                       cwd=REPO, stdin=subprocess.DEVNULL)
    TIMES.setdefault(str(args[0]), time.monotonic() - t)
    return r


def experiment(path: Path, name: str, members: int, schedule: list, duration: str = "12s") -> Path:
    path.write_text(yaml.safe_dump({
        "name": name, "topology": {"kind": "tree", "nodes": members, "degree": 4, "members": "all"},
        "links": {"rate": "1mbit", "delay": "5ms", "queue": 64, "loss": "1%"},
        "protocol": {"gsgc": {"subgroup": 2, "step": "1s", "fail_k": 6}},
        "workload": {"senders": 1, "rate_per_s": 1, "size_bytes": 64},
        "schedule": schedule, "duration": duration, "seed": 3}, sort_keys=False))
    return path


def assert_clean(hosts: SshHosts, i: int, lab: str) -> None:
    """Nothing of `lab` is left on host i: directory, shaping, loss rule, processes, probe namespace."""
    assert not (Path(hosts.workdir(i)) / lab).exists(), f"h{i}: lab directory left"
    q = sh(["tc", "-n", hosts.ns(i), "qdisc", "show", "dev", "eth0"]).stdout
    assert "htb" not in q and "pfifo" not in q, f"h{i}: qdisc left: {q}"
    rules = sh(["ip", "netns", "exec", hosts.ns(i), "iptables", "-w", "-t", "mangle", "-S"]).stdout
    assert "gossip-testbed" not in rules, f"h{i}: iptables rule left: {rules}"
    rules = sh(["ip", "netns", "exec", hosts.ns(i), "iptables", "-w", "-S"]).stdout
    assert f"testbed-silent-{lab}" not in rules, f"h{i}: a silent crash's rule left: {rules}"
    for pid in hosts.processes_in(i):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        assert not any(w in cmd for w in ("gossipnode", "tcpdump", "agent.py")), f"h{i}: process left: {cmd}"
    assert not [n for n in sh(["ip", "netns", "list"]).stdout.split() if n.startswith(f"gprobe-{lab}-")]


def no_ssh_masters_left() -> bool:
    out = sh(["ps", "-eo", "args"]).stdout
    return not [line for line in out.splitlines() if "gtcp-" in line and "ssh" in line]


@pytest.fixture(scope="module")
def hosts():
    h = SshHosts(4).start()
    try:
        yield h
    finally:
        h.close()
    assert not [n for n in sh(["ip", "netns", "list"]).stdout.split() if n.startswith(h.ident)]


def test_playbooks_pass_syntax_check():
    assert PLAYBOOKS
    for pb in PLAYBOOKS:
        r = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "--syntax-check", "-i", "localhost,",
                            str(pb)], capture_output=True, text=True, cwd=REPO / "playbooks")
        assert r.returncode == 0, f"{pb.name}: {r.stderr}"


@pytest.mark.root
@pytest.mark.slow
def test_gsgc_on_ssh_hosts_end_to_end(hosts, tmp_path):
    state = tmp_path / "state"
    exp = experiment(tmp_path / "exp.yaml", "gthosts", 4, [
        {"at": "3s", "action": "pause", "nodes": ["h2"], "duration": "1500ms"},
        {"at": "5s", "action": "crash", "nodes": ["h3"], "mode": "silent"},
        {"at": "6s", "action": "perturb", "nodes": ["h1"], "p": 0.5, "duration": "2s"}])
    inv = hosts.hosts_file(tmp_path / "hosts.yml")
    try:
        _end_to_end(hosts, tmp_path, state, exp, inv)
    finally:
        if (state / "gthosts").exists():            # a failed step must not leave the lab on the hosts
            orch(["teardown", "gthosts"], state)


def _end_to_end(hosts, tmp_path, state, exp, inv):
    common = ["--backend", "hosts"]
    t = time.monotonic()
    r = orch(["up", exp, *common, "--inventory", inv, "--known-hosts", hosts.known_hosts], state)
    deploy_s = time.monotonic() - t
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "gthosts"
    assert "NOT emulated" in r.stderr or "shaper netem" in r.stderr      # tbf here: the kernel has no netem

    r = orch(["status", "gthosts", "--json"], state)
    assert r.returncode == 0, r.stderr
    st = json.loads(r.stdout)
    assert st["backend"] == "hosts" and st["status"] == "up" and st["health"] == []
    assert st["shaper"] in ("tbf", "netem") and set(st["capabilities"]["hosts"]) == {f"host{i}" for i in range(1, 5)}
    for i in range(1, 5):
        q = json.loads(sh(["tc", "-n", hosts.ns(i), "-j", "qdisc", "show", "dev", "eth0"]).stdout)
        assert {"htb", "pfifo" if st["shaper"] == "tbf" else "netem"} <= {x["kind"] for x in q}

    r = orch(["exec", "gthosts", "h1", "--", "ip", "-br", "addr", "show", "to", "h1"], state)   # h1: its host address
    assert r.returncode == 0 and hosts.addr(2) in r.stdout, r.stdout + r.stderr

    r = orch(["run", exp, *common, "--lab", "gthosts", "--out", tmp_path / "runs"], state)
    assert r.returncode == 0, r.stderr
    run_dir = Path(r.stdout.strip().splitlines()[-1])
    m = json.loads((run_dir / "manifest.json").read_text())
    assert m["status"] == "completed" and m["backend"] == "hosts"

    # Clock offsets: all "hosts" share this kernel's clock, so the truth is 0; each estimate must lie within its
    # own error bound (rtt/2) plus scheduling noise.
    offs = m["clock"]["members"]
    assert set(m["clock_offsets_s"]) == {"h0", "h1", "h2", "h3"}
    for mem, o in offs.items():
        assert abs(o["offset_s"]) <= o["error_s"] + 0.002, (mem, o)

    # The schedule went over paramiko: the pause and the crash, each on its target, on time.
    events = [json.loads(x) for x in (run_dir / "events" / "orchestrator.jsonl").read_text().splitlines()]
    applied = [e for e in events if e["event"] == "action_applied"]
    assert [(a["op"], a["targets"]) for a in applied[:3]] == [("stop_signal", ["h2"]), ("cont_signal", ["h2"]),
                                                              ("crash", ["h3"])]
    perturb = applied[3:]                   # 100 ms sleeps of h1 with probability 0.5: SIGSTOP/SIGCONT pairs
    assert perturb and {a["action"] for a in perturb} == {"perturb"} and all(a["targets"] == ["h1"] for a in perturb)
    assert {a["op"] for a in perturb} == {"stop_signal", "cont_signal"}
    assert all("errors" not in a for a in applied)
    crash = applied[2]
    # in time: operations go out one at a time, each when it is due or when the one before it came back over SSH,
    # whichever is later, and the runner shares two cores: with Spark tests on the other worker the crash at 5 s
    # went out 564 and 357 ms late (run21, run22 in docs/benchmarks.md; how late is the run's own judge's to grade,
    # `schedule_lag`). A scheduler that held operations back or ignored their times would be seconds off.
    for before, op in zip([None, *applied[:2]], applied[:3]):
        free_at = op["planned_s"] if before is None else \
            max(op["planned_s"], before["actual_s"] + max(before["rtt_ms"].values()) / 1000)
        assert -0.001 <= op["actual_s"] - free_at < 1.5, (op, before)
    assert "errors" not in crash and crash["mode"] == "silent"
    # the silent crash's rules (h3's port dropped both ways, through its agent) went with the run's end
    assert "testbed-silent-gthosts" not in sh(["ip", "netns", "exec", hosts.ns(4), "iptables", "-w", "-S"]).stdout
    crash_pid = crash["pids"]["h3"]
    assert crash_pid and not Path(f"/proc/{crash_pid}").exists()

    def node_events(n):
        return [json.loads(x)["event"] for x in (run_dir / "events" / f"{n}.jsonl").read_text().splitlines()]

    assert "node_started" in node_events("h3") and "node_stopped" not in node_events("h3")   # SIGKILL
    for n in ("h0", "h1", "h2"):
        ev = node_events(n)
        assert ev[0] == "node_started" and ev[-1] == "node_stopped", n
    for n in ("h0", "h1", "h2", "h3"):
        assert (run_dir / "pcaps" / f"{n}-any.pcap").stat().st_size > 24
        assert (run_dir / "logs" / f"{n}.log").exists()
        tc = json.loads((run_dir / "tc" / f"{n}.json").read_text())
        assert any(q["kind"] == "htb" for q in tc)
    assert all(c["captured"] and c["captured"] > 0 for c in m["captures"])
    cfg = json.loads((run_dir / "configs" / "h1.json").read_text())
    assert cfg["listen"] == f"{hosts.addr(2)}:7000"

    r = orch(["teardown", "gthosts"], state)
    assert r.returncode == 0, r.stderr
    for i in range(1, 5):
        assert_clean(hosts, i, "gthosts")
    assert no_ssh_masters_left()
    assert orch(["status", "--json"], state).stdout.strip() in ("[]", "")

    # What was collected is a run directory the analysis reads whole: every capture decodes (the
    # hosts' `any` captures, Linux cooked frames) with GSGC messages among its packets, clock offsets in hand, and
    # the GSGC plug-in's run_values. (Spark's path over such files: tests/analysis on synthetic `any` captures.)
    from analysis import protocols
    from analysis.pcap import CaptureScan, packet_rows
    from analysis.rundir import load
    from analysis.schemas import PACKET_COLUMNS

    t = time.monotonic()
    rd = load(run_dir)
    # no fidelity probe on hosts (backends/hosts.py: the links are the real network), nothing else missing
    assert rd.warnings == ["fidelity.json: file not found"] and set(rd.clock_offsets) == {"h0", "h1", "h2", "h3"}
    assert sorted(c.node for c in rd.captures) == ["h0", "h1", "h2", "h3"]
    col = {c: i for i, c in enumerate(PACKET_COLUMNS)}
    for cap in rd.captures:
        scan = CaptureScan(cap)
        rows = list(packet_rows(cap, rd.run_id, rd.t0, rd.addresses(), rd.clock_offsets.get(cap.node, 0.0),
                                rd.ports, scan=scan, clock=rd.clock))
        assert scan.error is None and scan.packets > 0, (cap.file, scan)
        assert any(r[col["protocol_name"]] == "gsgc" for r in rows), cap.file
    values = protocols.get("gsgc").run_values(rd)
    assert values, values
    TIMES["analysis"] = time.monotonic() - t
    rtts = [v for a in applied for v in a["rtt_ms"].values()]
    print(f"\nhosts: up (deploy 4 hosts) {deploy_s:.1f} s; offsets (ms) "
          f"{ {k: round(v['offset_s'] * 1000, 3) for k, v in offs.items()} }; "
          f"error bounds (ms) { {k: round(v['error_s'] * 1000, 3) for k, v in offs.items()} }; "
          f"crash over paramiko {crash['rtt_ms']['h3']:.1f} ms (until the process was gone); "
          f"all {len(applied)} actions {min(rtts):.1f}-{max(rtts):.1f} ms (median {sorted(rtts)[len(rtts) // 2]:.1f}), "
          f"lag max {max(a['lag_ms'] for a in applied):.1f} ms; manifest deploy_s {m['deploy_s']}; "
          f"CLI steps (s) { {k: round(v, 1) for k, v in TIMES.items()} }")


@pytest.mark.root
def test_bad_hosts_get_per_host_errors_and_the_rest_is_left_clean(hosts, tmp_path):
    state = tmp_path / "state"
    exp = experiment(tmp_path / "exp.yaml", "gtbad", 5, [])
    known = tmp_path / "known_hosts"          # host5 (namespace 4) is not in it
    known.write_text("".join(line for line in hosts.known_hosts.read_text().splitlines(keepends=True)
                             if not line.startswith(hosts.addr(4) + " ")))
    gone = f"10.250.{hosts.subnet}.99"
    inv = hosts.inventory_file(tmp_path / "inventory.ini", [      # an Ansible inventory (hosts.yml: end to end)
        {},                                                  # host1: good
        {"key": str(hosts.wrong_key)},                       # host2: key not authorised
        {"user": hosts.plain_user},                          # host3: no sudo
        {"ssh": gone, "address": gone},                      # host4: nobody there
        {"ssh": hosts.addr(4), "address": hosts.addr(4), "workdir": hosts.workdir(4)},   # host5: unknown key
    ])
    r = orch(["up", exp, "--backend", "hosts", "--inventory", inv, "--known-hosts", known], state)
    assert r.returncode == 1, r.stdout + r.stderr
    err = r.stderr
    lines = {m.group(1): m.group(2) for m in re.finditer(r"^\s+(host\d): (.*)$", err, re.M)}
    print("\n" + "\n".join(f"  {h}: {why}" for h, why in sorted(lines.items())))
    assert set(lines) == {"host2", "host3", "host4", "host5"}, err
    assert "wrong key" in lines["host2"]
    assert "passwordless sudo" in lines["host3"]
    assert lines["host4"].startswith("unreachable")
    assert "--accept-new-host-keys" in lines["host5"]
    for i in range(1, 5):
        assert_clean(hosts, i, "gtbad")
    assert not (state / "gtbad").exists()           # torn down: nothing recorded as left anywhere
    assert no_ssh_masters_left()


@pytest.mark.root
def test_paramiko_sessions_verify_host_keys(hosts, tmp_path):
    from orchestrator.hosts.ansible import HostsError
    from orchestrator.hosts.hostsfile import Host
    from orchestrator.hosts.ssh import AgentSession

    h = Host(name="host1", ssh_host=hosts.addr(1), ssh_port=22, user=hosts.sudo_user, key=str(hosts.key),
             address=hosts.addr(1), interface=None, workdir=hosts.workdir(1), python="/usr/bin/python3",
             member="h0")
    real = {ln.split()[0]: ln.split()[1:] for ln in hosts.known_hosts.read_text().splitlines()}
    with pytest.raises(HostsError, match="does not exist"):
        AgentSession(h, "gtkeys", tmp_path / "missing")
    empty = tmp_path / "empty"
    empty.write_text("")
    with pytest.raises(HostsError, match="not found in known_hosts.*--accept-new-host-keys"):
        AgentSession(h, "gtkeys", empty)
    assert empty.read_text() == ""                      # never recorded silently
    changed = tmp_path / "changed"
    changed.write_text(f"{hosts.addr(1)} {' '.join(real[hosts.addr(2)])}\n")     # another host's key
    with pytest.raises(HostsError, match="CHANGED"):
        AgentSession(h, "gtkeys", changed, accept_new=True)                  # refused even with accept-new
    new = tmp_path / "new"
    with pytest.raises(HostsError, match="agent did not start"):              # the key passed; nothing deployed
        AgentSession(h, "gtkeys", new, accept_new=True)
    got = new.read_text().split()
    assert got[0] == hosts.addr(1) and got[1:] == real[hosts.addr(1)]


def test_ansible_runner_leaves_ctrl_c_to_us(tmp_path):
    """ansible-runner installs SIGINT/SIGTERM handlers of its own when given no cancel callback, and keeps them:
    Ctrl-C would then no longer stop a run. The adapter always passes one and restores the handlers."""
    import signal

    from orchestrator.hosts.ansible import AnsibleContext

    ctx = AnsibleContext(data_dir=tmp_path / "pdd", inventory="all:\n  children:\n    gossip:\n      hosts: {}\n",
                         extravars={}, known_hosts=tmp_path / "known_hosts")
    ctx.prepare()
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    try:
        res = ctx.run("status.yml")
    finally:
        ctx.close()
    assert res.status == "successful" and not res.failures
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    assert oct((tmp_path / "pdd").stat().st_mode & 0o777) == "0o700"
