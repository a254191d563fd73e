"""analysis/figures_qsm.py on hand-made event logs (every expected number worked out in the comments), and one check
that its numbers equal the qsm Spark plug-in's (analysis/protocols/qsm.py) on the same log."""
from __future__ import annotations

import json

import pytest

from analysis import figures_qsm as fq

T0 = 1000.0


def e(node: str, event: str, ts: float, **fields) -> dict:
    return {"ts": T0 + ts, "node": node, "event": event, **fields}


def manifest(loss=None, R=2, token="500ms") -> dict:
    return {"t0_unix": T0, "status": "completed", "seed": 1, "shaper": "delayline",
            "spec": {"links": {"loss": loss}, "workload": {"rate_per_s": 3000},
                     "protocol": {"qsm": {"groups": [{"name": "a", "members": "all"}], "partition_size": R,
                                          "token_interval": token, "growth": 0.2}}}}


def log() -> list[dict]:
    """h0 sends seq 1..9 into group a (h0, h1, h2) at t = 0.5, 1.1, 1.6, 2.2, 2.4, 3.2, 3.5, 3.7, 4.9 s: span 0.5 ->
    4.9, the steady half from 2.7 s: 4 sends (3.2, 3.5, 3.7, 4.9) in 2.2 s. h1 and h2 receive each 50 ms after
    its send, h2 all but seq 9."""
    out = [e("h0", "node_started", 0.0, id=0), e("h1", "node_started", 0.0, id=1), e("h2", "node_started", 0.0, id=2)]
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
        e("h0", "token_round", 1.0, region="r-a", duration=0.1), e("h0", "token_round", 1.5, region="r-a",
                                                                   duration=0.1),
    ]
    return out


def test_run_metrics_by_hand():
    r = fq.run_metrics(manifest(loss="1%"), log())
    assert (r["members"], r["R"], r["loss"], r["token_s"]) == (3, 2, pytest.approx(0.01), 0.5)
    # one group; the workload names no senders: S = the one that sent
    assert (r["groups"], r["n_senders"]) == (1, 1)
    assert r["sender_throughput"] == {"h0": pytest.approx(4 / 2.2)} and r["sender_jain"] == pytest.approx(1.0)
    assert r["group_throughput"] == {"a": pytest.approx(4 / 2.2)} and r["throughput_per_group"] == r["throughput"]
    assert r["messages"] == 9
    assert r["throughput_all"] == pytest.approx(8 / 4.4)            # the plug-in's (n - 1) / span
    assert r["throughput"] == pytest.approx(4 / 2.2)                # steady half: 2.7 .. 4.9
    # receivers in [2.7, 4.9]: h1 3.25, 3.55, 3.75 (4.95 is after the last send) -> 3; h2 the same 3
    assert r["delivered_min"] == pytest.approx(3 / 2.2) and r["delivered_mean"] == pytest.approx(3 / 2.2)
    assert r["delivery"] == pytest.approx(17 / 18)                  # 2 receivers x 9, h2 misses one
    # whole seconds since t0 between 0 and 4: 1 -> 2 sends, 2 -> 2, 3 -> 3; steady (>= 2.7): second 3 only
    assert r["rate_series"] == [2, 2, 3] and r["rate_std"] is None
    assert r["rate_final"] == 420.0 and r["steps_skipped"] == 3 and r["token_rounds"] == 2
    assert r["recovered"] == 2 and r["recovery_rate"] == pytest.approx(2 / 17)
    assert r["recovery_latency_s"] == pytest.approx(0.3) and r["recovery_latency_rounds"] == pytest.approx(0.6)
    assert r["recovered_by"] == {"pull": 1, "push": 1}
    assert r["ack_latency_s"] == pytest.approx(0.5) and r["ack_latency_rounds"] == pytest.approx(1.0)


def test_units_and_no_loss():
    assert fq.seconds("500ms") == 0.5 and fq.seconds("100us") == pytest.approx(1e-4) and fq.seconds(2) == 2.0
    assert fq.percent(None) == 0.0 and fq.percent("0.1%") == pytest.approx(0.001)
    r = fq.run_metrics(manifest(token="1s"), log())
    assert r["loss"] == 0.0 and r["ack_latency_rounds"] == pytest.approx(0.5)


