"""`report.md` and `report.html` of one run (in the run directory), and the comparison report of several runs."""
from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from analysis import figures
from analysis.doc import Bullets, Doc, Figure, Heading, Para, Table, fmt, write
from analysis.run import BIN_S, RunResult, write_csv

MAX_ROWS = 40

TPR_DEF = ("TPR of round r: the first `round_completed` with via = constructed minus the first `round_started` of "
           "r, over all members (the paper's start of the round until the first member constructs S). Steps: the "
           "constructing member's steps in the round. The members' own mean `tpr_s` and steps are shown beside.")
TTS_DEF = ("Time to stable of data message (origin, seq): from its `data_sent` to the first time at which every "
           "live member's global S[origin] ≥ seq (from the members' `stable` events). Members started after the "
           "send or crashed before it do not count; a member that crashes later counts until its crash.")
TRAFFIC_DEF = ("Gossip = GOSSIP, SC_GOSSIP, STABLE and LIVE messages a member sent (its own capture, decoded), bytes "
               "= UDP payload (the wire message). Rates are per second of the member's lifetime: its first "
               "`node_started` to its crash, else its `node_stopped`, else the end of the run.")
FD_DEF = ("Failure-detection latency: from the orchestrator's crash (t0 + `actual_s`) to each observer's first "
          "`declared_failed` of the crashed member. Observers: members started before the crash and not crashed "
          "at or before it; a declaration must come before the observer's own crash.")


def _limit(rows: list[list[Any]], what: str, csv_name: str) -> tuple[list[list[Any]], str | None]:
    if len(rows) <= MAX_ROWS:
        return rows, None
    return rows[:MAX_ROWS], f"first {MAX_ROWS} of {len(rows)} {what}; all in analysis/metrics/{csv_name}"


def _utc(ts: float | None) -> str | None:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC") if ts else None


