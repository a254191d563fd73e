"""Stopping `orchestrator run` from outside (issue 22, item 9), on Mininet (root): a hang-up (SIGHUP) is handled
like SIGTERM and Ctrl-C -- stop, collect, manifest `interrupted (SIGHUP)`, teardown -- and `teardown` of a lab
whose orchestrator was killed marks that run's manifest `interrupted: orchestrator gone`."""
from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from orchestrator.state import list_labs

from .helpers import ORCH, REPO, cli, lab_namespaces, unique_lab

pytestmark = [pytest.mark.root, pytest.mark.mininet]

EXPERIMENT = """\
name: {name}
topology: {{kind: tree, nodes: 5, degree: 4}}
links: {{rate: 1mbit, delay: 2ms, queue: 64}}
protocol:
  gsgc: {{subgroup: 2, step: 1s, fail_k: 12}}
workload: {{senders: 1, rate_per_s: 1, size_bytes: 64}}
duration: 120s
seed: 3
"""


def _processes_mentioning(text: str) -> list[str]:
    r = subprocess.run(["pgrep", "-af", text], capture_output=True, text=True)
    return [ln for ln in r.stdout.splitlines() if "pgrep" not in ln]


def _wait_until_running(p: subprocess.Popen, runs: Path, timeout: float = 240) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert p.poll() is None, p.communicate()[1][-3000:]
        for m in runs.glob("*/manifest.json"):
            try:
                if json.loads(m.read_text()).get("status") == "running":
                    return m.parent
            except ValueError:
                pass                    # being written
        time.sleep(0.2)
    raise AssertionError("the run did not start")


@pytest.fixture
def started_run(tmp_path, state_dir):
    """`orchestrator run` of a small tree in its own session (as from a terminal); everything removed after."""
    name = unique_lab("s")
    f = tmp_path / f"{name}.yaml"
    f.write_text(EXPERIMENT.format(name=name))
    runs = tmp_path / "runs"
    p = subprocess.Popen([*ORCH, "run", str(f), "--out", str(runs)], cwd=REPO, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        yield name, p, _wait_until_running(p, runs)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
        if name in list_labs():
            cli("teardown", name)
        assert lab_namespaces(name) == []


def test_sighup_stops_collects_and_tears_down(started_run):
    name, p, run_dir = started_run
    time.sleep(2)
    p.send_signal(signal.SIGHUP)
    out, errs = p.communicate(timeout=240)
    assert p.returncode != 0
    assert out.strip().splitlines() == [str(run_dir)], out      # printed as soon as it existed
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "interrupted (SIGHUP)", (manifest["status"], errs[-2000:])
    events = [json.loads(x) for x in (run_dir / "events" / "orchestrator.jsonl").read_text().splitlines()]
    assert events[-1] == {**events[-1], "event": "run_stopped", "reason": "interrupted (SIGHUP)"}
    assert list((run_dir / "pcaps").glob("*.pcap")) and (run_dir / "tc" / "h0.json").exists()   # collected
    assert lab_namespaces(name) == [] and name not in list_labs()                               # torn down
    assert _processes_mentioning(name) == [] and _processes_mentioning(str(run_dir)) == []      # nodes, captures,
    # the delay line: nothing of the lab runs any more


def test_teardown_after_a_killed_orchestrator_finishes_the_manifest(started_run):
    name, p, run_dir = started_run
    p.send_signal(signal.SIGKILL)                  # no cleanup at all: the manifest still says running
    p.communicate(timeout=60)
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "running"
    r = cli("teardown", name)
    assert r.returncode == 0, r.stderr
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "interrupted: orchestrator gone" and manifest["ended_at"]
    assert lab_namespaces(name) == [] and _processes_mentioning(str(run_dir)) == []


def test_a_failed_run_prints_its_run_directory(tmp_path, state_dir):
    """`run` printed the run directory only on success; a failed run keeps one too, and scripts must find it."""
    name = unique_lab("f")
    f = tmp_path / f"{name}.yaml"
    f.write_text(EXPERIMENT.format(name=name))            # 2 ms delay: tbf cannot emulate it
    r = cli("run", str(f), "--out", str(tmp_path / "runs"), "--shaper", "tbf", "--strict-shaping", timeout=240)
    assert r.returncode == 1 and "--strict-shaping" in r.stderr, r.stderr
    run_dir = Path(r.stdout.strip())
    assert run_dir.parent == (tmp_path / "runs").resolve() and run_dir.is_dir(), r.stdout
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"].startswith("failed: --strict-shaping"), manifest["status"]
    assert lab_namespaces(name) == [] and name not in list_labs()


def test_sighup_during_up_removes_what_was_built(tmp_path, state_dir):
    """`up` handles a hang-up like Ctrl-C and SIGTERM: what was built is removed."""
    name = unique_lab("u")
    f = tmp_path / f"{name}.yaml"
    f.write_text(f"name: {name}\ntopology: {{kind: tree, nodes: 200, degree: 4}}\nlinks: {{rate: 1mbit, delay: 2ms}}\n")
    p = subprocess.Popen([*ORCH, "up", str(f)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not lab_namespaces(name) and time.monotonic() < deadline and p.poll() is None:
            time.sleep(0.05)                   # building: the first namespaces exist
        assert p.poll() is None, "up finished before it could be interrupted"
        p.send_signal(signal.SIGHUP)
        out, errs = p.communicate(timeout=180)
        assert p.returncode != 0 and "tearing down what was created" in errs, errs[-2000:]
        assert lab_namespaces(name) == [] and name not in list_labs()
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
        if name in list_labs():
            cli("teardown", name)
        assert lab_namespaces(name) == []
