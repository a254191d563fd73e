"""analysis.figures_pbcast_more: Figure 4's overhead per member per multicast, the bimodal histogram, Figure 10's
and Table 2's vsync values, each from a small hand-made event log with the expected numbers worked out by hand in
the comments; the least-squares fits on points that lie exactly on a + b log2 n; and the CLI on synthetic run
directories."""
from __future__ import annotations

from tests.analysis import synthetic  # noqa: E402

import csv
import json
import math
import statistics
from pathlib import Path

import pytest

from analysis import figures_pbcast_more as fm


def started(n: int, senders: list[int] = [1]) -> list[dict]:  # noqa: B006 (never mutated)
    return [{"ts": 0.5, "node": f"h{i}", "event": "node_started", "id": i, "senders": senders} for i in range(n)]


def stopped(node: str, **counters: int) -> dict:
    return {"ts": 30.0, "node": node, "event": "node_stopped", "reason": "duration", "runtime": {},
            "protocol": {"counters": counters}}


def recv(node: str, seq: int, repair: bool = False, ts: float = 5.0, origin: int = 1) -> dict:
    return {"ts": ts, "node": node, "event": "data_received", "origin": origin, "seq": seq, "repair": repair}


# --- Figure 4 -----------------------------------------------------------------------------------------------------

def fig4_log() -> list[dict]:
    """4 members, h1 sends seq 1..4. Counters (overhead = digests + solicitations + repairs, sent + received):
    h0: digests 10 + 8, solicits 2 + 1, repairs 1 sent + 2 new + 1 duplicate received -> 18, 3, 4 = 25;
    h1: digests 10 + 12, solicits 0 + 2, repairs 3 -> 22, 2, 3 = 27 (its 4 sent_data are not overhead);
    h2: digests 10 + 10, solicit 1 sent, repair 1 received -> 20, 1, 1 = 22; h3: digests 10 + 10 -> 20."""
    ev = started(4)
    ev += [{"ts": 1.0 + s, "node": "h1", "event": "data_sent", "seq": s} for s in range(1, 5)]
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


def test_fig4_overhead_per_member_per_multicast_by_hand():
    r = fm.fig4_run(fig4_log())
    assert r["multicasts"] == 4 and r["members_stopped"] == 4
    assert r["per_member"]["h0"] == pytest.approx({"digest": 4.5, "solicit": 0.75, "repair": 1.0, "total": 6.25})
    assert r["per_member"]["h1"]["total"] == pytest.approx(27 / 4)
    assert r["overhead"] == pytest.approx((25 + 27 + 22 + 20) / 16)        # 5.875
    assert r["overhead_max"] == pytest.approx(6.75)
    assert r["overhead_sender"] == pytest.approx(6.75)
    assert r["overhead_rest"] == pytest.approx((25 + 22 + 20) / 12)
    assert r["digest"] == pytest.approx(80 / 16)
    assert r["solicit"] == pytest.approx(6 / 16)
    assert r["repair"] == pytest.approx(8 / 16)
    assert r["repair_traffic"] == pytest.approx(6 / 16 + 8 / 16)
    # 10 distinct deliveries, 2 by repair; of 4 x 3 possible; seq 1 and 2 reached all three others
    assert r["deliveries"] == 10
    assert r["repair_fraction"] == pytest.approx(0.2)
    assert r["delivery_ratio"] == pytest.approx(10 / 12)
    assert r["delivered_to_all"] == pytest.approx(0.5)


def test_fits_on_exact_log_points_and_the_linear_alternative():
    ns = [8, 16, 32, 64]
    ys = [2 + 3 * math.log2(n) for n in ns]                # 11, 14, 17, 20
    f = fm.fits(ns, ys)
    assert f["log2"]["a"] == pytest.approx(2.0) and f["log2"]["b"] == pytest.approx(3.0)
    assert f["log2"]["r2"] == pytest.approx(1.0)
    # linear by hand: mean n 30, mean y 15.5, Sxx 1840, Sxy 276 -> b 0.15, a 11; residuals -1.2, 0.6, 1.2, -0.6:
    # SSE 3.6, SST 45 -> R^2 0.92
    assert f["linear"]["b"] == pytest.approx(0.15) and f["linear"]["a"] == pytest.approx(11.0)
    assert f["linear"]["r2"] == pytest.approx(0.92)
    assert f["linear"]["n"] == 4
    one = fm.fit_line([5, 5], [1, 2])
    assert one["b"] is None and one["r2"] is None


