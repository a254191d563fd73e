"""Real hosts (docs/architecture.md §3): deployment, shaping, captures and collection through Ansible (playbooks/, driven by
ansible-runner in `orchestrator.hosts.ansible`); time-critical actions over paramiko (`orchestrator.hosts.ssh`).

The lab's state directory holds `hosts.json` (the resolved hosts, the known_hosts policy, and which hosts the
playbooks touched), written before anything is created, so `teardown` cleans exactly the hosts that may hold
something of the lab, even after a crashed orchestrator.
"""
from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from orchestrator.backends import packing
from orchestrator.backends.base import Backend, Progress
from orchestrator.errors import SpecError
from orchestrator.hosts import deploy, render
from orchestrator.hosts.ansible import HostsError
from orchestrator.hosts.driver import HostsDriver
from orchestrator.hosts.hostsfile import Host, assign_members
from orchestrator.hosts.ssh import openssh_argv
from orchestrator.hosts.inventory import load as load_hosts
from orchestrator.plan import NetworkPlan
from orchestrator.source import FieldError
from orchestrator.state import LabState


def default_known_hosts() -> Path:
    return Path("~/.ssh/known_hosts").expanduser()


class HostsBackend(Backend):
    name = "hosts"
    enforces_cpu = False            # a member has its host's CPUs: nodes.cpu only with --allow-unenforced-cpu
    routes_groups = False           # the hosts' own network would have to route a group
    remote_shaping = True       # lab.up: the hosts probe their own kernels (in `up`), not this machine's
    fidelity_probe = False      # no popen in a member: the links are the real network
    members_here = False            # no host-speed sampling here: the members run on the hosts
    state_survives_reboot = True    # a reboot of this machine leaves the hosts' qdiscs and processes running
    driver_class = HostsDriver

    def __init__(self, inventory: str | Path | None = None, known_hosts: str | Path | None = None,
                 accept_new_host_keys: bool = False, strict: bool = False, data_dir: Path | None = None,
                 snaplen: int = 128, allow_unenforced_cpu: bool = False):
        self.inventory = Path(inventory) if inventory else None
        self.known_hosts = Path(known_hosts).expanduser().resolve() if known_hosts else default_known_hosts()
        self.accept_new = accept_new_host_keys
        self.strict = strict
        self.data_dir = data_dir
        self.snaplen = snaplen
        self.allow_unenforced_cpu = allow_unenforced_cpu

    # -- runs
    def _hosts(self, plan: NetworkPlan, state: LabState | None) -> list[Host]:
        if state is not None and (record := deploy.load_record(state.dir)) is not None:
            return deploy.hosts_of(record)
        if self.inventory is None:
            raise SpecError("--backend hosts needs --inventory HOSTS_FILE")
        return assign_members(load_hosts(self.inventory), [m.name for m in plan.members])

    def check_run(self, exp, plan: NetworkPlan, lab: str, state: LabState | None) -> None:
        packing.refuse(self.name, exp, len(plan.members))     # a node is a process on its host (#21)
        if exp.nodes.cpu is not None and not self.allow_unenforced_cpu:
            raise FieldError(("nodes", "cpu"), "the hosts backend cannot enforce a CPU budget on real machines "
                                               "(each member has its host's CPUs): remove nodes.cpu, or pass "
                                               "--allow-unenforced-cpu to run without it (recorded as not "
                                               "enforced)")
        hosts = self._hosts(plan, state)
        for h in hosts:                     # the control socket path must fit (render.node_config says why not)
            try:
                render.node_config({"members": []}, h, hosts, lab)
            except ValueError as exc:
                raise SpecError(str(exc)) from None

    def for_run(self, run, exp) -> None:
        self.data_dir = run.path / "ansible"
        self.snaplen = exp.capture.snaplen

    def realised(self, plan: NetworkPlan, state: LabState | None) -> dict | None:
        return render.realised(self._hosts(plan, state))

    # -- lifecycle
    def up(self, plan: NetworkPlan, state: LabState, progress: Progress) -> None:
        if self.inventory is None:
            raise SpecError("--backend hosts needs --inventory HOSTS_FILE")
        hosts = assign_members(load_hosts(self.inventory), [m.name for m in plan.members])
        if not self.known_hosts.exists() and not self.accept_new:
            raise HostsError(f"known_hosts file {self.known_hosts} does not exist: add the hosts' keys (check their "
                             "fingerprints) or pass --accept-new-host-keys to record keys of hosts not seen before")
        data_dir = self.data_dir or state.dir / "ansible"
        record = {"lab": state.lab, "hosts": [h.model_dump() for h in hosts], "hosts_file": str(self.inventory),
                  "known_hosts": str(self.known_hosts), "accept_new_host_keys": self.accept_new,
                  "strict": self.strict, "shaper_request": state.shaper, "snaplen": self.snaplen,
                  "data_dir": str(data_dir), "touched": [h.name for h in hosts], "dilation": state.dilation}
        deploy.save_record(state.dir, record)          # before anything is created on a host
        # What the backend learns goes to the lab state (`status` shows the members' real addresses); the plan
        # stays as planned.
        state.backend_data["realised"] = render.realised(hosts)
        state.save()
        progress.note(f"deploying {len(hosts)} host(s) with ansible-runner (private data dir {data_dir})")
        ctx = deploy.context(record, plan, data_dir)
        try:
            res = ctx.run("up.yml", progress)
        finally:
            ctx.close()
        # Hosts where no task ever succeeded (unreachable, no sudo) hold nothing of the lab.
        record["touched"] = sorted(res.touched)
        record["deploy_s"] = res.elapsed_s
        deploy.save_record(state.dir, record)
        reports = {h: r for h, r in res.reports.items()}
        shapers = sorted({r.get("shaper") for r in reports.values()})
        state.shaper = shapers[0] if len(shapers) == 1 else "mixed:" + "+".join(map(str, shapers))
        state.capabilities = {"kernel": sorted({str(r.get("kernel")) for r in reports.values()}),
                              "netem": all(r.get("netem") for r in reports.values()) if reports else None,
                              "hosts": reports}
        state.warnings = [f"{h} ({r.get('member')}): {', '.join(r['lost'])} NOT emulated with shaper "
                          f"{r.get('shaper')!r} (the host's kernel has no sch_netem)" if r.get("shaper") == "tbf"
                          else f"{h} ({r.get('member')}): {', '.join(r['lost'])} NOT emulated"
                          for h, r in sorted(reports.items()) if r.get("lost")]
        if reports:
            state.warnings.append("hosts: each host shapes its member's access link in the sending direction on "
                                  "its real interface (experiment UDP only); the tree's routers are the real "
                                  "network, not emulated")
        state.save()
        for w in state.warnings:
            progress.note(f"WARNING: {w}")
        ctx.check(res, "deploying the hosts (playbooks/up.yml)")
        state.status = "up"
        state.save()

    def teardown(self, state: LabState, progress: Progress) -> None:
        record = deploy.load_record(state.dir)
        if record is None:
            return
        if record.get("touched"):
            data_dir = Path(record.get("data_dir") or state.dir / "ansible")
            if not data_dir.parent.exists():
                data_dir = state.dir / "ansible"
            ctx = deploy.context(record, state.load_plan(), data_dir, with_bundle=False)
            progress.note(f"tearing down on {', '.join(record['touched'])}")
            try:
                res = ctx.run("teardown.yml", progress, limit=record["touched"])
            finally:
                ctx.close()
            if res.failures or res.status != "successful":
                record["touched"] = sorted(res.failures) or record["touched"]
                deploy.save_record(state.dir, record)
                ctx.check(res, f"teardown of lab {state.lab} (run `orchestrator teardown {state.lab}` again "
                               "once the host is reachable)")
        shutil.rmtree(state.dir / "ansible", ignore_errors=True)

    # -- runtime
    def _host(self, state: LabState, node: str):
        record = deploy.load_record(state.dir)
        for h in deploy.hosts_of(record or {"hosts": []}):
            if h.member == node or h.name == node:
                return h, record
        raise SpecError(f"{node}: no host of lab {state.lab} runs it")

    def exec(self, state: LabState, node: str, argv: list[str]) -> int:
        """Run `argv` on the member's host as the SSH user (OpenSSH client, host key checked)."""
        h, record = self._host(state, node)
        if argv[:1] == ["--"]:
            argv = argv[1:]
        if not argv or argv[0].startswith("-"):
            raise SpecError("exec: give the command after `--`")
        return subprocess.call([*openssh_argv(h, record["known_hosts"]), shlex.join(argv)], stdin=sys.stdin)

    def health(self, state: LabState) -> list[str]:
        record = deploy.load_record(state.dir)
        if record is None:
            return ["no hosts record (hosts.json) in the lab's state directory"]
        if state.status != "up":
            return []
        ctx = deploy.context(record, state.load_plan(), state.dir / "ansible-status", with_bundle=False)
        try:
            res = ctx.run("status.yml")
        finally:
            ctx.close()
        shutil.rmtree(state.dir / "ansible-status", ignore_errors=True)
        problems = [f"{h}: {why}" for h, why in sorted(res.failures.items())]
        if res.status != "successful" and not problems:
            problems.append(f"playbooks/status.yml: {res.status} (rc {res.rc})")
        for h, r in sorted(res.reports.items()):
            if not r.get("deployed"):
                problems.append(f"{h}: the lab is not deployed there")
        return problems
