"""Sweep analysis: the per-run summaries of a sweep directory (`orchestrator sweep`, sweep.json), aggregated per
point over repetitions (mean and 95 % confidence interval), drawn as the GSGC paper's figures:

- Figures 6 / 8: steps per round and TPR against the step interval, one line per sub-group size b (or per the
  other coordinates), when the sweep has a step axis;
- Figures 5 / 7: average and maximum queue size against the step interval, one line per b — from the delay
  line's per-direction counters (tc/delayline.json): max_queue, and queue_sum / queued (the mean queue length
  a packet met when it was admitted to a link's serialiser, over all packets of all link directions);
- Figures 12 / 13: near-minimum TPR against the group size, one line per scheme (global, local gossip), when
  the sweep has a member-count axis.

The values come from the sweep's protocol plug-in (analysis.protocols: GSGC's are the above; a protocol without
its own takes the generic ones: delivery ratio, latency median and p90, control share of the bytes, messages per
member-second, per point with their 95 % CI).

Each run is analysed once by analysis.run (Spark; skipped when its analysis/metrics/summary.json exists), or, with
engine "events", its TPR and steps are read from the event logs directly (the same definition as
analysis.metrics.tpr, no Spark: what `orchestrator tune` and CI use, since a Spark pass costs minutes on a busy
2-core machine). The aggregation is pure and tested without Spark.

A run's TPR here is the mean over its completed global rounds that started after every member had logged
`node_started` (the members start one after another, over a minute for 200 Python processes on a busy 2-core
machine, so the first rounds also measure the start-up); `tpr_all_s` is analysis.run's mean over every round.
Writes under <sweep>/analysis/: points.csv, summary.csv, figures/*.png, sweep.md, sweep.html (and the per-run
comparison report of analysis.report in comparison/).
"""
from __future__ import annotations

import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from analysis import protocols
from analysis.doc import Doc, Figure, Heading, Para, Table, fmt, write
from analysis.protocols import ProtocolAnalysis, event_delivery
from analysis.run import write_csv
from analysis.stats import mean_ci, t975  # noqa: F401 - also imported from here
from analysis.rundir import protocol_of
from orchestrator.units import parse_time

VALUES = ("tpr_s", "tpr_round0_s", "steps_round0", "steps", "avg_queue", "max_queue", "queue_drops", "rounds")


