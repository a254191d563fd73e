"""docs/qsm.md's simulator table, regenerated: QSM on the seeded simulator (tests/node/qsm_sim.py) with
qsm-small's settings (24 members, groups a = 0-15 and b = 8-23, R = 3, a token every 0.5 s, senders 0 and 20
offering 20/s for 30 s with rate control, λ = 0.2, k = 3, μ_min = 5, cap 60; one-way latency 2-12 ms; each
multicast copy lost independently), at 1 % and 5 % loss, seeds 1-3. Deterministic: the same code writes the same files.

    .venv/bin/python -m experiments.qsm_sim_table --out docs/results/qsm-sim      (make repro-qsm-sim)

Writes runs.csv (one row per loss and seed) and table.md (per loss: each value's mean over the seeds, and its
range). Every member must deliver every packet of its groups exactly once, or the script fails.
"""
from __future__ import annotations

import argparse
import csv
import statistics
import sys
from collections import Counter
from pathlib import Path

from tests.node.qsm_sim import Sim, make_configs

GROUPS = {"a": list(range(0, 16)), "b": list(range(8, 24))}
SETTINGS = {"token_interval_s": 0.5, "growth": 0.2, "rate_samples": 3, "rate_min": 5.0, "rate_max": 60.0}
LOSSES = (0.01, 0.05)
SEEDS = (1, 2, 3)
SEND_S, RUN_S = 30.0, 45.0
DATA_TYPES = ("DATA", "RETRANS")
FIELDS = ("loss", "seed", "packets", "receipts", "recovered", "recovered_rate", "push", "pull", "retransmit",
          "recovery_mean_s", "recovery_median_s", "recovery_rounds", "ack_mean_s", "ack_rounds", "pull_delayed",
          "control_share", "exactly_once", "released")


def run(loss: float, seed: int) -> dict:
    cfgs = make_configs(24, GROUPS, senders=[0, 20], rate_per_s=20, stop_s=SEND_S, seed=seed, **SETTINGS)
    sim = Sim(cfgs, loss=loss, latency=(0.002, 0.012), seed=seed)
    sim.run_until(RUN_S)
    sent = {(i, e.fields["seq"]): e.fields["group_name"] for i, e in sim.of("data_sent")}
    got = Counter((i, e.fields["origin"], e.fields["seq"]) for i, e in sim.of("data_received"))
    want = Counter((m, o, s) for (o, s), g in sent.items() for m in GROUPS[g] if m != o)
    rec = [e.fields for _, e in sim.of("recovered")]
    lats = [r["latency"] for r in rec if r["latency"] is not None]
    acks = [e.fields for _, e in sim.of("ack_received")]
    acked = sum(a["acked"] for a in acks)
    control = sum(v for k, v in sim.sent.items() if k.split(":")[1] not in DATA_TYPES)
    how = Counter(r["how"] for r in rec)
    tok = SETTINGS["token_interval_s"]
    snaps = [n.snapshot() for n in sim.nodes.values()]
    ack_mean = sum(a["latency_sum"] for a in acks) / acked if acked else None
    receipts, rec_mean = sum(got.values()), statistics.fmean(lats)
    return {
        "loss": loss, "seed": seed, "packets": len(sent), "receipts": receipts, "recovered": len(rec),
        "recovered_rate": len(rec) / receipts, "push": how["push"], "pull": how["pull"],
        "retransmit": how["retransmit"], "recovery_mean_s": rec_mean,
        "recovery_median_s": statistics.median(lats), "recovery_rounds": rec_mean / tok,
        "ack_mean_s": ack_mean, "ack_rounds": ack_mean / tok if ack_mean is not None else None,
        "pull_delayed": sum(n.counters["pull_delayed"] for n in sim.nodes.values()),
        "control_share": control / sum(sim.sent.values()), "exactly_once": got == want,
        "released": not any(any(s["cached"].values()) for s in snaps)
        and not any(any(s["sender"]["buffered"].values()) for s in snaps if "sender" in s)}


def fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def table(rows: list[dict]) -> str:
    cols = [("packets", "packets", "{:.0f}"), ("receipts", "receipts", "{:.0f}"),
            ("recovered", "recovered", "{:.0f}"), ("recovered_rate", "recovered / receipts", "{:.2%}"),
            ("push", "push", "{:.0f}"), ("pull", "pull", "{:.0f}"), ("retransmit", "retransmitted", "{:.0f}"),
            ("recovery_mean_s", "recovery latency mean (s)", "{:.2f}"),
            ("recovery_median_s", "median (s)", "{:.2f}"), ("recovery_rounds", "mean in token rounds", "{:.1f}"),
            ("ack_mean_s", "ACK latency mean (s)", "{:.2f}"), ("ack_rounds", "in token rounds", "{:.1f}"),
            ("pull_delayed", "pulls delayed", "{:.0f}"), ("control_share", "control packets", "{:.0%}")]
    out = [f"Seeds {', '.join(map(str, SEEDS))} per loss; each cell the mean over the seeds [min - max]. Every "
           "member delivered every packet of its groups exactly once in every run: "
           f"{all(r['exactly_once'] for r in rows)}; caches and sender buffers empty at the end: "
           f"{all(r['released'] for r in rows)}.", "",
           "| loss per copy | " + " | ".join(c[1] for c in cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for loss in LOSSES:
        rs = [r for r in rows if r["loss"] == loss]
        cells = []
        for key, _, f in cols:
            xs = [r[key] for r in rs]
            cells.append(f"{f.format(statistics.fmean(xs))} [{f.format(min(xs))} - {f.format(max(xs))}]")
        out.append(f"| {loss:.0%} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    rows = []
    for loss in LOSSES:
        for seed in SEEDS:
            r = run(loss, seed)
            print(f"loss {loss:.0%} seed {seed}: {r['packets']} packets, {r['recovered']} recovered, "
                  f"exactly once {r['exactly_once']}", file=sys.stderr)
            rows.append(r)
    a.out.mkdir(parents=True, exist_ok=True)
    with open(a.out / "runs.csv", "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(FIELDS)
        w.writerows([fmt(r[k]) for k in FIELDS] for r in rows)
    (a.out / "table.md").write_text(table(rows))
    if not all(r["exactly_once"] for r in rows):
        print("a run did not deliver every packet exactly once (runs.csv)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
