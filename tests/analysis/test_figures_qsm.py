"""analysis/figures_qsm.py (and figures_qsm_plots.py): the declarations over the qsm plug-in's run_values (its numbers
are tested in test_qsm_values.py) — one row per run with the identity (the budget and dilation kept apart), the
aggregation, the tables regenerated from the CSVs alone (the committed results byte for byte), the CPU log, the
cost model, the figures."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis import figlib
from analysis import figures_qsm as fq
from analysis import figures_qsm_plots as fp
from tests.analysis.test_qsm_values import T0, one_sender_log, qsm_run, two_senders_log

REPO = Path(__file__).resolve().parents[2]
COMMITTED = ("qsm-fig1", "qsm-fig9", "qsm-fig9-more", "qsm-fig14", "qsm-fig15", "qsm-fig16")


@pytest.mark.parametrize("name", COMMITTED)
def test_the_committed_tables_regenerate_from_their_csvs(tmp_path, name):
    src = REPO / "docs" / "results" / name
    assert fq.main(["tables", str(src), "--out", str(tmp_path)]) == 0
    for f in ("tables.md", "summary.csv"):
        assert (tmp_path / f).read_bytes() == (src / f).read_bytes(), f
    if name != "qsm-fig9":
        assert (tmp_path / "summary.json").read_bytes() == (src / "summary.json").read_bytes()
        return
    # written before PAPER had Figure 1's and Figure 16's numbers: everything else is the same
    ours, theirs = json.loads((tmp_path / "summary.json").read_text()), json.loads((src / "summary.json").read_text())
    assert set(ours["paper"]) - set(theirs["paper"]) == {"fig1_jgroups_relative", "fig16_10_senders_relative"}
    assert {k: v for k, v in ours.items() if k != "paper"} == {k: v for k, v in theirs.items() if k != "paper"}


def test_cpu_log_and_the_values_with_it(tmp_path):
    # two processes of run A (largest readings 2.0 and 1.5 s), one of run B; a torn line is skipped
    f = tmp_path / "cpu.log"
    f.write_text("1.0 11 1.00 /x/A\n2.0 11 2.00 /x/A\n2.0 12 1.50 /x/A\n2.0 13 0.50 /x/B\n3.0 13\n")
    assert fq.read_cpu(f) == {"/x/A": pytest.approx(3.5), "/x/B": pytest.approx(0.5)}
    # the run: 9 packets, 17 receipts; 0.9 s of node CPU and 0.9 of the delay line's: 100000 us per packet, 2 x 9 /
    # 1.8 = 10 packets/s on two idle cores
    d = qsm_run(tmp_path, one_sender_log(), delayline_cpu_s=0.9)
    v = fq.qsm_values({str(d.resolve()): 0.9})(figlib.load_run(d))
    assert v["node_cpu_s"] == 0.9 and v["cpu_us_per_packet"] == pytest.approx(1e5)
    assert v["cpu_us_per_receipt"] == pytest.approx(0.9e6 / 17) and v["ceiling_2cores"] == pytest.approx(10.0)
    assert fq.qsm_values({})(figlib.load_run(d))["ceiling_2cores"] is None


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
    # three runs of one point: throughput 100, 110, 120 -> mean 110, sd 10, half-width t(0.975, 2) 4.303 x 10/sqrt 3;
    # a fourth, excluded, counts in `excluded` only
    base = {"members": 8, "R": 5, "loss": 0.0, "token_s": 1.0, "shaper": "delayline", "dilation": 1.0}
    runs = [dict(base, throughput=v, load_max=3.0, excluded=None) for v in (100.0, 110.0, 120.0)]
    runs.append(dict(base, throughput=999.0, load_max=9.0, excluded="unfaithful: lag"))
    runs.append(dict(base, members=16, throughput=50.0, excluded=None))
    agg = fq.aggregate(runs)
    assert [(a["members"], a["runs"], a["excluded"]) for a in agg] == [(8, 3, 1), (16, 1, 0)]
    assert agg[0]["throughput"] == pytest.approx(110.0) and agg[0]["load_max"] == 3.0
    assert agg[0]["throughput_ci95"] == pytest.approx(4.303 * 10 / 3 ** 0.5, rel=1e-3)
    assert agg[0]["throughput_n"] == 3 and agg[0]["recovery_rate_n"] == 0
    assert "| 8 | - | - | - | 5 | 0.0% | 1 | delayline | 1 | - | 3 | 1 |" in fq.markdown_tables(agg)


def test_markdown_leaves_out_what_older_results_lack():
    old = [{"members": 4, "R": 5, "loss": 0.01, "token_s": 1.0, "shaper": "delayline", "runs": 2, "load_max": 3.0,
            "throughput": 401.5, "throughput_ci95": 544.1, "throughput_n": 2, "load_mean": 33.3,
            "load_mean_ci95": 0.0, "load_mean_n": 2}]
    md = fq.markdown_tables(old).splitlines()
    assert md[0] == "| members | R | loss | token s | shaper | runs | sent/s | load |"
    assert md[2] == "| 4 | 5 | 1.0% | 1 | delayline | 2 | 402 ± 5.4e+02 | 33.3 |"     # a zero CI: no ±


def test_budgets_and_dilations_are_never_averaged_together(tmp_path):
    # the same experiment point three times: plain, at N = 4 with a CPU budget of 0.5 (twice, one unfaithful)
    qsm_run(tmp_path, one_sender_log(), name="plain")
    qsm_run(tmp_path, one_sender_log(), name="budget1", dilation=4.0, cpu=0.5, judges={"verdict": "faithful"})
    qsm_run(tmp_path, one_sender_log(), name="budget2", dilation=4.0, cpu=0.5, seed=2,
            judges={"verdict": "unfaithful", "reasons": ["timer lag p99 60 ms > 50 ms"]})
    rows = figlib.collect([tmp_path], fq.qsm_values(), point=fq.POINT, faithful_only=True)
    assert [(r["run"], r["dilation"], r["cpu"], r["verdict"]) for r in rows] == [
        ("plain", 1.0, None, None), ("budget1", 4.0, 0.5, "faithful"), ("budget2", 4.0, 0.5, "unfaithful")]
    assert rows[2]["excluded"] == "unfaithful: timer lag p99 60 ms > 50 ms" and rows[1]["excluded"] is None
    agg = fq.aggregate(rows)
    assert [(a["dilation"], a["cpu"], a["runs"], a["excluded"]) for a in agg] == [(1.0, None, 1, 0), (4.0, 0.5, 1, 1)]


def test_runs_then_tables_from_the_csvs_alone(tmp_path):
    runs = tmp_path / "runs"
    qsm_run(runs, one_sender_log(), name="r1", delayline_cpu_s=0.5)
    qsm_run(runs, two_senders_log(), name="r2", senders=["h0", "h1"])
    qsm_run(runs, one_sender_log(), name="r3", status="failed: boom")
    (tmp_path / "load.log").write_text(f"{T0 - 1} 2.0 0 0\n{T0 + 3} 4.0 0 0\n{T0 + 99} 50 0 0\n")
    out = tmp_path / "out"
    assert fq.main([str(runs), "--out", str(out), "--load", str(tmp_path / "load.log")]) == 0
    rows = figlib.read_csv(out / "runs.csv")
    assert [(r["run"], r["excluded"]) for r in rows] == [("r1", None), ("r2", None),
                                                         ("r3", "not completed (failed: boom)")]
    assert rows[0]["load_mean"] == pytest.approx(3.0) and rows[0]["throughput"] == pytest.approx(4 / 2.2)
    assert "rate_series" not in rows[0] and rows[1]["sender_share"] == {"h0": 0.6, "h1": 0.4}
    assert [s["series"] for s in figlib.read_csv(out / "rate_series.csv")] == [[2, 2, 3], [1, 2, 2]]
    shares = figlib.read_csv(out / "shares.csv")
    assert [(s["run"], s["kind"], s["who"], s["share"]) for s in shares] == [
        ("r1", "sender", "h0", 1.0), ("r1", "group", "a", 1.0), ("r2", "sender", "h0", 0.6),
        ("r2", "sender", "h1", 0.4), ("r2", "group", "a", 1.0)]
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["runs"], summary["excluded"]) == (2, 1)
    md = (out / "tables.md").read_text()
    assert "| 3 | 1 | - | 1 | 2 | 0.0% | 0.5 | delayline | 1 | - | 1 | 0 |" in md
    assert "| 3 | 1 | - | 2 | 2 | 0.0% | 0.5 | delayline | 1 | - | 1 | 0 |" in md
    again = tmp_path / "again"
    assert fq.main(["tables", str(out), "--out", str(again)]) == 0
    for f in ("summary.csv", "summary.json", "tables.md"):
        assert (again / f).read_bytes() == (out / f).read_bytes(), f


def test_share_rows():
    r = {"run": "run-7", "members": 3, "groups": 1, "n_senders": 2, "seed": 3,
         "sender_throughput": {"h0": 1.5, "h1": 1.0}, "sender_share": {"h0": 0.6, "h1": 0.4},
         "group_throughput": {"a": 2.5}, "group_share": {"a": 1.0}}
    rows = fq.share_rows([r])
    assert [(x["kind"], x["who"], x["throughput"], x["share"]) for x in rows] == [
        ("sender", "h0", 1.5, 0.6), ("sender", "h1", 1.0, 0.4), ("group", "a", 2.5, 1.0)]
    assert rows[0]["run"] == "run-7" and rows[0]["n_senders"] == 2


def test_points_differ_by_groups_and_senders_and_series_follow_one_key():
    base = {"members": 25, "R": 5, "loss": 0.0, "token_s": 1.0, "shaper": "delayline", "dilation": 1.0}
    runs = [dict(base, groups=g, n_senders=1, throughput=t) for g, t in ((1, 100.0), (1, 120.0), (4, 90.0))]
    runs += [dict(base, groups=1, n_senders=2, throughput=130.0)]
    runs += [dict(base, groups=4, n_senders=1, throughput=10.0, dilation=4.0, cpu=0.5)]
    agg = fq.aggregate(runs)
    assert [(a["groups"], a["n_senders"], a["dilation"], a["runs"], a["throughput"]) for a in agg] == [
        (1, 1, 1.0, 2, pytest.approx(110.0)), (1, 2, 1.0, 1, 130.0), (4, 1, 1.0, 1, 90.0), (4, 1, 4.0, 1, 10.0)]
    by_g = fp.series_over(agg, "groups")          # G = 1, 4 at S = 1, N = 1; the budget's point has one G only
    assert [[r["groups"] for r in rows] for rows in by_g.values()] == [[1, 4]]
    by_s = fp.series_over(agg, "n_senders")
    assert [[r["n_senders"] for r in rows] for rows in by_s.values()] == [[1, 2]]
    assert "| 25 | 4 | - | 1 | 5 | 0.0% | 1 | delayline | 1 | - |" in fq.markdown_tables(agg)
    assert [s for s, _ in fp.budgets(agg)] == [" (N = 1.0, CPU unbounded)", " (N = 4.0, CPU 0.5)"]


def test_figures_are_drawn(tmp_path):
    base = {"members": 25, "R": 5, "shaper": "delayline", "throughput": 100.0, "delivered_min": 90.0,
            "recovery_latency_s": 1.5, "recovery_latency_rounds": 1.5, "sender_jain": 0.9, "ceiling_2cores": 300.0,
            "ack_latency_rounds": 1.0, "ack_latency_s": 1.0, "recovery_rate": 0.01}
    runs = [dict(base, groups=g, n_senders=1, loss=0.0, token_s=1.0) for g in (1, 2, 4)]
    runs += [dict(base, groups=1, n_senders=s, loss=0.0, token_s=1.0, sender_throughput={"h0": 50.0, "h1": 50.0})
             for s in (2, 3)]
    runs += [dict(base, groups=1, n_senders=1, loss=0.01, token_s=t) for t in (0.25, 0.5, 1.0, 2.0)]
    runs += [dict(base, groups=k, regions=k, n_senders=1, loss=0.0, token_s=1.0, throughput=100.0 / k,
                  transmitted=100.0) for k in (1, 2, 4)]
    runs += [dict(base, groups=1, n_senders=1, loss=lo, token_s=1.0, members=m, rate_series=[1, 2], seed=1,
                  dilation=n, cpu=c) for m in (8, 16) for lo in (0.0, 0.01) for n, c in ((1.0, None), (4.0, 0.5))]
    agg = fq.aggregate(runs)
    fp.draw(tmp_path, runs, agg, None)
    assert [[r["regions"] for r in rows] for rows in fp.series_over(agg, "regions", ("groups",)).values()] == [
        [1, 2, 4]]
    for f in ("fig1_rate_vs_groups.png", "fig14_regions.png", "fig15_token_rate.png", "fig16_senders.png",
              "fig9_rate_vs_nodes.png", "fig17_rate_over_time.png", "fig19_recovery.png", "fig20_ack_latency.png"):
        assert (tmp_path / f).stat().st_size > 0, f
    assert not (tmp_path / "fig20_partitions.png").exists()        # one partition count per member count
    # make repro-qsm-fig20-ring's points: R = 3, 5 at 8 members (2 and 1 partitions), R = 5, 16 at 16 (3 and 1)
    rings = [dict(base, groups=1, n_senders=1, loss=0.01, token_s=1.0, members=m, R=r, seed=1, dilation=2.0, cpu=0.2)
             for m, r in ((8, 3), (8, 5), (16, 5), (16, 16))]
    assert [fp.partitions(r) for r in rings] == [2, 1, 3, 1]
    fp.fig20_rings(fq.aggregate(rings), tmp_path / "fig20_partitions.png")
    assert (tmp_path / "fig20_partitions.png").stat().st_size > 0
