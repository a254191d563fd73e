"""Packed members, the orchestrator's side (issue #21), without root: the experiment's `nodes.packing`, the auto
decision, the pack assignment, the backends' refusals, and the packed driver -- against fake pack processes and a
fake control socket (which member gets which request), and against real packed processes on loopback (a crash,
pause, resume and restart reach the one member they name; stop leaves no process)."""
from __future__ import annotations

import json
import socket
import subprocess

import pytest

from orchestrator import packs
from orchestrator import lab as labmod
from orchestrator.backends import fake, packing
from orchestrator.backends.base import RunContext
from orchestrator.backends.local import LocalDriver
from orchestrator.errors import SpecError
from orchestrator.nodeconfig import node_configs, with_netns
from orchestrator.plan import build_plan
from orchestrator.rundir import RunDir
from orchestrator.runner import Runner, decide_packing, make_driver
from orchestrator.schedule import expand, parse_schedule
from orchestrator.spec import parse_experiment
from orchestrator.state import LabState

GB = 2**30
EXP = """
name: pk
topology: {{kind: tree, nodes: 7, degree: 2}}
links: {{rate: 1mbit, delay: 5ms}}
protocol: {{gsgc: {{subgroup: 2, step: 1s}}}}
workload: {{senders: 2, rate_per_s: 5, size_bytes: 64}}
duration: 2s
seed: 4
{nodes}
schedule:
  - {{at: 0.1s, action: crash, nodes: [h3]}}
  - {{at: 0.2s, action: restart, crashed: true}}
  - {{at: 0.3s, action: pause, nodes: [h4], duration: 0.5s}}
  - {{at: 0.4s, action: join, nodes: [h5, h6]}}
  - {{at: 1.5s, action: workload, op: stop}}
"""


def exp_of(nodes: str = "nodes: {packing: 3}"):
    return parse_experiment(EXP.format(nodes=nodes))


# --- the experiment file ----------------------------------------------------------------------------------------

def test_packing_defaults_to_auto_and_takes_process_auto_or_a_count():
    assert exp_of("").nodes.packing == "auto"
    assert exp_of("nodes: {packing: process}").nodes.packing == "process"
    assert exp_of("nodes: {packing: 20}").nodes.packing == 20
    assert exp_of("nodes: {packing: '5'}").nodes.packing == 5


@pytest.mark.parametrize("bad", ["0", "-3", "lots", "true", "2.5", "[1]"])
def test_bad_packing_is_refused_with_a_clear_error(bad):
    with pytest.raises(SpecError, match=r"nodes\.packing.*`process`, `auto` or a number of members per process"):
        exp_of(f"nodes: {{packing: {bad}}}")


def test_nodes_section_refuses_unknown_keys():
    with pytest.raises(SpecError, match="nodes"):
        exp_of("nodes: {packing: 2, pack: 3}")


# --- the decision and the packs (pure) ----------------------------------------------------------------------------

def test_process_and_a_count_are_taken_as_given():
    d = packing.decide("process", 500, 1 * GB, 2)
    assert (d.mode, d.members_per_process, d.processes, d.packed) == ("process", 1, 500, False)
    d = packing.decide(20, 90, 24 * GB, 2)
    assert (d.mode, d.members_per_process, d.processes, d.packed) == ("packed", 20, 5, True)
    d = packing.decide(1000, 90, 24 * GB, 2)            # one pack holds them all
    assert (d.members_per_process, d.processes) == (90, 1)
    d = packing.decide(1, 4, 24 * GB, 2)                 # packed, one member a process: still the packed driver
    assert (d.mode, d.processes) == ("packed", 4)
    assert set(d.manifest()) == {"mode", "members_per_process", "processes", "reason"}


def test_auto_runs_processes_while_they_fit_in_half_the_available_memory():
    # 40 MB a member: 300 members need 12000 MB, half of 24000 MB
    d = packing.decide("auto", 300, 24000 * 2**20, 2)
    assert d.mode == "process" and d.processes == 300 and "fit" in d.reason
    d = packing.decide("auto", 301, 24000 * 2**20, 2)
    assert d.packed and d.members_per_process == 38 and d.processes == 8       # ceil(301 / (4 x 2))
    d = packing.decide("auto", 2000, 24 * GB, 2)
    assert (d.members_per_process, d.processes) == (250, 8)
    d = packing.decide("auto", 2000, 24 * GB, 16)
    assert (d.members_per_process, d.processes) == (32, 63)
    assert packing.decide("auto", 2000, None, 2).mode == "process"   # unknown memory: as today


