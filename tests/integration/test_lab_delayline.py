"""Labs shaped by the delay line (the default on kernels without netem): RTT, live changes, counters, death."""
from __future__ import annotations

import json
import os
import re
import signal
import statistics
import subprocess
import time
from pathlib import Path

import pytest

from orchestrator.backends.registry import get_backend
from orchestrator.shaping.params import DirParams
from orchestrator.state import load_state

from .helpers import ORCH, REPO, cli, lab_namespaces, near, run_in_node, running_lab, typical, unique_lab

pytestmark = [pytest.mark.root, pytest.mark.mininet]


def ping_rtts(state, src, dst_addr, count=30, size=56, interval="0.05"):
    r = run_in_node(state, src, ["chrt", "-f", "40", "ping", "-n", "-c", str(count), "-i", interval, "-s", str(size),
                                 "-W", "3", dst_addr])
    assert r.returncode == 0, r.stdout + r.stderr
    return [float(x) for x in re.findall(r"time=([\d.]+) ms", r.stdout)]


def gone(pid: int, within_s: float = 5.0) -> bool:
    """Exited (a zombie waiting for init to reap it counts as exited)."""
    from orchestrator.backends.netns import _is_zombie

    deadline = time.monotonic() + within_s
    while Path(f"/proc/{pid}").exists() and not _is_zombie(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def delayline_pids(lab: str | None = None):
    """The delay-line daemons running — of lab `lab` only when given (its config lives in the lab's state
    directory): other labs may come and go on a shared machine while a test runs."""
    pattern = "orchestrator.shaping.delayline" + (f" --config .*/{lab}/delayline.json" if lab else "")
    out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


def _engines():
    from orchestrator.shaping.delayline import cengine
    return ["python", pytest.param("c", marks=pytest.mark.skipif(not cengine.available(),
                                                                 reason="the compiled engine is not built"))]


@pytest.fixture(params=_engines())
def engine(request, monkeypatch):
    """The delay line engine of the labs the test starts (the daemon reads DELAYLINE_ENGINE when its config
    names none, as the Mininet backend's does not)."""
    monkeypatch.setenv("DELAYLINE_ENGINE", request.param)
    return request.param


def test_chain_rtt_and_serialisation(tmp_path, state_dir, engine):
    # h1 - h0 - h2: two links, 5 ms per direction -> 20 ms member to member.
    with running_lab("topology: {kind: tree, nodes: 3, degree: 2}\nlinks: {delay: 5ms}\n", tmp_path,
                     shaper="delayline") as (state, plan):
        assert state.shaper == "delayline" and not state.warnings
        got = typical(ping_rtts(state, "h1", plan.node("h2").address))
        assert near(got / 1000, 0.020), f"RTT lower quartile {got} ms"
        # Live change while running: 5 ms -> 15 ms on one direction of one link adds 10 ms.
        link = plan.link_of("h0", "h2")
        get_backend("mininet").set_link(state, plan, link.id, "down", DirParams(delay_s=0.015))
        got = typical(ping_rtts(state, "h1", plan.node("h2").address))
        assert near(got / 1000, 0.030), f"RTT lower quartile after the change {got} ms"

    with running_lab("topology: {kind: tree, nodes: 3, degree: 2}\nlinks: {rate: 30kbit, delay: 5ms, queue: 64}\n",
                     tmp_path, shaper="delayline") as (state, plan):
        d = plan.links[0].down
        expected = 2 * 2 * (d.delay_s + d.serialisation_s(100)) * 1000       # 141.6 ms
        got = statistics.median(ping_rtts(state, "h1", plan.node("h2").address, count=10, size=72,
                                          interval="0.3"))
        assert got == pytest.approx(expected, rel=0.03), f"median {got} ms, expected {expected:.1f} ms"


def test_cut_heal_and_counters(tmp_path, state_dir, engine):
    with running_lab("topology: {kind: tree, nodes: 4, degree: 3}\nlinks: {rate: 1mbit, delay: 2ms, queue: 64}\n",
                     tmp_path, shaper="delayline") as (state, plan):
        backend = get_backend("mininet")
        link = plan.link_of("h0", "h2")
        target = plan.node("h2").address
        assert run_in_node(state, "h0", ["ping", "-c", "3", "-i", "0.2", "-W", "2", target]).returncode == 0
        backend.set_link(state, plan, link.id, "up", None)          # cut the reply direction
        assert run_in_node(state, "h0", ["ping", "-c", "3", "-i", "0.2", "-W", "1", target]).returncode != 0
        backend.set_link(state, plan, link.id, "up", link.up)       # heal
        assert run_in_node(state, "h0", ["ping", "-c", "3", "-i", "0.2", "-W", "2", target]).returncode == 0
        s = json.loads(cli("status", state.lab, "--json").stdout)
        entry = next(lk for lk in s["links"] if lk["id"] == link.id)
        # 9 echo requests went down; 9 replies were offered up, the 3 of the cut were dropped there.
        assert entry["down"]["counters"]["packets"] >= 9
        assert entry["up"]["counters"]["cut_dropped"] >= 3
        assert s["shaper_totals"]["kernel_drops"] == 0


def test_killed_delay_line_stops_the_run_and_leaves_nothing(tmp_path, state_dir):
    name = unique_lab("d")
    f = tmp_path / "x.yaml"
    f.write_text(f"name: {name}\ntopology: {{kind: tree, nodes: 5, degree: 4}}\nlinks: {{rate: 30kbit, delay: 5ms}}\n"
                 "protocol: {gsgc: {subgroup: 1, step: 1s, fail_k: 10}}\nduration: 60s\n")
    p = subprocess.Popen([*ORCH, "run", str(f), "--out", str(tmp_path / "runs")], cwd=REPO,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not list((tmp_path / "runs").glob("*/events/h0.jsonl")):
            time.sleep(0.2)
        ours = delayline_pids(name)
        assert len(ours) == 1, "the run's delay line should be running"
        os.kill(ours[0], signal.SIGKILL)
        out, errs = p.communicate(timeout=120)
    finally:
        if p.poll() is None:            # the test failed before the run ended: stop it the way a user would
            p.send_signal(signal.SIGTERM)
            p.communicate(timeout=120)
    assert p.returncode == 1
    assert "delay line" in errs and "blackholed" in errs, errs[-2000:]
    run_dir = next((tmp_path / "runs").iterdir())
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"].startswith("shaper failed")
    assert lab_namespaces(name) == []
    assert delayline_pids(name) == []
    assert not (state_dir / name).exists()


def test_teardown_after_killed_orchestrator_stops_the_delay_line(tmp_path, state_dir):
    lab = unique_lab("k")
    f = tmp_path / "k.yaml"
    f.write_text("topology: {kind: tree, nodes: 30, degree: 4}\nlinks: {delay: 1ms}\n")
    r = cli("up", str(f), "--name", lab)
    assert r.returncode == 0, r.stderr
    pid = load_state(lab).delayline["pid"]
    assert Path(f"/proc/{pid}").exists()
    sockdir = load_state(lab).delayline["sockdir"]
    r = cli("teardown", "--all")
    assert r.returncode == 0, r.stderr
    assert gone(pid) and not Path(sockdir).exists()
    assert lab_namespaces(lab) == []
