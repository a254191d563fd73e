"""What a CPU budget's second was worth (`make repro-host-speed`, docs/virtual-time.md "What a budget cannot
hold"): budgeted QSM runs (Figure 14's k = 1 point: one sender at its budget) under labelled conditions, one row
per run with what its CPU time bought.

Per run, from the analysis's runs.csv (analysis.figures_qsm: throughput, messages, verdict, the host speed) and
the run's manifest (`cpu_budget`: each member process's CPU over the run, from its cgroup):

- `sent_per_s`: the sender's messages per virtual second; `messages`: QSM messages sent;
- `sender_cpu_s`, `receiver_cpu_s`: the sender's CPU over the run, the receivers' mean (real seconds);
- `sender_us_per_msg`, `receiver_us_per_msg`: CPU per message, µs (the sender's: what its budget bought);
- `sender_cpu_per_slice_us`: the sender's CPU per time it ran (scheduler timeslices);
- `throttled_share`: the share of the sender's CFS periods in which it was throttled (at its budget);
- `delayline_us_per_pkt`: the delay line's CPU per packet it held, µs (judges.json; it has no budget);
- `host_speed_memory`, `host_speed_compute`: the machine's work per CPU-second over the run
  (orchestrator.hostspeed; empty for runs from before it was sampled).

    python -m experiments.host_speed_table LABEL=RUNS.CSV ... [--only COL=VALUE] --out DIR
writes DIR/runs.csv, DIR/table.md (mean ± 95 % CI per condition) and DIR/cpu_per_message.png;
`python -m experiments.host_speed_table tables DIR` redraws the table and the figure from DIR/runs.csv alone. A run whose directory is not on this machine
keeps its row, excluded with that reason.
"""
from __future__ import annotations

import argparse
import csv
import json
import statistics
import time
from pathlib import Path
from typing import Any

from analysis.figlib import Col, aggregate, md_table, pyplot, save, write_csv

VALUES = ("sent_per_s", "sender_us_per_msg", "receiver_us_per_msg", "sender_cpu_per_slice_us", "throttled_share",
          "delayline_us_per_pkt",
          "host_speed_memory", "host_speed_compute")

LABELS = {"sent_per_s": "sent/s", "sender_us_per_msg": "sender µs/msg", "receiver_us_per_msg": "receiver µs/msg",
          "sender_cpu_per_slice_us": "sender µs/run", "throttled_share": "sender throttled",
          "delayline_us_per_pkt": "delay line µs/packet",
          "host_speed_memory": "host speed: memory", "host_speed_compute": "host speed: compute"}


def run_row(row: dict[str, str], manifest: dict[str, Any], judges: dict[str, Any] | None = None,
            sender: str = "h0") -> dict[str, Any]:
    """One run's row (pure): the runs.csv row's numbers, the manifest's per-process CPU and the judges' delay
    line CPU."""
    def num(k):
        try:
            return float(row[k]) if row.get(k) not in (None, "") else None
        except ValueError:
            return None
    units = (manifest.get("cpu_budget") or {}).get("units") or {}
    s = (units.get(sender) or {}).get("run") or {}
    others = [(u.get("run") or {}).get("usage_s") for name, u in units.items() if name != sender]
    others = [x for x in others if isinstance(x, (int, float))]
    msgs = num("data_messages")
    out: dict[str, Any] = {
        "run": row.get("run"), "started": time.strftime("%Y-%m-%d %H:%M", time.gmtime(manifest["started_at"]))
        if isinstance(manifest.get("started_at"), (int, float)) else None,
        "dilation": num("dilation"), "seed": row.get("seed"),
        "verdict": row.get("verdict"), "excluded": row.get("excluded") or None,
        "sent_per_s": num("throughput"), "messages": msgs,
        "sender_cpu_s": s.get("usage_s"), "receiver_cpu_s": sum(others) / len(others) if others else None,
        "host_speed_memory": num("host_speed_memory"), "host_speed_compute": num("host_speed_compute")}
    ok = isinstance(s.get("usage_s"), (int, float)) and msgs
    out["sender_us_per_msg"] = s["usage_s"] / msgs * 1e6 if ok else None
    out["receiver_us_per_msg"] = out["receiver_cpu_s"] / msgs * 1e6 if msgs and out["receiver_cpu_s"] else None
    out["sender_cpu_per_slice_us"] = (s["usage_s"] / s["timeslices"] * 1e6
                                      if ok and s.get("timeslices") else None)
    out["throttled_share"] = s["nr_throttled"] / s["nr_periods"] if s.get("nr_periods") else None
    j = judges or {}
    dl, pkts = j.get("delayline_cores"), j.get("delayline_pkts_per_s")
    out["delayline_us_per_pkt"] = dl / pkts * 1e6 if isinstance(dl, (int, float)) and pkts else None
    return out


