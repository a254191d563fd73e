"""Spreading the delay line over the machine's cores (issue 21): the daemon started by `start_delayline` becomes
a router when its config asks for more than one shard (`shards`, default: half the CPUs, never more than the
namespaces). It partitions the namespaces (each namespace's queues stay together: one NFQUEUE socket per
namespace) over K engine processes, balanced by queue count, starts each as an ordinary daemon on a config of its
own (`<control>.shard<k>.json`, control socket `<control>.<k>`, `--pdeathsig KILL`: a router killed takes its
shards with it, so a crash still fails closed) and serves the unchanged control protocol on the configured
socket: set/cut/heal/remove go to the shard owning the id, add to the shard owning the namespace (a new one to the
least loaded), ping/stats/shutdown to all, answers merged (counters summed, the hold-error histogram merged bin by
bin, so its p50/p99 are the same as one process would report). A shard that exits is fatal (`fatal`, so
`DelayLineClient.ping()` raises DelayLineDied). SIGTERM / shutdown: every shard releases what it holds and exits,
the router merges their stats files into `stats_file`, unlinks the socket and exits 0.
"""
from __future__ import annotations

import json
import math
import os
import select
import signal
import time
from typing import Sequence

from orchestrator.errors import DelayLineDied, OrchestratorError
from orchestrator.shaping import nfqueue as nfq
from orchestrator.shaping.delayline.config import QueueSpec
from orchestrator.shaping.delayline.control import ControlServer
from orchestrator.shaping.delayline.loop import HIST_BIN_S, HIST_LO_S, log
from orchestrator.shaping.delayline.supervisor import DelayLineClient, start_delayline

SUMMED = ("cpu_s", "cpu_user_s", "cpu_sys_s", "rss_bytes", "packets", "held", "unknown_queue", "verdict_errors",
          "wakeups")


