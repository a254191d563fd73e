"""Where a `make test` run's time went, from the file `TEST_TIMELINE=FILE make test` writes (tests/conftest.py: one
line per test, `worker start end share nodeid`): per worker and share, when it started and ended (seconds from the
run's first test) and how long its tests ran; the gaps are waits (the lab lock) and idle time.

    python benchmarks/suite_timeline.py FILE [--slowest 10]
"""
from __future__ import annotations

import argparse
from collections import defaultdict


def spans(lines: list[str]) -> tuple[dict[tuple[str, str], tuple[float, float, float]], list[tuple[float, str]]]:
    """(worker, share) -> (start, end, busy) in seconds from the first test's start; and (duration, module) per
    module, slowest first."""
    rows = [line.split(maxsplit=4) for line in lines if line.strip()]
    t0 = min(float(r[1]) for r in rows)
    out: dict[tuple[str, str], list[float]] = {}
    modules: dict[str, float] = defaultdict(float)
    for worker, start, end, share, nodeid in rows:
        s, e = float(start) - t0, float(end) - t0
        cur = out.setdefault((worker, share), [s, e, 0.0])
        cur[0], cur[1], cur[2] = min(cur[0], s), max(cur[1], e), cur[2] + e - s
        modules[nodeid.split("::", 1)[0]] += e - s
    return ({k: (v[0], v[1], v[2]) for k, v in out.items()},
            sorted(((d, m) for m, d in modules.items()), reverse=True))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("--slowest", type=int, default=10)
    args = ap.parse_args(argv)
    with open(args.file) as f:
        by_share, modules = spans(f.readlines())
    print("worker share        start    end   busy   (seconds from the first test)")
    for (worker, share), (s, e, busy) in sorted(by_share.items(), key=lambda kv: (kv[0][0], kv[1][0])):
        print(f"{worker:6} {share:11} {s:6.0f} {e:6.0f} {busy:6.0f}")
    print(f"last test ended at {max(e for _, e, _ in by_share.values()):.0f} s")
    for d, m in modules[:args.slowest]:
        print(f"{d:6.0f} s  {m}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
