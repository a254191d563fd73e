"""Pure parts of the hosts backend: hosts file, member assignment, rendering (inventory, tc, argv, configs),
clock-offset math, error hints, collected-file safety. No root, no SSH."""
from __future__ import annotations

import io
import json
import tarfile

import pytest
import yaml

from orchestrator.errors import SpecError
from orchestrator.hosts import clock, deploy, render
from orchestrator.hosts.ansible import HostsError, explain
from orchestrator.hosts.hostsfile import assign_members, load_hosts, parse_hosts
from orchestrator.plan import build_plan
from orchestrator.schedule import expand, parse_schedule
from orchestrator.spec import Experiment


@pytest.fixture
def key(tmp_path):
    k = tmp_path / "id_test"
    k.write_text("not a real key; only its existence is checked\n")
    return k


def hosts_text(default_key, **extra) -> str:
    doc = {"defaults": {"user": "gossip", "key": str(default_key), "workdir": "/srv/gt"},
           "hosts": [{"name": f"node-{i}", "ssh": f"192.0.2.{10 + i}", "address": f"10.1.0.{10 + i}"}
                     for i in range(4)]}
    doc["hosts"][0].update(extra)
    return yaml.safe_dump(doc, sort_keys=False)


def experiment(nodes=4, schedule=None, **links) -> Experiment:
    return Experiment.model_validate({
        "name": "gtunit", "topology": {"kind": "tree", "nodes": nodes, "degree": 3, "members": "all"},
        "links": {"rate": "1mbit", "delay": "5ms", "queue": 64, **links},
        "protocol": {"gsgc": {"subgroup": 2, "step": "1s"}}, "duration": "20s", "seed": 1,
        "schedule": schedule or []})


# --- hosts file ------------------------------------------------------------------------------------------------

def test_defaults_apply_and_paths_resolve(tmp_path, key):
    hosts = parse_hosts(hosts_text(key, port=2222, user="root", interface="eth1"), "h.yml", tmp_path)
    assert [h.name for h in hosts] == ["node-0", "node-1", "node-2", "node-3"]
    h0, h1 = hosts[0], hosts[1]
    assert (h0.user, h0.ssh_port, h0.interface, h0.become) == ("root", 2222, "eth1", False)
    assert (h1.user, h1.ssh_port, h1.interface, h1.become) == ("gossip", 22, None, True)
    assert h1.key == str(key.resolve()) and h1.workdir == "/srv/gt" and h1.python == "/usr/bin/python3"
    assert h1.lab_dir("demo") == "/srv/gt/demo"


def test_ssh_port_in_address(tmp_path, key):
    hosts = parse_hosts(hosts_text(key, ssh="192.0.2.99:2200"), "h.yml", tmp_path)
    assert (hosts[0].ssh_host, hosts[0].ssh_port) == ("192.0.2.99", 2200)


def test_relative_key_is_relative_to_the_hosts_file(tmp_path, key):
    f = tmp_path / "hosts.yml"
    f.write_text(hosts_text("id_test"))
    assert load_hosts(f)[0].key == str(key.resolve())


@pytest.mark.parametrize("extra, expected", [
    ({"address": "10.1.0.300"}, r"h\.yml:\d+: hosts\[0\]\.address: '10\.1\.0\.300' is not an IPv4 address"),
    ({"name": "bad name;rm"}, r"hosts\[0\]\.name: host name 'bad name;rm'"),
    ({"surprise": 1}, r"hosts\[0\]\.surprise: unknown key"),
    ({"workdir": "/srv/$(x)"}, r"workdir '/srv/\$\(x\)' must be an absolute path"),
    ({"workdir": "relative/dir"}, r"must be an absolute path"),
    ({"key": "/nonexistent/key"}, r"key /nonexistent/key .* is not a file"),
    ({"user": "Bad User"}, r"user 'Bad User' is not a valid user name"),
    ({"ssh": "bad host!"}, r"neither an IPv4 address nor a host name"),
    ({"interface": "much-too-long-interface"}, r"is not a Linux interface name"),
    ({"address": "10.1.0.11"}, r"address '10\.1\.0\.11' appears twice"),
])
def test_bad_hosts_files_name_file_line_and_field(tmp_path, key, extra, expected):
    with pytest.raises(SpecError, match=expected):
        parse_hosts(hosts_text(key, **extra), "h.yml", tmp_path)