def default_shards() -> int:
    """Half the CPUs we may run on (at least 1): the other half is the nodes' and the kernel's. Measured on the
    2-core VM (DELAYLINE.md): two real-time shards there starve the traffic's own processes and wake up once per
    packet crossing between them, so one process is faster."""
    return max(1, len(os.sched_getaffinity(0)) // 2)


def partition(specs: Sequence[QueueSpec], k: int) -> list[list[QueueSpec]]:
    """Namespaces (with all their queues) over k shards, largest first onto the least loaded (by queues)."""
    by_ns: dict = {}
    for s in specs:
        by_ns.setdefault(nfq.netns_key(s.netns), []).append(s)
    groups = sorted(by_ns.values(), key=len, reverse=True)
    shards: list[list[QueueSpec]] = [[] for _ in range(k)]
    for g in groups:
        min(shards, key=len).extend(g)
    return shards


class Shard:
    def __init__(self, k: int, proc, client: DelayLineClient, config_path: str, stats_file: str | None):
        self.k = k
        self.proc = proc
        self.client = client
        self.config_path = config_path
        self.stats_file = stats_file
        self.ids: set[str] = set()
        self.ns: set = set()


class ShardRouter:
    """Quacks like the daemon for ControlServer (`ep`, `handlers`, `fatal`, `stopping`)."""

    def __init__(self, config: dict, specs: list[QueueSpec], k: int, rt_priority: int):
        self.config = config
        self.control_path = config["control"]
        self.stats_file = config.get("stats_file")
        self.ep = select.epoll()
        self.handlers: dict[int, object] = {}
        self.fatal: list[str] = []
        self.stopping = False
        self.shards: list[Shard] = []
        self.owner: dict[str, Shard] = {}
        self.ns_owner: dict = {}
        self.started = time.monotonic()
        self.control = ControlServer(self, self.control_path, ROUTER_HANDLERS)
        self._start(specs, k, rt_priority)

    # ---------------------------------------------------------------- shards
    def _start(self, specs: list[QueueSpec], k: int, rt_priority: int) -> None:
        try:
            for i, part in enumerate(partition(specs, k)):
                base = f"{self.control_path}.shard{i}"
                cfg = {**{key: v for key, v in self.config.items() if key not in ("queues", "shards")},
                       "queues": [q.to_json() for q in part], "control": f"{self.control_path}.{i}",
                       "stats_file": f"{base}.stats.json" if self.stats_file else None, "shards": 1}
                with open(f"{base}.json", "w") as f:
                    json.dump(cfg, f)
                proc = start_delayline(f"{base}.json", rt_priority=rt_priority, log_path="/proc/self/fd/2",
                                       die_with_parent=True, extra_argv=["--pdeathsig", "KILL"])
                sh = Shard(i, proc, DelayLineClient(cfg["control"], timeout=30), f"{base}.json", cfg["stats_file"])
                self.shards.append(sh)
                for q in part:
                    self._own(sh, q)
                log(f"shard {i}: pid {proc.pid}, {len(part)} queues")
        except BaseException:
            self.kill_shards()
            raise

    def _own(self, sh: Shard, q: QueueSpec) -> None:
        key = nfq.netns_key(q.netns)
        sh.ids.add(q.id)
        sh.ns.add(key)
        self.owner[q.id] = sh
        self.ns_owner[key] = sh

    def check_shards(self) -> None:
        for sh in self.shards:
            rc = sh.proc.poll()
            if rc is not None:
                msg = f"delay line shard {sh.k} (pid {sh.proc.pid}) exited with status {rc}"
                if msg not in self.fatal:
                    self.fatal.append(msg)
                    log(f"FATAL {msg}")

    def call(self, sh: Shard, req: dict) -> dict:
        try:
            r = sh.client.call(req)
        except DelayLineDied as e:
            self.check_shards()
            raise OSError(f"shard {sh.k}: {e}") from None
        except OrchestratorError as e:
            raise ValueError(str(e).split(": ", 1)[-1]) from None
        for f in r.get("fatal") or []:
            if f not in self.fatal:
                self.fatal.append(f)
        return r

    def close_namespaces(self) -> None:   # a startup error: the shards go
        self.kill_shards()

    def kill_shards(self) -> None:
        for sh in self.shards:
            if sh.proc.poll() is None:
                sh.proc.kill()
                sh.proc.wait()

    def stop_shards(self) -> list[dict]:
        """Shutdown every shard (each releases what it holds), wait, return their stats files' contents."""
        for sh in self.shards:
            if sh.proc.poll() is None:
                try:
                    sh.proc.send_signal(signal.SIGTERM)
                except OSError:
                    pass
        out = []
        for sh in self.shards:
            try:
                sh.proc.wait(timeout=10)
            except Exception:  # noqa: BLE001
                sh.proc.kill()
                sh.proc.wait()
            sh.client.close()
            if sh.proc.stdout:
                sh.proc.stdout.close()
            if sh.stats_file:
                try:
                    with open(sh.stats_file) as f:
                        out.append(json.load(f))
                    os.unlink(sh.stats_file)
                except (OSError, ValueError):
                    pass
            try:
                os.unlink(sh.config_path)
            except OSError:
                pass
        return out

    # ---------------------------------------------------------------- merging answers
    def merge_stats(self, answers: list[dict]) -> dict:
        out: dict = {"queues": {}, "kernel": {}, "kernel_drops": 0}
        bins: dict[int, int] = {}
        mx, mn = -math.inf, math.inf
        for a in answers:
            out["queues"].update(a.get("queues", {}))
            out["kernel"].update(a.get("kernel", {}))
            if a.get("kernel_drops") is None:
                out["kernel_drops"] = None
            elif out["kernel_drops"] is not None:
                out["kernel_drops"] += a["kernel_drops"]
            for k in SUMMED:
                out[k] = out.get(k, 0) + (a.get(k) or 0)
            h = a.get("hold_error", {})
            for b, c in (h.get("bins") or {}).items():
                bins[int(b)] = bins.get(int(b), 0) + c
            if h.get("max_s") is not None:
                mx = max(mx, h["max_s"])
                mn = min(mn, h["min_s"])
        n = sum(bins.values())

        def q(p):
            if not n:
                return None
            acc = 0
            for i in sorted(bins):
                acc += bins[i]
                if acc >= p * n:
                    return HIST_LO_S + (i + 1) * HIST_BIN_S
            return mx
        out["hold_error"] = {"count": n, "p50_s": q(0.5), "p99_s": q(0.99), "max_s": mx if n else None,
                             "min_s": mn if n else None, "bin_s": HIST_BIN_S}
        adv = [a.get("timer_advance_s") for a in answers if a.get("timer_advance_s") is not None]
        out["timer_advance_s"] = sum(adv) / len(adv) if adv else None
        out["uptime_s"] = time.monotonic() - self.started
        out["engine"] = answers[0].get("engine") if answers else None
        out["shards"] = [{"pid": sh.proc.pid, "queues": len(sh.ids), "namespaces": len(sh.ns),
                          **{k: a.get(k) for k in ("cpu_s", "packets", "wakeups")}}
                         for sh, a in zip(self.shards, answers)]
        return out

    # ---------------------------------------------------------------- loop
    def run(self) -> None:
        next_check = 0.0
        while not self.stopping:
            try:
                events = self.ep.poll(0.2)
            except InterruptedError:
                events = []
            for fd, ev in events:
                h = self.handlers.get(fd)
                if h is not None:
                    h(ev)
            now = time.monotonic()
            if now >= next_check:
                self.check_shards()
                next_check = now + 0.2

    def shutdown(self) -> None:
        answers = self.stop_shards()
        if self.stats_file:
            merged = self.merge_stats(answers)
            merged["fatal"] = list(self.fatal)
            try:
                tmp = f"{self.stats_file}.tmp"
                with open(tmp, "w") as f:
                    json.dump(merged, f, indent=1)
                os.replace(tmp, self.stats_file)
            except OSError as e:
                log(f"cannot write stats file: {e}")
        self.control.close()


# ---------------------------------------------------------------- the control protocol, routed
def _owner(r: ShardRouter, req: dict) -> Shard:
    return r.owner[str(req["id"])]


def _fields(a: dict) -> dict:
    return {k: v for k, v in a.items() if k not in ("ok", "fatal", "error")}


def op_ping(r: ShardRouter, req: dict) -> dict:
    """Answers (ok) even when a shard is gone: its death is in `fatal`, so DelayLineClient.ping() raises
    DelayLineDied as for a dead single daemon."""
    r.check_shards()
    answers = []
    for sh in r.shards:
        try:
            answers.append(r.call(sh, {"op": "ping"}))
        except OSError as e:
            if str(e) not in r.fatal:
                r.fatal.append(str(e))
    return {"pid": os.getpid(), "queues": sum(a["queues"] for a in answers),
            "namespaces": sum(a["namespaces"] for a in answers), "shards": [sh.proc.pid for sh in r.shards]}


def op_routed(r: ShardRouter, req: dict) -> dict:
    return _fields(r.call(_owner(r, req), req))


def op_stats(r: ShardRouter, req: dict) -> dict:
    ids = req.get("ids")
    answers = []
    for sh in r.shards:
        sub = {**req, "hist": True}
        if ids is not None:
            mine = [str(i) for i in ids if r.owner.get(str(i)) is sh]
            sub["ids"] = mine
        answers.append(r.call(sh, sub))
    if ids is not None:
        unknown = [str(i) for i in ids if str(i) not in r.owner]
        if unknown:
            raise KeyError(unknown[0])
    out = r.merge_stats(answers)
    if not req.get("hist"):
        out["hold_error"].pop("bins", None)
    return out


def op_add(r: ShardRouter, req: dict) -> dict:
    specs = [QueueSpec.from_json(q) for q in req.get("queues", [])]
    for s in specs:
        if s.id in r.owner:
            raise ValueError(f"duplicate queue id {s.id!r}")
    plan: dict[int, list[QueueSpec]] = {}
    placed: dict = {}
    for s in specs:
        key = nfq.netns_key(s.netns)
        sh = r.ns_owner.get(key) or placed.get(key)
        if sh is None:
            sh = min(r.shards, key=lambda x: len(x.ids) + len(plan.get(x.k, [])))
            placed[key] = sh
        plan.setdefault(sh.k, []).append(s)
    added = []
    for k, qs in plan.items():
        sh = r.shards[k]
        a = r.call(sh, {"op": "add", "queues": [q.to_json() for q in qs]})
        for q in qs:
            r._own(sh, q)
        added += a.get("added", [])
    return {"added": added}


def op_remove(r: ShardRouter, req: dict) -> dict:
    ids = [str(i) for i in req.get("ids", [])]
    for i in ids:
        if i not in r.owner:
            raise KeyError(i)
    for sh in r.shards:
        mine = [i for i in ids if r.owner[i] is sh]
        if mine:
            r.call(sh, {"op": "remove", "ids": mine})
            for i in mine:
                sh.ids.discard(i)
                del r.owner[i]
    return {"removed": ids}


def op_shutdown(r: ShardRouter, req: dict) -> dict:
    r.stopping = True
    return {}


ROUTER_HANDLERS = {"ping": op_ping, "set": op_routed, "cut": op_routed, "heal": op_routed, "stats": op_stats,
                   "add": op_add, "remove": op_remove, "shutdown": op_shutdown}