# --- the bimodal histogram ----------------------------------------------------------------------------------------

def bimodal_log() -> list[dict]:
    """6 members, h1 sends seq 1..6 at 8.0, 8.5, 9.0, 9.2, 9.5, 9.9; at 10.0 h1 and h4 crash (the action); h5 never
    writes node_stopped (crashed too). Survivors h0, h2, h3. Delivered by survivors: seq 1: 3, seq 2: 3 (and h4),
    seq 3: h0, h2, seq 4: h0 (and h5), seq 5: none (only h4), seq 6: 3."""
    ev = started(6)
    ev.append({"ts": 10.0, "node": "orchestrator", "event": "action_applied", "action": "crash", "op": "crash",
               "targets": ["h1", "h4"]})
    for s, t in zip(range(1, 7), (8.0, 8.5, 9.0, 9.2, 9.5, 9.9)):
        ev.append({"ts": t, "node": "h1", "event": "data_sent", "seq": s})
    got = {1: "h0 h2 h3", 2: "h0 h2 h3 h4", 3: "h0 h2", 4: "h0 h5", 5: "h4", 6: "h0 h2 h3"}
    ev += [recv(m, s, ts=9.0 + s / 10) for s, ms in got.items() for m in ms.split()]
    ev += [stopped(m) for m in ("h0", "h2", "h3")]
    return ev


def test_bimodal_fractions_histograms_and_split_by_hand():
    r = fm.bimodal_run(bimodal_log())
    assert r["crashed"] == ["h1", "h4", "h5"] and r["survivors"] == ["h0", "h2", "h3"]
    assert r["crash_ts"] == 10.0
    assert [f for *_, f in r["fractions"]] == pytest.approx([1, 1, 2 / 3, 1 / 3, 0, 1])
    # bins of 0.05: 1.0 -> 19, 2/3 -> 13, 1/3 -> 6, 0 -> 0; the last second [9.0, 10.0) holds seq 3-6
    want_all = [0] * 20
    want_all[19], want_all[13], want_all[6], want_all[0] = 3, 1, 1, 1
    want_last = [0] * 20
    want_last[19] = want_last[13] = want_last[6] = want_last[0] = 1
    assert r["hist_all"] == want_all and r["hist_last"] == want_last
    assert (r["messages"], r["almost_all"], r["almost_none"], r["between"]) == (6, 3, 1, 2)
    assert (r["last_messages"], r["last_almost_all"], r["last_almost_none"], r["last_between"]) == (4, 1, 1, 2)


def test_bimodal_counts_the_sends_a_crashed_sender_did_not_log():
    """The sender's log loses seq 6's data_sent (received by the three survivors, first at 9.6); seq 8 is known only
    from a crashed member's reception at 9.95; seq 7 from the gap (no record at all: sent at seq 6's time)."""
    ev = [e for e in bimodal_log() if not (e["event"] == "data_sent" and e["seq"] == 6)]
    ev.append(recv("h4", 8, ts=9.95))
    r = fm.bimodal_run(ev)
    assert [(s, t) for _, s, t, _ in r["fractions"][5:]] == [(6, 9.6), (7, 9.6), (8, 9.95)]
    assert [f for *_, f in r["fractions"]] == pytest.approx([1, 1, 2 / 3, 1 / 3, 0, 1, 0, 0])
    assert (r["sent_unlogged"], r["sent_unseen"]) == (3, 1)
    # the last second [9.0, 10.0): seq 3-8 -> 2/3, 1/3, 0, 1, 0, 0
    assert (r["last_messages"], r["last_almost_all"], r["last_almost_none"], r["last_between"]) == (6, 1, 3, 2)
    # with t0 the crash is at t0 + actual_s = 0.3 + 9.5 = 9.8: [8.8, 9.8) holds seq 3-7
    for e in ev:
        if e["event"] == "action_applied":
            e["actual_s"] = 9.5
    r = fm.bimodal_run(ev, t0=0.3)
    assert r["crash_ts"] == pytest.approx(9.8) and r["last_messages"] == 5 and r["last_almost_none"] == 2


