"""Pieces of tc / iptables input the shapers share (netem's options, tbf's burst, the mangle-table wrapper) and
the `Fidelity` record. Pure. The shapers themselves — Netem, Tbf, DelayLine, one interface — are
`orchestrator.shaping.shapers` (docs/architecture.md §3).
"""
from __future__ import annotations

from dataclasses import dataclass

from orchestrator.shaping.params import DirParams
from orchestrator.units import format_time

# netem's default limit is 1000 packets; "unbounded" queues (the GSGC paper's simulation I) get a large one.
UNBOUNDED_QUEUE = 100_000


def _pct(p: float) -> str:
    return f"{p * 100:.6g}%"


def rate_arg(rate_bps: float) -> str:
    """A rate for tc: whole bits/s as they are; a dilated (fractional) rate to 6 significant digits. tc keeps
    bytes/s as an integer, so a fractional rate is truncated by < 1 byte/s (docs/virtual-time.md)."""
    return f"{int(rate_bps)}bit" if float(rate_bps).is_integer() else f"{rate_bps:.6g}bit"


def netem_args(d: DirParams) -> list[str]:
    """netem's options for one direction (also used for live changes: del + add, never `change`)."""
    args: list[str] = []
    if d.delay_s or d.jitter_s:
        args += ["delay", format_time(d.delay_s)]
        if d.jitter_s:
            args += [format_time(d.jitter_s)]
            if d.jitter_dist == "normal":
                args += ["distribution", "normal"]
    if d.reorder:
        args += ["reorder", _pct(d.reorder)]
    if d.gemodel:
        g = d.gemodel
        # netem gemodel p r 1-h 1-k: 1-h = loss in bad state, 1-k = loss in good state.
        args += ["loss", "gemodel", _pct(g.p), _pct(g.r), _pct(g.loss_bad), _pct(g.loss_good)]
    elif d.loss:
        args += ["loss", "random", _pct(d.loss)]
    if d.rate_bps:
        args += ["rate", rate_arg(d.rate_bps)]
    args += ["limit", str(d.queue_pkts or UNBOUNDED_QUEUE)]
    return args


def tbf_burst_bytes(rate_bps: float) -> int:
    # At least one full-size frame, and at least what the rate sends in one 10 ms kernel tick.
    return max(1600, int(rate_bps) // 8 // 100)


def iptables_restore_input(rules: list[str]) -> str:
    return "*mangle\n" + "".join(r + "\n" for r in rules) + "COMMIT\n"


@dataclass(frozen=True)
class Fidelity:
    """What one direction really gets from a shaper: each parameter is 'emulated', 'not emulated' or a note."""

    rate: str
    delay: str
    jitter: str
    loss: str
    queue: str

    def lost(self) -> list[str]:
        return [k for k, v in self.__dict__.items() if v.startswith("NOT")]
