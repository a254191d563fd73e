"""GSGC's run_values (analysis/protocols/gsgc_values.py, issue #38), pure, against numbers worked out by hand: the
synthetic run of tests/analysis/synthetic.py (the same events test_metrics.py checks the Spark transforms on, so
the two paths share their expected values), small run directories written here for the start, the steady rounds,
time to stable and failure detection, the Spark summary's remaining keys, the sweep engines, and sweep's validity
check (orchestrator.sweepstate.run_problem) asking run_values."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from analysis import sweep as sa
from analysis.protocols import gsgc, gsgc_values
from analysis.rundir import load
from tests.analysis import synthetic as syn

from .test_sweep_analysis import ev, write_run


@pytest.fixture
def values(tmp_path):
    return gsgc.PLUGIN.run_values(load(syn.make_run(tmp_path)))


def test_rounds_of_the_synthetic_run(tmp_path):
    # Round 0: first start 1000.0 (h0, h1), first constructed completion h1 at 1002.0 with 2 steps; all four
    # members completed it (tpr_s 2.25, 2.0, 2.25, 1.25; steps 2, 2, 3, 2). Round 1: first start 1002.0, first
    # constructed completion h0 at 1005.0 with 3 steps (h3's earlier completion was not a construction); h0, h1,
    # h3 completed it (tpr_s 2.75, 3.5, 2.25; steps 3, 3, 2). Round 2: started 1004.75 by h3, never completed.
    run = load(syn.make_run(tmp_path))
    rows = gsgc_values.event_rounds(run.events, {m.name: m.local_group for m in run.members})
    got = [(r["level"], r["group"], r["round"], r["started_ts"], r["constructed_by"], r["tpr_s"], r["steps"],
            r["members_completed"], r["member_tpr_mean_s"], r["steps_mean"]) for r in rows]
    assert got == [("global", None, 0, 1000.0, "h1", 2.0, 2, 4, 1.9375, 2.25),
                   ("global", None, 1, 1002.0, "h0", 3.0, 3, 3, pytest.approx(8.5 / 3), pytest.approx(8 / 3)),
                   ("global", None, 2, 1004.75, None, None, None, 0, None, None)]


def test_the_key_numbers_of_the_synthetic_run(values):
    v = values
    assert (v["subgroup"], v["step_s"], v["fail_k"], v["local_groups"]) == (2, 1.0, 6, None)
    # TPR 2.0 and 3.0 over the two completed global rounds: mean 2.5, sample std sqrt(0.5); steps 2 and 3; the
    # members' own mean per round averaged over the rounds
    assert (v["tpr_rounds"], v["tpr_mean_s"], v["steps_mean"]) == (2, 2.5, 2.5)
    assert v["tpr_std_s"] == pytest.approx(0.5 ** 0.5) and v["steps_std"] == pytest.approx(0.5 ** 0.5)
    assert v["member_tpr_mean_s"] == pytest.approx((1.9375 + 8.5 / 3) / 2)
    # h3 started last, at 1001.25: round 0 (started 1000.0) is not steady, so no round-0 TPR; round 1 is
    assert (v["members"], v["members_started"], v["all_started_ts"]) == (4, 4, 1001.25)
    assert v["start_spread_s"] == 1.25 and v["common_start"] is False
    assert (v["tpr_values_s"], v["steps_values"], v["tpr_all_values_s"]) == ([3.0], [3], [2.0, 3.0])
    assert (v["tpr_first_round_s"], v["steps_first_round"]) == (None, None)
    assert v["rounds_completed"] == {"global": 2, "local": 0, "sc": 0}
    # time to stable (test_metrics.py's hand-worked rows): 1.5, 2.5, 4.0 s and one message never stable
    assert (v["tts_messages"], v["tts_stable"], v["tts_max_s"]) == (4, 3, 4.0)
    assert v["tts_mean_s"] == pytest.approx(8 / 3) and v["tts_median_s"] == 2.5
    assert v["tts_p90_s"] == pytest.approx(2.5 + 0.8 * 1.5)
    # failure detection: h2 crashed at 1004.0; h0 declared it 2.0 s later, h1 2.5 s, h3 never
    assert (v["crashes"], v["fd_observers"], v["fd_detected"]) == (1, 3, 2)
    assert (v["fd_latency_median_s"], v["fd_latency_max_s"]) == (2.25, 2.5)
    # h0 declared h2 at 1003.0 (before its crash), h3 declared h1 (never crashed)
    assert v["false_declarations"] == 2
    # no delay line in the synthetic run; its tc drops are the generic summary's queue_drops, not a run value
    assert (v["avg_queue"], v["max_queue"], v["queue_overflowed"]) == (None, None, None) and "queue_drops" not in v
    assert v["data_messages"] == 4                  # the generic values ride along


def test_the_per_message_and_per_crash_rows(tmp_path):
    run = load(syn.make_run(tmp_path))
    life = gsgc_values.lives(run)
    assert life["h2"] == {"started_ts": 1000.25, "crashed_ts": 1004.0} and life["h3"]["started_ts"] == 1001.25
    got = [(r["origin"], r["seq"], r["sent_ts"], r["members"], r["members_reached"], r["stable_ts"])
           for r in gsgc_values.stable_messages(run, life)]
    # S[0] is h3's, S[1] h1's: h3's message first
    assert got == [("h3", 1, 1001.5, 4, 4, 1005.5), ("h1", 1, 1001.0, 3, 3, 1002.5), ("h1", 2, 1003.0, 4, 4, 1005.5),
                   ("h1", 3, 1006.0, 3, 0, None)]
    fd = [(r["observer"], r["declared_ts"], r["latency_s"]) for r in gsgc_values.detections(run, life)]
    assert fd == [("h0", 1006.0, 2.0), ("h1", 1006.5, 2.5), ("h3", None, None)]


def _gsgc_run(d: Path, events: list[dict], n: int = 3, senders: list[int] = (), wait: bool = True, **files) -> Path:
    configs = {f"h{i}": {"id": i, "wait_for_start": wait, "senders": list(senders),
                         "protocol": {"name": "gsgc", "subgroup": 1, "step_s": 1.0, "fail_k": 4}} for i in range(n)}
    return write_run(d, configs, events, **files)


def test_time_to_stable_counts_members_alive_at_the_send_until_their_crash(tmp_path):
    """h0 (S[0]) sends seq 1 at 10 and seq 2 at 12. h2 starts at 11: it counts for seq 2 only. h1 is crashed at
    13 (t0 = 0): it counts for both until then. Seq 1: h0 reaches it at 11 (S = [2]: both seqs at once), h1 at
    10.5, h2 does not count -> 1.0 s. Seq 2: h0 at 11, h1 never (crashed at 13), h2 at 14 -> 14 - 12 = 2.0 s.
    A `stable` with S = [1] after S = [2] (not possible, but S only counts as it grows) changes nothing."""
    events = [ev(9.0, "h0", "node_started"), ev(9.0, "h1", "node_started"), ev(11.0, "h2", "node_started"),
              ev(10.0, "h0", "data_sent", seq=1), ev(12.0, "h0", "data_sent", seq=2),
              ev(10.5, "h1", "stable", level="global", s=[1]), ev(11.0, "h0", "stable", level="global", s=[2]),
              ev(11.5, "h0", "stable", level="global", s=[1]), ev(14.0, "h2", "stable", level="global", s=[2]),
              ev(9.5, "h2", "stable", level="local", s=[9]),
              ev(13.0, "orchestrator", "action_applied", op="crash", actual_s=13.0, targets=["h1"])]
    v = gsgc.PLUGIN.run_values(load(_gsgc_run(tmp_path / "r", events, senders=[0])))
    assert (v["tts_messages"], v["tts_stable"], v["tts_mean_s"], v["tts_max_s"]) == (2, 2, 1.5, 2.0)
    assert v["tts_median_s"] == 1.5 and v["tts_p90_s"] == pytest.approx(1.0 + 0.9 * 1.0)


def test_failure_detection_observers_and_false_declarations(tmp_path):
    """h2 crashed at 20 and h1 at 25 (t0 = 0). Observers of h2: h0 (declares it at 23: 3 s) and h1 (declares it
    at 26, after its own crash: not counted, undetected). Observers of h1: h0 (never). h0's declaration of h1 at
    5 is false (h1 was alive); h1's of h2 at 26 is not (h2 had crashed)."""
    events = [ev(1.0, f"h{i}", "node_started") for i in range(3)]
    events += [ev(5.0, "h0", "declared_failed", member=1), ev(23.0, "h0", "declared_failed", member=2),
               ev(26.0, "h1", "declared_failed", member=2),
               ev(20.0, "orchestrator", "action_applied", op="crash", actual_s=20.0, targets=["h2"]),
               ev(25.0, "orchestrator", "action_applied", op="crash", actual_s=25.0, targets=["h1"])]
    v = gsgc.PLUGIN.run_values(load(_gsgc_run(tmp_path / "r", events)))
    assert (v["crashes"], v["fd_observers"], v["fd_detected"], v["fd_latency_median_s"]) == (2, 3, 1, 3.0)
    assert v["false_declarations"] == 1


