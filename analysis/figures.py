"""matplotlib figures (Agg backend) drawn from collected aggregates (lists of dicts), never from packet rows.
Times on the x axes are seconds since the protocol start (t0)."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - the backend must be chosen first
import numpy as np  # noqa: E402

Rows = Sequence[dict[str, Any]]
MAX_LINES = 16  # above this many origins, no legend
_ACTION_COLORS = {"crash": "tab:red", "stop_signal": "tab:gray", "cont_signal": "tab:gray", "start": "tab:green"}


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _mark_actions(ax, actions: Rows, label: bool = False) -> None:
    """Vertical lines at the schedule's applied operations (pause/perturb signals are left out: too many)."""
    for a in actions:
        if a["op"] in ("stop_signal", "cont_signal"):
            continue
        ax.axvline(a["actual_s"], color=_ACTION_COLORS.get(a["op"], "tab:purple"), ls="--", lw=0.8, alpha=0.7)
        if label:
            ax.annotate(f"{a['op']} {','.join(a['targets'] or a['links'])[:24]}", (a["actual_s"], 1.0),
                        xycoords=("data", "axes fraction"), rotation=90, va="top", ha="right", fontsize=7)


def tpr_per_round(rounds: Rows, path: Path) -> Path:
    """Figure 6 of the paper, per round of one run: (A) steps per round, (B) TPR per round, global level."""
    g = sorted((r for r in rounds if r["level"] == "global" and r["tpr_s"] is not None), key=lambda r: r["round"])
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    xs = [r["round"] for r in g]
    ax1.bar(xs, [r["steps"] for r in g], color="tab:blue", alpha=0.8, label="constructing member")
    ax1.plot(xs, [r["steps_mean"] for r in g], "o-", color="tab:orange", ms=3, label="mean over members")
    ax1.set(xlabel="round", ylabel="steps", title="(A) number of steps per round")
    ax1.legend(fontsize=8)
    tprs = [r["tpr_s"] for r in g]
    ax2.plot(xs, tprs, "o-", color="tab:blue", ms=4, label="TPR")
    if tprs:
        mean = sum(tprs) / len(tprs)
        ax2.axhline(mean, color="k", ls=":", lw=1, label=f"mean {mean:.2f} s")
    ax2.set(xlabel="round", ylabel="seconds", title="(B) time per round (TPR)")
    ax2.set_ylim(bottom=0)
    ax2.legend(fontsize=8)
    return _save(fig, path)


