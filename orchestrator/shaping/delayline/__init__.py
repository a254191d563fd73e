"""The delay line: netem semantics without sch_netem, for every link direction of a lab, in ONE process.

Each shaped egress interface has iptables rules (mangle FORWARD and OUTPUT, `-o IF -j NFQUEUE --queue-num N`,
no bypass; forwarded packets bring the kernel's receive time) that hand its IPv4 packets to the daemon. One event
loop serves the NFQUEUEs of every namespace; each packet's fate (drop, or its release time) is decided by its link direction's model. A dead delay line fails
closed: the kernel drops what it held and every later packet of a shaped interface.

The parts (DELAYLINE.md has the design, the protocol and the measurements):
- `model`      the pure per-direction model: `LinkModel.admit(now, length) -> None (drop) | release time`
- `config`     what the orchestrator hands the daemon: `QueueSpec`, `render_config`, `render_rules`
- `../nfqueue` the NFQUEUE binding (namespaces, netlink socket, the one message parser, verdicts)
- `loop`       the event loop (epoll + timerfd, heap of held packets, batched verdicts)
- `control`    the control protocol (JSON lines, a handler table)
- `daemon`     setup, kernel-drop checks, stats, shutdown, `main` (`python -m orchestrator.shaping.delayline`)
- `supervisor` the orchestrator's side: `start_delayline`, `DelayLineClient`, `stop_delayline`

This package exports what the rest of the orchestrator uses.
"""
from orchestrator.shaping.delayline.config import QueueSpec, render_config, render_rules
from orchestrator.shaping.delayline.supervisor import DelayLineClient, start_delayline, stop_delayline

__all__ = ["QueueSpec", "render_config", "render_rules", "DelayLineClient", "start_delayline", "stop_delayline"]
