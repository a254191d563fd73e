"""The Docker backend (root + a running Docker engine): the same experiment on Docker and on Mininet gives the same
protocol behaviour; nothing of a lab (container, namespace, veth, process, shared directory) survives teardown,
Ctrl-C during `up`, or a SIGKILLed `run` followed by `teardown --all`; a missing engine is one clear error."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from orchestrator.backends import docker as dk
from orchestrator.plan import build_plan
from orchestrator.spec import load_experiment

from .helpers import ORCH, REPO, cli, event_lines, lab_namespaces, runs_together, unique_lab

pytestmark = [pytest.mark.root, pytest.mark.docker]

EXPERIMENT = """\
name: {name}
topology: {{kind: tree, nodes: {nodes}, degree: 4}}
links: {{rate: 30kbit, delay: 5ms, queue: 64}}
protocol:
  gsgc: {{subgroup: 2, step: 1s, fail_k: 12}}
workload: {{senders: 2, rate_per_s: 0.5, size_bytes: 64}}
schedule:
  - {{at: 15s, action: crash, count: 2, mode: silent}}
  - {{at: 6s, action: perturb, count: 1, p: 0.2, duration: 8s}}
duration: {duration}
seed: 4
"""


@pytest.fixture(scope="session")
def node_image():
    """The node image, built (base cached) when this machine has none, or one of other gossipnode sources."""
    from orchestrator import images

    c = dk.client()
    try:
        current = (c.images.get(dk.node_image()).labels or {}).get(dk.LABEL_SOURCE) == dk.source_digest()
    except Exception:  # noqa: BLE001 - ImageNotFound
        current = False
    if not current:
        images.build_all(node_tag=dk.node_image())
    return dk.node_image()


def write_experiment(tmp_path: Path, prefix: str, nodes: int = 10, duration: str = "40s") -> tuple[str, Path]:
    name = unique_lab(prefix)
    f = tmp_path / f"{name}.yaml"
    f.write_text(EXPERIMENT.format(name=name, nodes=nodes, duration=duration))
    return name, f


def root_veths() -> set[str]:
    out = subprocess.run(["ip", "-o", "link", "show", "type", "veth"], capture_output=True, text=True).stdout
    return {line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line}


def lab_veths_in_root(f: Path) -> set[str]:
    """Veths with the lab's interface names left in the root namespace (other labs on the machine do not count)."""
    plan = build_plan(load_experiment(f))
    return root_veths() & {name for lk in plan.links for name in (lk.parent_if, lk.child_if)}


def leftovers(lab: str) -> dict:
    """Everything of `lab` that still exists; empty lists when the lab is completely gone."""
    c = dk.client()
    pids = subprocess.run(["pgrep", "-f", f"orch-docker-{lab}/|/{lab}/delayline.json"], capture_output=True,
                          text=True).stdout.split()
    return {
        "containers": [x.name for x in dk.lab_containers(c, lab)],
        "namespaces": lab_namespaces(lab),
        "share": [str(dk.share_root(lab))] if dk.share_root(lab).exists() else [],
        "processes": pids,
    }


NOTHING = {"containers": [], "namespaces": [], "share": [], "processes": []}


def events(run_dir: Path, node: str) -> list[dict]:
    f = run_dir / "events" / f"{node}.jsonl"
    return event_lines(f) if f.exists() else []


def behaviour(run_dir: Path, members: list[str]) -> dict:
    """What the protocol did, from the run's own event logs (an independent reading, not the runner's)."""
    applied = [json.loads(x) for x in (run_dir / "events" / "orchestrator.jsonl").read_text().splitlines()]
    t0 = next(e["ts"] for e in applied if e["event"] == "run_started")
    crash = next(e for e in applied if e.get("op") == "crash")
    assert crash["mode"] == "silent" and "errors" not in crash, crash       # cut off in its container's namespace
    crashed = sorted(crash["targets"])
    crash_ts = t0 + crash["actual_s"]
    ids = {m: i for i, m in enumerate(members)}
    out = {"crashed": crashed, "declared": {}, "rounds_after_crash": {}, "rounds": {}, "false": {}}
    for m in members:
        if m in crashed:
            continue
        ev = events(run_dir, m)
        declared = {e["member"] for e in ev if e["event"] == "declared_failed"}
        out["declared"][m] = sorted(declared)
        out["false"][m] = sorted(declared - {ids[c] for c in crashed})
        out["rounds"][m] = sum(1 for e in ev if e["event"] == "round_completed")
        out["rounds_after_crash"][m] = sum(1 for e in ev if e["event"] == "round_completed" and e["ts"] > crash_ts)
    out["crashed_ids"] = sorted(ids[c] for c in crashed)
    return out


