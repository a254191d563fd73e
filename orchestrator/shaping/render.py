"""Rendering of one link direction (an egress interface) into tc / iptables input. Pure: no side effects.

Three shapers realise a `DirParams` (docs/architecture.md §3):
- `netem`: one netem qdisc per egress: delay, jitter, loss (or Gilbert-Elliott), rate and limit.
- `delayline`: iptables NFQUEUE rules (`delayline.render_rules`); the orchestrator's delay-line process does
  the rest (see delayline.py).
- `tbf`: tbf rate + pfifo limit, loss by iptables `statistic`; delay and jitter are NOT emulated.

`tc_lines` returns lines for `tc -batch` (without the leading `tc`); `iptables_lines` returns rule lines for
the mangle table of `iptables-restore --noflush`. `fidelity` says what each parameter really gets.
"""
from __future__ import annotations

from dataclasses import dataclass

from orchestrator.shaping.params import DirParams
from orchestrator.units import format_time

SHAPERS = ("netem", "delayline", "tbf")

# netem's default limit is 1000 packets; "unbounded" queues (the GSGC paper's simulation I) get a large one.
UNBOUNDED_QUEUE = 100_000


def _pct(p: float) -> str:
    return f"{p * 100:.6g}%"


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
        args += ["rate", f"{d.rate_bps}bit"]
    args += ["limit", str(d.queue_pkts or UNBOUNDED_QUEUE)]
    return args


def tbf_burst_bytes(rate_bps: int) -> int:
    # At least one full-size frame, and at least what the rate sends in one 10 ms kernel tick.
    return max(1600, rate_bps // 8 // 100)


def tc_lines(shaper: str, dev: str, d: DirParams) -> list[str]:
    if d.is_null():
        return []
    if shaper == "netem":
        return [" ".join(["qdisc", "add", "dev", dev, "root", "handle", "1:", "netem", *netem_args(d)])]
    if shaper == "tbf":
        lines = []
        limit = d.queue_pkts or UNBOUNDED_QUEUE
        if d.rate_bps:
            # latency is huge on purpose: the pfifo child, not tbf, bounds the queue (in packets, as specified).
            lines.append(f"qdisc add dev {dev} root handle 1: tbf rate {d.rate_bps}bit "
                         f"burst {tbf_burst_bytes(d.rate_bps)} latency 60s")
            lines.append(f"qdisc add dev {dev} parent 1:1 handle 10: pfifo limit {limit}")
        elif d.queue_pkts:
            lines.append(f"qdisc add dev {dev} root handle 1: pfifo limit {limit}")
        return lines
    if shaper == "delayline":
        return []  # the delay line queues in userspace; nothing in tc
    raise ValueError(f"unknown shaper {shaper!r}")


def tc_clear_lines(dev: str) -> list[str]:
    return [f"qdisc del dev {dev} root"]


def iptables_lines(shaper: str, dev: str, d: DirParams) -> list[str]:
    """Mangle-table POSTROUTING rules for one egress: tbf's random loss (iptables `statistic`). The delay
    line's NFQUEUE rules are rendered by `delayline.render_rules`."""
    if shaper == "tbf" and d.loss:
        return [f"-A POSTROUTING -o {dev} -m statistic --mode random --probability {d.loss:.8f} -j DROP"]
    return []


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


def fidelity(shaper: str, d: DirParams) -> Fidelity:
    if shaper in ("netem", "delayline"):
        how = "netem qdisc" if shaper == "netem" else "userspace delay line"
        return Fidelity(rate=f"emulated ({how}, per-packet serialisation)", delay=f"emulated ({how})",
                        jitter=f"emulated ({how}, {d.jitter_dist})",
                        loss=f"emulated ({how}{', Gilbert-Elliott' if d.gemodel else ''})",
                        queue=f"emulated ({how} limit)")
    if shaper == "tbf":
        no_delay = "NOT emulated (tbf cannot delay; kernel has no netem)"
        return Fidelity(
            rate="approximate (tbf token bucket: an idle link lets a burst through at once, not per-packet "
                 "serialisation)",
            delay=no_delay if d.delay_s else "emulated (none configured)",
            jitter=no_delay if d.jitter_s else "emulated (none configured)",
            loss=("NOT emulated (bursty Gilbert-Elliott loss needs netem or the delay line)" if d.gemodel
                  else "emulated (iptables statistic)"),
            queue="emulated (pfifo limit)",
        )
    raise ValueError(f"unknown shaper {shaper!r}")
