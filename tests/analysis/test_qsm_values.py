"""The qsm plug-in's run_values (analysis/protocols/qsm.py) on small synthetic run directories, without Spark: every
expected number is worked out by hand in the comments. `qsm_run` (below) writes a run directory of this version's
format: manifest, plan, one node config per member (the protocol section as the orchestrator writes it), the event
logs, tc/delayline.json and judges.json when given."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis.protocols import qsm
from analysis.rundir import load

T0 = 1000.0
GROUP_A = [{"name": "a", "members": "all"}]


def e(node: str, event: str, ts: float, **fields) -> dict:
    return {"ts": T0 + ts, "node": node, "event": event, **fields}


def qsm_run(root: Path, events: list[dict], n: int = 3, groups: list[dict] | None = None, R: int = 2,
            token_s: float = 0.5, loss: str | None = None, senders: list[str] | int | None = None,
            delayline_cpu_s: float | None = None, status: str = "completed", end_s: float = 10.0,
            dilation: float | None = None, cpu: float | None = None, judges: dict | None = None,
            name: str = "qsm-run", seed: int = 1, transport: str | None = None,
            joiners: list[str] | None = None) -> Path:
    """A QSM run directory: members h0..h<n-1> (ids 0..n-1), the events given (ts virtual), t0 = T0, the run ending
    `end_s` (virtual) after t0."""
    d = root / name
    (d / "configs").mkdir(parents=True)
    (d / "events").mkdir()
    names = [f"h{i}" for i in range(n)]
    members = [{"id": i, "name": m, "addr": f"10.0.0.{i + 1}:7000"} for i, m in enumerate(names)]
    proto = {"name": "qsm", "groups": groups or GROUP_A, "partition_size": R, "token_interval_s": token_s,
             "growth": 0.2, **({"transport": transport} if transport else {}),
             **({"joiners": joiners} if joiners else {})}
    for i, m in enumerate(names):
        (d / "configs" / f"{m}.json").write_text(json.dumps({"name": m, "id": i, "listen": f"10.0.0.{i + 1}:7000",
                                                             "members": members, "protocol": proto,
                                                             "senders": [0]}))
    (d / "plan.json").write_text(json.dumps({"nodes": [{"name": m, "role": "member", "address": f"10.0.0.{i + 1}"}
                                                       for i, m in enumerate(names)], "links": []}))
    by: dict[str, list[str]] = {}
    for x in events:
        by.setdefault(x["node"], []).append(json.dumps(x))
    for node, lines in by.items():
        (d / "events" / f"{node}.jsonl").write_text("\n".join(lines) + "\n")
    n_dil = dilation or 1.0
    manifest = {"run_id": name, "status": status, "seed": seed, "shaper": "delayline", "t0_unix": T0,
                "started_at": T0 - 2, "ended_at": T0 + end_s * n_dil,       # real; the epoch is T0
                "spec": {"links": {"loss": loss}, "duration": f"{end_s:g}s",
                         "workload": {"rate_per_s": 3000, **({"senders": senders} if senders is not None else {})},
                         "protocol": {"qsm": {k: v for k, v in proto.items() if k != "name"}}}}
    if dilation is not None:
        manifest["time"] = {"dilation": dilation, "epoch": T0}
    if cpu is not None:
        manifest["cpu_budget"] = {"cpu": cpu}
    (d / "manifest.json").write_text(json.dumps(manifest))
    if delayline_cpu_s is not None:
        (d / "tc").mkdir()
        (d / "tc" / "delayline.json").write_text(json.dumps({"cpu_s": delayline_cpu_s}))
    if judges is not None:
        (d / "judges.json").write_text(json.dumps(judges))
    return d


def one_sender_log() -> list[dict]:
    """h0 sends seq 1..9 into group a (h0, h1, h2) at t = 0.5, 1.1, 1.6, 2.2, 2.4, 3.2, 3.5, 3.7, 4.9 s: span 0.5 ->
    4.9, the steady half from 2.7 s: 4 sends (3.2, 3.5, 3.7, 4.9) in 2.2 s. h1 and h2 receive each 50 ms after
    its send, h2 all but seq 9."""
    out = [e(f"h{i}", "node_started", 0.0, id=i) for i in range(3)]
    times = (0.5, 1.1, 1.6, 2.2, 2.4, 3.2, 3.5, 3.7, 4.9)
    for seq, t in enumerate(times, 1):
        out.append(e("h0", "data_sent", t, seq=seq, group_name="a"))
        out.append(e("h1", "data_received", t + 0.05, origin=0, seq=seq))
        if seq != 9:
            out.append(e("h2", "data_received", t + 0.05, origin=0, seq=seq))
    out += [
        # h2 recovered seq 8 by pull after 0.4 s, h1 seq 7 by push after 0.2 s
        e("h2", "recovered", 3.9, origin=0, seq=8, how="pull", latency=0.4),
        e("h1", "recovered", 3.9, origin=0, seq=7, how="push", latency=0.2),
        # ACKs: 3 packets with latencies summing 1.5 s, then 5 summing 2.5 s -> 4.0 / 8 = 0.5 s = 1 round of 0.5 s
        e("h0", "ack_received", 2.0, region="r-a", acked=3, latency_sum=1.5, latency_max=0.6),
        e("h0", "ack_received", 4.0, region="r-a", acked=5, latency_sum=2.5, latency_max=0.7),
        e("h0", "ack_received", 4.5, region="r-a", acked=0, latency_sum=0.0, latency_max=None),
        e("h0", "rate_changed", 1.0, rate=500.0), e("h0", "rate_changed", 3.0, rate=420.0),
        e("h0", "rate_changed", 6.0, rate=10.0),                     # after the last send: not the final rate
        e("h0", "steps_skipped", 2.0, timer="workload", missed=3),
        e("h0", "steps_skipped", 2.5, timer="token", missed=7),     # another timer: not counted
        e("h0", "token_round", 1.0, region="r-a", duration=0.1),
        e("h0", "token_round", 1.5, region="r-a", duration=0.1),
    ]
    return out


def values(tmp_path: Path, events: list[dict], **kw) -> dict:
    return qsm.PLUGIN.run_values(load(qsm_run(tmp_path, events, **kw)))


def test_one_sender_by_hand(tmp_path):
    r = values(tmp_path, one_sender_log(), loss="1%", delayline_cpu_s=2.5)
    assert (r["members"], r["R"], r["loss"], r["token_s"], r["growth"]) == (3, 2, pytest.approx(0.01), 0.5, 0.2)
    assert (r["shaper"], r["rate_initial"], r["sender_names"]) == ("delayline", 3000, ["h0"])
    # one group; the workload names no senders: S = the one that sent
    assert (r["groups"], r["n_senders"]) == (1, 1)
    assert r["messages"] == r["qsm_messages"] == 9
    assert r["throughput_all"] == pytest.approx(8 / 4.4)            # (n - 1) / span
    assert r["throughput"] == pytest.approx(4 / 2.2)                # steady half: 2.7 .. 4.9
    assert r["sender_throughput"] == {"h0": pytest.approx(4 / 2.2)} and r["sender_jain"] == pytest.approx(1.0)
    assert r["group_throughput"] == {"a": pytest.approx(4 / 2.2)} and r["throughput_per_group"] == r["throughput"]
    assert r["sender_share"] == {"h0": pytest.approx(1.0)} and r["sender_share_min"] == pytest.approx(1.0)
    # receivers in [2.7, 4.9]: h1 3.25, 3.55, 3.75 (4.95 is after the last send) -> 3; h2 the same 3
    assert r["delivered_min"] == pytest.approx(3 / 2.2) and r["delivered_mean"] == pytest.approx(3 / 2.2)
    assert r["delivery"] == r["qsm_delivery_ratio"] == pytest.approx(17 / 18)   # 2 receivers x 9, h2 misses one
    # whole seconds since t0 between 0 and 4: 1 -> 2 sends, 2 -> 2, 3 -> 3; steady (>= 2.7): second 3 only
    assert r["rate_series"] == [2, 2, 3] and r["rate_std"] is None and r["rate_cv"] is None
    # h0's own samples 2, 2, 3: mean 7/3, sample sd sqrt(((1/3)^2 x 2 + (2/3)^2) / 2) = sqrt(1/3)
    assert r["rate_std_per_s_mean"] == pytest.approx((1 / 3) ** 0.5)
    assert r["rate_final"] == 420.0 and r["steps_skipped"] == 3 and r["token_rounds"] == 2
    # 17 receipts; recovered 2 (latencies 0.4, 0.2: mean 0.3 s = 0.6 rounds of 0.5 s, max 0.4)
    assert r["receipts"] == 17 and r["recovered"] == 2 and r["recovery_rate"] == pytest.approx(2 / 17)
    assert r["recovery_latency_s"] == r["recovery_latency_mean_s"] == pytest.approx(0.3)
    assert r["recovery_latency_rounds"] == pytest.approx(0.6) and r["recovery_latency_max_s"] == pytest.approx(0.4)
    assert r["recovered_by"] == {"pull": 1, "push": 1}
    assert r["ack_latency_s"] == r["ack_latency_mean_s"] == pytest.approx(0.5)
    assert r["ack_latency_rounds"] == pytest.approx(1.0) and r["ack_latency_max_s"] == pytest.approx(0.7)
    # no node CPU reading: the delay line's alone, no per-packet cost
    assert r["delayline_cpu_s"] == 2.5 and r["node_cpu_s"] is None and r["ceiling_2cores"] is None
    assert r["duration_s"] == pytest.approx(10.0)                  # the run's end - t0, as the generic summary's
    # the generic values are there too: 9 messages, each expected at both others (started before it)
    assert r["data_messages"] == 9 and r["delivery_ratio_mean"] == pytest.approx(17 / 18)


def test_units_and_no_loss(tmp_path):
    assert qsm.seconds("500ms") == 0.5 and qsm.seconds("100us") == pytest.approx(1e-4) and qsm.seconds(2) == 2.0
    assert qsm.percent(None) == 0.0 and qsm.percent("0.1%") == pytest.approx(0.001)
    r = values(tmp_path, one_sender_log(), token_s=1.0)
    assert r["loss"] == 0.0 and r["ack_latency_rounds"] == pytest.approx(0.5)


def test_cpu_costs_by_hand():
    # 1000 packets, 4000 receipts, 3 s of node CPU and 1 s of the delay line's: 3000 us per packet, 750 per
    # receipt; two idle cores: 2 x 1000 / 4 s = 500 packets/s
    c = qsm.cpu_costs(1000, 4000, 3.0, 1.0)
    assert c["cpu_us_per_packet"] == pytest.approx(3000) and c["cpu_us_per_receipt"] == pytest.approx(750)
    assert c["ceiling_2cores"] == pytest.approx(500)
    assert qsm.cpu_costs(1000, 0, None, None)["ceiling_2cores"] is None
    assert qsm.cpu_costs(1000, 0, 3.0, None)["cpu_us_per_receipt"] is None


def test_no_sends(tmp_path):
    r = values(tmp_path, [e(f"h{i}", "node_started", 0.0, id=i) for i in range(3)])
    assert r["messages"] == 0 and r["delivery"] is None and r["throughput"] is None and r["rate_series"] == []
    assert r["sender_throughput"] == {} and r["sender_jain"] is None and r["recovery_rate"] is None
    assert r["ack_latency_s"] is None and r["rate_final"] is None and r["n_senders"] == 0


def two_senders_log() -> list[dict]:
    """Figure 16 shape: h0 and h1 both send into group a (h0, h1, h2). h0 at t = 1, 2, 3, 4, 5 (seq 1-5), h1 at
    1.5, 3.5, 4.5 (seq 1-3); each other member receives each message 10 ms later, but h2 misses h1's seq 3."""
    out = [e(f"h{i}", "node_started", 0.0, id=i) for i in range(3)]
    for node, nid, times in (("h0", 0, (1.0, 2.0, 3.0, 4.0, 5.0)), ("h1", 1, (1.5, 3.5, 4.5))):
        for seq, t in enumerate(times, 1):
            out.append(e(node, "data_sent", t, seq=seq, group_name="a"))
            for rx in ("h0", "h1", "h2"):
                if rx != node and not (rx == "h2" and node == "h1" and seq == 3):
                    out.append(e(rx, "data_received", t + 0.01, origin=nid, seq=seq))
    return out


