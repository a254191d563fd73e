"""The demo on one machine and split over three (issue #35's acceptance; docs/machines.md), for `make repro-machines`:

    python -m experiments.machines_demo OUT [--experiment topologies/demo.yaml] [--repetitions 3] [--machines 3]

Two sweeps of the experiment, `--repetitions` runs each with the same seeds: OUT/one/<name> on this machine (the
Mininet backend) and OUT/split/<name> over `--machines` "machines" made on this one (network namespaces on a
bridge, each with its own sshd and underlay address, as tests/integration/test_machines.py makes them; each runs
this checkout's orchestrator with its own state directory). The split lab's links between machines are VXLAN tunnels
over that bridge, so what the comparison tests is the mechanism (sharding, tunnels, agents, clocks, collection),
not the gain of separate hardware. Both sweeps are resumable (finished points are skipped). Needs root; the
machines are removed at the end, however it ends.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def sweep(experiment: Path, out: Path, repetitions: int, shaper: str, extra: list[str],
          env: dict | None = None) -> None:
    argv = [sys.executable, "-m", "orchestrator.cli", "sweep", str(experiment), "--axis", "time.dilation=1",
            "--repetitions", str(repetitions), "--shaper", shaper, "--no-analyze", "--out", str(out), *extra]
    print("+ " + " ".join(argv), flush=True)
    subprocess.run(argv, check=True, env=env)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.machines_demo")
    ap.add_argument("out", type=Path)
    ap.add_argument("--experiment", type=Path, default=REPO / "topologies" / "demo.yaml")
    ap.add_argument("--repetitions", type=int, default=3)
    ap.add_argument("--machines", type=int, default=3)
    ap.add_argument("--shaper", default="delayline")
    a = ap.parse_args(argv)
    name = a.experiment.stem
    sweep(a.experiment, a.out / "one" / name, a.repetitions, a.shaper, [])

    sys.path.insert(0, str(REPO))
    from tests.integration.sshhosts import SshHosts

    machines = SshHosts(a.machines, share_mounts=True).start()
    work = Path(tempfile.mkdtemp(prefix="machines-demo-"))
    try:
        entries = [{"orchestrator": sys.executable, "state_dir": str(work / f"state-host{i}")}
                   for i in range(1, a.machines + 1)]
        inv = machines.inventory_file(work / "inventory.ini", entries)
        sweep(a.experiment, a.out / "split" / name, a.repetitions, a.shaper,
              ["--machines", str(inv), "--known-hosts", str(machines.known_hosts)],
              env={**os.environ, "ORCHESTRATOR_STATE_DIR": str(work / "state-controller")})
    finally:
        machines.close()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
