"""The node driver of the hosts backend (docs/architecture.md §6): the same run as on Mininet, on real hosts.

    (up.yml by the backend) -> stage.yml (configs, agent config) -> paramiko sessions, clock offsets
    -> start.yml (captures, then nodes) -> schedule over paramiko -> stop.yml -> collect.yml

Every host's clock offset to the controller is measured at run start over its agent session and recorded in
manifest.json (`clock_offsets_s`: member -> host clock - controller clock); the analysis subtracts it from that
member's timestamps. Link operations are not in OPS: between real hosts the tree's links are the real network.
The nodes start the protocol as soon as they run (no common start: COMMON_START is False).
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from orchestrator.backends.base import NodeDriver, StopReport
from orchestrator.backends.local import tcpdump_counts
from orchestrator.errors import SpecError
from orchestrator.hosts import deploy, render
from orchestrator.hosts.ansible import HostsError
from orchestrator.hosts.hostsfile import Host
from orchestrator.hosts.ssh import Sessions
from orchestrator.schedule import OpKind


class HostsDriver(NodeDriver):
    OPS = frozenset({OpKind.CRASH, OpKind.START, OpKind.STOP_SIGNAL, OpKind.CONT_SIGNAL,
                     OpKind.WORKLOAD_START, OpKind.WORKLOAD_STOP, OpKind.GMS_VIEW})
    WHY_UNSUPPORTED = "link actions: the links between real hosts are the real network"
    COMMON_START = False

    def __init__(self, backend, ctx):
        super().__init__(backend, ctx)
        self.record = deploy.load_record(ctx.state.dir) or {}
        self.hosts: list[Host] = deploy.hosts_of(self.record) if self.record else []
        self.by_member = {h.member: h for h in self.hosts}
        self.data_dir = ctx.run.path / "ansible"
        self.files = self.data_dir / "files"
        self.actx = None
        self.sessions: Sessions | None = None
        self.fields: dict = {}
        self._started = False

    def configure(self, configs: dict[str, dict]) -> dict[str, dict]:
        lab = self.ctx.state.lab
        self.files.mkdir(parents=True, exist_ok=True)
        try:
            out = {m: render.node_config(cfg, self.by_member[m], self.hosts, lab) for m, cfg in configs.items()}
        except ValueError as exc:
            raise SpecError(str(exc)) from None
        for m, cfg in out.items():
            deploy.stage_tarball(self.files, m, cfg, render.agent_config(self.by_member[m], lab, cfg["control"]))
        self.configs = out
        return out

    def manifest_fields(self) -> dict:
        return {"hosts": [{"name": h.name, "member": h.member, "ssh": f"{h.user}@{h.ssh_host}:{h.ssh_port}",
                           "address": h.address} for h in self.hosts],
                "deploy_s": self.record.get("deploy_s"), **self.fields}

    def prepare(self) -> None:
        ctx, run = self.ctx, self.ctx.run
        self.actx = deploy.context(self.record, ctx.plan, self.data_dir, run_dir=run.path, files=self.files,
                                   capture=ctx.exp.capture.interfaces != "none", start_members=ctx.first)
        self.actx.check(self.actx.run("stage.yml", ctx.progress), "staging the run (playbooks/stage.yml)")
        ctx.progress.note("opening the control sessions (paramiko) and measuring clock offsets ...")
        self.sessions = Sessions(self.hosts, ctx.state.lab, Path(self.record["known_hosts"]),
                                 self.record["accept_new_host_keys"])
        offsets = {m: s.measure_clock() for m, s in self.sessions.by_member.items()}
        self.fields["clock"] = {"method": "paramiko agent round trips; offset = host time - midpoint of the "
                                          "round trip with the smallest RTT",
                                "members": {m: {"host": self.by_member[m].name, **o.to_json()}
                                            for m, o in offsets.items()}}
        self.fields["clock_offsets_s"] = {m: o.offset_s for m, o in offsets.items()}
        for m, o in sorted(offsets.items()):
            run.log(f"clock {m} ({self.by_member[m].name}): offset {o.offset_s * 1000:+.3f} ms, "
                    f"rtt {o.rtt_s * 1000:.3f} ms")

    def start_captures(self) -> int:
        return 0        # start.yml starts each host's capture right before its node (start_nodes)

    def start_nodes(self, names: list[str]) -> dict[str, dict]:
        if not self._started:           # the first members: start.yml (captures, then nodes)
            self._started = True
            self.actx.check(self.actx.run("start.yml", self.ctx.progress),
                            "starting captures and nodes (playbooks/start.yml)")
            return {}
        replies: dict[str, dict] = {}
        by_incarnation: dict[int, list[str]] = {}        # a restart's config gets its incarnation (run_at_once)
        for n in names:
            by_incarnation.setdefault(int(self.configs.get(n, {}).get("incarnation", 0)), []).append(n)
        for k, ns in sorted(by_incarnation.items()):
            replies.update(self.sessions.each(ns, {"op": "start", **({"incarnation": k} if k else {})}))
        return replies

    def await_ready(self, names: list[str], timeout_s: float) -> None:
        time.sleep(0.5)
        dead = {}
        for m in names:
            r = self.sessions.by_member[m].request({"op": "alive"})
            if not (r.get("ok") and r["alive"].get(m)):
                dead[self.by_member[m].name] = f"{m} exited right after it started (see logs/{m}.log)"
        if dead:
            raise HostsError("nodes did not start:", dead)

    def signal(self, names: list[str], sig: int, wait: bool = False) -> dict[str, dict]:
        return self.sessions.each(list(names), {"op": "signal", "sig": int(sig)})

    @classmethod
    def can_isolate(cls, backend) -> bool:
        return True

    def cut_off(self, names: list[str], on: bool) -> dict[str, str]:
        """A silent crash's cut on the members' hosts (render.silent_rules), through their agents."""
        replies = self.sessions.each(list(names), {"op": "isolate", "on": on})
        return {m: r.get("error", "no reply") for m, r in replies.items() if not r.get("ok")}

    def control_senders(self, request: dict) -> dict[str, dict]:
        senders = [m for m, c in self.configs.items() if c["senders"] and c["id"] in c["senders"]]
        return self.sessions.each(senders, {"op": "control", "request": request})

    def control_members(self, request: dict, skip: tuple[str, ...] = ()) -> dict[str, dict]:
        replies = self.sessions.each([m for m in self.configs if m not in skip], {"op": "control", "request": request})
        return {m: r for m, r in replies.items() if not r.get("ok")}

    def check(self) -> None:
        return None

    def stop(self) -> StopReport:
        run = self.ctx.run
        if self.sessions is not None:
            self.reconnect_all()      # while the agents are there (teardown deletes what a lost session left)
            self.sessions.close()
        for book in ("stop.yml", "collect.yml") if self.actx is not None else ():
            try:
                res = self.actx.run(book, self.ctx.progress)
                for h, why in sorted(res.failures.items()):
                    run.log(f"{book} on {h}: {why}")
                if book == "collect.yml":
                    self._unpack(res)
            except Exception as exc:  # noqa: BLE001 - must not hide the run's own outcome
                run.log(f"{book} failed: {exc}")
        if self.actx is not None:
            self.actx.close()
        captures = []
        if self.ctx.exp.capture.interfaces != "none":
            for m in self.configs:
                f = run.path / "logs" / f"{m}-tcpdump.log"
                n, d = tcpdump_counts(f.read_text(errors="replace")) if f.exists() else (None, None)
                captures.append({"node": m, "ifname": "any", "file": f"pcaps/{m}-any.pcap", "captured": n,
                                 "dropped_by_kernel": d})
        return StopReport(captures=captures)

    def _unpack(self, res) -> None:
        """The collected tarballs into the run directory; tc statistics from the hosts' reports."""
        run = self.ctx.run
        for h in self.hosts:
            tarball = self.data_dir / "collected" / f"{h.member}.tar.gz"
            if tarball.exists():
                names = deploy.unpack_collected(tarball, run.path, h.member)
                run.log(f"collected from {h.name}: {', '.join(names)}")
            tc = res.reports.get(h.name, {}).get("tc")
            if tc is not None:
                (run.path / "tc" / f"{h.member}.json").write_text(json.dumps(tc, indent=1))

