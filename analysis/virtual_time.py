"""The virtual-time checks of issue #33 (docs/virtual-time.md): every table of that page from the runs' files.

    python -m analysis.virtual_time transparency SWEEP_DIR... --out DIR   the small experiments at N = 1 and N = 4
    python -m analysis.virtual_time load SET=DIR... --out DIR             quiet against loaded, with and without budgets
    python -m analysis.virtual_time probe FILE.json --out DIR             `orchestrator probe --json` at N = 10
    python -m analysis.virtual_time budget RUN_DIR... --out DIR           what members with a small budget got
    python -m analysis.virtual_time undilated SWEEP_DIR... --arp F.json --out DIR   TCP over loss, multicast, ARP
    python -m analysis.virtual_time tables --out DIR                      the .md tables again, from the CSVs only

Each subcommand writes its runs (every run, excluded ones with the reason) as a CSV and the page's table as .md,
made from the CSV alone by the same function `tables` calls, so the committed CSVs regenerate the tables. The
per-run numbers come from each protocol's run_values over the event logs (`--engine events`, the default; `--engine
spark` runs the whole Spark analysis of each run not analysed yet, which adds the packet-based msgs_per_member_s)
for the transparency and undilated checks, from the paper scripts' event-log functions for QSM's and
pbcast's throughput, and from the manifest and judges.json for the budgets.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from analysis.doc import fmt
from analysis.figlib import number, read_csv, write_csv
from analysis.stats import mean_ci, welch

# The key metrics of each small experiment's report (analysis/protocols/<p>.py key_metrics, the generic ones).
COMMON = ("delivery_ratio_mean", "latency_median_s", "msgs_per_member_s")
KEY_METRICS = {
    "gsgc": ("tpr_mean_s", "steps_mean", "tts_median_s", "fd_latency_median_s", "false_declarations",
             "gossip_msgs_per_member_s"),
    "pbcast": ("throughput_unperturbed_per_s", "throughput_perturbed_per_s", "delivered_to_all_fraction",
               "repair_fraction"),
    "qsm": ("qsm_delivery_ratio", "recovery_rate", "recovery_latency_mean_s", "ack_latency_mean_s",
            "control_packets_fraction"),
    "hyparview": ("reliability_before", "reliability_after", "reliability_after_first", "cycles_to_heal"),
}
ALPHA = 0.05


def _json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


# --- transparency: the same experiment at N = 1 and N = 4 ---------------------------------------------------------

def transparency_runs(sweeps: list[Path], master: str = "local[2]", extra: tuple[str, ...] = (),
                      engine: str = "events") -> list[dict]:
    """One row per point of the sweeps (completed or not): experiment, N, repetition, verdict, the key metrics (and
    the values' `extra` keys), by `engine` (analysis.sweep.run_values_of: `events`, the protocols' run_values from
    the event logs; `spark`, the full Spark analysis with run_values merged, which also gives the packet-based
    `msgs_per_member_s`)."""
    from analysis.sweep import run_summaries

    rows = []
    for root in sweeps:
        index = _json(root / "sweep.json")
        points = index.get("points") or {}
        done = [e["run_dir"] for e in points.values() if e.get("status") == "completed" and e.get("run_dir")]
        summaries, _ = run_summaries(root, done, master, engine)
        for pid, e in sorted(points.items()):
            rd = e.get("run_dir")
            s = summaries.get(rd, {}) if rd else {}
            j = _json(root / rd / "judges.json") if rd else {}
            m = _json(root / rd / "manifest.json") if rd else {}
            protocol = s.get("protocol")
            row = {"experiment": root.name, "point": pid, "dilation": (m.get("time") or {}).get("dilation", 1.0),
                   "rep": e.get("rep"), "seed": m.get("seed"), "status": e.get("status"), "run_dir": rd,
                   "verdict": j.get("verdict"), "lag_p99_ms": j.get("lag_p99_ms"), "hold_p99_ms": j.get("hold_p99_ms"),
                   "protocol": protocol,
                   "excluded": None if e.get("status") == "completed" and s else
                   f"not completed ({e.get('status')}: {e.get('error')})" if e.get("status") != "completed"
                   else "no analysis summary"}
            for k in (*COMMON, *KEY_METRICS.get(protocol or "", ()), *extra):
                row[k] = s.get(k)
            rows.append(row)
    return rows


def transparency_table(rows: list[dict]) -> str:
    """Per experiment and key metric: mean ± 95 % CI at N = 1 and at N = 4, Welch's p, agreement (p > 0.05)."""
    out = ["| experiment | metric | N = 1: mean ± 95 % CI (runs) | N = 4: mean ± 95 % CI (runs) | difference | "
           "Welch p | agree |", "|---|---|---|---|---|---|---|"]
    agree_n = total = 0
    for exp in sorted({r["experiment"] for r in rows}):
        rs = [r for r in rows if r["experiment"] == exp and not r.get("excluded")]
        protocol = next((r["protocol"] for r in rs if r.get("protocol")), "")
        for k in (*KEY_METRICS.get(protocol, ()), *COMMON):
            a = [x for r in rs if number(r["dilation"]) == 1 and (x := number(r.get(k))) is not None]
            b = [x for r in rs if number(r["dilation"]) == 4 and (x := number(r.get(k))) is not None]
            if not a and not b:
                continue
            (ma, ca), (mb, cb) = mean_ci(a), mean_ci(b)
            w = welch(b, a)
            if w["p"] is None:
                same = a and b and max(a) == min(a) == max(b) == min(b)
                verdict = "yes (identical)" if same else "–"
            else:
                verdict = "yes" if w["p"] > ALPHA else "**no**"
            agree_n += verdict.startswith("yes")
            total += verdict != "–"
            out.append(f"| {exp} | {k} | {fmt(ma)} ± {fmt(ca)} ({len(a)}) | {fmt(mb)} ± {fmt(cb)} ({len(b)}) | "
                       f"{fmt(w['diff'])} | {fmt(w['p'])} | {verdict} |")
    out.append("")
    out.append(f"{agree_n} of {total} metrics agree (Welch p > {ALPHA}); difference = mean at N = 4 minus mean at "
               f"N = 1; identical samples have no p.")
    return "\n".join(out) + "\n"


