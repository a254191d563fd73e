"""One lab over several machines (`orchestrator up EXPERIMENT --machines INVENTORY`, docs/machines.md).

The controller checks every machine before anything is built anywhere (`machine-check` over SSH: reachable, root,
the same code, network namespaces, veth and VXLAN, a shaper), cuts the tree into shards (orchestrator.shard),
records which machines it will touch in the lab's state (`machines.json`, before it builds), and then has every
machine build its part with the netns backend's own code (`orchestrator up --part`, all machines at once). The
cut links are VXLAN tunnels between the machines' underlay addresses (`testbed_address`). Teardown asks every
recorded machine to remove its part (a machine whose part is gone already counts as done), so it works after the
controller was killed; a machine it cannot reach keeps the lab's state for a retry.

SSH is paramiko's (orchestrator.hosts.ssh.open_client: the host keys checked as for the hosts backend); every
remote command is an argument list quoted with shlex.join.
"""
from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

from orchestrator import machines as mach
from orchestrator.machinecheck import code_digest
from orchestrator.backends.base import Backend, Progress
from orchestrator.backends.machinesrun import MachinesDriver
from orchestrator.backends.machinessh import Machine, connect, each
from orchestrator.errors import BackendError, SpecError
from orchestrator.hosts.hostsfile import Host
from orchestrator.hosts.ssh import openssh_argv
from orchestrator.plan import NetworkPlan
from orchestrator.shard import node_weights, part_of, shard_plan
from orchestrator.state import LabState

RECORD = "machines.json"


def _problems_error(problems: dict[str, str], what: str) -> SpecError:
    return SpecError(f"{what}:\n" + "\n".join(f"  {name}: {why}" for name, why in problems.items()))


