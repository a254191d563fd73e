"""Bad input through the real CLI: exit code 2, one clear line naming file, field and problem, nothing created.

These run `orchestrator up` (and `run`) as a subprocess. Every input here is rejected before anything is built, so
they need no root; the check that nothing was created looks at the state directory and /run/netns."""
from __future__ import annotations

import pytest

from orchestrator.backends.netns import NETNS_DIR

from .helpers import cli

GOOD_TOPOLOGY = "topology: {kind: tree, nodes: 9, degree: 4}\n"


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
])
def test_bad_tune_options_are_exit_2_before_any_run(tmp_path, args, words):
    f = tmp_path / "ok.yaml"
    f.write_text("name: lab1\n" + GOOD_TOPOLOGY)
    r = cli("tune", str(f), "--out", str(tmp_path / "tn"), *args, timeout=60)
    assert r.returncode == 2, (r.returncode, r.stderr)
    for w in words:
        assert w in r.stderr, r.stderr
    assert not (tmp_path / "tn").exists()
