"""The QSM paper's Figure 9 (multicast rate against the number of nodes), Figures 12-13 (throughput against the
partition size R), Figures 17-18 (the rate over time and its variability) and Figures 19-20 (recovery and ACK
latency against the number of nodes, under loss) from runs of topologies/qsm-fig9.yaml (seed 004 §3;
docs/reproduction-qsm.md); Figure 1 (the rate against the number of groups, all on the same members, one sender
round robin: topologies/qsm-fig1.yaml), Figure 14 (throughput and the packets on the wire against the regions of
one group: topologies/qsm-fig14-sweep.yaml), Figure 15 (throughput and recovery against the token rate:
topologies/qsm-fig15-sweep.yaml) and Figure 16 (total throughput against the number of senders with fair sharing:
topologies/qsm-fig16.yaml).

Every per-run number is the qsm plug-in's `run_values` (analysis/protocols/qsm.py defines each: throughput over
the steady half of the sending span, delivery per group, shares and Jain's index per sender and group, the 1 s
rate series, recovery and ACK latency in seconds and token rounds, CPU per packet); analysis/figlib.py collects
them, one row per run with its identity (seed, judges' verdict, dilation N, CPU budget, load) — every run kept, an
excluded one with the reason. This script declares the point, the values, the tables and the figures:

    python -m analysis.figures_qsm [runs] SWEEP_OR_RUN_DIR [...] --out DIR [--load LOG] [--cpu LOG] [--faithful-only]
    python -m analysis.figures_qsm tables DIR [--out DIR2] [--figures]

`runs` (the default) writes runs.csv (one row per run), rate_series.csv (each run's 1 s send counts), shares.csv
(each run's per-sender and per-group throughput and share), then what `tables` writes from runs.csv alone:
summary.csv / summary.json (per point (members, G, regions, S, R, loss, token, shaper, N, CPU budget): runs,
excluded, the largest load, per value its mean, 95 % CI half-width (Student t) and n; the cost model), tables.md,
and the figures (fig9_rate_vs_nodes.png, fig12_13_rate_vs_R.png, fig17_rate_over_time.png, fig19_recovery.png,
fig20_ack_latency.png, fig20_partitions.png, fig1_rate_vs_groups.png, fig14_regions.png, fig15_token_rate.png,
fig16_senders.png: those with data).
`tables` regenerates them from a directory's committed CSVs (no run directory): the point keys, values and
columns its runs.csv lacks (older results: no G, S, N, CPU budget, Jain's index, exclusions) are left out.

`--load`: a `unix-time load1 load5 load15` log (the load during each run). `--cpu`: the log of
`benchmarks/bench_qsm.py --watch` (the node processes' CPU seconds per run: `node_cpu_s`, then the plug-in's
`cpu_costs`); the cost model fits, over the runs with a reading, a fixed cost per member and second and a CPU
cost per receipt.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from analysis import figlib
from analysis.figlib import kept
from analysis.figtables import command_line, largest, summarise, write_summary
from analysis.figures_qsm_paper import PAPER, POINT, marginal_ceiling  # noqa: F401 (the figures' names, here too)

VALUES = ("throughput", "transmitted", "throughput_all", "delivered_min", "delivered_mean", "delivery", "rate_std",
          "rate_cv", "rate_final", "recovered", "recovery_rate", "recovery_latency_s", "recovery_latency_rounds",
          "ack_latency_s", "ack_latency_rounds", "steps_skipped", "token_rounds", "load_mean", "node_cpu_s",
          "cpu_us_per_packet", "cpu_us_per_receipt", "delayline_cpu_s", "ceiling_2cores", "throughput_per_group",
          "group_jain", "throughput_per_sender", "sender_jain", "sender_share_min")
# tables.md: the point's columns (key, label), then the values' (mean ± 95 % CI half-width)
HEAD = (("members", "members"), ("groups", "G"), ("regions", "regions"), ("n_senders", "S"), ("R", "R"),
        ("loss", "loss"), ("token_s", "token s"), ("shaper", "shaper"), ("dilation", "N"), ("cpu", "cpu"),
        ("runs", "runs"), ("excluded", "excluded"))
COLUMNS = (("throughput", "sent/s"), ("transmitted", "packets out/s"), ("delivered_min", "slowest recv/s"),
           ("delivery", "delivery"), ("rate_cv", "rate cv"), ("recovery_rate", "recovery rate"),
           ("recovery_latency_s", "recovery s"),
           ("recovery_latency_rounds", "recovery rounds"), ("ack_latency_s", "ACK s"),
           ("ack_latency_rounds", "ACK rounds"), ("cpu_us_per_packet", "node CPU us/packet"),
           ("ceiling_2cores", "2-core ceiling/s"), ("sender_jain", "Jain senders"), ("group_jain", "Jain groups"),
           ("load_mean", "load"))


# --- the runs -----------------------------------------------------------------------------------------------------

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


def qsm_values(cpu: dict[str, float] | None = None) -> figlib.Values:
    """The qsm plug-in's run_values, with the CPU log's reading of the run (`read_cpu`) where there is one."""
    from analysis.protocols.qsm import PLUGIN, cpu_costs

    def values(run) -> dict[str, Any]:
        v = PLUGIN.run_values(run)
        node = (cpu or {}).get(str(run.path))
        if node is not None:
            v.update(cpu_costs(v.get("messages"), v.get("receipts"), node, v.get("delayline_cpu_s")))
        return v
    return values


def series_rows(rows: list[dict]) -> list[dict]:
    """rate_series.csv: each run's 1 s send counts (taken out of its row)."""
    return [{"run": r["run"], "members": r.get("members"), "R": r.get("R"), "loss": r.get("loss"),
             "seed": r.get("seed"), "series": r.pop("rate_series")} for r in rows if "rate_series" in r]