def test_senders_shares_by_hand(tmp_path):
    r = values(tmp_path, two_senders_log(), senders=["h0", "h1"])
    # all sends 1.0 .. 5.0: steady half [3.0, 5.0], 2 s: h0 3.0, 4.0, 5.0 -> 1.5/s; h1 3.5, 4.5 -> 1.0/s; total 2.5
    assert (r["groups"], r["n_senders"], r["sender_names"]) == (1, 2, ["h0", "h1"])
    assert r["throughput"] == pytest.approx(2.5)
    assert r["sender_throughput"] == {"h0": pytest.approx(1.5), "h1": pytest.approx(1.0)}
    assert r["sender_share"] == {"h0": pytest.approx(0.6), "h1": pytest.approx(0.4)}
    assert r["sender_jain"] == pytest.approx(2.5 ** 2 / (2 * (1.5 ** 2 + 1.0 ** 2)))   # 6.25 / 6.5 = 0.9615
    assert r["sender_share_min"] == pytest.approx(0.4) and r["throughput_per_sender"] == pytest.approx(1.25)
    assert r["delivery"] == pytest.approx(15 / 16)            # h0's 5 to 2 members, h1's 3 to 2, one missing
    # the only non-sender h2 in [3.0, 5.0]: 3.01, 3.51, 4.01 (4.51 missed, 5.01 after the window) -> 1.5/s
    assert r["delivered_min"] == pytest.approx(1.5)
    # per sender, its own whole seconds: h0 1..5 -> seconds 2, 3, 4: 1, 1, 1 (sd 0); h1 1.5..4.5 -> 2, 3: 0, 1
    # (sd 0.707): mean 0.354
    assert r["rate_std_per_s_mean"] == pytest.approx(0.5 ** 0.5 / 2)


