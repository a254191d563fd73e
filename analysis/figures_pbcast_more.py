"""Seed 001's other pbcast measurements: Figure 4 (pbcast's per-member overhead against the group size) and the
bimodal delivery histogram with a crash (§3), from runs of topologies/pbcast-fig4.yaml and pbcast-bimodal.yaml
(and their -sweep files); this command line also makes vsync's Figure 10 and Table 2 (analysis/figures_vsync.py).

Every per-run number is the pbcast plug-in's (`run_values`, analysis/protocols/pbcast.py: the definitions are
there); this script declares which (`COLUMNS`: its CSV column <- the run_values key), the point of each kind
(`POINT`), and aggregates, fits, tabulates and draws:

- **fig4**: a member's overhead per multicast (digests, solicitations, repairs, sent + received, from its pbcast
  layer's counters over the multicast period, per data message; `whole_run` the same over the whole run), the
  run's mean over the members (and max, the sender's, the rest's, by
  kind), the deliveries by repair, the delivery ratio and the share of messages every member alive at the send
  got, the first phase's mean hops and expected miss on the run's tree. Across runs: least-squares fits
  overhead = a + b log2(n) and = a + b n over the runs' values, the points' means and the faithful runs', R^2.
- **bimodal**: per message, the fraction of the survivors that delivered it (the crashed sender's unlogged sends
  observed in its capture when the run has one — `source` pcap —, else recovered from the receptions and
  extrapolated from the offered rate — `source` events+rate), histograms in bins of 0.05 over all messages and
  over the last second before the crash, the split at >= 0.95 / <= 0.05 / between, and beside them
  analysis.pbcast_model's chain for the point's n, fanout, C, loss and crashed members (`model_one`: the
  probability per bin of a message one survivor holds; `model_last`: of a message of the sender's last second,
  which the chain starts at the sender `before` = 0 .. 9 rounds before the crash; gossip-only points alone).

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

from analysis import figlib, figures_vsync, pbcast_model
from analysis.figlib import kept
from analysis.figtables import ci_cell, command_line, excluded_note, md_rows, show, summarise, summed, write_summary
from analysis.protocols.pbcast_values import BIN_WIDTH, BINS, LAST_S, OVERHEAD

KINDS = ("fig4", "bimodal")
PARAMS = (("protocol", "protocol"), ("members", "members"), ("offered_per_s", "offered_per_s"), ("loss", "loss"),
          ("packing", "packing"))
BIMODAL = ("crashed", "survivors", "crash_ts", "crash_mode", "source", "sender_pcap", "fanout", "round_s",
           "tree_fanout", "log_tail_s", "wire_after_crash_s", "pcap_dropped", "crash_lag_ms_max", "sent_unlogged",
           "sent_unseen", "sent_extrapolated", "sent_rate_estimate", "sent_pcap_digest_only", "sent_log_not_on_wire",
           "src_log", "src_pcap", "src_received", "src_gap", "src_extrapolated", "hist_all",
           "hist_last", "messages", "almost_all", "almost_none", "between", "last_messages", "last_almost_all",
           "last_almost_none", "last_between", "n_crashed", "n_survivors")
COLUMNS = {
    "fig4": (*PARAMS, ("multicasts", "data_messages"), ("members_stopped", "members_stopped"),
             *((k, k) for k in ("overhead", "overhead_max", "overhead_sender", "overhead_rest", "deliveries",
                                "repair_fraction")),
             ("delivery_ratio", "delivery_ratio_mean"), ("delivered_to_all", "delivered_to_all_fraction"),
             *((k, f"overhead_{k}") for k in (*OVERHEAD, "repair_traffic")),
             ("mean_hops", "first_phase_hops"), ("miss_model", "first_phase_miss"),
             ("counted_over", "overhead_counted_over"), ("whole_run", "overhead_whole_run")),
    "bimodal": (*PARAMS, ("crash_fraction", "crash_fraction"), ("phase", "phase"), ("gc_c", "gc_c"),
                *((k, f"bimodal_{k}") for k in BIMODAL)),
}
POINT = {"fig4": ("members", "offered_per_s", "loss", "packing"),
         "bimodal": ("members", "crash_fraction", "loss", "phase", "gc_c", "crash_mode", "source")}
VALUES = {
    "fig4": ("overhead", "overhead_max", "overhead_sender", "overhead_rest", "digest", "solicit", "repair",
             "repair_traffic", "repair_fraction", "miss_model", "mean_hops", "delivery_ratio", "delivered_to_all",
             "multicasts", "load_mean", "whole_run"),
    "bimodal": ("messages", "almost_all", "almost_none", "between", "last_messages", "last_almost_all",
                "last_almost_none", "last_between", "n_survivors", "sent_unlogged", "sent_extrapolated", "load_mean",
                "src_log", "src_pcap", "src_received", "src_gap", "src_extrapolated", "sent_rate_estimate",
                "sent_log_not_on_wire", "n_crashed", "fanout", "round_s"),
}


def values(kind: str) -> figlib.Values:
    return figlib.projection(COLUMNS[kind], ("pbcast",), "pbcast")


def aggregate(kind: str, rows: list[dict]) -> list[dict]:
    """Per point (POINT[kind]): `runs`, and each of VALUES[kind]'s mean, 95 % CI half-width (Student t, `_ci95`),
    n (`_n`) and, for a maximum, the largest run's (`_largest`); bimodal points also the histograms summed and
    the model beside them (`model_of`)."""
    if kind == "bimodal":
        rows = [earlier_definition(r) for r in rows]
    agg = summarise(rows, POINT[kind], VALUES[kind], largest_max=True,
                    after={h: summed(h) for h in ("hist_all", "hist_last")} if kind == "bimodal" else None)
    if kind == "bimodal":
        for a in agg:
            a.update(model_of(a))
    return agg


# The rows of runs.csv written before the sender's capture was read (their run directories are not kept) lack the
# columns this definition added; their experiment file (topologies/pbcast-bimodal.yaml before issue #34) had
# SIGKILL crashes, no capture, `fanout: 1` and `round: 100ms`.
EARLIER = {"crash_mode": "kill", "source": "events+rate", "fanout": 1, "round_s": 0.1}


def earlier_definition(r: dict) -> dict:
    """A bimodal row of runs.csv as this definition has it. A row without `source` was counted from the events and
    the offered rate: EARLIER's settings, and its sources derived from its counters — every message without a
    `data_sent` was a reception (`sent_unlogged` - `sent_unseen`) or a gap (`sent_unseen`), the extrapolated ones
    the rest; the rate's estimate was what it counted (`sent_extrapolated`). Other rows as they are."""
    if r.get("source") is not None or r.get("messages") is None or r.get("excluded"):
        return r
    unl, uns, ext = (int(r.get(k) or 0) for k in ("sent_unlogged", "sent_unseen", "sent_extrapolated"))
    return {**r, **EARLIER, "sender_pcap": [], "sent_log_not_on_wire": 0,
            "src_log": int(r["messages"]) - unl - ext, "src_pcap": 0,
            "src_received": unl - uns, "src_gap": uns, "src_extrapolated": ext, "sent_rate_estimate": ext}