class MachinesBackend(Backend):
    name = "machines"
    remote_shaping = True           # each machine probes its own kernel (machine-check)
    fidelity_probe = True           # popen in a node: over SSH to its machine; cut links held to formula + underlay
    state_survives_reboot = True    # the machines keep their parts when this one reboots
    packs_remotely = True           # each machine's agent decides `nodes.packing` for its members (docs/machines.md)
    members_here = False            # no host-speed sampling here: the members run on the machines
    driver_class = MachinesDriver

    def __init__(self, inventory: str | Path | None = None, known_hosts: str | Path | None = None,
                 accept_new_host_keys: bool = False, strict: bool = False, sets: list[str] | None = None,
                 dilation: str | None = None):
        from orchestrator.backends.hosts import default_known_hosts

        self.inventory = Path(inventory) if inventory else None
        self.known_hosts = Path(known_hosts).expanduser().resolve() if known_hosts else default_known_hosts()
        self.accept_new, self.strict = accept_new_host_keys, strict
        self.sets, self.dilation = list(sets or []), dilation

    # --- the record: which machines may hold something of the lab --------------------------------------------
    @staticmethod
    def load_record(state: LabState) -> dict | None:
        f = state.dir / RECORD
        return json.loads(f.read_text()) if f.exists() else None

    @staticmethod
    def _save_record(state: LabState, record: dict) -> None:
        state.dir.mkdir(parents=True, exist_ok=True)
        tmp = state.dir / (RECORD + ".tmp")
        tmp.write_text(json.dumps(record, indent=1, sort_keys=True))
        tmp.replace(state.dir / RECORD)

    def _hosts(self) -> list[Host]:
        from orchestrator.hosts.inventory import load

        if self.inventory is None:
            raise SpecError("--machines needs an inventory")
        return load(self.inventory)

    # --- build ---------------------------------------------------------------------------------------------------
    def preflight(self, plan: NetworkPlan, shaper: str, progress: Progress) -> tuple[dict[str, Machine], dict]:
        """Connect to and check every machine; SpecError (exit 2) naming each machine that cannot take part and
        why, before anything is built anywhere. Returns the connections and each machine's report."""
        hosts = self._hosts()
        problems = mach.inventory_problems(hosts, len(plan.nodes))
        if problems:
            raise _problems_error(problems, f"{self.inventory}: cannot use these machines")
        progress.note(f"checking {len(hosts)} machine(s) ...")
        t0 = time.monotonic()
        machines, problems = connect(hosts, self.known_hosts, self.accept_new)
        t_connect = time.monotonic() - t0
        digest = code_digest()
        self._install(machines, digest, problems, progress)
        reports: dict[str, dict] = {}
        answers = each([m for m in machines.values() if m.host.name not in problems],
                       lambda m: m.orchestrator(["--shaper", shaper], 120, "orchestrator.machinecheck"))
        for name, res in answers.items():
            if isinstance(res, Exception):
                problems[name] = f"machine-check failed: {res}"
                continue
            why, report = mach.check_verdict(machines[name].host, *res, digest=digest, shaper=shaper)
            if why:
                problems[name] = why
            reports[name] = report
        chosen = {name: r.get("shaper") for name, r in reports.items() if name not in problems}
        if not problems and len(set(chosen.values())) > 1:
            problems = {n: f"would shape with {s}" for n, s in chosen.items()}
            problems["(all)"] = "the machines would shape differently: pass --shaper with one they all have"
        if problems:
            for m in machines.values():
                m.close()
            order = [h.name for h in hosts]
            problems = dict(sorted(problems.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else 1e9))
            raise _problems_error(problems, f"{len(problems)} machine(s) cannot take part (nothing was built)")
        progress.note(f"{len(machines)} machine(s) checked in {time.monotonic() - t0:.1f} s (SSH {t_connect:.1f} s)")
        return machines, reports

    def _install(self, machines: dict[str, Machine], digest: str, problems: dict[str, str],
                 progress: Progress) -> None:
        """Machines without `testbed_orchestrator` run this code from their own install of it
        (orchestrator/backends/machinesinstall.py), made now when it is not there yet; a failure is the
        machine's problem (reported with the others', nothing built)."""
        from orchestrator.backends import machinesinstall as inst

        mine = [m for m in machines.values() if not m.host.orchestrator]
        have = each(mine, lambda m: inst.installed(m, digest))
        todo = [m for m in mine if have.get(m.host.name) is not True]
        if todo:
            t0 = time.monotonic()
            progress.note(f"installing the orchestrator ({digest}) on {', '.join(m.host.name for m in todo)} ...")
            said, failed = inst.install([m.host for m in todo], digest, self.known_hosts, self.accept_new, progress)
            problems.update(failed)
            for name, text in said.items():
                progress.note(f"{name}: {text}")
            progress.note(f"installed in {time.monotonic() - t0:.1f} s")
        for m in mine:
            if m.host.name not in problems:
                m.host = m.host.model_copy(update={"orchestrator": inst.python_of(m.host, digest)})

    def up(self, plan: NetworkPlan, state: LabState, progress: Progress) -> None:
        experiment = Path(state.experiment)
        text = experiment.read_bytes()
        machines, reports = self.preflight(plan, state.shaper, progress)
        try:
            self._build(plan, state, progress, machines, reports, experiment.name, text)
        finally:
            for m in machines.values():
                m.close()

    def _build(self, plan: NetworkPlan, state: LabState, progress: Progress, machines: dict[str, Machine],
               reports: dict[str, dict], exp_name: str, exp_text: bytes) -> None:
        hosts = [m.host for m in machines.values()]
        order = [h.name for h in self._hosts()]
        hosts.sort(key=lambda h: order.index(h.name))
        sharding = shard_plan(plan, [h.name for h in hosts], node_weights(plan))
        underlay = {h.name: h.address for h in hosts}
        used = [s.machine for s in sharding.shards]
        idle = [h.name for h in hosts if h.name not in used]
        if idle:
            progress.note(f"machine(s) {', '.join(idle)} get no shard: the tree is too small to use them")
        first = reports[used[0]]
        state.shaper = first["shaper"]
        state.capabilities = {"machines": {n: {"kernel": reports[n].get("kernel"), "shaper": reports[n]["shaper"]}
                                           for n in used}}
        record = {"lab": state.lab, "known_hosts": str(self.known_hosts), "accept_new_host_keys": self.accept_new,
                  "hosts": [h.model_dump() for h in hosts if h.name in used], "sharding": sharding.to_json(),
                  "digest": code_digest(), "built": []}
        self._save_record(state, record)         # before anything is built: teardown knows where to look
        state.save()
        progress.note("shards: " + ", ".join(f"{s.machine} {len(s.nodes)} nodes ({s.members} members)"
                                             for s in sharding.shards)
                      + f"; {len(sharding.cut)} cut link(s) as VXLAN tunnels")
        digest = state.plan_digest or plan.digest()        # `up` saved the plan (and its digest) before this
        args_common = ["--name", state.lab, "--shaper", state.shaper]
        args_common += (["--strict-shaping"] if self.strict else []) + [a for s in self.sets for a in ("--set", s)]
        args_common += ["--dilation", self.dilation] if self.dilation else []

        def build(m: Machine) -> str:
            h = m.host
            part = part_of(plan, sharding, h.name, underlay, state.lab)
            doc = {**part.to_json(), "plan_digest": digest}
            d = h.lab_dir(state.lab)
            for name, data in ((exp_name, exp_text), ("part.json", json.dumps(doc).encode())):
                rc, _, err = m.call(mach.put_argv(h, d, name), stdin=data, timeout_s=60)
                if rc != 0:
                    raise BackendError(f"cannot write {d}/{name}: {err.strip()[-300:]}")
            rc, out, err = m.orchestrator(["up", f"{d}/{exp_name}", *args_common, "--part", f"{d}/part.json"])
            progress.advance("machines")
            if rc != 0:
                raise BackendError(err.strip()[-600:] or f"exit {rc}")
            return err.strip().splitlines()[-1] if err.strip() else ""

        record["built"] = used                   # `up --part` may have created something on each from here on
        self._save_record(state, record)
        progress.start("machines", len(used))
        t0 = time.monotonic()
        results = each([machines[n] for n in used], build)
        failed = {n: str(r) for n, r in results.items() if isinstance(r, Exception)}
        if failed:
            raise BackendError(f"{len(failed)} machine(s) could not build their part:\n"
                               + "\n".join(f"  {n}: {why}" for n, why in failed.items()))
        for n, line in results.items():
            progress.note(f"{n}: {line}")
        progress.note(f"parts built in {time.monotonic() - t0:.1f} s (the slowest machine's, with its SSH and files)")
        state.status = "up"
        state.save()

    # --- removal -------------------------------------------------------------------------------------------------
    def teardown(self, state: LabState, progress: Progress) -> None:
        record = self.load_record(state)
        if record is None:
            return                               # nothing was recorded: nothing was built
        hosts = {h["name"]: Host(**h) for h in record["hosts"]}
        todo = [hosts[n] for n in record.get("built", [])]
        if not todo:
            return
        machines, problems = connect(todo, Path(record["known_hosts"]), record.get("accept_new_host_keys", False))
        progress.start("machines", len(todo))

        def remove(m: Machine) -> None:
            rc, _, err = m.orchestrator(["teardown", state.lab], timeout_s=600)
            progress.advance("machines")
            if rc != 0 and mach.NOT_UP not in err:
                raise BackendError(err.strip()[-400:] or f"exit {rc}")
            m.call(mach.remove_argv(m.host, m.host.lab_dir(state.lab)), timeout_s=60)

        try:
            for n, r in each(list(machines.values()), remove).items():
                if isinstance(r, Exception):
                    problems[n] = str(r)
        finally:
            for m in machines.values():
                m.close()
        done = [n for n in record["built"] if n not in problems]
        record["built"] = [n for n in record["built"] if n in problems]
        self._save_record(state, record)
        if problems:
            raise BackendError(f"lab {state.lab}: {len(problems)} machine(s) still hold their part (the state "
                               f"is kept: run `orchestrator teardown {state.lab}` again):\n"
                               + "\n".join(f"  {n}: {why}" for n, why in problems.items())
                               + (f"\n  (removed from {', '.join(done)})" if done else ""))

    # --- a running lab -------------------------------------------------------------------------------------------
    def health(self, state: LabState) -> list[str]:
        record = self.load_record(state)
        if record is None:
            return [f"no machines record ({RECORD}) in the lab's state directory"]
        if state.status != "up":
            return []
        hosts = [Host(**h) for h in record["hosts"] if h["name"] in record.get("built", [])]
        machines, problems = connect(hosts, Path(record["known_hosts"]), False)
        try:
            answers = each(list(machines.values()), lambda m: m.orchestrator(["status", state.lab], timeout_s=120))
        finally:
            for m in machines.values():
                m.close()
        out = [f"{n}: {why}" for n, why in problems.items()]
        for n, r in answers.items():
            if isinstance(r, Exception):
                out.append(f"{n}: {r}")
            elif r[0] != 0:
                out.append(f"{n}: its part is not healthy: {(r[2] or r[1]).strip()[-300:]}")
        return out

    def machine_of(self, state: LabState, node: str) -> Host:
        record = self.load_record(state) or {}
        for s in (record.get("sharding") or {}).get("shards", []):
            if node in s["nodes"]:
                return next(Host(**h) for h in record["hosts"] if h["name"] == s["machine"])
        raise SpecError(f"lab {state.lab} has no node {node!r}")

    def _ssh(self, state: LabState, h: Host, tty: bool = False) -> list[str]:
        return openssh_argv(h, (self.load_record(state) or {}).get("known_hosts"), tty)

    def _in_node(self, state: LabState, node: str, argv: list[str], light: bool = False) -> tuple[Host, list[str]]:
        """`orchestrator exec LAB NODE -- ARGV` on the node's machine (this interpreter's path in ARGV becomes the
        machine's); `light`: through `orchestrator.nodeexec` (no CLI imports, no node names made addresses)."""
        h = self.machine_of(state, node)
        argv = [(h.orchestrator or sys.executable) if a == sys.executable else a for a in argv]
        if light:
            return h, mach.remote_argv(h, [state.lab, node, *argv], sys.executable, module="orchestrator.nodeexec")
        return h, mach.remote_argv(h, ["exec", state.lab, node, "--", *argv], sys.executable)

    def exec(self, state: LabState, node: str, argv: list[str]) -> int:
        """`argv` in `node`'s namespace on its machine (OpenSSH client with a terminal when this one has one)."""
        if argv[:1] == ["--"]:
            argv = argv[1:]
        if not argv:
            raise SpecError("exec: give the command after `--`")
        h, remote = self._in_node(state, node, argv)
        return subprocess.call([*self._ssh(state, h, tty=sys.stdin.isatty()), shlex.join(remote)], stdin=sys.stdin)

    def popen(self, state: LabState, node: str, argv: list[str], **kwargs) -> subprocess.Popen:
        """`argv` in `node` on its machine, over SSH (the probe's pings and rate sample: what they measure is
        timed inside the node, not through SSH; each starts only `orchestrator.nodeexec` there)."""
        h, remote = self._in_node(state, node, argv, light=True)
        ssh = self._ssh(state, h)
        if "stdin" not in kwargs:
            ssh.insert(1, "-n")
        return subprocess.Popen([*ssh, shlex.join(remote)], **kwargs)

    def underlay_rtts(self, state: LabState, plan: NetworkPlan) -> dict[str, float] | None:
        """Each cut link's underlay RTT: the median of 5 pings from the parent's machine to the child's underlay
        address (real ms)."""
        record = self.load_record(state) or {}
        cut = (record.get("sharding") or {}).get("cut_links") or []
        if not cut:
            return None
        hosts = {h["name"]: Host(**h) for h in record["hosts"]}
        machines, problems = connect([hosts[n] for n in sorted({c["parent_machine"] for c in cut})],
                                     Path(record["known_hosts"]), False)
        try:
            if problems:
                raise BackendError("cannot measure the underlay: " + "; ".join(f"{n}: {w}"
                                                                               for n, w in problems.items()))
            out = {}
            for c in cut:
                m, dst = machines[c["parent_machine"]], hosts[c["child_machine"]].address
                argv = ["ping", "-n", "-c", "5", "-i", "0.2", "-W", "2", dst]
                rc, text, err = m.call((["sudo", "-n", "--"] if m.host.become else []) + argv, timeout_s=30)
                rtts = sorted(float(x) for x in re.findall(r"time=([\d.]+) ms", text))
                if not rtts:
                    raise BackendError(f"machine {m.host.name} cannot ping {c['child_machine']}'s underlay address "
                                       f"{dst}: {(err or text).strip()[-200:]}")
                out[plan.link_of(c["parent"], c["child"]).id] = rtts[len(rtts) // 2]
            return out
        finally:
            for m in machines.values():
                m.close()

    # --- runs ----------------------------------------------------------------------------------------------------
    def check_run(self, exp, plan: NetworkPlan, lab: str, state: LabState | None) -> None:
        if state is None and self.inventory is None:
            raise SpecError("run --machines needs an inventory")
