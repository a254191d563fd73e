"""Runs of the `direct` protocol on each transport (topologies/direct-*.yaml, shortened), shared by the tests
that read them: the node's transports here, the analysis' Spark-vs-tshark comparison in tests/analysis."""
from __future__ import annotations

from pathlib import Path

import yaml

from .helpers import REPO, cli, lab_namespaces, unique_lab

TRANSPORTS = ("udp", "tcp", "mcast")
DURATION_S = 10
STOP_S = 7           # the senders stop here: what is in flight arrives before the run ends


def direct_run(transport: str, tmp: Path, extra: dict | None = None) -> Path:
    """Run topologies/direct-<transport>.yaml with a unique lab name, 10 s long; returns the run directory.
    Asserts the run succeeded and left no namespace behind."""
    doc = yaml.safe_load((REPO / "topologies" / f"direct-{transport}.yaml").read_text())
    name = unique_lab("d")
    doc.update(name=name, duration=f"{DURATION_S}s")
    doc["workload"] = {**doc["workload"], "stop": f"{STOP_S}s"}
    doc.update(extra or {})
    f = tmp / f"{name}.yaml"
    f.write_text(yaml.safe_dump(doc))
    r = cli("run", str(f), "--out", str(tmp / "runs"), env_extra={"ORCHESTRATOR_STATE_DIR": str(tmp / "state")},
            timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert lab_namespaces(name) == [], "namespaces outlived the run"
    return Path(r.stdout.strip().splitlines()[-1])
