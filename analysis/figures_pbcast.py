"""Seed 001's Figure 1 (traditional virtual synchrony under one perturbed member) and Figure 12 (vsync over pbcast
under the same perturbation) from a sweep of topologies/pbcast-fig1-sweep.yaml (or single runs of
topologies/pbcast-fig1.yaml): the throughput at unperturbed members against the perturbation probability p, one
line per protocol and group size, both protocols in one plot for the contrast.

Every per-run number is the run's plug-in's (`run_values` of analysis/protocols/tradvsync.py and vsync.py, defined
in analysis/protocols/pbcast.py); this script only declares which, per run (`COLUMNS`: its CSV column <- the
run_values key), then aggregates and draws (analysis/figlib.py). The throughput is Figure 1's measure: deliveries
per member over successive 500 ms windows from one second after the first send to the last (at most 80 windows),
a member's value its mean over them, the run's the median over the unperturbed members — here the `fig1_` values,
which set the experiment's perturbation target (h5) apart at every p, also at p = 0 where the schedule has no
perturb action, so that every p averages over the same members (`throughput_plugin` keeps the plug-in's own
value, which counts h5 at p = 0).

    .venv/bin/python -m analysis.figures_pbcast SWEEP_DIR|RUN_DIR [...] --out docs/results/pbcast-fig1
        [--load /tmp/h6/load.log] [--rate R]
    .venv/bin/python -m analysis.figures_pbcast tables docs/results/pbcast-fig1 [--out DIR] [--rate R] [--figures]

Writes runs.csv (one row per run, every run: figlib's identity — seed, status, the fidelity judges' verdict from
judges.json, the load average during the run with --load, `excluded` and why — and the columns of `COLUMNS`),
summary.csv and summary.json (per protocol, members, p and offered rate: mean and 95 % CI half-width, Student t,
over the repetitions, and n), tables.md (with the runs left out and why), fig1_fig12.png (both protocols, throughput
at unperturbed members vs p) and fig12_perturbed.png (vsync: the unperturbed and the perturbed member, as Figure 12
draws them); summary_faithful.csv, tables_faithful.md and fig1_fig12_faithful.png the same over the runs judged
faithful. `tables` writes the summaries and tables again from a results directory's runs.csv alone (no run
directories).
"""
from __future__ import annotations

import sys
from pathlib import Path

from analysis import figlib
from analysis.figlib import kept
from analysis.figtables import ci_cell, command_line, excluded_note, largest, show, summarise, write_summary

PROTOCOLS = ("tradvsync", "vsync")
TITLES = {"tradvsync": "traditional vsync (Figure 1)", "vsync": "vsync over pbcast, k = 1 (Figure 12)"}
STYLES = {"tradvsync": "-", "vsync": "--"}
MARKERS = {"tradvsync": "o", "vsync": "s"}
POINT = ("protocol", "members", "p", "offered_per_s")
COLUMNS = (("protocol", "protocol"), ("members", "members"), ("p", "p"), ("offered_per_s", "offered_per_s"),
           ("buffer", "buffer"), ("windows", "throughput_unperturbed_windows"), ("sent", "data_messages"),
           ("sent_per_s", "sent_per_s"), ("throughput", "fig1_throughput_per_s"),
           ("throughput_min", "fig1_throughput_min_per_s"), ("throughput_perturbed", "fig1_throughput_perturbed_per_s"),
           ("throughput_1s", "fig1_throughput_1s_per_s"), ("throughput_plugin", "throughput_unperturbed_per_s"),
           ("unperturbed", "fig1_unperturbed"), ("send_blocked", "refused"), ("view_changes", "view_changes"),
           ("sender_pkts_per_msg", "sender_pkts_per_msg"), ("dropped", "dropped"))
VALUES = ("throughput", "throughput_min", "throughput_perturbed", "throughput_1s", "sent_per_s", "send_blocked",
          "sender_pkts_per_msg", "load_mean")


def aggregate(rows: list[dict]) -> list[dict]:
    """Per (protocol, members, p, offered rate): the runs, the largest load average, the runs judged unfaithful,
    and each value's mean, 95 % CI half-width (Student t) and n."""
    extra = {"load_max": largest("load_max"),
             "unfaithful": lambda rs: sum(1 for r in rs if r.get("verdict") == "unfaithful")}
    return summarise(rows, POINT, VALUES, lead=("protocol", "members", "p", "runs", "offered_per_s"), extra=extra)


