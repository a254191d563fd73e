"""The fidelity judges a sweep records per point (orchestrator.fidelity.run_judges), on fake run directories."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator import fidelity as fid


def run_dir(tmp: Path, hold_p99_s: float | None = 0.0001, start_lags_ms: list[float | None] = (1.0, 2.0),
            schedule_lags_ms: list[float] = (), joiner: bool = False, manifest_schedule: dict | None = None) -> Path:
    d = tmp / "run"
    for sub in ("configs", "events", "tc"):
        (d / sub).mkdir(parents=True)
    t0 = 1000.0
    (d / "manifest.json").write_text(json.dumps({"status": "completed", "t0_unix": t0,
                                                 **({"schedule": manifest_schedule} if manifest_schedule else {})}))
    if hold_p99_s is not None:
        (d / "tc" / "delayline.json").write_text(json.dumps(
            {"hold_error": {"count": 500, "p50_s": 0.00005, "p99_s": hold_p99_s}, "cpu_s": 3.0, "uptime_s": 60.0,
             "packets": 6000}))
    members = list(start_lags_ms) + ([500.0] if joiner else [])
    for i, lag in enumerate(members):
        name = f"h{i}"
        waits = not (joiner and i == len(members) - 1)
        (d / "configs" / f"{name}.json").write_text(json.dumps({"name": name, "wait_for_start": waits}))
        lines = [{"ts": t0 - 2, "node": name, "event": "node_started"}]
        if lag is not None:
            lines.append({"ts": t0 + lag / 1000, "node": name, "event": "round_started", "round": 0, "via": "start"})
        lines.append({"ts": t0 + 5, "node": name, "event": "round_completed", "round": 0})
        (d / "events" / f"{name}.jsonl").write_text("".join(json.dumps(x, separators=(",", ":")) + "\n"
                                                            for x in lines))
    (d / "events" / "orchestrator.jsonl").write_text("".join(
        json.dumps({"event": "action_applied", "lag_ms": v}) + "\n" for v in schedule_lags_ms))
    return d


def test_p99_is_the_nearest_rank():
    assert fid.p99([]) is None
    assert fid.p99([3.0]) == 3.0
    assert fid.p99(list(range(1, 101))) == 99
    assert fid.p99(list(range(1, 11))) == 10


def test_a_run_within_the_thresholds_is_faithful(tmp_path):
    j = fid.run_judges(run_dir(tmp_path, schedule_lags_ms=[0.5, 3.0]))
    assert j["verdict"] == "faithful" and j["reasons"] == []
    assert j["hold_p99_ms"] == pytest.approx(0.1)
    assert j["start_lag_p99_ms"] == pytest.approx(2.0, abs=1e-3)
    assert j["schedule_lag_p99_ms"] == 3.0 and j["lag_p99_ms"] == 3.0
    assert j["delayline_cores"] == pytest.approx(0.05) and j["delayline_pkts_per_s"] == pytest.approx(100)


def test_a_late_delay_line_or_late_timers_make_a_run_unfaithful(tmp_path):
    j = fid.run_judges(run_dir(tmp_path / "a", hold_p99_s=0.0025))
    assert j["verdict"] == "unfaithful" and j["reasons"] == ["delay line hold error p99 2.50 ms > 1 ms"]
    j = fid.run_judges(run_dir(tmp_path / "b", start_lags_ms=[1.0] * 50 + [80.0] * 2))
    assert j["verdict"] == "unfaithful" and j["reasons"] == ["timer lag p99 80.0 ms > 50 ms"]
    j = fid.run_judges(run_dir(tmp_path / "c", schedule_lags_ms=[120.0]))
    assert j["verdict"] == "unfaithful" and "timer lag p99 120.0 ms" in j["reasons"][0]
    # thresholds are parameters
    assert fid.run_judges(tmp_path / "a" / "run", max_hold_p99_ms=3.0)["verdict"] == "faithful"


def test_what_cannot_be_measured_is_not_judged(tmp_path):
    # netem: no delay line; a protocol without a start event; no schedule
    j = fid.run_judges(run_dir(tmp_path / "a", hold_p99_s=None, start_lags_ms=[None, None]))
    assert j["hold_p99_ms"] is None and j["start_lag_p99_ms"] is None and j["lag_p99_ms"] is None
    assert j["verdict"] == "unjudged"
    # a joiner (started by the schedule, long after t0) is not a late start
    j = fid.run_judges(run_dir(tmp_path / "b", joiner=True))
    assert j["start_lag_p99_ms"] == pytest.approx(2.0, abs=1e-3)
    # without the orchestrator's event log, the manifest's schedule summary (its maximum) stands in
    d = run_dir(tmp_path / "c", manifest_schedule={"lag_ms_max": 7.0})
    (d / "events" / "orchestrator.jsonl").unlink()
    assert fid.run_judges(d)["schedule_lag_p99_ms"] == 7.0
    assert fid.run_judges(tmp_path / "missing")["verdict"] == "unjudged"
