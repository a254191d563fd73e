"""The QSM paper's Figure 9 (multicast rate against the number of nodes), Figures 12-13 (throughput against the
partition size R), Figure 17-18 (the rate over time and its variability) and Figures 19-20 (recovery and ACK
latency against the number of nodes, under loss) from runs of topologies/qsm-fig9.yaml (seed 004 §3;
docs/reproduction-qsm.md); Figure 1 (the rate against the number of groups, all on the same members, one sender
round robin: topologies/qsm-fig1.yaml), Figure 15 (throughput and recovery against the token rate:
topologies/qsm-fig15-sweep.yaml) and Figure 16 (total throughput against the number of senders with fair
sharing: topologies/qsm-fig16.yaml).

Per run, from the event logs in plain Python (a Spark pass per run costs minutes on this 2-core machine;
tests/analysis/test_figures_qsm.py checks the shared definitions against the qsm plug-in's on one log):

- **throughput** (Figure 9, 12, 13): the sender's data messages per second in the *steady window*, the second half
  of its sending span (the paper: "ignoring warmup and cooldown periods"); also `throughput_all`, the plug-in's
  `qsm_throughput` ((messages - 1) / (last send - first send)), and `delivered_min` / `delivered_mean`: the new
  packets per second the receivers logged (`data_received`) in the same window, the slowest and the mean.
- **delivery**: receipts logged over receipts expected (every member of the message's group but its origin).
- **rate over time** (Figures 17-18): data messages per whole second of the sending span (as the plug-in's
  `rate_samples`); `rate_std` their standard deviation in the steady window, `rate_cv` over the mean.
- **recovery** (Figure 19): `recovered` events: count, latency mean (since the member knew the packet missing),
  in seconds and in token rounds (÷ the token interval); **recovery rate** = recovered / all receipts.
- **ACK latency** (Figure 20): Σ latency_sum / Σ acked over the sender's `ack_received` (the plug-in's), in seconds
  and token rounds.
- **CPU** (`--cpu`, the log of `benchmarks/bench_qsm.py --watch`): `node_cpu_s`, the CPU seconds all the run's
  node processes used; `cpu_us_per_packet` that over the data packets sent (all members' work per multicast
  packet) and `cpu_us_per_receipt` over the receipts logged; `delayline_cpu_s` from tc/delayline.json; and
  `ceiling_2cores`, the packets/s two idle cores would carry at that cost (2 / (node + delay line CPU seconds per
  packet)) — a derived number, the load-independent form of the rate.
- **groups and senders** (Figures 1, 16): `groups` (G, the experiment's QSM groups) and `n_senders` (S, its
  workload senders) are part of the point. Per sender and per group, the data messages sent per second in the
  steady window (`sender_throughput`, `group_throughput`; they add up to `throughput`), `throughput_per_sender` /
  `throughput_per_group` (the total over S or G), and the fairness of the split: **Jain's index**
  (Σx)² / (n Σx²) over the S senders (`sender_jain`; a configured sender that sent nothing counts 0) and over the
  G groups (`group_jain`): 1 when all are equal, 1/n when one has everything; `sender_share_min`, the smallest
  sender's fraction of the total (1/S when fair).
- diagnostics: the sender's skipped timer steps (`steps_skipped`: it could not send as fast as its rate), the
  token rounds, the load average during the run (`--load`, a `unix-time load1 load5 load15` log).

    .venv/bin/python -m analysis.figures_qsm SWEEP_OR_RUN_DIR [...] --out docs/results/qsm-fig9 [--load LOG] [--cpu LOG]

Writes runs.csv (one row per run), summary.csv / summary.json (per point (members, G, S, R, loss, token, shaper):
mean, 95 % CI half-width (Student t), n), rate_series.csv, shares.csv (each run's per-sender and per-group
throughput and share), tables.md and fig9_rate_vs_nodes.png, fig12_13_rate_vs_R.png, fig17_rate_over_time.png,
fig19_recovery.png, fig20_ack_latency.png, fig1_rate_vs_groups.png, fig15_token_rate.png, fig16_senders.png (those
with data).
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

from analysis.runlogs import analyse_completed, load_during, read_events, read_load, run_dirs, sweep_runs  # noqa: F401
from analysis.runlogs import pyplot as _plt
from analysis.runlogs import write_csv as _write_csv

VALUES = ("throughput", "throughput_all", "delivered_min", "delivered_mean", "delivery", "rate_std", "rate_cv",
          "rate_final", "recovered", "recovery_rate", "recovery_latency_s", "recovery_latency_rounds",
          "ack_latency_s", "ack_latency_rounds", "steps_skipped", "token_rounds", "load_mean", "node_cpu_s",
          "cpu_us_per_packet", "cpu_us_per_receipt", "delayline_cpu_s", "ceiling_2cores", "throughput_per_group",
          "group_jain", "throughput_per_sender", "sender_jain", "sender_share_min")
# the paper's numbers, read from its text (seed 004 §3.2-3.10); Figure 9's two ends are in the text, the rest of
# its curve and Figures 12, 13, 19, 20 only as plots (not in the seed's text)
# Figure 1's text gives only JGroups' aggregate throughput relative to one group ("decreases ... by 6% with 2
# groups, 20% with 32 groups and almost 60% with 256 groups"; QSM's curve is a plot); Figure 16's: "with 10
# senders it is still at 80% of its original value", and two senders "can actually multicast faster"
PAPER = {"fig9": {1: 9850, 71: 6500}, "fig12_r5_over_r25": 1.2, "recovery_rounds": 2.5,
         "ack_rounds_small": 1.0, "ack_rounds_large": 3.5,
         "fig1_jgroups_relative": {1: 1.0, 2: 0.94, 32: 0.80, 256: 0.40}, "fig16_10_senders_relative": 0.8}


def seconds(v: Any) -> float | None:
    """'1s', '500ms', '100us', 0.5 -> seconds."""
    if v is None:
        return None
    if isinstance(v, (int, float)):
        return float(v)
    s = str(v).strip()
    for unit, k in (("ms", 1e-3), ("us", 1e-6), ("s", 1.0)):
        if s.endswith(unit):
            return float(s[: -len(unit)]) * k
    return float(s)


def percent(v: Any) -> float:
    """'1%' -> 0.01; None -> 0."""
    if v is None:
        return 0.0
    s = str(v).strip()
    return float(s[:-1]) / 100 if s.endswith("%") else float(s)


def group_members(params: dict, members: list[str], ids: dict[str, int]) -> dict[str, set[str]]:
    """group name -> member names (`all`, names or ids), as the plug-in's group_table."""
    by_id = {i: n for n, i in ids.items()}
    out = {}
    for g in params.get("groups") or []:
        spec = g.get("members", "all")
        ms = members if spec == "all" else [by_id.get(m) if isinstance(m, int) else m for m in spec]
        out[g["name"]] = {m for m in ms if m in members}
    return out


