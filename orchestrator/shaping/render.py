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


# A root netem without a rate sends each packet at its own drawn time, so jitter reorders packets closer together
# than its range; with a rate, netem schedules each packet no earlier than the one before it (sch_netem.c,
# netem_enqueue: the last packet's time_to_send is the reference), which is the delay line's FIFO jitter. This
# nominal rate buys that order and costs 0.12 us per 1500-byte packet (a 300-packet flow 1 ms apart through 25 ms
# +- 5 ms came through with 0 inversions with it, 122 (uniform) and 129 (normal) without; the VM, 2026-11-28:
# docs/results/netem/fidelity.md).
FIFO_RATE = "100gbit"


def netem_stages(d: DirParams) -> tuple[list[str], list[str]]:
    """netem's options for one direction as two stages, (root, child). netem's `limit` counts every packet the
    qdisc holds, the ones it is delaying too, and a parent netem's count includes its child's: one netem with
    `rate`, `delay` and `limit Q` drops a burst once Q packets are on their way, however many the rate has sent
    (a queue of 10 with 300 ms at 1 Mbit/s delivered 46 of 150 packets sent at twice the rate where the delay
    line's link model delivers 81; the VM, 2026-11-28). So the root netem does the loss, delay, jitter and
    reordering with no limit, and hands each packet, when due, to a child netem that serialises at the rate
    behind a queue of `queue_pkts` packets (its count: the packets not yet serialised, the one on the wire
    included, as the link model's). For a constant delay this is the link model exactly (delaying every arrival
    by D and then serialising is serialising and then delaying by D); with jitter the packets reach the queue
    in their jittered order, which is the order they came in (FIFO_RATE). The child is empty when the root does
    it all (no rate: no queue, as the model ignores `queue_pkts` then; a rate alone: one netem). Used for live
    changes too (del + add, never `change`)."""
    first: list[str] = []
    if d.delay_s or d.jitter_s:
        first += ["delay", format_time(d.delay_s)]
        if d.jitter_s:
            first += [format_time(d.jitter_s)]
            if d.jitter_dist == "normal":
                first += ["distribution", "normal"]
            first += ["rate", FIFO_RATE]
    if d.reorder:
        first += ["reorder", _pct(d.reorder)]
    if d.gemodel:
        g = d.gemodel
        # netem gemodel p r 1-h 1-k: 1-h = loss in bad state, 1-k = loss in good state.
        first += ["loss", "gemodel", _pct(g.p), _pct(g.r), _pct(g.loss_bad), _pct(g.loss_good)]
    elif d.loss:
        first += ["loss", "random", _pct(d.loss)]
    queue = ["rate", rate_arg(d.rate_bps), "limit", str(d.queue_pkts or UNBOUNDED_QUEUE)] if d.rate_bps else []
    if not first:
        return queue or ["limit", str(UNBOUNDED_QUEUE)], []
    return first + ["limit", str(UNBOUNDED_QUEUE)], queue


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
