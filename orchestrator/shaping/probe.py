"""Kernel capability probe: what this kernel can shape with, tried for real in a throwaway namespace.

Modules cannot be relied on to load, and `tc` only tells by failing, so the probe adds each qdisc / rule to a
veth interface in a private namespace and removes the namespace (netem as the shapers render it: a root netem with
a netem child). The result is cached per boot.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

from orchestrator.errors import ShapingError, SpecError
from orchestrator.shaping import shapers
from orchestrator.shaping.params import DirParams
from orchestrator.shaping.render import FIFO_RATE

SHAPERS = ("auto", *shapers.SHAPERS)


def check_shaper(wanted: str) -> str:
    """An input check (exit 2) for --shaper, before anything is probed or built."""
    if wanted not in SHAPERS:
        raise SpecError(f"--shaper: unknown shaper {wanted!r} ({', '.join(SHAPERS)})")
    return wanted


@dataclass(frozen=True)
class Capabilities:
    kernel: str
    netem: bool
    tbf: bool
    nfqueue: bool
    statistic: bool
    notes: tuple[str, ...] = ()
    netem_dists: tuple[str, ...] = ("normal",)    # jitter distributions netem took (tc's tables, e.g. normal.dist)

    def unrenderable(self, shaper: str, plan, live: tuple[tuple[str, DirParams], ...] = ()) -> list[str]:
        """What the plan's links, and the parameters `live` link changes will set ((where, parameters) pairs: the
        schedule's `link` actions), ask that `shaper` cannot do on this machine, one line per link direction and
        parameter (pure). netem's jitter distributions other than uniform need tc's table file; a machine whose
        `tc` lacks it fails `distribution normal` (the probe tried it)."""
        if shaper != "netem":
            return []
        wanted = [(f"link {link.id} ({direction})", d) for link in plan.links
                  for direction, d in (("down", link.down), ("up", link.up))] + list(live)
        out = []
        for where, d in wanted:
            if d.jitter_s and d.jitter_dist != "uniform" and d.jitter_dist not in self.netem_dists:
                out.append(f"{where}: jitter distribution {d.jitter_dist}: netem on this machine cannot draw it (tc "
                           f"has no {d.jitter_dist} table: "
                           f"{next((n for n in self.notes if 'distribution' in n), 'probe')}); use uniform "
                           f"jitter or --shaper delayline")
        return out

    def to_json(self) -> dict:
        return asdict(self)

    def choose(self, wanted: str) -> str:
        """Resolve --shaper auto|netem|delayline|tbf against what the kernel has."""
        if wanted == "auto":
            for s in shapers.SHAPERS.values():          # in the order of preference
                if getattr(self, s.capability):
                    return s.name
            raise ShapingError("this kernel has none of netem, NFQUEUE or tbf: links cannot be shaped")
        check_shaper(wanted)
        s = shapers.get(wanted)
        if not getattr(self, s.capability):
            raise ShapingError(f"--shaper {wanted}: this kernel lacks {s.kernel_needs} "
                               f"(probe: {', '.join(self.notes)})")
        return wanted


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


def probe_kernel(cache_dir: Path | None = None) -> Capabilities:
    cache = cache_dir / f"probe-{_boot_id()}.json" if cache_dir else None
    if cache and cache.exists():
        d = json.loads(cache.read_text())
        if set(d) == set(Capabilities.__dataclass_fields__):     # an older probe's record: probe again
            return Capabilities(**{**d, "notes": tuple(d["notes"]), "netem_dists": tuple(d["netem_dists"])})
    caps = _probe()
    if cache:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_name(f"{cache.name}.{os.getpid()}.tmp")   # labs probing at once never read half a file
        tmp.write_text(json.dumps(caps.to_json()))
        os.replace(tmp, cache)
    return caps


def _probe() -> Capabilities:
    if os.geteuid() != 0:
        raise ShapingError("probing the kernel's shaping needs root")
    for tool in ("ip", "tc"):
        if not shutil.which(tool):
            raise ShapingError(f"`{tool}` is not installed (run `make setup`)")
    ns = f"orchprobe{os.getpid()}"
    notes: list[str] = []

    def run(argv: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run(argv, capture_output=True, text=True)

    def tc_ok(kind: list[str], label: str, child: list[str] | None = None) -> bool:
        r = run(["tc", "-n", ns, "qdisc", "add", "dev", "d0", "root", "handle", "1:", *kind])
        if r.returncode == 0 and child:
            r = run(["tc", "-n", ns, "qdisc", "add", "dev", "d0", "parent", "1:1", "handle", "10:", *child])
            label += " (a second netem as the root netem's child: render.netem_stages)"
        if r.returncode == 0:
            run(["tc", "-n", ns, "qdisc", "del", "dev", "d0", "root"])
            return True
        run(["tc", "-n", ns, "qdisc", "del", "dev", "d0", "root"])
        notes.append(f"{label}: {r.stderr.strip() or r.returncode}")
        return False

    def ipt_ok(rule: list[str], label: str) -> bool:
        if not shutil.which("iptables"):
            notes.append(f"{label}: iptables not installed")
            return False
        r = run(["ip", "netns", "exec", ns, "iptables", "-w", "-t", "mangle", "-A", "POSTROUTING", "-o", "d0",
                 *rule])
        if r.returncode != 0:
            notes.append(f"{label}: {r.stderr.strip() or r.returncode}")
        return r.returncode == 0

    r = run(["ip", "netns", "add", ns])
    if r.returncode != 0:
        raise ShapingError(f"cannot create a probe namespace: {r.stderr.strip()}")
    try:
        # A veth pair, as the links use (this kernel may have no `dummy` module).
        r = run(["ip", "-n", ns, "link", "add", "d0", "type", "veth", "peer", "name", "d1"])
        if r.returncode != 0:
            raise ShapingError(f"cannot create a veth pair for the probe: {r.stderr.strip()}")
        # the two stages as rendered, the root's jitter with its nominal rate (render.FIFO_RATE)
        netem = tc_ok(["netem", "delay", "1ms", "1ms", "rate", FIFO_RATE, "limit", "1000"], "netem",
                      ["netem", "rate", "1mbit", "limit", "10"])
        dists = tuple(x for x in ("normal",) if netem and tc_ok(["netem", "delay", "10ms", "1ms", "distribution", x],
                                                                 f"netem distribution {x}"))
        tbf = tc_ok(["tbf", "rate", "1mbit", "burst", "1600", "latency", "50ms"], "tbf")
        nfqueue = ipt_ok(["-j", "NFQUEUE", "--queue-num", "0"], "NFQUEUE")
        statistic = ipt_ok(["-m", "statistic", "--mode", "random", "--probability", "0.5", "-j", "DROP"],
                           "statistic")
    finally:
        run(["ip", "netns", "del", ns])
    return Capabilities(kernel=os.uname().release, netem=netem, tbf=tbf, nfqueue=nfqueue, statistic=statistic,
                        notes=tuple(notes), netem_dists=dists)