def test_a_configured_sender_that_sent_nothing_counts_zero(tmp_path):
    r = values(tmp_path, two_senders_log(), senders=["h0", "h1", "h2"])      # h2 configured, never sends
    assert r["n_senders"] == 3 and r["sender_throughput"]["h2"] == 0.0 and r["sender_share"]["h2"] == 0.0
    assert r["sender_jain"] == pytest.approx(6.25 / (3 * 3.25)) and r["sender_share_min"] == 0.0
    assert values(tmp_path / "n", two_senders_log(), senders=2)["n_senders"] == 2   # a count of senders


def test_groups_round_robin_by_hand(tmp_path):
    """Figure 1 shape: h0 sends seq 1-5 at t = 1..5 into a, b, a, b, a; groups a, b, c all of h0, h1 (c gets
    nothing). Steady half [3, 5]: a 3.0, 5.0 -> 1.0/s, b 4.0 -> 0.5/s, c 0."""
    ev = [e("h0", "node_started", 0.0, id=0), e("h1", "node_started", 0.0, id=1)]
    for seq, g in enumerate("ababa", 1):
        ev += [e("h0", "data_sent", float(seq), seq=seq, group_name=g),
               e("h1", "data_received", seq + 0.01, origin=0, seq=seq)]
    r = values(tmp_path, ev, n=2, groups=[{"name": g, "members": "all"} for g in "abc"], senders=["h0"])
    assert (r["groups"], r["n_senders"]) == (3, 1)
    assert r["throughput"] == pytest.approx(1.5) and r["throughput_per_group"] == pytest.approx(0.5)
    assert r["group_throughput"] == {"a": pytest.approx(1.0), "b": pytest.approx(0.5), "c": 0.0}
    assert r["group_share"] == {"a": pytest.approx(2 / 3), "b": pytest.approx(1 / 3), "c": 0.0}
    assert r["group_jain"] == pytest.approx(1.5 ** 2 / (3 * 1.25))          # 2.25 / 3.75 = 0.6
    assert r["delivery"] == 1.0



