"""Drawing a plan: Graphviz DOT text (pure) and a PNG drawn with matplotlib (radial tree layout)."""
from __future__ import annotations

import math
from pathlib import Path

from orchestrator.plan import NetworkPlan
from orchestrator.units import format_rate, format_time


def _label(d) -> str:
    parts = [format_rate(d.rate_bps)]
    if d.delay_s:
        parts.append(format_time(d.delay_s))
    if d.loss:
        parts.append(f"{d.loss * 100:g}%")
    return " ".join(parts)


def to_dot(plan: NetworkPlan, title: str = "lab") -> str:
    lines = [f'graph "{title}" {{', "  node [fontsize=9];", "  edge [fontsize=7];"]
    for n in plan.nodes:
        shape, color = ("circle", "lightblue") if n.role == "member" else ("box", "lightgrey")
        lines.append(f'  "{n.name}" [shape={shape}, style=filled, fillcolor={color}, '
                     f'tooltip="{n.address}"];')
    for lk in plan.links:
        label = _label(lk.down) if lk.down == lk.up else f"v {_label(lk.down)} / ^ {_label(lk.up)}"
        lines.append(f'  "{lk.parent}" -- "{lk.child}" [label="{label}"];')
    lines.append("}")
    return "\n".join(lines) + "\n"


def radial_layout(plan: NetworkPlan) -> dict[str, tuple[float, float]]:
    """Leaves spread evenly on angles; each node at radius = depth, angle = mean of its leaves' angles."""
    leaves = [n.name for n in plan.nodes if not n.children]
    angle: dict[str, float] = {name: 2 * math.pi * i / max(1, len(leaves)) for i, name in enumerate(leaves)}
    for n in reversed(plan.nodes):      # pre-order reversed: children before parents
        if n.children:
            angle[n.name] = sum(angle[c] for c in n.children) / len(n.children)
    return {n.name: (n.depth * math.cos(angle[n.name]), n.depth * math.sin(angle[n.name])) for n in plan.nodes}


def draw_png(plan: NetworkPlan, path: Path, title: str = "lab") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pos = radial_layout(plan)
    n = len(plan.nodes)
    size = min(20, 6 + n / 60)
    fig, ax = plt.subplots(figsize=(size, size))
    for lk in plan.links:
        (x1, y1), (x2, y2) = pos[lk.parent], pos[lk.child]
        ax.plot([x1, x2], [y1, y2], color="0.6", linewidth=0.6, zorder=1)
    for role, color, marker in (("router", "0.5", "s"), ("member", "tab:blue", "o")):
        pts = [pos[x.name] for x in plan.nodes if x.role == role]
        if pts:
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=max(8, 400 / math.sqrt(n)), c=color,
                       marker=marker, label=f"{len(pts)} {role}s", zorder=2)
    if n <= 80:
        for x in plan.nodes:
            ax.annotate(x.name, pos[x.name], fontsize=7, ha="center", va="bottom", xytext=(0, 4),
                        textcoords="offset points")
    ax.set_title(f"{title}: {n} nodes, {len(plan.links)} links")
    ax.legend(loc="upper right")
    ax.set_aspect("equal")
    ax.axis("off")
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