# --- load: quiet against loaded -----------------------------------------------------------------------------------

def _throughput(run_dir: Path, kind: str) -> dict:
    if kind == "qsm":
        from analysis.protocols.qsm import PLUGIN
        from analysis.rundir import load
        r = PLUGIN.run_values(load(run_dir))
        return {"throughput": r.get("throughput"), "delivery": r.get("delivery")}
    from analysis import protocols
    from analysis.rundir import load
    v = protocols.get("vsync").run_values(load(run_dir))
    return {"throughput": v.get("throughput_unperturbed_per_s"), "delivery": v.get("throughput_unperturbed_1s_per_s")}


def load_runs(sets: list[tuple[str, Path]], load_log: Path | None = None) -> list[dict]:
    """`sets`: (name, directory of run directories). A set's name is `<qsm|pbcast>-<budget|plain>-<quiet|loaded>`."""
    from analysis.runlogs import load_during, read_load

    load = read_load(load_log)
    rows = []
    for name, d in sets:
        kind, config, condition = name.split("-", 2)
        for rd in sorted(f.parent for f in d.glob("**/manifest.json")):
            m = _json(rd / "manifest.json")
            j = _json(rd / "judges.json")
            lmean, lmax = load_during(load, m.get("started_at") or 0, m.get("ended_at") or 0)
            row = {"set": name, "kind": kind, "config": config, "condition": condition, "run_dir": str(rd),
                   "status": m.get("status"), "seed": m.get("seed"),
                   "dilation": (m.get("time") or {}).get("dilation", 1.0),
                   "cpu": (m.get("cpu_budget") or {}).get("cpu"), "load_mean": lmean, "load_max": lmax,
                   "verdict": j.get("verdict"), "reasons": "; ".join(j.get("reasons") or []),
                   "cpu_wait_ms": j.get("cpu_wait_ms"), "budget_bound": j.get("budget_bound"),
                   "wall_s": (m.get("ended_at") or 0) - (m.get("started_at") or 0)}
            if m.get("status") == "completed":
                row.update(_throughput(rd, kind))
                row["excluded"] = None
            else:
                row["excluded"] = f"not completed ({m.get('status')})"
            rows.append(row)
    return rows