def jain(xs: list[float]) -> float | None:
    """Jain's fairness index (Σx)² / (n Σx²) of the shares `xs`: 1 when all are equal, 1/n when one has all; None
    for no values or all zero."""
    sq = sum(x * x for x in xs)
    return sum(xs) ** 2 / (len(xs) * sq) if xs and sq > 0 else None


def window_rates(ts_by_key: dict[str, list[float]], start: float, end: float) -> dict[str, float]:
    """key -> its timestamps in [start, end] per second (the steady window; `end` > `start`)."""
    return {k: sum(1 for t in ts if start <= t <= end) / (end - start) for k, ts in ts_by_key.items()}


def rate_samples(send_ts: list[float]) -> list[tuple[int, int]]:
    """(second, messages) for every whole second between the first and last (partial) seconds of sending, as the
    plug-in's rate_samples (seconds without a send count 0); `send_ts` in seconds since t0, as its `t_s`."""
    if not send_ts:
        return []
    a, b = math.floor(min(send_ts)), math.floor(max(send_ts))
    counts: dict[int, int] = {}
    for t in send_ts:
        counts[math.floor(t)] = counts.get(math.floor(t), 0) + 1
    return [(s, counts.get(s, 0)) for s in range(a + 1, b)] if b - a >= 2 else []