def run_report(res: RunResult) -> tuple[Path, Path]:
    run, s, m = res.run, res.summary, res.run.manifest
    spec = m.get("spec") or {}
    figdir = run.out / "figures"
    doc = Doc(f"Run {run.run_id}")
    fid = m.get("fidelity") or {}
    sched = m.get("schedule") or {}
    doc.add(Table(["", ""], [
        ["experiment", f"{spec.get('name')} ({m.get('experiment_file')})"],
        ["backend / shaper", f"{m.get('backend')} / {m.get('shaper')}"],
        ["status", m.get("status")],
        ["seed", m.get("seed")],
        ["members (senders)", f"{s['members']} ({s['senders']})"],
        ["protocol", f"GSGC: sub-group b = {s['subgroup']}, step = {fmt(s['step_s'])} s, K = {s['fail_k']}"],
        ["workload", ", ".join(f"{k} {v}" for k, v in (spec.get("workload") or {}).items())],
        ["started / duration", f"{_utc(run.t0)} / {fmt(s['duration_s'])} s"],
        ["schedule lag (median / max)", f"{fmt(sched.get('lag_ms_median'))} / {fmt(sched.get('lag_ms_max'))} ms"],
        ["fidelity probe (max |error|, received/sent)",
         f"{fmt(fid.get('max_abs_error_ms'))} ms, {fid.get('received')}/{fid.get('sent')}"],
    ]))

    doc.add(Heading(1, "Warnings"))
    shaping = [f"shaper {m.get('shaper')}: {w}" for w in m.get("shaping_warnings") or []]
    if shaping or run.warnings:
        doc.add(Bullets(shaping + run.warnings, warn=True))
    else:
        doc.add(Para("None."))

    doc.add(Heading(1, "Key metrics"))
    g = next((r for r in res.tpr_summary if r["level"] == "global"), None)
    doc.add(Table(["metric", "value"], [
        ["TPR, mean ± std (global rounds)",
         f"{fmt(s['tpr_mean_s'])} ± {fmt(s['tpr_std_s'])} s over {s['tpr_rounds']} rounds" if g else None],
        ["steps per round, mean ± std", f"{fmt(s['steps_mean'])} ± {fmt(s['steps_std'])}" if g else None],
        ["time to stable, median / p90 / max",
         f"{fmt(s['tts_median_s'])} / {fmt(s['tts_p90_s'])} / {fmt(s['tts_max_s'])} s "
         f"({s['tts_stable']} of {s['tts_messages']} messages stable)"],
        ["gossip messages per member per second (mean)", s["gossip_msgs_per_member_s"]],
        ["gossip bytes per member per second (mean)", s["gossip_bytes_per_member_s"]],
        ["failure-detection latency, median / max",
         f"{fmt(s['fd_latency_median_s'])} / {fmt(s['fd_latency_max_s'])} s "
         f"({s['fd_detected']} of {s['fd_observers']} observations, {s['crashes']} crashes)"],
        ["declarations of members that had not crashed", s["false_declarations"]],
        ["queue drops (all link directions)", s["queue_drops"]],
        ["packets captured (undecodable)", f"{s['packets']} ({s['undecodable']})"],
    ]))

    doc.add(Heading(1, "Schedule"))
    if res.actions:
        rows = [[a["planned_s"], a["actual_s"], a["lag_ms"], a["action"], a["op"],
                 ", ".join(a["targets"] or a["links"] or [])] for a in res.actions]
        rows, note = _limit(rows, "operations", "schedule.csv")
        doc.add(Table(["planned (s)", "applied (s)", "lag (ms)", "action", "operation", "targets"], rows, note))
    else:
        doc.add(Para("No schedule operations were applied."))

    doc.add(Heading(1, "Time per round (TPR)"), Para(TPR_DEF))
    if res.tpr_summary:
        doc.add(Table(["level", "rounds (started)", "TPR mean (s)", "std", "min", "max", "steps mean", "steps std",
                       "members' own TPR mean (s)"],
                      [[r["level"], f"{r['rounds']} ({r['rounds_started']})", r["tpr_mean_s"], r["tpr_std_s"],
                        r["tpr_min_s"], r["tpr_max_s"], r["steps_mean"], r["steps_std"], r["member_tpr_mean_s"]]
                       for r in res.tpr_summary]))
        rows = [[r["level"] if r["group"] is None else f"{r['level']} {r['group']}", r["round"],
                 r["started_ts"] - run.t0, r["constructed_by"], r["tpr_s"], r["steps"], r["members_completed"],
                 r["member_tpr_mean_s"], r["steps_mean"]] for r in res.tpr]
        rows, note = _limit(rows, "rounds", "tpr.csv")
        doc.add(Table(["level", "round", "started (s)", "constructed by", "TPR (s)", "steps", "members completed",
                       "members' TPR mean (s)", "members' steps mean"], rows, note))
        doc.add(Figure(figures.tpr_per_round(res.tpr, figdir / "tpr.png"), "Steps and TPR per global round"))
    else:
        doc.add(Para("No rounds in the event logs."))

    doc.add(Heading(1, "Time to stable"), Para(TTS_DEF))
    if res.tts:
        t = res.tts_summary
        doc.add(Table(["messages", "stable", "mean (s)", "median (s)", "p90 (s)", "max (s)"],
                      [[t["messages"], t["stable"], t["mean_s"], t["median_s"], t["p90_s"], t["max_s"]]]))
        doc.add(Figure(figures.time_to_stable(res.tts, run.t0, figdir / "time_to_stable.png"),
                       "Time to stable of each data message"))
    else:
        doc.add(Para("No data messages were sent (or the senders are unknown)."))

    members = [mm.name for mm in run.members]
    doc.add(Heading(1, "Traffic"), Para(TRAFFIC_DEF))
    rows = [[r["node"], r["lifetime_s"], r["gossip_msgs"], r["gossip_msgs_per_s"], r["gossip_bytes_per_s"],
             r["data_msgs"], r["sent_msgs"], r["received_msgs"], r["undecodable"]]
            for r in sorted(res.traffic, key=lambda r: figures.natural(r["node"]))]
    rows, note = _limit(rows, "members", "traffic.csv")
    doc.add(Table(["member", "lifetime (s)", "gossip msgs", "gossip msgs/s", "gossip bytes/s", "data msgs sent",
                   "msgs sent", "msgs received", "undecodable"], rows, note))
    if res.traffic_series:
        doc.add(Figure(figures.messages_over_time(res.traffic_series, res.actions, members, BIN_S,
                                                  figdir / "messages.png"),
                       "Protocol messages sent per member per second (dashed: schedule operations)"))

    doc.add(Heading(1, "Failure detection"), Para(FD_DEF))
    if res.fd_summary:
        doc.add(Table(["crashed", "id", "crash (s)", "observers", "detected", "min (s)", "median (s)", "mean (s)",
                       "max (s)"],
                      [[r["member"], r["member_id"], r["crash_ts"] - run.t0, r["observers"], r["detected"],
                        r["min_s"], r["median_s"], r["mean_s"], r["max_s"]] for r in res.fd_summary]))
    else:
        doc.add(Para("No member was crashed."))
    if res.false_declarations:
        doc.add(Para("Declared failed while it had not crashed (paused or slow members, or K too small):"),
                Table(["member", "declarations", "observers"],
                      [[r["member"], r["declarations"], r["observers"]] for r in res.false_declarations]))
    doc.add(Figure(figures.timeline(res.actions, res.event_series, res.declarations, members, BIN_S,
                                    figdir / "timeline.png"),
                   "Schedule operations against delivery, stability and failure detection"))

    doc.add(Heading(1, "Queue drops per link"))
    dropped = [q for q in res.queues if (q["drops"] or 0) + (q["shaper_overflowed"] or 0) > 0]
    kinds = sorted({q["qdisc"] for q in res.queues if q["qdisc"]})
    if dropped:
        rows = [[q["link"], q["direction"], q["dev"], q["qdisc"], q["packets"], q["drops"], q["overlimits"],
                 q["shaper_overflowed"], q["shaper_lost"]] for q in dropped]
        rows, note = _limit(rows, "link directions with drops", "queue_drops.csv")
        doc.add(Table(["link", "direction", "interface", "qdisc", "packets", "qdisc drops", "overlimits",
                       "delay-line overflows", "delay-line losses"], rows, note))
    else:
        known = sum(1 for q in res.queues if q["drops"] is not None or q["shaper_overflowed"] is not None)
        doc.add(Para(f"No queue drops on the {known} link directions with statistics (of {len(res.queues)}; "
                     f"qdiscs: {', '.join(kinds) or 'none'})."))

    doc.add(Heading(1, "Captures"))
    rows = [[c["file"], c["packets"], c["bytes"], c["tcpdump_captured"], c["dropped_by_kernel"], c["decoded"],
             c["undecodable"], c["error"]] for c in res.captures]
    rows, note = _limit(rows, "files", "captures.csv")
    doc.add(Table(["file", "packets", "bytes", "tcpdump count", "kernel drops", "decoded", "undecodable", "error"],
                  rows, note))
    if res.undecodable:
        reasons: dict[str, int] = {}
        for u in res.undecodable:
            reasons[u["error"]] = reasons.get(u["error"], 0) + u["packets"]
        doc.add(Para("Undecodable packets by reason (all members; per member in analysis/metrics/undecodable.csv):"),
                Table(["reason", "packets"], sorted(([k, v] for k, v in reasons.items()), key=lambda r: -r[1])))

    doc.add(Heading(1, "Fidelity"))
    f = run.fidelity or {}
    doc.add(Para(f"Shaper `{f.get('shaper', m.get('shaper'))}`. Probe RTTs against the configured (expected) and the "
                 f"emulated values (what the shaper can do)."))
    paths = f.get("paths") or []
    if paths:
        doc.add(Table(["src", "dst", "hops", "expected RTT (ms)", "emulated RTT (ms)", "median RTT (ms)",
                       "error (ms)", "sent", "received", "loss"],
                      [[p.get("src"), p.get("dst"), p.get("hops"), p.get("expected_rtt_ms"), p.get("emulated_rtt_ms"),
                        p.get("median_rtt_ms"), p.get("error_ms"), p.get("sent"), p.get("received"),
                        p.get("loss_measured")] for p in paths]))
    else:
        doc.add(Para("No fidelity measurements (fidelity.json missing or empty)."))
    rate = f.get("rate")
    if rate and rate.get("measured_bps") is not None:
        doc.add(Para(f"Rate sample on link {rate.get('link')} ({rate.get('direction')}): configured "
                     f"{rate['configured_bps'] / 1000:g} kbit/s, measured {rate['measured_bps'] / 1000:.2f} kbit/s "
                     f"({100 * rate['error']:+.1f} %), train {rate.get('received')}/{rate.get('count')} packets."))
    params = f.get("parameters") or m.get("shaping_parameters")
    if params:
        doc.add(Table(["parameter", "what the shaper gives", "link directions"],
                      [[p, how, n] for p, hows in params.items() for how, n in hows.items()]))

    doc.add(Heading(1, "Files"), Bullets([
        "`analysis/packets/` (Parquet, by node), `analysis/events/` (Parquet, by event)",
        "`analysis/metrics/*.csv`, `analysis/metrics/summary.json`", "`analysis/figures/*.png`"]))
    return write(doc, run.path)


