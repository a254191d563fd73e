"""`report.md` and `report.html` of one run (in the run directory), and the comparison report of several runs."""
from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from analysis import figures
from analysis.doc import Bullets, Doc, Figure, Heading, Para, Table, fmt, write
from analysis import protocols
from analysis.protocols import ReportContext
from analysis.run import BIN_S, RunResult, write_csv

MAX_ROWS = 40

DELIVERY_DEF = ("Delivery of data message (origin, seq), from every protocol's `data_sent` (at the origin) and "
                "`data_received` (first arrival at each receiver): the members counted are those other than the "
                "origin that had started by the send and had not crashed at or before it; the delivery ratio is the "
                "fraction of them that logged the message, latency = receipt − send.")
TRAFFIC_TYPES_DEF = ("Messages the members sent (their own captures, decoded, direction out), per protocol and "
                     "type; bytes = the message (envelope + the rest). Rates are per member-second of the captured "
                     "members' lifetimes. Control = the types that carry no application data.")
def _limit(rows: list[list[Any]], what: str, csv_name: str) -> tuple[list[list[Any]], str | None]:
    if len(rows) <= MAX_ROWS:
        return rows, None
    return rows[:MAX_ROWS], f"first {MAX_ROWS} of {len(rows)} {what}; all in analysis/metrics/{csv_name}"


def _utc(ts: float | None) -> str | None:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC") if ts else None


def time_row(m: dict) -> str:
    """The run's time dilation (docs/virtual-time.md): every time in the report is virtual."""
    t = m.get("time") or {}
    n = t.get("dilation", 1)
    if n == 1 and t.get("requested", 1) != "auto":
        return "real time (dilation 1)"
    how = "auto: " + "; ".join(t.get("reasons") or []) if t.get("requested") == "auto" else "as configured"
    return f"dilation {n:g}: one virtual second lasted {n:g} real seconds; every time here is virtual ({how})"


def judges_row(j: dict | None) -> str:
    if not j:
        return "not judged (no judges.json)"
    parts = [f"{k} {fmt(j.get(v))} ms" for k, v in (("timer lag p99", "lag_p99_ms"), ("hold error p99", "hold_p99_ms"))
             if j.get(v) is not None]
    verdict = j.get("verdict", "unjudged")
    return f"{verdict}" + (f" ({'; '.join(j.get('reasons') or [])})" if j.get("reasons") else "") + \
        (f": {', '.join(parts)}" if parts else "")


def budget_row(b: dict | None, j: dict | None) -> str:
    if not b:
        return "none (members take what the machine gives)"
    if not b.get("enforced"):
        return f"{b.get('cpu')} virtual cores per member, NOT enforced ({b.get('reason')})"
    j = j or {}
    units = b.get("units") or {}
    out = f"{b.get('cpu'):g} virtual cores per member ({b.get('mechanism')}, {len(units)} processes)"
    if j.get("budget_bound") is not None:
        out += (f"; {j['budget_bound']} ran at their budget (throttled in most periods, max "
                f"{fmt(j.get('throttled_share_max'))})")
    if j.get("cpu_wait_ms") is not None:
        out += f"; longest mean wait for a CPU {fmt(j['cpu_wait_ms'])} ms virtual ({j.get('cpu_wait_unit')})"
    return out


def host_speed_row(speed: dict | None) -> str:
    """The manifest's `host_speed` (orchestrator.hostspeed): what a CPU-second of the machine did over the run."""
    if not speed:
        return "not sampled (a run from before the sampler, or members on other machines)"
    return (f"memory {fmt(speed.get('memory'))} (min {fmt(speed.get('memory_min'))}), compute "
            f"{fmt(speed.get('compute'))} work units per CPU-second over {speed.get('samples')} samples "
            f"(this machine's units: compare with repetitions of this run, docs/virtual-time.md)")