def test_regions_and_packets_on_the_wire_by_hand(tmp_path):
    """Figure 14 shape: group a of h0-h3 broken into regions by an artificial group x = h2, h3 (no sender): h0's
    messages go to r-a and r-a-x, two packets each. h0 sends seq 1-5 at t = 1..5: steady half [3, 5], 3 messages in
    2 s -> 1.5/s, 6 packets -> 3.0/s. With the udp transport the wire count is unknown here (None), and so is it
    for a log whose data_sent names no regions."""
    groups = [{"name": "a", "members": "all"}, {"name": "x", "members": ["h2", "h3"]}]
    ev = [e(f"h{i}", "node_started", 0.0, id=i) for i in range(4)]
    for seq in range(1, 6):
        ev.append(e("h0", "data_sent", float(seq), seq=seq, group_name="a", regions=["r-a", "r-a-x"]))
        ev += [e(f"h{i}", "data_received", seq + 0.01, origin=0, seq=seq) for i in (1, 2, 3)]
    r = values(tmp_path, ev, n=4, groups=groups, senders=["h0"])
    assert (r["groups"], r["regions"]) == (2, 2) and r["delivery"] == 1.0
    assert r["throughput"] == pytest.approx(1.5) and r["transmitted"] == pytest.approx(3.0)
    udp = qsm.qsm_values(load(qsm_run(tmp_path / "udp", ev, n=4, groups=groups, transport="udp")))
    assert udp["regions"] == 2 and udp["transmitted"] is None and udp["throughput"] == pytest.approx(1.5)
    for x in ev:
        x.pop("regions", None)
    old = values(tmp_path / "old", ev, n=4, groups=groups, senders=["h0"])
    assert old["regions"] is None and old["transmitted"] is None and old["throughput"] == pytest.approx(1.5)

