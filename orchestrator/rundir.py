"""The run directory (docs/architecture.md §6), the same for every backend and driver:

    manifest.json  plan.json  fidelity.json  orchestrator.log
    configs/<node>.json  events/<node>.jsonl  events/orchestrator.jsonl  logs/<node>.log
    pcaps/<node>-<if>.pcap  tc/<node>.json
    packs/pack-K.txt  logs/pack-K.log          (packed members: the configs of pack K, its process's output)

The manifest's `packing` says how the members ran: {"mode": "process" | "packed", "members_per_process",
"processes", "reason"} (orchestrator/backends/packing.py decides it; benchmarks/bench_scale.py reads it).

`RunDir` creates it, writes the plan and the configs, keeps the manifest (written atomically), the orchestrator's
log and its event log; `versions()` is what every manifest records about the software. No backend code here.
"""
from __future__ import annotations

import json
import os
import platform
from datetime import datetime, timezone
from pathlib import Path

from gossipnode.vclock import VirtualClock
from orchestrator import runschema as schema
from orchestrator.errors import SpecError

SUBDIRS = schema.SUBDIRS


def versions() -> dict:
    import importlib.metadata as md

    out = {"python": platform.python_version(), "kernel": platform.release()}
    for pkg in ("gossip-testbed", "pydantic", "mininet", "pyroute2"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    return out


def check_out_dir(out: Path) -> None:
    """`--out` must be (or be creatable inside) a writable directory: checked before anything is built."""
    out = Path(out)
    probe = out
    while not probe.exists() and probe.parent != probe:
        if probe.is_symlink():
            raise SpecError(f"--out {out}: {probe} is a dangling symbolic link")
        probe = probe.parent
    if not probe.is_dir():
        raise SpecError(f"--out {out}: {probe} is not a directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise SpecError(f"--out {out}: {probe} is not writable")


def new_run_id(lab: str, now: datetime | None = None) -> str:
    return f"{lab}-{(now or datetime.now(timezone.utc)).strftime('%Y%m%dT%H%M%SZ')}"


def tail(path: Path, lines: int = 5) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:]) or "(empty log)"
    except OSError:
        return "(no log)"


class RunDir:
    def __init__(self, path: Path, out_option: Path | None = None, clock: VirtualClock | None = None):
        self.path = Path(path)
        self.manifest: dict = {}
        self.clock = clock or VirtualClock()      # the orchestrator's records are in the lab's virtual time
        try:
            for sub in SUBDIRS:
                (self.path / sub).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SpecError(f"--out {out_option or self.path.parent}: cannot create the run directory: "
                            f"{exc.strerror}") from None

    def __truediv__(self, other: str) -> Path:
        return self.path / other

    def write_plan(self, plan_dict: dict) -> None:
        (self.path / schema.PLAN).write_text(json.dumps(plan_dict, indent=1, sort_keys=True))

    def write_configs(self, configs: dict[str, dict]) -> None:
        for name, cfg in configs.items():
            (self.path / schema.CONFIGS / f"{name}.json").write_text(json.dumps(cfg, indent=1))

    def write_manifest(self, **update) -> None:
        """The one writer of manifest.json (atomic): the run calls it once at each state change (starting, running,
        its end) with what it learned since; the keys are runschema.MANIFEST_KEYS."""
        unknown = set(update) - set(schema.MANIFEST_KEYS)
        if unknown:
            raise ValueError(f"manifest keys not in the run directory's schema: {sorted(unknown)}")
        self.manifest.update(update)
        tmp = self.path / (schema.MANIFEST + ".tmp")
        tmp.write_text(json.dumps(self.manifest, indent=1, default=str))
        os.replace(tmp, self.path / schema.MANIFEST)

    def log(self, msg: str) -> None:
        with open(self.path / schema.LOG, "a") as f:
            f.write(f"{datetime.now(timezone.utc).isoformat()} {msg}\n")

    def record(self, event: dict) -> None:
        with open(self.path / schema.ORCHESTRATOR_EVENTS, "a") as f:
            f.write(json.dumps({"ts": self.clock.now(), "node": "orchestrator", **event}) + "\n")
