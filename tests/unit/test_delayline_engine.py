"""The compiled delay line engine (`_engine.c`, issue 21) against the Python reference (no root, no sockets):
the PRNG's sequences, the link model's decisions packet by packet on one trace (release times compared bit for
bit, drops, counters) through the pure entry point `link_admit`, and the queued-packet parser."""
from __future__ import annotations

import math
from contextlib import contextmanager
import os
import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.shaping import nfqueue as nfq
from orchestrator.shaping.delayline import cengine
from orchestrator.shaping.delayline.model import LinkModel
from orchestrator.shaping.delayline.prng import Xoshiro, seed64
from orchestrator.shaping.params import DirParams, GilbertElliott

from tests.unit.test_delayline_wire import COPY, error_msg, ipv4, packet_msg

pytestmark = pytest.mark.skipif(not cengine.available(),
                                reason="the compiled engine is not built (make setup / build_engine.py)")
MBIT = 1_000_000


def test_prng_sequences_match():
    m = cengine.load()
    for seed in (0, 1, "7/h0-h3/down", None):
        s64 = seed64(seed if seed is not None else 5)
        py = Xoshiro(seed if seed is not None else 5)
        st_ = m.ffi.new("uint64_t[4]")
        m.lib.dl_seed(st_, s64)
        assert [py.s0, py.s1, py.s2, py.s3] == list(st_)
        for _ in range(200):
            assert py.random() == m.lib.dl_random(st_)
            assert py.gauss(0.0, 0.002) == m.lib.dl_gauss(st_, 0.0, 0.002)
    # the known first output of xoshiro256** seeded by splitmix64(0) (reference implementations)
    st_ = m.ffi.new("uint64_t[4]")
    m.lib.dl_seed(st_, 0)
    assert [hex(x) for x in st_] == ["0xe220a8397b1dcdaf", "0x6e789e6aa1b965f4", "0x6c45d188009454f",
                                    "0xf88bb8a8724c81ec"]


def counters(m) -> dict:
    c = m.counters(1e9)
    c.pop("params")
    return c


def run_both(p: DirParams, trace, seed, ops=None):
    """Feed `trace` ([(t, size)], plus live changes in `ops`: index -> (op, arg)) through both models; return
    both outcome lists and both models."""
    py, c = LinkModel(p, seed=seed), cengine.CLinkModel(p, seed=seed)
    out_py, out_c = [], []
    for i, (t, size) in enumerate(trace):
        for op, arg in (ops or {}).get(i, ()):
            for m in (py, c):
                if op == "set":
                    m.set(arg)
                elif op == "cut":
                    m.cut_link()
                elif op == "heal":
                    m.heal()
                elif op == "flush":
                    m.release_all()
        out_py.append(py.admit(t, size))
        out_c.append(c.admit(t, size))
    return out_py, out_c, py, c