def test_cpu_log_and_per_packet_costs(tmp_path):
    # two processes of run A (largest readings 2.0 and 1.5 s), one of run B; a torn line is skipped
    f = tmp_path / "cpu.log"
    f.write_text("1.0 11 1.00 /x/A\n2.0 11 2.00 /x/A\n2.0 12 1.50 /x/A\n2.0 13 0.50 /x/B\n3.0 13\n")
    assert fq.read_cpu(f) == {"/x/A": pytest.approx(3.5), "/x/B": pytest.approx(0.5)}
    # 1000 packets, 4000 receipts, 3 s of node CPU and 1 s of the delay line's: 3000 us per packet, 750 per
    # receipt; two idle cores: 2 x 1000 / 4 s = 500 packets/s
    c = fq.cpu_metrics({"messages": 1000, "receipts": 4000}, 3.0, 1.0)
    assert c["cpu_us_per_packet"] == pytest.approx(3000) and c["cpu_us_per_receipt"] == pytest.approx(750)
    assert c["ceiling_2cores"] == pytest.approx(500)
    assert fq.cpu_metrics({"messages": 1000, "receipts": 0}, None, None)["ceiling_2cores"] is None


def test_cost_model_recovers_its_coefficients():
    # cpu = 0.03 x members x 40 s + 80 us x receipts, exactly: the fit returns both; 2 cores for 9 members:
    # (2 - 0.27) / (80 us x 8 receivers) = 2703 packets/s
    runs = [{"members": n, "duration_s": 40.0, "receipts": k, "node_cpu_s": 0.03 * n * 40 + 80e-6 * k}
            for n, k in ((4, 30000), (8, 90000), (16, 50000), (12, 120000))]
    m = fq.cost_model(runs)
    assert m["fixed_core_per_member"] == pytest.approx(0.03) and m["cpu_s_per_receipt"] == pytest.approx(80e-6)
    assert fq.marginal_ceiling(m, 9) == pytest.approx((2 - 0.27) / (80e-6 * 8))
    assert fq.marginal_ceiling(m, 100) is None and fq.cost_model(runs[:2]) is None


def test_aggregate_mean_and_student_t_interval():
    # three runs of one point: throughput 100, 110, 120 -> mean 110, sd 10, half-width t(0.975, 2) 4.303 x 10/sqrt 3
    runs = [{"members": 8, "R": 5, "loss": 0.0, "token_s": 1.0, "shaper": "delayline", "throughput": v,
             "load_max": 3.0} for v in (100.0, 110.0, 120.0)]
    runs.append({"members": 16, "R": 5, "loss": 0.0, "token_s": 1.0, "shaper": "delayline", "throughput": 50.0})
    agg = fq.aggregate(runs)
    assert [(a["members"], a["runs"]) for a in agg] == [(8, 3), (16, 1)]
    assert agg[0]["throughput"] == pytest.approx(110.0)
    assert agg[0]["throughput_ci95"] == pytest.approx(4.303 * 10 / 3 ** 0.5, rel=1e-3)
    assert agg[0]["throughput_n"] == 3 and agg[0]["recovery_rate_n"] == 0
    assert "| 8 | - | - | 5 | 0.0% |" in fq.markdown_tables(agg)


def test_analyse_run_reads_a_run_directory(tmp_path):
    run = tmp_path / "run"
    (run / "events").mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps(manifest()))
    by_node: dict[str, list[str]] = {}
    for x in log():
        by_node.setdefault(x["node"], []).append(json.dumps(x))
    for node, lines in by_node.items():
        (run / "events" / f"{node}.jsonl").write_text("\n".join(lines) + "\n")
    r = fq.analyse_run(run, [(T0 + 1, 2.0), (T0 + 3, 4.0)])
    assert r["status"] == "completed" and r["messages"] == 9 and r["shaper"] == "delayline"
    out = tmp_path / "out"
    assert fq.main([str(run), "--out", str(out)]) == 0
    assert (out / "runs.csv").exists() and (out / "summary.json").exists() and (out / "tables.md").exists()