def relative(agg: list[dict]) -> list[dict]:
    """Per (protocol, members, p): the mean throughput over the same protocol and size at p = 0."""
    base = {(r["protocol"], r["members"]): r["throughput"] for r in agg if r["p"] == 0 and r["throughput"]}
    return [{"protocol": r["protocol"], "members": r["members"], "p": r["p"],
             "relative": (r["throughput"] / base[(r["protocol"], r["members"])]
                          if r["throughput"] is not None and (r["protocol"], r["members"]) in base else None)}
            for r in agg]


# --- a reference model (pure) ------------------------------------------------------------------------------------

def buffer_model(p: float, buffer_s: float = 0.1, interval_s: float = 0.1, ack_s: float = 0.0,
                 terms: int = 400) -> float:
    """The fraction of the offered rate a sender with a buffer of `buffer_s` seconds of its offer keeps when every
    multicast waits for one member that sleeps each `interval_s` independently with probability p and acknowledges
    `ack_s` after it wakes (everything else instantaneous, refused sends lost, no dependence on the group size):
    a sleep of L intervals (L >= 1, geometric: P(L) = p^(L-1) (1 - p)) blocks the sender for
    max(0, L interval + ack - buffer); such sleeps start at a rate of p (1 - p) per interval. With buffer = one
    interval and ack = 0 this is 1 - p^2."""
    if p <= 0:
        return 1.0
    lost = sum(p ** (k - 1) * (1 - p) * max(0.0, k * interval_s + ack_s - buffer_s) for k in range(1, terms))
    return max(0.0, 1.0 - p * (1 - p) * lost / interval_s)


# --- figures ------------------------------------------------------------------------------------------------------

def fig_contrast(agg: list[dict], path: Path, offered: float | None) -> None:
    """Figure 1 beside Figure 12: throughput at an unperturbed member against p, a line per protocol and size
    (mean over repetitions, 95 % CI bars); the offered rate dotted."""
    plt = figlib.pyplot()
    fig, ax = plt.subplots(figsize=(6.6, 4.4))
    sizes = sorted({r["members"] for r in agg})
    for proto in PROTOCOLS:
        for j, n in enumerate(sizes):
            rows = sorted((r for r in agg if r["protocol"] == proto and r["members"] == n
                           and r["throughput"] is not None), key=lambda r: r["p"])
            if not rows:
                continue
            ax.errorbar([r["p"] + (0.004 * (j - 1)) for r in rows], [r["throughput"] for r in rows],
                        yerr=[r["throughput_ci95"] or 0 for r in rows], linestyle=STYLES[proto],
                        marker=MARKERS[proto], capsize=3, color=f"C{j}", alpha=0.9,
                        label=f"{'tradvsync' if proto == 'tradvsync' else 'vsync/pbcast'}, {n} members")
    if offered:
        ax.axhline(offered, color="grey", linestyle=":", linewidth=1, label=f"offered {offered:g} msgs/s")
        ps = [i / 100 for i in range(0, 51)]
        ax.plot(ps, [offered * buffer_model(p) for p in ps], color="grey", linestyle="-.", linewidth=1,
                label="model: 100 ms buffer, one sleeper (1 - p²)")
    ax.set_xlabel("perturbation probability p (one member sleeps 100 ms intervals)")
    ax.set_ylabel("throughput at unperturbed members (msgs/s)")
    ax.set_title("Figure 1 (solid: traditional vsync) vs Figure 12 (dashed: vsync over pbcast)", fontsize=9)
    ax.set_ylim(0, 1.3 * offered if offered else None)      # a CI bar of 2 runs may reach beyond: clipped
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower left")
    figlib.save(fig, path)


def fig_perturbed(agg: list[dict], path: Path, protocol: str = "vsync") -> None:
    """Figure 12's own plot: throughput at an unperturbed and at the perturbed member against p, largest size."""
    rows = [r for r in agg if r["protocol"] == protocol]
    if not rows:
        return
    plt = figlib.pyplot()
    n = max(r["members"] for r in rows)
    rows = sorted((r for r in rows if r["members"] == n), key=lambda r: r["p"])
    fig, ax = plt.subplots(figsize=(6.0, 4.0))
    for key, label, m in (("throughput", "unperturbed members (median)", "o"),
                          ("throughput_perturbed", "the perturbed member", "x")):
        pts = [r for r in rows if r.get(key) is not None]
        ax.errorbar([r["p"] for r in pts], [r[key] for r in pts], yerr=[r[f"{key}_ci95"] or 0 for r in pts],
                    marker=m, capsize=3, label=label)
    ax.set_xlabel("perturbation probability p")
    ax.set_ylabel("throughput (msgs/s)")
    ax.set_title(f"Figure 12: {protocol} on {n} members, one member perturbed", fontsize=9)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower left")
    figlib.save(fig, path)