def load_table(rows: list[dict]) -> str:
    out = ["| experiment | configuration | quiet: mean ± 95 % CI (runs) | loaded: mean ± 95 % CI (runs) | "
           "loaded / quiet | Welch p | within 5 % or CIs overlap | N | load (quiet / loaded) |",
           "|---|---|---|---|---|---|---|---|---|"]
    for kind in sorted({r["kind"] for r in rows}):
        for config in ("budget", "plain"):
            rs = [r for r in rows if r["kind"] == kind and r["config"] == config and not r.get("excluded")]
            if not rs:
                continue
            q = [x for r in rs if r["condition"] == "quiet" and (x := number(r.get("throughput"))) is not None]
            lo = [x for r in rs if r["condition"] == "loaded" and (x := number(r.get("throughput"))) is not None]
            (mq, cq), (ml, cl) = mean_ci(q), mean_ci(lo)
            w = welch(lo, q)
            ratio = ml / mq if mq and ml is not None else None
            overlap = (mq is not None and ml is not None and cq is not None and cl is not None
                       and abs(ml - mq) <= cq + cl)
            ok = ratio is not None and (abs(ratio - 1) <= 0.05 or overlap)
            ns = sorted({number(r["dilation"]) for r in rs})
            loads = [f"{fmt(statistics_mean([number(r.get('load_mean')) for r in rs if r['condition'] == c]))}"
                     for c in ("quiet", "loaded")]
            label = "budgets + auto" if config == "budget" else "N = 1, no budget (today's)"
            out.append(f"| {kind} | {label} | {fmt(mq)} ± {fmt(cq)} ({len(q)}) | {fmt(ml)} ± {fmt(cl)} ({len(lo)}) "
                       f"| {fmt(ratio)} | {fmt(w['p'])} | {'yes' if ok else '**no**'} | "
                       f"{', '.join(f'{n:g}' for n in ns if n is not None)} | {' / '.join(loads)} |")
    out.append("")
    out.append("Throughput in packets (QSM) or multicasts (vsync) per virtual second; loaded = two busy loops "
               "(`python3 -c 'while True: pass'`) on the machine during the runs; load = the 1-minute load average "
               "sampled every 10 s during each run, mean over the runs.")
    return "\n".join(out) + "\n"


def statistics_mean(xs: list[float | None]) -> float | None:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


# --- the probe at N = 10 ------------------------------------------------------------------------------------------

def probe_rows(doc: dict) -> list[dict]:
    rows = []
    for p in doc.get("paths") or []:
        med, exp = p.get("median_rtt_ms"), p.get("expected_rtt_ms")
        rtts = p.get("rtt_ms") or []
        rows.append({"src": p["src"], "dst": p["dst"], "hops": p["hops"], "dilation": doc.get("dilation", 1.0),
                     "expected_rtt_ms": exp, "median_rtt_ms": med, "min_rtt_ms": min(rtts, default=None),
                     "max_rtt_ms": max(rtts, default=None), "sent": p.get("sent"), "received": p.get("received"),
                     "rel_error": (med - exp) / exp if med is not None and exp else None})
    return rows