def share_rows(rows: list[dict]) -> list[dict]:
    """shares.csv: one row per run and sender, and per run and group: its steady-window packets/s and its share of
    the run's total (the run's `sender_throughput` / `sender_share`, `group_...`; fig16's middle panel)."""
    out = []
    for r in rows:
        for kind in ("sender", "group"):
            shares = r.get(f"{kind}_share") or {}
            for who, v in (r.get(f"{kind}_throughput") or {}).items():
                out.append({"run": r.get("run"), "members": r.get("members"), "groups": r.get("groups"),
                            "n_senders": r.get("n_senders"), "seed": r.get("seed"), "kind": kind, "who": who,
                            "throughput": v, "share": shares.get(who)})
    return out


# --- aggregation and the tables (from runs.csv alone) ---------------------------------------------------------------

def aggregate(rows: list[dict], point: tuple[str, ...] = POINT, values: tuple[str, ...] = VALUES,
              with_excluded: bool = True) -> list[dict]:
    """Per point (figlib.aggregate): runs (not excluded), `excluded` (with `with_excluded`), the largest load of its
    runs, per value its mean, 95 % CI half-width and n."""
    return summarise(rows, point, values, excluded=with_excluded, extra={"load_max": largest("load_max")})


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


def _f(v: Any, nd: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{nd}g}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)


def markdown_tables(agg: list[dict]) -> str:
    """One row per point; the columns whose key the rows lack (older results) are left out."""
    keys = set().union(*(r.keys() for r in agg)) if agg else {k for k, _ in HEAD + COLUMNS}
    head = [(k, c) for k, c in HEAD if k in keys]
    cols = [(k, c) for k, c in COLUMNS if k in keys]
    out = ["| " + " | ".join(c for _, c in head + cols) + " |", "|" + "---|" * (len(head) + len(cols))]
    for r in agg:
        cells = [f"{r[k]:.1%}" if k == "loss" and r.get(k) is not None else _f(r.get(k)) for k, _ in head]
        cells += [f"{_f(r[k])} ± {_f(r[k + '_ci95'], 2)}" if r.get(k + "_ci95") else _f(r.get(k)) for k, _ in cols]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def tables(rows: list[dict], dst: Path) -> tuple[list[dict], dict | None]:
    """summary.csv, summary.json and tables.md under `dst` from runs.csv's rows alone; returns (points, cost
    model)."""
    keys = set().union(*(r.keys() for r in rows)) if rows else set(POINT) | set(VALUES) | {"excluded"}
    point = tuple(k for k in POINT if k in keys)
    values = tuple(k for k in VALUES if k in keys)
    agg = aggregate(rows, point, values, "excluded" in keys)
    runs = kept(rows)
    model = cost_model(runs)
    if model:
        model["marginal_ceiling_2cores"] = {n: marginal_ceiling(model, n) for n in (4, 8, 12, 16, 24, 32, 48, 71)}
    doc = {"runs": len(runs), **({"excluded": len(rows) - len(runs)} if "excluded" in keys else {}),
           "paper": PAPER, "cost_model": model, "points": agg}
    write_summary(dst, agg, doc, markdown_tables(agg))
    return agg, model


def with_series(rows: list[dict], src: Path) -> list[dict]:
    """The runs (not excluded) with their rate series (rate_series.csv), for the figures."""
    f = src / "rate_series.csv"
    series = {s["run"]: s["series"] for s in figlib.read_csv(f)} if f.exists() else {}
    return [dict(r, rate_series=series.get(r.get("run") or Path(str(r.get("run_dir") or "")).name) or [])
            for r in kept(rows)]


# --- CLI ----------------------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    def runs(a) -> list[dict]:
        rows = figlib.collect(a.dirs, qsm_values(read_cpu(a.cpu)), point=POINT, faithful_only=a.faithful_only,
                              load=figlib.read_load(a.load))
        figlib.write_csv(a.out / "rate_series.csv", series_rows(rows))      # takes each run's series out of its row
        figlib.write_csv(a.out / "shares.csv", share_rows(rows))
        return rows

    def options(ap, tables: bool) -> None:
        if not tables:
            ap.add_argument("--cpu", type=Path, default=None, help="benchmarks/bench_qsm.py --watch's log")
            ap.add_argument("--faithful-only", action="store_true", help="exclude the runs the judges found unfaithful")
    argv = list(sys.argv[1:] if argv is None else argv)
    # everything but the per-run CSVs from runs.csv, as `tables` does
    a, rows = command_line(argv[1:] if argv[:1] == ["runs"] else argv, __doc__, runs, options=options, reread=True)
    agg, model = tables(rows, a.out)
    if a.draw:
        from analysis.figures_qsm_plots import draw
        draw(a.out, with_series(rows, a.source), agg, model)
    if model and not a.tables:
        print(f"cost model over {model['runs']} runs: {model['fixed_core_per_member']:.4f} cores per member + "
              f"{1e6 * model['cpu_s_per_receipt']:.1f} us per receipt (rms residual {model['rms_residual_s']:.1f} s "
              f"of {model['mean_cpu_s']:.1f}); 2-core marginal ceiling: {model['marginal_ceiling_2cores']}")
    if not a.tables:
        print(markdown_tables(agg))
    return 0


if __name__ == "__main__":
    sys.exit(main())