def queue_stats(delayline: dict | None, probe: dict | None = None) -> dict[str, Any]:
    """avg_queue (Σ queue_sum / Σ queued), max_queue (max over directions), overflowed (Σ) of tc/delayline.json.

    `probe` is fidelity.json's `rate` sample (`link`, `direction`, `count`): the fidelity probe sends `count`
    back-to-back packets over that link direction before the protocol starts, which the counters include. Its
    contribution is taken out: the burst meets queues 0..count-1, and that direction's max_queue counts only if it
    exceeds the burst's (else the protocol's own maximum there is unknown and the other directions decide)."""
    queues = (delayline or {}).get("queues") if isinstance(delayline, dict) else None
    if not isinstance(queues, dict) or not queues:
        return {"avg_queue": None, "max_queue": None, "overflowed": None}
    burst_key = f"{probe.get('link')}/{probe.get('direction')}" if isinstance(probe, dict) else None
    burst = int(probe.get("count") or 0) if burst_key in queues else 0
    total_sum = total_queued = 0
    maxima = []
    has_sum = False
    for key, q in queues.items():
        if not isinstance(q, dict):
            continue
        qsum, queued, mq = q.get("queue_sum") or 0, q.get("queued") or 0, q.get("max_queue") or 0
        has_sum = has_sum or "queue_sum" in q
        if key == burst_key and burst:
            qsum, queued = max(0, qsum - burst * (burst - 1) // 2), max(0, queued - burst)
            mq = mq if mq > burst else 0
        total_sum, total_queued = total_sum + qsum, total_queued + queued
        maxima.append(mq)
    return {"avg_queue": total_sum / total_queued if has_sum and total_queued else None,
            "max_queue": max(maxima, default=None),
            "overflowed": sum(q.get("overflowed") or 0 for q in queues.values() if isinstance(q, dict))}


def run_queue_stats(run_dir: Path) -> dict[str, Any]:
    fidelity = _read_json(Path(run_dir) / "fidelity.json") or {}
    return queue_stats(_read_json(Path(run_dir) / "tc" / "delayline.json"), fidelity.get("rate"))


def run_tpr(summary: dict) -> tuple[float | None, float | None, int]:
    """(TPR, steps, rounds) of one run. From `events_summary` (it has `steady`): its rounds that started after
    every member had started. From analysis.run's summary: the rounds after round 0 when there are any."""
    tprs, steps = summary.get("tpr_values_s") or [], summary.get("steps_values") or []
    if "steady" not in summary and len(tprs) >= 2:
        tprs, steps = tprs[1:], steps[1:]
    if not tprs:
        return None, None, 0
    return statistics.fmean(tprs), (statistics.fmean(s for s in steps if s is not None) if steps else None), len(tprs)


METRICS = ("rounds", "round0")


def tune_value(summary: dict, metric: str) -> float | None:
    """The TPR `orchestrator tune` averages into f(x) for one run: "rounds" = `run_tpr`'s mean over the run's
    rounds; "round0" = the paper's TPR, from the members' common start to the first S (`tpr_first_round_s`,
    None when round 0 did not complete or started before every member ran)."""
    if metric == "round0":
        return summary.get("tpr_first_round_s")
    if metric == "rounds":
        return run_tpr(summary)[0]
    raise ValueError(f"metric {metric!r}: one of {', '.join(METRICS)}")


def sweep_plugin(summaries: dict[str, dict]) -> ProtocolAnalysis:
    """The plug-in of the sweep's protocol (from its runs' summaries; GSGC when there are none). A sweep over
    several protocols takes their plug-ins' sweep values when they all share them (HyParView, Cyclon, Scamp and
    CyclonAcked: OverlayAnalysis's), else the generic ones."""
    names = sorted({protocols.summary_protocol(s) for s in summaries.values() if s})
    if not names:
        return protocols.get("gsgc")
    plugins = [protocols.get(n) for n in names]
    first = type(plugins[0])
    if all(type(p).sweep_values is first.sweep_values and type(p).sweep_columns is first.sweep_columns
           for p in plugins):
        return plugins[0]
    return protocols.GENERIC


def point_rows(index: dict, summaries: dict[str, dict], queues: dict[str, dict],
               plugin: ProtocolAnalysis | None = None) -> list[dict]:
    """One row per selected point of sweep.json with its run's numbers (None where the run is missing): the
    plug-in's `sweep_values` (GSGC: TPR, steps, queues; the generic ones: delivery, latency, overhead)."""
    plugin = plugin or sweep_plugin(summaries)
    rows = []
    selected = index.get("selected") or list(index.get("points", {}))
    for pid in selected:
        e = index["points"].get(pid, {})
        rd = e.get("run_dir")
        s = summaries.get(rd) or {}
        q = queues.get(rd) or {}
        rows.append({
            "point": pid, "group": e.get("group"), **{f"c.{k}": v for k, v in (e.get("coords") or {}).items()},
            "rep": e.get("rep"), "status": e.get("status"), "run_dir": rd,
            "unfaithful": e.get("unfaithful"), "fidelity": (e.get("fidelity") or {}).get("verdict"),
            "members": s.get("members"), "subgroup": s.get("subgroup"), "step_s": s.get("step_s"),
            **plugin.sweep_values(s, q),
        })
    return rows


def aggregate(rows: list[dict], values: tuple[str, ...] | None = None) -> list[dict]:
    """Per point group (coordinates without the repetition): runs, and mean and 95 % CI of each value (default:
    GSGC's VALUES). `runs_measured`: runs with the first value; GSGC's `runs_with_tpr` the same for TPR."""
    values = values or VALUES
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        if r["group"] is not None:      # None: a selected point not run yet (listed apart, not a group of its own)
            groups[r["group"]].append(r)
    out = []
    for g, rs in groups.items():
        first = rs[0]
        row = {"group": g, **{k: v for k, v in first.items() if k.startswith("c.")},
               "members": first["members"], "subgroup": first["subgroup"], "step_s": first["step_s"],
               "runs": len(rs), "runs_unfaithful": sum(1 for r in rs if r.get("unfaithful")),
               "runs_measured": sum(1 for r in rs if r.get(values[0]) is not None)}
        if "tpr_s" in values:
            row["runs_with_tpr"] = sum(1 for r in rs if r["tpr_s"] is not None)
        for v in values:
            m, ci = mean_ci([r[v] for r in rs if r.get(v) is not None])
            row[f"{v}_mean"], row[f"{v}_ci95"] = m, ci
        out.append(row)
    return out


def sweep_values_of(plugin: ProtocolAnalysis, rows: list[dict]) -> tuple[str, ...]:
    """The values the sweep aggregates: the plug-in's columns, and GSGC's round count."""
    keys = tuple(k for k, _ in plugin.sweep_columns)
    return keys + tuple(k for k in ("rounds",) if rows and k in rows[0] and k not in keys)


def _as_number(v: Any) -> float | None:
    """A coordinate's value as a number: 100, '100', '2s' or '500ms' (seconds); None when it is a label."""
    try:
        return float(v)
    except (TypeError, ValueError):
        pass
    try:
        return parse_time(str(v))
    except ValueError:
        return None


def series(agg: list[dict], x: str, x_axis: str | None) -> dict[str, list[dict]]:
    """Rows with a numeric x grouped into lines. A line's label is the coordinates that tell lines apart: not the
    x axis, not an axis with one value, and not an axis whose value is x itself (a named axis such as `n`
    whose values are the member counts: `axis_named` cannot see that it sets topology.members.count)."""
    rows = [r for r in agg if r.get(x) is not None]
    coords = sorted({k for r in rows for k in r if k.startswith("c.")})

    def separates(k: str) -> bool:
        if k[2:] == x_axis or len({r.get(k) for r in rows}) < 2:
            return False
        return not all(_as_number(r.get(k)) == float(r[x]) for r in rows)

    keep = [k for k in coords if separates(k)]
    lines: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        lines[", ".join(f"{k[2:]}={r.get(k)}" for k in keep) or "all"].append(r)
    return {k: sorted(v, key=lambda r: r[x]) for k, v in lines.items()}


def axis_named(index: dict, suffixes: tuple[str, ...]) -> str | None:
    for a in index.get("axes") or []:
        if any(a["key"].endswith(s) or a["name"] == s for s in suffixes):
            return a["name"]
    return None


# --- the light path: TPR from the event logs, without Spark ---------------------------------------------------

def event_rounds(events: list[dict], group_of: dict[str, int | None]) -> list[dict]:
    """analysis.metrics.tpr over plain event dicts: per (level, group, round) the first `round_started`, the
    first `round_completed` with via = constructed (its ts and steps), and TPR = the difference."""
    acc: dict[tuple, dict] = {}
    for e in events:
        ev = e.get("event")
        if ev not in ("round_started", "round_completed"):
            continue
        level = e.get("level")
        key = (level, group_of.get(e.get("node")) if level == "local" else None, e.get("round"))
        a = acc.setdefault(key, {"started_ts": None, "first": None})
        ts = e.get("ts")
        if ev == "round_started":
            if a["started_ts"] is None or ts < a["started_ts"]:
                a["started_ts"] = ts
        elif e.get("via") == "constructed" and (a["first"] is None or ts < a["first"][0]):
            a["first"] = (ts, e.get("steps"), e.get("node"))
    rows = []
    for (level, group, rnd), a in sorted(acc.items(), key=lambda kv: (kv[0][0], kv[0][1] or -1, kv[0][2])):
        if a["started_ts"] is None:
            continue
        first = a["first"]
        rows.append({"level": level, "group": group, "round": rnd, "started_ts": a["started_ts"],
                     "tpr_s": first[0] - a["started_ts"] if first else None, "steps": first[1] if first else None,
                     "constructed_by": first[2] if first else None})
    return rows


def events_summary(run_dir: Path) -> dict:
    """The fields of analysis.run's summary that the sweep analysis uses, from the run directory's event logs and
    configs only. With local gossip (no global rounds) the TPR values are the two phases in sequence: each SC
    round's TPR plus the mean TPR of the local rounds (a local array is made in one local round, then carried
    to the global S by one SC round)."""
    run_dir = Path(run_dir)
    manifest = _read_json(run_dir / "manifest.json") or {}
    configs = [c for c in (_read_json(f) for f in sorted((run_dir / "configs").glob("*.json"))) if c]
    group_of: dict[str, int | None] = {}
    gsgc = protocol_of(configs[0])[1] if configs else {}
    for c in configs:
        groups = protocol_of(c)[1].get("local_groups") or []
        group_of[c["name"]] = next((i for i, g in enumerate(groups) if c["id"] in g["members"]), None)
    events, orchestrator = [], []
    for f in sorted((run_dir / "events").glob("*.jsonl")):
        with open(f) as fh:
            for line in fh:
                try:
                    (orchestrator if f.name == "orchestrator.jsonl" else events).append(json.loads(line))
                except json.JSONDecodeError:
                    continue
    rounds = event_rounds(events, group_of)
    done = [r for r in rounds if r["tpr_s"] is not None]
    first_start: dict[str, float] = {}
    for e in events:
        if e.get("event") == "node_started":
            first_start[e["node"]] = min(e["ts"], first_start.get(e["node"], e["ts"]))
    all_started = max(first_start.values()) if len(first_start) == len(configs) and first_start else None

    def values(rows: list[dict]) -> tuple[list[float], list[int]]:
        glob = [r for r in rows if r["level"] == "global"]
        if glob:
            return [r["tpr_s"] for r in glob], [r["steps"] for r in glob]
        local = [r["tpr_s"] for r in rows if r["level"] == "local"]
        sc = [r for r in rows if r["level"] == "sc"]
        if not local:
            return [], []
        lm = statistics.fmean(local)
        return [r["tpr_s"] + lm for r in sc], [r["steps"] for r in sc]

    all_tprs, all_steps = values(done)
    steady = [r for r in done if all_started is not None and r["started_ts"] >= all_started]
    tprs, steps = values(steady)
    # the paper's TPR proper: from a common start of the protocol to the first S (round 0, when every member
    # was running when it started, which `run` guarantees by starting the members together)
    first = next((r for r in steady if r["level"] == "global" and r["round"] == 0), None)
    first_tpr, first_steps = (first["tpr_s"], first["steps"]) if first else (None, None)
    local0 = [r["started_ts"] for r in steady if r["level"] == "local" and r["round"] == 0]
    sc_done = sorted((r["started_ts"] + r["tpr_s"], r["steps"]) for r in done if r["level"] == "sc")
    if first is None and local0 and sc_done:
        # local gossip (§5): from the common start (the local rounds 0) to the first global S an SC constructs;
        # its steps are that SC round's (SC steps)
        first_tpr, first_steps = sc_done[0][0] - min(local0), sc_done[0][1]
    q = run_queue_stats(run_dir)
    t0 = manifest.get("t0_unix") or 0.0
    crashed = {t: t0 + e["actual_s"] for e in orchestrator if isinstance(e, dict) and e.get("op") == "crash"
               for t in e.get("targets") or []}
    ids = {c["name"]: c["id"] for c in configs if "name" in c and "id" in c}
    return {"run_id": manifest.get("run_id"), "status": manifest.get("status"),
            "protocol": protocol_of(configs[0])[0] if configs else None,
            **event_delivery(events, ids, crashed),
            "members": len(configs) or None, "subgroup": gsgc.get("subgroup"), "step_s": gsgc.get("step_s"),
            "local_groups": len(gsgc.get("local_groups") or []) or None,
            "members_started": len(first_start), "all_started_ts": all_started,
            # the members waited for the runner's common start of the protocol (runs since commit 8ab3d07)
            "common_start": bool(configs) and all(c.get("wait_for_start") for c in configs),
            "start_spread_s": (all_started - min(first_start.values())) if all_started else None,
            "steady": True, "tpr_rounds": len(tprs), "tpr_mean_s": statistics.fmean(tprs) if tprs else None,
            "tpr_values_s": tprs, "steps_values": steps,
            "tpr_first_round_s": first_tpr, "steps_first_round": first_steps,
            "tpr_all_values_s": all_tprs, "steps_all_values": all_steps, "queue_drops": q["overflowed"], "queue": q,
            "rounds": {lvl: sum(1 for r in done if r["level"] == lvl) for lvl in ("global", "local", "sc")}}


# --- figures ----------------------------------------------------------------------------------------------------

def _plot_lines(ax, lines: dict[str, list[dict]], x: str, y: str, marker: str = "o-") -> None:
    for label, rs in lines.items():
        pts = [(r[x], r[f"{y}_mean"], r[f"{y}_ci95"] or 0.0) for r in rs if r[f"{y}_mean"] is not None]
        if pts:
            xs, ys, es = zip(*pts)
            ax.errorbar(xs, ys, yerr=es, fmt=marker, ms=4, capsize=3, label=label)
    if lines:
        ax.legend(fontsize=7)


def _pair_vs_step(lines: dict[str, list[dict]], left: tuple[str, str, str], right: tuple[str, str, str],
                  path: Path) -> Path:
    """Two panels side by side against the step interval; each (metric, y label, title)."""
    from analysis import figures as base  # selects the Agg backend
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, (metric, ylabel, title) in zip(axes, (left, right)):
        _plot_lines(ax, lines, "step_s", metric)
        ax.set(xlabel="step interval (s)", ylabel=ylabel, title=title)
        ax.set_ylim(bottom=0)
    return base._save(fig, path)


def figures(index: dict, agg: list[dict], figdir: Path,
            plugin: ProtocolAnalysis | None = None) -> list[tuple[str, Path]]:
    """The sweep's figures: the plug-in's (GSGC's paper figures by default)."""
    return (plugin or protocols.get("gsgc")).sweep_figures(index, agg, figdir)


def gsgc_figures(index: dict, agg: list[dict], figdir: Path) -> list[tuple[str, Path]]:
    """GSGC's: steps and TPR, queues against the step interval; TPR against the group size."""
    from analysis import figures as base  # noqa: F401 - selects the Agg backend
    import matplotlib.pyplot as plt

    made = []
    step_axis = axis_named(index, (".step", "step"))
    if len({r["step_s"] for r in agg if r["step_s"] is not None}) >= 2:
        lines = series(agg, "step_s", step_axis)
        made.append(("Steps per round and TPR vs step interval (paper Figures 6 and 8)", _pair_vs_step(
            lines, ("steps", "steps", "(A) number of steps needed in a round"),
            ("tpr_s", "seconds", "(B) time per round (TPR)"), figdir / "tpr_steps_vs_step.png")))
        made.append(("Average and maximum queue size vs step interval (paper Figures 5 and 7)", _pair_vs_step(
            lines, ("avg_queue", "packets", "(A) average queue size"),
            ("max_queue", "packets", "(B) maximum queue size"), figdir / "queues_vs_step.png")))
    if len({r["members"] for r in agg if r["members"] is not None}) >= 2:
        lines = series(agg, "members", axis_named(index, ("members.count", "count", "topology.nodes")))
        fig, ax = plt.subplots(figsize=(5.5, 3.8))
        _plot_lines(ax, lines, "members", "tpr_s")
        ax.set(xlabel="group size n", ylabel="seconds", title="TPR vs group size (each point at its step interval)")
        ax.set_ylim(bottom=0)
        made.append(("TPR vs group size (paper Figures 12 and 13)", base._save(fig, figdir / "tpr_vs_group_size.png")))
    return made


# --- the whole analysis -----------------------------------------------------------------------------------------

def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


# what analysis.run's summary takes from `events_summary`: the rounds that started once every member was running
LIGHT_KEYS = ("steady", "tpr_values_s", "steps_values", "tpr_first_round_s")


def run_summaries(root: Path, run_dirs: list[str], master: str = "local[*]",
                  engine: str = "spark") -> tuple[dict[str, dict], dict[str, dict]]:
    """Summaries and queue statistics of finished runs (`run_dirs` relative to `root`). engine "spark":
    analysis.run's summaries (with `LIGHT_KEYS` from `events_summary`), analysing (Spark, one session) the runs
    not yet analysed, with the per-run reports and a comparison report; "events": `events_summary` (TPR and steps
    from the event logs, no Spark: seconds instead of minutes per sweep). A run whose Spark analysis failed has
    no summary."""
    if engine == "spark":
        todo = [root / rd for rd in run_dirs if not (root / rd / "analysis" / "metrics" / "summary.json").exists()]
        if todo:
            from analysis.cli import run_analysis
            run_analysis(todo, master, root / "analysis" / "comparison")
    summaries, queues = {}, {}
    for rd in run_dirs:
        light = events_summary(root / rd)
        queues[rd] = light["queue"]
        if engine == "events":
            summaries[rd] = light
            continue
        s = _read_json(root / rd / "analysis" / "metrics" / "summary.json")
        if s is not None:
            summaries[rd] = {**s, **{k: light[k] for k in LIGHT_KEYS}}
    return summaries, queues


def collect(root: Path, index: dict, master: str = "local[*]",
            engine: str = "spark") -> tuple[dict[str, dict], dict[str, dict]]:
    """`run_summaries` of the selected points' finished runs."""
    selected = set(index.get("selected") or index.get("points", {}))
    finished = [e["run_dir"] for e in index.get("points", {}).values()
                if e.get("run_dir") and e.get("status") == "completed" and e.get("id") in selected]
    return run_summaries(root, finished, master, engine)


def analyze_sweep(root: Path, master: str = "local[*]", engine: str = "spark") -> Path:
    """Analyse a sweep directory (engine: "spark" or "events", see `run_summaries`); returns analysis/sweep.md."""
    root = Path(root)
    index = _read_json(root / "sweep.json")
    if not isinstance(index, dict) or "points" not in index:
        from analysis.rundir import AnalysisError
        raise AnalysisError(f"{root}: no sweep.json (not a sweep directory)")
    summaries, queues = collect(root, index, master, engine)
    plugin = sweep_plugin(summaries)
    rows = point_rows(index, summaries, queues, plugin)
    values = sweep_values_of(plugin, rows)
    agg = aggregate(rows, values)
    out = root / "analysis"
    write_csv(out / "points.csv", rows)
    write_csv(out / "summary.csv", agg)
    made = figures(index, agg, out / "figures", plugin)
    doc = Doc(f"Sweep {root.name}")
    axes = ", ".join(f"{a['name']} ∈ {{{', '.join(a['values'])}}}" for a in index.get("axes") or [])
    first = plugin.sweep_columns[0][0]
    doc.add(Para(f"Experiment `{index.get('experiment_file')}` (protocol {plugin.name or 'unknown'}); axes: "
                 f"{axes or 'none'}; {index.get('repetitions')} repetition(s); {len(rows)} point(s), "
                 f"{sum(1 for r in rows if r.get(first) is not None)} with a measured "
                 f"{'TPR' if first == 'tpr_s' else plugin.sweep_columns[0][1]}."))
    if plugin.name == "gsgc":
        doc.add(Para("Round-0 TPR: from the members' common start to the first S, the paper's TPR (each of its "
                     "runs starts the protocol once). "
                     "TPR: mean over a run's completed global rounds that started once every member was running; "
                     "per point the mean over the "
                     "repetitions ± the half-width of the 95 % confidence interval (Student t). Queue sizes from "
                     "the delay line: average = mean queue length met by an admitted packet, max over all link "
                     "directions."))
    else:
        doc.add(Para("Per point the mean over the repetitions ± the half-width of the 95 % confidence interval "
                     "(Student t) of each run's mean delivery ratio, latency median and p90 over all receipts, "
                     "control share of the bytes sent and messages sent per member-second (analysis.metrics)."))
    doc.add(Heading(1, "Per point (mean ± 95 % CI over repetitions)"))
    cols = [k for k in agg[0] if k.startswith("c.")] if agg else []
    runs_label = "runs (with TPR)" if first == "tpr_s" else "runs (measured)"
    runs_key = "runs_with_tpr" if first == "tpr_s" else "runs_measured"
    doc.add(Table([c[2:] for c in cols] + [runs_label] + [label for _, label in plugin.sweep_columns],
                  [[r.get(c, "–") for c in cols] + [f"{r['runs']} ({r[runs_key]})",
                                           *[_pm(r, v) for v, _ in plugin.sweep_columns]] for r in agg]))
    for title, path in made:
        doc.add(Heading(1, title))
        doc.add(Figure(path, title))
    missing = [r["point"] for r in rows if r.get(first) is None]
    if missing:
        doc.add(Heading(1, f"Points without a {'TPR' if first == 'tpr_s' else 'measurement'}"))
        doc.add(Para(", ".join(f"{p} ({next(r['status'] for r in rows if r['point'] == p) or 'not run'})"
                               for p in missing)))
    md, _ = write(doc, out, "sweep")
    return md


def _pm(r: dict, v: str) -> str:
    m, ci = r[f"{v}_mean"], r[f"{v}_ci95"]
    if m is None:
        return "-"
    return f"{fmt(m)} ± {fmt(ci)}" if ci is not None else fmt(m)


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m analysis.sweep", description="Analyse a sweep directory.")
    p.add_argument("sweep_dir", type=Path)
    p.add_argument("--master", default="local[*]")
    p.add_argument("--engine", choices=("spark", "events"), default="spark")
    args = p.parse_args(argv)
    print(analyze_sweep(args.sweep_dir, args.master, args.engine))
    return 0


if __name__ == "__main__":
    sys.exit(main())
