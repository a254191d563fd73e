"""Link fidelity measured on netem (issue #37), in the VM `make test-netem` boots: the delay line's checks
(tests/integration/test_delayline.py, test_lab_delayline.py) against the netem path. Each check is one row of the
measured table (helpers.fidelity_row): `make test-netem` collects the rows and renders them in
docs/results/netem/fidelity.md. The VM runs Python ~20x slower than the host, so the judges that involve the
path's own timing allow for it, each as its comment says."""
from __future__ import annotations

import json
import math
import re
import statistics

import pytest
from scipy.stats import binom

from orchestrator.backends.registry import get_backend

from .helpers import (VM_TOLERANCE, cli, fidelity_row, lab_timed_flows, quantiles_within_noise, run_in_node,
                      running_lab, typical, udp_transfer, vm_allows)

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.netem]


def binomial_interval(n: int, p: float, alpha: float = 1e-3) -> tuple[int, int]:
    """The central (1 - alpha) interval of Binomial(n, p), exact (scipy's quantiles)."""
    lo, hi = binom.interval(1 - alpha, n, p)
    return int(lo), int(hi)


def test_binomial_interval_is_exact():
    lo, hi = binomial_interval(400, 0.19)
    assert lo < 400 * 0.19 < hi and 40 < lo and hi < 115


def test_netem_loss_within_binomial_interval(tmp_path, state_dir):
    # h1 - h0 (- h2): one hop, loss p on both directions, so an echo round trip is lost with 1 - (1 - p)^2.
    p, n = 0.10, 400
    exp = "topology: {kind: tree, nodes: 3, degree: 2}\nlinks: {delay: 1ms, loss: 10%}\n"
    with running_lab(exp, tmp_path, shaper="netem") as (state, plan):
        assert state.shaper == "netem" and not state.warnings
        q = run_in_node(state, "h0", ["tc", "qdisc", "show", "dev", plan.link_of("h0", "h1").parent_if]).stdout
        assert "loss 10%" in q, q
        r = run_in_node(state, "h1", ["ping", "-q", "-c", str(n), "-i", "0.02", "-W", "2",
                                      plan.node("h0").address], timeout=180)
        m = re.search(r"(\d+) packets transmitted, (\d+) received", r.stdout)
        assert m, r.stdout + r.stderr
        sent, got = int(m.group(1)), int(m.group(2))
        assert sent == n
        p_rt = 1 - (1 - p) ** 2
        lo, hi = binomial_interval(n, p_rt)
        lost = sent - got
        print(f"netem loss: {lost}/{n} round trips lost, expected {n * p_rt:.0f} in [{lo}, {hi}] (99.9%)")
        assert fidelity_row("loss, 1 hop, both directions", f"10 % (round trip 19 %: {n * p_rt:.0f} of {n})",
                            f"{lost} of {n} round trips lost", f"[{lo}, {hi}] of {n}, exact binomial 99.9 %",
                            lo <= lost <= hi)