def run_metrics(manifest: dict, events: list[dict]) -> dict[str, Any]:
    """One run's numbers (pure given the manifest and the events)."""
    spec = manifest.get("spec") or {}
    t0 = float(manifest.get("t0_unix") or 0.0)
    params = (spec.get("protocol") or {}).get("qsm") or {}
    token_s = seconds(params.get("token_interval") or params.get("token_interval_s")) or 1.0
    ids = {e["node"]: int(e["id"]) for e in events if e.get("event") == "node_started" and "id" in e}
    members = sorted(ids, key=ids.get)
    groups = group_members(params, members, ids)
    sent: dict[str, list[tuple[float, int, str]]] = {}
    received: dict[str, list[float]] = {m: [] for m in members}
    got: set[tuple[str, int, int]] = set()
    recovered, acks, skipped, rounds = [], [], 0, 0
    for e in events:
        ev = e.get("event")
        if ev == "data_sent":
            sent.setdefault(e["node"], []).append((e["ts"], int(e["seq"]), e.get("group_name")))
        elif ev == "data_received":
            received.setdefault(e["node"], []).append(e["ts"])
            got.add((e["node"], int(e["origin"]), int(e["seq"])))
        elif ev == "recovered":
            recovered.append(e)
        elif ev == "ack_received":
            acks.append(e)
        elif ev == "steps_skipped" and e.get("timer") == "workload":
            skipped += int(e.get("missed") or 0)
        elif ev == "token_round":
            rounds += 1
    wl_senders = (spec.get("workload") or {}).get("senders")
    configured = [s for s in wl_senders if isinstance(s, str)] if isinstance(wl_senders, list) else []
    out: dict[str, Any] = {"members": len(members), "groups": len(params.get("groups") or []) or None,
                           "n_senders": (len(wl_senders) if isinstance(wl_senders, list) else wl_senders
                                         if isinstance(wl_senders, int) else None) or len(sent),
                           "R": params.get("partition_size", 5),
                           "loss": percent((spec.get("links") or {}).get("loss")), "token_s": token_s,
                           "growth": params.get("growth"), "rate_initial": (spec.get("workload") or {}).get(
                               "rate_per_s"), "senders": sorted(sent), "steps_skipped": skipped,
                           "token_rounds": rounds}
    all_ts = sorted(t for s in sent.values() for t, _, _ in s)
    expected = logged = 0
    for origin, msgs in sent.items():
        for _, seq, g in msgs:
            for m in groups.get(g, set(members)):
                if m != origin:
                    expected += 1
                    logged += (m, ids[origin], seq) in got
    out["messages"] = len(all_ts)
    out["delivery"] = logged / expected if expected else None
    if len(all_ts) >= 2:
        first, last = all_ts[0], all_ts[-1]
        mid = (first + last) / 2
        window = last - mid
        out["throughput_all"] = (len(all_ts) - 1) / (last - first)
        out["throughput"] = sum(1 for t in all_ts if t >= mid) / window if window > 0 else None
        by_sender = {s: [] for s in configured}
        by_group: dict[str, list[float]] = {g: [] for g in groups}
        for origin, msgs in sent.items():
            by_sender.setdefault(origin, []).extend(t for t, _, _ in msgs)
            for t, _, g in msgs:
                by_group.setdefault(g, []).append(t)
        if window > 0:
            out["sender_throughput"] = window_rates(by_sender, mid, last)
            out["group_throughput"] = window_rates(by_group, mid, last)
        rx = [sum(1 for t in ts if mid <= t <= last) / window for m, ts in received.items() if m not in sent]
        out["delivered_min"] = min(rx) if rx and window > 0 else None
        out["delivered_mean"] = statistics.fmean(rx) if rx and window > 0 else None
        samples = rate_samples([t - t0 for t in all_ts])
        steady = [c for s, c in samples if s >= mid - t0]
        out["rate_series"] = [c for _, c in samples]
        out["rate_std"] = statistics.stdev(steady) if len(steady) >= 2 else None
        out["rate_cv"] = out["rate_std"] / statistics.fmean(steady) if out["rate_std"] is not None and \
            statistics.fmean(steady) else None
    else:
        out.update(throughput_all=None, throughput=None, delivered_min=None, delivered_mean=None, rate_series=[],
                   rate_std=None, rate_cv=None)
    st, gt, tp = out.get("sender_throughput") or {}, out.get("group_throughput") or {}, out["throughput"]
    out["sender_throughput"], out["group_throughput"] = st, gt
    out["sender_jain"], out["group_jain"] = jain(list(st.values())), jain(list(gt.values()))
    out["sender_share_min"] = min(st.values()) / tp if st and tp else None
    out["throughput_per_sender"] = tp / out["n_senders"] if tp is not None and out["n_senders"] else None
    out["throughput_per_group"] = tp / out["groups"] if tp is not None and out["groups"] else None
    rates = [e for e in events if e.get("event") == "rate_changed" and e["ts"] <= (all_ts[-1] if all_ts else 0)]
    out["rate_final"] = rates[-1]["rate"] if rates else None
    receipts = sum(len(v) for v in received.values())
    lat = [float(e["latency"]) for e in recovered if e.get("latency") is not None]
    out["recovered"] = len(recovered)
    out["recovery_rate"] = len(recovered) / receipts if receipts else None
    out["recovery_latency_s"] = statistics.fmean(lat) if lat else None
    out["recovery_latency_rounds"] = out["recovery_latency_s"] / token_s if lat else None
    out["recovered_by"] = {h: sum(1 for e in recovered if e.get("how") == h)
                           for h in sorted({e.get("how") for e in recovered})}
    acked = sum(int(e.get("acked") or 0) for e in acks)
    out["ack_latency_s"] = sum(float(e.get("latency_sum") or 0) for e in acks) / acked if acked else None
    out["ack_latency_rounds"] = out["ack_latency_s"] / token_s if acked else None
    out["receipts"] = receipts
    return out