def collect(labelled: list[tuple[str, Path]], only: dict[str, str] | None = None) -> list[dict[str, Any]]:
    rows = []
    for label, runs_csv in labelled:
        with runs_csv.open() as f:
            for row in csv.DictReader(f):
                if any(k in row and row[k] != v for k, v in (only or {}).items()):
                    continue
                m_path = Path(row["run_dir"]) / "manifest.json"
                manifest = json.loads(m_path.read_text()) if m_path.exists() else {}
                j_path = Path(row["run_dir"]) / "judges.json"
                r = run_row(row, manifest, json.loads(j_path.read_text()) if j_path.exists() else None)
                if not manifest:
                    r["excluded"] = r["excluded"] or "run directory not on this machine"
                rows.append({"condition": label, **r})
    return rows


def figure(rows: list[dict[str, Any]], order: list[str], path: Path) -> Path:
    """Left: the sender's CPU per message, every run, per condition; right: the same against the host's memory
    speed over the run (runs that sampled it)."""
    plt = pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    kept = [r for r in rows if not r["excluded"] and r["sender_us_per_msg"] is not None]
    for i, c in enumerate(order):
        ys = [r["sender_us_per_msg"] for r in kept if r["condition"] == c]
        a.scatter([i] * len(ys), ys, s=28)
        xs = [(r["host_speed_memory"], r["sender_us_per_msg"]) for r in kept
              if r["condition"] == c and r["host_speed_memory"] is not None]
        if xs:
            b.scatter(*zip(*xs), s=28, label=c)
    a.set_xticks(range(len(order)), order, rotation=15, fontsize=8)
    a.set_ylabel("sender CPU per message (µs)")
    a.set_ylim(bottom=0)
    b.set_xlabel("host speed over the run: memory (work units per CPU-second)")
    b.set_ylabel("sender CPU per message (µs)")
    b.set_ylim(bottom=0)
    if b.get_legend_handles_labels()[0]:
        b.legend(fontsize=8)
    else:                               # no run sampled the host's speed (runs from before the sampler)
        b.set_visible(False)
    return save(fig, path, title="What a budgeted CPU-second bought (QSM Figure 14, k = 1, 0.2 virtual cores per member)")


def render(rows: list[dict[str, Any]], order: list[str], out: Path) -> str:
    """table.md and the figure from the rows (runs.csv's); returns the table."""
    kept = [r for r in rows if not r["excluded"]]
    agg = aggregate(kept, ("condition",), VALUES)
    agg.sort(key=lambda r: order.index(r["condition"]))
    cols = [Col("condition"), Col("runs"), Col("excluded")] + [Col(v, LABELS.get(v), ci=True) for v in VALUES]
    text = md_table(agg, cols)
    pairs = [(r["host_speed_memory"], r["host_speed_compute"], r["sender_us_per_msg"]) for r in kept
             if None not in (r["host_speed_memory"], r["host_speed_compute"], r["sender_us_per_msg"])]
    if len(pairs) >= 3:     # how far the sampled speed follows what a CPU-second bought, over every kept run
        mem, comp, cost = zip(*pairs)
        text += (f"\nPearson r over the {len(pairs)} runs, sender µs/msg against host speed: memory "
                 f"{statistics.correlation(mem, cost):.2f}, compute {statistics.correlation(comp, cost):.2f}\n")
    (out / "table.md").write_text(text)
    figure(rows, order, out / "cpu_per_message.png")
    return (out / "table.md").read_text()


def read_rows(path: Path) -> list[dict[str, Any]]:
    """runs.csv back into rows (numbers as floats, empty cells as None)."""
    def value(k, v):
        if v == "":
            return None
        if k in VALUES or k in ("messages", "sender_cpu_s", "receiver_cpu_s", "dilation"):
            return float(v)
        return v
    with path.open() as f:
        return [{k: value(k, v) for k, v in r.items()} for r in csv.DictReader(f)]


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        import sys
        argv = sys.argv[1:]
    if argv[:1] == ["tables"]:          # redraw from a committed runs.csv alone
        out = Path(argv[1])
        rows = read_rows(out / "runs.csv")
        print(render(rows, list(dict.fromkeys(r["condition"] for r in rows)), out))
        return 0
    ap = argparse.ArgumentParser(prog="python -m experiments.host_speed_table")
    ap.add_argument("inputs", nargs="+", help="LABEL=RUNS.CSV (an analysis.figures_qsm runs.csv)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--only", action="append", default=[], metavar="COL=VALUE",
                    help="keep the rows whose COL is VALUE (rows without COL are kept)")
    a = ap.parse_args(argv)
    only = dict(x.partition("=")[::2] for x in a.only)
    labelled = []
    for item in a.inputs:
        label, sep, path = item.partition("=")
        if not sep:
            ap.error(f"{item!r}: expected LABEL=RUNS.CSV")
        labelled.append((label, Path(path)))
    rows = collect(labelled, only)
    a.out.mkdir(parents=True, exist_ok=True)
    write_csv(a.out / "runs.csv", rows)
    print(render(rows, [label for label, _ in labelled], a.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
