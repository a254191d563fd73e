"""`up --machines`: the checks made before anything is built, and the commands sent to each machine
(orchestrator.machines; pure). The SSH side is tested in tests/integration/test_machines.py."""
from __future__ import annotations

import json
import shlex

import pytest
from typer.testing import CliRunner

from orchestrator import machines as mach
from orchestrator.cli import app
from orchestrator.errors import SpecError
from orchestrator.hosts.hostsfile import Host
from orchestrator.hosts.inventory import load as load_hosts


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


def test_the_code_digest_follows_the_sources(tmp_path):
    (tmp_path / "orchestrator").mkdir()
    f = tmp_path / "orchestrator" / "a.py"
    f.write_text("x = 1\n")
    d1 = mach.code_digest((tmp_path / "orchestrator",))
    assert d1 == mach.code_digest((tmp_path / "orchestrator",))
    f.write_text("x = 2\n")
    assert mach.code_digest((tmp_path / "orchestrator",)) != d1
    assert len(mach.code_digest()) == 16


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
