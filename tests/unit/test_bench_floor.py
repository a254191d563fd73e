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


# ---------------------------------------------------------------------------------------- bench_tail's pure parts
import bench_tail as bt  # noqa: E402


def _attr(t: int, payload: bytes) -> bytes:
    n = 4 + len(payload)
    return struct.pack("=HH", n, t) + payload + b"\0" * ((4 - n % 4) % 4)


def _packet_msg(seq: int, ts_ns: int | None, copy: int = 64) -> bytes:
    """A queued-packet message as the kernel sends it for a forwarded packet (attribute order seen on 6.18:
    PACKET_HDR INDEV OUTDEV HWADDR TIMESTAMP CAP_LEN SKB_INFO PAYLOAD), without the timestamp when ts_ns is None."""
    ip = bytes([0x45, 0]) + struct.pack(">H", 100) + bytes(16)
    pkt = (ip + struct.pack("!HHHH", 1, 2, 80, 0) + bf.HDR.pack(seq, 7) + bytes(100))[:copy]
    attrs = _attr(1, struct.pack(">IHB", 9, 0x800, 4)) + _attr(5, struct.pack(">I", 3)) + _attr(6, struct.pack(">I", 4))
    if ts_ns is not None:
        attrs += _attr(4, struct.pack(">QQ", ts_ns // 1_000_000_000, ts_ns % 1_000_000_000 // 1000))
    attrs += _attr(13, struct.pack(">I", 100)) + _attr(10, pkt)
    body = struct.pack("=BB", 2, 0) + struct.pack(">H", 0) + attrs
    return struct.pack("=IHHII", 16 + len(body), bt.MSG_PACKET, 0, 0, 0) + body


def test_walk_packets_finds_seq_and_kernel_timestamp():
    err = struct.pack("=IHHII", 36, 2, 0, 0, 0) + struct.pack("=i", 0) + bytes(16)   # an ack in between
    buf = _packet_msg(41, 1_700_000_000_123_456_000) + err + _packet_msg(42, None)
    assert bt.walk_packets(buf, len(buf)) == [(41, 1_700_000_000_123_456_000), (42, 0)]
    short = _packet_msg(43, None, copy=30)  # payload too short for our header: seq unknown
    assert bt.walk_packets(short, len(short)) == [(-1, 0)]


def test_render_rules_forward():
    text = bt.render_rules_forward([("d3a", 0), ("d4a", 1)])
    lines = text.splitlines()
    assert lines[0] == "*mangle" and lines[-1] == "COMMIT"
    assert "-A FORWARD -o d3a -m comment --comment delayline -j NFQUEUE --queue-num 0" in lines
    assert "-A OUTPUT -o d4a -m comment --comment delayline -j NFQUEUE --queue-num 1" in lines
    assert len(lines) == 6


def test_decompose_components_add_up_to_the_end_to_end_error():
    nominal = 0.005
    # two hops: (t_recv, stamp, t_sched, t_release, send_start, send_end, kernel timestamp)
    hops = [(1.0002, 1.0001, 1.0051 + 0.0003, 1.0055, 1.0056, 1.0057, None),
            (1.0059, 1.0058, 1.0108, 1.0109, 1.0110, 1.0111, 1.0057)]
    c = bt.decompose(hops, t_app=1.0, t_sent=1.00005, krx=1.0112, t_read=1.0115, nominal=nominal)
    assert c["e2e"] == pytest.approx(1.0115 - 1.0 - 2 * nominal)
    assert sum(c[k] for k in bt.COMPONENTS) == pytest.approx(c["e2e"], abs=1e-12)
    assert c["stamp_error"] == pytest.approx(0.0001 + (1.0058 - 1.0056))
    assert c["model_queue"] == pytest.approx(0.0003, abs=1e-12)
    assert c["hold_error"] == pytest.approx(0.0001 + 0.0001)
    assert c["delivery"] == pytest.approx(1.0112 - 1.0110)
    assert c["rx_read"] == pytest.approx(0.0003)
    assert c["hop1_queue_wait"] == pytest.approx(1.0002 - 1.00005)
    assert c["kernel_queue_wait"] == pytest.approx(1.0059 - 1.0057)
    assert c["stamp_minus_kernel"] == pytest.approx(1.0058 - 1.0057)
    assert c["forward_path"] == pytest.approx(1.0057 - 1.0056)
    assert c["sender_lag"] == 0.0
    assert bt.decompose(hops, 1.0, 1.00005, 1.0112, 1.0115, nominal, t_due=0.999)["sender_lag"] == pytest.approx(0.001)


def test_report_tail_means():
    rows = [dict.fromkeys(bt.COMPONENTS + bt.INFO, 0.0) | {"e2e": i * 1e-3, "hold_error": i * 1e-3} for i in range(100)]
    r = bt.report(rows)
    assert r["packets"] == 100 and r["tail_packets"] == 1
    assert r["e2e"] == {"p50_ms": 50.0, "p99_ms": 99.0, "tail_mean_ms": 99.0}
    assert r["hold_error"]["tail_mean_ms"] == 99.0
    assert bt.report([]) == {"packets": 0}


def test_hop_quantiles():
    q = bt.hop_quantiles([i * 1e-4 for i in range(1000)])
    assert q == {"n": 1000, "p50_ms": 50.0, "p99_ms": 99.0, "p99.9_ms": 99.9, "max_ms": 99.9}
    assert bt.hop_quantiles([]) == {"n": 0}
