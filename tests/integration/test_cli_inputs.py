"""Bad input through the real CLI: exit code 2, one clear line naming file, field and problem, nothing created.

These run `orchestrator up` (and `run`) as a subprocess. Every input here is rejected before anything is built, so
they need no root; the check that nothing was created looks at the state directory and /run/netns."""
from __future__ import annotations

import os

import pytest

from orchestrator.backends.netns import NETNS_DIR

from .helpers import cli

GOOD_TOPOLOGY = "topology: {kind: tree, nodes: 9, degree: 4}\n"
PROTOCOL_BASE = "name: lab1\n" + GOOD_TOPOLOGY


def _netns() -> set[str]:
    return {p.name for p in NETNS_DIR.iterdir()} if NETNS_DIR.is_dir() else set()


@pytest.mark.parametrize("text,words", [
    ("name: lab1\n" + GOOD_TOPOLOGY + "linx: {}\n", ["bad.yaml:3: linx:", "unknown key"]),
    ("name: lab1\ntopology: {kind: tree, nodes: 9, degree: 1}\n", ["bad.yaml:2: topology.degree:"]),
    ("name: lab1\ntopology:\n  kind: tree\n  nodes: 9\n  degree: 4\n  members: {count: 20}\n",
     ["bad.yaml:6: topology.members:", "larger than nodes"]),
    ("name: lab1\n" + GOOD_TOPOLOGY + "links: {rate: -30kbit}\n", ["bad.yaml:3: links.rate:", "positive"]),
    ("name: lab1\n" + GOOD_TOPOLOGY + "links:\n  loss: 120%\n", ["bad.yaml:4: links.loss:", "outside 0..100"]),
    ("name: lab1\ntopology:\n  kind: tree\n  nodes: [1, 2\n", ["bad.yaml:", "malformed YAML"]),
    ("name: 'x; rm -rf /'\n" + GOOD_TOPOLOGY, ["bad.yaml:1: name:", "metacharacters"]),
    # the protocol and multicast sections (validated against the node's models and the plan's groups)
    (PROTOCOL_BASE + "protocol:\n  pbcastt: {fanout: 1}\n", ["bad.yaml:3: protocol:", "unknown protocol 'pbcastt'",
                                                           "available: ", "gsgc"]),
    (PROTOCOL_BASE + "protocol:\n  gsgc:\n    subgroup: 3\n    step: 2s\n    stepp: 1s\n",
     ["bad.yaml:7: protocol.gsgc.stepp:", "unknown key"]),
    (PROTOCOL_BASE + "protocol:\n  gsgc: {subgroup: 0, step: 2s}\n", ["bad.yaml:4: protocol.gsgc.subgroup:",
                                                                  "greater than or equal to 1"]),
    (PROTOCOL_BASE + "protocol:\n  gsgc: {subgroup: 2, step: soon}\n", ["bad.yaml:4: protocol.gsgc.step:", "time"]),
    (PROTOCOL_BASE + "protocol:\n  direct: {transport: sctp}\n", ["bad.yaml:4: protocol.direct.transport:",
                                                             "'udp', 'tcp' or 'mcast'"]),
    (PROTOCOL_BASE + "protocol: {gsgc: {subgroup: 1, step: 1s}, direct: {}}\n", ["bad.yaml:3: protocol:",
                                                                            "exactly one protocol"]),
    # seed 001's protocols (issue #18): an unknown parameter, a committee larger than the group, a sender that is
    # not a member, a multicast below the protocol's headers
    (PROTOCOL_BASE + "protocol:\n  pbcast: {round: 100ms, bogus: 2}\n", ["bad.yaml:4: protocol.pbcast.bogus:",
                                                                     "unknown key"]),
    (PROTOCOL_BASE + "protocol:\n  vsync: {k: 20}\n", ["protocol.vsync.k:", "committee of 20 is larger than the group",
                                                     "(9 members)"]),
    # ... and than the group the schedule leaves when it has the most members down (3 of 9: k at most 6)
    (PROTOCOL_BASE + "protocol:\n  vsync: {k: 7}\nschedule:\n  - {at: 5s, action: crash, nodes: [h1, h2, h3]}\n"
     "duration: 20s\n", ["protocol.vsync.k:", "committee of 7 is larger than the group (9 members) with the 3 members "
                        "the schedule has down at once: k must be at most 6"]),
    (PROTOCOL_BASE + "protocol:\n  tradvsync: {window: 4}\nworkload: {senders: [h99], rate_per_s: 10}\n",
     ["workload.senders:", "'h99'", "not members"]),
    (PROTOCOL_BASE + "protocol:\n  vsync: {k: 2}\nworkload: {senders: [h3], rate_per_s: 10, size_bytes: 4}\n",
     ["size_bytes 4 is below a vsync P_DATA message's headers"]),
    (PROTOCOL_BASE + "multicast:\n  groups:\n    - {name: g, address: 10.1.2.3}\n",
     ["bad.yaml:5: multicast.groups[0].address:", "not a multicast address"]),
])
@pytest.mark.parametrize("command", ["up", "run"])
def test_bad_experiment_is_exit_2_one_line_nothing_created(tmp_path, state_dir, text, words, command):
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    r = cli(command, str(f), timeout=60)
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    for w in words:
        assert w in lines[0], lines[0]
    assert not state_dir.exists() or not any(state_dir.iterdir())
    assert not [n for n in _netns() if n.startswith(("lab1-", "x"))]
    assert r.stdout == ""