def test_mem_available_reads_meminfo(tmp_path):
    f = tmp_path / "meminfo"
    f.write_text("MemTotal:       24683520 kB\nMemFree:  1 kB\nMemAvailable:   22752256 kB\n")
    assert packing.mem_available(str(f)) == 22752256 * 1024
    f.write_text("MemTotal: 1 kB\n")
    assert packing.mem_available(str(f)) is None
    assert packing.mem_available(str(tmp_path / "none")) is None


def test_assign_packs_keeps_the_order_and_fills_each_pack():
    members = [f"h{i}" for i in range(7)]
    assert packing.assign_packs(members, 3) == [["h0", "h1", "h2"], ["h3", "h4", "h5"], ["h6"]]
    assert packing.assign_packs(members, 10) == [members]
    assert packing.assign_packs([], 3) == []
    with pytest.raises(ValueError):
        packing.assign_packs(members, 0)


def test_with_netns_gives_each_member_its_namespace():
    configs = {"h1": {"name": "h1"}, "h2": {"name": "h2"}}
    out = with_netns(configs, lambda m: f"lab-{m}")
    assert out == {"h1": {"name": "h1", "netns": "lab-h1"}, "h2": {"name": "h2", "netns": "lab-h2"}}
    assert "netns" not in configs["h1"]                 # pure


# --- who may pack --------------------------------------------------------------------------------------------------

def test_docker_and_hosts_refuse_packs_in_their_run_checks(monkeypatch):
    from orchestrator.backends.docker import DockerBackend
    from orchestrator.backends.hosts import HostsBackend

    exp = exp_of("nodes: {packing: 3}")
    plan = build_plan(exp)
    with pytest.raises(SpecError, match="docker backend .* cannot pack"):
        DockerBackend().check_run(exp, plan, "pk", None)
    with pytest.raises(SpecError, match="hosts backend .* cannot pack"):
        HostsBackend().check_run(exp, plan, "pk", None)
    # auto deciding packs is refused too; auto deciding processes is not
    monkeypatch.setattr(packs, "mem_available", lambda: 100 * 2**20)
    with pytest.raises(SpecError, match="docker backend .* cannot pack.*auto"):
        DockerBackend().check_run(exp_of(""), plan, "pk", None)
    monkeypatch.setattr(packs, "mem_available", lambda: 24 * GB)
    DockerBackend().check_run(exp_of(""), plan, "pk", None)
    DockerBackend().check_run(exp_of("nodes: {packing: process}"), plan, "pk", None)


def test_the_runner_packs_only_where_the_packed_driver_extends_the_backends_driver():
    from orchestrator.backends.mininet import MininetBackend

    exp = exp_of("nodes: {packing: 3}")
    assert decide_packing(MininetBackend(), exp, 7).packed
    with pytest.raises(SpecError, match="fake backend cannot pack"):
        decide_packing(fake.FakeBackend(), exp, 7)
    assert not decide_packing(fake.FakeBackend(), exp_of("nodes: {packing: process}"), 7).packed
    assert issubclass(packing.PackedDriver, LocalDriver)


# --- the driver against fake pack processes and a fake control socket -----------------------------------------

class FakeProc:
    pids = iter(range(1000, 2000))

    def __init__(self, argv):
        self.argv, self.pid, self.returncode, self.signals = argv, next(self.pids), None, []

    def poll(self):
        return self.returncode

    def terminate(self):
        self.signals.append("TERM")
        self.returncode = 0

    def kill(self):
        self.signals.append("KILL")
        self.returncode = -9

    def wait(self, timeout=None):
        return self.returncode


class PackBackend(fake.FakeBackend):
    """The fake backend with a `popen` that records where a pack started (real=True: runs it on this machine)."""

    def __init__(self, real: bool = False):
        super().__init__()
        self.real, self.started = real, []

    def popen(self, state, node, argv, **kw):
        self.started.append((node, argv))
        return subprocess.Popen(argv, **kw) if self.real else FakeProc(argv)


@pytest.fixture(autouse=True)
def state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ORCHESTRATOR_STATE_DIR", str(tmp_path / "state"))