def probe_table(rows: list[dict]) -> str:
    out = ["| path | hops | N | configured RTT: 2 x Σ (delay + serialisation) (ms) | measured median, virtual (ms) | "
           "min – max | pings | error of the median | within ± 0.3 % |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        e = number(r.get("rel_error"))
        out.append(f"| {r['src']} → {r['dst']} | {r['hops']} | {fmt(number(r['dilation']))} | "
                   f"{fmt(number(r['expected_rtt_ms']))} | {fmt(number(r['median_rtt_ms']))} | "
                   f"{fmt(number(r.get('min_rtt_ms')))} – {fmt(number(r.get('max_rtt_ms')))} | "
                   f"{r.get('received')}/{r.get('sent')} | "
                   f"{'–' if e is None else f'{e:+.3%}'} | {'yes' if e is not None and abs(e) <= 0.003 else '**no**'} |")
    out.append("")
    out.append("ping prints a round trip of 100 ms or more in whole milliseconds: at N = 10 that is a resolution of "
               "0.1 virtual ms (0.14 % of a 70.8 ms hop), finer than the ± 0.3 % asked.")
    return "\n".join(out) + "\n"


# --- budgets --------------------------------------------------------------------------------------------------

def budget_rows(run_dirs: list[Path]) -> list[dict]:
    rows = []
    for rd in run_dirs:
        m = _json(rd / "manifest.json")
        b = m.get("cpu_budget") or {}
        n = b.get("dilation") or 1.0
        for unit, u in sorted((b.get("units") or {}).items()):
            r = u.get("run") or {}
            wall, used = r.get("wall_s"), r.get("usage_s")
            rows.append({"run_dir": str(rd), "packing": (m.get("packing") or {}).get("mode"), "unit": unit,
                         "members": u.get("members"), "dilation": n, "budget_virtual_cores": u.get("virtual_cores"),
                         "quota_real_cores": u.get("real_cores"), "wall_s": wall, "usage_s": used,
                         "virtual_cores_used": used / (wall / n) if wall and used is not None else None,
                         "nr_periods": r.get("nr_periods"), "nr_throttled": r.get("nr_throttled")})
    return rows


def budget_table(rows: list[dict]) -> str:
    out = ["| run | process | members | N | budget (virtual cores) | used over the run (virtual cores) | error | "
           "periods throttled |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        b, u = number(r["budget_virtual_cores"]), number(r["virtual_cores_used"])
        out.append(f"| {Path(r['run_dir']).name} | {r['unit']} | {r['members']} | {fmt(number(r['dilation']))} | "
                   f"{fmt(b)} | {fmt(u)} | {'–' if b is None or u is None else f'{u - b:+.4f}'} | "
                   f"{r['nr_throttled']} of {r['nr_periods']} |")
    return "\n".join(out) + "\n"


# --- what is not dilated: TCP's timers, multicast without IGMP timers, ARP ----------------------------------------

UNDILATED_METRICS = ("latency_median_s", "latency_p90_s", "latency_p99_s", "latency_max_s", "delivery_ratio_mean")


def undilated_runs(sweeps: list[Path], arp: list[Path], master: str = "local[2]", engine: str = "events") -> list[dict]:
    rows = [{**r, "check": r["experiment"]} for r in transparency_runs(sweeps, master, UNDILATED_METRICS, engine)]
    for f in arp:
        doc = _json(f)
        for t in doc.get("trials") or []:
            rows.append({"check": "arp", "experiment": f.name, "dilation": doc.get("dilation"), "link": t["link"],
                         "first_ms": t["first_ms"], "second_ms": t["second_ms"]})
    return rows


def undilated_table(rows: list[dict]) -> str:
    out = ["| check | metric | N = 1: mean ± 95 % CI (runs) | N > 1: mean ± 95 % CI (runs) | N | Welch p |",
           "|---|---|---|---|---|---|"]
    for check in sorted({r["check"] for r in rows if r["check"] != "arp"}):
        rs = [r for r in rows if r["check"] == check and not r.get("excluded")]
        ns = sorted({number(r["dilation"]) for r in rs} - {1.0, None})
        for k in UNDILATED_METRICS:
            a = [x * (1000 if k.endswith("_s") else 1) for r in rs if number(r["dilation"]) == 1
                 and (x := number(r.get(k))) is not None]
            b = [x * (1000 if k.endswith("_s") else 1) for r in rs if number(r["dilation"]) in ns
                 and (x := number(r.get(k))) is not None]
            (ma, ca), (mb, cb) = mean_ci(a), mean_ci(b)
            unit = " (virtual ms)" if k.endswith("_s") else ""
            out.append(f"| {check} | {k.removesuffix('_s')}{unit} | {fmt(ma)} ± {fmt(ca)} ({len(a)}) | "
                       f"{fmt(mb)} ± {fmt(cb)} ({len(b)}) | {', '.join(f'{n:g}' for n in ns)} | "
                       f"{fmt(welch(b, a)['p'])} |")
    arp = [r for r in rows if r["check"] == "arp"]
    if arp:
        out += ["", "| ARP: the first ping's extra RTT (first − second) | N | trials | median, real ms | max, real ms | "
                    "median, virtual ms |", "|---|---|---|---|---|---|"]
        for n in sorted({number(r["dilation"]) for r in arp}):
            xs = sorted(number(r["first_ms"]) - number(r["second_ms"]) for r in arp if number(r["dilation"]) == n)
            med = xs[len(xs) // 2] if xs else None
            out.append(f"| neighbour resolution | {n:g} | {len(xs)} | {fmt(med)} | {fmt(max(xs) if xs else None)} | "
                       f"{fmt(med / n if med is not None else None)} |")
    return "\n".join(out) + "\n"


# --- the command ----------------------------------------------------------------------------------------------

TABLES = {"transparency": transparency_table, "load": load_table, "probe": probe_table, "budget": budget_table,
          "undilated": undilated_table}


def _write(out: Path, name: str, rows: list[dict]) -> None:
    write_csv(out / f"{name}_runs.csv", rows)
    (out / f"{name}.md").write_text(TABLES[name](read_csv(out / f"{name}_runs.csv", strings=True)))
    print(out / f"{name}.md")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m analysis.virtual_time", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("transparency", "load", "probe", "budget", "undilated", "tables"):
        p = sub.add_parser(name)
        p.add_argument("--out", type=Path, required=True)
        if name != "tables":
            p.add_argument("inputs", nargs="+")
        if name in ("transparency", "undilated"):
            p.add_argument("--master", default="local[2]")
            p.add_argument("--engine", choices=("events", "spark"), default="events",
                           help="events: each protocol's run_values from the event logs (default); spark: the "
                                "whole Spark analysis of every run not analysed yet (minutes per run)")
        if name == "undilated":
            p.add_argument("--arp", nargs="*", default=[], type=Path)
        if name == "load":
            p.add_argument("--load-log", type=Path)
    a = ap.parse_args(argv)
    if a.cmd == "transparency":
        _write(a.out, "transparency", transparency_runs([Path(x) for x in a.inputs], a.master, engine=a.engine))
    elif a.cmd == "load":
        sets = [(x.split("=", 1)[0], Path(x.split("=", 1)[1])) for x in a.inputs]
        _write(a.out, "load", load_runs(sets, a.load_log))
    elif a.cmd == "probe":
        _write(a.out, "probe", [r for f in a.inputs for r in probe_rows(_json(Path(f)))])
    elif a.cmd == "budget":
        _write(a.out, "budget", budget_rows([Path(x) for x in a.inputs]))
    elif a.cmd == "undilated":
        _write(a.out, "undilated", undilated_runs([Path(x) for x in a.inputs], a.arp, a.master, a.engine))
    else:
        for name, table in TABLES.items():
            f = a.out / f"{name}_runs.csv"
            if f.exists():
                (a.out / f"{name}.md").write_text(table(read_csv(f, strings=True)))
                print(a.out / f"{name}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
