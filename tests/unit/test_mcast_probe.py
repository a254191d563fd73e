"""The multicast probe's pure parts (no root): its verdict from what receivers and captures saw, worked by hand on
the 4-member tree test-netem probes, and the kernel receive stamp the receiver reads."""
from __future__ import annotations

import socket
import time

import pytest

from orchestrator.mcast.mcprobe import SO_TIMESTAMPNS, TIMESPEC, kernel_stamp
from orchestrator.mcast.probe import default_gap, expected_delays, group_of, judge
from orchestrator.plan import build_plan
from orchestrator.spec import parse_experiment

# h0 with h1, h2, h3 below it; every member in the group, h1 sends
TEXT = ("topology: {kind: tree, nodes: 4, degree: 3}\nlinks: {rate: 30kbit, delay: 5ms, queue: 64}\n"
        "multicast:\n  groups:\n    - {name: data, address: 239.5.0.1, members: all}\n")


@pytest.fixture
def lab():
    plan = build_plan(parse_experiment(TEXT))
    return plan, group_of(plan, "data")


def test_expected_delays_and_gap_worked_by_hand(lab):
    plan, group = lab
    # 72 B of payload + 28 B of IP/UDP + 14 B of Ethernet = 114 B: 5 ms + 114 x 8 / 30 000 s = 35.4 ms per hop
    exp = expected_delays(plan, group, "h1", 72)
    assert exp["h0"][0] == 1 and exp["h2"][0] == exp["h3"][0] == 2
    one = exp["h0"][1]
    assert one == pytest.approx(0.0354)
    assert exp["h2"][1] == pytest.approx(2 * one) and exp["h3"][1] == pytest.approx(2 * one)
    assert default_gap(plan, group, 72) == pytest.approx(1.5 * (one - 0.005))   # 1.5 x the serialisation


def test_judge_counts_copies_quartiles_and_link_copies(lab):
    plan, group = lab
    want = {m: d for m, (_, d) in expected_delays(plan, group, "h1", 72).items()}
    # h0: 4 datagrams, delays 10, 20, 30, 40 ms over its expected: median 25 ms over, lower quartile 10 ms over
    # h2: seq 3 missing, seq 1 twice; h3: no answer
    received = {"h0": {"copies": {"0": 1, "1": 1, "2": 1, "3": 1},
                       "delay_s": [want["h0"] + x for x in (0.040, 0.010, 0.030, 0.020)]},
                "h2": {"copies": {"0": 1, "1": 2, "2": 1}, "delay_s": [want["h2"]] * 3}}
    links = {"h0-h1/up": 4, "h0-h2/down": 4, "h0-h3/down": 3, "h0-h1/down": 1}
    v = judge(plan, group, "h1", 4, 72, received, links)
    h0, h2 = v["receivers"]["h0"], v["receivers"]["h2"]
    assert (h0["hops"], h0["distinct"], h0["missing"], h0["duplicates"]) == (1, 4, 0, 0)
    assert h0["median_delay_ms"] == pytest.approx(want["h0"] * 1e3 + 25)
    assert h0["lower_quartile_delay_ms"] == pytest.approx(want["h0"] * 1e3 + 10)   # sorted[(4 - 1) // 4]
    assert h0["error_ms"] == pytest.approx(25)
    assert (h2["missing"], h2["duplicates"], h2["error_ms"]) == (1, 1, pytest.approx(0))
    assert "h3" not in v["receivers"] and not v["ok"]
    assert v["links"]["h0-h3/down"] == {"copies": 3, "expected": 4}
    assert v["links"]["h0-h1/down"] == {"copies": 1, "expected": 0}
    assert sorted(v["problems"]) == sorted(["h3: no answer from its receiver", "h2: 1 of 4 missing, 1 duplicates",
                                            "link h0-h1/down: 1 copies, expected 0",
                                            "link h0-h3/down: 3 copies, expected 4"])
    assert v["warnings"] == [f"h0: one-way delay {h0['median_delay_ms']:.2f} ms, expected "
                             f"{h0['expected_delay_ms']:.2f} ms over 1 hops"]
    assert v["max_abs_delay_error_ms"] == pytest.approx(25)


def test_judge_of_a_clean_run_is_ok(lab):
    plan, group = lab
    want = expected_delays(plan, group, "h1", 72)
    received = {m: {"copies": {"0": 1, "1": 1}, "delay_s": [d, d]} for m, (_, d) in want.items()}
    v = judge(plan, group, "h1", 2, 72, received, None)
    assert v["ok"] and v["problems"] == [] and v["warnings"] == [] and v["links"] is None
    assert all(r["lower_quartile_delay_ms"] == pytest.approx(r["expected_delay_ms"]) for r in v["receivers"].values())


def test_kernel_stamp_reads_the_timespec_and_falls_back_to_now():
    anc = [(socket.SOL_SOCKET, SO_TIMESTAMPNS, TIMESPEC.pack(1_700_000_000, 250_000_000))]
    assert kernel_stamp(anc) == pytest.approx(1_700_000_000.25)
    other = [(socket.IPPROTO_IP, 8, b"\0" * 12)]
    before = time.time()
    assert before <= kernel_stamp(other) <= time.time()
