"""The figures of analysis/figures_qsm.py, drawn from its per-point rows (summary.csv) and its runs (runs.csv with
rate_series.csv): Figures 9, 12-13, 17, 19-20 (one group, one sender, the token every second), 1 (against the number
of groups), 14 (against the regions of one group), 15 (against the token rate) and 16 (against the number of
senders). Points at another time dilation or CPU budget are drawn as lines of their own."""
from __future__ import annotations

from pathlib import Path

from analysis.figlib import pyplot, save
from analysis.figures_qsm_paper import PAPER, POINT, marginal_ceiling


def _line(ax, rows, x, key, label, marker="o", color=None):
    rows = sorted((r for r in rows if r.get(key) is not None and r.get(x) is not None), key=lambda r: r[x])
    if rows:
        ax.errorbar([r[x] for r in rows], [r[key] for r in rows], yerr=[r.get(f"{key}_ci95") or 0 for r in rows],
                    marker=marker, capsize=3, label=label, color=color)


def one_group_one_sender(r: dict) -> bool:
    """The Figure 9-20 setting: one group, one sender, the token every second (Figures 1, 15, 16 vary these)."""
    return r.get("groups") in (1, None) and r.get("n_senders") in (1, None) and r.get("token_s") == 1.0


def budgets(rows: list[dict]) -> list[tuple[str, list[dict]]]:
    """The rows split by (time dilation, CPU budget): (label suffix, rows); no suffix when there is one."""
    by: dict[tuple, list[dict]] = {}
    for r in rows:
        by.setdefault((r.get("dilation"), r.get("cpu")), []).append(r)
    if len(by) == 1:
        return [("", rows)]
    return [(f" (N = {n}, CPU {c if c is not None else 'unbounded'})", rs)
            for (n, c), rs in sorted(by.items(), key=lambda kv: tuple(str(v) for v in kv[0]))]


def fig9(agg: list[dict], path: Path, model: dict | None = None) -> None:
    rows = [r for r in agg if r["loss"] == 0 and r["R"] == 5 and r["shaper"] == "delayline"
            and one_group_one_sender(r)]
    if not rows:
        return
    plt = pyplot()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    for i, (sfx, rs) in enumerate(budgets(rows)):
        _line(a1, rs, "members", "throughput", "sent (steady half), under load" + sfx, color=f"C{3 * i}")
        _line(a1, rs, "members", "delivered_min", "received, slowest member" + sfx, marker="s", color=f"C{3 * i + 1}")
        _line(a1, rs, "members", "ceiling_2cores", "2 idle cores at the measured CPU cost" + sfx, marker="^",
              color=f"C{3 * i + 2}")
        for key, label, marker in (("throughput", "sent/s", "o"), ("ceiling_2cores", "2-core ceiling", "^")):
            ours = sorted((r for r in rs if r.get(key)), key=lambda r: r["members"])
            if ours:
                base = ours[0]
                a2.plot([r["members"] for r in ours], [r[key] / base[key] for r in ours], marker=marker,
                        label=f"here: {label} / its value at {base['members']} members{sfx}")
    xs = sorted({r["members"] for r in rows})
    if model:
        ms = [(n, marginal_ceiling(model, n)) for n in range(xs[0], xs[-1] + 1)]
        a1.plot([n for n, c in ms if c], [c for n, c in ms if c], "--", color="grey",
                label="cost model: (2 cores - fixed) / (us per receipt x receivers)")
    a1.set_xlabel("members (one group, one region)")
    a1.set_ylabel("packets/s")
    a1.set_title("Figure 9 here: multicast rate vs group size", fontsize=10)
    small = min(xs)
    a2.plot(xs, [small / x for x in xs], ":", color="grey", label="members^-1 (one CPU shared by all members)")
    p = PAPER["fig9"]
    a2.plot(list(p), [v / p[1] for v in p.values()], "s--", color="C3", label="paper (text): 9850 -> 6500 /s")
    a2.set_xlabel("members")
    a2.set_ylabel("rate relative to the smallest group")
    a2.set_ylim(0, 1.6)
    for ax in (a1, a2):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    save(fig, path)


def fig12_13(agg: list[dict], path: Path) -> None:
    rows = [r for r in agg if r["shaper"] == "delayline" and one_group_one_sender(r)]
    key = lambda r: (r["members"], r["loss"], r.get("dilation"), r.get("cpu"))  # noqa: E731
    series = sorted({key(r) for r in rows if sum(1 for x in rows if key(x) == key(r)) >= 3},
                    key=lambda k: tuple((v is None, v if v is not None else 0) for v in k))
    if not series:
        return
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for i, (n, loss, dil, cpu) in enumerate(series):
        sub = [r for r in rows if key(r) == (n, loss, dil, cpu)]
        label = f"{n} members, loss {loss:.1%}" + (f", N = {dil}, CPU {cpu}" if cpu is not None else "")
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
    save(fig, path, title="Figures 12-13 here: throughput and recovery vs partition size")


