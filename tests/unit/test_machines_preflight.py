"""`up --machines`: the checks made before anything is built, and the commands sent to each machine
(orchestrator.machines; pure). The SSH side is tested in tests/integration/test_machines.py."""
from __future__ import annotations

import json
import shlex
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from orchestrator import machines as mach
from orchestrator.cli import app
from orchestrator.errors import SpecError
from orchestrator.hosts.hostsfile import Host
from orchestrator.hosts.inventory import load as load_hosts
from orchestrator.machinecheck import code_digest
from orchestrator.state import LabState


def host(name: str, ssh: str = "192.0.2.1", port: int = 22, user: str = "root", **kw) -> Host:
    return Host(name=name, ssh_host=ssh, ssh_port=port, user=user, key="/k", address=ssh, interface=None,
                workdir="/var/lib/gossip-testbed", python="/usr/bin/python3", member="", **kw)


def good_report(**kw) -> str:
    r = {"digest": "d1", "uid": 0, "kernel": "6.1", "features": dict.fromkeys(mach.FEATURES, True), "errors": {},
         "shaper": "delayline"}
    return json.dumps({**r, **kw})


def test_the_inventory_itself_duplicates_and_too_many_machines():
    hs = [host("a", "192.0.2.1"), host("b", "192.0.2.2"), host("c", "192.0.2.1"), host("d", "192.0.2.1", 2222)]
    assert mach.inventory_problems(hs, 13) == {"c": "the same machine as a (192.0.2.1:22): a duplicate host"}
    p = mach.inventory_problems(hs[:2] + hs[3:], 2)          # 3 machines, 2 nodes: the third cannot be used
    assert list(p) == ["d"] and "more machines (3) than the tree can use: it has 2 node(s)" in p["d"]
    assert mach.inventory_problems(hs[:2], 2) == {}


@pytest.mark.parametrize("rc,out,err,why", [
    (1, "", "sudo: a password is required\n", "no root: user gossip is not root and `sudo -n` refuses"),
    (127, "", "env: '/opt/x/python': No such file or directory\n", "no orchestrator at /opt/x/python"),
    (0, good_report(uid=1000), "", "no root: the orchestrator runs as uid 1000"),
    (0, good_report(digest="other"), "", "its orchestrator is another version (code digest other, the "
                                          "controller's d1)"),
    (0, good_report(features={"netns": True, "veth": True, "vxlan": False},
                    errors={"vxlan": "Error: Unknown device type."}), "",
     "missing kernel feature(s) vxlan (vxlan: Error: Unknown device type.)"),
    (0, good_report(shaper_error="this kernel lacks sch_netem"), "", "cannot shape with netem: this kernel lacks"),
    (0, "no json here", "", "machine-check gave no report"),
    (3, "", "Traceback ...\nBoom\n", "machine-check failed (exit 3)"),
])
def test_each_machines_answer_becomes_its_reason(rc, out, err, why):
    h = host("m2", user="gossip", orchestrator="/opt/x/python")
    problem, _ = mach.check_verdict(h, rc, out, err, digest="d1", shaper="netem")
    assert problem is not None and problem.startswith(why), problem


def test_a_good_answer_passes():
    problem, report = mach.check_verdict(host("m1"), 0, "progress\n" + good_report(), "", digest="d1",
                                         shaper="auto")
    assert problem is None and report["shaper"] == "delayline"


def test_remote_commands_are_argument_lists_run_as_root():
    root = host("m1", orchestrator="/srv/gt/.venv/bin/python", state_dir="/srv/gt/state")
    argv = mach.remote_argv(root, ["up", "/x/exp.yaml", "--name", "lab; rm -rf /"], "/ctl/python")
    assert argv[:1] == ["env"] and "ORCHESTRATOR_STATE_DIR=/srv/gt/state" in argv
    assert argv[argv.index("/srv/gt/.venv/bin/python"):][:3] == ["/srv/gt/.venv/bin/python", "-m",
                                                                  "orchestrator.cli"]
    assert shlex.split(shlex.join(argv))[-1] == "lab; rm -rf /"         # quoted as one word on the far side
    plain = host("m2", user="gossip")
    argv = mach.remote_argv(plain, ["teardown", "lab"], "/ctl/python")
    assert argv[:3] == ["sudo", "-n", "--"] and "/ctl/python" in argv    # default: the controller's path
    assert not any(a.startswith("ORCHESTRATOR_STATE_DIR") for a in argv)
    assert mach.put_argv(plain, "/w/lab", "part.json")[:3] == ["sudo", "-n", "--"]
    assert mach.remove_argv(root, "/w/lab") == ["rm", "-rf", "--", "/w/lab"]


