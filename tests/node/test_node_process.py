"""`python -m gossipnode --config FILE` as the orchestrator runs it: start, control, SIGSTOP/SIGCONT, stop."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from gossipnode import control

from .cluster import bind_loopback, events
from .gsgc_sim import make_configs

STEP_S = 0.1
FAIL_K = 15


def wait_until(predicate, timeout=10.0, what="condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if predicate():
                return
        except control.ControlError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def nodes(tmp_path):
    socks = bind_loopback(3)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    cfgs = make_configs(3, subgroup=2, step_s=STEP_S, fail_k=FAIL_K, senders=[0], rate_per_s=20.0, ports=ports,
                        log_dir=tmp_path / "events", control_dir=tmp_path)
    procs = []
    for cfg in cfgs:
        path = tmp_path / f"{cfg.name}.json"
        path.write_text(cfg.model_dump_json())
        procs.append(subprocess.Popen([sys.executable, "-m", "gossipnode", "--config", str(path)],
                                      stderr=subprocess.PIPE, text=True))
    yield cfgs, procs
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_node_process_lifecycle(nodes):
    cfgs, procs = nodes
    for cfg in cfgs:
        wait_until(lambda cfg=cfg: control.dump_state(cfg.control)["protocol"]["global"]["round"] >= 1,
                   what=f"{cfg.name} to complete a round")

    procs[0].send_signal(signal.SIGSTOP)  # pause the sender for 6 steps (< K: not declared failed)
    time.sleep(6 * STEP_S)
    resumed = time.time()
    procs[0].send_signal(signal.SIGCONT)
    time.sleep(0.5)

    control.stop(cfgs[2].control)
    assert procs[2].wait(timeout=5) == 0
    stopped_at = time.time()
    wait_until(lambda: all(2 in control.dump_state(c.control)["protocol"]["failed"] for c in cfgs[:2]),
               timeout=(FAIL_K + 10) * STEP_S + 5, what="members 0 and 1 to declare the stopped member 2 failed")

    for p in procs[:2]:
        p.send_signal(signal.SIGTERM)
    assert [p.wait(timeout=5) for p in procs[:2]] == [0, 0]

    logs = [events(cfg) for cfg in cfgs]
    assert [log[-1]["event"] for log in logs] == ["node_stopped"] * 3
    assert [log[-1]["reason"] for log in logs] == ["signal SIGTERM", "signal SIGTERM", "control"]

    # After SIGCONT the sender skipped what it missed instead of catching up in a burst.
    sender = logs[0]
    skipped: dict[str, int] = {}  # summed: a busy host can make the node late again after the resume (CI run)
    for e in sender:
        if e["event"] == "steps_skipped" and e["ts"] >= resumed:
            skipped[e["timer"]] = skipped.get(e["timer"], 0) + e["missed"]
    assert skipped.get("step", 0) >= 3 and skipped.get("workload", 0) >= 6, skipped
    burst = [e for e in sender if e["event"] == "data_sent" and resumed <= e["ts"] < resumed + 0.1]
    assert len(burst) <= 3, burst
    seqs = [e["seq"] for e in sender if e["event"] == "data_sent"]
    assert seqs == list(range(1, len(seqs) + 1))

    for log in logs[:2]:
        declared = [e for e in log if e["event"] == "declared_failed"]
        assert [e["member"] for e in declared] == [2]
        assert declared[0]["ts"] - stopped_at < (FAIL_K + 2) * STEP_S + 1.0
    assert not any(e["event"] == "declared_failed" for e in logs[2])


def test_bad_config_exits_2_with_the_reason(tmp_path):
    path = tmp_path / "node.json"
    path.write_text(json.dumps({"name": "x"}))
    result = subprocess.run([sys.executable, "-m", "gossipnode", "--config", str(path)], capture_output=True,
                            text=True, timeout=30)
    assert result.returncode == 2
    assert "node.json" in result.stderr and "Field required" in result.stderr


def test_address_in_use_exits_1(tmp_path):
    sock = bind_loopback(1)[0]
    cfg = make_configs(1, ports=[sock.getsockname()[1]], log_dir=tmp_path)[0]
    path = tmp_path / "node.json"
    path.write_text(cfg.model_dump_json())
    try:
        result = subprocess.run([sys.executable, "-m", "gossipnode", "--config", str(path)], capture_output=True,
                                text=True, timeout=30)
    finally:
        sock.close()
    assert result.returncode == 1 and "cannot start" in result.stderr
