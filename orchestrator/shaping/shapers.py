"""Shapers as objects (Mininet's `TCIntf`, Jepsen's `Net`): `Netem`, `Tbf`, `DelayLine`, one interface
(docs/architecture.md §3):

    render    `tc_lines(dev, d)`, `node_rules(egress)` (iptables-restore input), `host_tc_ops(d)`,
              `host_loss_rule(d, lab)` — pure
    fidelity  `fidelity(d)`: what each parameter of a link direction really gets; `emulates_serialisation`
    apply     `apply(ns, egress)`: a node's egress shaping in its namespace (backends call it in `up`)
    live      `set_link(ns, dev, key, params, was_cut, egress_eff)`: set, cut (params None) and heal one direction
    daemon    `start(plan, state, ...)`, `stop(state)`, `check(state)`, `counters(state)`: the delay line's
              userspace daemon; nothing for the kernel's qdiscs

`get(name)` is the one place a shaper's name is looked at; everything else asks the object. The delay line's
own names (`render_rules`, `QueueSpec`, `DelayLineClient`, ...) stay in `orchestrator.shaping.delayline`.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from orchestrator.shaping.params import DirParams
from orchestrator.shaping.render import (UNBOUNDED_QUEUE, Fidelity, iptables_restore_input, netem_stages,
                                         rate_arg, tbf_burst_bytes)

# A host's experiment egress (hosts backend): class 1:2 of an htb root, everything else unshaped in 1:1.
HOST_UNSHAPED_RATE = "10gbit"


class Shaper(ABC):
    name: ClassVar[str]
    emulates_serialisation: ClassVar[bool] = True     # per-packet serialisation at the link rate
    userspace: ClassVar[bool] = False                  # a daemon of ours queues the packets (counters, check)
    on_hosts: ClassVar[bool] = False                   # usable by the hosts backend (its playbooks apply it)
    capability: ClassVar[str]                          # the kernel probe's field that says it can run here
    kernel_needs: ClassVar[str]                        # ... in words

    # --- render (pure) ----------------------------------------------------------------------------------------
    @abstractmethod
    def tc_lines(self, dev: str, d: DirParams) -> list[str]:
        """`tc -batch` lines (without `tc`) shaping one egress."""

    def iptables_lines(self, dev: str, d: DirParams) -> list[str]:
        """Mangle-table POSTROUTING rules for one egress."""
        return []

    def node_rules(self, egress: list[tuple[str, DirParams]]) -> str | None:
        """iptables-restore input for a node's egresses, or None when there is nothing to add."""
        rules = [r for dev, d in egress for r in self.iptables_lines(dev, d)]
        return iptables_restore_input(rules) if rules else None

    @abstractmethod
    def fidelity(self, d: DirParams) -> Fidelity:
        """What each parameter of `d` really gets from this shaper."""

    def host_tc_ops(self, d: DirParams, port: int) -> list[dict]:
        raise ValueError(f"hosts: shaper {self.name!r} is not available on real hosts (netem or tbf)")

    def host_loss_rule(self, d: DirParams, lab: str, port: int) -> list[str]:
        return []

    def _host_ops(self, d: DirParams, port: int, leaf: list[dict]) -> list[dict]:
        return [
            {"obj": "qdisc", "args": ["root", "handle", "1:", "htb", "default", "1"]},
            {"obj": "class", "args": ["parent", "1:", "classid", "1:1", "htb", "rate", HOST_UNSHAPED_RATE,
                                      "quantum", "60000"]},
            *leaf,
            {"obj": "filter", "args": ["parent", "1:", "protocol", "ip", "prio", "1", "u32",
                                       "match", "ip", "protocol", "17", "0xff",
                                       "match", "ip", "sport", str(port), "0xffff", "flowid", "1:2"]},
        ]

    # --- on a lab (side effects through the namespace helpers the backend passes) -----------------------------
    def apply(self, netns, ns: str, egress: list[tuple[str, DirParams]], queue_rules: str | None = None) -> None:
        """Shape a node's egresses in namespace `ns` (at `up`)."""
        netns.ip_batch([x for dev, d in egress for x in self.tc_lines(dev, d)], ns, tool="tc")
        rules = queue_rules or self.node_rules(egress)
        if rules:
            netns.iptables_restore(ns, rules)

    def set_link(self, netns, ns: str, dev: str, params: DirParams | None,
                 effective: list[tuple[str, DirParams | None]], client=None, key: str = "",
                 was_cut: bool = False) -> None:
        """Set one egress live (`params`), or cut it (`None`); `effective`: every egress of the node with its
        parameters now (None: cut), for the node's whole mangle table. del + add, never `tc change` (on kernel
        6.1 `change` keeps an omitted rate/reorder of the old qdisc)."""
        netns.ip_batch([f"qdisc del dev {dev} root"], ns, tool="tc", force=True)
        netns.ip_batch(self.tc_lines(dev, params or DirParams()), ns, tool="tc")
        rules = []
        for d, eff in effective:
            rules += [f"-A POSTROUTING -o {d} -j DROP"] if eff is None else self.iptables_lines(d, eff)
        netns.run_checked(["ip", "netns", "exec", ns, "iptables-restore", "-w"],
                          stdin=iptables_restore_input(rules), what=f"iptables-restore in {ns}")

    def counters(self, client) -> dict | None:
        """Per-link-direction counters, when the shaper keeps any."""
        return None


