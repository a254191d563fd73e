"""Which receipts a QSM run had not delivered when it ended, and when their packets were sent: tells a packet
still being recovered at the run's end (censored) from one lost for good.

    .venv/bin/python -m experiments.qsm_undelivered RUN_DIR [...]

Per run: packets sent, receipts missing (member, seq), the send times of their packets (seconds from t0, virtual),
the last send and the run's end. One line per run, then the first 10 missing receipts. Reads the event logs and
the groups of the run's QSM section (every member of a packet's group but its sender is expected)."""
from __future__ import annotations

import sys
from pathlib import Path

from analysis.protocols.qsm import group_members
from analysis.rundir import load


def undelivered(run_dir: Path) -> str:
    run = load(run_dir)
    ids = {m.name: m.id for m in run.members}
    groups = group_members(run.params, ids)
    sent: dict[tuple[str, int], tuple[float, str]] = {}
    got = set()
    for e in run.events:
        if e.get("event") == "data_sent":
            sent[(e["node"], int(e["seq"]))] = (e["ts"] - run.t0, e.get("group_name"))
        elif e.get("event") == "data_received":
            got.add((e["node"], int(e["origin"]), int(e["seq"])))
    missing = sorted((t, m, o, s) for (o, s), (t, g) in sent.items() for m in groups.get(g, ())
                     if m != o and (m, ids[o], s) not in got)
    last = max((t for t, _ in sent.values()), default=None)
    end = run.end - run.t0 if run.end is not None else None
    head = (f"{run_dir.name}: {len(sent)} packets, {len(missing)} receipts missing"
            + (f", their packets sent {missing[0][0]:.2f}-{missing[-1][0]:.2f} s" if missing else "")
            + (f"; last send {last:.2f} s" if last is not None else "") + (f", run end {end:.2f} s" if end else ""))
    rows = [f"  {m} missing {o} seq {s} (sent {t:.2f} s)" for t, m, o, s in missing[:10]]
    return "\n".join([head, *rows])


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    for a in args:
        print(undelivered(Path(a)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
