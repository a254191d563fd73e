"""Seed 001's other pbcast measurements: Figure 4 (pbcast's per-member overhead against the group size) and the
bimodal delivery histogram with a crash (§3), from runs of topologies/pbcast-fig4.yaml and pbcast-bimodal.yaml
(and their -sweep files); this command line also makes vsync's Figure 10 and Table 2 (analysis/figures_vsync.py).

Every per-run number is the pbcast plug-in's (`run_values`, analysis/protocols/pbcast.py: the definitions are
there); this script declares which (`COLUMNS`: its CSV column <- the run_values key), the point of each kind
(`POINT`), and aggregates, fits, tabulates and draws:

- **fig4**: a member's overhead per multicast (digests, solicitations, repairs, sent + received, from its pbcast
  layer's counters, per data message), the run's mean over the members (and max, the sender's, the rest's, by
  kind), the deliveries by repair, the delivery ratio and the share of messages every member alive at the send
  got, the first phase's mean hops and expected miss on the run's tree. Across runs: least-squares fits
  overhead = a + b log2(n) and = a + b n over the runs' values, the points' means and the faithful runs', R^2.
- **bimodal**: per message, the fraction of the survivors that delivered it (the crashed sender's unlogged sends
  recovered or extrapolated), histograms in bins of 0.05 over all messages and over the last second before the
  crash, and the split at >= 0.95 / <= 0.05 / between.

    .venv/bin/python -m analysis.figures_pbcast_more {fig4|bimodal|fig10|table2} SWEEP_DIR|RUN_DIR [...]
        --out DIR [--load LOADLOG]
    .venv/bin/python -m analysis.figures_pbcast_more tables {fig4|bimodal|fig10|table2} docs/results/<dir>
        [--out DIR] [--figures]

Each writes runs.csv (every run: figlib's identity — seed, status, the judges' verdict, the load average with
--load, `excluded` and why — and `COLUMNS`), summary.csv / summary.json (per point: mean, 95 % CI half-width
(Student t) and n of every value; for a maximum also the largest run's; fig4 the fits; bimodal the histograms summed
over the runs), tables.md (with the runs left out and why) and a figure (fig4.png, bimodal.png). `tables` writes the
summaries and tables again from a results directory's runs.csv alone (no run directories).
"""
from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path
from typing import Any

from analysis import figlib, figures_vsync
from analysis.figlib import kept
from analysis.figtables import ci_cell, command_line, excluded_note, md_rows, show, summarise, summed, write_summary
from analysis.protocols.pbcast_values import BIN_WIDTH, BINS, LAST_S, OVERHEAD

KINDS = ("fig4", "bimodal")
PARAMS = (("protocol", "protocol"), ("members", "members"), ("offered_per_s", "offered_per_s"), ("loss", "loss"),
          ("packing", "packing"))
BIMODAL = ("crashed", "survivors", "crash_ts", "sent_unlogged", "sent_unseen", "sent_extrapolated", "hist_all",
           "hist_last", "messages", "almost_all", "almost_none", "between", "last_messages", "last_almost_all",
           "last_almost_none", "last_between", "n_crashed", "n_survivors")
COLUMNS = {
    "fig4": (*PARAMS, ("multicasts", "data_messages"), ("members_stopped", "members_stopped"),
             *((k, k) for k in ("overhead", "overhead_max", "overhead_sender", "overhead_rest", "deliveries",
                                "repair_fraction")),
             ("delivery_ratio", "delivery_ratio_mean"), ("delivered_to_all", "delivered_to_all_fraction"),
             *((k, f"overhead_{k}") for k in (*OVERHEAD, "repair_traffic")),
             ("mean_hops", "first_phase_hops"), ("miss_model", "first_phase_miss")),
    "bimodal": (*PARAMS, ("crash_fraction", "crash_fraction"), ("phase", "phase"), ("gc_c", "gc_c"),
                *((k, f"bimodal_{k}") for k in BIMODAL)),
}
POINT = {"fig4": ("members", "offered_per_s", "loss", "packing"),
         "bimodal": ("members", "crash_fraction", "loss", "phase", "gc_c")}