def read_cpu(path: Path | None) -> dict[str, float]:
    """run dir -> CPU seconds of its node processes, from `bench_qsm.py --watch`'s `ts pid cpu run` lines (per
    process its largest reading)."""
    per: dict[tuple[str, int], float] = {}
    if path and path.exists():
        for line in path.read_text().splitlines():
            parts = line.split(maxsplit=3)
            if len(parts) == 4:
                try:
                    k = (str(Path(parts[3]).resolve()), int(parts[1]))
                    per[k] = max(per.get(k, 0.0), float(parts[2]))
                except ValueError:
                    continue
    out: dict[str, float] = {}
    for (run, _), cpu in per.items():
        out[run] = out.get(run, 0.0) + cpu
    return out


def cpu_metrics(r: dict, node_cpu_s: float | None, delayline_cpu_s: float | None) -> dict[str, Any]:
    """Per-packet CPU costs of a run (pure): see the module docstring."""
    msgs, receipts = r.get("messages") or 0, r.get("receipts") or 0
    out: dict[str, Any] = {"node_cpu_s": node_cpu_s, "delayline_cpu_s": delayline_cpu_s, "cpu_us_per_packet": None,
                           "cpu_us_per_receipt": None, "ceiling_2cores": None}
    if node_cpu_s and msgs:
        out["cpu_us_per_packet"] = 1e6 * node_cpu_s / msgs
        out["cpu_us_per_receipt"] = 1e6 * node_cpu_s / receipts if receipts else None
        out["ceiling_2cores"] = 2.0 * msgs / (node_cpu_s + (delayline_cpu_s or 0.0))
    return out


def analyse_run(run_dir: Path, load: list[tuple[float, float]] | None = None,
                cpu: dict[str, float] | None = None) -> dict[str, Any]:
    manifest, events = read_events(run_dir)
    r = run_metrics(manifest, events)
    dl = run_dir / "tc" / "delayline.json"
    dl_cpu = json.loads(dl.read_text()).get("cpu_s") if dl.exists() else None
    r.update(cpu_metrics(r, (cpu or {}).get(str(run_dir.resolve())), dl_cpu))
    t0 = manifest.get("t0_unix") or manifest.get("started_at") or 0.0
    lmean, lmax = load_during(load or [], manifest.get("started_at") or t0, manifest.get("ended_at") or t0 + 60)
    r["duration_s"] = seconds((manifest.get("spec") or {}).get("duration"))
    return {"run_dir": str(run_dir), "status": manifest.get("status"), "seed": manifest.get("seed"),
            "shaper": manifest.get("shaper"), "load_mean": lmean, "load_max": lmax, **r}


def cost_model(runs: list[dict]) -> dict[str, Any] | None:
    """Least squares over the runs with a CPU reading: node_cpu_s = a x members x run seconds + b x receipts —
    `a` the fixed cost of a member per second (its start, timers, token; cores), `b` the CPU per packet receipt
    (s). Then the marginal ceiling of `cores` idle cores for n members: (cores - a n) / (b n) packets/s."""
    import numpy as np

    rs = [r for r in runs if r.get("node_cpu_s") and r.get("receipts") and r.get("duration_s")]
    if len(rs) < 3:
        return None
    x = np.array([[r["members"] * r["duration_s"], r["receipts"]] for r in rs], dtype=float)
    y = np.array([r["node_cpu_s"] for r in rs], dtype=float)
    (a, b), *_ = np.linalg.lstsq(x, y, rcond=None)
    resid = y - x @ np.array([a, b])
    return {"runs": len(rs), "fixed_core_per_member": float(a), "cpu_s_per_receipt": float(b),
            "rms_residual_s": float(np.sqrt(np.mean(resid ** 2))), "mean_cpu_s": float(np.mean(y))}


def marginal_ceiling(model: dict, members: int, cores: float = 2.0) -> float | None:
    left = cores - model["fixed_core_per_member"] * members
    return left / (model["cpu_s_per_receipt"] * (members - 1)) if left > 0 and members > 1 else None


# --- aggregation (pure) -------------------------------------------------------------------------------------------

POINT = ("members", "groups", "n_senders", "R", "loss", "token_s", "shaper")


def aggregate(runs: list[dict]) -> list[dict]:
    """Per point (members, G, S, R, loss, token, shaper): n runs; per value its mean, 95 % CI half-width, n."""
    from analysis.stats import mean_ci

    groups: dict[tuple, list[dict]] = {}
    for r in runs:
        groups.setdefault(tuple(r.get(k) for k in POINT), []).append(r)
    out = []
    for key, rs in sorted(groups.items(), key=lambda kv: tuple(str(x) if x is None else x for x in kv[0])):
        row: dict[str, Any] = dict(zip(POINT, key))
        row["runs"] = len(rs)
        row["load_max"] = max((x["load_max"] for x in rs if x.get("load_max") is not None), default=None)
        for k in VALUES:
            vals = [x.get(k) for x in rs if x.get(k) is not None]
            m, ci = mean_ci(vals)
            row[k], row[f"{k}_ci95"], row[f"{k}_n"] = m, ci, len(vals)
        out.append(row)
    return out


# --- figures ------------------------------------------------------------------------------------------------------

def _line(ax, rows, x, key, label, marker="o", color=None):
    rows = sorted((r for r in rows if r.get(key) is not None), key=lambda r: r[x])
    if rows:
        ax.errorbar([r[x] for r in rows], [r[key] for r in rows], yerr=[r.get(f"{key}_ci95") or 0 for r in rows],
                    marker=marker, capsize=3, label=label, color=color)


def _one_group_one_sender(r: dict) -> bool:
    """The Figure 9-20 setting: one group, one sender, the token every second (Figures 1, 15, 16 vary these)."""
    return r.get("groups") in (1, None) and r.get("n_senders") in (1, None) and r.get("token_s") == 1.0


def fig9(agg: list[dict], path: Path, model: dict | None = None) -> None:
    rows = [r for r in agg if r["loss"] == 0 and r["R"] == 5 and r["shaper"] == "delayline"
            and _one_group_one_sender(r)]
    if not rows:
        return
    plt = _plt()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    _line(a1, rows, "members", "throughput", "sent (steady half), under load")
    _line(a1, rows, "members", "delivered_min", "received, slowest member", marker="s")
    _line(a1, rows, "members", "ceiling_2cores", "2 idle cores at the measured CPU cost", marker="^")
    xs = sorted({r["members"] for r in rows})
    if model:
        ms = [(n, marginal_ceiling(model, n)) for n in range(xs[0], xs[-1] + 1)]
        a1.plot([n for n, c in ms if c], [c for n, c in ms if c], "--", color="grey",
                label="cost model: (2 cores - fixed) / (us per receipt x receivers)")
    a1.set_xlabel("members (one group, one region)")
    a1.set_ylabel("packets/s")
    a1.set_title("Figure 9 here: multicast rate vs group size", fontsize=10)
    a1.grid(alpha=0.3)
    a1.legend(fontsize=7)
    for key, label, marker in (("throughput", "sent/s", "o"), ("ceiling_2cores", "2-core ceiling", "^")):
        ours = sorted((r for r in rows if r.get(key)), key=lambda r: r["members"])
        if ours:
            base = ours[0]
            a2.plot([r["members"] for r in ours], [r[key] / base[key] for r in ours], marker=marker,
                    label=f"here: {label} / its value at {base['members']} members")
    small = min(r["members"] for r in rows)
    a2.plot(xs, [small / x for x in xs], ":", color="grey", label="members^-1 (one CPU shared by all members)")
    p = PAPER["fig9"]
    a2.plot(list(p), [v / p[1] for v in p.values()], "s--", color="C3", label="paper (text): 9850 -> 6500 /s")
    a2.set_xlabel("members")
    a2.set_ylabel("rate relative to the smallest group")
    a2.set_ylim(0, 1.6)
    a2.grid(alpha=0.3)
    a2.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def fig12_13(agg: list[dict], path: Path) -> None:
    rows = [r for r in agg if r["shaper"] == "delayline" and _one_group_one_sender(r)]
    series = sorted({(r["members"], r["loss"]) for r in rows
                     if sum(1 for x in rows if (x["members"], x["loss"]) == (r["members"], r["loss"])) >= 3})
    if not series:
        return
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for i, (n, loss) in enumerate(series):
        sub = [r for r in rows if r["members"] == n and r["loss"] == loss]
        label = f"{n} members, loss {loss:.1%}"
        _line(axes[0], sub, "R", "throughput", label, color=f"C{i}")
        _line(axes[1], sub, "R", "ceiling_2cores", label, color=f"C{i}")
        if loss > 0:
            _line(axes[2], sub, "R", "recovery_latency_rounds", label, color=f"C{i}")
    for ax, yl in zip(axes, ("sent packets/s (steady half, under load)", "2-core ceiling (packets/s)",
                             "recovery latency (token rounds)")):
        ax.set_xlabel("partition size R (caching replicas)")
        ax.set_ylabel(yl)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("Figures 12-13 here: throughput and recovery vs partition size", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def fig_latency(agg: list[dict], keys: tuple[str, str], ylabel: str, title: str, path: Path,
                paper: list[tuple[str, float]] = ()) -> None:
    rows = [r for r in agg if r["shaper"] == "delayline" and _one_group_one_sender(r)]
    if not any(r["loss"] > 0 for r in rows):
        return
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for i, loss in enumerate(sorted({r["loss"] for r in rows})):
        sub = [r for r in rows if r["loss"] == loss and r["R"] == 5]
        label = f"loss {loss:.1%} per link" if loss else "no loss"
        _line(axes[0], sub, "members", keys[0], label, color=f"C{i}")
        _line(axes[1], sub, "members", keys[1], label, color=f"C{i}")
    for label, v in paper:
        axes[0].axhline(v, ls="--", color="grey", lw=1)
        axes[0].text(axes[0].get_xlim()[0], v, " " + label, fontsize=7, va="bottom", color="grey")
    axes[0].set_ylabel(ylabel)
    axes[1].set_ylabel(keys[1].replace("_", " "))
    for ax in axes:
        ax.set_xlabel("members")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def fig17(runs: list[dict], path: Path) -> None:
    rows = [r for r in runs if r["loss"] == 0 and r["R"] == 5 and r.get("rate_series") and _one_group_one_sender(r)]
    if not rows:
        return
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for i, n in enumerate(sorted({r["members"] for r in rows})):
        r = min((x for x in rows if x["members"] == n), key=lambda x: x.get("seed") or 0)
        ax.plot(range(1, len(r["rate_series"]) + 1), r["rate_series"], label=f"{n} members (seed {r['seed']})",
                color=f"C{i}", lw=1)
    ax.set_xlabel("second of sending")
    ax.set_ylabel("packets sent in the second")
    ax.set_title("Figure 17 here: sending rate over time (1 s samples, unsmoothed)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def series_over(rows: list[dict], x: str) -> dict[tuple, list[dict]]:
    """The rows split into series by every point key but `x` (and the shaper kept), each with at least two
    distinct `x` values: what one line of a figure over `x` draws. Pure."""
    rest = [k for k in POINT if k != x]
    out: dict[tuple, list[dict]] = {}
    for r in rows:
        out.setdefault(tuple(r.get(k) for k in rest), []).append(r)
    return {k: sorted(v, key=lambda r: r[x]) for k, v in out.items() if len({r[x] for r in v}) >= 2}


def _label(key: tuple, x: str, show: tuple[str, ...]) -> str:
    d = dict(zip([k for k in POINT if k != x], key))
    names = {"members": "members", "groups": "G", "n_senders": "S", "R": "R", "token_s": "token s"}
    parts = [f"{names[k]} {d[k]}" for k in show if k in d]
    return ", ".join(parts + [f"loss {d['loss']:.1%}" if d.get("loss") else "no loss"])


def fig1(agg: list[dict], path: Path) -> None:
    """Figure 1: total throughput (all groups) and the slowest member's receive rate against G; right: relative to
    each series' smallest G, with JGroups' numbers from the paper's text."""
    series = series_over([r for r in agg if r.get("n_senders") == 1 and r.get("groups")], "groups")
    if not series:
        return
    plt = _plt()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    for i, (key, rows) in enumerate(sorted(series.items(), key=lambda kv: str(kv[0]))):
        label = _label(key, "groups", ("members", "R"))
        _line(a1, rows, "groups", "throughput", f"sent, all groups ({label})", color=f"C{i}")
        _line(a1, rows, "groups", "delivered_min", f"received, slowest member ({label})", marker="s", color=f"C{i}")
        ours = [r for r in rows if r.get("throughput")]
        if ours:
            a2.plot([r["groups"] for r in ours], [r["throughput"] / ours[0]["throughput"] for r in ours], "o-",
                    color=f"C{i}", label=f"here: sent / sent at G = {ours[0]['groups']} ({label})")
    p = PAPER["fig1_jgroups_relative"]
    a2.plot(list(p), list(p.values()), "s--", color="grey", label="JGroups (paper's text): -6 % at 2, -20 % at 32, "
                                                                 "-60 % at 256")
    a1.set_ylabel("packets/s (steady half)")
    a2.set_ylabel("total rate relative to the smallest G")
    a2.set_xscale("log", base=2)
    a2.set_ylim(0, 1.6)
    for ax in (a1, a2):
        ax.set_xlabel("groups G (all on the same members, one sender round robin)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("Figure 1 here: multicast rate vs the number of groups", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def fig15(agg: list[dict], path: Path) -> None:
    """Figure 15: throughput (left) and mean recovery latency (right, seconds; token rounds in the legend's twin
    axis) against the token rate 1 / token interval."""
    rows = [dict(r, token_per_s=1.0 / r["token_s"]) for r in agg if r.get("token_s")]
    series = series_over(rows, "token_s")
    if not series:
        return
    plt = _plt()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    for i, (key, rs) in enumerate(sorted(series.items(), key=lambda kv: str(kv[0]))):
        label = _label(key, "token_s", ("members", "groups", "n_senders"))
        _line(a1, rs, "token_per_s", "throughput", f"sent ({label})", color=f"C{i}")
        _line(a1, rs, "token_per_s", "delivered_min", f"received, slowest ({label})", marker="s", color=f"C{i}")
        _line(a2, rs, "token_per_s", "recovery_latency_s", f"recovery latency, s ({label})", color=f"C{i}")
        _line(a2, rs, "token_per_s", "recovery_latency_rounds", f"recovery latency, token rounds ({label})",
              marker="^", color=f"C{i}")
    a1.set_ylabel("packets/s (steady half)")
    a2.set_ylabel("mean recovery latency (s, or token rounds)")
    for ax in (a1, a2):
        ax.set_xlabel("tokens per second (1 / token interval)")
        ax.set_xscale("log", base=2)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("Figure 15 here: throughput and recovery vs the token rate", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def fig16(agg: list[dict], runs: list[dict], path: Path) -> None:
    """Figure 16: total throughput against S (left), each run's per-sender throughput (middle) and Jain's index
    over the senders (right: point means, each run a dot)."""
    series = series_over([r for r in agg if r.get("groups") == 1 and r.get("n_senders")], "n_senders")
    if not series:
        return
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    rest = [k for k in POINT if k != "n_senders"]
    for i, (key, rows) in enumerate(sorted(series.items(), key=lambda kv: str(kv[0]))):
        label = _label(key, "n_senders", ("members", "R"))
        _line(axes[0], rows, "n_senders", "throughput", f"sent, all senders ({label})", color=f"C{i}")
        _line(axes[0], rows, "n_senders", "delivered_min", f"received, slowest ({label})", marker="s",
              color=f"C{i}")
        _line(axes[2], rows, "n_senders", "sender_jain", label, color=f"C{i}")
        mine = [r for r in runs if tuple(r.get(k) for k in rest) == key]
        for j, r in enumerate(mine):
            xs = [r["n_senders"] + 0.04 * (j - len(mine) / 2)] * len(r.get("sender_throughput") or {})
            axes[1].plot(xs, list((r.get("sender_throughput") or {}).values()), ".", color=f"C{i}",
                         label=f"one sender in one run ({label})" if j == 0 else None)
            if r.get("sender_jain") is not None:
                axes[2].plot([xs[0] if xs else r["n_senders"]], [r["sender_jain"]], ".", color=f"C{i}", alpha=0.5)
    for ax, yl in zip(axes, ("packets/s (steady half)", "each sender's packets/s", "Jain's index over the senders")):
        ax.set_xlabel("senders S (one group of every member)")
        ax.set_ylabel(yl)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[2].set_ylim(0, 1.05)
    fig.suptitle("Figure 16 here: total throughput and fair sharing vs the number of senders", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def share_rows(runs: list[dict]) -> list[dict]:
    """One row per run and sender, and per run and group: its steady-window packets/s and its fraction of the run's
    total (shares.csv: the numbers fig16's middle panel draws). Pure."""
    out = []
    for r in runs:
        total = r.get("throughput")
        for kind, field in (("sender", "sender_throughput"), ("group", "group_throughput")):
            for who, v in (r.get(field) or {}).items():
                out.append({"run": Path(r.get("run_dir") or "").name, "members": r.get("members"),
                            "groups": r.get("groups"), "n_senders": r.get("n_senders"), "seed": r.get("seed"),
                            "kind": kind, "who": who, "throughput": v, "share": v / total if total else None})
    return out


# --- CLI ----------------------------------------------------------------------------------------------------------

def _f(v: Any, nd: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{nd}g}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)


def markdown_tables(agg: list[dict]) -> str:
    cols = [("throughput", "sent/s"), ("delivered_min", "slowest recv/s"), ("delivery", "delivery"),
            ("rate_cv", "rate cv"), ("recovery_rate", "recovery rate"), ("recovery_latency_s", "recovery s"),
            ("recovery_latency_rounds", "recovery rounds"), ("ack_latency_s", "ACK s"),
            ("ack_latency_rounds", "ACK rounds"), ("cpu_us_per_packet", "node CPU us/packet"),
            ("ceiling_2cores", "2-core ceiling/s"), ("sender_jain", "Jain senders"), ("group_jain", "Jain groups"),
            ("load_mean", "load")]
    out = ["| members | G | S | R | loss | token s | shaper | runs | " + " | ".join(c for _, c in cols) + " |",
           "|---|---|---|---|---|---|---|---|" + "---|" * len(cols)]
    for r in agg:
        cells = [f"{_f(r[k])} ± {_f(r[k + '_ci95'], 2)}" if r.get(k + "_ci95") else _f(r[k]) for k, _ in cols]
        out.append(f"| {r['members']} | {_f(r.get('groups'))} | {_f(r.get('n_senders'))} | {r['R']} | "
                   f"{r['loss']:.1%} | {_f(r['token_s'])} | {r['shaper']} | {r['runs']} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="+", type=Path, help="sweep directories (points/) or run directories")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--load", type=Path, default=None, help="a `unix-time load1 load5 load15` log")
    ap.add_argument("--cpu", type=Path, default=None, help="benchmarks/bench_qsm.py --watch's log")
    a = ap.parse_args(argv)
    load = read_load(a.load)
    cpu = read_cpu(a.cpu)
    runs = analyse_completed(run_dirs(a.dirs), lambda d: analyse_run(d, load, cpu))
    a.out.mkdir(parents=True, exist_ok=True)
    agg = aggregate(runs)
    _write_csv(a.out / "runs.csv", [{k: (Path(v).name if k == "run_dir" else v) for k, v in r.items()
                                     if k != "rate_series"} for r in runs])
    _write_csv(a.out / "rate_series.csv", [{"run": Path(r["run_dir"]).name, "members": r["members"], "R": r["R"],
                                            "loss": r["loss"], "seed": r["seed"], "series": r["rate_series"]}
                                           for r in runs])
    _write_csv(a.out / "shares.csv", share_rows(runs))
    _write_csv(a.out / "summary.csv", agg)
    model = cost_model(runs)
    if model:
        model["marginal_ceiling_2cores"] = {n: marginal_ceiling(model, n) for n in (4, 8, 12, 16, 24, 32, 48, 71)}
        print(f"cost model over {model['runs']} runs: {model['fixed_core_per_member']:.4f} cores per member + "
              f"{1e6 * model['cpu_s_per_receipt']:.1f} us per receipt (rms residual {model['rms_residual_s']:.1f} s "
              f"of {model['mean_cpu_s']:.1f}); 2-core marginal ceiling: {model['marginal_ceiling_2cores']}")
    (a.out / "summary.json").write_text(json.dumps({"runs": len(runs), "paper": PAPER, "cost_model": model,
                                                    "points": agg}, indent=1, default=str))
    (a.out / "tables.md").write_text(markdown_tables(agg))
    fig9(agg, a.out / "fig9_rate_vs_nodes.png", model)
    fig12_13(agg, a.out / "fig12_13_rate_vs_R.png")
    fig17(runs, a.out / "fig17_rate_over_time.png")
    fig_latency(agg, ("recovery_latency_rounds", "recovery_rate"), "recovery latency (token rounds)",
                "Figure 19 here: recovery latency and recovery rate vs members", a.out / "fig19_recovery.png",
                [("paper: 2.5 rounds", PAPER["recovery_rounds"])])
    fig_latency(agg, ("ack_latency_rounds", "ack_latency_s"), "ACK latency (token rounds)",
                "Figure 20 here: ACK latency vs members", a.out / "fig20_ack_latency.png",
                [("paper: ~1 round (small)", 1.0), ("paper: 3.5 rounds (large)", 3.5)])
    fig1(agg, a.out / "fig1_rate_vs_groups.png")
    fig15(agg, a.out / "fig15_token_rate.png")
    fig16(agg, runs, a.out / "fig16_senders.png")
    print(markdown_tables(agg))
    return 0


if __name__ == "__main__":
    sys.exit(main())