# --- tables -------------------------------------------------------------------------------------------------------

TABLES = (("throughput", "throughput at unperturbed members (msgs/s; Figure 1's 500 ms windows)"),
          ("throughput_perturbed", "throughput at the perturbed member (msgs/s)"),
          ("sent_per_s", "multicasts sent per second by the sender"),
          ("sender_pkts_per_msg", "packets the sender sent and received per multicast"),
          ("load_mean", "1-min load average during the runs"))


def markdown_tables(agg: list[dict]) -> str:
    """Rows p, columns protocol x members, cells mean ± 95 % CI (n)."""
    ps = sorted({r["p"] for r in agg})
    cols = sorted({(r["protocol"], r["members"]) for r in agg},
                  key=lambda c: (PROTOCOLS.index(c[0]) if c[0] in PROTOCOLS else 99, c[1]))
    by = {(r["protocol"], r["members"], r["p"]): r for r in agg}
    out = []
    for key, title in TABLES:
        out += [f"**{title}**", "", "| p | " + " | ".join(f"{c[0]} {c[1]}" for c in cols) + " |",
                "|---|" + "---|" * len(cols)]
        for p in ps:
            cells = [ci_cell(by.get((c[0], c[1], p)) or {}, key, "{:.1f}") for c in cols]
            out.append(f"| {p:g} | " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def write_tables(rows: list[dict], out: Path, rate: float | None = None, draw: bool = True) -> list[dict]:
    """summary.csv/.json, tables.md and their faithful-only twins (and the figures, `draw`) from the rows
    (collected, or a committed runs.csv); tables.md and the figures show one offered rate (`rate`, else the one
    most runs had); summary.csv has all. Returns the aggregates."""
    runs = kept(rows)
    agg = aggregate(rows)
    rates = [r.get("offered_per_s") for r in runs]
    offered = rate if rate is not None else max(set(rates), key=rates.count) if rates else None
    shown = [r for r in agg if r["offered_per_s"] == offered]
    write_summary(out, agg, {"runs": len(runs), "points": agg, "relative": relative(agg)},
                  f"Offered: {offered} msgs/s.\n\n" + markdown_tables(shown) + excluded_note(rows))
    # the same over the runs the fidelity judges call faithful (timer lag p99 <= 50 ms, hold error p99 <= 1 ms)
    good = aggregate([r for r in runs if r.get("verdict") == "faithful"])
    write_summary(out, good, md=f"Offered: {offered} msgs/s; faithful runs only.\n\n"
                  + markdown_tables([r for r in good if r["offered_per_s"] == offered]) + excluded_note(rows),
                  suffix="_faithful")
    if draw:
        fig_contrast(shown, out / "fig1_fig12.png", offered)
        fig_perturbed(shown, out / "fig12_perturbed.png")
        fig_contrast([r for r in good if r["offered_per_s"] == offered], out / "fig1_fig12_faithful.png", offered)
    return agg


def main(argv: list[str] | None = None) -> int:
    def collect(a) -> list[dict]:
        return figlib.collect(a.dirs, figlib.projection(COLUMNS, PROTOCOLS), point=POINT, load=figlib.read_load(a.load))

    def rate(ap, tables: bool) -> None:
        ap.add_argument("--rate", type=float, default=None, help="the offered rate the figures show (default: most "
                        "runs')")
    a, rows = command_line(argv, __doc__, collect, options=rate)
    agg = write_tables(rows, a.out, a.rate, draw=a.draw)
    for r in agg:
        print(f"{r['protocol']!s:9} n={r['members']!s:<3} p={r['p']!s:<4} rate={r['offered_per_s']} runs={r['runs']} "
              f"thr={show(r['throughput'])}±{show(r['throughput_ci95'])} pert={show(r['throughput_perturbed'])} "
              f"sent/s={show(r['sent_per_s'])} blocked={show(r['send_blocked'])} load={show(r['load_mean'])}")
    for r in rows:
        if r.get("excluded"):
            print(f"{r['run']}: excluded: {r['excluded']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