@pytest.mark.spark
def test_the_same_numbers_as_the_spark_plugin(spark):
    from analysis.protocols import qsm

    events = log()
    rows = []
    for x in events:
        raw = json.dumps(x)
        rows.append((x["node"], x["event"], x["ts"], x["ts"] - T0, x.get("seq"), x.get("origin"), raw))
    df = spark.createDataFrame(rows, "node string, event string, ts double, t_s double, seq long, origin long, "
                                     "raw string")
    members = spark.createDataFrame([(i, f"h{i}", None, None) for i in range(3)],
                                    "member_id int, member string, sender_index int, local_group int")
    params = manifest()["spec"]["protocol"]["qsm"]
    groups = qsm.group_table(spark, params, [(i, f"h{i}") for i in range(3)])
    ours = fq.run_metrics(manifest(), events)
    (tp,) = qsm.throughput(df).collect()
    assert ours["throughput_all"] == pytest.approx(tp["rate_per_s"])
    assert ours["rate_series"] == [r["messages"] for r in qsm.rate_samples(df).collect()]
    (dl,) = qsm.delivery_per_group(df, groups, members).collect()
    assert ours["delivery"] == pytest.approx(dl["delivery_ratio"])
    rec = [r.asDict() for r in qsm.recovery(df).collect()]
    assert ours["recovered"] == sum(r["recovered"] for r in rec)
    assert ours["recovery_latency_s"] == pytest.approx(
        sum(r["latency_mean_s"] * r["recovered"] for r in rec) / sum(r["recovered"] for r in rec))
    (ack,) = qsm.ack_latency(df).collect()
    assert ours["ack_latency_s"] == pytest.approx(ack["latency_mean_s"])


# --- Figures 1, 15, 16 ----------------------------------------------------------------------------------------------

def test_jain_by_hand():
    assert fq.jain([1.0, 1.0]) == pytest.approx(1.0)
    assert fq.jain([3.0, 1.0]) == pytest.approx(16 / (2 * 10))            # (3 + 1)^2 / (2 (9 + 1)) = 0.8
    assert fq.jain([2.0, 0.0, 0.0]) == pytest.approx(1 / 3)               # one has all: 1/n
    assert fq.jain([]) is None and fq.jain([0.0, 0.0]) is None


def two_senders_log() -> tuple[dict, list[dict]]:
    """Figure 16 shape: h0 and h1 both send into group a (h0, h1, h2). h0 at t = 1, 2, 3, 4, 5 (seq 1-5), h1 at
    1.5, 3.5, 4.5 (seq 1-3); each other member receives each message 10 ms later, but h2 misses h1's seq 3."""
    m = manifest()
    m["spec"]["workload"]["senders"] = ["h0", "h1"]
    out = [e(f"h{i}", "node_started", 0.0, id=i) for i in range(3)]
    for node, nid, times in (("h0", 0, (1.0, 2.0, 3.0, 4.0, 5.0)), ("h1", 1, (1.5, 3.5, 4.5))):
        for seq, t in enumerate(times, 1):
            out.append(e(node, "data_sent", t, seq=seq, group_name="a"))
            for rx in ("h0", "h1", "h2"):
                if rx != node and not (rx == "h2" and node == "h1" and seq == 3):
                    out.append(e(rx, "data_received", t + 0.01, origin=nid, seq=seq))
    return m, out


def test_senders_shares_by_hand():
    r = fq.run_metrics(*two_senders_log())
    # all sends 1.0 .. 5.0: steady half [3.0, 5.0], 2 s: h0 3.0, 4.0, 5.0 -> 1.5/s; h1 3.5, 4.5 -> 1.0/s; total 2.5
    assert (r["groups"], r["n_senders"]) == (1, 2)
    assert r["throughput"] == pytest.approx(2.5)
    assert r["sender_throughput"] == {"h0": pytest.approx(1.5), "h1": pytest.approx(1.0)}
    assert r["sender_jain"] == pytest.approx(2.5 ** 2 / (2 * (1.5 ** 2 + 1.0 ** 2)))   # 6.25 / 6.5 = 0.9615
    assert r["sender_share_min"] == pytest.approx(0.4) and r["throughput_per_sender"] == pytest.approx(1.25)
    assert r["delivery"] == pytest.approx(15 / 16)            # h0's 5 to 2 members, h1's 3 to 2, one missing
    # the only non-sender h2 in [3.0, 5.0]: 3.01, 3.51, 4.01 (4.51 missed, 5.01 after the window) -> 1.5/s
    assert r["delivered_min"] == pytest.approx(1.5)


def test_a_configured_sender_that_sent_nothing_counts_zero():
    m, events = two_senders_log()
    m["spec"]["workload"]["senders"] = ["h0", "h1", "h2"]     # h2 configured, never sends
    r = fq.run_metrics(m, events)
    assert r["n_senders"] == 3 and r["sender_throughput"]["h2"] == 0.0
    assert r["sender_jain"] == pytest.approx(6.25 / (3 * 3.25)) and r["sender_share_min"] == 0.0