def test_a_probes_command_in_a_node_runs_through_the_light_nodeexec(tmp_path, monkeypatch, capsys):
    """The machines backend's `popen` starts `python -m orchestrator.nodeexec LAB NODE ARGV` on the node's machine:
    it finds the node's namespace from the machine's own lab state and becomes `ip netns exec NS ARGV`."""
    from orchestrator import nodeexec

    monkeypatch.setenv("ORCHESTRATOR_STATE_DIR", str(tmp_path))
    LabState(lab="lab1", backend="mininet", shaper="tc", namespaces=["lab1-h0", "lab1-s0"]).save()
    assert nodeexec.node_argv("lab1", "h0", ["ping", "-c", "1", "10.0.0.2"]) == \
        ["ip", "netns", "exec", "lab1-h0", "ping", "-c", "1", "10.0.0.2"]
    ran = []
    monkeypatch.setattr(nodeexec.os, "execvp", lambda f, argv: ran.append((f, argv)))
    nodeexec.main(["lab1", "s0", "sh", "-c", "echo; rm -rf /"])
    assert ran == [("ip", ["ip", "netns", "exec", "lab1-s0", "sh", "-c", "echo; rm -rf /"])]
    for args, said in ((["lab1", "h9", "true"], "node 'h9' of lab 'lab1' is not on this machine"),
                       (["lab2", "h0", "true"], "no lab named 'lab2'"), (["lab1", "h0"], "usage:")):
        assert nodeexec.main(args) == 2 and said in capsys.readouterr().err
    assert len(ran) == 1
    # the module is light: the CLI's imports are not among its own
    mods = subprocess.run([sys.executable, "-c", "import sys, orchestrator.nodeexec; print(' '.join(sys.modules))"],
                          capture_output=True, text=True, check=True).stdout.split()
    assert "orchestrator.nodeexec" in mods and not {"typer", "rich", "pydantic", "orchestrator.cli"} & set(mods)


def test_the_code_digest_follows_the_sources(tmp_path):
    (tmp_path / "orchestrator").mkdir()
    f = tmp_path / "orchestrator" / "a.py"
    f.write_text("x = 1\n")
    d1 = code_digest((tmp_path / "orchestrator",))
    assert d1 == code_digest((tmp_path / "orchestrator",))
    f.write_text("x = 2\n")
    assert code_digest((tmp_path / "orchestrator",)) != d1
    assert len(code_digest()) == 16


def test_the_inventory_names_each_machines_orchestrator_and_state_dir(tmp_path):
    key = tmp_path / "k"
    key.write_text("x")
    inv = tmp_path / "inv.ini"
    inv.write_text(f"[testbed]\nm1 ansible_host=192.0.2.1 testbed_orchestrator=/srv/gt/.venv/bin/python\n"
                   f"m2 ansible_host=192.0.2.2 testbed_state_dir=/srv/state\n"
                   f"[testbed:vars]\nansible_user=root\nansible_ssh_private_key_file={key}\n")
    hs = load_hosts(inv)
    assert [(h.orchestrator, h.state_dir) for h in hs] == [("/srv/gt/.venv/bin/python", ""), ("", "/srv/state")]
    inv.write_text(inv.read_text().replace("/srv/state", "relative/state"))
    with pytest.raises(Exception, match="state_dir 'relative/state' must be an absolute path"):
        load_hosts(inv)


def test_up_machines_refuses_other_backends_before_anything(tmp_path):
    exp = tmp_path / "e.yaml"
    exp.write_text("name: x\ntopology: {kind: tree, nodes: 4, degree: 2, members: all}\nduration: 1s\n")
    inv = tmp_path / "inv.ini"
    inv.write_text("[testbed]\nm1\n")
    r = CliRunner().invoke(app, ["up", str(exp), "--machines", str(inv), "--backend", "docker"])
    assert isinstance(r.exception, SpecError) and "takes no --backend" in str(r.exception), r.output


# --- a run over several machines: what comes back ----------------------------------------------------------------
def test_only_a_machines_own_files_come_back_and_nothing_outside_the_run_directory():
    nodes = {"h1", "h12", "r0"}
    c = lambda name: mach.collected_name(name, nodes, "m2")  # noqa: E731
    assert c("./events/h1.jsonl") == "events/h1.jsonl"
    assert c("events/h12.jsonl") == "events/h12.jsonl"
    assert c("events/h2.jsonl") is None                      # another machine's member
    assert c("logs/h1.log") == "logs/h1.log" and c("logs/h1-tcpdump.log") == "logs/h1-tcpdump.log"
    assert c("pcaps/h12-any.pcap") == "pcaps/h12-any.pcap"
    assert c("pcaps/r0-r0-eth1.pcap") == "pcaps/r0-r0-eth1.pcap"   # an interface name with '-'
    assert c("pcaps/h2-any.pcap") is None and c("pcaps/h1.txt") is None
    assert c("tc/h1.json") == "tc/h1.json" and c("tc/delayline.json") == "tc/delayline-m2.json"
    assert c("orchestrator.log") == "machines/m2-orchestrator.log"
    assert c("logs/pack-0.log") == "logs/m2-pack-0.log" and c("logs/pack-x.log") is None
    for bad in ("../etc/passwd", "events/../../x.jsonl", "/etc/passwd", "events/sub/h1.jsonl", "manifest.json",
                "configs/h1.json", "events/", ""):
        assert c(bad) is None, bad


