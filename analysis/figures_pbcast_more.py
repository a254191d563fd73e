"""Seed 001's other pbcast / vsync measurements, from the event logs in plain Python (as analysis/figures_pbcast.py
does for Figures 1 and 12): Figure 4 (pbcast's per-member overhead against the group size), the bimodal delivery
histogram (§3), Figure 10 (vsync's throughput and view-change time against the group size) and Table 2 (latency
at the sender against the leader committee's size k). The experiments: topologies/pbcast-fig4.yaml,
pbcast-bimodal.yaml, pbcast-fig10.yaml, pbcast-table2.yaml (and their -sweep files).

    .venv/bin/python -m analysis.figures_pbcast_more {fig4|bimodal|fig10|table2} SWEEP_DIR|RUN_DIR [...]
        --out DIR [--load LOADLOG]

Each writes runs.csv (one row per run: seed, members, the 1-min load average during the run when --load is given,
the run's values), summary.csv / summary.json (per point: mean, 95 % CI half-width (Student t) and n of every
value), tables.md (markdown, ready for docs/) and a figure (fig4.png, bimodal.png, fig10.png, table2.png).

Definitions (every event is one member's record; `data_sent`'s origin is the sending member's id, read from its
`node_started`):

- **fig4** — a member's overhead per multicast: its pbcast layer's counters at `node_stopped`
  (`protocol.counters`) — digests sent + received (`sent_digest`, `recv_digest`), solicitations
  (`sent_solicit`, `recv_solicit`), repairs i.e. retransmissions (`sent_repair`; received: `recv_repair` +
  `duplicate_repair`) — and their total, divided by the multicasts the sender sent (`data_sent` events). The run's
  value is the mean over the members that wrote `node_stopped` (also the max, the sender's, and the mean over the
  rest). From `data_received`: the fraction of deliveries that came by repair (`repair: true`), the delivery ratio
  (deliveries of sent messages / (messages x the other members)) and the fraction of messages every other member
  got. Across runs: least-squares fits overhead = a + b log2(n) and = a + b n over the runs' values, with R^2.
- **bimodal** — crashed members: the targets of `crash` actions (`action_applied`) and every member that wrote
  `node_started` but no `node_stopped`; survivors: the rest. Per message the sender sent, the fraction of the
  survivors (the sender excluded) with its `data_received`; a histogram in bins of 0.05 ([0, 0.05), ...,
  [0.95, 1.0], 1.0 in the last) over all messages and over those sent in the last second before the crash (the
  first crash action's time). A crashed sender's log misses its last sends: the messages are every seq up to the
  highest any member logged, one without `data_sent` timed by its first reception (`bimodal_run`).
- **fig10** — vsync: the throughput at the unperturbed members (figures_pbcast.run_throughput: Figure 1's 500 ms
  windows, and per 1 s windows to the last send; the median over the members neither sender nor disturbed), the
  offered rate (the spec's `workload.rate_per_s`) and the sender's measured rate, the sends refused (the
  `attempts` of `send_blocked` events; the sender's `send_blocked` counter at `node_stopped` beside it), the
  view-change duration at the leader (`view_change_decided.duration_s`: Prefreshview to decision; and
  `view_installed.duration_s` at the leader: to its installing the Newview) mean and max, and the members dropped
  (`view_change_decided.dropped` ids and `dropped` events).
- **table2** — per run (k = the spec's `protocol.vsync.k`): `own_delivered.latency_s` at the sender (Gseq Req to
  its own in-order delivery: Table 2's "latency at the sender") mean and max, `gseq_acked.latency_s` (Gseq Req to
  Gseq Ack) mean and max, in ms; the group throughput (the per-1 s measure at the non-sender members, and Figure 1's
  500 ms one); sends refused. Beside it the paper's values.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any, Callable

from analysis.figures_pbcast import _f, run_throughput
from analysis.stats import mean_ci
from analysis.runlogs import analyse_completed, load_during, read_events, read_load, run_dirs
from analysis.runlogs import pyplot as _plt
from analysis.runlogs import write_csv as _write_csv

KINDS = ("fig4", "bimodal", "fig10", "table2")
BIN_WIDTH = 0.05
BINS = 20
LAST_S = 1.0            # bimodal: the messages sent in the last second before the crash
# Table 2 of seed 001: k -> (mean latency at the sender ms, max ms, group throughput multicasts/s)
PAPER_TABLE2 = {1: (1.39, 192.09, 97.64), 2: (1.68, 27.56, 98.32), 3: (2.16, 15.02, 97.93), 4: (3.31, 157.56, 98.33)}


# --- shared (pure) ------------------------------------------------------------------------------------------------

def members_of(events: list[dict]) -> dict[str, Any]:
    """`ids` {id: node}, `started` (nodes with node_started), `stopped` {node: its node_stopped event},
    `senders` (node names of node_started's `senders` ids)."""
    ids: dict[int, str] = {}
    sender_ids: set[int] = set()
    stopped: dict[str, dict] = {}
    for e in events:
        ev = e.get("event")
        if ev == "node_started":
            if e.get("id") is not None:
                ids[int(e["id"])] = e["node"]
            sender_ids.update(int(s) for s in e.get("senders") or [])
        elif ev == "node_stopped":
            stopped[e["node"]] = e
    return {"ids": ids, "started": set(ids.values()), "stopped": stopped,
            "senders": sorted(ids[i] for i in sender_ids if i in ids)}


def node_ids(ids: dict[int, str]) -> dict[str, int]:
    return {v: k for k, v in ids.items()}


def counters(stop_event: dict) -> dict[str, int]:
    """The protocol core's counters in a `node_stopped` event (pbcast: the layer's; vsync: its own + the layer's)."""
    return {k: int(v) for k, v in ((stop_event.get("protocol") or {}).get("counters") or {}).items()}


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


def _mean(xs: list[float]) -> float | None:
    return statistics.fmean(xs) if xs else None


# --- Figure 4 (pure) ----------------------------------------------------------------------------------------------

OVERHEAD = ("digest", "solicit", "repair")


def member_overhead(c: dict[str, int]) -> dict[str, int]:
    """A member's pbcast overhead messages from its counters: digests, solicitations, repairs, each sent + received
    (received repairs: the new ones and the duplicates), and their total."""
    out = {"digest": c.get("sent_digest", 0) + c.get("recv_digest", 0),
           "solicit": c.get("sent_solicit", 0) + c.get("recv_solicit", 0),
           "repair": c.get("sent_repair", 0) + c.get("recv_repair", 0) + c.get("duplicate_repair", 0)}
    out["total"] = sum(out.values())
    return out


def first_phase_miss(n: int, degree: int, loss: float, sender: int = 1) -> tuple[float, float]:
    """(mean hops from the sender, the expected fraction of the other members an IP multicast misses) on the
    testbed's degree-`degree` tree of n members (orchestrator.plan.tree_parents, every node a member): a member
    h hops away misses it with probability 1 - (1 - loss)^h (a copy lost on any link of the path is lost for the
    whole subtree below). pbcast repairs exactly these misses, so its repair traffic per member per multicast is
    proportional to this — and the mean path grows like log n."""
    from orchestrator.plan import tree_parents

    par = tree_parents(n, degree)
    up_from_sender = {}                          # the sender's ancestors (itself included) -> hops up to them
    v: int | None = sender
    while v is not None:
        up_from_sender[v] = len(up_from_sender)
        v = par[v]
    dist = {}
    for u in range(n):                            # up from u to the first common ancestor, then down to the sender
        w, steps = u, 0
        while w not in up_from_sender:
            w, steps = par[w], steps + 1          # type: ignore[assignment]
        dist[u] = steps + up_from_sender[w]
    hops = [d for v, d in dist.items() if v != sender]
    if not hops:
        return 0.0, 0.0
    return sum(hops) / len(hops), sum(1 - (1 - loss) ** h for h in hops) / len(hops)


def _loss_fraction(v: Any) -> float | None:
    """'0.1%' -> 0.001; None -> None."""
    if v is None:
        return None
    t = str(v).strip()
    return float(t[:-1]) / 100 if t.endswith("%") else float(t)


def fig4_run(events: list[dict]) -> dict[str, Any]:
    """One pbcast run's Figure 4 values (see the module's docstring): `multicasts`, `per_member` {node: overhead
    per multicast by kind}, `overhead` (mean over members of the total per multicast), `overhead_max`,
    `overhead_sender`, `overhead_rest`, `digest`/`solicit`/`repair` (member means per multicast), `deliveries`,
    `repair_fraction`, `delivery_ratio`, `delivered_to_all`."""
    m = members_of(events)
    nid = node_ids(m["ids"])
    sent: set[tuple[int, int]] = set()
    got: dict[tuple[int, int], set[str]] = {}
    deliveries = by_repair = 0
    for e in events:
        ev = e.get("event")
        if ev == "data_sent" and e.get("node") in nid:
            sent.add((nid[e["node"]], int(e["seq"])))
        elif ev == "data_received":
            key = (int(e["origin"]), int(e["seq"]))
            if e["node"] in got.setdefault(key, set()):
                continue
            got[key].add(e["node"])
            deliveries += 1
            by_repair += bool(e.get("repair"))
    nmsg = len(sent)
    per = {}
    if nmsg:
        for node, st in sorted(m["stopped"].items()):
            per[node] = {k: v / nmsg for k, v in member_overhead(counters(st)).items()}
    totals = [v["total"] for v in per.values()]
    snd = set(m["senders"])
    others = len(m["started"]) - 1
    recv = [len(got.get(k, set()) - {m["ids"].get(k[0])}) for k in sent]
    out: dict[str, Any] = {
        "multicasts": nmsg, "members_stopped": len(per), "per_member": per,
        "overhead": _mean(totals), "overhead_max": max(totals, default=None),
        "overhead_sender": _mean([v["total"] for n, v in per.items() if n in snd]),
        "overhead_rest": _mean([v["total"] for n, v in per.items() if n not in snd]),
        "deliveries": deliveries, "repair_fraction": by_repair / deliveries if deliveries else None,
        "delivery_ratio": sum(recv) / (nmsg * others) if nmsg and others > 0 else None,
        "delivered_to_all": sum(1 for r in recv if r >= others) / nmsg if nmsg and others > 0 else None}
    for k in OVERHEAD:
        out[k] = _mean([v[k] for v in per.values()])
    out["repair_traffic"] = (None if out["solicit"] is None or out["repair"] is None
                             else out["solicit"] + out["repair"])
    return out


# --- the bimodal histogram (pure) ---------------------------------------------------------------------------------

def histogram(fractions: list[float], width: float = BIN_WIDTH, bins: int = BINS) -> list[int]:
    """Counts per bin [i w, (i + 1) w); a fraction of 1.0 falls in the last bin."""
    out = [0] * bins
    for f in fractions:
        out[min(bins - 1, max(0, int(f / width + 1e-9)))] += 1
    return out


def split(fractions: list[float], hi: float = 0.95, lo: float = 0.05) -> dict[str, int]:
    """Messages at >= hi ("almost all"), <= lo ("almost none") and between."""
    a = sum(1 for f in fractions if f >= hi - 1e-12)
    z = sum(1 for f in fractions if f <= lo + 1e-12)
    return {"messages": len(fractions), "almost_all": a, "almost_none": z, "between": len(fractions) - a - z}


def bimodal_run(events: list[dict], last_s: float = LAST_S, t0: float | None = None,
                rate_per_s: float | None = None) -> dict[str, Any]:
    """One crash run's delivery distribution (see the module's docstring): `crashed`, `survivors`, `crash_ts`,
    `fractions` [(origin, seq, sent ts, fraction)], `hist_all`, `hist_last` (bin counts), and the split counts of
    both (`messages`, `almost_all`, `almost_none`, `between`; `last_` the same over the last second).

    A crashed sender's log loses its unflushed tail (its last ~100 ms of `data_sent`), and those are the messages
    the histogram is about. Seqs are consecutive per sender, so the messages are every seq from 1 to the highest
    any member logged (sent or received): one without `data_sent` takes the time of its first `data_received`
    anywhere (crashed members included), or, received by nobody, that of the message before it (`sent_unlogged`,
    `sent_unseen` count them). A message sent after the last one anybody logged would stay invisible: with
    `rate_per_s` (the workload's offer), a crashed sender is taken to have kept sending at that rate from its last
    logged `data_sent` to the crash, and those messages nobody received count with fraction 0
    (`sent_extrapolated`; an estimate: a sender that fell behind its timer sent fewer).
    The crash time: t0 + the action's `actual_s` (when it began) if `t0` (the manifest's t0_unix) is given, else
    the record's `ts` (written after the action returned); the earliest crash action's."""
    m = members_of(events)
    nid = node_ids(m["ids"])
    crash_ts: float | None = None
    crashed: set[str] = set()
    for e in events:
        if e.get("event") == "action_applied" and e.get("action") == "crash":
            crashed.update(e.get("targets") or [])
            at = t0 + float(e["actual_s"]) if t0 is not None and e.get("actual_s") is not None else float(e["ts"])
            crash_ts = at if crash_ts is None else min(crash_ts, at)
    crashed |= m["started"] - set(m["stopped"])
    survivors = m["started"] - crashed
    logged: dict[tuple[int, int], float] = {}
    first: dict[tuple[int, int], float] = {}
    got: dict[tuple[int, int], set[str]] = {}
    for e in events:
        ev = e.get("event")
        if ev == "data_sent" and e.get("node") in nid:
            key = (nid[e["node"]], int(e["seq"]))
            logged[key] = min(logged.get(key, math.inf), float(e["ts"]))
        elif ev == "data_received":
            key = (int(e["origin"]), int(e["seq"]))
            first[key] = min(first.get(key, math.inf), float(e["ts"]))
            if e.get("node") in survivors:
                got.setdefault(key, set()).add(e["node"])
    top: dict[int, int] = {}
    for origin, seq in [*logged, *first]:
        if origin in m["ids"]:
            top[origin] = max(top.get(origin, 0), seq)
    rows = []
    unlogged = unseen = extrapolated = 0
    for origin in sorted(top):
        pool = survivors - {m["ids"][origin]}
        ts = -math.inf
        for seq in range(1, top[origin] + 1):
            key = (origin, seq)
            if key in logged:
                ts = logged[key]
            else:
                unlogged += 1
                if key in first:
                    ts = first[key]
                else:
                    unseen += 1
            if pool:
                rows.append((origin, seq, ts, len(got.get(key, set()) & pool) / len(pool)))
        mine = [(q, t) for (o, q), t in logged.items() if o == origin]
        if rate_per_s and crash_ts is not None and m["ids"][origin] in crashed and mine and pool:
            s_l, t_l = max(mine)
            for seq in range(top[origin] + 1, s_l + int((crash_ts - t_l) * rate_per_s + 1e-9) + 1):
                extrapolated += 1
                rows.append((origin, seq, t_l + (seq - s_l) / rate_per_s, 0.0))
    allf = [r[3] for r in rows]
    lastf = [r[3] for r in rows if crash_ts is not None and crash_ts - last_s <= r[2] < crash_ts]
    out: dict[str, Any] = {"crashed": sorted(crashed), "survivors": sorted(survivors), "crash_ts": crash_ts,
                           "sent_unlogged": unlogged, "sent_unseen": unseen, "sent_extrapolated": extrapolated,
                           "fractions": rows, "hist_all": histogram(allf), "hist_last": histogram(lastf)}
    out.update(split(allf))
    out.update({f"last_{k}": v for k, v in split(lastf).items()})
    return out


# --- Figure 10 and Table 2 (pure) ---------------------------------------------------------------------------------

def _stats_ms(xs: list[float]) -> tuple[float | None, float | None]:
    return (statistics.fmean(xs) * 1000, max(xs) * 1000) if xs else (None, None)


def _quantile_ms(xs: list[float], q: float) -> float | None:
    """The q-quantile (nearest rank) of latencies in seconds, in ms."""
    if not xs:
        return None
    ys = sorted(xs)
    return ys[min(len(ys) - 1, max(0, math.ceil(q * len(ys)) - 1))] * 1000


def vsync_run(events: list[dict]) -> dict[str, Any]:
    """One vsync run's Figure 10 / Table 2 values (see the module's docstring): `throughput` (Figure 1's 500 ms
    windows), `throughput_1s`, `sent_per_s` (msgs/s), `refused` (send_blocked attempts), `refused_counter`, the
    view changes (`view_changes`, `vc_mean_s`, `vc_max_s`, `vc_install_mean_s`, `vc_install_max_s`), `dropped`
    (node names), the latencies in ms (`own_mean_ms`, `own_max_ms`, `own_n`, `gseq_mean_ms`, `gseq_max_ms`)."""
    m = members_of(events)
    t = run_throughput(events)
    refused = 0
    decided, installed, own, gack = [], [], [], []
    dropped: set[str] = set()
    for e in events:
        ev = e.get("event")
        if ev == "send_blocked":
            refused += int(e.get("attempts", 1))
        elif ev == "view_change_decided":
            if e.get("duration_s") is not None:
                decided.append(float(e["duration_s"]))
            dropped.update(m["ids"].get(int(i), f"id{i}") for i in e.get("dropped") or [])
        elif ev == "view_installed" and e.get("duration_s") is not None:
            installed.append(float(e["duration_s"]))
        elif ev == "dropped":
            dropped.add(e["node"])
        elif ev == "own_delivered" and e.get("latency_s") is not None:
            own.append(float(e["latency_s"]))
        elif ev == "gseq_acked" and e.get("latency_s") is not None:
            gack.append(float(e["latency_s"]))
    ctr = [counters(m["stopped"][s]).get("send_blocked", 0) for s in m["senders"] if s in m["stopped"]]
    own_mean, own_max = _stats_ms(own)
    g_mean, g_max = _stats_ms(gack)
    return {"throughput": t["throughput"], "throughput_1s": t["per_s"], "sent": t["sent"],
            "sent_per_s": t["sent_per_s"], "unperturbed": len(t["unperturbed"]), "refused": refused,
            "refused_counter": sum(ctr) if ctr else None,
            "view_changes": len(decided), "vc_mean_s": _mean(decided), "vc_max_s": max(decided, default=None),
            "vc_install_mean_s": _mean(installed), "vc_install_max_s": max(installed, default=None),
            "dropped": sorted(dropped), "dropped_n": len(dropped),
            "own_mean_ms": own_mean, "own_max_ms": own_max, "own_n": len(own),
            "own_median_ms": _quantile_ms(own, 0.5), "own_p99_ms": _quantile_ms(own, 0.99),
            "gseq_mean_ms": g_mean, "gseq_max_ms": g_max}


# --- one run directory --------------------------------------------------------------------------------------------

def packing_of(manifest: dict) -> str:
    """`process` (a process per member) or `packs of N` (docs/packing.md), from the manifest's decision."""
    pk = manifest.get("packing") or {}
    return "process" if pk.get("mode", "process") == "process" else f"packs of {pk.get('members_per_process')}"


def verdict_of(run_dir: Path) -> str | None:
    """The fidelity judges' verdict (orchestrator.fidelity.run_judges: timer lag p99 <= 50 ms, delay-line hold
    error p99 <= 1 ms): `faithful`, `unfaithful (...)`, or `error: ...` when a judge cannot read the run."""
    try:
        from orchestrator.fidelity import run_judges
        return run_judges(run_dir).get("verdict")
    except Exception as exc:       # reported, not fatal
        return f"error: {exc}"


def analyse_run(kind: str, run_dir: Path, load: list[tuple[float, float]] | None = None) -> dict[str, Any]:
    """runs.csv's row of one run of `kind`: the spec's parameters, the load during the run, the kind's values."""
    manifest, events = read_events(run_dir)
    spec = manifest.get("spec") or {}
    protocol = next(iter(spec.get("protocol") or {}), None)
    psec = (spec.get("protocol") or {}).get(protocol) or {}
    wl = spec.get("workload") or {}
    t0 = manifest.get("t0_unix") or 0.0
    lmean, lmax = load_during(load or [], manifest.get("started_at") or t0, manifest.get("ended_at") or t0 + 60)
    row: dict[str, Any] = {"run_dir": str(run_dir), "kind": kind, "protocol": protocol,
                           "members": len({e["node"] for e in events if e.get("event") == "node_started"}),
                           "seed": manifest.get("seed"), "status": manifest.get("status"),
                           "offered_per_s": wl.get("rate_per_s"), "loss": (spec.get("links") or {}).get("loss"),
                           "load_mean": lmean, "load_max": lmax, "packing": packing_of(manifest),
                           "verdict": verdict_of(run_dir)}
    if kind == "fig4":
        r = fig4_run(events)
        row.update({k: v for k, v in r.items() if k != "per_member"})
        loss = _loss_fraction(row["loss"])
        topo = spec.get("topology") or {}
        if loss is not None and topo.get("kind") == "tree" and topo.get("members") == "all":
            snd = wl.get("senders")
            sender = int(snd[0][1:]) if isinstance(snd, list) and len(snd) == 1 and str(snd[0])[1:].isdigit() else 1
            row["mean_hops"], row["miss_model"] = first_phase_miss(row["members"], int(topo.get("degree", 4)), loss,
                                                                   sender)
    elif kind == "bimodal":
        r = bimodal_run(events, t0=manifest.get("t0_unix"), rate_per_s=wl.get("rate_per_s"))
        crash = [a.get("fraction") for a in spec.get("schedule") or [] if a.get("action") == "crash"
                 and a.get("fraction") is not None]
        row["crash_fraction"] = crash[0] if crash else None
        row["phase"], row["gc_c"] = psec.get("first_phase"), psec.get("gc_c")
        row.update({k: v for k, v in r.items() if k != "fractions"})
        row["n_crashed"], row["n_survivors"] = len(r["crashed"]), len(r["survivors"])
    else:
        row.update({"k": psec.get("k"), "buffer": psec.get("sender_buffer"), "ack_defer": psec.get("ack_defer"),
                    "ack_wait": psec.get("ack_wait", "all")})
        row.update(vsync_run(events))
    return row


# --- aggregation (pure) -------------------------------------------------------------------------------------------

POINT = {"fig4": ("members", "offered_per_s", "loss", "packing"),
         "bimodal": ("members", "crash_fraction", "loss", "phase", "gc_c"),
         "fig10": ("members", "offered_per_s", "buffer", "ack_defer", "packing"),
         "table2": ("k", "offered_per_s", "buffer", "ack_defer")}
VALUES = {
    "fig4": ("overhead", "overhead_max", "overhead_sender", "overhead_rest", "digest", "solicit", "repair",
             "repair_traffic", "repair_fraction", "miss_model", "mean_hops", "delivery_ratio", "delivered_to_all",
             "multicasts", "load_mean"),
    "bimodal": ("messages", "almost_all", "almost_none", "between", "last_messages", "last_almost_all",
                "last_almost_none", "last_between", "n_survivors", "sent_unlogged", "sent_extrapolated", "load_mean"),
    "fig10": ("throughput_1s", "throughput", "sent_per_s", "refused", "vc_mean_s", "vc_max_s", "vc_install_mean_s",
              "dropped_n", "load_mean"),
    "table2": ("own_mean_ms", "own_max_ms", "own_median_ms", "own_p99_ms", "gseq_mean_ms", "gseq_max_ms", "throughput_1s", "throughput",
               "sent_per_s", "refused", "vc_mean_s", "load_mean"),
}


def _order(v: Any) -> tuple:
    return (v is None, str(type(v)), v if v is not None else 0)


def aggregate(kind: str, runs: list[dict]) -> list[dict]:
    """Per point (POINT[kind]): `runs`, and for each of VALUES[kind] its mean, 95 % CI half-width (Student t,
    `_ci95`) and n (`_n`); bimodal points also the histograms summed over their runs."""
    keys = POINT[kind]
    groups: dict[tuple, list[dict]] = {}
    for r in runs:
        groups.setdefault(tuple(r.get(k) for k in keys), []).append(r)
    out = []
    for key, rs in sorted(groups.items(), key=lambda kv: tuple(_order(v) for v in kv[0])):
        row: dict[str, Any] = dict(zip(keys, key))
        row["runs"] = len(rs)
        for k in VALUES[kind]:
            vals = [x.get(k) for x in rs if x.get(k) is not None]
            row[k], row[f"{k}_ci95"] = mean_ci(vals)
            row[f"{k}_n"] = len(vals)
            if "max" in k:              # a maximum's mean over the runs, and the largest of them
                row[f"{k}_largest"] = max(vals, default=None)
        if kind == "bimodal":
            for h in ("hist_all", "hist_last"):
                row[h] = [sum(c) for c in zip(*(x[h] for x in rs))]
        out.append(row)
    return out


def fig4_fits(runs: list[dict], agg: list[dict]) -> dict[str, Any]:
    """Both fits of every overhead value against the members: over the runs' values, over the points' means, and
    over the runs the fidelity judges call faithful (`faithful`; runs without a verdict count as faithful)."""
    out: dict[str, Any] = {"runs": {}, "means": {}, "faithful": {}}
    good = [r for r in runs if r.get("verdict") in (None, "faithful")]
    for k in ("overhead", *OVERHEAD, "repair_traffic"):
        out["runs"][k] = fits([r["members"] for r in runs], [r.get(k) for r in runs])
        out["means"][k] = fits([a["members"] for a in agg], [a.get(k) for a in agg])
        out["faithful"][k] = fits([r["members"] for r in good], [r.get(k) for r in good])
    return out


# --- figures ------------------------------------------------------------------------------------------------------

def _save(fig, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt
    plt.close(fig)


def fig4_figure(agg: list[dict], fit: dict, path: Path) -> None:
    """Figure 4 in two panels against n (log2 axis): (a) the total overhead messages per member per multicast (mean,
    95 % CI bars; packed members apart) with both fits over the faithful runs; (b) its repair part (solicitations
    and repairs), which is what grows with the tree's depth, with its own fits."""
    plt = _plt()
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
            for name, f, style in (("log2", lambda n: math.log2(n), "-"), ("linear", lambda n: n, "--")):
                p = (fit.get("faithful") or {}).get(key, {}).get(name) or {}
                if p.get("b") is not None:
                    axis.plot(xs, [p["a"] + p["b"] * f(x) for x in xs], linestyle=style,
                              color="C1" if name == "log2" else "C2",
                              label=f"faithful runs: a + b {'log2 n' if name == 'log2' else 'n'}, a={p['a']:.3g}, "
                                    f"b={p['b']:.3g}, R²={_f(p['r2'], '{:.3f}')}")
    for axis, title in ((ax, "(a) all overhead: digests + solicitations + repairs"),
                        (bx, "(b) the repair part: solicitations + repairs")):
        axis.set_xscale("log", base=2)
        axis.set_xlabel("group size n (members, log2 axis)")
        axis.set_ylabel("messages per member per multicast")
        axis.set_title(f"Figure 4 {title}", fontsize=9)
        axis.set_ylim(bottom=0)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    _save(fig, path)


def bimodal_figure(agg: list[dict], path: Path) -> None:
    """The bimodal plot, a panel per point (first phase, C, crash): messages (log scale) against the fraction of
    survivors that delivered them, all messages and the last second's, summed over the runs of the point."""
    plt = _plt()
    fig, axes = plt.subplots(1, max(1, len(agg)), figsize=(4.2 * max(1, len(agg)), 4.0), squeeze=False)
    w = BIN_WIDTH / 2
    for ax, a in zip(axes[0], agg):
        for j, h in enumerate(("hist_all", "hist_last")):
            lab = "all messages" if h == "hist_all" else f"sent in the last {LAST_S:g} s before the crash"
            ax.bar([i * BIN_WIDTH + (j + 0.5) * w for i in range(BINS)], a[h], width=w, color=f"C{j}", label=lab)
        ax.set_yscale("log")
        ax.set_ylim(bottom=0.5)                 # a bin of one message shows
        ax.set_xlim(0, 1)
        ax.set_xlabel(f"fraction of survivors that delivered it (bins of {BIN_WIDTH:g})", fontsize=8)
        ax.set_title(f"{a['members']} members, crash {a.get('crash_fraction')} + the sender,\nfirst phase "
                     f"{a.get('phase')}, C = {a.get('gc_c')}, {a['runs']} run(s)", fontsize=8)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("messages")
    _save(fig, path)


def seconds_of(v: Any) -> float | None:
    """'500ms' / '1s' / 0.5 -> seconds (None stays None): the experiment files' own parser."""
    from orchestrator.units import parse_time

    return None if v is None else parse_time(v)


def vc_model(n: int, defer_s: float) -> float:
    """A view change's expected duration when it ends at the last of the n - 1 other members' AckPrefreshviews,
    each deferred by an independent U(0, defer_s) (the network's and the members' own delays left out): the
    expected maximum of n - 1 uniforms, defer_s (n - 1) / n."""
    return defer_s * (n - 1) / n


def fig10_figure(agg: list[dict], path: Path) -> None:
    """Figure 10: (a) throughput at the unperturbed members (per 1 s and Figure 1's 500 ms windows) and the
    offered rate against n; (b) the view change's duration at the leader against n; a line per offered rate."""
    plt = _plt()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10.0, 4.2))
    lines = sorted({(a.get("offered_per_s"), a.get("packing")) for a in agg}, key=lambda x: tuple(map(_order, x)))
    for j, (rate, packing) in enumerate(lines):
        pts = sorted((a for a in agg if (a.get("offered_per_s"), a.get("packing")) == (rate, packing)),
                     key=lambda a: a["members"])
        rate_label = f"{rate}, {packing}" if packing not in (None, "process") else rate
        ns = [a["members"] for a in pts]
        for key, m, ls in (("throughput_1s", "o", "-"), ("throughput", "s", ":")):
            q = [a for a in pts if a.get(key) is not None]
            a1.errorbar([a["members"] for a in q], [a[key] for a in q], yerr=[a[f"{key}_ci95"] or 0 for a in q],
                        marker=m, linestyle=ls, capsize=3, color=f"C{j}",
                        label=f"offered {rate_label}: {'1 s windows' if key == 'throughput_1s' else '500 ms windows'}")
        if rate:
            a1.plot(ns, [rate] * len(ns), color=f"C{j}", linestyle="--", alpha=0.5, linewidth=1)
        q = [a for a in pts if a.get("vc_mean_s") is not None]
        a2.errorbar([a["members"] for a in q], [a["vc_mean_s"] for a in q], yerr=[a["vc_mean_s_ci95"] or 0 for a in q],
                    marker="o", capsize=3, color=f"C{j}", label=f"offered {rate_label}: decided (mean)")
        q = [a for a in pts if a.get("vc_max_s") is not None]
        a2.plot([a["members"] for a in q], [a["vc_max_s"] for a in q], marker="^", linestyle=":", color=f"C{j}",
                label=f"offered {rate_label}: max per run (mean)")
    defers = {seconds_of(a.get("ack_defer")) for a in agg} - {None}
    ns_all = sorted({a["members"] for a in agg})
    if len(defers) == 1 and ns_all:
        d = defers.pop()
        xs = list(range(min(ns_all), max(ns_all) + 1))
        a2.plot(xs, [vc_model(n, d) for n in xs], color="grey", linestyle="--",
                label=f"model: the last of n - 1 acks deferred U(0, {d:g} s): {d:g} (n - 1) / n")
    a1.set_xlabel("group size n")
    a1.set_ylabel("throughput at unperturbed members (msgs/s)")
    a1.set_title("Figure 10a: vsync (k = 1) throughput", fontsize=9)
    a1.set_ylim(bottom=0)
    a2.set_xlabel("group size n")
    a2.set_ylabel("view change duration at the leader (s)")
    a2.set_title("Figure 10b: view change time", fontsize=9)
    a2.set_ylim(bottom=0)
    for ax in (a1, a2):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    _save(fig, path)