def test_queues_and_the_steady_rounds_of_a_run_whose_members_started_together(tmp_path):
    """Every member started before round 0: it is steady and the paper's TPR; the fidelity probe's 4-packet burst
    on l0/down is taken out of the delay line's counters."""
    events = [ev(0.5, f"h{i}", "node_started") for i in range(3)]
    events += [ev(1.0, "h0", "round_started", level="global", round=0),
               ev(1.2, "h1", "round_started", level="global", round=0),
               ev(6.0, "h1", "round_completed", level="global", round=0, via="constructed", steps=5, tpr_s=4.8),
               ev(6.0, "h1", "round_started", level="global", round=1),
               ev(9.0, "h2", "round_completed", level="global", round=1, via="constructed", steps=3, tpr_s=3.0)]
    dl = {"queues": {"l0/down": {"max_queue": 4, "queue_sum": 6 + 10, "queued": 4 + 5, "overflowed": 1},
                     "l0/up": {"max_queue": 2, "queue_sum": 5, "queued": 5, "overflowed": 0}}}
    fid = {"rate": {"link": "l0", "direction": "down", "count": 4}}
    v = gsgc.PLUGIN.run_values(load(_gsgc_run(tmp_path / "r", events, **{"tc/delayline.json": dl,
                                                                           "fidelity.json": fid})))
    assert (v["tpr_first_round_s"], v["steps_first_round"]) == (5.0, 5)
    assert (v["tpr_values_s"], v["steps_values"]) == ([5.0, 3.0], [5, 3]) and v["common_start"] is True
    assert v["start_spread_s"] == 0.0
    # (10 + 5) / (5 + 5) after the burst's 0+1+2+3 and 4 packets; l0/down's max is the burst's
    assert (v["avg_queue"], v["max_queue"], v["queue_overflowed"]) == (1.5, 2, 1)
    row = gsgc.PLUGIN.sweep_values(v, {})
    assert (row["tpr_s"], row["steps"], row["rounds"], row["tpr_round0_s"], row["queue_drops"]) == (4.0, 4.0, 2, 5.0, 1)