def test_groups_round_robin_by_hand():
    """Figure 1 shape: h0 sends seq 1-5 at t = 1..5 into a, b, a, b, a; groups a, b, c all of h0, h1 (c gets
    nothing). Steady half [3, 5]: a 3.0, 5.0 -> 1.0/s, b 4.0 -> 0.5/s, c 0."""
    m = manifest()
    m["spec"]["protocol"]["qsm"]["groups"] = [{"name": g, "members": "all"} for g in ("a", "b", "c")]
    m["spec"]["workload"]["senders"] = ["h0"]
    ev = [e("h0", "node_started", 0.0, id=0), e("h1", "node_started", 0.0, id=1)]
    for seq, g in enumerate("ababa", 1):
        ev += [e("h0", "data_sent", float(seq), seq=seq, group_name=g),
               e("h1", "data_received", seq + 0.01, origin=0, seq=seq)]
    r = fq.run_metrics(m, ev)
    assert (r["groups"], r["n_senders"]) == (3, 1)
    assert r["throughput"] == pytest.approx(1.5) and r["throughput_per_group"] == pytest.approx(0.5)
    assert r["group_throughput"] == {"a": pytest.approx(1.0), "b": pytest.approx(0.5), "c": 0.0}
    assert r["group_jain"] == pytest.approx(1.5 ** 2 / (3 * 1.25))          # 2.25 / 3.75 = 0.6
    assert r["delivery"] == 1.0


def test_points_differ_by_groups_and_senders_and_series_follow_one_key():
    base = {"members": 25, "R": 5, "loss": 0.0, "token_s": 1.0, "shaper": "delayline"}
    runs = [dict(base, groups=g, n_senders=1, throughput=t) for g, t in ((1, 100.0), (1, 120.0), (4, 90.0))]
    runs += [dict(base, groups=1, n_senders=2, throughput=130.0)]
    agg = fq.aggregate(runs)
    assert [(a["groups"], a["n_senders"], a["runs"], a["throughput"]) for a in agg] == [
        (1, 1, 2, pytest.approx(110.0)), (1, 2, 1, 130.0), (4, 1, 1, 90.0)]
    by_g = fq.series_over(agg, "groups")                    # G = 1, 4 at S = 1; S = 2 has one G only: no series
    assert [[r["groups"] for r in rows] for rows in by_g.values()] == [[1, 4]]
    by_s = fq.series_over(agg, "n_senders")
    assert [[r["n_senders"] for r in rows] for rows in by_s.values()] == [[1, 2]]
    assert "| 25 | 4 | 1 | 5 | 0.0% |" in fq.markdown_tables(agg)


def test_share_rows():
    r = dict(fq.run_metrics(*two_senders_log()), run_dir="/x/run-7", seed=3)
    rows = fq.share_rows([r])
    assert [(x["kind"], x["who"], x["throughput"], x["share"]) for x in rows] == [
        ("sender", "h0", pytest.approx(1.5), pytest.approx(0.6)), ("sender", "h1", pytest.approx(1.0),
                                                                     pytest.approx(0.4)),
        ("group", "a", pytest.approx(2.5), pytest.approx(1.0))]
    assert rows[0]["run"] == "run-7" and rows[0]["n_senders"] == 2


def test_figures_1_15_16_are_drawn(tmp_path):
    base = {"members": 25, "R": 5, "shaper": "delayline", "throughput": 100.0, "delivered_min": 90.0,
            "recovery_latency_s": 1.5, "recovery_latency_rounds": 1.5, "sender_jain": 0.9}
    runs = [dict(base, groups=g, n_senders=1, loss=0.0, token_s=1.0) for g in (1, 2, 4)]
    runs += [dict(base, groups=1, n_senders=s, loss=0.0, token_s=1.0, sender_throughput={"h0": 50.0, "h1": 50.0})
             for s in (2, 3)]
    runs += [dict(base, groups=1, n_senders=1, loss=0.01, token_s=t) for t in (0.25, 0.5, 1.0, 2.0)]
    agg = fq.aggregate(runs)
    fq.fig1(agg, tmp_path / "f1.png")
    fq.fig15(agg, tmp_path / "f15.png")
    fq.fig16(agg, runs, tmp_path / "f16.png")
    assert all((tmp_path / f).stat().st_size > 0 for f in ("f1.png", "f15.png", "f16.png"))
