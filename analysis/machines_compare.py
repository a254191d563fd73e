"""The same experiment on one machine and split over several (issue #35; docs/machines.md): `make repro-machines`
runs the demo 3 times each way; this puts the key metrics side by side.

    python -m analysis.machines_compare SWEEP_DIR... --out DIR   every run -> DIR/machines_compare_runs.csv, the
                                                                  table -> DIR/machines_compare.md (from the CSV)
    python -m analysis.machines_compare --tables --out DIR        the table again from the committed CSV

A run's side is its manifest's backend and, split, how many machines held a shard ("1 machine" for the Mininet
backend, "3 machines" for `--machines` with three shards). The per-run numbers are the virtual-time check's
(analysis.virtual_time.transparency_runs: each protocol's run_values from the event logs, with the run judges'
verdicts); agreement is the issue's criterion: the two 95 % confidence intervals overlap (Welch's p beside it).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from analysis.doc import fmt
from analysis.figlib import number, read_csv, write_csv
from analysis.netem_compare import side_by_side
from analysis.virtual_time import _json, transparency_runs

NAME = "machines_compare"


def side_of(manifest: dict) -> str:
    if manifest.get("backend") != "machines":
        return "1 machine"
    shards = ((manifest.get("machines") or {}).get("shards") or {})
    return f"{len(shards)} machines"


def compare_runs(sweeps: list[Path]) -> list[dict]:
    """One row per point of the sweeps (transparency_runs) with its side, its cut links and clock offsets."""
    rows = []
    for root in sweeps:
        for r in transparency_runs([root]):
            m = _json(root / r["run_dir"] / "manifest.json") if r.get("run_dir") else {}
            offs = [abs(o) for o in (m.get("clock_offsets_s") or {}).values()]
            rows.append({"side": side_of(m), **r, "backend": m.get("backend"),
                         "cut_links": (m.get("machines") or {}).get("cut_links"),
                         "max_abs_clock_offset_ms": round(max(offs) * 1000, 3) if offs else None,
                         "warnings": "; ".join(m.get("warnings") or []) or None})
    return rows


def compare_table(rows: list[dict]) -> str:
    sides = sorted({r["side"] for r in rows}, key=lambda s: int(s.split()[0]))
    if len(sides) != 2:
        return f"two sides needed (one machine and split), the runs have: {sides}\n"
    one, split = sides
    out = [f"| experiment | metric | {one}: mean ± 95 % CI (runs) | {split}: mean ± 95 % CI (runs) | difference | "
           "Welch p | CIs overlap |", "|---|---|---|---|---|---|---|"]
    lines, agree, total = side_by_side(rows, lambda r: r["side"], one, split)
    out += lines
    out += ["", f"{agree} of {total} metrics agree (the 95 % confidence intervals overlap); difference = {one} minus "
            f"{split}; – : no interval on a side (fewer than 2 runs, or the metric undefined).", "",
            "Runs (the run judges' verdicts; the split runs' cut links and largest clock offset):", ""]
    for r in rows:
        extra = (f", {r['cut_links']} cut links, clock offsets ≤ {fmt(number(r['max_abs_clock_offset_ms']))} ms"
                 if r.get("backend") == "machines" else "")
        out.append(f"- {r['experiment']}, {r['side']}, {r['point']}: {r.get('status')}, {r.get('verdict')}{extra}"
                   + (f"; left out: {r['excluded']}" if r.get("excluded") else "")
                   + (f"; warnings: {r['warnings']}" if r.get("warnings") else ""))
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m analysis.machines_compare", description=__doc__.splitlines()[0])
    ap.add_argument("sweeps", nargs="*", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--tables", action="store_true", help="only the table again, from the committed CSV")
    a = ap.parse_args(argv)
    csv = a.out / f"{NAME}_runs.csv"
    if not a.tables:
        if not a.sweeps:
            ap.error("no sweep directories (or --tables)")
        a.out.mkdir(parents=True, exist_ok=True)
        write_csv(csv, compare_runs(a.sweeps))
    (a.out / f"{NAME}.md").write_text(compare_table(read_csv(csv, strings=True)))
    print(a.out / f"{NAME}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
