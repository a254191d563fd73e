"""The measured link-fidelity table of a `make test-netem` run, from the rows its tests wrote
(tests/integration/helpers.fidelity_row: one JSON object per line, in the order the checks ran).

    python benchmarks/fidelity_table.py ROWS.jsonl --out TABLE.md [--log LOG]
"""
from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path


def cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render(rows: list[dict], log: str | None = None) -> str:
    kernels = sorted({r.get("kernel", "?") for r in rows})
    passed = sum(1 for r in rows if r["pass"])
    head = [
        "# netem link fidelity, measured",
        "",
        f"Written by `make test-netem` ({datetime.date.today().isoformat()}; kernel {', '.join(kernels)}): "
        f"{len(rows)} checks, {passed} passed. One row per check, as the test judged it "
        "(tests/integration/test_netem.py, test_netem_fidelity.py; docs/netem.md explains them)."
        + (f" The run's output: [{Path(log).name}]({Path(log).name})." if log else ""),
        "",
        "| parameter | configured | measured | tolerance | pass |",
        "| --- | --- | --- | --- | --- |",
    ]
    body = [f"| {cell(r['parameter'])} | {cell(r['configured'])} | {cell(r['measured'])} | {cell(r['tolerance'])} "
            f"| {'yes' if r['pass'] else '**no**'} |" for r in rows]
    return "\n".join(head + body) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rows")
    ap.add_argument("--out", required=True)
    ap.add_argument("--log")
    a = ap.parse_args(argv)
    p = Path(a.rows)
    rows = [json.loads(x) for x in p.read_text().splitlines() if x.strip()] if p.exists() else []
    if not rows:
        print(f"{a.rows}: no rows (did the tests run?)")
        return 1
    Path(a.out).write_text(render(rows, a.log))
    print(f"{a.out}: {len(rows)} rows, {sum(1 for r in rows if r['pass'])} passed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