def driver_for(tmp_path, exp, backend, decision):
    plan = build_plan(exp)
    tl = expand(parse_schedule(exp.schedule), plan, exp.duration_s, exp.seed)
    rd = RunDir(tmp_path / "run")
    (tmp_path / "ctl").mkdir(exist_ok=True)
    first = [m.name for m in plan.members if m.name not in tl.joiners]
    ctx = RunContext(exp, plan, LabState(lab="pk", backend="fake", shaper="tbf"), rd, tmp_path / "ctl", first,
                     labmod.NullProgress())
    driver = make_driver(backend, ctx, decision)
    configs = driver.configure(node_configs(exp, plan, rd.path, tmp_path / "ctl"))
    rd.write_configs(configs)
    return driver, tl, rd, configs


def test_packed_driver_sends_each_fault_to_the_member_it_names(tmp_path):
    exp = exp_of("nodes: {packing: 3}")
    backend = PackBackend()
    driver, tl, rd, configs = driver_for(tmp_path, exp, backend, packing.decide(3, 7, None, 2))
    assert isinstance(driver, packing.PackedDriver)
    assert all(c["netns"] == f"pk-{n}" for n, c in configs.items())     # the namespaces' names (state.ns_name)
    requests: list[tuple[str, dict]] = []
    driver._request = lambda name, req, timeout=5.0: requests.append((name, req)) or {"ok": True}

    first = driver.ctx.first
    assert first == ["h0", "h1", "h2", "h3", "h4"] and set(tl.joiners) == {"h5", "h6"}
    driver.start_nodes(first)
    # two packs, each started in its first member's namespace from a listing of its members' configs
    assert [node for node, _ in backend.started] == ["h0", "h3"]
    listing = rd.path / "packs" / "pack-0.txt"
    assert backend.started[0][1][-2:] == ["--manifest", str(listing)]
    assert [json.loads(open(p.strip()).read())["name"] for p in listing.read_text().splitlines()] == ["h0", "h1",
                                                                                                         "h2"]
    assert driver.alive() == 5
    driver.await_ready(first, timeout_s=5)
    assert [n for n, r in requests] == first and all(r == {"cmd": "state"} for _, r in requests)

    clock_t = [100.0]
    runner = Runner(tl, driver, rd, clock=lambda: clock_t[0],
                    sleep=lambda s: clock_t.__setitem__(0, clock_t[0] + max(s, 0.01)))
    requests.clear()
    runner.execute(clock_t[0], 2.0)
    faults = [(n, r["cmd"]) for n, r in requests if r["cmd"] != "workload"]
    assert faults == [("h3", "crash"), ("h3", "restart"), ("h4", "pause"), ("h4", "resume")]
    # the joiners, never started, form a new pack started in h5's namespace; the packs are the driver's processes
    assert [node for node, _ in backend.started] == ["h0", "h3", "h5"]
    assert driver.pack_of["h6"] is driver.pack_of["h5"] and driver.alive() == 7
    senders = sorted(n for n, c in configs.items() if c["id"] in c["senders"])
    assert sorted(n for n, r in requests if r["cmd"] == "workload") == senders
    crash = next(a for a in runner.applied if a["op"] == "crash")
    assert set(crash["rtt_ms"]) == {"h3"} and crash["pids"]["h3"] == driver.pack_of["h3"].proc.pid

    # a crash of a crashed member, a resume of a running one: nothing to send (as a signal to a gone process)
    requests.clear()
    driver.crash(["h1"])
    assert driver.crash(["h1"]) == {} and driver.resume(["h2"]) == {}
    assert requests == [("h1", {"cmd": "crash"})] and driver.alive() == 6

    report = driver.stop()
    assert all(p.proc.signals == ["TERM"] for p in driver.packs)
    assert report.manifest["packing"]["processes"] == 3 and report.manifest["packing"]["mode"] == "packed"
    assert driver.alive() == 0


def test_a_crash_of_many_members_sends_every_request_before_any_reply_comes(tmp_path):
    # a massive failure is at once: one member at a time, 400 members of busy packs took 33-55 s; here every
    # reply waits until all 6 requests have arrived (a barrier), which one-at-a-time requests would never pass
    import threading

    exp = exp_of("nodes: {packing: 3}")
    driver, tl, rd, configs = driver_for(tmp_path, exp, PackBackend(), packing.decide(3, 7, None, 2))
    driver._request = lambda name, req, timeout=5.0: {"ok": True}
    driver.start_nodes(driver.ctx.first)
    names = driver.ctx.first + ["h5"]
    driver.start_nodes(["h5"])
    alive = driver.alive()
    barrier = threading.Barrier(len(names), timeout=10)
    driver._request = lambda name, req, timeout=5.0: barrier.wait() is not None and {"ok": True}
    replies = driver.crash(names)
    assert sorted(replies) == sorted(names) and all(r["ok"] for r in replies.values())
    assert driver.alive() == alive - len(names) and not barrier.broken
    assert driver.crash(names) == {}                        # crashed already: nothing sent