def test_the_spark_summary_keeps_only_what_needs_the_packets():
    d = {"traffic": [{"gossip_msgs_per_s": 1.0, "gossip_bytes_per_s": 10.0},
                     {"gossip_msgs_per_s": 2.0, "gossip_bytes_per_s": None}]}
    assert gsgc.PLUGIN.summary(None, d) == {"gossip_msgs_per_member_s": 1.5, "gossip_bytes_per_member_s": 10.0}


def test_the_spark_engine_takes_summary_json_with_the_run_values_taken_afresh(tmp_path):
    """engine "spark" reads an analysed run's summary.json (no Spark pass: it exists); its run values are
    recomputed (a stale one is replaced), what only Spark has (gossip traffic) stays."""
    d = syn.make_run(tmp_path)
    (d / "analysis" / "metrics").mkdir(parents=True)
    (d / "analysis" / "metrics" / "summary.json").write_text(json.dumps(
        {"protocol": "gsgc", "tpr_mean_s": 99.0, "gossip_msgs_per_member_s": 0.5}))
    rel = d.name
    spark = sa.run_values_of(tmp_path, [rel], engine="spark")[rel]
    events = sa.run_values_of(tmp_path, [rel], engine="events")[rel]
    assert spark["tpr_mean_s"] == events["tpr_mean_s"] == 2.5 and spark["gossip_msgs_per_member_s"] == 0.5
    assert "gossip_msgs_per_member_s" not in events and events["protocol"] == "gsgc" and events["members"] == 4
    assert sa.run_values_of(tmp_path, ["missing"], engine="events") == {}


def _problem_run(d: Path, starts: dict[str, float | None], rounds=((110.0, 115.0),), wait: bool = False) -> Path:
    events = [ev(ts, n, "node_started") for n, ts in starts.items() if ts is not None]
    for r, (a, b) in enumerate(rounds):
        events += [ev(a, "h0", "round_started", level="global", round=r),
                   ev(b, "h0", "round_completed", level="global", round=r, via="constructed", steps=2)]
    return _gsgc_run(d, events, n=len(starts), wait=wait)


def test_sweeps_validity_check_asks_run_values(tmp_path):
    from orchestrator.sweepstate import run_problem

    assert run_problem(_problem_run(tmp_path / "a", {"h0": 99.0, "h1": 104.0})) is None
    assert "1 of 2 members never started" in run_problem(_problem_run(tmp_path / "b", {"h0": 99.0, "h1": None}))
    late = run_problem(_problem_run(tmp_path / "c", {"h0": 99.0, "h1": 117.0}))
    assert "no round completed after every member was running (the last started 18.0 s after" in late
    # members started together and no round completed within the run: a measurement, not a problem
    assert run_problem(_problem_run(tmp_path / "d", {"h0": 99.0, "h1": 117.0}, rounds=(), wait=True)) is None
    assert "no round completed" in run_problem(_problem_run(tmp_path / "e", {"h0": 99.0, "h1": 117.0}, rounds=()))
    assert run_problem(tmp_path / "nothing").startswith("unreadable run directory")
    assert math.isclose(gsgc_values.tune_value({"tpr_values_s": [1.0, 2.0]}, "rounds"), 1.5)