class Netem(Shaper):
    name = "netem"
    on_hosts = True
    capability, kernel_needs = "netem", "sch_netem"

    def tc_lines(self, dev: str, d: DirParams) -> list[str]:
        """The root netem (loss, delay, jitter, reordering) and, when the direction has a rate, its child (the
        rate and the queue): render.netem_stages (netem's limit counts delayed packets)."""
        if d.is_null():
            return []
        first, second = netem_stages(d)
        lines = [" ".join(["qdisc", "add", "dev", dev, "root", "handle", "1:", "netem", *first])]
        if second:
            lines.append(" ".join(["qdisc", "add", "dev", dev, "parent", "1:1", "handle", "10:", "netem", *second]))
        return lines

    def fidelity(self, d: DirParams) -> Fidelity:
        return _full("netem qdisc", d)

    def host_tc_ops(self, d: DirParams, port: int) -> list[dict]:
        if d.is_null():
            return []
        return self._host_ops(d, port, [
            {"obj": "class", "args": ["parent", "1:", "classid", "1:2", "htb", "rate", HOST_UNSHAPED_RATE,
                                      "quantum", "60000"]},
            *[{"obj": "qdisc", "args": [*where, "netem", *stage]}
              for where, stage in zip((["parent", "1:2", "handle", "20:"], ["parent", "20:1", "handle", "21:"]),
                                      netem_stages(d)) if stage]])


class Tbf(Shaper):
    """tbf rate + pfifo limit, loss by iptables `statistic`; delay and jitter are NOT emulated."""

    name = "tbf"
    emulates_serialisation = False
    on_hosts = True
    capability, kernel_needs = "tbf", "sch_tbf"

    def tc_lines(self, dev: str, d: DirParams) -> list[str]:
        if d.is_null():
            return []
        lines = []
        limit = d.queue_pkts or UNBOUNDED_QUEUE
        if d.rate_bps:
            # latency is huge on purpose: the pfifo child, not tbf, bounds the queue (in packets, as specified).
            lines.append(f"qdisc add dev {dev} root handle 1: tbf rate {rate_arg(d.rate_bps)} "
                         f"burst {tbf_burst_bytes(d.rate_bps)} latency 60s")
            lines.append(f"qdisc add dev {dev} parent 1:1 handle 10: pfifo limit {limit}")
        elif d.queue_pkts:
            lines.append(f"qdisc add dev {dev} root handle 1: pfifo limit {limit}")
        return lines

    def iptables_lines(self, dev: str, d: DirParams) -> list[str]:
        if d.loss:
            return [f"-A POSTROUTING -o {dev} -m statistic --mode random --probability {d.loss:.8f} -j DROP"]
        return []

    def fidelity(self, d: DirParams) -> Fidelity:
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

    def host_tc_ops(self, d: DirParams, port: int) -> list[dict]:
        if d.is_null() or (not d.rate_bps and not d.queue_pkts):
            return []
        if d.rate_bps:
            burst, rate = str(tbf_burst_bytes(d.rate_bps)), rate_arg(d.rate_bps)
            cls = {"obj": "class", "args": ["parent", "1:", "classid", "1:2", "htb", "rate", rate, "ceil", rate,
                                            "burst", burst, "cburst", burst, "quantum", "1514"]}
        else:
            cls = {"obj": "class", "args": ["parent", "1:", "classid", "1:2", "htb", "rate", HOST_UNSHAPED_RATE,
                                            "quantum", "60000"]}
        return self._host_ops(d, port, [cls, {"obj": "qdisc", "args": ["parent", "1:2", "handle", "20:", "pfifo",
                                                                       "limit", str(d.queue_pkts or UNBOUNDED_QUEUE)]}])

    def host_loss_rule(self, d: DirParams, lab: str, port: int) -> list[str]:
        if not d.loss or d.gemodel:
            return []
        return ["-p", "udp", "--sport", str(port), "-m", "statistic", "--mode", "random",
                "--probability", f"{d.loss:.8f}", "-m", "comment", "--comment", f"gossip-testbed lab {lab}",
                "-j", "DROP"]


