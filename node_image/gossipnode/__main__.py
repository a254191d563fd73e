"""`python -m gossipnode --config node.json`: run one member until SIGTERM/SIGINT, a control `stop`, or
`duration_s`. Exit status 0 after a clean stop, 2 for a bad config, 1 if the node cannot start."""
from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from .config import load_config
from .runtime import NodeRuntime


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gossipnode", description="Run one gossip protocol member.")
    parser.add_argument("--config", required=True, type=Path, help="node config (JSON)")
    args = parser.parse_args(argv)
    try:
        cfg = load_config(args.config)
    except ValueError as exc:
        print(f"gossipnode: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(NodeRuntime(cfg).run(handle_signals=True))
    except OSError as exc:
        print(f"gossipnode: {cfg.name}: cannot start: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