def table2_figure(agg: list[dict], path: Path) -> None:
    """Table 2 as a plot: latency at the sender (Gseq Req to its own delivery; the Gseq Ack's is the same with one
    sender) against k, mean and median over the multicasts with 95 % CI bars over the runs, one line per ack
    deferral; the paper's average beside it."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.0, 4.2))
    pts = sorted((a for a in agg if a.get("k") is not None), key=lambda a: a["k"])
    defers = sorted({a.get("ack_defer") for a in pts}, key=str)
    for i, d in enumerate(defers):
        for key, m, what, dx in (("own_mean_ms", "o", "mean", 0.0), ("own_median_ms", "s", "median", 0.06)):
            q = [a for a in pts if a.get(key) is not None and a.get("ack_defer") == d]
            if not q:
                continue
            dx += 0.12 * i
            ax.errorbar([a["k"] + dx for a in q], [a[key] for a in q], yerr=[a[f"{key}_ci95"] or 0 for a in q],
                        marker=m, capsize=3, linestyle="-" if what == "mean" else ":",
                        label=f"ours, {what} (acks deferred up to {d}; drawn {dx:.2f} right)")
    ks = sorted(PAPER_TABLE2)
    ax.plot(ks, [PAPER_TABLE2[k][0] for k in ks], marker="x", linestyle="--", color="grey",
            label="the paper (Table 2), average latency at the sender")
    ax.set_xlabel("committee size k")
    ax.set_ylabel("latency (ms)")
    ax.set_xticks(ks)
    ax.set_title("Table 2: latency at the sender vs committee size", fontsize=9)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    _save(fig, path)


# --- tables -------------------------------------------------------------------------------------------------------

def _cell(r: dict, key: str, fmt: str = "{:.2f}") -> str:
    if r.get(key) is None:
        return "-"
    ci = r.get(f"{key}_ci95")
    return _f(float(r[key]), fmt) + (f" ± {_f(ci, fmt)}" if ci is not None else "") + f" ({r.get(f'{key}_n')})"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header), *("| " + " | ".join(r) + " |"
                                                                            for r in rows), ""]


def markdown(kind: str, agg: list[dict], extra: dict | None = None) -> str:
    """tables.md of `kind`: a row per point, cells mean ± 95 % CI half-width (n)."""
    out: list[str] = ["Mean ± 95 % CI half-width (Student t), the number of runs in brackets.", ""]
    if kind == "fig4":
        out += _table(["members", "members ran as", "loss", "runs", "overhead / member / multicast", "max member", "sender",
                       "the rest", "digests", "solicitations", "repairs", "deliveries by repair",
                       "first-phase miss (model)", "mean hops from the sender", "delivery ratio", "messages to all"],
                      [[str(a["members"]), str(a.get("packing")), str(a.get("loss")), str(a["runs"])]
                       + [_cell(a, k) for k in ("overhead", "overhead_max", "overhead_sender", "overhead_rest",
                                                "digest", "solicit", "repair")]
                       + [_cell(a, "repair_fraction", "{:.4f}"), _f(a.get("miss_model"), "{:.4f}"),
                          _f(a.get("mean_hops"), "{:.2f}")]
                       + [_cell(a, k, "{:.4f}") for k in ("delivery_ratio", "delivered_to_all")]
                       for a in agg])
        if extra:
            rows = []
            for over in ("runs", "means"):
                for k, f in extra[over].items():
                    for law in ("log2", "linear"):
                        p = f[law]
                        rows.append([over, k, "a + b log2 n" if law == "log2" else "a + b n", _f(p["a"], "{:.4g}"),
                                     _f(p["b"], "{:.4g}"), _f(p["r2"], "{:.4f}"), str(p["n"])])
            out += ["**least-squares fits of the overhead per member per multicast against n**", ""]
            out += _table(["over", "value", "law", "a", "b", "R²", "points"], rows)
    elif kind == "bimodal":
        out += _table(["members", "crash", "first phase", "C", "runs", "survivors", "messages", ">= 0.95", "<= 0.05", "between",
                       "last 1 s: messages", ">= 0.95", "<= 0.05", "between"],
                      [[str(a["members"]), str(a.get("crash_fraction")), str(a.get("phase")), str(a.get("gc_c")),
                        str(a["runs"])]
                       + [_cell(a, k, "{:.1f}") for k in VALUES["bimodal"][8:9] + VALUES["bimodal"][:8]]
                       for a in agg])
        out += ["**histogram (messages per bin of the fraction of survivors that delivered them, summed over runs)**",
                ""]
        out += _table(["bin"] + [f"{a.get('phase')}, C {a.get('gc_c')}: all" for a in agg]
                      + [f"{a.get('phase')}, C {a.get('gc_c')}: last 1 s" for a in agg],
                      [[f"[{i * BIN_WIDTH:.2f}, {(i + 1) * BIN_WIDTH:.2f}{']' if i == BINS - 1 else ')'}"]
                       + [str(a["hist_all"][i]) for a in agg] + [str(a["hist_last"][i]) for a in agg]
                       for i in range(BINS)])
    elif kind == "fig10":
        out += _table(["members", "members ran as", "offered (msgs/s)", "buffer", "runs", "throughput, 1 s windows",
                       "throughput, 500 ms windows", "sent/s", "sends refused", "view change (s), mean",
                       "view change (s), max", "to install at leader (s)", "members dropped", "load"],
                      [[str(a["members"]), str(a.get("packing")), str(a.get("offered_per_s")), str(a.get("buffer")),
                        str(a["runs"])]
                       + [_cell(a, k, "{:.1f}") for k in ("throughput_1s", "throughput", "sent_per_s", "refused")]
                       + [_cell(a, k, "{:.3f}") for k in ("vc_mean_s", "vc_max_s", "vc_install_mean_s")]
                       + [_cell(a, "dropped_n", "{:.1f}"), _cell(a, "load_mean", "{:.1f}")] for a in agg])
    else:
        out += _table(["k", "ack defer", "runs", "avg latency at the sender (ms)", "paper",
                       "max latency at the sender (ms)", "paper", "largest over runs", "group throughput (msgs/s)",
                       "paper", "median latency (ms)", "p99", "view change (s)", "sends refused"],
                      [[str(a["k"]), _f(a.get("ack_defer")), str(a["runs"]), _cell(a, "own_mean_ms"),
                        _f(PAPER_TABLE2.get(a["k"], (None,) * 3)[0], "{:.2f}"), _cell(a, "own_max_ms"),
                        _f(PAPER_TABLE2.get(a["k"], (None,) * 3)[1], "{:.2f}"),
                        _f(a.get("own_max_ms_largest"), "{:.2f}"),
                        _cell(a, "throughput_1s"),
                        _f(PAPER_TABLE2.get(a["k"], (None,) * 3)[2], "{:.2f}"), _cell(a, "own_median_ms"),
                        _cell(a, "own_p99_ms"), _cell(a, "vc_mean_s", "{:.3f}"), _cell(a, "refused", "{:.1f}")]
                       for a in agg])
    return "\n".join(out)


# --- CLI ----------------------------------------------------------------------------------------------------------

FIGURES: dict[str, Callable] = {"fig4": fig4_figure, "bimodal": bimodal_figure, "fig10": fig10_figure,
                                "table2": table2_figure}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kind", choices=KINDS)
    ap.add_argument("dirs", nargs="+", type=Path, help="sweep directories (points/) or run directories")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--load", type=Path, default=None, help="a `unix-time load1 load5 load15` log")
    a = ap.parse_args(argv)
    load = read_load(a.load)
    runs = analyse_completed(run_dirs(a.dirs), lambda d: analyse_run(a.kind, d, load))
    a.out.mkdir(parents=True, exist_ok=True)
    agg = aggregate(a.kind, runs)
    _write_csv(a.out / "runs.csv", [{k: (Path(v).name if k == "run_dir" else v) for k, v in r.items()}
                                    for r in runs])
    _write_csv(a.out / "summary.csv", agg)
    doc: dict[str, Any] = {"kind": a.kind, "runs": len(runs), "points": agg}
    extra = None
    if a.kind == "fig4":
        extra = doc["fits"] = fig4_fits(runs, agg)
    if a.kind == "table2":
        doc["paper"] = {str(k): {"own_mean_ms": v[0], "own_max_ms": v[1], "throughput": v[2]}
                        for k, v in PAPER_TABLE2.items()}
    (a.out / "summary.json").write_text(json.dumps(doc, indent=1, default=str))
    (a.out / "tables.md").write_text(markdown(a.kind, agg, extra))
    if a.kind == "fig4":
        FIGURES[a.kind](agg, extra, a.out / "fig4.png")
    else:
        FIGURES[a.kind](agg, a.out / f"{a.kind}.png")
    for r in agg:
        print(" ".join(f"{k}={_f(v, '{:.3g}')}" for k, v in r.items()
                       if not k.endswith(("_ci95", "_n")) and not isinstance(v, list)))
    if extra:
        for over in ("runs", "faithful"):
            for k in ("overhead", *OVERHEAD, "repair_traffic"):
                for law in ("log2", "linear"):
                    p = extra[over][k][law]
                    print(f"fit over {over}, {k}, {law}: a={_f(p['a'], '{:.4g}')} b={_f(p['b'], '{:.4g}')} "
                          f"R2={_f(p['r2'], '{:.4f}')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
