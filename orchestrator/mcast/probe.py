"""`orchestrator probe LAB --group NAME`: does a group work on the running lab? One sender streams `count`
datagrams to the group; every other member must receive each exactly once, each packet's one-way delay must match
the configured path (Σ delay + serialisation of its size per hop, the unicast probe's formula one way), and every
link direction next to the tree must carry exactly one copy per packet where the tree crosses it away from the
sender, none elsewhere (egress captures, `tcpdump -Q out`: what the link really transmitted, after the shaper).
Delivery and copies decide `ok`; delays beyond the unicast probe's tolerance are `warnings` (on a loaded 2-core
machine many receivers waking per packet add scheduling delay that is not the network's).

The planning parts (`expected_delays`, `count_frames`, `judge`) are pure.
"""
from __future__ import annotations

import json
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from orchestrator.errors import OrchestratorError, SpecError
from orchestrator.mcast.tree import Group, expected_copies, member_endpoints
from orchestrator.plan import NetworkPlan

TOOL = [sys.executable, "-m", "orchestrator.mcast.mcprobe"]
IP_UDP = 28
DELAY_TOLERANCE = 0.03          # relative, as the unicast probe's RTT check
DELAY_FLOOR_MS = 1.0            # absolute slack for tiny delays (process wake-ups)
MAX_CAPTURES = 400              # link-direction captures at most (a large tree: only next to the group's tree)
AT_ONCE = 8                     # processes started together: on a lab over several machines each is an SSH
                                # connection, and sshd drops unauthenticated ones beyond MaxStartups (10 by default)


def group_of(plan: NetworkPlan, name: str) -> Group:
    for g in plan.groups:
        if g.name == name:
            return g
    raise SpecError(f"--group: the lab has no multicast group {name!r} "
                    f"({', '.join(g.name for g in plan.groups) or 'it has none'})")


def tree_path(plan: NetworkPlan, group: Group, a: str, b: str) -> list[str]:
    """Nodes from a to b on the (tree) topology."""
    from orchestrator.plan import path

    return path(plan, a, b)


def expected_delays(plan: NetworkPlan, group: Group, sender: str, size: int) -> dict[str, tuple[int, float]]:
    """(hops, one-way delay in s) from `sender` to every other member for a `size`-byte UDP payload (pure)."""
    out = {}
    for m in group.members:
        if m == sender:
            continue
        hops = tree_path(plan, group, sender, m)
        t = 0.0
        for a, b in zip(hops, hops[1:]):
            lk = plan.link_of(a, b)
            d = lk.down if lk.parent == a else lk.up
            t += d.delay_s + d.serialisation_s(size + IP_UDP)
        out[m] = (len(hops) - 1, t)
    return out


def default_gap(plan: NetworkPlan, group: Group, size: int) -> float:
    """Spacing that no tree link's serialisation queues up (1.5 x the slowest), at least 5 ms."""
    worst = 0.0
    for lid in group.links:
        lk = plan.link_of(*lid.split("-"))
        worst = max(worst, lk.down.serialisation_s(size + IP_UDP), lk.up.serialisation_s(size + IP_UDP))
    return max(0.005, 1.5 * worst)


def capture_points(plan: NetworkPlan, group: Group) -> list[tuple[str, str, str]]:
    """(direction id, node, egress interface) of every link direction touching the group's tree."""
    on = set(group.nodes)
    out = []
    for lk in plan.links:
        if lk.parent in on or lk.child in on:
            out += [(f"{lk.id}/down", lk.parent, lk.parent_if), (f"{lk.id}/up", lk.child, lk.child_if)]
    return out[:MAX_CAPTURES]


def count_frames(path: str | Path) -> int:
    """Records in a classic pcap file (what tcpdump -w writes)."""
    data = Path(path).read_bytes()
    if len(data) < 24:
        return 0
    order = "<" if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    n, off = 0, 24
    while off + 16 <= len(data):
        caplen = struct.unpack_from(order + "I", data, off + 8)[0]
        off += 16 + caplen
        n += 1
    return n