def test_delivery_per_group_with_overlapping_groups(tmp_path):
    """Groups a = h0, h1, h2 (names and an id) and b = h2, h3; h0 sends 2 messages into a, h3 1 into b. a: h1 gets
    both, h2 only seq 1 -> 3 of 4; b: h2 gets it -> 1 of 1: 4 / 5 (the generic ratio expects all 3 others: h3
    never gets a's, h0 and h1 never b's -> (2/3 + 1/3 + 1/3) / 3)."""
    ev = [e(f"h{i}", "node_started", 0.0, id=i) for i in range(4)]
    ev += [e("h0", "data_sent", 0.2, seq=1, group_name="a"), e("h0", "data_sent", 1.2, seq=2, group_name="a"),
           e("h3", "data_sent", 0.5, seq=1, group_name="b"),
           e("h1", "data_received", 0.3, origin=0, seq=1), e("h1", "data_received", 1.3, origin=0, seq=2),
           e("h2", "data_received", 0.3, origin=0, seq=1), e("h2", "data_received", 0.6, origin=3, seq=1)]
    r = values(tmp_path, ev, n=4, groups=[{"name": "a", "members": ["h0", "h1", 2]},
                                          {"name": "b", "members": ["h2", "h3"]}])
    assert r["delivery"] == pytest.approx(0.8) and r["messages"] == 3 and r["receipts"] == 4
    assert r["delivery_ratio_mean"] == pytest.approx((2 / 3 + 1 / 3 + 1 / 3) / 3)
    assert r["groups"] == 2 and r["n_senders"] == 2


