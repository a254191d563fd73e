"""`python -m orchestrator.machinecheck --shaper S` (and the CLI's hidden `machine-check`): what a machine of a lab
over several machines reports before anything is built (docs/machines.md): the code's digest, its uid, kernel,
the features a part needs, each tried for real in a throwaway namespace, and the shaper it would choose, as one
JSON line. The controller runs it on every machine at once over SSH; it imports only what the check needs (the
CLI's imports took 0.4 s of its 0.6 s, three machines sharing two cores made the checks 1.0 s of `up`)."""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CODE_ROOTS = (REPO / "orchestrator", REPO / "node_image" / "gossipnode")
VXLAN_PORT = 4789


def code_digest(roots: tuple[Path, ...] = CODE_ROOTS) -> str:
    """sha256 over the orchestrator's and the node's Python sources (paths and contents): two machines with the
    same digest plan and build a lab the same way."""
    h = hashlib.sha256()
    for root in roots:
        for f in sorted(root.rglob("*.py")):
            h.update(f"{root.name}/{f.relative_to(root)}".encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def local_check(shaper: str) -> dict:
    """What this machine reports (run there, as root): the code digest, uid, kernel, the features a part needs,
    each tried for real in a throwaway namespace, and the shaper it would choose."""
    from orchestrator.errors import ShapingError
    from orchestrator.shaping.probe import probe_kernel
    from orchestrator.state import state_root

    report: dict = {"digest": code_digest(), "uid": os.geteuid(), "kernel": platform.release(),
                    "features": {}, "errors": {}}
    if os.geteuid() != 0:
        return report
    ns = f"orch-check-{os.getpid()}"
    steps = [("netns", ["ip", "netns", "add", ns]),
             ("veth", ["ip", "-n", ns, "link", "add", "chk0", "type", "veth", "peer", "name", "chk1"]),
             ("vxlan", ["ip", "-n", ns, "link", "add", "chk2", "type", "vxlan", "id", "42", "dstport",
                        str(VXLAN_PORT), "nolearning"])]
    try:
        for feature, argv in steps:
            r = subprocess.run(argv, capture_output=True, text=True)
            report["features"][feature] = r.returncode == 0
            if r.returncode != 0:
                report["errors"][feature] = r.stderr.strip()[:200]
                break
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    try:    # cached per boot in the state directory, as `up` probes: the part's build reuses it
        report["shaper"] = probe_kernel(state_root()).choose(shaper)
    except ShapingError as exc:
        report["shaper_error"] = str(exc)
    return report


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m orchestrator.machinecheck", description=__doc__.split("\n\n")[0])
    from orchestrator.shaping.probe import SHAPERS

    ap.add_argument("--shaper", default="auto", choices=SHAPERS)
    print(json.dumps(local_check(ap.parse_args(argv).shaper)))


if __name__ == "__main__":
    main()
