"""Seed 001's vsync measurements: Figure 10 (vsync's throughput and view-change time against the group size) and
Table 2 (latency at the sender against the leader committee's size k), from runs of topologies/pbcast-fig10.yaml
and pbcast-table2.yaml (and their -sweep files). Its command line is figures_pbcast_more's (`python -m
analysis.figures_pbcast_more {fig10|table2}`): one command line for seed 001's four kinds.

Every per-run number is the vsync plug-in's (`run_values`, analysis/protocols/vsync.py and pbcast.py: the
definitions are there); this script declares which (`COLUMNS`: its CSV column <- the run_values key), the point of
each kind (`POINT`), and aggregates, tabulates and draws:

- **fig10**: the throughput at the unperturbed members (Figure 1's 500 ms windows, and per 1 s windows to the last
  send; the median over the members neither sender nor disturbed), the offered and the sender's measured rate,
  the sends refused, the view change's duration at the leader (to the decision, and to its installing the
  Newview), the members dropped.
- **table2**: the latency at the sender (Gseq Req to its own in-order delivery: Table 2's) mean, max, median and
  p99 in ms, the Gseq Ack's, the group throughput; beside them the paper's values.

    .venv/bin/python -m analysis.figures_vsync {fig10|table2} SWEEP_DIR|RUN_DIR [...] --out DIR [--load LOADLOG]
    .venv/bin/python -m analysis.figures_vsync tables {fig10|table2} docs/results/<dir> [--out DIR] [--figures]

Each writes runs.csv (every run: figlib's identity — seed, status, the judges' verdict, the load average with
--load, `excluded` and why — and `COLUMNS`), summary.csv / summary.json (per point: mean, 95 % CI half-width
(Student t) and n of every value; for a maximum also the largest run's), tables.md (with the runs left out and why)
and a figure (fig10.png, table2.png). `tables` writes the summaries and tables again from a results directory's
runs.csv alone.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from analysis import figlib
from analysis.figtables import ci_cell, md_rows, show, summarise

KINDS = ("fig10", "table2")
# Table 2 of seed 001: k -> (mean latency at the sender ms, max ms, group throughput multicasts/s)
PAPER_TABLE2 = {1: (1.39, 192.09, 97.64), 2: (1.68, 27.56, 98.32), 3: (2.16, 15.02, 97.93), 4: (3.31, 157.56, 98.33)}
COLUMNS = (("protocol", "protocol"), ("members", "members"), ("offered_per_s", "offered_per_s"), ("loss", "loss"),
           ("packing", "packing"), ("k", "k"), ("buffer", "buffer"), ("ack_defer", "ack_defer"),
           ("ack_wait", "ack_wait"), ("throughput", "throughput_unperturbed_per_s"),
           ("throughput_1s", "throughput_unperturbed_1s_per_s"), ("sent", "data_messages"),
           ("sent_per_s", "sent_per_s"), ("unperturbed", "unperturbed_members"), ("refused", "refused"),
           ("refused_counter", "refused_counter"), ("view_changes", "view_changes"), ("vc_mean_s", "vc_mean_s"),
           ("vc_max_s", "vc_max_s"), ("vc_install_mean_s", "vc_install_mean_s"),
           ("vc_install_max_s", "vc_install_max_s"), ("dropped", "dropped"), ("dropped_n", "dropped_n"),
           ("own_mean_ms", "own_mean_ms"), ("own_max_ms", "own_max_ms"), ("own_n", "own_n"),
           ("own_median_ms", "own_median_ms"), ("own_p99_ms", "own_p99_ms"), ("gseq_mean_ms", "gseq_mean_ms"),
           ("gseq_max_ms", "gseq_max_ms"))
POINT = {"fig10": ("members", "offered_per_s", "buffer", "ack_defer", "packing"),
         "table2": ("k", "offered_per_s", "buffer", "ack_defer")}
VALUES = {
    "fig10": ("throughput_1s", "throughput", "sent_per_s", "refused", "vc_mean_s", "vc_max_s", "vc_install_mean_s",
              "dropped_n", "load_mean"),
    "table2": ("own_mean_ms", "own_max_ms", "own_median_ms", "own_p99_ms", "gseq_mean_ms", "gseq_max_ms",
               "throughput_1s", "throughput", "sent_per_s", "refused", "vc_mean_s", "load_mean"),
}


def values(kind: str = "fig10") -> figlib.Values:
    """The values function of both kinds: the vsync plug-in's run_values as `COLUMNS` names them."""
    return figlib.projection(COLUMNS, ("vsync",), "vsync")


