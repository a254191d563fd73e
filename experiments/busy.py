"""Run a command with busy loops beside it and its load logged (docs/virtual-time.md's "quiet" and "loaded"
conditions): `python -m experiments.busy [--loops 2] [--neighbours 0] [--load-log FILE] -- CMD ...`. The loops
(`python3 -c 'while True: pass'`, as a user's background work would be) start before the command and are killed when
it ends, however it ends; `--load-log` appends `unix-time load1 load5 load15` every 10 s while it runs (what
analysis.runlogs.read_load reads). The exit status is the command's.

`--neighbours K` starts K "noisy neighbours" instead of (or beside) the loops: processes at nice 19 that copy a
256 MB buffer over and over. At nice 19 they take little CPU time from the run (they run when a core is idle);
what they take is the memory bandwidth and the shared caches, as another tenant's job on the same physical host
would (docs/virtual-time.md, "What a budget cannot hold")."""
from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time
from pathlib import Path


NEIGHBOUR = "a = bytearray(256 << 20); b = bytearray(256 << 20)\nwhile True: b[:] = a"


def log_load(path: Path, stop: threading.Event, every_s: float = 10.0) -> None:
    with path.open("a") as f:
        while not stop.is_set():
            f.write(f"{time.time():.0f} {Path('/proc/loadavg').read_text().strip()}\n")
            f.flush()
            stop.wait(every_s)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.busy")
    ap.add_argument("--loops", type=int, default=2)
    ap.add_argument("--neighbours", type=int, default=0)
    ap.add_argument("--load-log", type=Path)
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if not cmd:
        ap.error("no command")
    stop = threading.Event()
    logger = None
    if a.load_log:
        a.load_log.parent.mkdir(parents=True, exist_ok=True)
        logger = threading.Thread(target=log_load, args=(a.load_log, stop), daemon=True)
        logger.start()
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(a.loops)]
    loops += [subprocess.Popen(["nice", "-n", "19", sys.executable, "-c", NEIGHBOUR]) for _ in range(a.neighbours)]
    try:
        return subprocess.call(cmd)
    finally:
        for p in loops:
            p.kill()
            p.wait()
        stop.set()
        if logger is not None:
            logger.join()


if __name__ == "__main__":
    sys.exit(main())
