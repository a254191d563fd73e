"""The same small experiments under netem and under the delay line (issue #37; docs/netem.md): `make repro-netem`
runs each protocol family's small experiment 3 times with each shaper; this puts the key metrics side by side.

    python -m analysis.netem_compare SWEEP_DIR... --out DIR     every run -> DIR/netem_compare_runs.csv, the table
                                                                 -> DIR/netem_compare.md (from the CSV alone)
    python -m analysis.netem_compare SWEEP_DIR... --merge --out DIR   the same, keeping the CSV's other runs (a
                                                                 run of these sweeps replaces its row)
    python -m analysis.netem_compare --tables --out DIR          the table again from the committed CSV

The main table compares netem (in the VM, dilation 5) with the delay line at dilation 1, as `make repro-netem` runs
them. Delay-line runs at another dilation (`make repro-netem-isolate`: the delay line here at the VM's dilation 5)
are kept out of it and fill a second table that separates the differences between the sides, the shaper, the
machine and the dilation: per metric netem at N = 5, the delay line at N = 5 in the VM and here and at N = 1 here,
and which neighbours agree. Netem runs at another dilation (`make repro-netem-isolate NCI_N=10`: both shapers in
the VM at a dilation where the delay line too is faithful there) start a chain of their own, one table each.

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
    """One row per point of the sweeps, as transparency_runs, with the shaper, the dilation and the kernel (which
    machine: the VM's or the host's) of each run."""
    rows = []
    for root in sweeps:
        for r in transparency_runs([root], master):
            m = _json(root / r["run_dir"] / "manifest.json") if r.get("run_dir") else {}
            rows.append({"shaper": m.get("shaper"), **r, "kernel": (m.get("versions") or {}).get("kernel")})
    return rows


def _run_key(r: dict) -> tuple:
    return (r.get("shaper"), r.get("experiment"), r.get("point"), number(r.get("dilation")), r.get("kernel"))


def merged(old: list[dict], new: list[dict]) -> list[dict]:
    """The committed runs with the new ones: a new run of the same shaper, experiment, point, dilation and kernel
    replaces the old row; every other old row stays, in its place."""
    keys = {_run_key(r) for r in new}
    return [r for r in old if _run_key(r) not in keys] + new


def overlap(ma, ca, mb, cb) -> bool | None:
    """Do the intervals mean ± half-width overlap? None when either has no interval."""
    if None in (ma, ca, mb, cb):
        return None
    return ma - ca <= mb + cb and mb - cb <= ma + ca


def vm_kernels(rows: list[dict]) -> set[str]:
    """The kernels the netem runs ran on (the VM's): a delay-line run on one of them ran in the VM too."""
    return {r["kernel"] for r in rows if r.get("shaper") == "netem" and r.get("kernel")}


def main_netem_dilation(rows: list[dict]) -> float | None:
    """The main table's netem dilation: the smallest any netem run used (`make repro-netem`'s 5)."""
    return min((n for r in rows if r.get("shaper") == "netem" and (n := number(r.get("dilation")))), default=None)


def side(r: dict, vm: set[str] = frozenset(), main_n: float | None = None) -> str:
    """netem (at `main_n`, or at any dilation when it is None: the main table's side), netem@N at another;
    delayline (at dilation 1 on the host: the main table's side); delayline@N on the host, and delayline@N (VM) in
    the netem VM (its kernel one of `vm`): the isolation tables' sides."""
    n = number(r.get("dilation"))
    if r.get("shaper") == "netem":
        return "netem" if main_n is None or n == main_n else f"netem@{fmt(n)}"
    if r.get("shaper") != "delayline":
        return r.get("shaper") or ""
    in_vm = bool(r.get("kernel")) and r["kernel"] in vm
    if n in (None, 1) and not in_vm:
        return "delayline"
    return f"delayline@{fmt(n)}" + (" (VM)" if in_vm else "")


def verdict_of(a: list[float], b: list[float]) -> str:
    """yes / **no** (the 95 % intervals overlap or not), yes (identical) for equal constants, – without intervals."""
    (ma, ca), (mb, cb) = mean_ci(a), mean_ci(b)
    o = overlap(ma, ca, mb, cb)
    if o is None and a and b and max(a) == min(a) == max(b) == min(b):
        return "yes (identical)"
    return "–" if o is None else "yes" if o else "**no**"


def _chain(head: str, n: float | None, labels: set[str]) -> list[str]:
    """The netem side `head` (at dilation `n`), the delay line in the VM and on the host at that dilation, at
    dilation 1 on the host: one factor changes per step. Only the sides there are runs of."""
    chain = [head, f"delayline@{fmt(n)} (VM)", f"delayline@{fmt(n)}", "delayline"]
    return [x for x in chain if x in labels]


def _in_vm(label: str) -> bool:
    return label.startswith("netem") or label.endswith("(VM)")


def _step(a: str, b: str, n: dict[str, float | None]) -> str:
    """What differs between two neighbouring sides of the chain (netem runs in the VM; `n`: each side's dilation)."""
    parts = ["shaper"] if a.startswith("netem") else []
    if _in_vm(a) and not _in_vm(b):
        parts.append("machine")
    if n.get(a) != n.get(b):
        parts.append("dilation")
    return " + ".join(parts) or "none"


def _cell(key: str, m: float | None, c: float | None, n: int) -> str:
    """mean ± half-width (runs); a time in seconds in milliseconds, to 0.01 ms (a rate, `_per_s`, as it is)."""
    if key.endswith("_s") and not key.endswith("_per_s") and m is not None:
        return f"{m * 1000:.2f} ± {'–' if c is None else f'{c * 1000:.2f}'} ms ({n})"
    return f"{fmt(m)} ± {fmt(c)} ({n})"


def _cause(v: dict[str, list[float]], steps: list[tuple[str, str]], ok: list[str], n: dict) -> str:
    """The step whose two sides disagree, when it is the only one; when several do, the one that goes the main
    difference's way by at least all of it while the others go against it (its cause, the rest offsetting it)."""
    bad = [(a, b) for (a, b), o in zip(steps, ok) if o == "**no**"]
    if not bad:
        return "not isolated (no single step differs)"
    if len(bad) == 1 and all(o != "–" for o in ok):
        return f"the {_step(*bad[0], n)}"
    m = {sd: mean_ci(xs)[0] for sd, xs in v.items()}
    total = m["delayline"] - m[steps[0][0]]
    moves = {(a, b): m[b] - m[a] for a, b in bad}
    along = [s for s, d in moves.items() if d * total > 0]
    if len(along) == 1 and abs(moves[along[0]]) >= abs(total) and all(d * total < 0 for s, d in moves.items()
                                                                       if s != along[0]):
        others = ", ".join(_step(a, b, n) for a, b in bad if (a, b) != along[0])
        return f"the {_step(*along[0], n)} (the {others} step goes against it)"
    return "not isolated (" + ", ".join(_step(a, b, n) for a, b in bad) + " differ)"


def isolation_table(rows: list[dict]) -> str:
    """The experiments with delay-line runs beside the main table's two sides (the delay line at the netem runs'
    dilation, on the host and in the VM): each key metric along the chain netem (VM, N = 5) -> delay line in the VM
    (N = 5) -> delay line on the host (N = 5) -> delay line on the host (N = 1), one factor changing per step (the
    shaper, the machine, the dilation), and whether each step's two sides agree. A disagreement between the chain's
    ends is isolated when exactly one step disagrees: that step's factor is its cause. Netem runs at another
    dilation N start a chain of their own (netem@N -> delayline@N (VM) -> delayline@N -> delayline), one table."""
    rows = [r for r in rows if not r.get("excluded")]
    vm, main_n = vm_kernels(rows), main_netem_dilation(rows)
    labels = {side(r, vm, main_n) for r in rows}
    heads = sorted({(number(r.get("dilation")), side(r, vm, main_n)) for r in rows if r.get("shaper") == "netem"},
                   key=lambda x: (x[0] or 0))
    return "".join(_isolation_chain(rows, vm, main_n, _chain(head, n, labels)) for n, head in heads)


def _isolation_chain(rows: list[dict], vm: set[str], main_n: float | None, chain: list[str]) -> str:
    if not any(x.startswith("delayline@") for x in chain):
        return ""
    steps = list(zip(chain, chain[1:]))
    n = {sd: max((number(r.get("dilation")) or 1.0 for r in rows if side(r, vm, main_n) == sd), default=None)
         for sd in chain}
    extra = [x for x in chain if x.startswith("delayline@")]
    exps = sorted({r["experiment"] for r in rows if side(r, vm, main_n) in extra})
    head, end = chain[0], chain[-1]
    title = ("The main table's two sides apart (issue #37's isolating runs" if head == "netem" else
             f"At dilation {fmt(n[head])}: both shapers in the VM, the delay line here at the same dilation and at 1 "
             f"(issue #37's isolating runs")
    out = ["", title + "; mean ± 95 % CI (runs); a step agrees when its two sides' intervals overlap):", "",
           "| experiment | metric | " + " | ".join(chain) + " | " +
           " | ".join(f"{a} -> {b} ({_step(a, b, n)})" for a, b in steps) +
           f" | cause of a {head} / {end} disagreement |",
           "|---|---|" + "---|" * (len(chain) + len(steps) + 1)]
    for exp in exps:
        rs = [r for r in rows if r["experiment"] == exp]
        protocol = next((r["protocol"] for r in rs if r.get("protocol")), "")
        for k in (*KEY_METRICS.get(protocol, ()), *COMMON):
            v = {sd: [x for r in rs if side(r, vm, main_n) == sd and (x := number(r.get(k))) is not None]
                 for sd in chain}
            if not any(v.values()):
                continue
            ok = [verdict_of(v[a], v[b]) for a, b in steps]
            cause = ""
            if verdict_of(v[head], v[end]) == "**no**":
                cause = _cause(v, steps, ok, n)
            cells = " | ".join(_cell(k, m, c, len(v[sd])) for sd in chain for m, c in [mean_ci(v[sd])])
            out.append(f"| {exp} | {k} | {cells} | " + " | ".join(ok) + f" | {cause} |")
    return "\n".join(out) + "\n"


def side_by_side(rows: list[dict], side_of, a_side: str, b_side: str) -> tuple[list[str], int, int]:
    """Per experiment and key metric, the runs of side `a_side` beside those of `b_side` (`side_of(row)`; excluded
    rows left out): table lines `| experiment | metric | a | b | difference | Welch p | CIs overlap |`, how many
    metrics agree, and of how many with intervals on both sides."""
    out: list[str] = []
    agree = total = 0
    for exp in sorted({r["experiment"] for r in rows}):
        rs = [r for r in rows if r["experiment"] == exp and not r.get("excluded")]
        protocol = next((r["protocol"] for r in rs if r.get("protocol")), "")
        for k in (*KEY_METRICS.get(protocol, ()), *COMMON):
            a = [x for r in rs if side_of(r) == a_side and (x := number(r.get(k))) is not None]
            b = [x for r in rs if side_of(r) == b_side and (x := number(r.get(k))) is not None]
            if not a and not b:
                continue
            (ma, ca), (mb, cb) = mean_ci(a), mean_ci(b)
            w = welch(a, b)
            verdict = verdict_of(a, b)
            agree += verdict.startswith("yes")
            total += verdict != "–"
            out.append(f"| {exp} | {k} | {fmt(ma)} ± {fmt(ca)} ({len(a)}) | {fmt(mb)} ± {fmt(cb)} ({len(b)}) | "
                       f"{fmt(w['diff'])} | {fmt(w['p'])} | {verdict} |")
    return out, agree, total


def compare_table(rows: list[dict]) -> str:
    iso_rows, vm, main_n = rows, vm_kernels(rows), main_netem_dilation(rows)
    rows = [r for r in rows if side(r, vm, main_n) in SHAPERS]
    out = ["| experiment | metric | netem (VM): mean ± 95 % CI (runs) | delay line: mean ± 95 % CI (runs) | "
           "difference | Welch p | CIs overlap |", "|---|---|---|---|---|---|---|"]
    excluded = [r for r in iso_rows if r.get("excluded")]
    lines, agree, total = side_by_side(rows, lambda r: r["shaper"], "netem", "delayline")
    out += lines
    out += ["", f"{agree} of {total} metrics agree (the 95 % confidence intervals overlap); difference = netem minus "
            "delay line; – : no interval on a side (fewer than 2 runs, or the metric undefined)."]
    out += ["", "Runs per experiment and shaper: dilation, and the run judges' verdicts (faithful or not):", ""]
    for exp in sorted({r["experiment"] for r in iso_rows}):
        for sh in (*SHAPERS, *sorted({side(r, vm, main_n) for r in iso_rows} - set(SHAPERS))):
            rs = [r for r in iso_rows if r["experiment"] == exp and side(r, vm, main_n) == sh
                  and not r.get("excluded")]
            if rs:
                ns = sorted({fmt(number(r["dilation"])) for r in rs})
                faithful = sum(1 for r in rs if r.get("verdict") == "faithful")
                out.append(f"- {exp}, {sh}: {len(rs)} runs at dilation {', '.join(ns)}, {faithful} faithful")
    if excluded:
        out += ["", "Runs left out of the means (kept in the CSV):", ""]
        out += [f"- {r['experiment']} ({side(r, vm, main_n)}), {r['point']}: {r['excluded']}" for r in excluded]
    return "\n".join(out) + "\n" + isolation_table(iso_rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m analysis.netem_compare", description=__doc__.splitlines()[0])
    ap.add_argument("sweeps", nargs="*", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--tables", action="store_true", help="only the table again, from the committed CSV")
    ap.add_argument("--merge", action="store_true",
                    help="keep the CSV's runs of other sweeps (a run of these sweeps replaces its row)")
    ap.add_argument("--master", default="local[2]")
    a = ap.parse_args(argv)
    csv = a.out / f"{NAME}_runs.csv"
    if not a.tables:
        if not a.sweeps:
            ap.error("no sweep directories (or --tables)")
        a.out.mkdir(parents=True, exist_ok=True)
        new = compare_runs(a.sweeps, a.master)
        write_csv(csv, merged(read_csv(csv, strings=True), new) if a.merge and csv.exists() else new)
    (a.out / f"{NAME}.md").write_text(compare_table(read_csv(csv, strings=True)))
    print(a.out / f"{NAME}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
