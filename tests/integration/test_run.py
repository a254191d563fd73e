"""`orchestrator run` end to end on Mininet (root): a 20-member GSGC experiment with crashes and a perturbation."""
from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import dpkt
import pytest

from orchestrator.plan import build_plan
from orchestrator.spec import load_experiment

from .helpers import ORCH, REPO, cli, event_lines, lab_namespaces, unique_lab

pytestmark = [pytest.mark.root, pytest.mark.mininet]

EXPERIMENT = """\
name: {name}
topology: {{kind: tree, nodes: 20, degree: 4}}
links: {{rate: 30kbit, delay: 5ms, queue: 64}}
protocol:
  gsgc: {{subgroup: 2, step: 1s, fail_k: 12}}
workload: {{senders: 2, rate_per_s: 0.5, size_bytes: 64}}
schedule:
  - {{at: 20s, action: crash, fraction: 0.25}}
  - {{at: 10s, action: perturb, count: 1, p: 0.2, duration: 20s}}
duration: {duration}
seed: 5
"""


def events(run_dir: Path, node: str) -> list[dict]:
    f = run_dir / "events" / f"{node}.jsonl"
    return event_lines(f) if f.exists() else []


def pcap_packets(f: Path) -> list[tuple[float, bytes]]:
    with open(f, "rb") as fh:
        return [(ts, buf) for ts, buf in dpkt.pcap.Reader(fh)]


@pytest.fixture
def experiment(tmp_path):
    def make(duration="60s"):
        name = unique_lab("r")
        f = tmp_path / f"{name}.yaml"
        f.write_text(EXPERIMENT.format(name=name, duration=duration))
        return name, f
    return make


@pytest.mark.slow
def test_run_20_members_with_crash_and_perturbation(tmp_path, state_dir, experiment):
    name, f = experiment()
    r = cli("run", str(f), "--out", str(tmp_path / "runs"), timeout=400)
    assert r.returncode == 0, r.stderr[-3000:]
    run_dir = Path(r.stdout.strip().splitlines()[-1])
    assert lab_namespaces(name) == []                       # torn down (no --keep)
    plan = build_plan(load_experiment(f))
    members = [m.name for m in plan.members]
    assert len(members) == 20
    for fname in ("manifest.json", "fidelity.json", "plan.json", "orchestrator.log", "events/orchestrator.jsonl"):
        assert (run_dir / fname).exists(), fname
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["seed"] == 5
    assert len(json.loads((run_dir / "fidelity.json").read_text())["paths"]) >= 2
    assert {p.stem for p in (run_dir / "tc").glob("*.json")} == {n.name for n in plan.nodes} | {"delayline"}

    applied = [json.loads(x) for x in (run_dir / "events" / "orchestrator.jsonl").read_text().splitlines()]
    crash = next(e for e in applied if e.get("op") == "crash")
    crashed = crash["targets"]
    # the lag bound is what a loaded machine still meets (real time here: a machine running a 64-member lab and two
    # busy loops beside this test delayed the kill of five members past 1 s once); the timer-lag judge says more
    assert len(crashed) == 5 and crash["lag_ms"] < 5000
    survivors = [m for m in members if m not in crashed]
    ids = {m: i for i, m in enumerate(members)}
    t0 = next(e["ts"] for e in applied if e["event"] == "run_started")
    crash_ts = t0 + crash["actual_s"]

    for m in members:
        pcap = run_dir / "pcaps" / f"{m}-any.pcap"
        pkts = pcap_packets(pcap)                           # dpkt reads it ...
        assert pkts, f"{m}: empty capture"
        t = subprocess.run(["tshark", "-r", str(pcap), "-q", "-z", "io,stat,0"], capture_output=True, text=True)
        assert t.returncode == 0, t.stderr                  # ... and so does tshark
        if m in crashed:
            # A crashed member sends nothing after its crash (1 s of slack for packets already queued).
            me = plan.node(m).address
            late = [ts for ts, buf in pkts if ts > crash_ts + 1.0 and _src(buf) == me]
            assert not late, f"{m} sent {len(late)} packets after its crash"
        assert events(run_dir, m), f"{m}: no event log"

    for s in survivors:
        ev = events(run_dir, s)
        declared = {e["member"] for e in ev if e["event"] == "declared_failed"}
        assert {ids[c] for c in crashed} <= declared, f"{s} did not declare all crashed members failed"
        assert not declared - {ids[c] for c in crashed}, f"{s} declared a live member failed"
        after = [e for e in ev if e["event"] == "round_completed" and e["ts"] > crash_ts + 10]
        assert after, f"{s}: no round completed after the crash"


def _src(buf: bytes) -> str | None:
    """Source IPv4 address of a Linux cooked (tcpdump -i any) frame."""
    import socket

    sll = dpkt.sll.SLL(buf)
    ip = sll.data
    return socket.inet_ntoa(ip.src) if isinstance(ip, dpkt.ip.IP) else None


def test_bad_schedule_rejected_before_anything_is_built(tmp_path, state_dir):
    name = unique_lab("b")
    f = tmp_path / "bad.yaml"
    f.write_text(f"name: {name}\ntopology: {{kind: tree, nodes: 5, degree: 4}}\nprotocol: {{gsgc: {{subgroup: 1, "
                 f"step: 1s}}}}\nschedule:\n  - {{at: 99s, action: crash, nodes: [h1]}}\nduration: 10s\n")
    r = cli("run", str(f), "--out", str(tmp_path / "runs"))
    assert r.returncode == 2 and "beyond the duration" in r.stderr
    assert lab_namespaces(name) == [] and not (tmp_path / "runs").exists()


def test_ctrl_c_keeps_what_was_collected_and_tears_down(tmp_path, state_dir, experiment):
    name, f = experiment("60s")
    p = subprocess.Popen([*ORCH, "run", str(f), "--out", str(tmp_path / "runs"), "--shaper", "tbf"], cwd=REPO,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        runs = list((tmp_path / "runs").glob("*/events/h0.jsonl"))
        if runs and runs[0].stat().st_size > 0:
            break
        time.sleep(0.2)
    time.sleep(3)
    p.send_signal(signal.SIGINT)
    out, errs = p.communicate(timeout=120)
    assert p.returncode != 0
    run_dir = next((tmp_path / "runs").iterdir())
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"].startswith("interrupted")
    for pcap in (run_dir / "pcaps").glob("*.pcap"):
        pcap_packets(pcap)                                  # complete files: dpkt reads them to the end
    assert lab_namespaces(name) == []
    # no capture of this run is left (other labs on a shared machine may be capturing meanwhile)
    assert not subprocess.run(["pgrep", "-f", f"tcpdump .*{run_dir}/pcaps/"], capture_output=True).stdout