VALUES = {
    "fig4": ("overhead", "overhead_max", "overhead_sender", "overhead_rest", "digest", "solicit", "repair",
             "repair_traffic", "repair_fraction", "miss_model", "mean_hops", "delivery_ratio", "delivered_to_all",
             "multicasts", "load_mean"),
    "bimodal": ("messages", "almost_all", "almost_none", "between", "last_messages", "last_almost_all",
                "last_almost_none", "last_between", "n_survivors", "sent_unlogged", "sent_extrapolated", "load_mean"),
}


def values(kind: str) -> figlib.Values:
    return figlib.projection(COLUMNS[kind], ("pbcast",), "pbcast")


def aggregate(kind: str, rows: list[dict]) -> list[dict]:
    """Per point (POINT[kind]): `runs`, and each of VALUES[kind]'s mean, 95 % CI half-width (Student t, `_ci95`),
    n (`_n`) and, for a maximum, the largest run's (`_largest`); bimodal points also the histograms summed."""
    return summarise(rows, POINT[kind], VALUES[kind], largest_max=True,
                     after={h: summed(h) for h in ("hist_all", "hist_last")} if kind == "bimodal" else None)


# --- Figure 4's fits (pure) ---------------------------------------------------------------------------------------

def fit_line(xs: list[float], ys: list[float]) -> dict[str, Any]:
    """Least squares y = a + b x: {a, b, r2, n}; a, b, r2 None with fewer than two distinct x (r2 None also when
    every y is the same)."""
    pts = [(float(x), float(y)) for x, y in zip(xs, ys) if x is not None and y is not None]
    out: dict[str, Any] = {"a": None, "b": None, "r2": None, "n": len(pts)}
    if len({x for x, _ in pts}) < 2:
        return out
    mx = statistics.fmean(x for x, _ in pts)
    my = statistics.fmean(y for _, y in pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    sxy = sum((x - mx) * (y - my) for x, y in pts)
    b = sxy / sxx
    a = my - b * mx
    sst = sum((y - my) ** 2 for _, y in pts)
    sse = sum((y - (a + b * x)) ** 2 for x, y in pts)
    out.update(a=a, b=b, r2=(1.0 - sse / sst) if sst > 0 else None)
    return out


def fits(ns: list[float], ys: list[float]) -> dict[str, dict]:
    """Both of Figure 4's candidate laws over (n, y): `log2` y = a + b log2 n, `linear` y = a + b n."""
    pairs = [(n, y) for n, y in zip(ns, ys) if n and y is not None]
    return {"log2": fit_line([math.log2(n) for n, _ in pairs], [y for _, y in pairs]),
            "linear": fit_line([n for n, _ in pairs], [y for _, y in pairs])}


def fig4_fits(rows: list[dict], agg: list[dict]) -> dict[str, Any]:
    """Both fits of every overhead value against the members: over the runs' values, over the points' means, and
    over the runs the fidelity judges call faithful (`faithful`; unjudged runs are not)."""
    runs = kept(rows)
    out: dict[str, Any] = {"runs": {}, "means": {}, "faithful": {}}
    good = [r for r in runs if r.get("verdict") == "faithful"]
    for k in ("overhead", *OVERHEAD, "repair_traffic"):
        out["runs"][k] = fits([r["members"] for r in runs], [r.get(k) for r in runs])
        out["means"][k] = fits([a["members"] for a in agg], [a.get(k) for a in agg])
        out["faithful"][k] = fits([r["members"] for r in good], [r.get(k) for r in good])
    return out


# --- figures ------------------------------------------------------------------------------------------------------

def fig4_figure(agg: list[dict], fit: dict, path: Path) -> None:
    """Figure 4 in two panels against n (log2 axis): (a) the total overhead messages per member per multicast (mean,
    95 % CI bars; packed members apart) with both fits over the faithful runs; (b) its repair part (solicitations
    and repairs), which is what grows with the tree's depth, with its own fits."""
    plt = figlib.pyplot()
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11.0, 4.4))
    proc = sorted((a for a in agg if a.get("overhead") is not None and a.get("packing") in (None, "process")),
                  key=lambda a: a["members"])
    packed = sorted((a for a in agg if a.get("overhead") is not None and a.get("packing") not in (None, "process")),
                    key=lambda a: a["members"])
    for pts, m, c, what in ((proc, "o", "C0", "a process per member"), (packed, "D", "C9", "packed members")):
        if not pts:
            continue
        ns = [a["members"] for a in pts]
        ax.errorbar(ns, [a["overhead"] for a in pts], yerr=[a["overhead_ci95"] or 0 for a in pts], marker=m,
                    capsize=3, linestyle="none", color=c, label=f"total ({what})")
        ax.plot(ns, [a.get("digest") for a in pts], marker="x", linestyle=":", color=c, alpha=0.6,
                label=f"digests ({what})")
        rep = [(a.get("solicit") or 0) + (a.get("repair") or 0) for a in pts]
        bx.plot(ns, rep, marker=m, linestyle="none", color=c, label=f"solicitations + repairs ({what})")
    allpts = proc + packed
    if allpts:
        lo, hi = min(a["members"] for a in allpts), max(a["members"] for a in allpts)
        xs = [lo * (hi / lo) ** (i / 100) for i in range(101)]
        for axis, key in ((ax, "overhead"), (bx, "repair_traffic")):
            for name, law, style in (("log2", lambda n: math.log2(n), "-"), ("linear", lambda n: n, "--")):
                p = (fit.get("faithful") or {}).get(key, {}).get(name) or {}
                if p.get("b") is not None:
                    axis.plot(xs, [p["a"] + p["b"] * law(x) for x in xs], linestyle=style,
                              color="C1" if name == "log2" else "C2",
                              label=f"faithful runs: a + b {'log2 n' if name == 'log2' else 'n'}, a={p['a']:.3g}, "
                                    f"b={p['b']:.3g}, R²={show(p['r2'], '{:.3f}')}")
    for axis, title in ((ax, "(a) all overhead: digests + solicitations + repairs"),
                        (bx, "(b) the repair part: solicitations + repairs")):
        axis.set_xscale("log", base=2)
        axis.set_xlabel("group size n (members, log2 axis)")
        axis.set_ylabel("messages per member per multicast")
        axis.set_title(f"Figure 4 {title}", fontsize=9)
        axis.set_ylim(bottom=0)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    figlib.save(fig, path)


