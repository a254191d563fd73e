"""Queue drops per link direction, from the end-of-run qdisc statistics (`tc/<node>.json`) and, when the run used
the delay line, its per-direction counters (`tc/delayline.json`). Small metadata: computed on the driver.

A link direction is shaped on the egress interface of its sending end: `down` (parent → child) on the parent's
`parent_if`, `up` (child → parent) on the child's `child_if`. Its qdisc drops are the drops of that interface's
root qdisc, which counts the drops of the qdiscs below it (tbf counts its pfifo's).
The delay line's statistics are `{"queues": {"<link id>/<direction>": {overflowed, lost, cut_dropped, ...}}}`;
another shape is reported as not understood.
"""
from __future__ import annotations

from typing import Any

COLUMNS = ("link", "direction", "node", "dev", "qdisc", "packets", "bytes", "drops", "overlimits", "backlog",
           "shaper_overflowed", "shaper_lost", "shaper_cut_dropped")


def _root(qdiscs: list[dict], dev: str) -> tuple[dict | None, str]:
    on_dev = [q for q in qdiscs if q.get("dev") == dev]
    root = next((q for q in on_dev if q.get("root")), None)
    kinds = "+".join(q.get("kind", "?") for q in on_dev if q.get("parent") != "ffff:" and q.get("kind") != "ingress")
    return root, kinds


def queue_drops(plan: dict[str, Any], tc: dict[str, list[dict]], delayline: dict | None,
                warnings: list[str]) -> list[dict[str, Any]]:
    """One dict per link direction (keys COLUMNS); a missing interface or counter is None."""
    queues = None
    if delayline is not None:
        queues = delayline.get("queues") if isinstance(delayline, dict) else None
        if not isinstance(queues, dict):
            warnings.append("tc/delayline.json: format not understood (no `queues` object); shaper drops not shown")
            queues = None
    rows = []
    seen = set()
    for lk in plan.get("links", []):
        for direction, node, dev in (("down", lk["parent"], lk["parent_if"]), ("up", lk["child"], lk["child_if"])):
            root, kinds = _root(tc.get(node, []), dev)
            if node in tc and root is None:
                warnings.append(f"tc/{node}.json: no root qdisc on {dev} (link {lk['id']} {direction})")
            key = f"{lk['id']}/{direction}"
            dl = queues.get(key) if queues is not None else None
            seen.add(key)
            rows.append({
                "link": lk["id"], "direction": direction, "node": node, "dev": dev, "qdisc": kinds or None,
                **{k: (root or {}).get(k) for k in ("packets", "bytes", "drops", "overlimits", "backlog")},
                "shaper_overflowed": (dl or {}).get("overflowed"), "shaper_lost": (dl or {}).get("lost"),
                "shaper_cut_dropped": (dl or {}).get("cut_dropped"),
            })
    if queues is not None:
        unknown = sorted(set(queues) - seen)
        if unknown:
            warnings.append(f"tc/delayline.json: {len(unknown)} queue(s) name no link direction of the plan "
                            f"(e.g. {unknown[0]!r})")
    return rows


def total_drops(rows: list[dict[str, Any]]) -> int:
    """Packets dropped at queues over all link directions: qdisc drops plus delay-line overflows."""
    return sum((r["drops"] or 0) + (r["shaper_overflowed"] or 0) for r in rows)
