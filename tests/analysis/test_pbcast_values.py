"""run_values of the pbcast family (analysis/protocols/pbcast.py, vsync.py, tradvsync.py) on small synthetic run
directories whose every number is worked out by hand in the comments: the delivery fraction over the members alive
at the send (with crashed members: the report's histogram), Figure 1's throughput windows and unperturbed members,
Figure 4's overhead, the first phase's model on the plan's tree, the bimodal histogram over the survivors, vsync's
latencies and view changes, tradvsync's refused sends, the experiment's parameters. No Spark.

`make_run` (a run directory: manifest with the spec, plan with a degree-4 tree, a config per member, the event
logs) and the event builders are shared with tests/analysis/test_figures_pbcast*.py."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis import protocols
from analysis.doc import Doc, Table
from analysis.protocols import ReportContext
from analysis.protocols.pbcast import common_report
from analysis.protocols.pbcast_values import delivery_bin, histogram, split
from analysis.rundir import load
from tests.analysis import synthetic

T0 = 1000.0


def tree(n: int, degree: int = 4) -> list[int | None]:
    from orchestrator.plan import tree_parents
    return tree_parents(n, degree)


def make_run(d: Path, events: list[dict], n: int, protocol: str = "pbcast", section: dict | None = None,
             senders: tuple[int, ...] = (1,), schedule: list | None = None, workload: dict | None = None,
             loss: float = 0.0, status: str = "completed", judges: dict | None = None, packing: dict | None = None,
             seed: int = 1, shift: float = T0) -> Path:
    """A run directory of `protocol` on members h0..h{n-1} (a degree-4 tree, every link direction with `loss`),
    senders by id; the spec's protocol section `section`, `schedule` and `workload`; every event's `ts` moved by
    `shift` (the protocol's t0: event times in the tests are relative to it)."""
    members = [{"id": i, "name": f"h{i}", "addr": f"10.0.{i // 200}.{i % 200 + 1}:7000"} for i in range(n)]
    (d / "configs").mkdir(parents=True)
    for m in members:
        cfg = {"name": m["name"], "id": m["id"], "listen": m["addr"], "members": members,
               "protocol": {"name": protocol}, "senders": list(senders)}
        (d / "configs" / f"{m['name']}.json").write_text(json.dumps(cfg))
    par = tree(n)
    nodes = [{"name": f"h{i}", "index": i, "role": "member", "address": members[i]["addr"].split(":")[0],
              "parent": None if p is None else f"h{p}"} for i, p in enumerate(par)]
    links = [{"id": f"h{p}-h{c}", "parent": f"h{p}", "child": f"h{c}", "down": {"loss": loss}, "up": {"loss": loss}}
             for c, p in enumerate(par) if p is not None]
    (d / "plan.json").write_text(json.dumps({"nodes": nodes, "links": links}))
    spec = {"name": d.name, "protocol": {protocol: section or {}}, "links": {"loss": f"{loss * 100:g}%"},
            "workload": workload or {}, "schedule": schedule or []}
    (d / "manifest.json").write_text(json.dumps({
        "run_id": d.name, "spec": spec, "seed": seed, "status": status, "t0_unix": T0, "started_at": T0 - 1,
        "ended_at": T0 + 60, "packing": packing or {"mode": "process"}}))
    if judges is not None:
        (d / "judges.json").write_text(json.dumps(judges))
    synthetic.write_event_logs(d, [{**e, "ts": e["ts"] + shift} for e in events])
    return d


def started(n: int, senders: list[int] = [1], ts: float = 0.5) -> list[dict]:  # noqa: B006 (never mutated)
    return [{"ts": ts, "node": f"h{i}", "event": "node_started", "id": i, "senders": senders} for i in range(n)]


def stopped(node: str, runtime: dict | None = None, **counters: int) -> dict:
    return {"ts": 30.0, "node": node, "event": "node_stopped", "reason": "duration", "runtime": runtime or {},
            "protocol": {"counters": counters}}


def recv(node: str, seq: int, repair: bool = False, ts: float = 5.0, origin: int = 1) -> dict:
    return {"ts": ts, "node": node, "event": "data_received", "origin": origin, "seq": seq, "repair": repair}


def sent(seq: int, ts: float, node: str = "h1") -> dict:
    return {"ts": ts, "node": node, "event": "data_sent", "seq": seq}


def action(ts: float, act: str, targets: list[str], actual_s: float | None = None) -> dict:
    e = {"ts": ts, "node": "orchestrator", "event": "action_applied", "action": act, "op": act, "targets": targets}
    if actual_s is not None:
        e["actual_s"] = actual_s
    return e


def values(d: Path, protocol: str | None = None) -> dict:
    run = load(d)
    return protocols.get(protocol or run.protocol).run_values(run)


# --- the delivery fraction: of the members alive at the send --------------------------------------------------------

def crash_log() -> list[dict]:
    """10 members, h1 sends seq 1..10 at 1.0, 1.5, ..., 5.5; at 3.0 (the action's actual_s) h7, h8 and h9 crash (30 %
    of the members). Every survivor (h0, h2..h6) delivers every message 10 ms after its send; the crashed members
    delivered seq 1..4 before they crashed, except h9, whose log lost seq 4 (the unflushed tail of a killed
    process)."""
    ev = started(10) + [action(3.0, "crash", ["h7", "h8", "h9"], actual_s=3.0)]
    for s in range(1, 11):
        t = 1.0 + 0.5 * (s - 1)
        ev.append(sent(s, t))
        for m in ("h0", "h2", "h3", "h4", "h5", "h6", "h7", "h8", "h9"):
            if m in ("h0", "h2", "h3", "h4", "h5", "h6") or s <= 3 or (s == 4 and m != "h9"):
                ev.append(recv(m, s, ts=t + 0.01))
    return ev + [stopped(f"h{i}") for i in range(7)]


def test_the_delivery_fraction_counts_the_members_alive_at_the_send(tmp_path):
    v = values(make_run(tmp_path / "r", crash_log(), 10))
    # seq 1-3 (sent 1.0-2.0): alive 9 (h0, h2..h9), all 9 got them: 1.0; seq 4 (2.5): 8 of 9 (h9's log lost it):
    # 0.889, bin 0.8; seq 5 (3.0, the crash's time: crashed at or before the send, so not alive) .. seq 10: alive 6,
    # all 6 got them: 1.0. Dividing by all 9 other members (the report's old histogram) put seq 5-10 at 6/9 = 0.667.
    assert v["delivery_histogram"] == {"0.8": 1, "1.0": 9}
    assert v["delivered_to_all_fraction"] == pytest.approx(0.9) and v["delivered_to_few_fraction"] == 0.0
    # the generic delivery ratio is the mean of the same fractions
    assert v["delivery_ratio_mean"] == pytest.approx((9 + 8 / 9) / 10) and v["data_messages"] == 10
    # the bimodal histogram is over the survivors (h0..h6 wrote node_stopped; h1 is the origin): every message at 1.0
    assert v["bimodal_crashed"] == ["h7", "h8", "h9"] and v["bimodal_n_survivors"] == 7
    assert v["bimodal_hist_all"][19] == 10 and v["bimodal_almost_all"] == 10 and v["bimodal_between"] == 0
    # the crash at t0 + 3.0; the last second [t0 + 2.0, t0 + 3.0) holds seq 3 and 4
    assert v["bimodal_crash_ts"] == pytest.approx(T0 + 3.0) and v["bimodal_last_messages"] == 2
    assert v["crash_fraction"] is None and v["p"] == 0.0


def test_the_reports_histogram_is_the_run_values_one(tmp_path):
    pytest.importorskip("matplotlib")
    d = make_run(tmp_path / "r", crash_log(), 10)
    run = load(d)
    v = protocols.get("pbcast").run_values(run)
    doc = Doc("r")
    common_report(doc, ReportContext(run, v, {"fig1": [], "per_s": [], "load": []}, [], tmp_path / "fig"))
    table = next(b for b in doc.blocks if isinstance(b, Table))
    assert table.rows == [["0.8", 1], ["1.0", 9]]
    assert (tmp_path / "fig" / "delivery_histogram.png").exists()


def test_delivery_bins():
    assert [delivery_bin(x) for x in (0.0, 0.09, 0.1, 2 / 3, 0.99, 1.0)] == [0.0, 0.0, 0.1, 0.6, 0.9, 1.0]


# --- Figure 1's throughput ------------------------------------------------------------------------------------------

def fig1_log(perturb: bool = True) -> list[dict]:
    """6 members, h1 sends 10 msgs/s from t = 1.0 to 5.9 (seq 1..50); the Figure 1 span is [2.0, 5.9): 7 windows of
    500 ms, [2.0, 5.5). h5 is perturbed (an action_applied record) and gets every other message; h2 misses
    everything sent in [3.0, 4.0); the others get every message 10 ms after its send."""
    ev = started(6)
    if perturb:
        ev.append(action(1.0, "perturb", ["h5"]))
    for s in range(1, 51):
        t = 1.0 + (s - 1) / 10
        ev.append(sent(s, t))
        for m in ("h0", "h2", "h3", "h4", "h5"):
            if m == "h2" and 3.0 <= t < 4.0 or m == "h5" and s % 2:
                continue
            ev.append(recv(m, s, ts=t + 0.01))
    return ev


def fig1_run(d: Path, perturb: bool = True, protocol: str = "tradvsync", **kw) -> Path:
    sched = [{"at": "1s", "action": "perturb", "nodes": ["h5"], "p": 0.3, "duration": "5s"}] if perturb else []
    return make_run(d, fig1_log(perturb), 6, protocol, section={"window": 5, "sender_buffer": 5}, schedule=sched,
                    workload={"rate_per_s": 10}, **kw)


def test_throughput_windows_and_the_unperturbed_members_by_hand(tmp_path):
    v = values(fig1_run(tmp_path / "r"))
    assert v["throughput_unperturbed_windows"] == 7
    assert v["perturbed_members"] == ["h5"] and v["unperturbed_members"] == ["h0", "h2", "h3", "h4"]
    # h0: deliveries at 2.01 .. 5.41 inside [2.0, 5.5): 35 in 3.5 s = 10/s; h2 misses the 10 sent in [3.0, 4.0)
    assert v["throughput_unperturbed_per_s"] == pytest.approx(10.0)           # median of 10, 7.14, 10, 10
    assert v["throughput_unperturbed_min_per_s"] == pytest.approx(25 / 3.5)
    assert v["throughput_perturbed_per_s"] == pytest.approx(17 / 3.5)          # even seqs 12..44
    assert v["sent_per_s"] == pytest.approx(10.0)
    # per second: 3 windows of 1 s in [2.0, 5.0) (the last send at 5.9)
    assert v["throughput_unperturbed_1s_per_s"] == pytest.approx(10.0)
    # with h5 perturbed, Figure 1's own values are the same
    assert v["fig1_throughput_per_s"] == v["throughput_unperturbed_per_s"] and v["fig1_unperturbed"] == 4
    assert v["fig1_throughput_perturbed_per_s"] == pytest.approx(17 / 3.5)
    assert (v["protocol"], v["members"], v["p"], v["buffer"], v["offered_per_s"]) == ("tradvsync", 6, 0.3, 5, 10)


def test_p0_sets_the_would_be_target_apart_in_figure_1s_values_only(tmp_path):
    v = values(fig1_run(tmp_path / "r", perturb=False))
    assert v["unperturbed_members"] == ["h0", "h2", "h3", "h4", "h5"] and v["perturbed_members"] == []
    assert v["throughput_perturbed_per_s"] is None
    assert v["fig1_unperturbed"] == 4 and v["fig1_throughput_per_s"] == pytest.approx(10.0)
    assert v["fig1_throughput_perturbed_per_s"] == pytest.approx(17 / 3.5) and v["p"] == 0.0


def test_no_sends_give_no_throughput(tmp_path):
    v = values(make_run(tmp_path / "r", started(3), 3, "tradvsync"))
    assert v["throughput_unperturbed_per_s"] is None and v["throughput_unperturbed_windows"] == 0
    assert v["delivery_histogram"] == {} and v["delivered_to_all_fraction"] is None


def test_at_most_80_windows(tmp_path):
    ev = started(3) + [sent(i, 1.0 + i / 10) for i in range(600)]
    ev += [recv(m, i, ts=1.0 + i / 10) for i in range(600) for m in ("h0", "h2")]
    v = values(make_run(tmp_path / "r", ev, 3, "tradvsync"))
    assert v["throughput_unperturbed_windows"] == 80 and v["throughput_unperturbed_per_s"] == pytest.approx(10.0)


def test_tradvsync_refused_sends_and_the_senders_packets(tmp_path):
    ev = fig1_log() + [{"ts": 2.0, "node": "h1", "event": "send_blocked", "attempts": 3},
                       {"ts": 2.5, "node": "h1", "event": "send_blocked"},
                       stopped("h1", runtime={"packets_in": 120, "packets_out": 130}, send_blocked=4),
                       stopped("h0", runtime={"packets_in": 1000, "packets_out": 1000})]
    v = values(fig1_run(tmp_path / "r"))
    assert v["refused"] == 0 and v["refused_counter"] is None and v["sender_pkts_per_msg"] is None
    d = make_run(tmp_path / "r2", ev, 6, "tradvsync", section={"window": 5})
    v = values(d)
    # attempts 3 + 1 (an event without attempts is one); the sender's 250 packets over its 50 multicasts
    assert v["refused"] == 4 and v["refused_counter"] == 4 and v["sender_pkts_per_msg"] == pytest.approx(5.0)


# --- Figure 4 and the first phase --------------------------------------------------------------------------------

def fig4_log() -> list[dict]:
    """4 members, h1 sends seq 1..4. Counters (overhead = digests + solicitations + repairs, sent + received):
    h0: digests 10 + 8, solicits 2 + 1, repairs 1 sent + 2 new + 1 duplicate received -> 18, 3, 4 = 25;
    h1: digests 10 + 12, solicits 0 + 2, repairs 3 -> 22, 2, 3 = 27 (its 4 sent_data are not overhead);
    h2: digests 10 + 10, solicit 1 sent, repair 1 received -> 20, 1, 1 = 22; h3: digests 10 + 10 -> 20."""
    ev = started(4) + [sent(s, 1.0 + s) for s in range(1, 5)]
    ev += [stopped("h0", sent_digest=10, recv_digest=8, sent_solicit=2, recv_solicit=1, sent_repair=1, recv_repair=2,
                   duplicate_repair=1, recv_data=2, duplicate_data=3),
           stopped("h1", sent_data=4, sent_digest=10, recv_digest=12, recv_solicit=2, sent_repair=3, sent_push=1),
           stopped("h2", sent_digest=10, recv_digest=10, sent_solicit=1, recv_repair=1, recv_data=2),
           stopped("h3", sent_digest=10, recv_digest=10, recv_data=3)]
    # deliveries: h0 all four (seq 3 by repair), h2 seq 1-3 (seq 2 by repair; seq 1 logged twice), h3 seq 1, 2, 4
    ev += [recv("h0", 1), recv("h0", 2), recv("h0", 3, True), recv("h0", 4),
           recv("h2", 1), recv("h2", 1), recv("h2", 2, True), recv("h2", 3),
           recv("h3", 1), recv("h3", 2), recv("h3", 4)]
    return ev


def test_fig4_overhead_per_member_per_multicast_by_hand(tmp_path):
    v = values(make_run(tmp_path / "r", fig4_log(), 4, loss=0.1))
    assert v["data_messages"] == 4 and v["members_stopped"] == 4
    assert v["overhead"] == pytest.approx((25 + 27 + 22 + 20) / 16)        # 5.875
    assert v["overhead_max"] == pytest.approx(6.75) and v["overhead_sender"] == pytest.approx(6.75)
    assert v["overhead_rest"] == pytest.approx((25 + 22 + 20) / 12)
    assert v["overhead_digest"] == pytest.approx(80 / 16)
    assert v["overhead_solicit"] == pytest.approx(6 / 16) and v["overhead_repair"] == pytest.approx(8 / 16)
    assert v["overhead_repair_traffic"] == pytest.approx(6 / 16 + 8 / 16)
    # 10 distinct deliveries, 2 by repair; of 4 x 3 expected; seq 1 and 2 reached all three others
    assert v["deliveries"] == 10 and v["repair_fraction"] == pytest.approx(0.2)
    assert v["delivery_ratio_mean"] == pytest.approx(10 / 12) and v["delivered_to_all_fraction"] == pytest.approx(0.5)
    assert v["delivery_histogram"] == {"0.6": 2, "1.0": 2}
    # the tree: h0 is the root of h1, h2, h3; from the sender h1: h0 1 hop, h2 and h3 2 hops; loss 0.1 per link
    assert v["first_phase_hops"] == pytest.approx(5 / 3)
    assert v["first_phase_miss"] == pytest.approx((0.1 + 2 * (1 - 0.9 ** 2)) / 3)      # 0.16
    assert v["overhead_counted_over"] == "whole run" and v["overhead_whole_run"] == pytest.approx(5.875)


def test_fig4_overhead_is_counted_over_the_multicast_period(tmp_path):
    """The same members with their `pbcast_counters` at the window's edges: each sent and received 1 digest before
    the window opened and 2 after it closed (rounds without multicasts), so each member's period overhead is its
    whole-run one less 6 digests: h0 19, h1 21, h2 16, h3 14 over 4 multicasts; the whole run's stays beside."""
    ev = fig4_log()
    final = {e["node"]: e["protocol"]["counters"] for e in ev if e["event"] == "node_stopped"}
    for node, c in final.items():
        ev.append({"ts": 2.0, "node": node, "event": "pbcast_counters", "window": "start",
                   "counters": {"sent_digest": 1, "recv_digest": 1}})
        ev.append({"ts": 5.5, "node": node, "event": "pbcast_counters", "window": "stop",
                   "counters": {**c, "sent_digest": c["sent_digest"] - 2, "recv_digest": c["recv_digest"] - 2}})
    v = values(make_run(tmp_path / "r", ev, 4, loss=0.1))
    assert v["overhead_counted_over"] == "multicast period" and v["overhead_members"] == 4
    assert v["overhead"] == pytest.approx((19 + 21 + 16 + 14) / 16)        # 4.375
    assert v["overhead_sender"] == pytest.approx(21 / 4) and v["overhead_rest"] == pytest.approx(49 / 12)
    assert v["overhead_digest"] == pytest.approx((80 - 24) / 16)
    assert v["overhead_solicit"] == pytest.approx(6 / 16) and v["overhead_repair"] == pytest.approx(8 / 16)
    assert v["overhead_whole_run"] == pytest.approx(5.875)
    # a member without the closing edge (it crashed) is left out of the period's mean
    ev = [e for e in ev if not (e["event"] == "pbcast_counters" and e["node"] == "h3" and e["window"] == "stop")]
    v = values(make_run(tmp_path / "r2", ev, 4, loss=0.1))
    assert v["overhead_members"] == 3 and v["overhead"] == pytest.approx((19 + 21 + 16) / 12)


def test_first_phase_on_larger_trees_equals_networkx_shortest_paths(tmp_path):
    nx = pytest.importorskip("networkx")
    for n, sender in ((50, 1), (130, 7)):
        d = make_run(tmp_path / f"r{n}", started(n, [sender]), n, senders=(sender,), loss=0.01)
        g = nx.Graph([(i, q) for i, q in enumerate(tree(n)) if q is not None])
        dist = nx.single_source_shortest_path_length(g, sender)
        v = values(d)
        assert v["first_phase_hops"] == pytest.approx(sum(dist[u] for u in range(n) if u != sender) / (n - 1))
        assert v["first_phase_miss"] == pytest.approx(
            sum(1 - 0.99 ** dist[u] for u in range(n) if u != sender) / (n - 1))
    # two senders: no single first phase
    v = values(make_run(tmp_path / "two", started(8), 8, senders=(1, 2), loss=0.01))
    assert v["first_phase_hops"] is None and v["first_phase_miss"] is None


# --- the bimodal histogram ----------------------------------------------------------------------------------------

def bimodal_log() -> list[dict]:
    """6 members, h1 sends seq 1..6 at 8.0, 8.5, 9.0, 9.2, 9.5, 9.9; at 10.0 h1 and h4 crash (the action, without
    actual_s: its record's time); h5 never writes node_stopped (crashed too). Survivors h0, h2, h3. Delivered by
    survivors: seq 1: 3, seq 2: 3 (and h4), seq 3: h0, h2, seq 4: h0 (and h5), seq 5: none (only h4), seq 6: 3."""
    ev = started(6) + [action(10.0, "crash", ["h1", "h4"])]
    ev += [sent(s, t) for s, t in zip(range(1, 7), (8.0, 8.5, 9.0, 9.2, 9.5, 9.9))]
    got = {1: "h0 h2 h3", 2: "h0 h2 h3 h4", 3: "h0 h2", 4: "h0 h5", 5: "h4", 6: "h0 h2 h3"}
    ev += [recv(m, s, ts=9.0 + s / 10) for s, ms in got.items() for m in ms.split()]
    return ev + [stopped(m) for m in ("h0", "h2", "h3")]


def bimodal(tmp_path: Path, events: list[dict], rate: float | None = None, name: str = "r") -> dict:
    v = values(make_run(tmp_path / name, events, 6, workload={"rate_per_s": rate} if rate else {}))
    return {k[len("bimodal_"):]: x for k, x in v.items() if k.startswith("bimodal_")}


def test_bimodal_fractions_histograms_and_split_by_hand(tmp_path):
    r = bimodal(tmp_path, bimodal_log())
    assert r["crashed"] == ["h1", "h4", "h5"] and r["survivors"] == ["h0", "h2", "h3"]
    assert r["crash_ts"] == pytest.approx(T0 + 10.0)
    # fractions 1, 1, 2/3, 1/3, 0, 1: bins of 0.05: 1.0 -> 19, 2/3 -> 13, 1/3 -> 6, 0 -> 0; the last second
    # [9.0, 10.0) holds seq 3-6
    want_all = [0] * 20
    want_all[19], want_all[13], want_all[6], want_all[0] = 3, 1, 1, 1
    want_last = [0] * 20
    want_last[19] = want_last[13] = want_last[6] = want_last[0] = 1
    assert r["hist_all"] == want_all and r["hist_last"] == want_last
    assert (r["messages"], r["almost_all"], r["almost_none"], r["between"]) == (6, 3, 1, 2)
    assert (r["last_messages"], r["last_almost_all"], r["last_almost_none"], r["last_between"]) == (4, 1, 1, 2)
    assert (r["n_crashed"], r["n_survivors"], r["sent_extrapolated"]) == (3, 3, 0)


def test_bimodal_counts_the_sends_a_crashed_sender_did_not_log(tmp_path):
    """The sender's log loses seq 6's data_sent (received by the three survivors, first at 9.6); seq 8 is known only
    from a crashed member's reception at 9.95; seq 7 from the gap (no record at all: sent at seq 6's time)."""
    ev = [e for e in bimodal_log() if not (e["event"] == "data_sent" and e["seq"] == 6)] + [recv("h4", 8, ts=9.95)]
    r = bimodal(tmp_path, ev)
    # fractions 1, 1, 2/3, 1/3, 0, 1 (seq 6), 0 (seq 7), 0 (seq 8)
    assert (r["messages"], r["almost_all"], r["almost_none"], r["between"]) == (8, 3, 3, 2)
    assert (r["sent_unlogged"], r["sent_unseen"]) == (3, 1)
    # the last second [9.0, 10.0): seq 3-8 -> 2/3, 1/3, 0, 1, 0, 0
    assert (r["last_messages"], r["last_almost_all"], r["last_almost_none"], r["last_between"]) == (6, 1, 3, 2)
    # with the action's actual_s the crash is at t0 + 9.8: [8.8, 9.8) holds seq 3-7 (seq 6 and 7 at 9.6)
    for e in ev:
        if e["event"] == "action_applied":
            e["actual_s"] = 9.8
    r = bimodal(tmp_path, ev, name="r2")
    assert r["crash_ts"] == pytest.approx(T0 + 9.8) and r["last_messages"] == 5 and r["last_almost_none"] == 2


def test_bimodal_extrapolates_a_crashed_senders_unlogged_tail_at_the_offered_rate(tmp_path):
    """The last logged send is seq 6 at 9.9, the crash at 10.0: at 20/s seq 7 (9.95) and 8 (10.0) were due; nobody
    received them, so they count with fraction 0. At 5/s nothing more was due."""
    r = bimodal(tmp_path, bimodal_log(), rate=20)
    assert r["sent_extrapolated"] == 2 and (r["messages"], r["almost_none"]) == (8, 3)
    assert r["last_messages"] == 5            # seq 7 at 9.95 is inside the last second, seq 8 at 10.0 is not
    assert bimodal(tmp_path, bimodal_log(), rate=5, name="r5")["sent_extrapolated"] == 0


def test_histogram_bin_edges_and_split():
    h = histogram([0.0, 0.049, 0.05, 0.15, 0.95, 1.0, 0.3])
    assert h[0] == 2 and h[1] == 1 and h[3] == 1 and h[6] == 1 and h[19] == 2 and sum(h) == 7
    assert split([0.0, 0.05, 0.5, 0.95, 1.0]) == {"messages": 5, "almost_all": 2, "almost_none": 2, "between": 1}


# --- vsync: Figure 10 and Table 2 -------------------------------------------------------------------------------------

def vsync_log() -> list[dict]:
    """4 members, h0 leads, h1 sends 10/s from 1.0 to 5.9 (seq 1..50); h0 and h2 get every multicast 10 ms after
    its send, h3 misses those sent in [3.0, 4.0). Figure 1's span [2.0, 5.5): 7 windows of 500 ms; 1 s windows:
    [2.0, 5.0). Two sends refused (attempts 1 and 3), two view changes decided at h0 in 1.0 s and 0.5 s (h3 dropped
    in the first), installed at h0 after 1.2 s and 0.6 s; own deliveries 1, 2, 6 ms (and one without a latency);
    Gseq Acks 0.5 and 1.5 ms."""
    ev = started(4)
    for s in range(1, 51):
        t = 1.0 + (s - 1) / 10
        ev.append(sent(s, t))
        ev += [recv(m, s, ts=t + 0.01) for m in ("h0", "h2", "h3") if not (m == "h3" and 3.0 <= t < 4.0)]
    ev += [{"ts": 2.0, "node": "h1", "event": "send_blocked", "attempts": 1, "pending": 10},
           {"ts": 2.5, "node": "h1", "event": "send_blocked", "attempts": 3, "pending": 10},
           {"ts": 3.0, "node": "h0", "event": "view_change_decided", "view": 1, "duration_s": 1.0, "dropped": [3]},
           {"ts": 3.2, "node": "h0", "event": "view_installed", "view": 1, "duration_s": 1.2, "dropped": [3]},
           {"ts": 3.2, "node": "h2", "event": "view_installed", "view": 1, "dropped": [3]},
           {"ts": 3.3, "node": "h3", "event": "dropped", "view": 1},
           {"ts": 5.0, "node": "h0", "event": "view_change_decided", "view": 2, "duration_s": 0.5, "dropped": []},
           {"ts": 5.1, "node": "h0", "event": "view_installed", "view": 2, "duration_s": 0.6, "dropped": []}]
    ev += [{"ts": 2.0, "node": "h1", "event": "own_delivered", "seq": s, "latency_s": x}
           for s, x in ((1, 0.001), (2, 0.002), (3, 0.006), (4, None))]
    ev += [{"ts": 2.0, "node": "h1", "event": "gseq_acked", "seq": s, "latency_s": x}
           for s, x in ((1, 0.0005), (2, 0.0015))]
    return ev + [stopped("h1", send_blocked=4, sent_data=50)]


def vsync_section(k: int = 1) -> dict:
    return {"k": k, "sender_buffer": 10 + 5 * k, "ack_defer": "500ms"}


def test_vsync_values_by_hand(tmp_path):
    v = values(make_run(tmp_path / "r", vsync_log(), 4, "vsync", section=vsync_section(2),
                        workload={"rate_per_s": 100}))
    # 500 ms windows: h0, h2 35 in 3.5 s = 10/s, h3 25 / 3.5; median 10. 1 s windows: 30/3 = 10, 10, 20/3
    assert v["throughput_unperturbed_per_s"] == pytest.approx(10.0)
    assert v["throughput_unperturbed_1s_per_s"] == pytest.approx(10.0)
    assert v["unperturbed_members"] == ["h0", "h2", "h3"] and v["sent_per_s"] == pytest.approx(10.0)
    assert v["refused"] == 4 and v["refused_counter"] == 4
    assert v["view_changes"] == 2 and v["vc_mean_s"] == pytest.approx(0.75) and v["vc_max_s"] == 1.0
    assert v["vc_install_mean_s"] == pytest.approx(0.9) and v["vc_install_max_s"] == pytest.approx(1.2)
    assert v["dropped"] == ["h3"] and v["dropped_n"] == 1
    assert v["own_mean_ms"] == pytest.approx(3.0) and v["own_max_ms"] == pytest.approx(6.0) and v["own_n"] == 3
    # nearest rank over 1, 2, 6 ms: the median is the 2nd (2 ms), the 99th percentile the 3rd (6 ms)
    assert v["own_median_ms"] == pytest.approx(2.0) and v["own_p99_ms"] == pytest.approx(6.0)
    assert v["gseq_mean_ms"] == pytest.approx(1.0) and v["gseq_max_ms"] == pytest.approx(1.5)
    assert (v["k"], v["buffer"], v["ack_defer"], v["ack_wait"], v["offered_per_s"]) == (2, 20, "500ms", "all", 100)


def test_the_experiments_parameters(tmp_path):
    sched = [{"at": "6s", "action": "crash", "nodes": ["h1"]}, {"at": "6s", "action": "crash", "fraction": 0.25},
             {"at": "1s", "action": "perturb", "nodes": ["h5"], "p": 0.2, "duration": "5s"}]
    d = make_run(tmp_path / "r", started(8), 8, section={"first_phase": "none", "gc_c": 0.5}, schedule=sched,
                 workload={"rate_per_s": 100}, loss=0.05, packing={"mode": "packed", "members_per_process": 16})
    v = values(d)
    assert (v["protocol"], v["members"], v["offered_per_s"], v["loss"], v["packing"]) == (
        "pbcast", 8, 100, "5%", "packs of 16")
    assert (v["p"], v["crash_fraction"], v["phase"], v["gc_c"]) == (0.2, 0.25, "none", 0.5)