def aggregate(kind: str, rows: list[dict]) -> list[dict]:
    return summarise(rows, POINT[kind], VALUES[kind], largest_max=True)


def _order(v: Any) -> tuple:
    return (v is None, str(type(v)), v if v is not None else 0)


def seconds(v: Any) -> float | None:
    """'500ms' / '1s' / 0.5 -> seconds (None stays None): the experiment files' durations (us, ms, s)."""
    x = figlib.as_number(v)
    if x is None and v is not None:
        raise ValueError(f"{v!r}: not a duration (us, ms, s)")
    return x


def vc_model(n: int, defer_s: float) -> float:
    """A view change's expected duration when it ends at the last of the n - 1 other members' AckPrefreshviews,
    each deferred by an independent U(0, defer_s) (the network's and the members' own delays left out): the
    expected maximum of n - 1 uniforms, defer_s (n - 1) / n."""
    return defer_s * (n - 1) / n


# --- figures ------------------------------------------------------------------------------------------------------

def fig10_figure(agg: list[dict], path: Path) -> None:
    """Figure 10: (a) throughput at the unperturbed members (per 1 s and Figure 1's 500 ms windows) and the
    offered rate against n; (b) the view change's duration at the leader against n; a line per offered rate."""
    plt = figlib.pyplot()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10.0, 4.2))
    lines = sorted({(a.get("offered_per_s"), a.get("packing")) for a in agg}, key=lambda x: tuple(map(_order, x)))
    for j, (rate, packing) in enumerate(lines):
        pts = sorted((a for a in agg if (a.get("offered_per_s"), a.get("packing")) == (rate, packing)),
                     key=lambda a: a["members"])
        rate_label = f"{rate}, {packing}" if packing not in (None, "process") else rate
        ns = [a["members"] for a in pts]
        for key, m, ls in (("throughput_1s", "o", "-"), ("throughput", "s", ":")):
            q = [a for a in pts if a.get(key) is not None]
            a1.errorbar([a["members"] for a in q], [a[key] for a in q], yerr=[a[f"{key}_ci95"] or 0 for a in q],
                        marker=m, linestyle=ls, capsize=3, color=f"C{j}",
                        label=f"offered {rate_label}: {'1 s windows' if key == 'throughput_1s' else '500 ms windows'}")
        if rate:
            a1.plot(ns, [rate] * len(ns), color=f"C{j}", linestyle="--", alpha=0.5, linewidth=1)
        q = [a for a in pts if a.get("vc_mean_s") is not None]
        a2.errorbar([a["members"] for a in q], [a["vc_mean_s"] for a in q], yerr=[a["vc_mean_s_ci95"] or 0 for a in q],
                    marker="o", capsize=3, color=f"C{j}", label=f"offered {rate_label}: decided (mean)")
        q = [a for a in pts if a.get("vc_max_s") is not None]
        a2.plot([a["members"] for a in q], [a["vc_max_s"] for a in q], marker="^", linestyle=":", color=f"C{j}",
                label=f"offered {rate_label}: max per run (mean)")
    defers = {seconds(a.get("ack_defer")) for a in agg} - {None}
    ns_all = sorted({a["members"] for a in agg})
    if len(defers) == 1 and ns_all:
        d = defers.pop()
        xs = list(range(min(ns_all), max(ns_all) + 1))
        a2.plot(xs, [vc_model(n, d) for n in xs], color="grey", linestyle="--",
                label=f"model: the last of n - 1 acks deferred U(0, {d:g} s): {d:g} (n - 1) / n")
    a1.set_xlabel("group size n")
    a1.set_ylabel("throughput at unperturbed members (msgs/s)")
    a1.set_title("Figure 10a: vsync (k = 1) throughput", fontsize=9)
    a1.set_ylim(bottom=0)
    a2.set_xlabel("group size n")
    a2.set_ylabel("view change duration at the leader (s)")
    a2.set_title("Figure 10b: view change time", fontsize=9)
    a2.set_ylim(bottom=0)
    for ax in (a1, a2):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    figlib.save(fig, path)