def test_bimodal_extrapolates_a_crashed_senders_unlogged_tail_at_the_offered_rate():
    """The last logged send is seq 6 at 9.9, the crash at 10.0: at 20/s seq 7 (9.95) and 8 (10.0) were due; nobody
    received them, so they count with fraction 0. At 5/s nothing more was due."""
    r = fm.bimodal_run(bimodal_log(), rate_per_s=20)
    assert r["sent_extrapolated"] == 2
    assert [(s, t, f) for _, s, t, f in r["fractions"][6:]] == [(7, pytest.approx(9.95), 0.0),
                                                                (8, pytest.approx(10.0), 0.0)]
    assert (r["messages"], r["almost_none"]) == (8, 3)
    assert fm.bimodal_run(bimodal_log(), rate_per_s=5)["sent_extrapolated"] == 0
    assert fm.bimodal_run(bimodal_log())["sent_extrapolated"] == 0


def test_histogram_bin_edges():
    h = fm.histogram([0.0, 0.049, 0.05, 0.15, 0.95, 1.0, 0.3])
    assert h[0] == 2 and h[1] == 1 and h[3] == 1 and h[6] == 1 and h[19] == 2 and sum(h) == 7


# --- Figure 10 and Table 2 ----------------------------------------------------------------------------------------

def vsync_log() -> list[dict]:
    """4 members, h0 leads, h1 sends 10/s from 1.0 to 5.9 (seq 1..50); h0 and h2 get every multicast 10 ms after
    its send, h3 misses those sent in [3.0, 4.0). Figure 1's span [2.0, 5.5): 7 windows of 500 ms; 1 s windows:
    [2.0, 5.0). Two sends refused (attempts 1 and 3), two view changes decided at h0 in 1.0 s and 0.5 s (h3 dropped
    in the first), installed at h0 after 1.2 s and 0.6 s; own deliveries 1, 2, 6 ms (and one without a latency);
    Gseq Acks 0.5 and 1.5 ms."""
    ev = started(4)
    for s in range(1, 51):
        t = 1.0 + (s - 1) / 10
        ev.append({"ts": t, "node": "h1", "event": "data_sent", "seq": s})
        for m in ("h0", "h2", "h3"):
            if not (m == "h3" and 3.0 <= t < 4.0):
                ev.append(recv(m, s, ts=t + 0.01))
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
    ev += [stopped("h1", send_blocked=4, sent_data=50)]
    return ev


def test_vsync_run_by_hand():
    r = fm.vsync_run(vsync_log())
    # 500 ms windows: h0, h2 35 in 3.5 s = 10/s, h3 25 / 3.5; median 10. 1 s windows: 30/3 = 10, 10, 20/3
    assert r["throughput"] == pytest.approx(10.0) and r["throughput_1s"] == pytest.approx(10.0)
    assert r["unperturbed"] == 3 and r["sent_per_s"] == pytest.approx(10.0)
    assert r["refused"] == 4 and r["refused_counter"] == 4
    assert r["view_changes"] == 2 and r["vc_mean_s"] == pytest.approx(0.75) and r["vc_max_s"] == 1.0
    assert r["vc_install_mean_s"] == pytest.approx(0.9) and r["vc_install_max_s"] == pytest.approx(1.2)
    assert r["dropped"] == ["h3"] and r["dropped_n"] == 1
    assert r["own_mean_ms"] == pytest.approx(3.0) and r["own_max_ms"] == pytest.approx(6.0) and r["own_n"] == 3
    # nearest rank over 1, 2, 6 ms: the median is the 2nd (2 ms), the 99th percentile the 3rd (6 ms)
    assert r["own_median_ms"] == pytest.approx(2.0) and r["own_p99_ms"] == pytest.approx(6.0)
    assert r["gseq_mean_ms"] == pytest.approx(1.0) and r["gseq_max_ms"] == pytest.approx(1.5)