def bimodal_figure(agg: list[dict], path: Path) -> None:
    """The bimodal plot, a panel per point (first phase, C, crash): messages (log scale) against the fraction of
    survivors that delivered them, all messages and the last second's, summed over the runs of the point."""
    plt = figlib.pyplot()
    fig, axes = plt.subplots(1, max(1, len(agg)), figsize=(4.2 * max(1, len(agg)), 4.0), squeeze=False)
    w = BIN_WIDTH / 2
    for ax, a in zip(axes[0], agg):
        for j, h in enumerate(("hist_all", "hist_last")):
            lab = "all messages" if h == "hist_all" else f"sent in the last {LAST_S:g} s before the crash"
            ax.bar([i * BIN_WIDTH + (j + 0.5) * w for i in range(BINS)], a[h] or [0] * BINS, width=w, color=f"C{j}",
                   label=lab)
        ax.set_yscale("log")
        ax.set_ylim(bottom=0.5)                 # a bin of one message shows
        ax.set_xlim(0, 1)
        ax.set_xlabel(f"fraction of survivors that delivered it (bins of {BIN_WIDTH:g})", fontsize=8)
        ax.set_title(f"{a['members']} members, crash {a.get('crash_fraction')} + the sender,\nfirst phase "
                     f"{a.get('phase')}, C = {a.get('gc_c')}, {a['runs']} run(s)", fontsize=8)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("messages")
    figlib.save(fig, path)


# --- tables -------------------------------------------------------------------------------------------------------