def messages_over_time(series: Rows, actions: Rows, members: Sequence[str], bin_s: float, path: Path) -> Path:
    """Protocol messages each member sent per second: one row per member, time along x (a heat map reads the
    same for 10 members as for 1000)."""
    rows = {m: i for i, m in enumerate(members)}
    fig, ax = plt.subplots(figsize=(10, 1.5 + 0.16 * min(len(members), 60)))
    if series:
        lo = min(r["t_bin_s"] for r in series)
        ncols = int(round((max(r["t_bin_s"] for r in series) - lo) / bin_s)) + 1
        grid = np.zeros((len(members), ncols))
        for r in series:
            if r["node"] in rows:
                grid[rows[r["node"]], int(round((r["t_bin_s"] - lo) / bin_s))] = r["msgs"] / bin_s
        img = ax.imshow(grid, aspect="auto", interpolation="nearest", cmap="viridis",
                        extent=(lo, lo + ncols * bin_s, len(members) - 0.5, -0.5))
        fig.colorbar(img, ax=ax, label="messages sent / s", pad=0.01)
    every = max(1, len(members) // 40)
    ax.set_yticks(range(0, len(members), every))
    ax.set_yticklabels(members[::every], fontsize=7)
    _mark_actions(ax, actions)
    ax.set(xlabel="time since start (s)", ylabel="member", title="Protocol messages sent per member")
    return _save(fig, path)


def timeline(actions: Rows, event_series: Rows, marks: Rows, members: Sequence[str], bin_s: float,
             path: Path, throughput: Rows = ()) -> Path:
    """Schedule actions against throughput, delivery and the protocol's events: bytes per second sent (data and
    control) on top; events per second (the protocol's timeline events, data_received among them) below it;
    then one row per member with crashes, pauses and the protocol's marks (`marks`: member, t_s, label, color;
    GSGC: the failure declarations other members made about it, red when it had crashed)."""
    fig, (ax0, ax1, ax2) = plt.subplots(
        3, 1, figsize=(10, 4.5 + 0.18 * len(members) + 1.5), sharex=True,
        gridspec_kw={"height_ratios": [1.0, 1.2, max(1.0, 0.12 * len(members))]})
    for data, label, color in ((True, "data", "tab:blue"), (False, "control", "tab:orange")):
        pts = sorted((r["t_bin_s"], r["bytes"] or 0) for r in throughput if bool(r["data"]) == data)
        if pts:
            ax0.step([p[0] for p in pts], [p[1] / bin_s for p in pts], where="post", label=label, lw=1, color=color)
    _mark_actions(ax0, actions, label=True)
    ax0.set(ylabel="bytes / s sent", title="Timeline: schedule, throughput, delivery and the protocol's events")
    ax0.set_ylim(bottom=0)
    ax0.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))

    by_event: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for r in event_series:
        by_event[r["event"]].append((r["t_bin_s"], r["count"]))
    for event, pts in sorted(by_event.items()):
        pts.sort()
        ax1.step([p[0] for p in pts], [p[1] / bin_s for p in pts], where="post", label=event, lw=1)
    _mark_actions(ax1, actions)
    ax1.set(ylabel="events / s (all members)")
    if by_event:
        ax1.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))

    row = {m: i for i, m in enumerate(members)}
    paused: dict[str, float] = {}
    for a in sorted(actions, key=lambda a: a["actual_s"]):
        for t in a["targets"]:
            if t not in row:
                continue
            if a["op"] == "crash":
                ax2.plot(a["actual_s"], row[t], "x", color="tab:red", ms=9, mew=2)
            elif a["op"] == "stop_signal":
                paused[t] = a["actual_s"]
            elif a["op"] == "cont_signal" and t in paused:
                start = paused.pop(t)
                ax2.plot([start, a["actual_s"]], [row[t], row[t]], color="tab:gray", lw=5, alpha=0.6,
                         solid_capstyle="butt")
    kinds: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for m in marks:
        if m["member"] in row:
            kinds[(m["label"], m["color"])].append(m)
    for (label, color), pts in sorted(kinds.items()):
        ax2.scatter([m["t_s"] for m in pts], [row[m["member"]] for m in pts], s=8, color=color, alpha=0.6,
                    label=label)
    ax2.plot([], [], "x", color="tab:red", label="crash")
    ax2.plot([], [], color="tab:gray", lw=5, alpha=0.6, label="paused")
    ax2.set_yticks(range(len(members)))
    ax2.set_yticklabels(members, fontsize=6 if len(members) > 30 else 8)
    ax2.set_ylim(-1, len(members))
    ax2.invert_yaxis()
    ax2.set(xlabel="time since start (s)", ylabel="member")
    ax2.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _save(fig, path)


def delivery_histogram(hist: Rows, path: Path) -> Path:
    """pbcast's bimodal plot: messages (log scale) per delivered fraction (`bin`, `messages` rows of
    analysis/protocols/pbcast.delivery_histogram: bins of 0.1 of the other members)."""
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    rows = [r for r in hist if r.get("messages")]
    ax.bar([float(r["bin"]) + 0.05 for r in rows], [r["messages"] for r in rows], width=0.09, color="C0")
    ax.set_yscale("log")
    ax.set_ylim(bottom=0.5)
    ax.set_xlim(0, 1.1)
    ax.set(xlabel="fraction of the other members that delivered the message (bins of 0.1)", ylabel="messages",
           title="Delivery distribution per message (bimodal: almost all or almost none)")
    ax.grid(alpha=0.3, which="both")
    return _save(fig, path)