class DelayLine(Shaper):
    """The orchestrator's NFQUEUE daemon (orchestrator.shaping.delayline): serialisation at the link rate, delay,
    jitter, loss, queue limit. Nothing in tc; the NFQUEUE rules send each shaped egress to its queue."""

    name = "delayline"
    userspace = True
    capability, kernel_needs = "nfqueue", "the iptables NFQUEUE target"

    def tc_lines(self, dev: str, d: DirParams) -> list[str]:
        return []   # the delay line queues in userspace; nothing in tc

    def node_rules(self, egress: list[tuple[str, DirParams]]) -> str | None:
        from orchestrator.shaping import delayline

        queues = [(dev, num) for num, (dev, d) in enumerate(egress) if not d.is_null()]
        return delayline.render_rules(queues) if queues else None

    def fidelity(self, d: DirParams) -> Fidelity:
        return _full("userspace delay line", d)

    def apply(self, netns, ns: str, egress: list[tuple[str, DirParams]], queue_rules: str | None = None) -> None:
        # One packet per wire packet: no segmentation offloads on shaped interfaces (the kernel also segments GSO
        # packets before queueing them to us; this keeps GRO from merging them again).
        netns.disable_offloads(ns, [dev for dev, d in egress if not d.is_null()])
        super().apply(netns, ns, egress, queue_rules)

    def set_link(self, netns, ns: str, dev: str, params: DirParams | None,
                 effective: list[tuple[str, DirParams | None]], client=None, key: str = "",
                 was_cut: bool = False) -> None:
        # Live, packets in flight keep their schedule; a cut also drops what the direction holds.
        if params is None:
            client.cut(key)
            return
        if was_cut:
            client.heal(key)
        client.set(key, params)

    def counters(self, client) -> dict | None:
        return client.stats()


def _full(how: str, d: DirParams) -> Fidelity:
    return Fidelity(rate=f"emulated ({how}, per-packet serialisation)", delay=f"emulated ({how})",
                    jitter=f"emulated ({how}, {d.jitter_dist})",
                    loss=f"emulated ({how}{', Gilbert-Elliott' if d.gemodel else ''})",
                    queue=f"emulated ({how} limit)")


SHAPERS: dict[str, Shaper] = {s.name: s for s in (Netem(), DelayLine(), Tbf())}   # auto's order of preference


def parameters(plan, shaper: str) -> dict[str, dict[str, int]]:
    """What each link parameter of `plan` really gets with `shaper`: {parameter: {how: number of link directions}}.
    Pure (the probe records it; `status` shows it)."""
    out: dict[str, dict[str, int]] = {}
    s = get(shaper)
    for link in plan.links:
        for d in (link.down, link.up):
            for param, how in s.fidelity(d).__dict__.items():
                out.setdefault(param, {})
                out[param][how] = out[param].get(how, 0) + 1
    return out


def get(name: str) -> Shaper:
    try:
        return SHAPERS[name]
    except KeyError:
        raise ValueError(f"unknown shaper {name!r} (one of {', '.join(SHAPERS)})") from None
