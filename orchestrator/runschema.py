"""The run directory's schema (docs/architecture.md §6): its files and the manifest's keys, written by
orchestrator/rundir.py (and the runner, the drivers) and read by analysis/rundir.py — one definition both import.
Pure constants; no orchestrator runtime behind it, so the analysis may import it.
"""
from __future__ import annotations

MANIFEST = "manifest.json"
PLAN = "plan.json"                       # the network plan, as planned (what a backend learned: manifest `realised`)
FIDELITY = "fidelity.json"               # the fidelity probe (`orchestrator probe --json`)
JUDGES = "judges.json"                   # the fidelity judges, written when the run ends (orchestrator.fidelity)
HOST_SPEED = "hostspeed.jsonl"           # the host's work per CPU-second over the run (orchestrator.hostspeed)
LOG = "orchestrator.log"
CONFIGS = "configs"                      # <member>.json: each member's node config, as the node read it
EVENTS = "events"                        # <member>.jsonl: each member's event log; orchestrator.jsonl
LOGS = "logs"                            # <member>.log, pack-K.log: the node processes' output
PCAPS = "pcaps"                          # <node>-<interface>.pcap
TC = "tc"                                # <node>.json: qdisc statistics; delayline.json: the delay line's
PACKS = "packs"                          # pack-K.txt: the configs of the members of process K (packed runs)
SUBDIRS = (CONFIGS, EVENTS, LOGS, PCAPS, TC)
ORCHESTRATOR_EVENTS = f"{EVENTS}/orchestrator.jsonl"
DELAYLINE_STATS = f"{TC}/delayline.json"

# manifest["status"]: starting -> running -> completed | interrupted (<signal>) | failed: ... | shaper failed: ...
# (a run whose orchestrator died is marked `interrupted: orchestrator gone` by the next teardown)
STARTING, RUNNING, COMPLETED = "starting", "running", "completed"
ORCHESTRATOR_GONE = "interrupted: orchestrator gone"
UNFINISHED = (STARTING, RUNNING)

# Every key of manifest.json, and what it holds. Times: `started_at`/`ended_at` are real unix seconds; `t0_unix` is
# virtual (as every event's ts), `t0_real_unix` real; `time` says how the two relate.
MANIFEST_KEYS = {
    "run_id": "the run directory's name: <lab>-<UTC time>",
    "experiment_file": "the experiment file as given",
    "spec": "the validated experiment (JSON)",
    "seed": "the experiment's seed (--seed applied)",
    "backend": "mininet | docker | hosts | machines",
    "lab": "the lab's name",
    "plan_digest": "the plan's digest (plan.json's)",
    "realised": "what the backend learned that the plan does not say (hosts: each member's real address), or null",
    "versions": "python, kernel, packages, the node image",
    "started_at": "real unix time the run began",
    "ended_at": "real unix time it ended",
    "status": "starting | running | completed | interrupted (...) | failed: ... | shaper failed: ...",
    "packing": "how the members ran: mode, members per process, processes, the reason",
    "time": "virtual time: dilation, epoch, requested, reasons, inputs (docs/virtual-time.md)",
    "cpu_budget": "the members' CPU budgets and what each process got over the run (or enforced: false)",
    "warnings": "the run's own warnings (e.g. budgets above the planned cores)",
    "shaper": "the shaper the lab uses", "capabilities": "the kernel probe's findings",
    "shaping_warnings": "what the shaper cannot emulate",
    "fidelity": "the fidelity probe's summary", "shaping_parameters": "what each link parameter really gets",
    "start": "the common start: margin_s, and when the start requests were done (requests_done_s)",
    "t0_unix": "the common start, virtual unix seconds", "t0_real_unix": "the common start, real unix seconds",
    "schedule": "the schedule's operations applied, lag median and max (virtual ms)",
    "captures": "per capture: node, interface, file, packets captured, kernel drops",
    "member_cpu": "the member processes' CPU (lifetime, and run_* from the common start)",
    "host_speed": "the machine's work per CPU-second over the run (orchestrator.hostspeed; local backends)",
    "clock_offsets_s": "hosts, machines: each node's clock minus the controller's",
    "clock": "hosts, machines: how they were measured",
    "machines": "machines: the shards, the cut links, which machines stopped, their clock offsets at the end",
    "hosts": "hosts: per host its member, ssh and address", "deploy_s": "hosts: how long the deployment took",
}