def run_report(res: RunResult) -> tuple[Path, Path]:
    run, s, m, plugin = res.run, res.summary, res.run.manifest, res.plugin
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
        ["protocol", plugin.describe(run)],
        ["workload", ", ".join(f"{k} {v}" for k, v in (spec.get("workload") or {}).items())],
        ["started / duration", f"{_utc(m.get('t0_real_unix') or run.t0)} / {fmt(s['duration_s'])} s"],
        ["time", time_row(m)],
        ["schedule lag (median / max)", f"{fmt(sched.get('lag_ms_median'))} / {fmt(sched.get('lag_ms_max'))} ms"],
        ["fidelity probe (max |error|, received/sent)",
         f"{fmt(fid.get('max_abs_error_ms'))} ms, {fid.get('received')}/{fid.get('sent')}"],
        ["fidelity judges", judges_row(run.judges)],
        ["CPU budget", budget_row(m.get("cpu_budget"), run.judges)],
        ["host speed", host_speed_row(m.get("host_speed"))],
    ]))

    doc.add(Heading(1, "Warnings"))
    shaping = [f"shaper {m.get('shaper')}: {w}" for w in m.get("shaping_warnings") or []]
    judged = [f"unfaithful run: {r}" for r in (run.judges or {}).get("reasons") or []]
    shaping += [str(w) for w in m.get("warnings") or []] + judged
    if shaping or run.warnings:
        doc.add(Bullets(shaping + run.warnings, warn=True))
    else:
        doc.add(Para("None."))

    doc.add(Heading(1, "Key metrics"))
    doc.add(Table(["metric", "value"], [
        ["data messages delivered to every member alive at the send",
         f"{s['delivered_complete']} of {s['data_messages']}"],
        ["delivery ratio, mean / min", f"{fmt(s['delivery_ratio_mean'])} / {fmt(s['delivery_ratio_min'])}"],
        ["delivery latency, median / p90 / max",
         f"{fmt(s['latency_median_s'])} / {fmt(s['latency_p90_s'])} / {fmt(s['latency_max_s'])} s"],
        ["control overhead, messages / bytes",
         f"{fmt(s['control_msgs_fraction'])} / {fmt(s['control_bytes_fraction'])}"],
        ["messages sent per member per second", s["msgs_per_member_s"]],
        *plugin.key_metrics(s),
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

    members = [mm.name for mm in run.members]
    doc.add(Heading(1, "Delivery"), Para(DELIVERY_DEF))
    d = res.delivery_summary
    if d.get("messages"):
        doc.add(Table(["data messages", "delivered to all", "ratio mean", "ratio min", "receipts (expected)",
                       "latency mean (s)", "median", "p90", "p99", "max"],
                      [[d["messages"], d["complete"], d["delivery_ratio_mean"], d["delivery_ratio_min"],
                        f"{d['receipts']} ({d['receipts_expected']})", d["latency_mean_s"], d["latency_median_s"],
                        d["latency_p90_s"], d["latency_p99_s"], d["latency_max_s"]]]))
        doc.add(Para("Latency distribution over all receipts (quantiles, exact):"),
                Table([f"p{round(100 * q['quantile'])}" for q in res.latency_quantiles],
                      [[q["latency_s"] for q in res.latency_quantiles]]))
        worst = sorted((r for r in res.delivery if r["received"] < r["members"]),
                       key=lambda r: (r["delivery_ratio"], r["sent_ts"]))
        if worst:
            rows, note = _limit([[r["origin"], r["seq"], r["sent_ts"] - run.t0, r["members"], r["received"],
                                  r["delivery_ratio"]] for r in worst], "incompletely delivered messages",
                                "delivery.csv")
            doc.add(Para("Messages some counted member never logged (lowest ratio first):"),
                    Table(["origin", "seq", "sent (s)", "members", "received", "ratio"], rows, note))
    else:
        doc.add(Para("No `data_sent` events (no data workload, or the senders' logs are missing)."))

    doc.add(Heading(1, "Traffic by message type"), Para(TRAFFIC_TYPES_DEF))
    if res.traffic_types:
        o = res.overhead
        doc.add(Table(["protocol", "type", "data", "messages", "bytes", "msgs / member / s", "bytes / member / s"],
                      [[r["protocol_name"], r["type_name"], r["data"], r["messages"], r["bytes"],
                        r["msgs_per_member_s"], r["bytes_per_member_s"]] for r in res.traffic_types]))
        doc.add(Para(f"Control overhead: {o['control_messages']} of {o['messages']} messages "
                     f"({fmt(o['control_msgs_fraction'])}), {o['control_bytes']} of {o['bytes']} bytes "
                     f"({fmt(o['control_bytes_fraction'])})."))
    else:
        doc.add(Para("No decoded message was sent in the captures."))
    if res.by_transport:
        per: dict[tuple, int] = {}
        for r in res.by_transport:
            key = (r["transport"], r["protocol_name"], r["type_name"])
            per[key] = per.get(key, 0) + r["messages"]
        doc.add(Para("Messages in all captures (sent and received) per transport:"),
                Table(["transport", "protocol", "type", "messages"], [[*k, v] for k, v in sorted(per.items())]))
    if res.traffic_series:
        doc.add(Figure(figures.messages_over_time(res.traffic_series, res.actions, members, BIN_S,
                                                  figdir / "messages.png"),
                       "Protocol messages sent per member per second (dashed: schedule operations)"))
    doc.add(Figure(figures.timeline(res.actions, res.event_series, plugin.timeline_marks(res.data), members, BIN_S,
                                    figdir / "timeline.png", throughput=res.throughput),
                   "Schedule operations against throughput, delivery and the protocol's events"))

    plugin.report(doc, ReportContext(run, s, res.data, res.actions, figdir, BIN_S))

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


COMPARE_COLUMNS = ("run_id", "protocol", "members", "shaper", "data_messages", "delivery_ratio_mean",
                   "latency_median_s", "latency_p90_s", "msgs_per_member_s", "control_bytes_fraction", "queue_drops")


def comparison_report(summaries: list[dict], failed: dict[str, str], out: Path) -> tuple[Path, Path]:
    """One table of every run's key numbers (the generic ones, then each protocol's), and each protocol's own
    comparison sections over its runs (GSGC: TPR/steps against the step interval per sub-group size)."""
    out.mkdir(parents=True, exist_ok=True)
    by_proto: dict[str, list[dict]] = {}
    for s in summaries:
        by_proto.setdefault(protocols.summary_protocol(s), []).append(s)
    columns = list(COMPARE_COLUMNS)
    for name in sorted(by_proto):
        columns += [c for c in protocols.get(name).compare_columns if c not in columns]
    rows = [{**s, "protocol": protocols.summary_protocol(s)} for s in summaries]
    write_csv(out / "comparison.csv", rows, columns)
    doc = Doc(f"Comparison of {len(summaries)} runs")
    problems = [f"{run}: {why}" for run, why in failed.items()]
    problems += [f"{s['run_id']}: {len(s['warnings'])} warning(s), see its report" for s in summaries
                 if s.get("warnings")]
    shapers = sorted({str(s.get("shaper")) for s in summaries})
    if len(shapers) > 1:
        problems.append(f"the runs used different shapers ({', '.join(shapers)}): their numbers are not comparable")
    if len(by_proto) > 1:
        problems.append(f"the runs used different protocols ({', '.join(sorted(by_proto))}): each protocol's "
                        f"sections compare its own runs")
    if problems:
        doc.add(Heading(1, "Warnings"), Bullets(problems, warn=True))
    doc.add(Heading(1, "Runs"), Table(list(COMPARE_COLUMNS), [[r.get(c) for c in COMPARE_COLUMNS] for r in rows]))
    for name, runs in sorted(by_proto.items()):
        plugin = protocols.get(name)
        own = [c for c in plugin.compare_columns]
        if own:
            doc.add(Heading(1, f"Runs of {plugin.title or name}"),
                    Table(["run_id", *own], [[r.get("run_id"), *[r.get(c) for c in own]] for r in runs]))
        plugin.compare(runs, doc, out)
    return write(doc, out)