def markdown(kind: str, agg: list[dict], more: dict | None = None) -> str:
    """tables.md of `kind`: a row per point, cells mean ± 95 % CI half-width (n); fig4 the fits (`more`)."""
    out: list[str] = ["Mean ± 95 % CI half-width (Student t), the number of runs in brackets.", ""]
    extra = (more or {}).get("fits")
    if kind == "fig4":
        out += md_rows(["members", "members ran as", "loss", "runs", "overhead / member / multicast", "max member",
                        "sender", "the rest", "digests", "solicitations", "repairs", "deliveries by repair",
                        "first-phase miss (model)", "mean hops from the sender", "delivery ratio", "messages to all"],
                       [[str(a["members"]), str(a.get("packing")), str(a.get("loss")), str(a["runs"])]
                        + [ci_cell(a, k) for k in ("overhead", "overhead_max", "overhead_sender", "overhead_rest",
                                                   "digest", "solicit", "repair")]
                        + [ci_cell(a, "repair_fraction", "{:.4f}"), show(a.get("miss_model"), "{:.4f}"),
                           show(a.get("mean_hops"), "{:.2f}")]
                        + [ci_cell(a, k, "{:.4f}") for k in ("delivery_ratio", "delivered_to_all")]
                        for a in agg])
        if extra:
            rows = []
            for over in ("runs", "means"):
                for k, fit in extra[over].items():
                    for law in ("log2", "linear"):
                        p = fit[law]
                        rows.append([over, k, "a + b log2 n" if law == "log2" else "a + b n", show(p["a"], "{:.4g}"),
                                     show(p["b"], "{:.4g}"), show(p["r2"], "{:.4f}"), str(p["n"])])
            out += ["**least-squares fits of the overhead per member per multicast against n**", ""]
            out += md_rows(["over", "value", "law", "a", "b", "R²", "points"], rows)
    else:
        out += md_rows(["members", "crash", "first phase", "C", "runs", "survivors", "messages", ">= 0.95", "<= 0.05",
                        "between", "last 1 s: messages", ">= 0.95", "<= 0.05", "between"],
                       [[str(a["members"]), str(a.get("crash_fraction")), str(a.get("phase")), str(a.get("gc_c")),
                         str(a["runs"])]
                        + [ci_cell(a, k, "{:.1f}") for k in VALUES["bimodal"][8:9] + VALUES["bimodal"][:8]]
                        for a in agg])
        out += ["**histogram (messages per bin of the fraction of survivors that delivered them, summed over runs)**",
                ""]
        out += md_rows(["bin"] + [f"{a.get('phase')}, C {a.get('gc_c')}: all" for a in agg]
                       + [f"{a.get('phase')}, C {a.get('gc_c')}: last 1 s" for a in agg],
                       [[f"[{i * BIN_WIDTH:.2f}, {(i + 1) * BIN_WIDTH:.2f}{']' if i == BINS - 1 else ')'}"]
                        + [str(a["hist_all"][i]) for a in agg] + [str(a["hist_last"][i]) for a in agg]
                        for i in range(BINS)])
    return "\n".join(out)


def summary(kind: str, rows: list[dict], agg: list[dict]) -> dict[str, Any]:
    """summary.json's entries beyond the points: fig4's fits."""
    return {"fits": fig4_fits(rows, agg)} if kind == "fig4" else {}


def figure(kind: str, agg: list[dict], more: dict, out: Path) -> None:
    if kind == "fig4":
        fig4_figure(agg, more["fits"], out / "fig4.png")
    else:
        bimodal_figure(agg, out / "bimodal.png")


# --- the command line of the four kinds ----------------------------------------------------------------------------

def module(kind: str):
    """The script of `kind`: this one, or figures_vsync."""
    return figures_vsync if kind in figures_vsync.KINDS else sys.modules[__name__]


def write_tables(kind: str, rows: list[dict], out: Path, draw: bool = True) -> list[dict]:
    """summary.csv/.json and tables.md (and the figure, `draw`) of `kind` from the rows (collected, or a committed
    runs.csv), by the kind's script (`module`): its aggregate, summary entries, markdown and figure."""
    mod = module(kind)
    agg = mod.aggregate(kind, rows)
    more = mod.summary(kind, rows, agg)
    write_summary(out, agg, {"kind": kind, "runs": len(kept(rows)), "points": agg, **more},
                  mod.markdown(kind, agg, more) + excluded_note(rows))
    if draw:
        mod.figure(kind, agg, more, out)
    return agg


def cli(argv: list[str] | None = None, kinds: tuple[str, ...] = (*KINDS, *figures_vsync.KINDS)) -> int:
    def collect(a) -> list[dict]:
        mod = module(a.kind)
        return figlib.collect(a.dirs, mod.values(a.kind), point=mod.POINT[a.kind], load=figlib.read_load(a.load))

    a, rows = command_line(argv, __doc__, collect, kinds=kinds)
    agg = write_tables(a.kind, rows, a.out, draw=a.draw)
    for r in agg:
        print(" ".join(f"{k}={show(v, '{:.3g}')}" for k, v in r.items()
                       if not k.endswith(("_ci95", "_n")) and not isinstance(v, list)))
    for r in rows:
        if r.get("excluded"):
            print(f"{r['run']}: excluded: {r['excluded']}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    return cli(argv)


if __name__ == "__main__":
    sys.exit(main())