def lower_quartile(samples: list[float]) -> float:
    """The lower quartile of delays measured through a lab (the sample at index (n - 1) // 4 in order): a busy
    machine only adds to a sample, so this quartile moves with the link's delay, not with the machine's stretch,
    until the stretch holds most samples (tests/integration/helpers.typical judges with it too)."""
    return sorted(samples)[(len(samples) - 1) // 4]


def judge(plan: NetworkPlan, group: Group, sender: str, count: int, size: int, received: dict[str, dict],
          links: dict[str, int] | None) -> dict:
    """The probe's verdict from what the receivers and the captures saw (pure)."""
    problems, warnings = [], []   # warnings: delays off by more than the unicast probe's tolerance
    expect = expected_delays(plan, group, sender, size)
    receivers = {}
    for m, (hops, want_s) in expect.items():
        got = received.get(m)
        if got is None:
            problems.append(f"{m}: no answer from its receiver")
            continue
        copies = {int(k): v for k, v in got["copies"].items()}
        missing = count - len([k for k in copies if 0 <= k < count])
        dups = sum(v - 1 for v in copies.values() if v > 1)
        med = statistics.median(got["delay_s"]) * 1000 if got["delay_s"] else None
        q1 = lower_quartile(got["delay_s"]) * 1000 if got["delay_s"] else None
        want = want_s * 1000
        err = None if med is None else med - want
        receivers[m] = {"hops": hops, "distinct": len(copies), "duplicates": dups, "missing": missing,
                        "median_delay_ms": med, "lower_quartile_delay_ms": q1,
                        "expected_delay_ms": want, "error_ms": err}
        if missing or dups:
            problems.append(f"{m}: {missing} of {count} missing, {dups} duplicates")
        if err is not None and abs(err) > max(DELAY_FLOOR_MS, DELAY_TOLERANCE * want):
            warnings.append(f"{m}: one-way delay {med:.2f} ms, expected {want:.2f} ms over {hops} hops")
    link_report = None
    if links is not None:
        want_copies = {k: v * count for k, v in expected_copies(plan, group, sender).items()}
        link_report = {}
        for d, n in sorted(links.items()):
            link_report[d] = {"copies": n, "expected": want_copies.get(d, 0)}
            if n != want_copies.get(d, 0):
                problems.append(f"link {d}: {n} copies, expected {want_copies.get(d, 0)}")
    errs = [abs(r["error_ms"]) for r in receivers.values() if r["error_ms"] is not None]
    return {"group": group.name, "address": group.address, "sender": sender, "count": count, "size": size,
            "tree_nodes": len(group.nodes), "tree_links": len(group.links), "receivers": receivers,
            "links": link_report, "max_abs_delay_error_ms": max(errs) if errs else None,
            "ok": not problems, "problems": problems, "warnings": warnings}


def _chunks(xs: list, n: int = AT_ONCE) -> list[list]:
    return [xs[k:k + n] for k in range(0, len(xs), n)]


def _interrupt(popen, caps: list, pids: dict[str, str]) -> None:
    """SIGINT to the captures still running, in their nodes (one `kill` per node, AT_ONCE at a time); a `kill`
    that did not get through (an SSH connection refused) is tried again, up to three times."""
    by_node: dict[str, list[str]] = {}
    for d, _, p, node in caps:
        if p.poll() is None and d in pids:
            by_node.setdefault(node, []).append(pids[d])
    pending = sorted(by_node.items())
    for _ in range(3):
        failed = []
        for chunk in _chunks(pending):
            batch = [(node, ps, popen(node, ["kill", "-INT", *ps], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL)) for node, ps in chunk]
            failed += [(node, ps) for node, ps, kp in batch if kp.wait(timeout=60) != 0]
        alive = {pids[d] for d, _, p, _ in caps if p.poll() is None and d in pids}
        pending = [(node, [x for x in ps if x in alive]) for node, ps in failed]
        pending = [(node, ps) for node, ps in pending if ps]
        if not pending:
            return
        time.sleep(0.5)


def probe_group(plan: NetworkPlan, popen, name: str, count: int = 100, size: int = 100, sender: str | None = None,
                gap: float | None = None, capture: bool = True, dilation: float = 1.0) -> dict:
    """Run the check on a running lab; `popen(node, argv, **kw)` runs a command inside a node. `dilation`: the lab's
    (docs/virtual-time.md): `gap` and the delays are virtual, the datagrams go `gap` x dilation apart."""
    group = group_of(plan, name)
    sender = sender or group.senders[0]
    if sender not in group.senders:
        raise SpecError(f"--sender: {sender} may not send to group {name} (senders: {', '.join(group.senders)})")
    gap = (default_gap(plan, group, size) if gap is None else gap) * dilation      # real seconds from here on
    tmp = Path(tempfile.mkdtemp(prefix="orch-mcprobe-"))
    caps, recvs, pids = [], {}, {}
    try:
        if capture:
            # Each capture writes its pcap to stdout, into a file here (the node may be on another machine: a lab
            # over several machines runs it over SSH), and says its pid first: it is stopped by a SIGINT sent in
            # its node, where it runs, so it flushes and ends on whichever machine that is.
            for chunk in _chunks(capture_points(plan, group)):
                batch = []
                for d, node, dev in chunk:
                    f = tmp / f"{d.replace('/', '_')}.pcap"
                    with open(f, "wb") as sink:
                        batch.append((d, f, popen(node, ["sh", "-c", 'echo "pid $$" >&2; exec "$@"', "sh", "tcpdump",
                                                         "-Q", "out", "-i", dev, "-n", "-s", "64", "-U", "-w", "-",
                                                         "dst", "host", group.address],
                                                  stdout=sink, stderr=subprocess.PIPE, text=True), node))
                caps += batch
                for d, _, p, _ in batch:          # its pid, then tcpdump's "listening on": it captures
                    while True:
                        line = p.stderr.readline()
                        if not line:
                            raise OrchestratorError(f"multicast probe: the capture of {d} did not start")
                        if line.startswith("pid "):
                            pids[d] = line.split()[1]
                        elif "listening on" in line:
                            break
        for chunk in _chunks([m for m in group.members if m != sender]):
            for m in chunk:
                ep = next(e for e in member_endpoints(plan, m) if e["name"] == name)
                recvs[m] = popen(m, [*TOOL, "recv", group.address, str(group.port), ep["join_ifs"][0], ep["source"],
                                     str(max(3.0, 5 * gap))], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True)
            for m in chunk:
                p = recvs[m]
                if p.stdout.readline().strip() != "ready":
                    raise OrchestratorError(f"multicast probe: the receiver in {m} did not start: {p.stderr.read()}")
        ep = next(e for e in member_endpoints(plan, sender) if e["name"] == name)
        src = popen(sender, [*TOOL, "send", group.address, str(group.port), ep["send_if"], str(ep["ttl"]),
                             ep["source"], str(count), str(size), str(gap)],
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _, errs = src.communicate(timeout=120 + count * gap * 2)
        if src.returncode != 0:
            raise OrchestratorError(f"multicast probe: the sender in {sender} failed: {errs.strip()}")
        received = {}
        for m, p in recvs.items():
            out, _ = p.communicate(timeout=120)
            lines = out.strip().splitlines()
            if lines:
                received[m] = json.loads(lines[-1])
                received[m]["delay_s"] = [d / dilation for d in received[m].get("delay_s") or []]   # virtual
        links = None
        if capture:
            time.sleep(0.5)
            _interrupt(popen, caps, pids)
            for _, _, p, _ in caps:
                p.communicate(timeout=30)
            links = {d: count_frames(f) for d, f, _, _ in caps}
        return judge(plan, group, sender, count, size, received, links)
    finally:
        for p in [*recvs.values(), *(p for _, _, p, _ in caps)]:
            if p.poll() is None:
                p.kill()
                p.wait()
        for f in tmp.glob("*"):
            f.unlink()
        tmp.rmdir()
