"""`python -m gossipnode --config node.json`: run one member until SIGTERM/SIGINT, a control `stop`, or
`duration_s`. Exit status 0 after a clean stop, 2 for a bad config, 1 if the node cannot start.

`python -m gossipnode --configs a.json b.json ...` (or `--manifest members.txt`): packed members, N members in
this one process and one asyncio loop (see `packed.py`), until SIGTERM/SIGINT or every member has stopped.
Exit status 2 for a bad config (nothing runs), 1 if some member could not start (the others ran), else 0."""
from __future__ import annotations

import argparse
import asyncio
import resource
import sys
from pathlib import Path

from .config import NodeConfig, load_config
from .packed import FAILED, PackedHost, check_packable, read_manifest
from .runtime import NodeRuntime


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gossipnode", description="Run gossip protocol members.")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--config", type=Path, help="one member's config (JSON): one member, this process")
    which.add_argument("--configs", type=Path, nargs="+", metavar="CONFIG",
                       help="several members' configs: packed members, one process")
    which.add_argument("--manifest", type=Path,
                       help="a file listing members' configs (one path a line, or a JSON list): packed members")
    args = parser.parse_args(argv)
    if args.config is not None:
        return run_one(args.config)
    try:
        paths = args.configs if args.configs is not None else read_manifest(args.manifest)
        cfgs = [load_config(p) for p in paths]
        check_packable(cfgs)
    except ValueError as exc:
        print(f"gossipnode: {exc}", file=sys.stderr)
        return 2
    return run_packed(cfgs)


def run_one(path: Path) -> int:
    try:
        cfg = load_config(path)
    except ValueError as exc:
        print(f"gossipnode: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(NodeRuntime(cfg).run(handle_signals=True))
    except OSError as exc:
        print(f"gossipnode: {cfg.name}: cannot start: {exc}", file=sys.stderr)
        return 1
    return 0


def run_packed(cfgs: list[NodeConfig]) -> int:
    # each member holds a few descriptors (UDP, log, control; TCP connections, multicast pairs): lift the soft limit
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    host = PackedHost(cfgs)
    asyncio.run(host.run(handle_signals=True))
    return 1 if any(m.state == FAILED for m in host.members) else 0


if __name__ == "__main__":
    sys.exit(main())