COMPARE_COLUMNS = ("run_id", "members", "subgroup", "step_s", "fail_k", "shaper", "tpr_rounds", "tpr_mean_s",
                   "tpr_std_s", "steps_mean", "tts_median_s", "gossip_msgs_per_member_s",
                   "gossip_bytes_per_member_s", "fd_latency_median_s", "false_declarations", "queue_drops")


def pooled(summaries: list[dict]) -> list[dict]:
    """Per (members, sub-group size, step interval): TPR and steps pooled over the rounds of all its runs."""
    groups: dict[tuple, list[dict]] = {}
    for s in summaries:
        groups.setdefault((s["members"], s["subgroup"], s["step_s"]), []).append(s)
    out = []
    for (n, b, step), runs in sorted(groups.items(), key=lambda kv: tuple((x is None, x) for x in kv[0])):
        tprs = [v for r in runs for v in r["tpr_values_s"]]
        steps = [v for r in runs for v in r["steps_values"]]
        out.append({"members": n, "subgroup": b, "step_s": step, "runs": len(runs), "rounds": len(tprs),
                    "tpr_mean_s": _mean(tprs), "tpr_std_s": _std(tprs),
                    "steps_mean": _mean(steps), "steps_std": _std(steps)})
    return out


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _std(xs: list[float]) -> float | None:
    if len(xs) < 2:
        return None
    m = sum(xs) / len(xs)
    return (sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) ** 0.5