def fig_latency(agg: list[dict], keys: tuple[str, str], ylabel: str, title: str, path: Path,
                paper: list[tuple[str, float]] = ()) -> None:
    rows = [r for r in agg if r["shaper"] == "delayline" and one_group_one_sender(r)]
    if not any(r["loss"] > 0 for r in rows):
        return
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    i = 0
    for sfx, rs in budgets(rows):
        for loss in sorted({r["loss"] for r in rs}):
            sub = [r for r in rs if r["loss"] == loss and r["R"] == 5]
            label = (f"loss {loss:.1%} per link" if loss else "no loss") + sfx
            _line(axes[0], sub, "members", keys[0], label, color=f"C{i}")
            _line(axes[1], sub, "members", keys[1], label, color=f"C{i}")
            i += 1
    for label, v in paper:
        axes[0].axhline(v, ls="--", color="grey", lw=1)
        axes[0].text(axes[0].get_xlim()[0], v, " " + label, fontsize=7, va="bottom", color="grey")
    axes[0].set_ylabel(ylabel)
    axes[1].set_ylabel(keys[1].replace("_", " "))
    for ax in axes:
        ax.set_xlabel("members")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    save(fig, path, title=title)


def partitions(r: dict) -> int:
    """A region's partitions (token rings) at the point: p = max(1, floor(members / R)) (membership.region_view)."""
    return max(1, int(r["members"]) // int(r["R"]))


def fig20_rings(agg: list[dict], path: Path) -> None:
    """ACK and recovery latency (token rounds) against the region's partitions, one line per member count under
    loss: drawn when some member count has points at two partition counts (make repro-qsm-fig20-ring)."""
    rows = [r for r in agg if r["shaper"] == "delayline" and one_group_one_sender(r) and r["loss"] > 0
            and r.get("R") and r.get("members")]
    by: dict[tuple, list[dict]] = {}
    for r in rows:
        by.setdefault((r["members"], r["loss"], r.get("dilation"), r.get("cpu")), []).append(r)
    lines = {k: sorted(v, key=partitions) for k, v in by.items() if len({partitions(r) for r in v}) >= 2}
    if not lines:
        return
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for i, ((n, loss, dil, cpu), rs) in enumerate(sorted(lines.items(), key=lambda kv: str(kv[0]))):
        label = f"{n} members, loss {loss:.1%}" + (f", N = {dil}, CPU {cpu}" if cpu is not None else "")
        for ax, key in zip(axes, ("ack_latency_rounds", "recovery_latency_rounds")):
            xs = [partitions(r) for r in rs]
            ax.errorbar(xs, [r.get(key) for r in rs], yerr=[r.get(f"{key}_ci95") or 0 for r in rs], marker="o",
                        capsize=3, label=label, color=f"C{i}")
            for x, r in zip(xs, rs):
                ax.annotate(f"R = {r['R']}", (x, r.get(key) or 0), textcoords="offset points", xytext=(4, 4),
                            fontsize=7, color=f"C{i}")
    axes[0].axhline(PAPER["ack_rounds_large"], ls="--", color="grey", lw=1)
    axes[0].text(axes[0].get_xlim()[0], PAPER["ack_rounds_large"], " paper: 3.5 rounds (large)", fontsize=7,
                 va="bottom", color="grey")
    axes[0].set_ylabel("ACK latency (token rounds)")
    axes[1].set_ylabel("recovery latency (token rounds)")
    for ax in axes:
        ax.set_xlabel("partitions (token rings) in the region: max(1, members // R)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    save(fig, path, title="Figure 20 here: ACK and recovery latency vs the region's partitions")


def fig17(runs: list[dict], path: Path) -> None:
    rows = [r for r in runs if r["loss"] == 0 and r["R"] == 5 and r.get("rate_series") and one_group_one_sender(r)]
    if not rows:
        return
    plt = pyplot()
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
    save(fig, path)


def series_over(rows: list[dict], x: str, also: tuple[str, ...] = ()) -> dict[tuple, list[dict]]:
    """The rows split into series by every point key but `x` and `also` (the keys that change with `x`; the shaper,
    N and CPU budget kept), each with at least two distinct `x` values: what one line of a figure over `x` draws.
    Pure."""
    rest = [k for k in POINT if k != x and k not in also]
    out: dict[tuple, list[dict]] = {}
    for r in rows:
        if r.get(x) is not None:
            out.setdefault(tuple(r.get(k) for k in rest), []).append(r)
    return {k: sorted(v, key=lambda r: r[x]) for k, v in out.items() if len({r[x] for r in v}) >= 2}


def _label(key: tuple, x: str, show: tuple[str, ...], also: tuple[str, ...] = ()) -> str:
    d = dict(zip([k for k in POINT if k != x and k not in also], key))
    names = {"members": "members", "groups": "G", "n_senders": "S", "R": "R", "token_s": "token s"}
    parts = [f"{names[k]} {d[k]}" for k in show if k in d]
    parts.append(f"loss {d['loss']:.1%}" if d.get("loss") else "no loss")
    if d.get("cpu") is not None:
        parts.append(f"N = {d.get('dilation')}, CPU {d['cpu']}")
    return ", ".join(parts)


def fig1(agg: list[dict], path: Path) -> None:
    """Figure 1: total throughput (all groups) and the slowest member's receive rate against G; right: relative to
    each series' smallest G, with JGroups' numbers from the paper's text."""
    series = series_over([r for r in agg if r.get("n_senders") == 1 and r.get("groups")], "groups")
    if not series:
        return
    plt = pyplot()
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
    save(fig, path, title="Figure 1 here: multicast rate vs the number of groups")


def fig14(agg: list[dict], path: Path) -> None:
    """Figure 14: throughput and the packets put on the wire against the number of regions of the one group (the
    artificial groups that split it change with the regions); right: throughput relative to each series' fewest
    regions, beside 1/k (the paper: "slightly less than inversely proportionally")."""
    series = series_over([r for r in agg if r.get("n_senders") == 1 and r.get("regions")], "regions", ("groups",))
    if not series:
        return
    plt = pyplot()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    for i, (key, rows) in enumerate(sorted(series.items(), key=lambda kv: str(kv[0]))):
        label = _label(key, "regions", ("members", "R"), ("groups",))
        _line(a1, rows, "regions", "throughput", f"messages/s ({label})", color=f"C{i}")
        _line(a1, rows, "regions", "transmitted", f"packets on the wire/s ({label})", marker="^", color=f"C{i}")
        ours = [r for r in rows if r.get("throughput")]
        if ours:
            k0, t0 = ours[0]["regions"], ours[0]["throughput"]
            a2.plot([r["regions"] for r in ours], [r["throughput"] / t0 for r in ours], "o-", color=f"C{i}",
                    label=f"here, over k = {k0} ({label})")
            ks = [r["regions"] for r in ours]
            a2.plot(ks, [k0 / k for k in ks], "--", color="grey", label="1/k: inversely proportional")
    a1.set_ylabel("per second (steady half)")
    a2.set_ylabel("throughput relative to the fewest regions")
    a2.set_ylim(0, 1.2)
    for ax in (a1, a2):
        ax.set_xlabel("regions k of the one group (artificial groups split it)")
        ax.grid(alpha=0.3)
    a1.legend(fontsize=7, loc="upper left")
    a2.legend(fontsize=7, loc="lower left")
    save(fig, path, title="Figure 14 here: throughput and packets sent vs regions per group")


def fig15(agg: list[dict], path: Path) -> None:
    """Figure 15: throughput (left) and mean recovery latency (right, seconds and token rounds) against the token
    rate 1 / token interval."""
    rows = [dict(r, token_per_s=1.0 / r["token_s"]) for r in agg if r.get("token_s")]
    series = series_over(rows, "token_s")
    if not series:
        return
    plt = pyplot()
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
    save(fig, path, title="Figure 15 here: throughput and recovery vs the token rate")


def fig16(agg: list[dict], runs: list[dict], path: Path) -> None:
    """Figure 16: total throughput against S (left), each run's per-sender throughput (middle) and Jain's index
    over the senders (right: point means, each run a dot)."""
    series = series_over([r for r in agg if r.get("groups") == 1 and r.get("n_senders")], "n_senders")
    if not series:
        return
    plt = pyplot()
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
    save(fig, path, title="Figure 16 here: total throughput and fair sharing vs the number of senders")


def draw(out: Path, runs: list[dict], agg: list[dict], model: dict | None = None) -> None:
    """Every figure that has data, under `out`."""
    fig9(agg, out / "fig9_rate_vs_nodes.png", model)
    fig12_13(agg, out / "fig12_13_rate_vs_R.png")
    fig17(runs, out / "fig17_rate_over_time.png")
    fig_latency(agg, ("recovery_latency_rounds", "recovery_rate"), "recovery latency (token rounds)",
                "Figure 19 here: recovery latency and recovery rate vs members", out / "fig19_recovery.png",
                [("paper: 2.5 rounds", PAPER["recovery_rounds"])])
    fig_latency(agg, ("ack_latency_rounds", "ack_latency_s"), "ACK latency (token rounds)",
                "Figure 20 here: ACK latency vs members", out / "fig20_ack_latency.png",
                [("paper: ~1 round (small)", PAPER["ack_rounds_small"]),
                 ("paper: 3.5 rounds (large)", PAPER["ack_rounds_large"])])
    fig20_rings(agg, out / "fig20_partitions.png")
    fig1(agg, out / "fig1_rate_vs_groups.png")
    fig14(agg, out / "fig14_regions.png")
    fig15(agg, out / "fig15_token_rate.png")
    fig16(agg, runs, out / "fig16_senders.png")
