"""Everything the playbooks and the agent run, rendered from the experiment and the hosts file. Pure.

Shaping on a real host: one egress, the interface holding the member's address. Only the experiment's traffic
(UDP from the node port) is shaped; everything else on that interface (SSH, the control channel, the host's own
traffic) stays in an unshaped class, so the orchestrator can still reach a host whose link is 30 kbit/s:

    tc qdisc add dev D root handle 1: htb default 1        # 1:1 unshaped, 1:2 the experiment's egress
    tc filter add dev D parent 1: protocol ip prio 1 u32 match ip protocol 17 0xff match ip sport PORT 0xffff flowid 1:2
    netem: class 1:2 unlimited, leaf `netem <delay jitter loss rate limit>`
    tbf:   class 1:2 `htb rate R ceil R` (a token bucket, as tbf), leaf `pfifo limit Q`; loss by iptables statistic;
           delay and jitter are NOT emulated

A host emulates its member's access link in the sending direction (the uplink's `up` direction; the tree root
its first downlink's `down`): the tree of routers between members is the real network, not emulated.
"""
from __future__ import annotations

import json
from pathlib import Path

import jinja2

from orchestrator.hosts.hostsfile import Host
from orchestrator.plan import NetworkPlan
from orchestrator.shaping import shapers
from orchestrator.shaping.params import DirParams

NODE_PORT = 7000
TEMPLATES = Path(__file__).parent / "templates"
HOST_SHAPERS = [s.name for s in shapers.SHAPERS.values() if s.on_hosts]     # the playbooks choose one per host
SUN_PATH_MAX = 107


def egress_params(plan: NetworkPlan, member: str) -> DirParams:
    """What a member's host shapes its egress with (see the module docstring)."""
    node = plan.node(member)
    link = plan.access_link(member)
    if link is None:
        return DirParams()
    return link.up if node.parent is not None else link.down


def tc_ops(shaper: str, d: DirParams, port: int = NODE_PORT) -> list[dict]:
    """tc operations for one host egress: each {"obj": qdisc|class|filter, "args": [...]}, run as
    `tc <obj> add dev <D> <args...>`. Empty when there is nothing to shape."""
    try:
        s = shapers.get(shaper)
    except ValueError:
        raise ValueError(f"hosts: unknown shaper {shaper!r} (netem or tbf)") from None
    return s.host_tc_ops(d, port)


def loss_rule(shaper: str, d: DirParams, lab: str, port: int = NODE_PORT) -> list[str]:
    """iptables mangle POSTROUTING match for tbf's random loss, after `-o <D>` (empty: no rule). The comment
    carries the lab, so the rule is recognisable; teardown deletes exactly this rule (`-D`)."""
    return shapers.get(shaper).host_loss_rule(d, lab, port)


def lost_params(shaper: str, d: DirParams) -> list[str]:
    """Parameters of `d` the shaper does not emulate on a host."""
    return shapers.get(shaper).fidelity(d).lost()


def run_dir_remote(host: Host, lab: str) -> str:
    return f"{host.lab_dir(lab)}/run"


def node_start_argv(host: Host, lab: str) -> list[str]:
    w, r, m = host.lab_dir(lab), run_dir_remote(host, lab), host.member
    return ["start-stop-daemon", "--start", "--background", "--make-pidfile", "--pidfile", f"{r}/pids/{m}.pid",
            "--output", f"{r}/logs/{m}.log", "--chdir", r, "--exec", f"{w}/venv/bin/python", "--",
            "-m", "gossipnode", "--config", f"{r}/configs/{m}.json"]


def capture_start_argv(host: Host, lab: str, snaplen: int) -> list[str]:
    """tcpdump of the member's own experiment traffic (UDP to or from its address; SSH is left out)."""
    r, m = run_dir_remote(host, lab), host.member
    return ["start-stop-daemon", "--start", "--background", "--make-pidfile", "--pidfile",
            f"{r}/pids/{m}-tcpdump.pid", "--output", f"{r}/logs/{m}-tcpdump.log", "--startas", "/usr/bin/env", "--",
            "tcpdump", "-i", "any", "-s", str(snaplen), "-U", "-n", "-Z", "root", "-w", f"{r}/pcaps/{m}-any.pcap",
            "udp", "and", "host", host.address]


def node_config(base: dict, host: Host, hosts: list[Host], lab: str, port: int = NODE_PORT) -> dict:
    """A member's node config (from `runner.node_configs`) made right for its host: the hosts' member addresses,
    and paths on the host."""
    addr = {h.member: h.address for h in hosts}
    r = run_dir_remote(host, lab)
    control = f"{r}/ctl/{host.member}.sock"
    if len(control) > SUN_PATH_MAX:
        raise ValueError(f"host {host.name}: control socket path {control} is longer than {SUN_PATH_MAX} "
                         "characters (choose a shorter workdir)")
    cfg = dict(base)
    cfg["listen"] = f"{host.address}:{port}"
    cfg["members"] = [{**m, "addr": f"{addr[m['name']]}:{port}"} for m in base["members"]]
    cfg["event_log"] = f"{r}/events/{host.member}.jsonl"
    cfg["control"] = control
    return cfg


