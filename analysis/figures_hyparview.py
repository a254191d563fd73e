"""The HyParView paper's Figures 2, 3 and 4 (seed 003 §5.2-5.3) from a sweep of topologies/hyparview-fig2-sweep.yaml:
reliability after a massive crash against the crashed fraction f, one line per protocol (Figure 2), reliability of
successive broadcasts after the crash (Figure 3), and membership cycles to heal against f (Figure 4).

The per-run numbers are the hyparview analysis plug-in's (analysis/protocols/overlay.py: `healing` on the
per-broadcast reliability), but the reliability per broadcast is computed here from the event logs in plain Python
(`run_reliability`, the same definition as overlay.reliability: (receivers + 1) / (counted members + 1), counted =
started before the send, not crashed at or before it, the origin excluded) — a Spark pass per run costs minutes on
this busy 2-core machine; tests/analysis/test_overlay.py checks that both give the same numbers on one log.

    .venv/bin/python -m analysis.figures_hyparview SWEEP_DIR [SWEEP_DIR ...] --out docs/results/hyparview-fig2
        [--load /tmp/h5runs/load.log]

Writes runs.csv (one row per run: protocol, f, rep, seed, the load average during the run, the metrics),
summary.csv (per protocol and f: mean and 95 % CI half-width over the runs), per_cycle.csv (reliability per cycle
after the crash, per protocol and f, averaged over runs), summary.json and fig2_reliability.png,
fig3_after_failure.png, fig4_healing.png.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from analysis.runlogs import analyse_completed, load_during, read_events, read_load, run_dirs, sweep_runs, write_csv as _write_csv  # noqa: F401
from analysis.runlogs import pyplot as _plt

PROTOCOLS = ("hyparview", "cyclonacked", "cyclon", "scamp")
TITLES = {"hyparview": "HyParView", "cyclon": "Cyclon", "scamp": "Scamp", "cyclonacked": "CyclonAcked"}
MARKERS = {"hyparview": "o", "cyclon": "s", "scamp": "^", "cyclonacked": "D"}
MAX_CRASH_SPREAD_S = 1.0      # two 500 ms cycles: a crash that took longer is not the paper's crash "at once"
# failure-detector removals before the crash (all false: nobody had crashed) above which the run measured the
# machine's load, not the protocol: CyclonAcked's 500 ms ACK timeout fires on a member delayed by the CPU
# (isolated in docs/reproduction-hyparview.md: 0 at load 6-10, thousands at load 25-45, same seed)
MAX_FALSE_SUSPICIONS = 50
VALUES = ("reliability_before", "reliability_after", "reliability_after_first", "broadcasts_after_first",
          "cycles_to_heal",
          "cycles_to_heal_mean", "broadcasts_before", "broadcasts_after", "survivors", "false_suspicions_before",
          "load_mean")


# --- one run, from its event logs (pure given the files) --------------------------------------------------------

def run_reliability(events: list[dict], t0: float) -> tuple[list[dict], float | None, int | None, int]:
    """(per-broadcast reliability rows in send order, the first crash's time, the crash's (median) cycle,
    members); a row's `since_crash` is its cycle minus its origin's own last cycle at the crash."""
    started: dict[str, float] = {}
    ids: dict[str, int] = {}
    crashed: dict[str, float] = {}
    sent: dict[tuple[str, int], dict] = {}
    got: dict[tuple[str, int, int], float] = {}
    cycles: list[tuple[float, str, int]] = []
    members: list[str] = []
    for e in events:
        ev, node = e.get("event"), e.get("node")
        if ev == "run_started":
            members = list(e.get("members") or [])
        elif ev == "action_applied" and e.get("op") == "crash":
            for m in e.get("targets") or []:
                crashed[m] = min(crashed.get(m, float("inf")), t0 + float(e["actual_s"]))
        elif ev == "node_started":
            started[node] = min(started.get(node, float("inf")), e["ts"])
            ids[node] = int(e["id"])
        elif ev == "data_sent":
            k = (node, int(e["seq"]))
            if k not in sent or e["ts"] < sent[k]["ts"]:
                sent[k] = {"ts": e["ts"], "cycle": e.get("cycle")}
        elif ev == "data_received":
            k = (node, int(e["origin"]), int(e["seq"]))
            got[k] = min(got.get(k, float("inf")), e["ts"])
        elif ev == "cycle" and e.get("cycle") is not None:
            cycles.append((e["ts"], node, int(e["cycle"])))
    members = members or sorted(ids)
    rows = []
    for (origin, seq), s in sent.items():
        if origin not in ids:
            continue
        oid, ts = ids[origin], s["ts"]
        counted = [m for m in members if m != origin and m in started and started[m] <= ts
                   and not (m in crashed and crashed[m] <= ts)]
        delivered = sum(1 for m in counted if (m, oid, seq) in got)
        rows.append({"origin": origin, "origin_id": oid, "seq": seq, "sent_ts": ts, "cycle": s["cycle"],
                     "correct": len(counted) + 1, "delivered": delivered + 1,
                     "reliability": (delivered + 1) / (len(counted) + 1)})
    rows.sort(key=lambda r: (r["sent_ts"], r["origin_id"], r["seq"]))
    crash_ts = min(crashed.values()) if crashed else None
    crash_cyc = None
    if crash_ts is not None:
        last: dict[str, int] = {}
        for ts, node, c in cycles:
            if ts <= crash_ts:
                last[node] = max(last.get(node, c), c)
        crash_cyc = int(statistics.median(last.values())) if last else None
        for r in rows:
            if r["cycle"] is not None and r["origin"] in last:
                r["since_crash"] = r["cycle"] - last[r["origin"]]
    return rows, crash_ts, crash_cyc, len(members)


def max_hops(events: list[dict], before_ts: float | None) -> float | None:
    """Table 1's maximum hops to delivery, as overlay.hops_to_delivery: per broadcast sent before `before_ts`
    (every one when None), the largest `hops` of its `data_received` events; their mean."""
    ids = {e["node"]: int(e["id"]) for e in events if e.get("event") == "node_started" and "id" in e}
    sent: dict[tuple[int, int], float] = {}
    most: dict[tuple[int, int], int] = {}
    for e in events:
        ev = e.get("event")
        if ev == "data_sent" and e.get("node") in ids:
            k = (ids[e["node"]], int(e["seq"]))
            sent[k] = min(sent.get(k, float("inf")), e["ts"])
        elif ev == "data_received" and e.get("hops") is not None:
            k = (int(e["origin"]), int(e["seq"]))
            most[k] = max(most.get(k, 0), int(e["hops"]))
    vals = [h for k, h in most.items() if k in sent and (before_ts is None or sent[k] < before_ts)]
    return statistics.fmean(vals) if vals else None


def suspicions(events: list[dict], crash_ts: float | None) -> dict[str, int]:
    """Failure-detector removals from the dissemination view (`view_changed` op remove, reason `no_ack` for
    CyclonAcked, `failed` from HyParView's active view): before the first crash every one is a false suspicion
    (nobody had crashed), after it some are true."""
    before = after = 0
    for e in events:
        if (e.get("event") == "view_changed" and e.get("op") == "remove" and e.get("view") in ("active", "partial")
                and e.get("reason") in ("no_ack", "failed")):
            if crash_ts is None or e["ts"] < crash_ts:
                before += 1
            else:
                after += 1
    return {"false_suspicions_before": before, "suspicions_after": after}


def analyse_run(run_dir: Path, load: list[tuple[float, float]] | None = None) -> dict[str, Any]:
    from analysis.protocols import overlay     # its pure `healing`; importing it starts no Spark

    manifest, events = read_events(run_dir)
    t0 = manifest.get("t0_unix") or manifest.get("started_at") or 0.0
    rows, crash_ts, crash_cyc, n = run_reliability(events, t0)
    cycle_s = next(((e.get("protocol") or {}).get("cycle_s") for e in events if e.get("event") == "node_started"),
                   None) or 1.0
    crash_end = max((e["ts"] for e in events if e.get("event") == "action_applied" and e.get("op") == "crash"),
                    default=None)
    h = overlay.healing(rows, crash_ts, crash_cyc, first_s=2 * float(cycle_s), first_from=crash_end)
    spec = manifest.get("spec") or {}
    protocol = next(iter(spec.get("protocol") or {}), None)
    sched = (spec.get("schedule") or [{}])[0]
    crash_ops = [e for e in events if e.get("event") == "action_applied" and e.get("op") == "crash"]
    crashed = {m for e in crash_ops for m in e.get("targets") or []}
    # the crash record's ts is when the last target was killed (the driver kills and waits one by one):
    # "at once" only if that is within MAX_CRASH_SPREAD_S of the crash's start
    spread = max((e["ts"] - (t0 + float(e["actual_s"])) for e in crash_ops), default=None)
    susp = suspicions(events, crash_ts)
    why = []
    if spread is not None and spread > MAX_CRASH_SPREAD_S:
        why.append(f"the crash took {spread:.1f} s")
    if susp["false_suspicions_before"] > MAX_FALSE_SUSPICIONS:
        why.append(f"{susp['false_suspicions_before']} false suspicions before the crash")
    lmean, lmax = load_during(load or [], manifest.get("started_at") or t0, manifest.get("ended_at") or t0 + 60)
    return {"run_dir": str(run_dir), "protocol": protocol, "fail": sched.get("fraction"), "seed": manifest.get("seed"),
            "members": n, "crashed": len(crashed), "survivors": n - len(crashed), "status": manifest.get("status"),
            "load_mean": lmean, "load_max": lmax, "crash_cycle": crash_cyc, **susp,
            "crash_spread_s": spread, "valid": not why, "invalid_because": "; ".join(why),
            "max_hops_before": max_hops(events, crash_ts),
            **{k: h.get(k) for k in VALUES if k in h},
            "after_failure": [r["reliability"] for r in h["after_failure"]], "by_cycle": h["by_cycle"]}


# --- a reference model (pure, seeded) -----------------------------------------------------------------------------

def gossip_model(n: int, f: float, view: int = 35, fanout: int = 4, trials: int = 200, seed: int = 1) -> float:
    """Mean reliability of gossip broadcast over static uniform random partial views right after a crash (the
    paper's Figure 2 setting for Cyclon and Scamp: no membership cycle, no failure detector): n members, each
    with a view of `view` distinct random others; round(f n) crash; a random survivor broadcasts; every survivor
    forwards on first receipt to `fanout` random view members other than the one it came from and the origin;
    a crashed target is a lost copy. Reliability as overlay's: survivors reached, the origin included, over
    survivors. A fresh overlay and crash per trial."""
    import random

    rng = random.Random(seed)
    total = 0.0
    for _ in range(trials):
        dead = set(rng.sample(range(n), round(f * n)))
        alive = [i for i in range(n) if i not in dead]
        views: dict[int, list[int]] = {}
        origin = rng.choice(alive)
        reached, frontier = {origin}, [(origin, None)]
        while frontier:
            v, came = frontier.pop()
            if v not in views:
                drawn = rng.sample(range(n), min(view + 1, n))
                views[v] = [j for j in drawn if j != v][:min(view, n - 1)]
            cands = [j for j in views[v] if j != came and j != origin]
            for t in rng.sample(cands, min(fanout, len(cands))):
                if t not in dead and t not in reached:
                    reached.add(t)
                    frontier.append((t, v))
        total += len(reached) / len(alive)
    return total / trials


# --- aggregation (pure) -------------------------------------------------------------------------------------------

def aggregate(runs: list[dict]) -> list[dict]:
    """Per (protocol, f): n runs, and for each value its mean and 95 % CI half-width (Student t) over the runs."""
    from analysis.stats import mean_ci

    groups: dict[tuple[str, float], list[dict]] = {}
    for r in runs:
        groups.setdefault((r["protocol"], r["fail"], r.get("members")), []).append(r)
    out = []
    for (p, f, n), rs in sorted(groups.items(), key=lambda kv: (PROTOCOLS.index(kv[0][0]) if kv[0][0] in PROTOCOLS
                                                                else 99, kv[0][1], kv[0][2] or 0)):
        row: dict[str, Any] = {"protocol": p, "fail": f, "members": n, "runs": len(rs),
                               "load_max": max((x["load_max"] for x in rs if x.get("load_max") is not None),
                                               default=None)}
        for k in VALUES:
            vals = [x.get(k) for x in rs]
            m, ci = mean_ci([v for v in vals if v is not None])
            row[k], row[f"{k}_ci95"], row[f"{k}_n"] = m, ci, sum(v is not None for v in vals)
        out.append(row)
    return out


def per_cycle(runs: list[dict], max_cycle: int = 40) -> list[dict]:
    """Per (protocol, f, cycles since the crash): the mean over runs of each run's mean reliability in that cycle."""
    acc: dict[tuple[str, float, int], list[float]] = {}
    for r in runs:
        for g in r["by_cycle"]:
            if g["cycle"] <= max_cycle:
                acc.setdefault((r["protocol"], r["fail"], g["cycle"]), []).append(g["reliability"])
    return [{"protocol": p, "fail": f, "cycle": c, "runs": len(v), "reliability": statistics.fmean(v)}
            for (p, f, c), v in sorted(acc.items())]


# --- figures ------------------------------------------------------------------------------------------------------

def fig_vs_f(agg: list[dict], key: str, ylabel: str, title: str, path: Path, ylim=None,
             excluded: list[dict] | None = None, model: list[dict] | None = None,
             scale: list[dict] | None = None) -> None:
    """One line per protocol (mean, 95 % CI bars); `excluded` runs as faint crosses in the protocol's colour;
    `model` (gossip_model rows: fail, n50_view35, n10000_view35) as dashed reference lines."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for i, p in enumerate(PROTOCOLS):
        color = f"C{i}"
        rows = [r for r in agg if r["protocol"] == p and r[key] is not None]
        if rows:
            xs = [100 * r["fail"] for r in rows]
            ax.errorbar(xs, [r[key] for r in rows], yerr=[r[f"{key}_ci95"] or 0 for r in rows],
                        marker=MARKERS[p], capsize=3, label=TITLES[p], color=color)
        bad = [r for r in excluded or [] if r["protocol"] == p and r.get(key) is not None]
        if bad:
            ax.scatter([100 * r["fail"] + (i - 1.5) for r in bad], [r[key] for r in bad], marker="x", s=18,
                       color=color, alpha=0.45, label=f"{TITLES[p]}: left out (slow crash / FD fired on load)")
        big = [r for r in scale or [] if r["protocol"] == p and r.get(key) is not None]
        for n in sorted({r["members"] for r in big}):
            pts = [r for r in big if r["members"] == n]
            ax.scatter([100 * r["fail"] for r in pts], [r[key] for r in pts], marker=MARKERS[p], s=70,
                       facecolors="none", edgecolors=color, linewidths=1.5, label=f"{TITLES[p]}, {n} members")
    for col, label, style in (("n10000_view35", "model, 10 000 members (Cyclon-like views)", "--"),
                              ("n500_view35", "model, 500 members", "-."),
                              ("n50_view35", "model, 50 members", ":")):
        if model and all(col in m for m in model):
            ax.plot([100 * m["fail"] for m in model], [m[col] for m in model], style, color="grey", label=label)
    ax.set_xlabel("failed members (%)")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    if ylim:
        ax.set_ylim(*ylim)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6.5, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def fig_after_failure(runs: list[dict], path: Path, first: int = 60) -> None:
    """Figure 3: reliability of the k-th broadcast after the crash (mean over runs), one panel per f."""
    plt = _plt()
    fails = sorted({r["fail"] for r in runs})
    fig, axes = plt.subplots(1, len(fails), figsize=(3.2 * len(fails), 3.2), sharey=True, squeeze=False)
    for ax, f in zip(axes[0], fails):
        for p in PROTOCOLS:
            series = [r["after_failure"] for r in runs if r["protocol"] == p and r["fail"] == f]
            if not series:
                continue
            k = min(first, max(len(s) for s in series))
            ys = [statistics.fmean(s[i] for s in series if len(s) > i) for i in range(k)]
            ax.plot(range(1, k + 1), ys, marker=MARKERS[p], markersize=2, linewidth=1, label=TITLES[p])
        ax.set_title(f"{round(100 * f)} % failed", fontsize=9)
        ax.set_xlabel("broadcast after the crash")
        ax.set_ylim(0, 1.05)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("reliability")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --- CLI ----------------------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sweeps", nargs="+", type=Path, help="sweep directories (sweep.json) or run directories")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--load", type=Path, default=None, help="a `unix-time load1 load5 load15` log")
    ap.add_argument("--model", type=Path, default=None,
                    help="gossip_model results (json: fail, n50_view35, n10000_view35) drawn as reference lines")
    a = ap.parse_args(argv)
    load = read_load(a.load)
    every = analyse_completed(run_dirs(a.sweeps), lambda d: analyse_run(d, load))
    sizes = [r["members"] for r in every]
    main_n = max(set(sizes), key=sizes.count) if sizes else None     # the sweep's group size; others: scale runs
    scale_runs = [r for r in every if r["valid"] and r["members"] != main_n]
    runs = [r for r in every if r["valid"] and r["members"] == main_n]
    for r in every:
        if not r["valid"]:
            print(f"{Path(r['run_dir']).name}: {r['invalid_because']} (load {_f(r['load_mean'])}),"
                  " left out of the aggregates", file=sys.stderr)
    a.out.mkdir(parents=True, exist_ok=True)
    agg = aggregate(runs)
    _write_csv(a.out / "runs.csv", [{k: (Path(v).name if k == "run_dir" else v) for k, v in r.items()
                                     if k not in ("by_cycle",)} for r in every])
    _write_csv(a.out / "summary.csv", agg)
    _write_csv(a.out / "per_cycle.csv", per_cycle(runs))
    (a.out / "summary.json").write_text(json.dumps({"runs": len(every), "valid_runs": len(runs),
                                                    "max_crash_spread_s": MAX_CRASH_SPREAD_S,
                                                    "max_false_suspicions": MAX_FALSE_SUSPICIONS, "points": agg},
                                                   indent=1, default=str))
    excluded = [r for r in every if not r["valid"] and r["members"] == main_n]
    scale = aggregate(scale_runs)
    if scale:
        _write_csv(a.out / "scale.csv", scale)
    model = json.loads(a.model.read_text()) if a.model and a.model.exists() else None
    fig_vs_f(agg, "reliability_after", "reliability (mean over broadcasts after the crash)",
             f"Figure 2: reliability after the crash ({main_n} members; 20 s = 40 cycles)",
             a.out / "fig2_reliability.png", (0, 1.05), excluded, model, scale)
    fig_vs_f(agg, "reliability_after_first", "reliability (broadcasts of the first 2 cycles, 1 s)",
             "Figure 2, paper's setting: broadcasts before the cycles go on",
             a.out / "fig2_reliability_first_cycles.png", (0, 1.05), excluded, model, scale)
    fig_vs_f(agg, "cycles_to_heal_mean", "membership cycles to heal",
             "Figure 4: cycles until the mean over 4 cycles regains the pre-crash reliability",
             a.out / "fig4_healing.png", None, excluded)
    fig_after_failure(runs, a.out / "fig3_after_failure.png")
    (a.out / "tables.md").write_text(markdown_tables(agg) + scale_table(scale))
    for r in agg + scale:
        print(f"{r['protocol']:12s} n={r['members']} f={r['fail']:<5} runs={r['runs']} rel_after={_f(r['reliability_after'])}"
              f"±{_f(r['reliability_after_ci95'])} first={_f(r['reliability_after_first'])} "
              f"heal={_f(r['cycles_to_heal_mean'])} heal_all={_f(r['cycles_to_heal'])} "
              f"before={_f(r['reliability_before'])} falsesusp={_f(r['false_suspicions_before'])} "
              f"load={_f(r['load_mean'])}")
    return 0


def markdown_tables(agg: list[dict]) -> str:
    """Figure 2 and Figure 4 as Markdown tables: rows f, columns protocols, cells mean ± 95 % CI (runs)."""
    fails = sorted({r["fail"] for r in agg})
    by = {(r["protocol"], r["fail"]): r for r in agg}
    protos = [p for p in PROTOCOLS if any(r["protocol"] == p for r in agg)]
    out = []
    for key, title in (("reliability_after_first", "reliability, broadcasts of the first 2 cycles (1 s) after the crash"),
                       ("reliability_after", "reliability, every broadcast of the 20 s after the crash"),
                       ("reliability_before", "reliability before the crash"),
                       ("cycles_to_heal_mean", "cycles to heal (4-cycle mean regains the pre-crash reliability)"),
                       ("false_suspicions_before", "failure-detector removals before the crash (all false)"),
                       ("load_mean", "1-min load average during the runs")):
        out += [f"**{title}**", "", "| f | " + " | ".join(TITLES[p] for p in protos) + " |",
                "|---|" + "---|" * len(protos)]
        for f in fails:
            cells = []
            for p in protos:
                r = by.get((p, f))
                if r is None or r.get(key) is None:
                    cells.append("-" if r is None else f"- (0/{r['runs']})")
                    continue
                ci = r.get(f"{key}_ci95")
                n = r.get(f"{key}_n", r["runs"])
                fmt = "{:.0f}" if key in ("false_suspicions_before",) else "{:.1f}" if key in (
                    "cycles_to_heal_mean", "load_mean") else "{:.3f}"
                cells.append(fmt.format(r[key]) + (f" ± {fmt.format(ci)}" if ci is not None else "") + f" ({n})")
            out.append(f"| {round(100 * f)} % | " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def scale_table(scale: list[dict]) -> str:
    """The runs at another group size than the sweep's (the scale check), one row per protocol, size and f."""
    if not scale:
        return ""
    out = ["**other group sizes** (mean ± 95 % CI (runs))", "",
           "| protocol | members | f | first 2 cycles | 20 s after | before |", "|---|---|---|---|---|---|"]
    for r in scale:
        cells = [("-" if r.get(k) is None else f"{r[k]:.3f}" + (f" ± {r[k + '_ci95']:.3f}" if r.get(k + "_ci95")
                                                                 is not None else ""))
                 for k in ("reliability_after_first", "reliability_after", "reliability_before")]
        out.append(f"| {TITLES.get(r['protocol'], r['protocol'])} | {r['members']} | {round(100 * r['fail'])} % | "
                   + " | ".join(cells) + f" ({r['runs']}) |")
    return "\n".join(out + [""])


def _f(x: Any) -> str:
    return "-" if x is None else f"{x:.3f}" if isinstance(x, float) else str(x)


if __name__ == "__main__":
    sys.exit(main())