def test_member_cpu_and_budgets_of_the_machines_add_up():
    a = {"processes": 4, "cpu_s": 2.0, "uptime_s": 10.0, "cores": 0.2, "run_cpu_s": 1.0, "run_wall_s": 8.0,
         "run_cores": 0.125}
    b = {"processes": 6, "cpu_s": 3.0, "uptime_s": 12.0, "cores": 0.25, "run_cpu_s": 2.0, "run_wall_s": 8.1,
         "run_cores": 0.247}
    got = mach.merge_member_cpu([a, None, b])
    assert got == {"processes": 10, "cpu_s": 5.0, "uptime_s": 12.0, "cores": round(5.0 / 12.0, 4), "run_cpu_s": 3.0,
                   "run_wall_s": 8.1, "run_cores": 0.372, "machines": 2}
    assert mach.merge_member_cpu([None, None]) is None
    ba = {"enforced": True, "mechanism": "cgroup v1 CFS bandwidth", "cpu": 0.5, "dilation": 2, "units": {"u1": {}}}
    bb = {**ba, "units": {"u2": {"members": 1}, "pack-0": {"members": 3}}}
    assert mach.merge_budgets({"m1": ba, "m2": bb, "m3": None}) == {
        **ba, "units": {"u1": {}, "u2": {"members": 1}, "m2-pack-0": {"members": 3}}}
    assert mach.merge_budgets({"m1": ba, "m2": {**bb, "enforced": False}})["enforced"] is False
    assert mach.merge_budgets({"m1": None}) is None


def test_the_machines_packing_decisions_make_the_runs():
    proc = {"mode": "process", "members_per_process": 1, "processes": 5, "reason": "packing: process"}
    packed = {"mode": "packed", "members_per_process": 4, "processes": 3, "reason": "packing: 4"}
    got = mach.merge_packing({"m2": packed, "m1": proc})
    assert got == {"mode": "packed", "members_per_process": 4, "processes": 8,
                   "reason": "decided on each machine: m1: packing: process; m2: packing: 4",
                   "machines": {"m1": proc, "m2": packed}}
    assert mach.merge_packing({"m1": proc, "m2": proc})["mode"] == "process" and mach.merge_packing({}) == {}


def test_clock_warnings_flag_coarse_offsets_drift_and_a_missing_end():
    o = lambda off, err: {"offset_s": off, "error_s": err}  # noqa: E731
    start = {"m1": o(0.001, 0.0002), "m2": o(-0.002, 0.009), "m3": o(0.0, 0.0001)}
    end = {"m1": o(0.0075, 0.0002), "m2": o(-0.002, 0.0001)}
    w = mach.clock_warnings(start, end, 0.005)
    assert len(w) == 3
    assert w[0].startswith("clock of m1: drifted +6.500 ms")
    assert w[1].startswith("clock of m2: offset -2.000 ms known only to ±9.000 ms")
    assert w[2] == "clock of m3: not measured at the end of the run (drift unknown)"
    assert mach.clock_warnings({"m1": o(0.1, 0.0001)}, {"m1": o(0.1001, 0.0001)}, 0.005) == []


def test_the_agents_line_protocol_and_its_cleanup_when_the_session_ends():
    import io

    from orchestrator.backends.machineagent import serve

    class Stub:
        closed = False

        def handle(self, req):
            return {"ok": True, "echo": req["op"]}

        def close(self):
            self.closed = True

    for tail, bye in ((b'{"op": "bye"}\n{"op": "never"}\n', True), (b"", False)):   # bye, or stdin closing
        stub, out = Stub(), io.StringIO()
        serve(stub, io.BytesIO(b'{"op": "time"}\nnot json\n\n' + tail), out)
        lines = [json.loads(x) for x in out.getvalue().splitlines()]
        assert lines[0]["ok"] and "t" in lines[0]                         # the hello
        assert lines[1] == {"ok": True, "echo": "time"}
        assert lines[2] == {"ok": False, "error": "not JSON", "kind": "spec"}
        assert len(lines) == 3 and stub.closed, bye


def test_sweep_host_key_options_need_machines(tmp_path):
    exp = tmp_path / "e.yaml"
    exp.write_text("name: x\ntopology: {kind: tree, nodes: 4, degree: 2, members: all}\nduration: 1s\n")
    r = CliRunner().invoke(app, ["sweep", str(exp), "--known-hosts", str(tmp_path / "kh")])
    assert isinstance(r.exception, SpecError) and "need --machines" in str(r.exception), r.output