def test_a_member_whose_pack_is_gone_restarts_in_a_new_pack(tmp_path):
    exp = exp_of("nodes: {packing: 3}")
    backend = PackBackend()
    driver, *_ = driver_for(tmp_path, exp, backend, packing.decide(3, 7, None, 2))
    driver._request = lambda name, req, timeout=5.0: {"ok": True}
    driver.start_nodes(["h0", "h1", "h2"])
    driver.crash(["h1"])
    driver.pack_of["h1"].proc.returncode = 1              # the pack's process died
    driver.start_nodes(["h1"])
    assert [n for n, _ in backend.started] == ["h0", "h1"] and driver.pack_of["h1"].index == 1


def test_process_mode_keeps_the_backends_driver(tmp_path):
    exp = exp_of("nodes: {packing: process}")
    driver, *_ = driver_for(tmp_path, exp, fake.FakeBackend(), packing.decide("process", 7, None, 2))
    assert isinstance(driver, fake.FakeDriver)
    driver.start_nodes(["h1"])
    driver.crash(["h1"])
    driver.start_nodes(["h1"])
    driver.pause(["h1"])
    driver.resume(["h1"])
    calls = [c for c in driver.calls if c[0] == "signal"]
    assert calls == [("signal", ("h1",), "SIGKILL"), ("signal", ("h1",), "SIGSTOP"), ("signal", ("h1",), "SIGCONT")]


# --- the driver against real packed processes on loopback (no namespace, no root) ------------------------------

def free_ports(n: int) -> list[int]:
    socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def state_of(driver, name):
    from gossipnode import control

    try:
        return control.dump_state(driver.configs[name]["control"], timeout=5)
    except control.ControlError as exc:
        return {"error": str(exc)}


def test_real_packs_crash_pause_resume_restart_one_member_and_stop_leaves_no_process(tmp_path):
    exp = exp_of("nodes: {packing: 3}")
    backend = PackBackend(real=True)
    driver, tl, rd, configs = driver_for(tmp_path, exp, backend, packing.decide(3, 7, None, 2))
    ports = dict(zip(configs, free_ports(len(configs))))
    for name, cfg in configs.items():       # loopback instead of the lab's addresses and namespaces
        cfg.pop("netns")
        cfg["listen"] = f"127.0.0.1:{ports[name]}"
        cfg["members"] = [{**m, "addr": f"127.0.0.1:{ports[m['name']]}"} for m in cfg["members"]]
    rd.write_configs(configs)
    first = driver.ctx.first
    try:
        driver.start_nodes(first)
        driver.await_ready(first, timeout_s=60)
        procs = {p.proc.pid for p in driver.packs}
        assert len(procs) == 2 and driver.alive() == 5
        assert all(state_of(driver, n)["node"] == n for n in first)

        r = driver.crash(["h1"])
        assert r["h1"]["ok"] and r["h1"]["pid"] == driver.pack_of["h1"].proc.pid
        assert "crashed" in state_of(driver, "h1")["error"]
        assert state_of(driver, "h0")["node"] == "h0"           # its process-mates run on
        assert driver.pause(["h4"])["h4"]["ok"] and state_of(driver, "h4")["paused"]
        assert not state_of(driver, "h3")["paused"]
        assert driver.resume(["h4"])["h4"]["ok"] and not state_of(driver, "h4")["paused"]
        r = driver.start_nodes(["h1"])                           # a START of a member that ran: restart
        assert r["h1"]["ok"] and r["h1"]["incarnation"] == 2
        assert state_of(driver, "h1")["incarnation"] == 2 and driver.alive() == 5
        assert len(backend.started) == 2                          # no new process for a restart
    finally:
        driver.stop()
    assert all(p.proc.poll() is not None for p in driver.packs)
    for name in first:
        ev = [json.loads(x) for x in (rd.path / "events" / f"{name}.jsonl").read_text().splitlines()]
        assert ev[0]["event"] == "node_started" and ev[-1]["event"] == "node_stopped", name
    assert (rd.path / "logs" / "pack-0.log").exists()