def test_aggregate_student_t_and_tables():
    runs = [{"k": 2, "offered_per_s": 100, "buffer": 20, "own_mean_ms": 2.0, "throughput_1s": 98.0},
            {"k": 2, "offered_per_s": 100, "buffer": 20, "own_mean_ms": 3.0, "throughput_1s": 97.0},
            {"k": 1, "offered_per_s": 100, "buffer": 15, "own_mean_ms": 1.5, "throughput_1s": None}]
    agg = fm.aggregate("table2", runs)
    assert [(a["k"], a["runs"]) for a in agg] == [(1, 1), (2, 2)]
    assert agg[1]["own_mean_ms"] == pytest.approx(2.5)
    # Student t with 1 degree of freedom: 12.706 * stdev / sqrt(2) = 12.706 * 0.7071 / 1.4142 = 6.353
    assert agg[1]["own_mean_ms_ci95"] == pytest.approx(12.706 * statistics.stdev([2.0, 3.0]) / 2 ** 0.5, rel=1e-3)
    assert agg[0]["own_mean_ms_ci95"] is None and agg[0]["throughput_1s_n"] == 0
    md = fm.markdown("table2", agg)
    assert "| 2 | - | 2 | 2.50 ± 6.35 (2) | 1.68 |" in md and "192.09" in md
    b = fm.aggregate("bimodal", [{"members": 6, "crash_fraction": 0.25, "loss": "5%", "hist_all": [1, 2],
                                  "hist_last": [0, 1], "messages": 3},
                                 {"members": 6, "crash_fraction": 0.25, "loss": "5%", "hist_all": [3, 4],
                                  "hist_last": [1, 1], "messages": 7}])
    assert b[0]["hist_all"] == [4, 6] and b[0]["hist_last"] == [1, 2] and b[0]["messages"] == 5.0


# --- the CLI on synthetic run directories -------------------------------------------------------------------------

def write_run(d: Path, events: list[dict], spec: dict, seed: int = 1) -> Path:
    synthetic.write_event_logs(d, events)
    (d / "manifest.json").write_text(json.dumps({"spec": spec, "seed": seed, "status": "completed", "t0_unix": 0.5,
                                                 "started_at": 0.0, "ended_at": 40.0}))
    return d


def log_overhead(n: int) -> list[dict]:
    """n members, h1 sends 4 multicasts, every member's overhead is 2 + 3 log2 n digests per multicast."""
    per = int(2 + 3 * math.log2(n))
    ev = started(n) + [{"ts": 1.0 + s, "node": "h1", "event": "data_sent", "seq": s} for s in range(1, 5)]
    ev += [recv(f"h{i}", s) for i in range(n) if i != 1 for s in range(1, 5)]
    return ev + [stopped(f"h{i}", sent_digest=4 * per) for i in range(n)]


def pb_spec(**wl) -> dict:
    return {"protocol": {"pbcast": {"round": "100ms"}}, "links": {"loss": "0.1%"},
            "workload": {"rate_per_s": 20, **wl}, "schedule": []}


def vs_spec(k: int) -> dict:
    return {"protocol": {"vsync": {"k": k, "sender_buffer": 10 + 5 * k}}, "links": {},
            "workload": {"rate_per_s": 100}, "schedule": []}