def loss_fraction(loss: Any) -> float | None:
    """'5%' / 0.05 as 0.05; None if absent."""
    if loss is None or loss == "":
        return None
    t = str(loss).strip()
    return float(t[:-1]) / 100.0 if t.endswith("%") else float(t)


def model_of(a: dict) -> dict[str, Any]:
    """analysis.pbcast_model beside a bimodal point: its n (members), fanout, C, loss and crashed members (the
    runs' mean, rounded), the window of the last LAST_S (LAST_S / round rounds). `model_one`, `model_last`:
    probability per bin (BIN_WIDTH bins; `model_last` for `phase` none only, from `model_first` rounds before the
    crash: 1 for a point counted from the capture); `model_rounds`, `model_alive`, `model_window`. None without
    them."""
    n, f, c, eps = a.get("members"), a.get("fanout"), a.get("gc_c"), loss_fraction(a.get("loss"))
    crashed, rnd = a.get("n_crashed"), a.get("round_s")
    if None in (n, f, c, eps, crashed, rnd) or not crashed:
        return {"model_one": None, "model_last": None, "model_first": None, "model_rounds": None,
                "model_alive": None, "model_window": None}
    window = max(2, int(round(LAST_S / float(rnd))))
    # counted from the sender's capture, a message is one it put on the wire: the chain leaves out the messages of
    # the crash's own round (never gossiped); counted from the events and the rate, they are in (extrapolated)
    first = 1 if a.get("source") == "pcap" else 0
    m = pbcast_model.model_histogram(int(n), int(f), float(c), eps, int(round(crashed)), window, first, BIN_WIDTH,
                                     BINS)
    # The chain is the gossip alone: a first phase (IP multicast, the unicast tree) gives a message many holders
    # within milliseconds, which the chain from the sender alone does not describe; only `model_one` (a message
    # one survivor holds: a lower bound for them) is shown beside those points.
    return {"model_one": m["from_one"], "model_last": m["last"] if a.get("phase") == "none" else None,
            "model_first": first, "model_rounds": m["rounds"],
            "model_alive": m["alive"], "model_window": window}


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
    survivors that delivered them, all messages and the last second's, summed over the runs of the point; the
    model's expectation for the last second (its probability per bin times the messages measured there) as black
    ticks."""
    plt = figlib.pyplot()
    fig, axes = plt.subplots(1, max(1, len(agg)), figsize=(4.2 * max(1, len(agg)), 4.0), squeeze=False)
    w = BIN_WIDTH / 2
    for ax, a in zip(axes[0], agg):
        for j, h in enumerate(("hist_all", "hist_last")):
            lab = "all messages" if h == "hist_all" else f"sent in the last {LAST_S:g} s before the crash"
            ax.bar([i * BIN_WIDTH + (j + 0.5) * w for i in range(BINS)], a[h] or [0] * BINS, width=w, color=f"C{j}",
                   label=lab)
        m = a.get("model_last")
        if m is not None:
            tot = sum(a.get("hist_last") or [])
            ax.plot([(i + 0.75) * BIN_WIDTH for i in range(BINS)], [p * tot for p in m], marker="_", markersize=9,
                    linestyle="none", color="k", label=f"model ({a.get('model_rounds')} rounds): last {LAST_S:g} s")
        ax.set_yscale("log")
        ax.set_ylim(bottom=0.5)                 # a bin of one message shows
        ax.set_xlim(0, 1)
        ax.set_xlabel(f"fraction of survivors that delivered it (bins of {BIN_WIDTH:g})", fontsize=8)
        ax.set_title(f"{a['members']} members, crash {a.get('crash_fraction')} + the sender ({a.get('crash_mode')}),"
                     f"\nfirst phase {a.get('phase')}, C = {a.get('gc_c')}, counted from {a.get('source')}, "
                     f"{a['runs']} run(s)", fontsize=8)
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
                        "sender", "the rest", "digests", "solicitations", "repairs", "over the whole run",
                        "deliveries by repair", "first-phase miss (model)", "mean hops from the sender",
                        "delivery ratio", "messages to all"],
                       [[str(a["members"]), str(a.get("packing")), str(a.get("loss")), str(a["runs"])]
                        + [ci_cell(a, k) for k in ("overhead", "overhead_max", "overhead_sender", "overhead_rest",
                                                   "digest", "solicit", "repair", "whole_run")]
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
        out += md_rows(["members", "crash", "first phase", "C", "crash mode", "counted from", "runs", "survivors",
                        "messages", ">= 0.95", "<= 0.05", "between", "last 1 s: messages", ">= 0.95", "<= 0.05",
                        "between"],
                       [[str(a["members"]), str(a.get("crash_fraction")), str(a.get("phase")), str(a.get("gc_c")),
                         str(a.get("crash_mode")), str(a.get("source")), str(a["runs"])]
                        + [ci_cell(a, k, "{:.1f}") for k in VALUES["bimodal"][8:9] + VALUES["bimodal"][:8]]
                        for a in agg])
        out += ["**where each message came from** (mean per run; every message counted once: its `data_sent` in the "
                "sender's log, else the sender's capture, else a reception, else a gap below a known seq, else the "
                "offered rate; the rate's estimate of the sends the log and the receptions miss is the cross-check "
                "of what the capture found)", ""]
        out += md_rows(["point", "runs", "log", "capture", "received", "gap", "extrapolated (counted)",
                        "rate's estimate (cross-check)"],
                       [[label(a), str(a["runs"])]
                        + [ci_cell(a, k, "{:.1f}") for k in ("src_log", "src_pcap", "src_received", "src_gap",
                                                             "src_extrapolated", "sent_rate_estimate")]
                        for a in agg])
        out += ["**histogram (messages per bin of the fraction of survivors that delivered them, summed over runs; "
                "model: analysis.pbcast_model's probability for the sender's last second times the messages "
                "measured there)**", ""]
        out += md_rows(["bin"] + [f"{label(a)}: all" for a in agg] + [f"{label(a)}: last 1 s" for a in agg]
                       + [f"{label(a)}: model, last 1 s" for a in agg],
                       [[bin_label(i)] + [str(a["hist_all"][i]) for a in agg] + [str(a["hist_last"][i]) for a in agg]
                        + [expected(a, i) for a in agg]
                        for i in range(BINS)])
        out += ["**the model's probability per bin** (analysis.pbcast_model: n, fanout, C, loss and crashed members "
                "of the point; `one survivor`: a message one survivor holds at the crash, gossiped for the "
                "ceil(C log2 n) rounds; `last 1 s`: the sender's messages of its last second, each gossiped the "
                "window's rounds among all n before the crash, equally many per round — from 1 round when counted "
                "from the capture, which sees only what was gossiped; gossip-only points)", ""]
        out += md_rows(["bin"] + [f"{label(a)}: {w}" for a in agg for w in ("one survivor", "last 1 s")],
                       [[bin_label(i)] + [show((a.get(k) or [None] * BINS)[i], "{:.4f}") for a in agg
                                          for k in ("model_one", "model_last")]
                        for i in range(BINS)])
        out += md_rows(["point", "model: n", "fanout", "rounds ceil(C log2 n)", "loss", "crashed", "alive",
                        "window (rounds before the crash)", "P(<= 0.05)", "P(between)", "P(>= 0.95)",
                        "last 1 s: P(<= 0.05)", "P(between)", "P(>= 0.95)"],
                       [[label(a), str(a.get("members")), show(a.get("fanout"), "{:.0f}"),
                         show(a.get("model_rounds"), "{}"), str(a.get("loss")), show(a.get("n_crashed"), "{:.0f}"),
                         show(a.get("model_alive"), "{}"),
                         "-" if a.get("model_first") is None else f"{a['model_first']}-{a['model_window'] - 1}"]
                        + [show(x, "{:.4f}") for k in ("model_one", "model_last") for x in model_split(a.get(k))]
                        for a in agg])
    return "\n".join(out)


def label(a: dict) -> str:
    """A bimodal point's short name: first phase, C, crash mode, where the counts came from."""
    return f"{a.get('phase')}, C {a.get('gc_c')}, {a.get('crash_mode')}, {a.get('source')}"


def bin_label(i: int) -> str:
    return f"[{i * BIN_WIDTH:.2f}, {(i + 1) * BIN_WIDTH:.2f}{']' if i == BINS - 1 else ')'}"


def expected(a: dict, i: int) -> str:
    """The model's messages in bin i of the last second: its probability times the messages measured there."""
    m = a.get("model_last")
    return "-" if m is None else f"{m[i] * sum(a.get('hist_last') or []):.1f}"


def model_split(hist: list[float] | None) -> list[float | None]:
    """P(<= 0.05), P(between), P(>= 0.95) of a model histogram in BIN_WIDTH bins (0.05 bins: the first, the
    middle ones, the last), as `split` counts messages."""
    if hist is None:
        return [None, None, None]
    return [hist[0], sum(hist[1:-1]), hist[-1]]


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