def test_one_trace_every_path_identical():
    """A recorded-style trace: bursts into a full queue, Bernoulli and Gilbert-Elliott loss, uniform and normal
    jitter, reorder, and live set / cut / heal / flush: every release time and drop identical, and the counters."""
    rng = random.Random(21)
    trace, t = [], 1000.0
    for i in range(6000):
        t += rng.choice([0.00005, 0.0002, 0.001, 0.02]) if (i // 300) % 2 else 0.00002
        trace.append((t, rng.choice([28, 100, 576, 986, 1500])))
    base = DirParams(rate_bps=MBIT, delay_s=0.005, jitter_s=0.001, loss=0.05, queue_pkts=16)
    ops = {
        1000: [("set", DirParams(rate_bps=2 * MBIT, delay_s=0.010, jitter_s=0.002, jitter_dist="normal",
                                 queue_pkts=8, reorder=0.1))],
        2000: [("set", DirParams(rate_bps=MBIT, delay_s=0.003,
                                 gemodel=GilbertElliott(p=0.05, r=0.3, loss_bad=0.9, loss_good=0.01),
                                 queue_pkts=32))],
        2500: [("cut", None)], 2700: [("heal", None)],
        3000: [("set", DirParams(delay_s=0.02, jitter_s=0.005))],
        4000: [("flush", None), ("set", DirParams(rate_bps=30_000, delay_s=0.005, queue_pkts=64, loss=0.01))],
        5000: [("set", DirParams(rate_bps=None, delay_s=0.0, reorder=0.5, jitter_s=0.001, jitter_dist="normal"))],
    }
    out_py, out_c, py, c = run_both(base, trace, "42/h0-h1/up", ops)
    assert out_py == out_c
    assert counters(py) == counters(c)
    assert c.overflowed > 0 and c.lost > 0 and c.cut_dropped > 0 and c.reordered > 0 and c.max_queue == 64
    drops = sum(r is None for r in out_c)
    assert 0 < drops < len(trace)


rates = st.one_of(st.none(), st.integers(min_value=10_000, max_value=100 * MBIT))
params = st.builds(
    DirParams,
    rate_bps=rates,
    delay_s=st.floats(min_value=0, max_value=0.2),
    jitter_s=st.floats(min_value=0, max_value=0.02),
    jitter_dist=st.sampled_from(["uniform", "normal"]),
    loss=st.floats(min_value=0, max_value=1),
    gemodel=st.one_of(st.none(), st.builds(GilbertElliott, p=st.floats(0, 1), r=st.floats(0, 1),
                                           loss_bad=st.floats(0, 1), loss_good=st.floats(0, 1))),
    queue_pkts=st.one_of(st.none(), st.integers(min_value=1, max_value=64)),
    reorder=st.sampled_from([0.0, 0.0, 0.3]),
)


@settings(max_examples=200, deadline=None)
@given(p=params, q=params, gaps=st.lists(st.tuples(st.floats(0, 0.02), st.integers(20, 1500)), min_size=1,
                                         max_size=300),
       seed=st.integers(0, 2**64), change=st.integers(0, 300))
def test_random_params_and_traffic_identical(p, q, gaps, seed, change):
    t, trace = 0.0, []
    for g, size in gaps:
        t += g
        trace.append((t, size))
    out_py, out_c, py, c = run_both(p, trace, seed, {change: [("set", q)]})
    assert out_py == out_c
    assert counters(py) == counters(c)


def test_parser_matches_the_python_parser():
    m = cengine.load()
    buf = (packet_msg(7, 123456, ipv4(1400, COPY), extra=b"")
           + packet_msg(1, 5, ipv4(28, 28)) + error_msg(-1)
           + packet_msg(2, 6, bytes([0x00]) * COPY, cap_len=60) + packet_msg(3, 7, b"", cap_len=60)
           + packet_msg(65535, 2**32 - 1, ipv4(65535, COPY)))
    q, i, ln = m.ffi.new("int[16]"), m.ffi.new("uint32_t[16]"), m.ffi.new("int[16]")
    k = m.lib.engine_parse(m.ffi.from_buffer(buf), len(buf), COPY, q, i, ln, 16)
    py = nfq.packet_parser(COPY)(buf, len(buf))[0]
    assert [(q[j], i[j], ln[j]) for j in range(k)] == py


@contextmanager
def engine_on_socketpair(params: DirParams):
    """A compiled engine with one namespace whose netlink socket is one end of a socketpair (the other end, `b`,
    reads the verdicts it sends) and one link on queue 4: (module, engine, namespace index, link, b)."""
    import socket
    m = cengine.load()
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        eng = m.ffi.gc(m.lib.engine_new(COPY), m.lib.engine_free)
        ns = m.lib.engine_add_ns(eng, a.fileno())
        link = cengine.CLinkModel(params, seed=1)
        assert m.lib.engine_add_link(eng, ns, 4, link.c) == 0
        yield m, eng, ns, link, b
        m.lib.engine_remove_link(eng, link.c)
    finally:
        a.close()
        b.close()


def test_engine_heap_releases_in_order_with_batched_verdicts():
    """The engine without sockets: admit a buffer of queued-packet messages, release by time; the verdicts it
    would send are 32-byte ACCEPTs in release order (checked through a socketpair standing in for netlink)."""
    with engine_on_socketpair(DirParams(delay_s=0.010)) as (m, eng, ns, link, b):
        buf = b"".join(packet_msg(4, 100 + k, ipv4(100, COPY)) for k in range(5)) + packet_msg(9, 1, ipv4(1, COPY))
        m.lib.engine_admit_buf(eng, ns, m.ffi.from_buffer(buf), len(buf), 5.0)
        assert m.lib.engine_heap_len(eng) == 5 and link.held == 5
        assert m.lib.engine_next_due(eng) == 5.010
        out = m.ffi.new("int[2]")
        assert m.lib.engine_flush(eng, out, out + 1) == 0          # the unknown queue's DROP
        v = b.recv(4096)
        assert len(v) == 32 and struct.unpack(">II", v[24:32]) == (nfq.NF_DROP, 1) and v == nfq.verdict(9, 1, 0)
        assert m.lib.engine_release(eng, 5.0105, 5.0105) == 5
        assert m.lib.engine_flush(eng, out, out + 1) == 0
        v = b.recv(4096)
        assert v == b"".join(nfq.verdict(4, 100 + k, nfq.NF_ACCEPT) for k in range(5))
        assert link.held == 0 and link.accepted == 5 and not math.isinf(m.lib.engine_hist_max(eng))


def test_shards_partition_keeps_namespaces_whole_and_balances(tmp_path):
    from orchestrator.shaping.delayline.config import QueueSpec
    from orchestrator.shaping.delayline.shards import partition
    files = []
    for i in range(5):
        f = tmp_path / f"ns{i}"
        f.write_text("")
        files.append(str(f))
    specs = [QueueSpec(f"q{i}-{j}", files[i], j) for i in range(5) for j in range(i + 1)]   # 1..5 queues
    parts = partition(specs, 2)
    assert sorted(q.id for p in parts for q in p) == sorted(q.id for q in specs)
    for p in parts:
        others = {q.netns for o in parts if o is not p for q in o}
        assert not {q.netns for q in p} & others          # a namespace lives in one shard
    assert sorted(len(p) for p in parts) == [7, 8]


def test_shards_merge_the_histogram_exactly():
    """The router's p50/p99 from the shards' bins equal those of one histogram of all samples."""
    from orchestrator.shaping.delayline.loop import HIST_BIN_S, HIST_LO_S
    from orchestrator.shaping.delayline.shards import ShardRouter
    rng = random.Random(3)
    samples = [rng.expovariate(1 / 50e-6) - 20e-6 for _ in range(5000)]
    def bins(xs):
        out = {}
        for x in xs:
            b = max(0, int((x - HIST_LO_S) / HIST_BIN_S))
            out[str(b)] = out.get(str(b), 0) + 1
        return out
    def answer(xs):
        return {"queues": {}, "kernel": {}, "kernel_drops": 0, "packets": len(xs), "cpu_s": 1.0,
                "hold_error": {"bins": bins(xs), "max_s": max(xs), "min_s": min(xs)}}
    r = ShardRouter.__new__(ShardRouter)
    r.shards, r.started = [], 0.0
    whole = r.merge_stats([answer(samples)])
    split = r.merge_stats([answer(samples[:1234]), answer(samples[1234:])])
    assert whole["hold_error"] == split["hold_error"] and split["packets"] == 5000 and split["cpu_s"] == 2.0


@settings(max_examples=300, deadline=None)
@given(msgs=st.lists(st.tuples(st.integers(0, 65535), st.integers(0, 2**32 - 1), st.integers(20, 65535),
                               st.integers(0, 80), st.lists(st.binary(max_size=9), max_size=3),
                               st.sampled_from([0, 0, -22])), min_size=1, max_size=8),
       copy_range=st.sampled_from([20, 40, 64]), tail=st.integers(0, 15))
def test_parser_agrees_with_the_python_parser_on_random_messages(msgs, copy_range, tail):
    from tests.unit.test_delayline_wire import attr
    m = cengine.load()
    buf = b""
    for qnum, pkt_id, total, copied, extra, err in msgs:
        copied = min(copied, copy_range)
        payload = ipv4(total, copied) if copied >= 4 else b"\x45" * copied
        buf += packet_msg(qnum, pkt_id, payload, cap_len=total,
                          extra=b"".join(attr(20 + i, x) for i, x in enumerate(extra)))
        if err:
            buf += error_msg(err)
    n = len(buf) + tail                                   # a few bytes of a next header: ignored by both
    padded = bytearray(buf) + bytes(64)
    q, i, ln = m.ffi.new("int[16]"), m.ffi.new("uint32_t[16]"), m.ffi.new("int[16]")
    k = m.lib.engine_parse(m.ffi.from_buffer(padded), n, copy_range, q, i, ln, 16)
    assert [(q[j], i[j], ln[j]) for j in range(k)] == nfq.packet_parser(copy_range)(padded, n)[0]


def test_the_c_loop_holds_releases_and_hands_back_to_python():
    """engine_run without root: a datagram socketpair stands in for a namespace's netlink socket. Packets held
    10 ms come back as ACCEPT verdicts in arrival order; a ready fd of Python's epoll makes engine_run return 1,
    the housekeeping deadline 0. (No wall-clock bound is asserted.)"""
    import select
    import socket
    import time
    m = cengine.load()
    kern, ours = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    r, w = os.pipe()
    pyep = select.epoll()
    try:
        eng = m.ffi.gc(m.lib.engine_new(COPY), m.lib.engine_free)
        ns = m.lib.engine_add_ns(eng, ours.fileno())
        link = cengine.CLinkModel(DirParams(delay_s=0.010), seed=1)
        assert m.lib.engine_add_link(eng, ns, 2, link.c) == 0
        assert m.lib.engine_loop_init(eng, pyep.fileno(), 30e-6, 150e-6, 0.5e-6) == 0
        kern.send(b"".join(packet_msg(2, 7 + k, ipv4(100, COPY)) for k in range(3)))
        deadline = time.monotonic() + 30
        while (link.held or link.accepted < 3) and time.monotonic() < deadline:
            assert m.lib.engine_run(eng, time.monotonic() + 0.05) == 0      # nothing for Python: housekeeping
        assert link.accepted == 3 and link.held == 0 and m.lib.engine_heap_len(eng) == 0
        kern.setblocking(False)
        got = b""
        while True:
            try:
                got += kern.recv(4096)
            except BlockingIOError:
                break
        assert got == b"".join(nfq.verdict(2, 7 + k, nfq.NF_ACCEPT) for k in range(3))
        assert link.c.err_n == 3
        pyep.register(r, select.EPOLLIN)
        os.write(w, b"x")
        assert m.lib.engine_run(eng, time.monotonic() + 30) == 1             # Python's epoll is ready
        m.lib.engine_remove_link(eng, link.c)
        m.lib.engine_remove_ns(eng, ns)
    finally:
        for f in (r, w):
            os.close(f)
        pyep.close()
        kern.close()
        ours.close()


def _stamped(qnum: int, pkt_id: int, kernel_time: float) -> bytes:
    """A forwarded packet as queued from FORWARD: it carries NFQA_TIMESTAMP (realtime s, us), then CAP_LEN."""
    from tests.unit.test_delayline_wire import attr
    sec = int(kernel_time)
    return packet_msg(qnum, pkt_id, ipv4(100, COPY), cap_len=100,
                      extra=attr(nfq.NFQA_TIMESTAMP, struct.pack(">QQ", sec, round((kernel_time - sec) * 1e6))))


def test_a_packet_whose_kernel_time_makes_it_due_already_goes_out_as_a_late_release_in_both_engines():
    """Admitted at its kernel arrival time 50 ms ago on a 10 ms link, the packet was due 40 ms ago: it goes out at
    once, and counts as a held packet released 40 ms late (held back to 0, accepted, a hold-error sample) — the
    counters had leaked one `held` per such packet and the hold error never saw them."""
    import time

    from orchestrator.shaping.delayline.config import QueueSpec
    from orchestrator.shaping.delayline.loop import Direction, EventLoop, Namespace, realtime_minus_monotonic

    # python
    loop = EventLoop(COPY)
    ns = object.__new__(Namespace)
    ns.dirs, ns.pending = {}, []
    d = ns.dirs[4] = Direction(QueueSpec("l/up", "x", 4, DirParams(delay_s=0.010)), ns, 1)
    now = time.monotonic()
    pkts = loop.parse(*(lambda b: (b, len(b)))(_stamped(4, 7, now + loop.rt_offset - 0.050)))[0]
    loop._admit(ns, pkts, now)
    assert ns.pending == [nfq.verdict(4, 7, nfq.NF_ACCEPT)]
    assert (d.held, d.accepted, d.err_n) == (0, 1, 1) and d.err_max == pytest.approx(0.040, abs=0.002)
    loop.ts_sock.close()
    loop.ep.close()

    # c (the kernel time is derived from `now` itself: descheduling between two clock readings cannot move it)
    with engine_on_socketpair(DirParams(delay_s=0.010)) as (m, eng, nsi, link, b):
        now = time.monotonic()
        buf = _stamped(4, 7, now + realtime_minus_monotonic() - 0.050)
        m.lib.engine_admit_buf(eng, nsi, m.ffi.from_buffer(buf), len(buf), now)
        assert m.lib.engine_heap_len(eng) == 0 and link.held == 0 and link.accepted == 1
        assert m.lib.engine_hist_max(eng) == pytest.approx(0.040, abs=0.002)
        out = m.ffi.new("int[2]")
        assert m.lib.engine_flush(eng, out, out + 1) == 0
        assert b.recv(4096) == nfq.verdict(4, 7, nfq.NF_ACCEPT)
