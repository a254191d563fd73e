"""experiments/host_speed_table.py: what a budgeted run's CPU time bought, from its files (pure row builder)."""
from __future__ import annotations

import pytest

from experiments.host_speed_table import run_row


def test_a_runs_row_is_its_cpu_per_message_per_timeslice_and_its_host_speed():
    row = {"run": "r1", "dilation": "4.0", "seed": "1", "verdict": "faithful", "excluded": "", "throughput": "500",
           "data_messages": "6000", "host_speed_memory": "110.5", "host_speed_compute": ""}
    manifest = {"started_at": 0.0, "cpu_budget": {"units": {
        "h0": {"real_cores": 0.05, "run": {"usage_s": 2.4, "wall_s": 72.0, "timeslices": 8000, "nr_periods": 500,
                                            "nr_throttled": 450}},
        "h1": {"run": {"usage_s": 1.2}}, "h2": {"run": {"usage_s": 1.8}}}}}
    r = run_row(row, manifest, {"delayline_cores": 0.06, "delayline_pkts_per_s": 1500})
    assert r["started"] == "1970-01-01 00:00" and r["sent_per_s"] == 500 and r["messages"] == 6000
    assert r["sender_us_per_msg"] == pytest.approx(400) and r["receiver_us_per_msg"] == pytest.approx(250)
    assert r["sender_cpu_per_slice_us"] == pytest.approx(300) and r["throttled_share"] == pytest.approx(0.9)
    assert r["delayline_us_per_pkt"] == pytest.approx(40)
    assert r["host_speed_memory"] == 110.5 and r["host_speed_compute"] is None


def test_a_run_without_budgets_or_judges_has_no_cpu_numbers():
    r = run_row({"run": "r2", "throughput": "10", "data_messages": "0"}, {})
    assert r["sender_us_per_msg"] is None and r["receiver_us_per_msg"] is None and r["throttled_share"] is None
    assert r["delayline_us_per_pkt"] is None and r["started"] is None