def joiners_log() -> list[dict]:
    """Group a of h0..h3, joiners h2 and h3 (the params'). h0 sends seq 1-4 at t = 1, 2, 3, 4. The GMS's view 1
    adds h2: h0 installs it at 2.5, h2 at 2.6, h1 at 2.7 (each logs `added`); no view adds h3. h1 receives all 4,
    h2 seq 3 only. Expected: h1 4; h2 what h0 sent from 2.5 on, seq 3 and 4; h3 nothing (never joined): 5 of 6."""
    out = [e(f"h{i}", "node_started", 0.0, id=i) for i in range(4)]
    out += [e("h0", "data_sent", float(s), seq=s, group_name="a") for s in (1, 2, 3, 4)]
    out += [e("h1", "data_received", s + 0.05, origin=0, seq=s) for s in (1, 2, 3, 4)]
    out += [e("h2", "data_received", 3.05, origin=0, seq=3)]
    out += [e(n, "gms_view", t, view=1, removed=[], added=[2]) for n, t in (("h0", 2.5), ("h2", 2.6), ("h1", 2.7))]
    return out


def test_a_joiner_expects_what_its_origins_sent_from_their_view_with_it_on(tmp_path):
    ev = joiners_log()
    r = values(tmp_path, ev, n=4, joiners=["h2", "h3"])
    assert r["delivery"] == pytest.approx(5 / 6)
    cut = qsm.join_cutoffs([(x["node"], x["ts"], x["view"], x["added"]) for x in ev if x["event"] == "gms_view"],
                           {"h2", "h3"}, {f"h{i}": i for i in range(4)})
    assert cut == {"h2": {"h0": T0 + 2.5, "h2": T0 + 2.6, "h1": T0 + 2.7}, "h3": {}}
    # without joiners in the params every member expects everything: 4 + 1 + 0 of 12
    assert values(tmp_path / "plain", ev, n=4)["delivery"] == pytest.approx(5 / 12)


def test_a_member_that_never_started_is_still_expected(tmp_path):
    # as the Spark delivery per group: the group's configured members; h2 logged nothing -> 9 of 18
    ev = [x for x in one_sender_log() if x["node"] != "h2"]
    r = values(tmp_path, ev)
    assert r["members"] == 3 and r["delivery"] == pytest.approx(0.5)
    assert r["delivered_min"] == 0.0                                 # h2 received nothing in the window


def test_a_crashed_member_is_not_expected(tmp_path):
    # the same log with h1 crashed by the schedule at 1.5 s: a's messages are expected at h2 only (1 of 2), b's at
    # h2 (1 of 1): 2 / 3 (the Spark table leaves it out alike: test_qsm_analysis.test_delivery_per_group)
    ev = [e(f"h{i}", "node_started", 0.0, id=i) for i in range(4)]
    ev += [e("h0", "data_sent", 0.2, seq=1, group_name="a"), e("h0", "data_sent", 1.2, seq=2, group_name="a"),
           e("h3", "data_sent", 0.5, seq=1, group_name="b"),
           e("h1", "data_received", 0.3, origin=0, seq=1), e("h1", "data_received", 1.3, origin=0, seq=2),
           e("h2", "data_received", 0.3, origin=0, seq=1), e("h2", "data_received", 0.6, origin=3, seq=1),
           e("orchestrator", "action_applied", 1.5, op="crash", targets=["h1"], actual_s=1.5)]
    r = values(tmp_path, ev, n=4, groups=[{"name": "a", "members": ["h0", "h1", 2]},
                                          {"name": "b", "members": ["h2", "h3"]}])
    assert r["delivery"] == pytest.approx(2 / 3) and r["crashed"] == ["h1"]


