"""What the orchestrator hands the delay line (pure): its queues, its config file, its iptables rules."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Sequence

from orchestrator.shaping.delayline.model import params_from_json
from orchestrator.shaping.params import DirParams

CONFIG_KEYS = {"queues", "control", "stats_file", "seed", "copy_range", "kernel_maxlen", "engine", "shards"}
_IFNAME = re.compile(r"^[A-Za-z0-9_.@:+-]{1,15}$")


@dataclass(frozen=True)
class QueueSpec:
    """One shaped link direction: the egress interface behind NFQUEUE `queue_num` in namespace file `netns`."""

    id: str
    netns: str
    queue_num: int
    params: DirParams = field(default_factory=DirParams)

    def to_json(self) -> dict:
        return {"id": self.id, "netns": self.netns, "queue_num": self.queue_num, "params": self.params.to_json()}

    @classmethod
    def from_json(cls, d: dict) -> "QueueSpec":
        unknown = set(d) - {"id", "netns", "queue_num", "params"}
        if unknown:
            raise ValueError(f"unknown queue keys {sorted(unknown)}")
        return cls(id=str(d["id"]), netns=str(d["netns"]), queue_num=int(d["queue_num"]),
                   params=params_from_json(d.get("params") or {}))


def render_config(queues: Sequence[QueueSpec], control: str, stats_file: str | None = None,
                  seed: int | None = None, engine: str | None = None, shards: int | None = None) -> dict:
    """The daemon's config file content (json.dump it). `engine`: "c", "python" or "auto" (None: the daemon's
    default, auto); `shards`: engine processes (None: the daemon's default)."""
    out = {"queues": [q.to_json() for q in queues], "control": str(control),
           "stats_file": str(stats_file) if stats_file else None, "seed": seed}
    if engine is not None:
        out["engine"] = engine
    if shards is not None:
        out["shards"] = int(shards)
    return out


def render_rules(queues: Sequence[tuple[str, int]]) -> str:
    """iptables-restore input (apply with `iptables-restore --noflush` inside the namespace) that sends every
    IPv4 packet leaving each (ifname, queue_num) to that NFQUEUE. No --queue-bypass: without a listener the
    kernel drops (fail closed). iptables only sees IPv4 (the orchestrator disables IPv6 in every namespace),
    ARP is never queued. Apply it only after the delay line printed READY (queues bound first).
    Forwarded packets are queued in FORWARD, where they still carry the kernel's receive timestamp (the delay
    line's arrival time; ip_forward_finish clears it before POSTROUTING), the namespace's own ones in OUTPUT."""
    lines = ["*mangle"] + [f"-A {chain} {_rule(i, q)}" for i, q in queues for chain in ("FORWARD", "OUTPUT")] \
        + ["COMMIT", ""]
    return "\n".join(lines)


def _rule(ifname: str, queue_num: int) -> str:
    if not _IFNAME.match(ifname):
        raise ValueError(f"bad interface name {ifname!r}")
    if not 0 <= int(queue_num) <= 65535:
        raise ValueError(f"queue number {queue_num} out of range 0..65535")
    return (f"-o {ifname} -m comment --comment delayline "
            f"-j NFQUEUE --queue-num {int(queue_num)}")
