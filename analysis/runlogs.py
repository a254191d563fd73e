"""Reading run directories and sweep directories in plain Python (no Spark), for the reproduction scripts
(analysis/figures_hyparview.py, figures_pbcast.py, figures_qsm.py, table1_hyparview.py) that compute a figure's
numbers over tens of runs from the event logs — a Spark pass per run costs minutes on a 2-core machine; each
script keeps one test that its numbers equal the Spark plug-in's on the same log."""
from __future__ import annotations

import csv
import json
import statistics
import sys
from pathlib import Path
from typing import Any, Callable


def read_events(run_dir: Path) -> tuple[dict, list[dict]]:
    """(manifest, every event of every member and the orchestrator)."""
    manifest = json.loads((run_dir / "manifest.json").read_text())
    events = []
    for f in sorted((run_dir / "events").glob("*.jsonl")):
        for line in f.read_text().splitlines():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue        # a member killed mid-write leaves a torn last line
    return manifest, events


def sweep_runs(sweep_dir: Path) -> list[Path]:
    """The run directory of every point of a sweep directory (points/<point>/<run>/), the newest completed one of a
    point run more than once; every point ever run counts, whichever `--only` the last `sweep` call had."""
    out = []
    for point in sorted((sweep_dir / "points").iterdir()):
        done = [d for d in sorted(point.iterdir()) if (d / "manifest.json").exists()
                and json.loads((d / "manifest.json").read_text()).get("status") == "completed"]
        if done:
            out.append(done[-1])
    return out


def run_dirs(paths: list[Path]) -> list[Path]:
    """Sweep directories (with points/) expanded to their runs (`sweep_runs`), run directories as given."""
    out: list[Path] = []
    for p in paths:
        out += sweep_runs(p) if (p / "points").is_dir() else [p]
    return out


def read_load(path: Path | None) -> list[tuple[float, float]]:
    """(unix time, 1-min load) from a `unix-time load1 load5 load15` log (`cat /proc/loadavg` every ~10 s)."""
    out = []
    if path and path.exists():
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 2:
                try:
                    out.append((float(parts[0]), float(parts[1])))
                except ValueError:
                    continue
    return out


def load_during(load: list[tuple[float, float]], start: float, end: float) -> tuple[float | None, float | None]:
    """(mean, max) of the 1-minute load average sampled in [start, end]."""
    xs = [v for t, v in load if start <= t <= end]
    return (statistics.fmean(xs), max(xs)) if xs else (None, None)


def write_csv(path: Path, rows: list[dict]) -> None:
    """Rows with possibly different keys as one CSV (the union of the keys in first-seen order; lists and dicts
    as JSON)."""
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, keys)
        w.writeheader()
        for r in rows:
            w.writerow({k: (json.dumps(v) if isinstance(v, (list, dict)) else v) for k, v in r.items()})


def analyse_completed(dirs: list[Path], analyse: Callable[[Path], dict[str, Any]]) -> list[dict[str, Any]]:
    """`analyse` of every run directory whose result's `status` is completed; the others named on stderr."""
    out = []
    for d in dirs:
        r = analyse(d)
        if r["status"] != "completed":
            print(f"{d}: status {r['status']}, left out", file=sys.stderr)
            continue
        out.append(r)
    return out


def pyplot():
    """matplotlib's pyplot on the Agg backend, imported when a figure is drawn (not at import)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt
