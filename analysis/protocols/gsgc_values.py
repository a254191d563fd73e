"""GSGC's per-run numbers, pure Python over the run's files (issue #38): `gsgc_values` is the GSGC plug-in's
`run_values` (analysis/protocols/gsgc.py) and THE definition of every number below. summary.json, the report's key
metrics, the sweep analysis (its points.csv columns, the plug-in's `sweep_values`), `orchestrator tune`
(`tune_value`, `TUNE_METRICS`), sweep's validity check and the paper's figures all read it; the plug-in's Spark
transforms compute the same definitions as tables for the report. Also the comparison's pooling of several runs'
rounds (`pooled`). Not a plug-in (analysis.protocols imports it with the package's other modules; it registers
nothing) and no Spark: the orchestrator imports it.

Definitions (times are unix seconds; "first"/"last" are over event timestamps):

- **TPR** (time per round) of round r at a gossip level (global; local, per local group; sc): the first
  `round_completed` with via = constructed minus the first `round_started` of round r, over all members — the
  paper's "start of the round until the first member constructs S". Rounds nobody constructed have no TPR.
  Beside it: `steps` (the steps the constructing member took in the round: the paper's number of steps per
  round), and over all members that completed the round, the mean of their own `tpr_s` and `steps`.
- **time to stable** of data message (origin, seq): T − ts(data_sent), where T is the first time at which every
  member that is live knows S[origin] ≥ seq. A member knows it from its first global `stable` event whose array
  has S[origin] ≥ seq (S only grows). Members that started after the send, or crashed before it, do not count;
  a member that crashes later counts until its crash: T = max over members m of min(reached_m, crashed_m). If
  some counted member neither reached it nor crashed, the message never became stable (null).
- **failure-detection latency** of crash c of member x: for every observer — a member started before c and
  not crashed at or before c — the first `declared_failed` of x by the observer after c (and before the
  observer's own crash) minus c. Observers that never declared x have no latency and count as undetected.
- **false declarations**: `declared_failed` events naming a member that had not crashed at that time.

- **steady rounds, round 0** (`run_values`): a run's TPR values are those of its completed rounds that started once
  every member had logged `node_started` (`tpr_values_s`; before the runner started the members together, over a
  minute for 200 processes, the first rounds also measured the start-up); with local gossip (no global rounds) each
  SC round's TPR plus the mean TPR of the local rounds (a local array is made in one local round, then carried to
  the global S by one SC round). The paper's TPR is round 0, from the members' common start to the first S
  (`tpr_first_round_s`; local gossip: from the first local rounds' start to the first global S an SC constructs).
- **queues** (`run_values`, from tc/delayline.json): average queue = over every packet admitted to any link
  direction's serialiser, the packets queued ahead of it (Σ queue_sum / Σ queued); maximum = the largest on any
  direction; overflowed = packets dropped at full queues; the fidelity probe's burst taken out (`queue_stats`).

A member restarted after a crash keeps its first crash as the end of its life (restarts are not modelled).
"""
from __future__ import annotations

import bisect
import json
import statistics
from typing import TYPE_CHECKING, Any

from analysis.protocols import generic_values

if TYPE_CHECKING:
    from analysis.rundir import RunDir


# --- the run's numbers, pure over its files (issue #38): the one definition of each ----------------------------

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


def _first_key(ts: float, steps: Any, node: Any) -> tuple:
    """Spark's order of struct(ts, steps, node): field by field, nulls first."""
    return (ts, (0,) if steps is None else (1, steps), (0,) if node is None else (1, node))


def event_rounds(events: list[dict], group_of: dict[str, int | None]) -> list[dict]:
    """`tpr` over plain event dicts, one row per (level, group, round) that started: started_ts (the first
    `round_started`), the first `round_completed` with via = constructed (constructed_ts, constructed_by, its
    steps) and TPR = the difference; over every member's `round_completed`: members_completed and the means of
    their own tpr_s and steps."""
    acc: dict[tuple, dict] = {}
    for e in events:
        ev = e.get("event")
        if ev not in ("round_started", "round_completed"):
            continue
        level = e.get("level")
        key = (level, group_of.get(e.get("node")) if level == "local" else None, e.get("round"))
        a = acc.setdefault(key, {"started_ts": None, "first": None, "done": 0, "tprs": [], "steps": []})
        ts = e.get("ts")
        if ev == "round_started":
            if a["started_ts"] is None or ts < a["started_ts"]:
                a["started_ts"] = ts
            continue
        a["done"] += 1
        if e.get("tpr_s") is not None:
            a["tprs"].append(e["tpr_s"])
        if e.get("steps") is not None:
            a["steps"].append(e["steps"])
        if e.get("via") == "constructed":
            k = _first_key(ts, e.get("steps"), e.get("node"))
            if a["first"] is None or k < _first_key(*a["first"]):
                a["first"] = (ts, e.get("steps"), e.get("node"))
    rows = []
    order = sorted(acc, key=lambda k: ("" if k[0] is None else k[0], -1 if k[1] is None else k[1], k[2] or 0))
    for level, group, rnd in order:
        a = acc[(level, group, rnd)]
        if a["started_ts"] is None:
            continue
        first = a["first"]
        rows.append({"level": level, "group": group, "round": rnd, "started_ts": a["started_ts"],
                     "constructed_ts": first[0] if first else None, "constructed_by": first[2] if first else None,
                     "tpr_s": first[0] - a["started_ts"] if first else None, "steps": first[1] if first else None,
                     "members_completed": a["done"], "member_tpr_mean_s": _fmean(a["tprs"]),
                     "steps_mean": _fmean(a["steps"])})
    return rows


def _fmean(xs: list[float]) -> float | None:
    return statistics.fmean(xs) if xs else None


def _stdev(xs: list[float]) -> float | None:
    return statistics.stdev(xs) if len(xs) >= 2 else None


def _quantile(xs: list[float], p: float) -> float | None:
    """The exact quantile with linear interpolation (Spark's `percentile`, `median`)."""
    if not xs:
        return None
    xs = sorted(xs)
    k = (len(xs) - 1) * p
    lo = int(k)
    return xs[lo] + (xs[min(lo + 1, len(xs) - 1)] - xs[lo]) * (k - lo)


def lives(run: RunDir, crashes: list[tuple[str, float]] | None = None) -> dict[str, dict[str, float | None]]:
    """member -> started_ts (first `node_started`, None if it never started) and crashed_ts (its first crash;
    `crashes`: `crash_list`, computed when None)."""
    out = {m.name: {"started_ts": None, "crashed_ts": None} for m in run.members}
    for e in run.events:
        if e.get("event") == "node_started" and e.get("node") in out and e.get("ts") is not None:
            life = out[e["node"]]
            life["started_ts"] = e["ts"] if life["started_ts"] is None else min(life["started_ts"], e["ts"])
    for member, ts in crash_list(run) if crashes is None else crashes:
        if member in out and (out[member]["crashed_ts"] is None or ts < out[member]["crashed_ts"]):
            out[member]["crashed_ts"] = ts
    return out


def crash_list(run: RunDir) -> list[tuple[str, float]]:
    """(member, crash_ts) of every applied crash operation: t0 + its `actual_s` (analysis.metrics.crashes)."""
    return sorted({(m, run.t0 + float(e["actual_s"])) for e in run.events
                   if e.get("event") == "action_applied" and e.get("op") == "crash" and e.get("actual_s") is not None
                   for m in e.get("targets") or []}, key=lambda c: (c[1], c[0]))


def stable_messages(run: RunDir, life: dict[str, dict]) -> list[dict]:
    """`time_to_stable` over plain events: one row per data message a sender sent (origin, seq, sent_ts, members
    counted, members reached, stable_ts and time_to_stable_s, None when it never became stable)."""
    pos_of = {m.name: m.sender_index for m in run.members if m.sender_index is not None}
    # per (member, S position): global `stable` arrays in time order -> the running maximum, for a bisection
    seen: dict[tuple[str, int], list[tuple[float, int]]] = {}
    sent = []
    for e in run.events:
        ev = e.get("event")
        if ev == "data_sent" and e.get("node") in pos_of and e.get("seq") is not None:
            sent.append((e["node"], e["seq"], e["ts"]))
        elif ev == "stable" and e.get("level") == "global" and isinstance(e.get("s"), list):
            for pos, v in enumerate(e["s"]):
                if v is not None:
                    seen.setdefault((e["node"], pos), []).append((e["ts"], v))
    reach: dict[tuple[str, int], tuple[list[float], list[float]]] = {}
    for key, entries in seen.items():
        entries.sort(key=lambda x: x[0])
        ts_list, highs, high = [], [], None
        for ts, v in entries:
            high = v if high is None else max(high, v)
            ts_list.append(ts)
            highs.append(high)
        reach[key] = (ts_list, highs)

    def reached(member: str, pos: int, seq: int) -> float | None:
        ts_list, highs = reach.get((member, pos), ([], []))
        i = bisect.bisect_left(highs, seq)
        return ts_list[i] if seq >= 1 and i < len(highs) else None

    rows = []
    for origin, seq, sent_ts in sorted(sent, key=lambda s: (pos_of[s[0]], s[1], s[2])):
        counted = [m for m, lf in life.items() if lf["started_ts"] is not None and lf["started_ts"] <= sent_ts
                   and (lf["crashed_ts"] is None or lf["crashed_ts"] > sent_ts)]
        done = []
        for m in counted:
            r, c = reached(m, pos_of[origin], seq), life[m]["crashed_ts"]
            if r is not None or c is not None:
                done.append(min(x for x in (r, c) if x is not None))
        stable = max(done) if counted and len(done) == len(counted) else None
        rows.append({"origin": origin, "seq": seq, "sent_ts": sent_ts, "members": len(counted),
                     "members_reached": len(done), "stable_ts": stable,
                     "time_to_stable_s": stable - sent_ts if stable is not None else None})
    return rows


def detections(run: RunDir, life: dict[str, dict], crashes: list[tuple[str, float]] | None = None) -> list[dict]:
    """`failure_detection` over plain events: per (crash, observer) the first `declared_failed` of the crashed
    member after the crash and before the observer's own crash, and its latency (None: never declared)."""
    ids = {m.name: m.id for m in run.members}
    decl: dict[tuple[str, Any], list[float]] = {}
    for e in run.events:
        if e.get("event") == "declared_failed":
            decl.setdefault((e.get("node"), e.get("member")), []).append(e["ts"])
    rows = []
    for member, crash_ts in crash_list(run) if crashes is None else crashes:
        if member not in ids:
            continue
        for obs, lf in sorted(life.items()):
            if obs == member or lf["started_ts"] is None or lf["started_ts"] > crash_ts \
                    or (lf["crashed_ts"] is not None and lf["crashed_ts"] <= crash_ts):
                continue
            times = [t for t in decl.get((obs, ids[member]), []) if t >= crash_ts
                     and (lf["crashed_ts"] is None or t < lf["crashed_ts"])]
            first = min(times, default=None)
            rows.append({"member": member, "crash_ts": crash_ts, "observer": obs, "declared_ts": first,
                         "latency_s": first - crash_ts if first is not None else None})
    return rows


def false_declaration_count(run: RunDir, crashes: list[tuple[str, float]] | None = None) -> int:
    """`declared_failed` events naming a member that had not crashed at that time (`false_declarations`)."""
    names = {m.id: m.name for m in run.members}
    crashes = crash_list(run) if crashes is None else crashes
    return sum(1 for e in run.events if e.get("event") == "declared_failed" and e.get("member") in names
               and not any(m == names[e["member"]] and ts <= e["ts"] for m, ts in crashes))


def round_values(rounds: list[dict], all_started: float | None) -> dict[str, Any]:
    """A run's TPR numbers from its rounds (`event_rounds`): the global rounds' (every completed one: the report's
    key metrics), the TPR values per round (every completed round, and the steady ones: those that started once
    every member was running; local gossip: each SC round plus the mean local round, the two phases in sequence)
    and the paper's round-0 TPR."""
    done = [r for r in rounds if r["tpr_s"] is not None]
    glob = [r for r in done if r["level"] == "global"]
    tprs, steps = [r["tpr_s"] for r in glob], [r["steps"] for r in glob if r["steps"] is not None]
    members = [r["member_tpr_mean_s"] for r in rounds if r["level"] == "global" and r["member_tpr_mean_s"] is not None]

    def values(rows: list[dict]) -> tuple[list[float], list[Any]]:
        g = [r for r in rows if r["level"] == "global"]
        if g:
            return [r["tpr_s"] for r in g], [r["steps"] for r in g]
        local = [r["tpr_s"] for r in rows if r["level"] == "local"]
        sc = [r for r in rows if r["level"] == "sc"]
        if not local:
            return [], []
        lm = statistics.fmean(local)
        return [r["tpr_s"] + lm for r in sc], [r["steps"] for r in sc]

    all_tprs, all_steps = values(done)
    steady = [r for r in done if all_started is not None and r["started_ts"] >= all_started]
    steady_tprs, steady_steps = values(steady)
    # the paper's TPR proper: from a common start of the protocol to the first S (round 0, when every member was
    # running when it started, which `run` guarantees by starting the members together)
    first = next((r for r in steady if r["level"] == "global" and r["round"] == 0), None)
    first_tpr, first_steps = (first["tpr_s"], first["steps"]) if first else (None, None)
    local0 = [r["started_ts"] for r in steady if r["level"] == "local" and r["round"] == 0]
    sc_done = sorted((r["started_ts"] + r["tpr_s"], r["steps"]) for r in done if r["level"] == "sc")
    if first is None and local0 and sc_done:
        # local gossip (§5): from the common start (the local rounds 0) to the first global S an SC constructs;
        # its steps are that SC round's (SC steps)
        first_tpr, first_steps = sc_done[0][0] - min(local0), sc_done[0][1]
    return {"tpr_rounds": len(tprs), "tpr_mean_s": _fmean(tprs), "tpr_std_s": _stdev(tprs),
            "steps_mean": _fmean(steps), "steps_std": _stdev(steps), "member_tpr_mean_s": _fmean(members),
            "tpr_values_s": steady_tprs, "steps_values": steady_steps,
            "tpr_all_values_s": all_tprs, "steps_all_values": all_steps,
            "tpr_first_round_s": first_tpr, "steps_first_round": first_steps,
            "rounds_completed": {lvl: sum(1 for r in done if r["level"] == lvl) for lvl in ("global", "local", "sc")}}


def _configs(run: RunDir) -> list[dict]:
    out = []
    for f in sorted((run.path / "configs").glob("*.json")):
        try:
            cfg = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(cfg, dict):
            out.append(cfg)
    return out


def gsgc_values(run: RunDir) -> dict[str, Any]:
    """Every per-run number of GSGC (the plug-in's `run_values`; the module's docstring defines them)."""
    p = run.params
    starts: dict[str, float] = {}
    for e in run.events:
        if e.get("event") == "node_started" and e.get("node") is not None and e.get("ts") is not None:
            starts[e["node"]] = min(e["ts"], starts.get(e["node"], e["ts"]))
    members = {m.name for m in run.members}
    started = {n: ts for n, ts in starts.items() if n in members}
    all_started = max(started.values()) if members and len(started) == len(members) else None
    configs = _configs(run)
    rounds = event_rounds(run.events, {m.name: m.local_group for m in run.members})
    crashes = crash_list(run)
    life = lives(run, crashes)
    tts = [r["time_to_stable_s"] for r in stable_messages(run, life)]
    stable = [x for x in tts if x is not None]
    fd = detections(run, life, crashes)
    lat = [r["latency_s"] for r in fd if r["latency_s"] is not None]
    q = queue_stats(run.delayline, (run.fidelity or {}).get("rate"))
    return {
        **generic_values(run),
        "subgroup": p.get("subgroup"), "step_s": p.get("step_s"), "fail_k": p.get("fail_k"),
        "local_groups": len(p.get("local_groups") or []) or None,
        "members": len(run.members), "members_started": len(started), "all_started_ts": all_started,
        "start_spread_s": all_started - min(started.values()) if all_started is not None else None,
        # the members waited for the runner's common start of the protocol (runs since commit 8ab3d07)
        "common_start": bool(configs) and all(c.get("wait_for_start") for c in configs),
        **round_values(rounds, all_started),
        "tts_messages": len(tts), "tts_stable": len(stable), "tts_mean_s": _fmean(stable),
        "tts_median_s": _quantile(stable, 0.5), "tts_p90_s": _quantile(stable, 0.9),
        "tts_max_s": max(stable, default=None),
        "crashes": len({(r["member"], r["crash_ts"]) for r in fd}), "fd_observers": len(fd),
        "fd_detected": len(lat), "fd_latency_median_s": statistics.median(lat) if lat else None,
        "fd_latency_max_s": max(lat, default=None), "false_declarations": false_declaration_count(run, crashes),
        "avg_queue": q["avg_queue"], "max_queue": q["max_queue"], "queue_overflowed": q["overflowed"],
    }


TUNE_METRICS = ("rounds", "round0")


def tune_value(values: dict, metric: str) -> float | None:
    """The TPR `orchestrator tune` averages into f(x) for one run (its `run_values`): "rounds" = the mean over the
    run's steady rounds (`tpr_values_s`); "round0" = the paper's TPR, from the members' common start to the first
    S (`tpr_first_round_s`, None when round 0 did not complete or started before every member ran)."""
    if metric == "round0":
        return values.get("tpr_first_round_s")
    if metric == "rounds":
        return _fmean(values.get("tpr_values_s") or [])
    raise ValueError(f"metric {metric!r}: one of {', '.join(TUNE_METRICS)}")


# --- the comparison of several runs ---------------------------------------------------------------------------

def pooled(summaries: list[dict]) -> list[dict]:
    """Per (members, sub-group size, step interval): TPR and steps pooled over the rounds of all its runs (each
    run's `tpr_values_s`: its rounds that started once every member ran)."""
    groups: dict[tuple, list[dict]] = {}
    for s in summaries:
        groups.setdefault((s.get("members"), s.get("subgroup"), s.get("step_s")), []).append(s)
    out = []
    for (n, b, step), runs in sorted(groups.items(), key=lambda kv: tuple((x is None, x) for x in kv[0])):
        tprs = [v for r in runs for v in r.get("tpr_values_s") or []]
        steps = [v for r in runs for v in r.get("steps_values") or [] if v is not None]
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