def test_missing_file_and_bad_lab_name(tmp_path, state_dir):
    r = cli("up", str(tmp_path / "nope.yaml"))
    assert r.returncode == 2 and "nope.yaml" in r.stderr and "no such experiment file" in r.stderr, r.stderr
    f = tmp_path / "ok.yaml"
    f.write_text(GOOD_TOPOLOGY)
    r = cli("up", str(f), "--name", "a$(reboot)")
    assert r.returncode == 2 and "metacharacters" in r.stderr, r.stderr
    r = cli("up", str(f), "--shaper", "fancy")
    assert r.returncode == 2 and "fancy" in r.stderr, r.stderr
    r = cli("teardown", "ghost")
    assert r.returncode == 2 and "ghost" in r.stderr, r.stderr
    assert not state_dir.exists() or not any(state_dir.iterdir())


def test_graph_writes_dot_and_png(tmp_path):
    prefix = tmp_path / "g"
    r = cli("graph", "topologies/demo.yaml", "--out", str(prefix))
    assert r.returncode == 0, r.stderr
    dot = prefix.with_suffix(".dot").read_text()
    assert dot.startswith(("graph", "strict graph")) and dot.count("--") == 39      # 40 nodes: a tree has 39 edges
    png = prefix.with_suffix(".png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


@pytest.mark.parametrize("args,words", [
    (["--metric", "median"], ["--metric 'median'", "rounds, round0"]),
    (["--duration", "soon"], ["--duration:", "'soon'"]),
    (["--duration", "0s"], ["--duration '0s'", "positive"]),
    (["--reps", "0"], ["--reps must be at least 1"]),
    (["--parallel", "0"], ["Invalid value for '--parallel'"]),
    (["--fix", "nodes.packing"], ["--fix 'nodes.packing': expected PATH="]),
    (["--fix", "duration=60s"], ["--fix duration: one value", "--duration"]),
])
def test_bad_tune_options_are_exit_2_before_any_run(tmp_path, args, words):
    f = tmp_path / "ok.yaml"
    f.write_text("name: lab1\n" + GOOD_TOPOLOGY)
    r = cli("tune", str(f), "--out", str(tmp_path / "tn"), *args, timeout=60)
    assert r.returncode == 2, (r.returncode, r.stderr)
    for w in words:
        assert w in r.stderr, r.stderr
    assert not (tmp_path / "tn").exists()


# --- issue 22: every command validates all of its input before building anything ------------------------------

SCHEDULE_BASE = ("name: lab1\ntopology: {kind: tree, nodes: 9, degree: 4}\n"
                 "protocol: {gsgc: {subgroup: 2, step: 1s}}\nduration: 30s\nschedule:\n")


def _one_error_line(r) -> str:
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    return lines[0]


def _nothing_built(state_dir) -> None:
    assert not state_dir.exists() or not any(state_dir.iterdir())
    assert not [n for n in _netns() if n.startswith("lab1-")]


def _cleanup_if_built(r, state_dir) -> None:
    """Before the fix `up` built these labs: take them down again, so a failing test leaves nothing behind."""
    if r.returncode == 0 or (state_dir.exists() and any(state_dir.iterdir())):
        cli("teardown", "--all", env_extra={"ORCHESTRATOR_STATE_DIR": str(state_dir)})


@pytest.mark.parametrize("entry,words", [
    ("{at: 5s, action: crash, fraction: 1.5}", ["bad.yaml:6: schedule[0].fraction:", "less than or equal to 1"]),
    ("{at: -5s, action: crash, count: 1}", ["bad.yaml:6: schedule[0].at:", "-5s"]),
    ("{at: 5s, action: explode, count: 1}", ["bad.yaml:6: schedule[0].action:", "unknown action 'explode'"]),
    ("{at: 5s, action: crash, nodes: [h99]}", ["bad.yaml:6: schedule[0].nodes[0]:", "unknown node 'h99'"]),
    ("{at: 5s, action: crash, nodes: [h1, hé]}", ["bad.yaml:6: schedule[0].nodes[1]:", "unknown node 'hé'"]),
    ("{at: 20s, action: perturb, count: 1, p: 0.1, duration: 20s}",
     ["bad.yaml:6: schedule[0].duration:", "beyond the duration"]),
])
def test_up_rejects_a_schedule_run_would_reject(tmp_path, state_dir, entry, words):
    """Item 1: `up` validates the schedule against the plan (it used to build the lab)."""
    f = tmp_path / "bad.yaml"
    f.write_text(SCHEDULE_BASE + f"  - {entry}\n")
    r = cli("up", str(f), timeout=120, env_extra={"ORCHESTRATOR_STATE_DIR": str(state_dir)})
    try:
        assert r.returncode == 2, (r.returncode, r.stderr)
        line = _one_error_line(r)
        for w in words:
            assert w in line, line
        _nothing_built(state_dir)
        assert r.stdout == ""
    finally:
        _cleanup_if_built(r, state_dir)


def test_run_schedule_error_names_file_and_line(tmp_path, state_dir):
    """Item 2: schedule errors look like every other field's: `file:line: schedule[0].fraction: ...`."""
    f = tmp_path / "bad.yaml"
    f.write_text(SCHEDULE_BASE + "  - at: 5s\n    action: crash\n    fraction: 1.5\n")
    r = cli("run", str(f), "--out", str(tmp_path / "runs"), timeout=120)
    assert r.returncode == 2, r.stderr
    assert _one_error_line(r).startswith(f"error: {f}:8: schedule[0].fraction: "), r.stderr
    assert not (tmp_path / "runs").exists()


def test_duplicate_keys_are_an_error_naming_both_lines(tmp_path, state_dir):
    """Item 3: `duration: 80s` ... `duration: 10s` is refused, not silently the last one (experiment and hosts)."""
    f = tmp_path / "dup.yaml"
    f.write_text("name: lab1\nduration: 80s\ntopology: {kind: tree, nodes: 9, degree: 4}\nduration: 10s\n")
    r = cli("up", str(f), timeout=120)
    try:
        assert r.returncode == 2, r.stderr
        line = _one_error_line(r)
        assert f"dup.yaml:4: duration: duplicate key (first on line 2)" in line, line
        _nothing_built(state_dir)
    finally:
        _cleanup_if_built(r, state_dir)
    key = tmp_path / "id"
    key.write_text("x\n")
    hosts = tmp_path / "hosts.yml"
    hosts.write_text(f"defaults: {{user: root, key: {key}}}\nhosts:\n  - name: a\n    ssh: 192.0.2.1\n"
                     "    address: 10.1.0.1\n    ssh: 192.0.2.2\n")
    r = cli("up", str(_ok_experiment(tmp_path)), "--backend", "hosts", "--inventory", str(hosts), timeout=120)
    assert r.returncode == 2, r.stderr
    assert "hosts.yml:6: hosts[0].ssh: duplicate key (first on line 4)" in _one_error_line(r), r.stderr
    _nothing_built(state_dir)


def _ok_experiment(tmp_path):
    f = tmp_path / "ok.yaml"
    f.write_text("name: lab1\n" + GOOD_TOPOLOGY)
    return f


def test_binary_file_is_exit_2_one_line(tmp_path, state_dir):
    """Item 4: 10 kB of binary (not UTF-8) used to end in a UnicodeDecodeError traceback and exit 1."""
    f = tmp_path / "bin.yaml"
    f.write_bytes(bytes(range(256)) * 40)
    for command in ("up", "run", "graph"):
        r = cli(command, str(f), timeout=120)
        assert r.returncode == 2, (command, r.stderr)
        assert "not UTF-8" in _one_error_line(r)
    _nothing_built(state_dir)


def test_devices_and_fifos_are_refused_before_reading(tmp_path, state_dir):
    """Item 5: `up /dev/zero` read forever, a FIFO blocked forever; a huge file is refused by its size."""
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    big = tmp_path / "big.yaml"
    big.write_text("# " + "x" * (2 << 20) + "\n")
    for path, words in (("/dev/zero", "not a regular file"), (str(fifo), "not a regular file"),
                        (str(tmp_path), "is a directory"), (str(big), "larger than")):
        r = cli("up", path, timeout=60)         # a hang is a TimeoutExpired here
        assert r.returncode == 2, (path, r.stderr)
        assert words in _one_error_line(r), r.stderr
    _nothing_built(state_dir)


@pytest.mark.parametrize("out", ["/proc/version", "/proc/version/sub", "/proc/sys"])
def test_run_out_must_be_a_writable_directory(tmp_path, state_dir, out):
    """Item 6: `--out /proc/version` built the network, then died with NotADirectoryError: exit 2 first."""
    r = cli("run", str(_ok_experiment(tmp_path)), "--out", out, timeout=120)
    try:
        assert r.returncode == 2, r.stderr
        assert _one_error_line(r).startswith(f"error: --out {out}: "), r.stderr
        _nothing_built(state_dir)
    finally:
        _cleanup_if_built(r, state_dir)


# --- issue 16: rough edges of the command line ------------------------------------------------------------------

def test_error_messages_are_not_rich_markup(tmp_path, state_dir):
    """A message with `[/]` raised MarkupError inside the error handler; `[msgs/s]`-like text vanished."""
    r = cli("up", str(tmp_path / "x[/]y.yaml"))
    assert r.returncode == 2 and "x[/]y.yaml: no such experiment file" in _one_error_line(r), r.stderr
    r = cli("up", str(tmp_path / "[bold]rate.yaml"))
    assert r.returncode == 2 and "[bold]rate.yaml: no such experiment file" in _one_error_line(r), r.stderr


def test_backend_and_shaper_are_choices_and_completion_is_on(tmp_path, state_dir):
    r = cli("up", "--help", env_extra={"COLUMNS": "200"})
    flat = "".join(ch for ch in r.stdout if ch not in " \n│")        # rich wraps and boxes the help
    assert "<mininet|docker|hosts>" in flat and "<auto|netem|delayline|tbf>" in flat, r.stdout
    r = cli("up", str(tmp_path / "never-read.yaml"), "--backend", "dockr")
    assert r.returncode == 2 and "dockr" in r.stderr and "mininet" in r.stderr, r.stderr
    assert "no such experiment file" not in r.stderr        # refused while parsing the command line
    r = cli("run", str(tmp_path / "never-read.yaml"), "--shaper", "netm")
    assert r.returncode == 2 and "netm" in r.stderr and "no such experiment file" not in r.stderr, r.stderr
    assert "--install-completion" in cli("--help").stdout


def test_status_of_an_unhealthy_lab_exits_non_zero(tmp_path, state_dir):
    """`status NAME` listed PROBLEM lines and exited 0."""
    from orchestrator.plan import build_plan
    from orchestrator.spec import parse_experiment
    from orchestrator.state import LabState

    plan = build_plan(parse_experiment(GOOD_TOPOLOGY))
    st = LabState(lab="ghostlab", backend="mininet", shaper="tbf", status="up",
                  namespaces=["ghostlab-h0", "ghostlab-h1"])
    st.save_plan(plan)
    st.save()
    env = {"ORCHESTRATOR_STATE_DIR": str(state_dir)}
    r = cli("status", "ghostlab", env_extra=env)
    assert r.returncode == 1 and "PROBLEM" in r.stdout and "namespaces are missing" in r.stdout, (r.stdout, r.stderr)
    r = cli("status", "ghostlab", "--json", env_extra=env)
    assert r.returncode == 1 and "namespaces are missing" in r.stdout