def test_error_line_points_at_the_host(tmp_path, key):
    text = hosts_text(key)
    text = text.replace("10.1.0.12", "nope")
    with pytest.raises(SpecError) as e:
        parse_hosts(text, "h.yml", tmp_path)
    line = int(str(e.value).split(":")[1])
    assert "nope" in text.splitlines()[line - 1]


def test_missing_user_and_bad_yaml(tmp_path, key):
    with pytest.raises(SpecError, match="no `user`"):
        parse_hosts(yaml.safe_dump({"hosts": [{"name": "a", "ssh": "a", "address": "10.0.0.1", "key": str(key)}]}),
                    "h.yml", tmp_path)
    with pytest.raises(SpecError, match=r"h\.yml:\d+: malformed YAML"):
        parse_hosts("hosts: [\n", "h.yml", tmp_path)
    with pytest.raises(SpecError, match="expected a mapping"):
        parse_hosts("- a\n", "h.yml", tmp_path)
    with pytest.raises(SpecError, match="no such hosts file"):
        load_hosts(tmp_path / "missing.yml")


def test_assign_members_in_order_and_by_name(tmp_path, key):
    hosts = parse_hosts(hosts_text(key, member="h3"), "h.yml", tmp_path)
    got = assign_members(hosts, ["h0", "h1", "h2", "h3"])
    assert [(h.name, h.member) for h in got] == [("node-1", "h0"), ("node-2", "h1"), ("node-3", "h2"),
                                                 ("node-0", "h3")]
    with pytest.raises(SpecError, match="4 host\\(s\\) but the experiment has 5 member"):
        assign_members(hosts, ["h0", "h1", "h2", "h3", "h4"])
    bad = parse_hosts(hosts_text(key, member="h9"), "h.yml", tmp_path)
    with pytest.raises(SpecError, match=r"member\(s\) \['h9'\] are not members"):
        assign_members(bad, ["h0", "h1", "h2", "h3"])


# --- rendering --------------------------------------------------------------------------------------------------

def hosts_and_plan(tmp_path, key, **links):
    exp = experiment(**links)
    plan = build_plan(exp)
    hosts = assign_members(parse_hosts(hosts_text(key), "h.yml", tmp_path), [m.name for m in plan.members])
    return exp, plan, hosts


def test_egress_is_the_access_link_in_the_sending_direction(tmp_path, key):
    exp = experiment(up={"rate": "500kbit"}, down={"rate": "2mbit"})
    plan = build_plan(exp)
    assert render.egress_params(plan, "h1").rate_bps == 500_000      # child: uplink, child -> parent
    assert render.egress_params(plan, "h0").rate_bps == 2_000_000    # root: its first downlink


def test_tc_ops_tbf_shapes_only_the_experiment_traffic():
    from orchestrator.shaping.params import DirParams

    d = DirParams(rate_bps=30_000, delay_s=0.005, queue_pkts=64, loss=0.01)
    ops = render.tc_ops("tbf", d)
    lines = [" ".join([op["obj"], "add", "dev", "eth0", *op["args"]]) for op in ops]
    assert lines == [
        "qdisc add dev eth0 root handle 1: htb default 1",
        "class add dev eth0 parent 1: classid 1:1 htb rate 10gbit quantum 60000",
        "class add dev eth0 parent 1: classid 1:2 htb rate 30000bit ceil 30000bit burst 1600 cburst 1600 "
        "quantum 1514",
        "qdisc add dev eth0 parent 1:2 handle 20: pfifo limit 64",
        "filter add dev eth0 parent 1: protocol ip prio 1 u32 match ip protocol 17 0xff match ip sport 7000 "
        "0xffff flowid 1:2",
    ]
    assert render.loss_rule("tbf", d, "lab1") == [
        "-p", "udp", "--sport", "7000", "-m", "statistic", "--mode", "random", "--probability", "0.01000000",
        "-m", "comment", "--comment", "gossip-testbed lab lab1", "-j", "DROP"]
    assert render.lost_params("tbf", d) == ["delay"]


