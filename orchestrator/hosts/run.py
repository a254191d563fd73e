"""`orchestrator run --backend hosts`: the same run directory as on Mininet (docs/architecture.md §6), on real hosts.

    up.yml (prepare + shaping) -> stage.yml (configs, agent config) -> paramiko sessions, clock offsets
    -> start.yml (captures, then nodes) -> schedule over paramiko -> stop.yml -> collect.yml -> teardown.yml

Every host's clock offset to the controller is measured at run start over its agent session and recorded in
manifest.json (`clock_offsets_s`: member -> host clock - controller clock); the analysis subtracts it from that
member's timestamps. Link actions (link, partition, heal) are refused: between real hosts the tree's links are
the real network.
"""
from __future__ import annotations

import json
import re
import signal
import time
from datetime import datetime, timezone
from pathlib import Path

from orchestrator import lab as labmod
from orchestrator.backends.base import NullProgress, Progress
from orchestrator.errors import OrchestratorError, SpecError
from orchestrator.hosts import deploy, render
from orchestrator.hosts.ansible import HostsError
from orchestrator.hosts.hostsfile import Host, assign_members, load_hosts
from orchestrator.hosts.ssh import Sessions
from orchestrator.schedule import Op, expand, parse_schedule

LINK_OPS = ("link_set", "link_cut", "link_restore")
SIGNALS = {"crash": signal.SIGKILL, "stop_signal": signal.SIGSTOP, "cont_signal": signal.SIGCONT}


def check_schedule(timeline) -> None:
    for op in timeline.ops:
        if op.kind in LINK_OPS:
            a = timeline.actions[op.index]
            raise SpecError(f"schedule[{op.index}] ({a.action}): link actions are not supported on the hosts "
                            "backend (the links between real hosts are the real network)")


def realised_plan(plan_dict: dict, hosts: list[Host]) -> dict:
    """plan.json for the run directory: the members' addresses are their hosts' (what the pcaps show)."""
    addr = {h.member: h.address for h in hosts}
    out = json.loads(json.dumps(plan_dict))
    for n in out["nodes"]:
        if n["name"] in addr:
            n["address"] = addr[n["name"]]
    out["hosts"] = {h.member: {"host": h.name, "address": h.address} for h in hosts}
    return out


def _tcpdump_counts(text: str) -> tuple[int | None, int | None]:
    cap = re.search(r"(\d+) packets? captured", text)
    drop = re.search(r"(\d+) packets? dropped by kernel", text)
    return (int(cap.group(1)) if cap else None), (int(drop.group(1)) if drop else None)