def test_cli_all_four(tmp_path):
    pytest.importorskip("matplotlib")
    d4 = [write_run(tmp_path / f"f4-{n}-{s}", log_overhead(n), pb_spec(), seed=s) for n in (4, 8, 16) for s in (1, 2)]
    out = tmp_path / "out4"
    assert fm.main(["fig4", *map(str, d4), "--out", str(out)]) == 0
    for f in ("runs.csv", "summary.csv", "summary.json", "tables.md", "fig4.png"):
        assert (out / f).stat().st_size > 0, f
    s = json.loads((out / "summary.json").read_text())
    # overhead 8, 11, 14 at n = 4, 8, 16: exactly 2 + 3 log2 n
    assert [p["overhead"] for p in s["points"]] == pytest.approx([8.0, 11.0, 14.0])
    fit = s["fits"]["runs"]["overhead"]["log2"]
    assert (fit["a"], fit["b"], fit["r2"]) == pytest.approx((2.0, 3.0, 1.0))
    assert s["fits"]["runs"]["overhead"]["linear"]["r2"] < 1.0
    rows = list(csv.DictReader((out / "runs.csv").open()))
    assert len(rows) == 6 and rows[0]["members"] == "4" and rows[0]["loss"] == "0.1%"
    assert float(rows[0]["delivery_ratio"]) == pytest.approx(1.0)

    sched = [{"at": "6s", "action": "crash", "nodes": ["h1"]}, {"at": "6s", "action": "crash", "fraction": 0.25}]
    db = write_run(tmp_path / "bm", bimodal_log(), {**pb_spec(), "schedule": sched})
    out = tmp_path / "outb"
    assert fm.main(["bimodal", str(db), "--out", str(out), "--load", str(_load(tmp_path))]) == 0
    row = next(csv.DictReader((out / "runs.csv").open()))
    assert (row["messages"], row["almost_all"], row["almost_none"], row["between"]) == ("8", "3", "3", "2")  # seq 7, 8 extrapolated at 20/s
    assert row["crash_fraction"] == "0.25" and float(row["load_mean"]) == pytest.approx(3.0)
    assert (out / "bimodal.png").stat().st_size > 0
    assert "| [0.95, 1.00] | 3 | 1 |" in (out / "tables.md").read_text()

    dv = [write_run(tmp_path / f"vs{n}", vsync_log() + [e for e in started(n) if e["id"] >= 4], vs_spec(1))
          for n in (4, 6)]
    out = tmp_path / "out10"
    assert fm.main(["fig10", *map(str, dv), "--out", str(out)]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert [(p["members"], p["vc_mean_s"], p["refused"]) for p in s["points"]] == [(4, 0.75, 4.0), (6, 0.75, 4.0)]
    assert (out / "fig10.png").stat().st_size > 0

    dt = [write_run(tmp_path / f"t2-{k}", vsync_log(), vs_spec(k)) for k in (1, 2)]
    out = tmp_path / "out2"
    assert fm.main(["table2", *map(str, dt), "--out", str(out)]) == 0
    md = (out / "tables.md").read_text()
    assert "| 1 | - | 1 | 3.00 (1) | 1.39 | 6.00 (1) | 192.09 | 6.00 | 10.00 (1) | 97.64 |" in md
    assert (out / "table2.png").stat().st_size > 0


def _load(tmp_path: Path) -> Path:
    p = tmp_path / "load.log"
    p.write_text("1.0 2.0 1 1\n3.0 4.0 1 1\n100.0 50.0 1 1\n")
    return p


def test_view_change_model_and_helpers():
    # the last of n - 1 deferrals U(0, D): E[max] = D (n - 1) / n; 8 members, D = 0.5 s: 0.4375 s
    assert fm.vc_model(8, 0.5) == pytest.approx(0.4375) and fm.vc_model(2, 0.5) == pytest.approx(0.25)
    assert [fm.seconds_of(v) for v in ("500ms", "1s", 0.05, None)] == [0.5, 1.0, 0.05, None]
    assert fm.packing_of({"packing": {"mode": "process"}}) == "process" and fm.packing_of({}) == "process"
    assert fm.packing_of({"packing": {"mode": "packed", "members_per_process": 16}}) == "packs of 16"


def test_first_phase_miss_on_the_tree():
    # 4 members, degree 4: h0 is the root of h1, h2, h3; from the sender h1: h0 1 hop, h2 and h3 2 hops
    hops, miss = fm.first_phase_miss(4, 4, 0.1, sender=1)
    assert hops == pytest.approx(5 / 3)
    assert miss == pytest.approx((0.1 + 2 * (1 - 0.9 ** 2)) / 3)          # (0.1 + 0.19 + 0.19) / 3 = 0.16
    assert fm.first_phase_miss(4, 4, 0.0)[1] == 0.0
    # the mean path grows with n, so does the miss
    assert fm.first_phase_miss(128, 4, 0.01)[1] > fm.first_phase_miss(8, 4, 0.01)[1]
    assert fm._loss_fraction("0.1%") == pytest.approx(0.001) and fm._loss_fraction(None) is None


def test_first_phase_hops_equal_networkx_shortest_paths():
    nx = pytest.importorskip("networkx")
    from orchestrator.plan import tree_parents

    for n, sender in ((50, 1), (130, 7)):
        g = nx.Graph([(i, q) for i, q in enumerate(tree_parents(n, 4)) if q is not None])
        d = nx.single_source_shortest_path_length(g, sender)
        want = sum(d[v] for v in range(n) if v != sender) / (n - 1)
        assert fm.first_phase_miss(n, 4, 0.01, sender)[0] == pytest.approx(want)
