"""50 real node runtimes in one process on loopback UDP: rounds complete and buffers are garbage-collected."""
from __future__ import annotations

import asyncio
import time
from collections import Counter

import pytest

from gossipnode import control

from .cluster import cluster, events, run_all

N = 50
DURATION_S = 6.0


def test_fifty_nodes_complete_rounds_and_collect_garbage(tmp_path):
    cfgs, runtimes = cluster(tmp_path, N, subgroup=2, step_s=0.1, fail_k=25, senders=[0, 25], rate_per_s=10.0,
                             size_bytes=100, duration_s=DURATION_S)
    states = {}

    async def probe():
        await asyncio.sleep(DURATION_S / 2)
        states[7] = await asyncio.to_thread(control.dump_state, cfgs[7].control)

    reasons = asyncio.run(run_all(runtimes, probe()))
    assert reasons == ["duration"] * N

    mid = states[7]
    assert mid["started"] and mid["node"] == "m7" and mid["runtime"]["packets_in"] > 0
    assert mid["protocol"]["global"]["round"] >= 1

    constructed_rounds = set()
    received = {cfg.id: {0: set(), 25: set()} for cfg in cfgs}  # from the event logs, not from R
    finals = {}
    for cfg in cfgs:
        log = events(cfg)
        for e in log:
            if e["event"] == "data_received":
                received[cfg.id][e["origin"]].add(e["seq"])
            elif e["event"] == "data_sent":
                received[cfg.id][cfg.id].add(e["seq"])
        kinds = Counter(e["event"] for e in log)
        assert log[0]["event"] == "node_started" and log[-1]["event"] == "node_stopped", cfg.name
        assert {"bad_packet", "error", "declared_failed", "send_error"}.isdisjoint(kinds), (cfg.name, kinds)
        assert kinds["round_completed"] >= 3, (cfg.name, kinds)
        constructed_rounds |= {e["round"] for e in log if e["event"] == "round_completed" and e["via"] == "constructed"}
        gcs = [e for e in log if e["event"] == "gc"]
        assert sum(e["discarded"] for e in gcs) > 0, cfg.name
        sent_by_senders = 2 * 10 * DURATION_S
        assert gcs[-1]["buffer_size"] < sent_by_senders / 2, (cfg.name, gcs[-1])
        assert all(e["ts"] >= log[0]["ts"] and e["node"] == cfg.name for e in log)
        final = finals[cfg.id] = log[-1]["protocol"]
        assert final["buffer"]["count"] < sent_by_senders / 2, (cfg.name, final["buffer"])
    assert len(constructed_rounds) >= 3

    def prefix(seqs: set[int]) -> int:
        k = 0
        while k + 1 in seqs:
            k += 1
        return k

    # safety against what the logs say arrived: no member's S passes a message some member never received
    floor = [min(prefix(received[j][origin]) for j in received) for origin in (0, 25)]
    for i, final in finals.items():
        assert all(s <= f for s, f in zip(final["S"], floor)), (i, final["S"], floor)
        assert all(s > 0 for s in final["S"]), (i, final["S"])
    assert not list((tmp_path / "ctl").iterdir())  # control sockets removed at stop


def test_nodes_wait_for_a_common_start_time(tmp_path):
    cfgs, runtimes = cluster(tmp_path, 3, step_s=0.1, wait_for_start=True, duration_s=1.0)
    replies = {}

    async def orchestrate():
        await asyncio.sleep(0.3)
        replies["before"] = await asyncio.to_thread(control.dump_state, cfgs[0].control)
        at = time.time() + 0.3
        for cfg in cfgs:
            await asyncio.to_thread(control.start, cfg.control, at)
        replies["at"] = at
        for call in (lambda: control.start(cfgs[0].control), lambda: control.request(cfgs[0].control, {"cmd": "x"})):
            try:
                await asyncio.to_thread(call)
            except control.ControlError as exc:
                replies.setdefault("errors", []).append(str(exc))

    assert asyncio.run(run_all(runtimes, orchestrate())) == ["duration"] * 3
    assert replies["before"]["started"] is False and replies["before"]["protocol"] is None
    assert "already started" in replies["errors"][0] and "unknown command 'x'" in replies["errors"][1]
    for cfg in cfgs:
        log = events(cfg)
        start = next(e for e in log if e["event"] == "round_started")
        assert abs(start["ts"] - replies["at"]) < 0.05, cfg.name
        assert log[-1]["ts"] - start["ts"] == pytest.approx(1.0, abs=0.1)  # duration counts from the start
        assert any(e["event"] == "round_completed" for e in log)


def test_workload_stops_and_restarts_on_command(tmp_path):
    cfgs, runtimes = cluster(tmp_path, 2, step_s=0.1, senders=[0], rate_per_s=20.0, duration_s=1.5)
    marks = {}

    async def orchestrate():
        await asyncio.sleep(0.4)
        await asyncio.to_thread(control.request, cfgs[0].control, {"cmd": "workload", "op": "stop"})
        marks["stopped"] = time.time()
        await asyncio.sleep(0.5)
        marks["started"] = time.time()
        await asyncio.to_thread(control.request, cfgs[0].control, {"cmd": "workload", "op": "start"})
        try:
            await asyncio.to_thread(control.request, cfgs[1].control, {"cmd": "workload", "op": "start"})
        except control.ControlError as exc:
            marks["error"] = str(exc)

    asyncio.run(run_all(runtimes, orchestrate()))
    log = events(cfgs[0])
    sent = [e for e in log if e["event"] == "data_sent"]
    assert [e["seq"] for e in sent] == list(range(1, len(sent) + 1))
    assert not [e for e in sent if marks["stopped"] < e["ts"] < marks["started"]]
    assert len([e for e in sent if e["ts"] > marks["started"]]) >= 8  # ~0.6 s at 20/s
    assert [e["event"] for e in log if e["event"].startswith("workload_")] == ["workload_stopped", "workload_started"]
    assert "member 1 is not a sender" in marks["error"]