def comparison_report(summaries: list[dict], failed: dict[str, str], out: Path) -> tuple[Path, Path]:
    """One table of every run's key numbers, TPR/steps against the step interval per sub-group size."""
    out.mkdir(parents=True, exist_ok=True)
    points = pooled(summaries)
    write_csv(out / "comparison.csv", summaries, COMPARE_COLUMNS)
    write_csv(out / "tpr_vs_step.csv", points)
    doc = Doc(f"Comparison of {len(summaries)} runs")
    problems = [f"{run}: {why}" for run, why in failed.items()]
    problems += [f"{s['run_id']}: {len(s['warnings'])} warning(s), see its report" for s in summaries if s["warnings"]]
    shapers = sorted({str(s["shaper"]) for s in summaries})
    if len(shapers) > 1:
        problems.append(f"the runs used different shapers ({', '.join(shapers)}): their numbers are not comparable")
    if problems:
        doc.add(Heading(1, "Warnings"), Bullets(problems, warn=True))
    doc.add(Heading(1, "Runs"), Table(list(COMPARE_COLUMNS), [[s[c] for c in COMPARE_COLUMNS] for s in summaries]))
    doc.add(Heading(1, "TPR against the step interval"),
            Para("Global rounds of all runs with the same group size, sub-group size b and step interval, pooled "
                 "(mean ± sample standard deviation): the shape of the GSGC paper's Figure 6."),
            Table(["members", "b", "step (s)", "runs", "rounds", "TPR mean (s)", "TPR std", "steps mean",
                   "steps std"],
                  [[p["members"], p["subgroup"], p["step_s"], p["runs"], p["rounds"], p["tpr_mean_s"],
                    p["tpr_std_s"], p["steps_mean"], p["steps_std"]] for p in points]))
    drawable = [p for p in points if p["tpr_mean_s"] is not None and p["step_s"] is not None]
    if drawable:
        doc.add(Figure(figures.tpr_vs_step(drawable, out / "figures" / "tpr_vs_step.png"),
                       "Steps per round and TPR against the step interval, one line per sub-group size"))
    return write(doc, out)