def test_netem_queue_bounds_the_packets_waiting_for_the_link_not_those_being_delayed(tmp_path, state_dir):
    # One hop h1 -> h0 at 1 Mbit/s with 300 ms of delay and a queue of 10: 150 datagrams of 1000 B, 4 ms apart
    # (twice what the link carries). The queue fills and then admits what the link serialises; the delay holds
    # ~36 packets on their way, which one netem's `limit 10` counts (render.netem_stages). Expected: the delay
    # line's link model (delayline/model.py) fed the same sends. Then the same burst through the one-netem
    # rendering this replaced, for the record.
    from orchestrator.shaping.delayline.model import LinkModel
    from orchestrator.shaping.params import DirParams

    rate, delay, queue, n, size, gap = 1_000_000, 0.3, 10, 150, 1000, 0.004
    exp = f"topology: {{kind: tree, nodes: 3, degree: 2}}\nlinks: {{rate: 1mbit, delay: 300ms, queue: {queue}}}\n"
    model = LinkModel(DirParams(rate_bps=rate, delay_s=delay, queue_pkts=queue))
    expected = sum(model.admit(i * gap, size + 28) is not None for i in range(n))
    with running_lab(exp, tmp_path, shaper="netem") as (state, plan):
        dev = plan.link_of("h0", "h1").child_if
        q = run_in_node(state, "h1", ["tc", "qdisc", "show", "dev", dev]).stdout
        assert "root refcnt 3 limit 100000 delay 300ms" in q and "parent 1:1 limit 10 rate 1Mbit" in q, q
        # neighbours resolved first: packets sent before the ARP reply wait in the neighbour's queue and reach
        # the qdisc in one burst when it comes
        assert run_in_node(state, "h1", ["ping", "-c", "2", "-W", "3", plan.node("h0").address]).returncode == 0
        got = len(udp_transfer(state, plan, "h1", "h0", count=n, size=size, gap=gap, idle=2.0)["times"])
        for line in (["qdisc", "del", "dev", dev, "root"],
                     ["qdisc", "add", "dev", dev, "root", "netem", "delay", "300ms", "rate", "1mbit", "limit", "10"]):
            assert run_in_node(state, "h1", ["tc", *line]).returncode == 0
        one = len(udp_transfer(state, plan, "h1", "h0", count=n, size=size, gap=gap, idle=2.0)["times"])
    print(f"netem queue: {got} of {n} delivered (two stages); the link model {expected}; one netem with "
          f"limit {queue}: {one}")
    # the sender's pacing in the VM is not exact: a tenth either way
    assert fidelity_row("queue limit under a burst, 1 hop",
                        f"1 Mbit/s, 300 ms, queue {queue}; {n} x {size} B, {gap * 1e3:g} ms apart",
                        f"{got} delivered (one netem with limit {queue}, the rendering before: {one})",
                        f"the link model's {expected} +- max(3, 10 %)", abs(got - expected) <= max(3, expected // 10))


def inversions(seqs: list[int]) -> int:
    return sum(1 for a, b in zip(seqs, seqs[1:]) if b < a)


def test_netem_jitter_quantiles_and_fifo(tmp_path, state_dir):
    # h0 -> h1 delayed 25 ms with uniform jitter (+-5 ms), h0 -> h2 with normal jitter (sd 5 ms), h1 -> h0 and
    # h2 -> h0 25 ms without: those reference flows, 4x denser over the same seconds, measure the path's own noise
    # (the VM's wake-ups). Packets 30 ms apart, so FIFO never binds (uniform spans 10 ms; two normal draws differ by
    # 30 ms at 4.2 sigma): the delay line's test_jitter_spreads_delay_and_keeps_fifo, with its judge. netem is never
    # early (its hrtimer fires at the drawn time, after the sender's stamp); its normal table is quantised, hence
    # 0.5 ms.
    delay, jitter, n = 0.025, 0.005, 200
    dists = {"h1": "uniform", "h2": "normal"}
    exp = ("topology: {kind: tree, nodes: 3, degree: 2}\n"
           "links: {delay: 25ms, overrides: ["
           + ", ".join(f"{{link: [h0, {m}], down: {{jitter: 5ms, jitter_dist: {d}}}}}" for m, d in dists.items())
           + "]}\n")
    with running_lab(exp, tmp_path, shaper="netem") as (state, plan):
        devs = {m: plan.link_of("h0", m).parent_if for m in dists}
        for m, dev in devs.items():
            q = run_in_node(state, "h0", ["tc", "qdisc", "show", "dev", dev]).stdout
            assert "delay 25ms  5ms" in q or "delay 25ms 5ms" in q, q
        flows = lab_timed_flows(state, plan, [("h0", "h1", n, 0.030), ("h0", "h2", n, 0.030),
                                              ("h1", "h0", 4 * n, 0.030 / 4), ("h2", "h0", 4 * n, 0.030 / 4)])
        measured = {"h1": (flows[0], flows[2]), "h2": (flows[1], flows[3])}
        # Densely spaced (1 ms, under the jitter's range): netem keeps the order (the root netem's nominal rate,
        # render.netem_stages), as the delay line does; beside each, the same flow back on the unjittered direction:
        # the VM's own reordering (a busy host preempts a vCPU with a packet in its receive backlog while the other
        # delivers later ones: 1 inversion in 6 flows on an unjittered path beside two busy loops, none quiet;
        # docs/results/netem/fifo-under-load-2026-11-29.log). Then the roots without the rate, as rendered before.
        both = lab_timed_flows(state, plan, [("h0", m, 300, 0.001) for m in dists]
                               + [(m, "h0", 300, 0.001) for m in dists])
        dense, back = both[:len(dists)], both[len(dists):]
        for m, dev in devs.items():
            root = ["delay", "25ms", "5ms", *(["distribution", "normal"] if dists[m] == "normal" else []),
                    "limit", "100000"]
            for line in (["qdisc", "del", "dev", dev, "root"], ["qdisc", "add", "dev", dev, "root", "netem", *root]):
                assert run_in_node(state, "h0", ["tc", *line]).returncode == 0
        before = lab_timed_flows(state, plan, [("h0", m, 300, 0.001) for m in dists])
    bad = {}
    for m, dist in dists.items():
        got, ref = measured[m]
        assert len(got) == n and len(ref) == 4 * n
        noise = [d - delay for _, d in ref]
        if dist == "uniform":
            ppf, levels = (lambda p: delay - jitter + 2 * jitter * p), (0.03, 0.1, 0.25, 0.5, 0.75, 0.9, 0.97)
        else:
            ppf, levels = statistics.NormalDist(delay, jitter).inv_cdf, (0.1, 0.25, 0.5, 0.75, 0.9)
        d = sorted(x[1] for x in got)
        qs = "/".join(f"{d[int(p * (len(d) - 1))] * 1e3:.2f}" for p in (0.1, 0.5, 0.9))
        want = "/".join(f"{ppf(p) * 1e3:.2f}" for p in (0.1, 0.5, 0.9))
        bad[m] = quantiles_within_noise([x[1] for x in got], noise, ppf, levels, early=0.0005)
        fidelity_row(f"jitter, {dist}, 1 hop one way", f"25 ms, {'+-5 ms' if dist == 'uniform' else 'sd 5 ms'} "
                     f"(p10/p50/p90 {want} ms)", f"p10/p50/p90 {qs} ms over {n} packets; reference noise p50 "
                     f"{statistics.median(noise) * 1e3:.2f} ms",
                     f"quantiles {', '.join(f'p{p * 100:g}' for p in levels)} within the draw's 4-sigma band + "
                     "the reference's noise", not bad[m])
    # The VM's own reordering is rare (0 or 1 inversion in 300) and comes singly: a FIFO rendering may show the
    # reference's count + 1 % of the packets; one that jitters without the order showed 122-142 (every VM run).
    order = {}
    for (m, dist), now, ref, old in zip(dists.items(), dense, back, before):
        inv, inv_ref, inv_old = (inversions([x[0] for x in f]) for f in (now, ref, old))
        allowed = inv_ref + 3
        print(f"netem {dist} jitter, 300 packets 1 ms apart: {inv} inversions (the unjittered way back: {inv_ref}); "
              f"without the root's rate (the rendering before): {inv_old}")
        order[m] = (inv <= allowed and len(now) == 300, inv, allowed, len(now), inv_old)
        fidelity_row(f"jitter, {dist}: order of 300 packets 1 ms apart", "jitter keeps FIFO (as the delay line)",
                     f"{inv} inversions, {len(now)} delivered; the unjittered way back: {inv_ref} (the rendering "
                     f"before: {inv_old} inversions)", "the way back's inversions + 3 (the VM's own reordering), "
                     "300 delivered", order[m][0])
    assert not any(bad.values()), bad
    assert all(o[4] > 10 * o[2] for o in order.values()), ("the dense flows cannot tell FIFO from reordering", order)
    assert all(o[0] for o in order.values()), order


def test_netem_asymmetric_directions_a_subtree_override_partition_and_heal(tmp_path, state_dir):
    # h0 root; h1 (below it h2) under the override: 40 ms both ways; h3, h4: 5 ms down, 15 ms up. Six one-way flows
    # at once, 40 packets each; each judged against the path's sum (vm_allows). Then the schedule's partition of
    # h4 (backend.set_link(None) both ways): nothing crosses h0-h4 while h3 - h0 works; the heal (the planned
    # parameters back): every ping h3 -> h4 crosses, at 5 + 15 ms each way.
    exp = ("topology: {kind: tree, nodes: 5, degree: 3}\n"
           "links: {delay: 5ms, up: {delay: 15ms}, overrides: [{subtree: h1, delay: 40ms}]}\n")
    expected_ms = {("h3", "h0"): 15, ("h0", "h3"): 5, ("h2", "h0"): 80, ("h0", "h2"): 80, ("h2", "h3"): 85,
                   ("h3", "h2"): 95}
    hops = {("h3", "h0"): 1, ("h0", "h3"): 1, ("h2", "h0"): 2, ("h0", "h2"): 2, ("h2", "h3"): 3, ("h3", "h2"): 3}

    def ping(src, dst, n=10):
        r = run_in_node(state, src, ["ping", "-c", str(n), "-i", "0.1", "-W", "1", plan.node(dst).address],
                        timeout=60)
        return [float(x) for x in re.findall(r"time=([\d.]+) ms", r.stdout)]

    with running_lab(exp, tmp_path, shaper="netem") as (state, plan):
        assert [(lk.id, lk.down.delay_s, lk.up.delay_s) for lk in plan.links] == [
            ("h0-h1", 0.04, 0.04), ("h1-h2", 0.04, 0.04), ("h0-h3", 0.005, 0.015), ("h0-h4", 0.005, 0.015)]
        flows = lab_timed_flows(state, plan, [(a, b, 40, 0.05) for a, b in expected_ms])
        be, link = get_backend(state.backend), plan.link_of("h0", "h4")
        assert len(ping("h3", "h4", 3)) == 3
        for d in ("down", "up"):
            be.set_link(state, plan, link.id, d, None)
        cut = (len(ping("h3", "h4")), len(ping("h4", "h0")))
        other = len(ping("h3", "h0"))
        for d in ("down", "up"):
            be.set_link(state, plan, link.id, d, getattr(link, d))
        rtts = ping("h3", "h4")
    bad = []
    seen = []
    for ((a, b), want), got in zip(expected_ms.items(), flows):
        ms = [x[1] * 1e3 for x in got]
        seen.append(f"{a}>{b} {typical(ms):.1f}/{want}")
        if len(got) != 40 or not vm_allows(ms, want, hops[a, b]):
            bad.append((a, b, len(got), round(typical(ms), 2), want))
    fidelity_row("asymmetric directions and a subtree override, one way",
                 "5 ms down / 15 ms up; subtree h1 40 ms both ways; 6 paths of 1-3 hops",
                 "lower quartile / expected ms: " + ", ".join(seen), VM_TOLERANCE, not bad)
    t = typical(rtts) if rtts else math.nan
    healed = cut == (0, 0) and other == 10 and len(rtts) == 10 and vm_allows(rtts, 40.0, 4)
    fidelity_row("partition and heal", "cut h0-h4 both ways, then the planned 5 ms down / 15 ms up back",
                 f"cut: {cut[0]} of 10 h3>h4 and {cut[1]} of 10 h4>h0 crossed (h3>h0: {other} of 10); "
                 f"healed: {len(rtts)} of 10, RTT lower quartile {t:.1f} ms",
                 f"cut: 0 crossed, the other link untouched; healed: 10 of 10, RTT 40 ms, {VM_TOLERANCE}", healed)
    assert not bad, bad
    assert healed, (cut, other, rtts)


def test_netem_gilbert_elliott_bursts_and_reordering(tmp_path, state_dir):
    # One hop, 20 ms each way. h0 -> h1: Gilbert-Elliott p = 5 %, r = 45 % (loss 100 % in the bad state, 0 in the
    # good): loss pi = p / (p + r) = 10 %, bursts geometric with mean 1/r = 2.22 packets. h1 -> h0: reorder 25 %
    # (netem sends a quarter at once, the rest after 20 ms). Both flows at once.
    p, r, reorder = 0.05, 0.45, 0.25
    exp = ("topology: {kind: tree, nodes: 2, degree: 2}\n"
           f"links: {{delay: 20ms, down: {{gemodel: {{p: {p}, r: {r}}}}}, up: {{reorder: 25%}}}}\n")
    n_ge, n_re = 2000, 400
    with running_lab(exp, tmp_path, shaper="netem") as (state, plan):
        q = run_in_node(state, "h0", ["tc", "qdisc", "show", "dev", plan.link_of("h0", "h1").parent_if]).stdout
        assert "loss gemodel" in q, q
        ge, re_ = lab_timed_flows(state, plan, [("h0", "h1", n_ge, 0.002), ("h1", "h0", n_re, 0.010)])
    got = {s for s, _ in ge}
    bursts, run = [], 0
    for s in range(n_ge):
        if s in got:
            if run:
                bursts.append(run)
            run = 0
        else:
            run += 1
    if run:
        bursts.append(run)
    lost, pi = n_ge - len(got), p / (p + r)
    # bursts make the count over-dispersed (as the delay line's test): var ~ n pi (1-pi) (1 + 2 (1-p-r)/(p+r))
    sd = math.sqrt(n_ge * pi * (1 - pi) * (1 + 2 * (1 - p - r) / (p + r)))
    mean_b = statistics.fmean(bursts) if bursts else 0.0
    se_b = math.sqrt(1 - r) / r / math.sqrt(max(1, len(bursts)))
    ok_ge = abs(lost - n_ge * pi) <= 4 * sd and abs(mean_b - 1 / r) <= 4 * se_b
    # reordered: seen under half the delay (delayed packets never are; an undelayed one is, unless the VM holds
    # the sender or receiver 10 ms)
    fast = sum(1 for _, d in re_ if d < 0.010)
    lo, hi = binomial_interval(n_re, reorder)
    ok_re = len(re_) == n_re and lo <= fast <= hi and inversions([s for s, _ in re_]) > 0
    assert fidelity_row("Gilbert-Elliott loss, 1 hop", f"p 5 %, r 45 %: loss {pi:.0%}, mean burst {1 / r:.2f}",
                        f"{lost} of {n_ge} lost in {len(bursts)} bursts, mean burst {mean_b:.2f}",
                        f"loss {n_ge * pi:.0f} +- {4 * sd:.0f} (4 sd, over-dispersed); mean burst +- {4 * se_b:.2f} "
                        "(4 se)", ok_ge)
    assert fidelity_row("reordering, 1 hop", f"reorder 25 % with 20 ms delay: {n_re * reorder:.0f} of {n_re} sent "
                        "at once", f"{fast} of {len(re_)} seen under 10 ms, {inversions([s for s, _ in re_])} "
                        "inversions", f"[{lo}, {hi}], exact binomial 99.9 %", ok_re)


GROUP = "multicast: {groups: [{name: data, address: 239.1.0.1, members: all}]}\n"


def test_netem_multicast_copies_and_hop_cost_and_orchestrator_probe(tmp_path, state_dir):
    # h0 with h1, h2, h3 below it at 30 kbit/s + 5 ms: h1 sends 12 datagrams of 100 B IP to the group. Every member
    # receives each once; each tree link direction away from the sender carries one copy per datagram (egress
    # captures), none elsewhere; a hop costs what a unicast hop costs: 2 x (5 ms + 114 B at 30 kbit/s) = 70.8 ms of
    # round trip per hop (the multicast probe's one-way median, doubled).
    from orchestrator.mcast.probe import probe_group

    # Copies counted by the probe's egress captures; the delays measured in a second stream without them (a
    # tcpdump on every link direction competes with the receivers for the VM's CPU: the one-hop median was 6.1 ms
    # late with them, 2026-11-28), with unicast timed flows of the same size on the same paths beside: the VM's late
    # timers delay both alike (a one-hop median of 38.9 ms for both, 0.5 ms over the formula's bound, 2026-11-28), so
    # a median within 3 % + 0.5 ms of the unicast one on its path passed too. A CI run on a busy machine then measured
    # multicast 2.3-7.0 ms over unicast on the same paths (h0 40.3 against 38.0, h2 81.4 against 74.4, 2026-11-28):
    # three receivers woken at once in the VM, stamping in user space. Both are now stamped by the kernel on arrival
    # (SO_TIMESTAMPNS) and judged, like every delay in this table, by their lower quartile (vm_allows), or within
    # 3 % + 0.5 ms of the unicast lower quartile on the same path.
    text = "topology: {kind: tree, nodes: 4, degree: 3}\nlinks: {rate: 30kbit, delay: 5ms, queue: 64}\n" + GROUP
    with running_lab(text, tmp_path, shaper="netem") as (state, plan):
        popen = lambda node, argv, **kw: get_backend(state.backend).popen(state, node, argv, **kw)  # noqa: E731
        res = probe_group(plan, popen, "data", count=12, size=72, sender="h1")
        timed = probe_group(plan, popen, "data", count=20, size=72, sender="h1", capture=False)
        # one after the other: together they would queue on h1's uplink
        uni = [lab_timed_flows(state, plan, [("h1", m, 12, 0.05)], kernel_stamps=True)[0] for m in ("h0", "h2", "h3")]
        # `orchestrator probe` on this lab, through the CLI: 2 links and a 2-hop path, 8 pings each (70.8 ms of
        # round trip per hop for its 100-byte pings), and the rate sample
        r = cli("probe", state.lab, "--links", "2", "--paths", "1", "--count", "8", "--json")
        assert r.returncode == 0, r.stderr
    per = {m: (x["distinct"], x["duplicates"], x["missing"], x["hops"]) for m, x in res["receivers"].items()}
    delays = {m: (x["hops"], x["lower_quartile_delay_ms"], x["missing"]) for m, x in timed["receivers"].items()}
    unicast = {m: typical([d * 1e3 for _, d in f]) for m, f in zip(("h0", "h2", "h3"), uni)}
    copies = {d: (c["copies"], c["expected"]) for d, c in res["links"].items()}
    one_way = 35.4      # 5 ms + 114 B at 30 kbit/s, per hop
    ok = (res["problems"] == [] and sorted(per) == ["h0", "h2", "h3"]
          and all(v[:3] == (12, 0, 0) for v in per.values())
          and all(c == e for c, e in copies.values()) and sum(1 for _, e in copies.values() if e) == 3
          and sorted(delays) == ["h0", "h2", "h3"]
          and all(miss == 0 and one_way * h - 0.5 <= q1 <= max(one_way * h * 1.03 + 2.0 * h, unicast[m] * 1.03 + 0.5)
                  for m, (h, q1, miss) in delays.items()))
    seen = "; ".join(f"{m}: {per.get(m, (0, 0))[0]} of 12 ({per.get(m, (0, 0))[1]} duplicates), {h} hop(s), "
                     f"lower quartile {q1:.1f} ms (unicast {unicast[m]:.1f})"
                     for m, (h, q1, _) in sorted(delays.items()))
    assert fidelity_row("IP multicast through netem links", "4 members, sender h1, 100 B datagrams; 35.4 ms per hop "
                        "one way", f"{seen}; copies per link direction "
                        f"{sorted((d, c) for d, (c, _) in copies.items())}", "every member each once; one copy per "
                        "tree link direction away from the sender, none elsewhere; kernel receive stamps, lower "
                        "quartile -0.5 ms .. +3 % + 2 ms per hop, or within 3 % + 0.5 ms of the unicast one on its "
                        "path", ok), \
        (res["problems"][:5], per, delays, unicast, copies)

    pr = json.loads(r.stdout)
    paths = [(p["hops"], p["emulated_rtt_ms"], p["rtt_ms"]) for p in pr["paths"]]
    rate = pr["rate"]["measured_bps"]
    ok = (pr["shaper"] == "netem" and pr["sent"] == pr["received"] == 24 and len(paths) == 3
          and any(h == 2 for h, _, _ in paths)
          and all(e == pytest.approx(70.8 * h, rel=1e-3) and vm_allows(ms, e, 2 * h) for h, e, ms in paths)
          and abs(rate - 30_000) <= 3_000)
    assert fidelity_row("orchestrator probe on a netem lab", "2 links + 1 two-hop path, 8 pings each; 30 kbit/s",
                        ", ".join(f"{h} hop(s) {typical(ms):.1f}/{e:.1f} ms" for h, e, ms in paths)
                        + f" (lower quartile/formula); rate {rate:.0f} bit/s", f"RTT {VM_TOLERANCE}; rate +-10 %",
                        ok), pr
