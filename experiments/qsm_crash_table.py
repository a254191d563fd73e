"""QSM with members crashed during recovery (`make repro-qsm-crash`, topologies/qsm-crash-sweep.yaml): one row per
run (docs/results/qsm-crash/runs.csv, excluded runs kept with the reason) and the table per failure-detection delay
(table.md, mean ± 95 % CI over the repetitions). Per run, from its events (pure: `crash_values`):

- `delivery`: QSM's delivery ratio (analysis.protocols.qsm: every message at every member of its group but its
  origin and the crashed members), `duplicates`: receipts logged twice;
- `view_lag_s`: from the crash to the GMS's view (actual times, the orchestrator's events), `installed`: members
  that installed it, `install_spread_ms`: first to last install;
- `old_recovered_after_view`: packets of the region views before the change recovered after it (their survivors
  finishing them), `new_view_receipts`: receipts in the region views after it, `old_views_retired`: members that
  ended an old view;
- `left_cached`, `left_buffered`: members still caching or buffering at the end (0 when every view ended clean);
- `recovery_latency_s`, `recovery_latency_max_s`: QSM's recovery latency over the whole run, mean and max;
  `token_regenerated`: tokens a region leader generated again (one lost with a crashed member before the view).

    python -m experiments.qsm_crash_table RUNS... --out docs/results/qsm-crash [--load load.log]
"""
from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path
from typing import Any

from analysis.figlib import Col, Exclude, aggregate, collect, md_table, read_load, write_csv
from analysis.protocols import qsm

POINT = ("c.failure_detection",)
VALUES = ("messages", "delivery", "duplicates", "view_lag_s", "installed", "install_spread_ms",
          "old_recovered_after_view", "new_view_receipts", "old_views_retired", "left_cached", "left_buffered",
          "recovery_latency_s", "recovery_latency_max_s", "token_regenerated")


def crash_values(events: list[dict[str, Any]], first_regions: int) -> dict[str, Any]:
    """The view-change numbers of one run's events; `first_regions`: how many region views the run began with
    (indexes below it are the first views)."""
    crash = [e for e in events if e.get("event") == "action_applied" and e.get("op") == "crash"]
    view = [e for e in events if e.get("event") == "action_applied" and e.get("op") == "gms_view"]
    if not crash or not view:
        raise Exclude("no crash, or no view after it (the schedule's view was not applied)")
    installs = [e["ts"] for e in events if e.get("event") == "gms_view" and not e.get("excluded")]
    if not installs:
        raise Exclude("no member installed the view")
    t_view = min(installs)
    got = Counter((e["node"], e["origin"], e["seq"]) for e in events if e.get("event") == "data_received")
    crashed = {n for e in crash for n in e.get("targets") or ()}
    live = [e.get("protocol") or {} for e in events
            if e.get("event") == "node_stopped" and e.get("node") not in crashed]
    return {
        "duplicates": sum(c - 1 for c in got.values()),
        "view_lag_s": view[0]["actual_s"] - crash[0]["actual_s"],
        "installed": len(installs),
        "install_spread_ms": (max(installs) - t_view) * 1e3,
        "old_recovered_after_view": sum(1 for e in events if e.get("event") == "recovered" and e["ts"] > t_view
                                        and e.get("region_index", 0) < first_regions),
        "new_view_receipts": sum(1 for e in events if e.get("event") == "data_received"
                                 and e.get("region_index", 0) >= first_regions),
        "old_views_retired": sum(1 for e in events if e.get("event") == "view_retired"),
        "left_cached": sum(1 for s in live if any((s.get("cached") or {}).values())),
        "left_buffered": sum(1 for s in live if any(((s.get("sender") or {}).get("buffered") or {}).values())),
    }


def values(run) -> dict[str, Any]:
    q = qsm.PLUGIN.run_values(run)
    first = len({e["region_index"] for e in run.events if e.get("event") == "qsm_membership"})
    out = {"delivery": q.get("delivery"), "crashed": q.get("crashed"), "messages": q.get("messages"),
           "recovery_latency_s": q.get("recovery_latency_s"), "recovery_latency_max_s": q.get("recovery_latency_max_s"),
           "token_regenerated": sum(1 for e in run.events if e.get("event") == "token_regenerated")}
    out.update(crash_values(run.events, first))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--load", type=Path, help="the load log beside the runs (experiments.busy --load-log)")
    a = ap.parse_args(argv)
    rows = collect(a.runs, values, POINT, load=read_load(a.load) if a.load else None)
    a.out.mkdir(parents=True, exist_ok=True)
    write_csv(a.out / "runs.csv", rows)
    agg = aggregate(rows, POINT, VALUES + ("load_mean",))
    cols = [Col(POINT[0], "failure detection"), Col("runs"), Col("excluded"), Col("messages", ci=True),
            Col("delivery", ci=True),
            Col("duplicates", ci=True), Col("view_lag_s", "crash to view (s)", ci=True),
            Col("installed", ci=True), Col("install_spread_ms", "install spread (ms)", ci=True),
            Col("old_recovered_after_view", "old-view packets recovered after it", ci=True),
            Col("new_view_receipts", "receipts in the new views", ci=True),
            Col("old_views_retired", "old views ended", ci=True),
            Col("left_cached", "members still caching", ci=True), Col("left_buffered", "senders still buffering",
                                                                     ci=True),
            Col("recovery_latency_s", "recovery latency (s)", ci=True),
            Col("recovery_latency_max_s", "its max (s)", ci=True), Col("token_regenerated", "tokens regenerated",
                                                                    ci=True),
            Col("load_mean", "load", ci=True)]
    (a.out / "table.md").write_text(
        "# QSM: two members crashed during recovery (make repro-qsm-crash)\n\n"
        "Written by experiments/qsm_crash_table.py from the runs in runs.csv (each run's row, excluded ones with the "
        "reason); mean ± 95 % CI over the repetitions of each failure-detection delay.\n\n" + md_table(agg, cols))
    print((a.out / "table.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