def throughput_per_member(rows: Rows, unperturbed: Sequence[str], perturbed: Sequence[str], path: Path) -> Path:
    """Figure 1's measure per member: mean deliveries/s over the 500 ms windows with the windows' min-max as a bar
    (`node`, `mean_per_s`, `min_per_s`, `max_per_s` rows), unperturbed / perturbed / other members coloured."""
    rows = sorted(rows, key=lambda r: natural(r["node"]))
    fig, ax = plt.subplots(figsize=(max(6.4, 0.25 * len(rows) + 2), 3.6))
    colour = {**{m: "C0" for m in unperturbed}, **{m: "C3" for m in perturbed}}
    xs = range(len(rows))
    mean = [r["mean_per_s"] or 0 for r in rows]
    ax.bar(xs, mean, color=[colour.get(r["node"], "C7") for r in rows])
    ax.errorbar(xs, mean, yerr=[[m - (r["min_per_s"] or 0) for m, r in zip(mean, rows)],
                                [(r["max_per_s"] or 0) - m for m, r in zip(mean, rows)]],
                fmt="none", ecolor="k", elinewidth=0.6, capsize=2)
    ax.set_xticks(list(xs), [r["node"] for r in rows], rotation=90, fontsize=6)
    ax.set(ylabel="deliveries/s (500 ms windows)",
           title="Throughput per member: unperturbed (blue), perturbed (red), senders and others (grey)")
    ax.set_ylim(bottom=0)
    return _save(fig, path)


def time_to_stable(tts: Rows, t0: float, path: Path) -> Path:
    """Time to stable of each data message against its send time, one colour per origin."""
    fig, ax = plt.subplots(figsize=(10, 3.6))
    by_origin: dict[str, list[dict]] = defaultdict(list)
    for r in tts:
        by_origin[r["origin"]].append(r)
    for origin in sorted(by_origin, key=natural):
        pts = [r for r in by_origin[origin] if r["time_to_stable_s"] is not None]
        ax.plot([r["sent_ts"] - t0 for r in pts], [r["time_to_stable_s"] for r in pts], "o", ms=3,
                label=f"origin {origin}")
    unstable = sum(1 for r in tts if r["time_to_stable_s"] is None)
    ax.set(xlabel="sent at (s since start)", ylabel="time to stable (s)",
           title=f"Time to stable per data message ({unstable} of {len(tts)} never stable)")
    ax.set_ylim(bottom=0)
    if by_origin and len(by_origin) <= MAX_LINES:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _save(fig, path)


def tpr_vs_step(points: Rows, path: Path) -> Path:
    """The shape of the paper's Figure 6 over runs: (A) steps per round and (B) TPR against the step interval,
    one line per sub-group size b (and group size n, if the runs differ in it); error bars are one standard
    deviation over the pooled rounds."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    lines: dict[tuple, list[dict]] = defaultdict(list)
    for p in points:
        lines[(p["members"], p["subgroup"])].append(p)
    several_n = len({n for n, _ in lines}) > 1
    for n, b in sorted(lines, key=lambda k: tuple((x is None, x) for x in k)):
        pts = sorted(lines[(n, b)], key=lambda p: p["step_s"])
        xs = [p["step_s"] for p in pts]
        label = f"n = {n}, b = {b}" if several_n else f"b = {b}"
        ax1.errorbar(xs, [p["steps_mean"] for p in pts], yerr=[p["steps_std"] or 0 for p in pts], marker="o",
                     ms=4, capsize=3, label=label)
        ax2.errorbar(xs, [p["tpr_mean_s"] for p in pts], yerr=[p["tpr_std_s"] or 0 for p in pts], marker="o",
                     ms=4, capsize=3, label=label)
    ax1.set(xlabel="step interval (s)", ylabel="steps", title="(A) number of steps per round")
    ax2.set(xlabel="step interval (s)", ylabel="seconds", title="(B) time per round (TPR)")
    for ax in (ax1, ax2):
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
    return _save(fig, path)


def natural(name: str) -> tuple:
    """h2 before h10."""
    digits = "".join(c for c in name if c.isdigit())
    return name.rstrip("0123456789"), int(digits) if digits else -1, name