def test_tc_ops_netem_and_nothing_to_shape():
    from orchestrator.shaping.params import DirParams

    d = DirParams(rate_bps=30_000, delay_s=0.005, queue_pkts=64, loss=0.01)
    ops = render.tc_ops("netem", d)
    assert ops[3:5] == [{"obj": "qdisc", "args": ["parent", "1:2", "handle", "20:", "netem", "delay", "5ms",
                                                  "loss", "random", "1%", "limit", "100000"]},
                        {"obj": "qdisc", "args": ["parent", "20:1", "handle", "21:", "netem", "rate", "30000bit",
                                                  "limit", "64"]}]
    assert ops[5]["obj"] == "filter"
    assert render.loss_rule("netem", d, "x") == []            # netem does the loss itself
    assert render.lost_params("netem", d) == []
    assert render.tc_ops("tbf", DirParams()) == [] and render.tc_ops("netem", DirParams()) == []
    with pytest.raises(ValueError):
        render.tc_ops("delayline", d)


def test_node_config_uses_host_addresses_and_paths(tmp_path, key):
    from orchestrator.nodeconfig import node_configs

    exp, plan, hosts = hosts_and_plan(tmp_path, key)
    base = node_configs(exp, plan, tmp_path / "run", tmp_path / "ctl")
    by_member = {h.member: h for h in hosts}
    cfg = render.node_config(base["h2"], by_member["h2"], hosts, "gtunit")
    assert cfg["listen"] == f"{by_member['h2'].address}:7000"
    assert [m["addr"] for m in cfg["members"]] == [f"{by_member[m['name']].address}:7000" for m in base["h2"]["members"]]
    assert cfg["event_log"] == "/srv/gt/gtunit/run/events/h2.jsonl"
    assert cfg["control"] == "/srv/gt/gtunit/run/ctl/h2.sock"
    from gossipnode.config import NodeConfig
    NodeConfig.model_validate(cfg)
    long = by_member["h2"].model_copy(update={"workdir": "/" + "x" * 120})
    with pytest.raises(ValueError, match="longer than"):
        render.node_config(base["h2"], long, hosts, "gtunit")


def test_start_argv_are_lists_for_start_stop_daemon(tmp_path, key):
    _, _, hosts = hosts_and_plan(tmp_path, key)
    h = hosts[1]
    argv = render.node_start_argv(h, "lab")
    assert argv[:2] == ["start-stop-daemon", "--start"] and "--pidfile" in argv
    assert argv[argv.index("--exec") + 1] == "/srv/gt/lab/venv/bin/python"
    assert argv[-4:] == ["-m", "gossipnode", "--config", f"/srv/gt/lab/run/configs/{h.member}.json"]
    cap = render.capture_start_argv(h, "lab", 96)
    assert cap[cap.index("--") + 1:] == ["tcpdump", "-i", "any", "-s", "96", "-U", "-n", "-Z", "root", "-w",
                                         f"/srv/gt/lab/run/pcaps/{h.member}-any.pcap", "udp", "and", "host",
                                         h.address]


def test_inventory_is_yaml_with_every_host_and_its_vars(tmp_path, key):
    exp, plan, hosts = hosts_and_plan(tmp_path, key, loss="1%")
    inv = yaml.safe_load(render.render_inventory(hosts, "gtunit", plan, "h.yml"))
    got = inv["all"]["children"]["gossip"]["hosts"]
    assert sorted(got) == ["node-0", "node-1", "node-2", "node-3"]
    v = got["node-1"]
    assert v["ansible_host"] == "192.0.2.11" and v["ansible_user"] == "gossip" and v["ansible_become"] is True
    assert v["ansible_ssh_private_key_file"] == str(key.resolve())
    assert v["gossip_member"] == hosts[[h.name for h in hosts].index("node-1")].member
    assert v["gossip_dir"] == "/srv/gt/gtunit"
    assert v["gossip_tc"]["tbf"][0]["args"][:3] == ["root", "handle", "1:"]
    assert v["gossip_loss_rule"]["tbf"][-1] == "DROP" and v["gossip_lost"]["tbf"] == ["delay"]
    assert v["gossip_node_argv"][0] == "start-stop-daemon"


def test_extravars():
    ev = render.extravars("lab", "auto", True, deploy.REPO / "b.tgz", start_members=["h0"])
    assert ev["gossip_strict"] is True and ev["gossip_start_members"] == ["h0"] and ev["gossip_run_dir"] == ""


def test_link_actions_are_refused_for_hosts(tmp_path, key):
    from orchestrator.hosts.driver import HostsDriver
    from orchestrator.schedule import check_supported

    def check(exp):
        tl = expand(parse_schedule(exp.schedule), build_plan(exp), exp.duration_s, exp.seed)
        check_supported(tl, HostsDriver.OPS, "hosts", HostsDriver.WHY_UNSUPPORTED)

    exp = experiment(schedule=[{"at": "5s", "action": "partition", "subtree": "h1"}])
    with pytest.raises(SpecError, match=r"schedule\[0\]: partition at 5s: not supported on the hosts backend "
                                        r"\(link actions: the links between real hosts are the real network\)"):
        check(exp)
    check(experiment(schedule=[{"at": "5s", "action": "crash", "nodes": ["h1"]}]))


def test_what_the_backend_learns_goes_beside_the_plan(tmp_path, key):
    """The plan stays as planned; the hosts' real addresses are `realised` (lab state, run manifest)."""
    from orchestrator.hosts.render import realised

    _, plan, hosts = hosts_and_plan(tmp_path, key)
    before = plan.to_dict()
    out = realised(hosts)
    assert out["addresses"] == {h.member: h.address for h in hosts}
    assert out["hosts"][hosts[0].member] == {"host": hosts[0].name, "address": hosts[0].address}
    assert plan.to_dict() == before and plan.node(hosts[0].member).address != hosts[0].address


# --- clock offsets ----------------------------------------------------------------------------------------------

def test_offset_is_exact_with_symmetric_delays():
    # host clock 2.5 s ahead, one-way delay 3 ms each way
    samples = [(100.0 + i, 100.0 + i + 0.003 + 2.5, 100.0 + i + 0.006) for i in range(5)]
    o = clock.estimate(samples)
    assert o.offset_s == pytest.approx(2.5, abs=1e-9)
    assert o.rtt_s == pytest.approx(0.006) and o.error_s == pytest.approx(0.003) and o.samples == 5


def test_offset_takes_the_fastest_round_trip_and_stays_within_its_bound():
    true = -0.040
    # asymmetric, noisy legs; the third sample is fastest
    legs = [(0.010, 0.002), (0.004, 0.030), (0.0005, 0.0007), (0.020, 0.020)]
    samples = [(10.0 * i, 10.0 * i + a + true, 10.0 * i + a + b) for i, (a, b) in enumerate(legs)]
    o = clock.estimate(samples)
    assert o.rtt_s == pytest.approx(0.0012)
    assert abs(o.offset_s - true) <= o.error_s
    assert o.spread_s > 0.01
    assert clock.to_controller_time(5.0, o.offset_s) == pytest.approx(5.0 - o.offset_s)