@pytest.mark.mininet
@pytest.mark.slow
def test_same_experiment_same_behaviour_on_docker_and_mininet(tmp_path, state_dir, node_image):
    def one(backend: str, out: Path) -> dict:
        name, f = write_experiment(out, backend[0])
        t = time.monotonic()
        try:
            r = cli("run", str(f), "--backend", backend, "--out", str(out / "runs"), timeout=300)
        finally:
            if leftovers(name) != NOTHING:             # a failed or timed-out run: leave nothing behind
                cli("teardown", name)
        assert r.returncode == 0, r.stderr[-3000:]
        run_dir = Path(r.stdout.strip().splitlines()[-1])
        manifest = json.loads((run_dir / "manifest.json").read_text())
        assert manifest["status"] == "completed" and manifest["backend"] == backend
        assert leftovers(name) == NOTHING, backend
        assert not lab_veths_in_root(f), f"{backend}: veths left in the root namespace"
        members = [m.name for m in build_plan(load_experiment(f)).members]
        assert len(members) == 10
        crashed = set(next(e for e in map(json.loads, (run_dir / "events" / "orchestrator.jsonl").read_text()
                                          .splitlines()) if e.get("op") == "crash")["targets"])
        for m in members:
            # (a member crashed before its node finished starting has no event log: the runner's t0 does not
            # wait for the nodes, and on a loaded machine Python takes seconds to start)
            assert events(run_dir, m) or m in crashed, f"{backend}: {m} has no event log in the run directory"
            assert (run_dir / "pcaps" / f"{m}-any.pcap").stat().st_size > 24, f"{backend}: {m} empty capture"
            assert (run_dir / "logs" / f"{m}.log").exists()
        return {**behaviour(run_dir, members), "seconds": time.monotonic() - t}

    # both runs at once: the same machine load for both (and half the wall time)
    futures = runs_together({backend: (one, backend) for backend in ("docker", "mininet")}, tmp_path)
    results = {backend: fut.result() for backend, fut in futures.items()}
    for backend, b in results.items():
        assert len(b["crashed"]) == 2
        for m, declared in b["declared"].items():
            assert declared == b["crashed_ids"], f"{backend}: {m} declared {declared}, crashed {b['crashed_ids']}"
            assert b["rounds_after_crash"][m] >= 1, f"{backend}: {m} completed no round after the crash"
            assert b["rounds"][m] >= 4, f"{backend}: {m} completed only {b['rounds'][m]} rounds"
    d, m = results["docker"], results["mininet"]
    assert d["crashed"] == m["crashed"]                       # same seed, same targets, on either backend
    # Same protocol behaviour: rounds per member within a factor of 2 of each other (medians; the two labs share
    # the machine, each its own members' timers).
    med = {k: sorted(v["rounds"].values())[len(v["rounds"]) // 2] for k, v in results.items()}
    assert 1 / 2 <= med["docker"] / med["mininet"] <= 2, med


def test_up_exec_status_teardown(tmp_path, state_dir, node_image):
    # A sparse tree: routers are plain namespaces, members containers.
    name = unique_lab("d")
    f = tmp_path / f"{name}.yaml"
    f.write_text(f"name: {name}\ntopology: {{kind: tree, nodes: 9, degree: 3, members: {{count: 5, seed: 2}}}}\n"
                 "links: {delay: 2ms}\nprotocol: {gsgc: {subgroup: 1, step: 1s}}\nduration: 10s\n")
    plan = build_plan(load_experiment(f))
    r = cli("up", str(f), "--backend", "docker")
    assert r.returncode == 0, r.stderr[-2000:]
    try:
        c = dk.client()
        got = {x.labels[dk.LABEL_NODE]: x for x in dk.lab_containers(c, name)}
        assert set(got) == {m.name for m in plan.members}
        for x in got.values():
            assert x.attrs["HostConfig"]["NetworkMode"] == "none"
        assert sorted(lab_namespaces(name)) == sorted(f"{name}-{n.name}" for n in plan.nodes)
        # The container's network namespace IS the named one the wiring went into.
        m = plan.members[0].name
        pid = got[m].attrs["State"]["Pid"]
        assert os.stat(f"/proc/{pid}/ns/net").st_ino == os.stat(f"/run/netns/{name}-{m}").st_ino
        # exec runs inside the container (its hostname is the node) and reaches the farthest member by name.
        members = [n.name for n in plan.members]
        r = cli("exec", name, members[0], "--", "ping", "-c", "2", "-W", "3", members[-1])
        assert r.returncode == 0 and "2 received" in r.stdout, r.stdout + r.stderr
        r = cli("exec", name, members[0], "--", "hostname")
        assert r.stdout.strip() == members[0]
        r = cli("exec", name, members[0], "--", "sh", "-c", "exit 7")
        assert r.returncode == 7
        router = next(n.name for n in plan.nodes if n.role == "router")
        r = cli("exec", name, router, "--", "ip", "-br", "addr")
        assert r.returncode == 0 and plan.node(router).address in r.stdout
        r = cli("status", name, "--json")
        s = json.loads(r.stdout)
        assert s["backend"] == "docker" and s["health"] == []
        # The same lab name under another state directory is refused, and the failed `up` leaves this lab alone.
        r = cli("up", str(f), "--backend", "docker", env_extra={"ORCHESTRATOR_STATE_DIR": str(tmp_path / "other")})
        assert r.returncode == 1 and "already exists" in r.stderr, r.stderr
        assert len(dk.lab_containers(c, name)) == len(plan.members) and len(lab_namespaces(name)) == len(plan.nodes)
        assert json.loads(cli("status", name, "--json").stdout)["health"] == []
        # A container that died is reported.
        got[members[1]].kill()
        s = json.loads(cli("status", name, "--json").stdout)
        assert any("containers are not running" in h for h in s["health"]), s["health"]
    finally:
        r = cli("teardown", name)
    assert r.returncode == 0, r.stderr
    assert leftovers(name) == NOTHING
    assert not lab_veths_in_root(f)
    assert cli("teardown", name).returncode == 2          # it is gone: nothing to tear down


@contextmanager
def cleaned_up(name: str, proc: subprocess.Popen):
    """Whatever happens in the test: the orchestrator process is gone and the lab is torn down afterwards."""
    try:
        yield
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
        if leftovers(name) != NOTHING:
            cli("teardown", name)


def test_ctrl_c_during_up_removes_everything(tmp_path, state_dir, node_image):
    name, f = write_experiment(tmp_path, "i", nodes=40)
    p = subprocess.Popen([*ORCH, "up", str(f), "--backend", "docker"], cwd=REPO, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    with cleaned_up(name, p):
        c = dk.client()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:       # interrupt half-way through creating the containers
            if len(dk.lab_containers(c, name)) >= 8:
                break
            time.sleep(0.05)
        else:
            pytest.fail("containers did not appear")
        p.send_signal(signal.SIGINT)
        out, errs = p.communicate(timeout=120)
        assert p.returncode != 0
        assert leftovers(name) == NOTHING, errs[-2000:]
        assert not (state_dir / name).exists()


def test_killed_run_then_teardown_all_removes_everything(tmp_path, state_dir, node_image):
    name, f = write_experiment(tmp_path, "k", nodes=10, duration="60s")
    p = subprocess.Popen([*ORCH, "run", str(f), "--backend", "docker", "--out", str(tmp_path / "runs")],
                         cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with cleaned_up(name, p):
        events_file = dk.node_paths(name, "h0")["events"]
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (events_file.exists() and events_file.stat().st_size > 0):
            time.sleep(0.2)
        assert events_file.exists(), "the nodes did not start"
        p.kill()                                   # no cleanup at all: nodes, captures, delay line keep running
        p.communicate(timeout=30)
        assert leftovers(name)["containers"], "nothing to clean up: the test proves nothing"
        r = cli("teardown", "--all")
        assert r.returncode == 0, r.stderr
        assert name in r.stderr
        assert leftovers(name) == NOTHING
        assert not lab_veths_in_root(f)
        # tcpdump processes were in the lab's namespaces: gone with them.
        tcpdumps = subprocess.run(["pgrep", "-a", "-x", "tcpdump"], capture_output=True, text=True).stdout
        assert str(tmp_path) not in tcpdumps
    # The runner's control-socket directory of the killed run (empty on Docker; the runner removes it only when
    # it ends itself): not part of the lab, removed here so the test leaves nothing behind.
    for d in Path("/tmp").glob(f"orch-ctl-{name}-*"):
        shutil.rmtree(d, ignore_errors=True)


def test_image_of_other_node_sources_is_refused(tmp_path, state_dir, node_image):
    import io

    c = dk.client()
    tag = f"gossip-testbed/stale-test:{unique_lab()}"
    c.images.build(fileobj=io.BytesIO(f"FROM {node_image}\nLABEL {dk.LABEL_SOURCE}=0000\n".encode()), tag=tag,
                   rm=True)
    try:
        name = unique_lab("s")
        f = tmp_path / f"{name}.yaml"
        f.write_text(f"name: {name}\ntopology: {{kind: tree, nodes: 3, degree: 2}}\n")
        r = cli("up", str(f), "--backend", "docker", env_extra={"ORCHESTRATOR_NODE_IMAGE": tag})
        assert r.returncode == 1 and "built from other gossipnode sources" in r.stderr, r.stderr
        assert "orchestrator image build" in r.stderr
        assert leftovers(name) == NOTHING and not (state_dir / name).exists()
    finally:
        c.images.remove(tag, force=True)


def test_missing_engine_is_one_clear_error_and_nothing_is_built(tmp_path, state_dir):
    name = unique_lab("m")
    f = tmp_path / f"{name}.yaml"
    f.write_text(f"name: {name}\ntopology: {{kind: tree, nodes: 4, degree: 2}}\n")
    r = cli("up", str(f), "--backend", "docker", env_extra={"DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"})
    assert r.returncode == 1
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Docker engine is not running" in errors[0], r.stderr
    assert "systemctl start docker" in r.stderr and "dockerd" in r.stderr
    assert "Traceback" not in r.stderr
    assert lab_namespaces(name) == [] and not (state_dir / name).exists()


def test_teardown_finds_docker_labs_whose_state_is_gone(tmp_path, state_dir):
    """containerlab's `destroy --all`: a Docker lab outlives the state that lists it (a reboot used to lose
    /run/orchestrator while the containers stayed); `teardown --all` and `teardown LAB` find it by label, and
    only labs of this state directory (another directory's lab is left alone)."""
    import io

    import docker

    c = docker.from_env()
    image, _ = c.images.build(fileobj=io.BytesIO(b'FROM scratch\nLABEL gossip-testbed.test=1\nCMD ["/x"]\n'),
                              tag="gossip-testbed/test-scratch:latest", rm=True)
    a, b, other = unique_lab("oa"), unique_lab("ob"), unique_lab("oo")

    def make(lab: str, node: str, state: Path):
        labels = {dk.LABEL_APP: "gossip-testbed", dk.LABEL_LAB: lab, dk.LABEL_NODE: node,
                  dk.LABEL_STATE: str(state)}
        return c.containers.create(image.id, name=dk.container_name(lab, node), labels=labels,
                                   network_mode="none")

    made = [make(a, "h1", state_dir), make(a, "h2", state_dir), make(b, "h1", state_dir),
            make(other, "h1", tmp_path / "elsewhere")]
    dk.share_root(a).mkdir(parents=True, exist_ok=True)
    try:
        r = cli("teardown", "--all", env_extra={"ORCHESTRATOR_STATE_DIR": str(state_dir)})
        assert r.returncode == 0, r.stderr
        assert a in r.stderr and b in r.stderr and other not in r.stderr, r.stderr
        assert dk.lab_containers(c, a) == [] and dk.lab_containers(c, b) == []
        assert not dk.share_root(a).exists()
        assert [x.name for x in dk.lab_containers(c, other)] == [dk.container_name(other, "h1")]
        r = cli("teardown", other, env_extra={"ORCHESTRATOR_STATE_DIR": str(state_dir)})
        assert r.returncode == 2 and "no lab named" in r.stderr                  # not this directory's lab
        r = cli("teardown", other, env_extra={"ORCHESTRATOR_STATE_DIR": str(tmp_path / "elsewhere")})
        assert r.returncode == 0, r.stderr
        assert dk.lab_containers(c, other) == []
    finally:
        for x in made:
            try:
                x.remove(force=True)
            except docker.errors.NotFound:
                pass
        shutil.rmtree(dk.share_root(a), ignore_errors=True)
