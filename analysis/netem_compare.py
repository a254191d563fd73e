"""The same small experiments under netem and under the delay line (issue #37; docs/netem.md): `make repro-netem`
runs each protocol family's small experiment 3 times with each shaper; this puts the key metrics side by side.

    python -m analysis.netem_compare SWEEP_DIR... --out DIR     every run -> DIR/netem_compare_runs.csv, the table
                                                                 -> DIR/netem_compare.md (from the CSV alone)
    python -m analysis.netem_compare --tables --out DIR          the table again from the committed CSV

The per-run numbers are the virtual-time check's (analysis.virtual_time.transparency_runs: each protocol's
run_values from the event logs, the sweep's verdicts and judges), with the shaper each run used (its manifest).
Agreement is the issue's criterion: the two 95 % confidence intervals overlap; Welch's p is shown beside it.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from analysis.doc import fmt
from analysis.figlib import number, read_csv, write_csv
from analysis.stats import mean_ci, welch
from analysis.virtual_time import COMMON, KEY_METRICS, _json, transparency_runs

NAME = "netem_compare"
SHAPERS = ("netem", "delayline")


def compare_runs(sweeps: list[Path], master: str = "local[2]") -> list[dict]:
    """One row per point of the sweeps, as transparency_runs, with the shaper and the dilation of each run."""
    rows = []
    for root in sweeps:
        for r in transparency_runs([root], master):
            m = _json(root / r["run_dir"] / "manifest.json") if r.get("run_dir") else {}
            rows.append({"shaper": m.get("shaper"), **r})
    return rows


def overlap(ma, ca, mb, cb) -> bool | None:
    """Do the intervals mean ± half-width overlap? None when either has no interval."""
    if None in (ma, ca, mb, cb):
        return None
    return ma - ca <= mb + cb and mb - cb <= ma + ca


def compare_table(rows: list[dict]) -> str:
    out = ["| experiment | metric | netem (VM): mean ± 95 % CI (runs) | delay line: mean ± 95 % CI (runs) | "
           "difference | Welch p | CIs overlap |", "|---|---|---|---|---|---|---|"]
    agree = total = 0
    excluded = [r for r in rows if r.get("excluded")]
    for exp in sorted({r["experiment"] for r in rows}):
        rs = [r for r in rows if r["experiment"] == exp and not r.get("excluded")]
        protocol = next((r["protocol"] for r in rs if r.get("protocol")), "")
        for k in (*KEY_METRICS.get(protocol, ()), *COMMON):
            a = [x for r in rs if r["shaper"] == "netem" and (x := number(r.get(k))) is not None]
            b = [x for r in rs if r["shaper"] == "delayline" and (x := number(r.get(k))) is not None]
            if not a and not b:
                continue
            (ma, ca), (mb, cb) = mean_ci(a), mean_ci(b)
            w = welch(a, b)
            o = overlap(ma, ca, mb, cb)
            if o is None and a and b and max(a) == min(a) == max(b) == min(b):
                verdict = "yes (identical)"
            else:
                verdict = "–" if o is None else "yes" if o else "**no**"
            agree += verdict.startswith("yes")
            total += verdict != "–"
            out.append(f"| {exp} | {k} | {fmt(ma)} ± {fmt(ca)} ({len(a)}) | {fmt(mb)} ± {fmt(cb)} ({len(b)}) | "
                       f"{fmt(w['diff'])} | {fmt(w['p'])} | {verdict} |")
    out += ["", f"{agree} of {total} metrics agree (the 95 % confidence intervals overlap); difference = netem minus "
            "delay line; – : no interval on a side (fewer than 2 runs, or the metric undefined)."]
    out += ["", "Runs per experiment and shaper: dilation, and the run judges' verdicts (faithful or not):", ""]
    for exp in sorted({r["experiment"] for r in rows}):
        for sh in SHAPERS:
            rs = [r for r in rows if r["experiment"] == exp and r["shaper"] == sh and not r.get("excluded")]
            if rs:
                ns = sorted({fmt(number(r["dilation"])) for r in rs})
                faithful = sum(1 for r in rs if r.get("verdict") == "faithful")
                out.append(f"- {exp}, {sh}: {len(rs)} runs at dilation {', '.join(ns)}, {faithful} faithful")
    if excluded:
        out += ["", "Runs left out of the means (kept in the CSV):", ""]
        out += [f"- {r['experiment']} ({r['shaper']}), {r['point']}: {r['excluded']}" for r in excluded]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m analysis.netem_compare", description=__doc__.splitlines()[0])
    ap.add_argument("sweeps", nargs="*", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--tables", action="store_true", help="only the table again, from the committed CSV")
    ap.add_argument("--master", default="local[2]")
    a = ap.parse_args(argv)
    csv = a.out / f"{NAME}_runs.csv"
    if not a.tables:
        if not a.sweeps:
            ap.error("no sweep directories (or --tables)")
        a.out.mkdir(parents=True, exist_ok=True)
        write_csv(csv, compare_runs(a.sweeps, a.master))
    (a.out / f"{NAME}.md").write_text(compare_table(read_csv(csv, strings=True)))
    print(a.out / f"{NAME}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