def test_offset_rejects_bad_samples():
    with pytest.raises(ValueError):
        clock.estimate([])
    with pytest.raises(ValueError):
        clock.sample_offset(2.0, 1.0, 1.0)


# --- errors and collected files ---------------------------------------------------------------------------------

def test_explain_adds_what_to_do():
    assert "passwordless sudo" in explain("Missing sudo password", "bob")
    assert "wrong key" in explain("Failed to connect: Permission denied (publickey).", "bob")
    assert "--accept-new-host-keys" in explain("Host key verification failed.", "bob", "/kh")
    assert explain("ssh: connect to host 10.0.0.9 port 22: No route to host").startswith("unreachable: ")
    assert "CHANGED" in explain("REMOTE HOST IDENTIFICATION HAS CHANGED!")
    err = HostsError("deploy failed on 2 host(s):", {"b": "why b", "a": "why a"})
    assert str(err).splitlines() == ["deploy failed on 2 host(s):", "  a: why a", "  b: why b"]


def test_stage_tarball_and_unpack_collected_only_the_members_files(tmp_path):
    t = deploy.stage_tarball(tmp_path / "files", "h2", {"name": "h2"}, {"lab": "x"})
    with tarfile.open(t) as tar:
        names = set(tar.getnames())
    assert {"run/configs/h2.json", "run/agent.json", "run/pids", "run/events", "run/ctl"} <= names

    bad = tmp_path / "collected.tar.gz"
    with tarfile.open(bad, "w:gz") as tar:
        for name in ("events/h2.jsonl", "./logs/h2.log", "pcaps/h2-any.pcap", "events/h1.jsonl",
                     "../escape.txt", "pcaps/h2-x/../../escape.pcap", "manifest.json"):
            data = b"x\n"
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    run_dir = tmp_path / "run"
    got = deploy.unpack_collected(bad, run_dir, "h2")
    assert sorted(got) == ["events/h2.jsonl", "logs/h2.log", "pcaps/h2-any.pcap"]
    assert not (tmp_path / "escape.txt").exists() and not (run_dir / "events" / "h1.jsonl").exists()
    assert not (run_dir / "manifest.json").exists()


def test_hosts_record_roundtrip(tmp_path, key):
    _, _, hosts = hosts_and_plan(tmp_path, key)
    deploy.save_record(tmp_path / "st", {"hosts": [h.model_dump() for h in hosts], "lab": "x"})
    rec = deploy.load_record(tmp_path / "st")
    assert deploy.hosts_of(rec) == hosts
    assert deploy.load_record(tmp_path / "nothing") is None
    assert json.loads((tmp_path / "st" / "hosts.json").read_text())["lab"] == "x"


def test_the_bundle_carries_the_whole_node_package(tmp_path, monkeypatch):
    """Every module of gossipnode, its protocols/ subpackages included, lands in the bundle at its own path (the
    hosts import the node from it)."""
    import tarfile

    from orchestrator.hosts import deploy

    monkeypatch.setattr(deploy, "node_wheels", lambda: tmp_path / "wheels")
    (tmp_path / "wheels").mkdir()
    with tarfile.open(deploy.build_bundle(tmp_path / "out")) as tar:
        names = {n for n in tar.getnames() if n.startswith("src/gossipnode/")}
    expected = {f"src/gossipnode/{p.relative_to(deploy.NODE_SRC).as_posix()}" for p in deploy.NODE_SRC.rglob("*.py")}
    assert "src/gossipnode/protocols/gsgc/core.py" in expected
    assert names == expected


def test_silent_crash_rules_drop_only_the_nodes_port_both_ways_and_the_agent_applies_and_removes_them(
        tmp_path, key, monkeypatch):
    from orchestrator.hosts import agent

    rules = render.silent_rules("gtunit", 7000)
    # INPUT and OUTPUT, UDP and TCP, the port as destination and as source: the node's socket and its connections
    assert {(r[0], r[2], r[3]) for r in rules} == {(c, p, s) for c in ("INPUT", "OUTPUT") for p in ("udp", "tcp")
                                                   for s in ("--dport", "--sport")}
    assert all(r[4] == "7000" and r[-4:] == ["--comment", "testbed-silent-gtunit", "-j", "DROP"] for r in rules)
    host = hosts_and_plan(tmp_path, key)[2][0]
    cfg = render.agent_config(host, "gtunit", "/srv/ctl.sock")
    assert cfg["nodes"][host.member]["silent"] == rules
    h1 = host.member

    # the agent runs `iptables` (here a script that logs its argv; -D of an absent rule fails as iptables does)
    log = tmp_path / "argv.log"
    fake = tmp_path / "bin" / "iptables"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\necho "$@" >> {log}\n'
                    '[ "$3" = "-D" ] && [ -n "$FAIL_DELETE" ] && { echo "iptables: Bad rule (does a matching rule '
                    'exist in that chain?)." >&2; exit 1; }\nexit 0\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:/usr/bin:/bin")
    assert agent.handle(cfg, {"op": "isolate", "node": h1, "on": True})["ok"]
    lines = log.read_text().splitlines()
    assert lines == [" ".join(["-w", "-I", r[0], "1", *r[1:]]) for r in rules]
    monkeypatch.setenv("FAIL_DELETE", "1")          # already gone: off still succeeds
    assert agent.handle(cfg, {"op": "isolate", "node": h1, "on": False})["ok"]
    assert log.read_text().splitlines()[len(rules):] == [" ".join(["-w", "-D", *r]) for r in rules]
    fake.write_text("#!/bin/sh\necho 'iptables v1.8.9: cannot open table' >&2\nexit 4\n")
    r = agent.handle(cfg, {"op": "isolate", "node": h1, "on": True})
    assert not r["ok"] and "cannot open table" in r["error"]


def test_the_agent_starts_a_restart_with_its_incarnation_in_the_nodes_config(tmp_path, key):
    """A restart on a real host (HostsDriver.start_nodes): the agent writes the member's `incarnation` into the
    config its start command reads (the file after --config), then starts it; a first start leaves it alone."""
    from orchestrator.hosts import agent

    host = hosts_and_plan(tmp_path, key)[2][0]
    cfg = render.agent_config(host, "gtunit", "/srv/ctl.sock")
    node = cfg["nodes"][host.member]
    conf = tmp_path / "h.json"
    conf.write_text(json.dumps({"name": host.member, "wait_for_start": False}))
    pidfile = tmp_path / "h.pid"
    # the start command as render makes it, with a stand-in that records the config it was started with
    seen = tmp_path / "seen.json"
    node["start"] = ["sh", "-c", f'cp "$2" {seen} && echo $$ > {pidfile}', "sh", "--config", str(conf)]
    node["pidfile"] = str(pidfile)
    assert render.node_start_argv(host, "gtunit")[-2] == "--config"
    r = agent.handle(cfg, {"op": "start", "node": host.member})
    assert r["ok"] and "incarnation" not in json.loads(seen.read_text())
    r = agent.handle(cfg, {"op": "start", "node": host.member, "incarnation": 2})
    assert r["ok"] and json.loads(seen.read_text()) == {"name": host.member, "wait_for_start": False,
                                                         "incarnation": 2}


def test_clock_measure_takes_the_round_trip_with_the_smallest_rtt():
    ticks = iter([0.0, 0.010, 1.0, 1.002, 2.0, 2.004])        # this clock: send, receive, per round trip
    remote = iter([5.004, 6.0015, 7.003])                       # the remote's reading in each
    o = clock.measure(lambda: next(remote), n=3, now=lambda: next(ticks))
    assert o.samples == 3 and o.rtt_s == pytest.approx(0.002) and o.offset_s == pytest.approx(5.0005)