def silent_rules(lab: str, port: int = NODE_PORT) -> list[list[str]]:
    """A silent crash on a real host (`crash: {mode: silent}`): the iptables filter rules, each as the words after
    `iptables -w -I|-D`, that drop the member's own experiment traffic in both directions -- UDP and TCP with the
    node's port as source or destination (its listening socket and the connections it opens). The host's other
    traffic, its SSH sessions included, passes. The comment carries the lab: teardown deletes exactly these."""
    return [[chain, "-p", proto, side, str(port), "-m", "comment", "--comment", f"testbed-silent-{lab}", "-j", "DROP"]
            for chain in ("INPUT", "OUTPUT") for proto in ("udp", "tcp") for side in ("--dport", "--sport")]


def agent_config(host: Host, lab: str, control: str, port: int = NODE_PORT) -> dict:
    r = run_dir_remote(host, lab)
    return {"lab": lab, "host": host.name, "run": r,
            "nodes": {host.member: {"pidfile": f"{r}/pids/{host.member}.pid", "start": node_start_argv(host, lab),
                                    "control": control, "silent": silent_rules(lab, port)}}}


def connection_vars(host: Host) -> dict:
    """How Ansible reaches `host` and runs as root there."""
    return {
        "ansible_host": host.ssh_host,
        "ansible_port": host.ssh_port,
        "ansible_user": host.user,
        "ansible_ssh_private_key_file": host.key,
        "ansible_become": host.become,
        "ansible_python_interpreter": host.python,
    }


def host_vars(host: Host, lab: str, plan: NetworkPlan, snaplen: int = 128, port: int = NODE_PORT,
              dilation: float = 1.0) -> dict:
    d = egress_params(plan, host.member).dilated(dilation)     # the plan's parameters are virtual
    return {
        **connection_vars(host),
        "gossip_member": host.member,
        "gossip_address": host.address,
        "gossip_interface": host.interface or "",
        "gossip_workdir": host.workdir,
        "gossip_dir": host.lab_dir(lab),
        "gossip_python": host.python,
        "gossip_egress": {k: v for k, v in d.to_json().items()},
        "gossip_tc": {s: tc_ops(s, d, port) for s in HOST_SHAPERS},
        "gossip_loss_rule": {s: loss_rule(s, d, lab, port) for s in HOST_SHAPERS},
        "gossip_lost": {s: lost_params(s, d) for s in HOST_SHAPERS},
        "gossip_node_argv": node_start_argv(host, lab),
        "gossip_capture_argv": capture_start_argv(host, lab, snaplen),
        "gossip_silent_rules": silent_rules(lab, port),
    }


def render_inventory(hosts: list[Host], lab: str, plan: NetworkPlan, source: str = "", snaplen: int = 128,
                     port: int = NODE_PORT, dilation: float = 1.0) -> str:
    """The Ansible inventory (YAML), rendered with Jinja2 from the hosts and the plan."""
    return render_vars(lab, source, {h.name: host_vars(h, lab, plan, snaplen, port, dilation) for h in hosts})


def render_vars(lab: str, source: str, hosts: dict[str, dict]) -> str:
    """An Ansible inventory (YAML) of the group `gossip`: host name -> its vars."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True, autoescape=False)
    env.filters["json"] = lambda v: json.dumps(v, sort_keys=True)
    tpl = env.get_template("inventory.yml.j2")
    return tpl.render(lab=lab, source=source, hosts=[{"name": n, "vars": v} for n, v in hosts.items()])


def extravars(lab: str, shaper: str, strict: bool, bundle: Path, run_dir: Path | None = None,
              files: Path | None = None, capture: bool = True, start_members: list[str] | None = None,
              port: int = NODE_PORT) -> dict:
    """The playbooks' extra vars (env/extravars)."""
    return {"gossip_lab": lab, "gossip_shaper_request": shaper, "gossip_strict": strict,
            "gossip_local_bundle": str(bundle), "gossip_run_dir": str(run_dir) if run_dir else "",
            "gossip_local_files": str(files) if files else "", "gossip_capture": capture,
            "gossip_start_members": list(start_members or []), "gossip_port": port}


def realised(hosts: list[Host]) -> dict:
    """What the hosts backend learns that the plan does not say (the lab state's and the run manifest's `realised`):
    each member's real address (what the pcaps show) and host. The plan itself stays as planned."""
    return {"addresses": {h.member: h.address for h in hosts},
            "hosts": {h.member: {"host": h.name, "address": h.address} for h in hosts}}
