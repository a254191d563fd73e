"""`python -m orchestrator.nodeexec LAB NODE ARGV...`: ARGV inside NODE's network namespace on this machine,
replacing this process: the non-interactive `orchestrator exec` that a controller runs over SSH for each command of
a probe on a lab over several machines (docs/machines.md). It imports only the lab's state: the CLI's imports took
0.4 s each time (orchestrator/machinecheck.py's measurement), and a group probe runs three commands per member
(receiver, capture, stop)."""
from __future__ import annotations

import os
import sys

from orchestrator.errors import LabNotFound
from orchestrator.state import load_state, ns_name

USAGE = "usage: python -m orchestrator.nodeexec LAB NODE COMMAND [ARG...]"


def node_argv(lab: str, node: str, argv: list[str]) -> list[str]:
    """The command line that runs `argv` in `node` of `lab` (a lab of namespaces on this machine); LookupError
    naming what is missing otherwise."""
    state = load_state(lab)
    ns = ns_name(lab, node)
    if ns not in state.namespaces:
        raise LookupError(f"node {node!r} of lab {lab!r} is not on this machine")
    return ["ip", "netns", "exec", ns, *argv]


def main(args: list[str]) -> int:
    if len(args) < 3:
        print(USAGE, file=sys.stderr)
        return 2
    lab, node, *argv = args
    try:
        full = node_argv(lab, node, argv)
    except (LabNotFound, LookupError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    os.execvp(full[0], full)
    return 127                                  # not reached: execvp raises if it cannot run `ip`


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