def rejoin_log() -> list[dict]:
    """Group a of h0..h3; h0 sends seq 1-6 at t = 1..6. The schedule crashes h2 at 1.5 s (view 1 removes it) and
    h3 at 4.5 s; h2 is restarted and view 2 adds it back: h0 installs it at 3.5, h1 at 3.6, h2 at 3.7. h3 was
    added back by view 2 too, but crashed again after: it expects nothing. h1 receives all 6; h2 seq 1 (its first
    process) and 5, 6 (its second). Expected: h1 6, h2 what h0 sent from 3.5 on (4, 5, 6): 8 of 9."""
    out = [e(f"h{i}", "node_started", 0.0, id=i) for i in range(4)]
    out += [e("h0", "data_sent", float(s), seq=s, group_name="a") for s in range(1, 7)]
    out += [e("h1", "data_received", s + 0.05, origin=0, seq=s) for s in range(1, 7)]
    out += [e("h2", "data_received", s + 0.05, origin=0, seq=s) for s in (1, 5, 6)]
    out += [e("orchestrator", "action_applied", 1.5, op="crash", targets=["h2"], actual_s=1.5),
            e("orchestrator", "action_applied", 4.5, op="crash", targets=["h3"], actual_s=4.5)]
    out += [e(n, "gms_view", t, view=1, removed=[2]) for n, t in (("h0", 2.0), ("h1", 2.0), ("h3", 2.0))]
    out += [e(n, "gms_view", t, view=2, removed=[], added=[2, 3])
            for n, t in (("h0", 3.5), ("h1", 3.6), ("h2", 3.7), ("h3", 3.6))]
    return out


def test_a_restarted_member_added_back_expects_what_a_joiner_does(tmp_path):
    ev = rejoin_log()
    r = values(tmp_path, ev, n=4)
    assert r["delivery"] == pytest.approx(8 / 9) and r["crashed"] == ["h2", "h3"] and r["rejoined"] == ["h2"]
    views = [(x["node"], x["ts"], x["view"], x.get("added")) for x in ev if x["event"] == "gms_view"]
    ids = {f"h{i}": i for i in range(4)}
    assert qsm.rejoined_members([("h2", T0 + 1.5), ("h3", T0 + 4.5)], views, ids) == {"h2"}
    # crashed again after it was added back: out again
    assert qsm.rejoined_members([("h2", T0 + 1.5), ("h2", T0 + 5.0)], views, ids) == set()


def test_summary_is_the_control_overhead_only():
    # the Spark summary: DATA 6 packets / 600 bytes, TOKEN 2 / 100, FORWARD 2 / 300: control 4 of 10 packets, 400 of
    # 1000 bytes; every other key number is run_values' (the tests above)
    data = {"overhead": [{"type_name": "DATA", "packets": 6, "bytes": 600},
                         {"type_name": "TOKEN", "packets": 2, "bytes": 100},
                         {"type_name": "FORWARD", "packets": 2, "bytes": 300}]}
    s = qsm.Qsm().summary(None, data)
    assert s == {"control_packets_fraction": pytest.approx(0.4), "control_bytes_fraction_qsm": pytest.approx(0.4)}
    assert qsm.Qsm().summary(None, {}) == {"control_packets_fraction": None, "control_bytes_fraction_qsm": None}


def test_virtual_time_reads_run_values(tmp_path):
    from analysis.virtual_time import _throughput

    d = qsm_run(tmp_path, one_sender_log(), dilation=4.0, cpu=0.5)
    run = load(d)
    assert run.dilation == 4.0 and run.end == pytest.approx(T0 + 10.0)     # the virtual end
    assert _throughput(d, "qsm") == {"throughput": pytest.approx(4 / 2.2), "delivery": pytest.approx(17 / 18)}