def run_hosts(experiment_path: str | Path, opts, progress: Progress | None = None,
              variables: dict | None = None) -> Path:
    from orchestrator.nodeconfig import node_configs
    from orchestrator.runner import _versions

    progress = progress or NullProgress()
    bo = dict(getattr(opts, "backend_options", None) or {})
    # 1. Everything that can be checked, before anything is created.
    if opts.lab:
        from orchestrator.plan import build_plan
        from orchestrator.spec import load_experiment
        from orchestrator.state import load_state

        exp = load_experiment(experiment_path, variables)
        state = load_state(opts.lab)
        if state.backend != "hosts":
            raise SpecError(f"lab {opts.lab!r} runs on backend {state.backend!r}, not hosts")
        plan = state.load_plan()
        if opts.seed is not None:
            exp = exp.model_copy(update={"seed": opts.seed})
        if build_plan(exp).digest() != state.plan_digest:
            raise SpecError(f"lab {opts.lab!r} was built from a different plan than {experiment_path}")
        lab_name, built, prep = opts.lab, False, None
        hosts = deploy.hosts_of(deploy.load_record(state.dir))
    else:
        prep = labmod.prepare(experiment_path, opts.name, variables)
        exp, plan, lab_name, built = prep.experiment, prep.plan, prep.lab, True
        if opts.seed is not None:
            exp = exp.model_copy(update={"seed": opts.seed})
        if not bo.get("inventory"):
            raise SpecError("--backend hosts needs --inventory HOSTS_FILE")
        hosts = assign_members(load_hosts(bo["inventory"]), [m.name for m in plan.members])
    timeline = expand(parse_schedule(exp.schedule), plan, exp.duration_s, exp.seed)
    check_schedule(timeline)
    run_id = f"{lab_name}-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}"
    run_dir = (opts.out / run_id).resolve()
    base = node_configs(exp, plan, run_dir, Path("/nonexistent"))
    by_member = {h.member: h for h in hosts}
    try:
        configs = {m: render.node_config(cfg, by_member[m], hosts, lab_name) for m, cfg in base.items()}
    except ValueError as exc:
        raise SpecError(str(exc)) from None

    # 2. The run directory (the configs as the hosts use them), then the hosts.
    for sub in ("configs", "events", "logs", "pcaps", "tc"):
        (run_dir / sub).mkdir(parents=True, exist_ok=True)
    data_dir = run_dir / "ansible"
    files = data_dir / "files"
    files.mkdir(parents=True, exist_ok=True)
    (run_dir / "plan.json").write_text(json.dumps(realised_plan(plan.to_dict(), hosts), indent=1, sort_keys=True))
    for m, cfg in configs.items():
        (run_dir / "configs" / f"{m}.json").write_text(json.dumps(cfg, indent=1))
        deploy.stage_tarball(files, m, cfg, render.agent_config(by_member[m], lab_name, cfg["control"]))
    manifest = {
        "run_id": run_id, "experiment_file": str(experiment_path), "spec": exp.model_dump(mode="json"),
        "seed": exp.seed, "backend": "hosts",
        "plan_digest": plan.digest() if built else state.plan_digest, "lab": lab_name,
        "versions": _versions(), "started_at": time.time(), "status": "starting",
        "hosts": [{"name": h.name, "member": h.member, "ssh": f"{h.user}@{h.ssh_host}:{h.ssh_port}",
                   "address": h.address} for h in hosts],
    }

    def write_manifest() -> None:
        (run_dir / "manifest.json").write_text(json.dumps(manifest, indent=1, default=str))

    def log(msg: str) -> None:
        with open(run_dir / "orchestrator.log", "a") as f:
            f.write(f"{datetime.now(timezone.utc).isoformat()} {msg}\n")

    def record(event: dict) -> None:
        with open(run_dir / "events" / "orchestrator.jsonl", "a") as f:
            f.write(json.dumps({"ts": time.time(), "node": "orchestrator", **event}) + "\n")

    write_manifest()
    t_up = time.monotonic()
    if built:
        state = labmod.up(prep, "hosts", opts.shaper, opts.strict, str(experiment_path), progress,
                          backend_options={**bo, "strict": opts.strict, "data_dir": data_dir,
                                           "snaplen": exp.capture.snaplen})
    rec = deploy.load_record(state.dir)
    manifest.update(shaper=state.shaper, capabilities=state.capabilities, shaping_warnings=state.warnings,
                    deploy_s=round(time.monotonic() - t_up, 2) if built else rec.get("deploy_s"))
    log(f"run {run_id}: lab {lab_name} ({'built' if built else 'reused'}) on {len(hosts)} hosts, "
        f"shaper {state.shaper}")
    first = [m.name for m in plan.members if m.name not in timeline.joiners]
    ctx = None
    sessions: Sessions | None = None
    applied: list[dict] = []
    stopped = "completed"
    try:
        ctx = deploy.context(rec, plan, data_dir, run_dir=run_dir, files=files,
                             capture=exp.capture.interfaces != "none", start_members=first)
        # 3. Stage files, open the control sessions, measure clocks, start captures and nodes, run the schedule.
        ctx.check(ctx.run("stage.yml", progress), "staging the run (playbooks/stage.yml)")
        progress.note("opening the control sessions (paramiko) and measuring clock offsets ...")
        sessions = Sessions(hosts, lab_name, Path(rec["known_hosts"]), rec["accept_new_host_keys"])
        offsets = {m: s.measure_clock() for m, s in sessions.by_member.items()}
        manifest["clock"] = {"method": "paramiko agent round trips; offset = host time - midpoint of the "
                                       "round trip with the smallest RTT",
                             "members": {m: {"host": by_member[m].name, **o.to_json()} for m, o in offsets.items()}}
        manifest["clock_offsets_s"] = {m: o.offset_s for m, o in offsets.items()}
        for m, o in sorted(offsets.items()):
            log(f"clock {m} ({by_member[m].name}): offset {o.offset_s * 1000:+.3f} ms, rtt {o.rtt_s * 1000:.3f} ms")
        write_manifest()
        ctx.check(ctx.run("start.yml", progress), "starting captures and nodes (playbooks/start.yml)")
        time.sleep(0.5)
        dead = {by_member[m].name: f"{m} exited right after it started (see logs/{m}.log)"
                for m, alive in _alive(sessions, first).items() if not alive}
        if dead:
            raise HostsError("nodes did not start:", dead)
        t0 = time.monotonic()
        manifest.update(status="running", t0_unix=time.time())
        write_manifest()
        record({"event": "run_started", "members": first, "duration_s": exp.duration_s})
        _execute(timeline, sessions, configs, exp.duration_s, t0, progress, applied, record)
    except KeyboardInterrupt:
        stopped = "interrupted (Ctrl-C)"
        raise
    except Exception as exc:
        stopped = f"failed: {exc}"
        raise
    finally:
        # 4. Stop, collect, tear down: on success, error and Ctrl-C alike; failures are logged per host.
        progress.note(f"stopping ({stopped}) and collecting ...")
        if sessions is not None:
            sessions.close()
        for book in ("stop.yml", "collect.yml") if ctx is not None else ():
            try:
                res = ctx.run(book, progress)
                for h, why in sorted(res.failures.items()):
                    log(f"{book} on {h}: {why}")
                if book == "collect.yml":
                    _unpack(res, run_dir, hosts, log)
            except Exception as exc:  # noqa: BLE001 - must not hide the run's own outcome
                log(f"{book} failed: {exc}")
        if ctx is not None:
            ctx.close()
        record({"event": "run_stopped", "reason": stopped})
        captures = []
        if exp.capture.interfaces != "none":
            for m in configs:
                f = run_dir / "logs" / f"{m}-tcpdump.log"
                n, d = _tcpdump_counts(f.read_text(errors="replace")) if f.exists() else (None, None)
                captures.append({"node": m, "ifname": "any", "file": f"pcaps/{m}-any.pcap", "captured": n,
                                 "dropped_by_kernel": d})
        lags = sorted(a["lag_ms"] for a in applied)
        rtts = sorted(r for a in applied for r in a.get("rtt_ms", {}).values())
        manifest.update(
            status=stopped, ended_at=time.time(), captures=captures,
            schedule={"actions": len(timeline.actions), "applied_ops": len(applied),
                      "lag_ms_median": lags[len(lags) // 2] if lags else None, "lag_ms_max": lags[-1] if lags else None,
                      "agent_rtt_ms_median": rtts[len(rtts) // 2] if rtts else None,
                      "agent_rtt_ms_max": rtts[-1] if rtts else None})
        write_manifest()
        if built and not opts.keep:
            progress.note("tearing down ...")
            try:
                labmod.teardown(lab_name, progress)
            except OrchestratorError as exc:
                log(f"teardown failed: {exc}")
                if stopped == "completed":
                    raise
                progress.note(f"WARNING: teardown failed too: {exc}")   # keep the run's own error
    return run_dir


def _unpack(res, run_dir: Path, hosts: list[Host], log) -> None:
    """The collected tarballs into the run directory; tc statistics from the hosts' reports."""
    for h in hosts:
        tarball = run_dir / "ansible" / "collected" / f"{h.member}.tar.gz"
        if tarball.exists():
            names = deploy.unpack_collected(tarball, run_dir, h.member)
            log(f"collected from {h.name}: {', '.join(names)}")
        tc = res.reports.get(h.name, {}).get("tc")
        if tc is not None:
            (run_dir / "tc" / f"{h.member}.json").write_text(json.dumps(tc, indent=1))


def _alive(sessions: Sessions, members: list[str]) -> dict[str, bool]:
    out = {}
    for m in members:
        r = sessions.by_member[m].request({"op": "alive"})
        out[m] = bool(r.get("ok") and r["alive"].get(m))
    return out


def _apply(op: Op, sessions: Sessions, configs: dict[str, dict]) -> dict[str, dict]:
    if op.kind in SIGNALS:
        return sessions.each(list(op.targets), {"op": "signal", "sig": int(SIGNALS[op.kind])})
    if op.kind == "start":
        return sessions.each(list(op.targets), {"op": "start"})
    if op.kind in ("workload_start", "workload_stop"):
        senders = [m for m, c in configs.items() if c["senders"] and c["id"] in c["senders"]]
        return sessions.each(senders, {"op": "control",
                                       "request": {"cmd": "workload", "op": op.kind.split("_")[1]}})
    raise OrchestratorError(f"operation {op.kind} is not supported on the hosts backend")


def _execute(timeline, sessions: Sessions, configs, duration_s: float, t0: float, progress: Progress,
             applied: list[dict], record) -> None:
    ops = list(timeline.ops)
    progress.start("experiment (s)", int(duration_s))
    shown = 0
    while True:
        now = time.monotonic() - t0
        while ops and ops[0].t <= now:
            op = ops.pop(0)
            before = time.monotonic() - t0
            replies = _apply(op, sessions, configs)
            entry = {"event": "action_applied", "index": op.index, "action": timeline.actions[op.index].action,
                     "op": op.kind, "planned_s": op.t, "actual_s": before, "lag_ms": (before - op.t) * 1000,
                     "targets": list(op.targets), "links": [],
                     "rtt_ms": {m: r.get("rtt_s", 0) * 1000 for m, r in replies.items()},
                     "pids": {m: r.get("pid") for m, r in replies.items()}}
            errors = {m: r.get("error") for m, r in replies.items() if not r.get("ok")}
            if errors:
                entry["errors"] = errors
            applied.append(entry)
            record(entry)
            rtt = max(entry["rtt_ms"].values(), default=0)
            progress.note(f"t={before:6.1f}s {entry['action']:<9} {op.kind:<12} {','.join(op.targets)[:60]} "
                          f"(lag {entry['lag_ms']:.1f} ms, over ssh {rtt:.1f} ms)"
                          + (f" ERRORS {errors}" if errors else ""))
        if int(now) > shown:
            progress.advance("experiment (s)", min(int(now), int(duration_s)) - shown)
            shown = min(int(now), int(duration_s))
        if now >= duration_s:
            return
        nxt = ops[0].t if ops else duration_s
        time.sleep(max(0.0, min(nxt - now, 0.2, duration_s - now)))