def table2_figure(agg: list[dict], path: Path) -> None:
    """Table 2 as a plot: latency at the sender (Gseq Req to its own delivery; the Gseq Ack's is the same with one
    sender) against k, mean and median over the multicasts with 95 % CI bars over the runs, one line per ack
    deferral; the paper's average beside it."""
    plt = figlib.pyplot()
    fig, ax = plt.subplots(figsize=(6.0, 4.2))
    pts = sorted((a for a in agg if a.get("k") is not None), key=lambda a: a["k"])
    defers = sorted({a.get("ack_defer") for a in pts}, key=str)
    for i, d in enumerate(defers):
        for key, m, what, dx in (("own_mean_ms", "o", "mean", 0.0), ("own_median_ms", "s", "median", 0.06)):
            q = [a for a in pts if a.get(key) is not None and a.get("ack_defer") == d]
            if not q:
                continue
            dx += 0.12 * i
            ax.errorbar([a["k"] + dx for a in q], [a[key] for a in q], yerr=[a[f"{key}_ci95"] or 0 for a in q],
                        marker=m, capsize=3, linestyle="-" if what == "mean" else ":",
                        label=f"ours, {what} (acks deferred up to {d}; drawn {dx:.2f} right)")
    ks = sorted(PAPER_TABLE2)
    ax.plot(ks, [PAPER_TABLE2[k][0] for k in ks], marker="x", linestyle="--", color="grey",
            label="the paper (Table 2), average latency at the sender")
    ax.set_xlabel("committee size k")
    ax.set_ylabel("latency (ms)")
    ax.set_xticks(ks)
    ax.set_title("Table 2: latency at the sender vs committee size", fontsize=9)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    figlib.save(fig, path)


# --- tables -------------------------------------------------------------------------------------------------------

def markdown(kind: str, agg: list[dict], more: dict | None = None) -> str:
    """tables.md of `kind`: a row per point, cells mean ± 95 % CI half-width (n)."""
    out: list[str] = ["Mean ± 95 % CI half-width (Student t), the number of runs in brackets.", ""]
    if kind == "fig10":
        out += md_rows(["members", "members ran as", "offered (msgs/s)", "buffer", "runs", "throughput, 1 s windows",
                        "throughput, 500 ms windows", "sent/s", "sends refused", "view change (s), mean",
                        "view change (s), max", "to install at leader (s)", "members dropped", "load"],
                       [[str(a["members"]), str(a.get("packing")), str(a.get("offered_per_s")), str(a.get("buffer")),
                         str(a["runs"])]
                        + [ci_cell(a, k, "{:.1f}") for k in ("throughput_1s", "throughput", "sent_per_s", "refused")]
                        + [ci_cell(a, k, "{:.3f}") for k in ("vc_mean_s", "vc_max_s", "vc_install_mean_s")]
                        + [ci_cell(a, "dropped_n", "{:.1f}"), ci_cell(a, "load_mean", "{:.1f}")] for a in agg])
    else:
        paper = {k: PAPER_TABLE2.get(k, (None,) * 3) for k in {a["k"] for a in agg}}
        out += md_rows(["k", "ack defer", "runs", "avg latency at the sender (ms)", "paper",
                        "max latency at the sender (ms)", "paper", "largest over runs", "group throughput (msgs/s)",
                        "paper", "median latency (ms)", "p99", "view change (s)", "sends refused"],
                       [[str(a["k"]), show(a.get("ack_defer")), str(a["runs"]), ci_cell(a, "own_mean_ms"),
                         show(paper[a["k"]][0], "{:.2f}"), ci_cell(a, "own_max_ms"), show(paper[a["k"]][1], "{:.2f}"),
                         show(a.get("own_max_ms_largest"), "{:.2f}"), ci_cell(a, "throughput_1s"),
                         show(paper[a["k"]][2], "{:.2f}"), ci_cell(a, "own_median_ms"), ci_cell(a, "own_p99_ms"),
                         ci_cell(a, "vc_mean_s", "{:.3f}"), ci_cell(a, "refused", "{:.1f}")] for a in agg])
    return "\n".join(out)


def summary(kind: str, rows: list[dict], agg: list[dict]) -> dict[str, Any]:
    """summary.json's entries beyond the points (figures_pbcast_more.write_tables writes them): Table 2's paper."""
    if kind != "table2":
        return {}
    return {"paper": {str(k): {"own_mean_ms": v[0], "own_max_ms": v[1], "throughput": v[2]}
                      for k, v in PAPER_TABLE2.items()}}


def figure(kind: str, agg: list[dict], more: dict, out: Path) -> None:
    (fig10_figure if kind == "fig10" else table2_figure)(agg, out / f"{kind}.png")
