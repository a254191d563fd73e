"""benchmarks/bench_floor.py: its pure helpers (no root), and one short root run of measure_floor that must leave
no namespace behind."""
from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import bench_floor as bf  # noqa: E402


def test_percentile_nearest_rank():
    xs = list(range(100))
    assert bf.percentile(xs, 0.5) == 50
    assert bf.percentile(xs, 0.99) == 99
    assert bf.percentile(xs, 1.0) == 99
    assert bf.percentile(xs, 0.0) == 0
    assert bf.percentile([7], 0.99) == 7
    assert bf.percentile([], 0.5) is None


def test_summary_scales_and_sorts():
    s = bf.summary([3_000_000, 1_000_000, 2_000_000], 1e-6)
    assert s == {"n": 3, "p50": 2.0, "p99": 3.0, "max": 3.0}
    assert bf.summary([]) == {"n": 0, "p50": None, "p99": None, "max": None}


def test_parse_proc_stat_with_odd_command_name():
    # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime ...
    text = "1234 (nfq floor) x)) S 1 1234 1234 0 -1 4194560 120 0 0 0 317 42 0 0 20 0 1 0 5000 1000 200\n"
    st = bf.parse_proc_stat(text)
    assert st == {"state": "S", "utime_ticks": 317, "stime_ticks": 42}


def test_parse_proc_stat_of_this_process():
    st = bf.parse_proc_stat(Path("/proc/self/stat").read_text())
    assert st["state"] == "R"
    assert st["utime_ticks"] >= 0 and st["stime_ticks"] >= 0


def test_parse_stat_line():
    assert bf.parse_stat_line("STAT 100 35 614\n") == (100, 35, 614)
    with pytest.raises(ValueError):
        bf.parse_stat_line("READY 12")


def test_parse_trace_reads_the_payload_header_after_udp():
    udp = struct.pack("!HHHH", 1, 2, 80, 0)
    rec = bf.REC.pack(5_000, 0, udp + bf.HDR.pack(42, 4_000))
    rec2 = bf.REC.pack(6_000, 123, udp + bf.HDR.pack(43, 4_500))
    assert bf.parse_trace(rec + rec2 + b"\0" * 7) == [(5_000, 0, 42, 4_000), (6_000, 123, 43, 4_500)]


def test_latency_converts_the_kernel_clock_and_filters_by_seq():
    off = 1_000_000_000_000  # realtime - monotonic, ns
    recs = [(10, 1_000_000, off + 1_500_000, 2_000_000),   # 1 ms in all: 0.5 to the kernel, 0.5 to the read
            (11, 5_000_000, off + 5_250_000, 7_000_000),   # 2 ms: 0.25 + 1.75
            (12, 9_000_000, 0, 9_100_000),                 # no kernel timestamp: only the application's
            (99, 0, 0, 50)]                                # another phase
    lat = bf.latency(recs, off, 10, 20)
    assert lat["app_ms"] == {"n": 3, "p50": 1.0, "p99": 2.0, "max": 2.0}
    assert lat["kernel_rx_ms"] == {"n": 2, "p50": 0.5, "p99": 0.5, "max": 0.5}
    assert lat["rx_to_read_ms"] == {"n": 2, "p50": 1.75, "p99": 1.75, "max": 1.75}


def test_quads_ignores_a_torn_tail():
    data = struct.pack("=qqqq", 1, 2, 3, 4) + b"\0" * 5
    assert bf.quads(data) == [(1, 2, 3, 4)]


def _floor_namespaces() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    return [n for n in out if n.startswith("nfqf")]


@pytest.mark.root
@pytest.mark.slow
def test_measure_floor_runs_and_cleans_up():
    before = _floor_namespaces()
    res = bf.measure_floor(rate_pps=0, seconds=1)
    assert _floor_namespaces() == before
    for k in ("packets_per_s", "cpu_us_per_packet", "cpu_user_us_per_packet", "cpu_sys_us_per_packet",
              "latency_no_queue", "latency_queue", "load_before", "load_after"):
        assert k in res, k
    assert res["packets"] > 0 and res["packets_per_s"] > 0
    assert res["cpu_us_per_packet"] > 0
    for phase in ("latency_no_queue", "latency_queue"):
        lat = res[phase]
        assert lat["received"] == lat["sent"] > 0          # accept-all: nothing lost
        assert 0 < lat["app_ms"]["p50"] <= lat["app_ms"]["p99"]
