"""Virtual time (time dilation): the clock math (`gossipnode.vclock`), the config's `clock`, and a node runtime, a
packed member's pause and the TCP options at a dilation N > 1 against N = 1, on loopback (no root).

Timing assertions are lower bounds the mechanism guarantees (a timer never fires early, a pause never ends early)
and generous upper bounds only (the tests run beside other jobs)."""
from __future__ import annotations

import asyncio
import socket
import statistics
import time

import pytest
from pydantic import ValidationError

from gossipnode import control, runtime as runtime_mod
from gossipnode.config import ClockConfig, NodeConfig
from gossipnode.packed import PackedHost
from gossipnode.protocols.direct.core import DirectNode
from gossipnode.runtime import SOL_TCP, TCP_USER_TIMEOUT, NodeRuntime
from gossipnode.vclock import MAX_DILATION, VirtualClock

from .cluster import bind_loopback, events, run_all
from .test_node_direct import config
from .test_node_packed import ask

# ---- the clock math (pure) -----------------------------------------------------------------------------------


def test_dilation_one_is_the_identity_exactly():
    clock = VirtualClock(1.0, 1_700_000_000.0)
    for t in (0.0, 1.5, 1_700_000_123.456789, 1e12 + 0.1):
        assert clock.to_virtual(t) == t and clock.to_real(t) == t
        assert clock.real_s(t) == t and clock.virtual_s(t) == t
    assert clock.identity and not VirtualClock(5.0).identity
    before = time.time()
    assert before <= VirtualClock().now() <= time.time()


@pytest.mark.parametrize("dilation", [0.25, 2.0, 5.0, 37.5, MAX_DILATION])
def test_virtual_and_real_round_trip(dilation):
    epoch = 1_700_000_000.0
    clock = VirtualClock(dilation, epoch)
    assert clock.to_virtual(epoch) == epoch == clock.to_real(epoch)      # both agree at the epoch
    # a virtual time is a unix time (a float's ulp is 2.4e-7 s there): back to real, its rounding grows N times
    for t in (epoch + 0.001, epoch + 10.0, epoch + 86_400.5, epoch - 3.0):
        assert clock.to_real(clock.to_virtual(t)) == pytest.approx(t, abs=1e-6 * dilation)
        assert clock.to_virtual(clock.to_real(t)) == pytest.approx(t, abs=1e-6)
        assert clock.to_virtual(t) - epoch == pytest.approx((t - epoch) / dilation, abs=1e-6)
    assert clock.real_s(2.0) == pytest.approx(2.0 * dilation)
    assert clock.virtual_s(clock.real_s(3.25)) == pytest.approx(3.25)
    assert clock.to_json() == {"dilation": dilation, "epoch": epoch}


def test_now_runs_n_times_slower():
    epoch = time.time() - 1000.0
    clock = VirtualClock(5.0, epoch)
    real = time.time()
    v = clock.now()
    assert v == pytest.approx(epoch + (real - epoch) / 5.0, abs=0.05)


@pytest.mark.parametrize("bad", [0, 0.0, -1.0, -5, MAX_DILATION * 1.001, 1e9, float("inf"), float("nan"),
                                 True, False, "5", None])
def test_bad_dilation_raises_value_error(bad):
    with pytest.raises(ValueError):
        VirtualClock(bad)


def _cfg(**kw) -> NodeConfig:
    return config(0, n=2, **kw)


def test_config_clock_defaults_to_real_time_and_validates():
    assert _cfg().clock == ClockConfig(dilation=1.0, epoch=0.0)
    assert _cfg().clock.make() == VirtualClock(1.0, 0.0)
    cfg = _cfg(clock={"dilation": 5, "epoch": 1_700_000_000})
    assert cfg.clock.make() == VirtualClock(5.0, 1_700_000_000.0)
    for bad in ({"dilation": 0}, {"dilation": -2.0}, {"dilation": MAX_DILATION + 1}, {"epoch": -1.0},
                {"dilation": True}, {"dilation": "5"}, {"epoch": float("inf")}, {"dilation": 2.0, "skew": 1}):
        with pytest.raises(ValidationError):
            _cfg(clock=bad)


# ---- a runtime in virtual time -------------------------------------------------------------------------------

RATE = 5.0          # data messages per virtual second, per sender
DURATION = 2.0      # virtual seconds


@pytest.mark.parametrize("dilation", [1.0, 5.0])
def test_a_runtime_stamps_times_and_waits_in_virtual_time(tmp_path, monkeypatch, dilation):
    """Two `direct` members on loopback UDP wait for a control `start` at a virtual time, send at RATE per virtual
    second and stop after DURATION virtual seconds: the events' ts are virtual, the run lasts DURATION x N real
    seconds, the start comes at its virtual time, the core's timer fires when its wakeup has come (not before:
    no idle ticks)."""
    ticks = []
    tick = DirectNode.tick

    def counted(self, now):
        ticks.append(self.me)
        return tick(self, now)

    monkeypatch.setattr(DirectNode, "tick", counted)
    epoch = time.time() - 100.0      # virtual now = real now - 100 (N - 1) / N: far from real time when N > 1
    clock = VirtualClock(dilation, epoch)
    socks = bind_loopback(2)
    ports = [s.getsockname()[1] for s in socks]
    (tmp_path / "ctl").mkdir()
    cfgs = [config(i, n=2, ports=ports, seed=7, duration_s=DURATION, wait_for_start=True,
                   clock={"dilation": dilation, "epoch": epoch},
                   workload={"rate_per_s": RATE, "size_bytes": 40},
                   event_log=str(tmp_path / f"m{i}.jsonl"), control=str(tmp_path / "ctl" / f"m{i}.sock"))
            for i in range(2)]
    times = {}

    async def main():
        async def starter():
            for cfg in cfgs:
                while not cfg.control.exists():
                    await asyncio.sleep(0.02)
            times["at"] = at = clock.now() + 0.2            # a virtual time, 0.2 x N real seconds ahead
            for cfg in cfgs:
                await asyncio.to_thread(control.start, cfg.control, at)
        return await run_all([NodeRuntime(c, s) for c, s in zip(cfgs, socks)], starter())

    assert asyncio.run(main()) == ["duration"] * 2
    ended = time.time()
    at = times["at"]
    for cfg in cfgs:
        log = events(cfg)
        first = log[0]
        assert first["event"] == "node_started" and first["clock"] == {"dilation": dilation, "epoch": epoch}
        started = next(e["ts"] for e in log if e["event"] == "protocol_started")
        stopped = log[-1]
        assert stopped["event"] == "node_stopped" and stopped["reason"] == "duration"
        # the start: at its virtual time (never early), and not long after (generous: 2 s real)
        assert started >= at - 1e-6, (started, at)
        assert clock.to_real(started) - clock.to_real(at) < 2.0
        # every ts is virtual: between the virtual start and the virtual now, nowhere near the real clock
        assert all(first["ts"] <= e["ts"] <= clock.to_virtual(ended) + 1e-3 for e in log), cfg.name
        # the run: DURATION virtual seconds from the start, i.e. DURATION x N real (a timer never fires early)
        assert stopped["ts"] - started >= DURATION - 1e-3
        assert clock.real_s(stopped["ts"] - started) < 3 * clock.real_s(DURATION) + 2.0
        assert ended - clock.to_real(started) >= clock.real_s(DURATION) - 1e-3
        # data sends spaced 1 / RATE virtual seconds whatever N (median: a late timer skips, never bursts)
        sent = [e["ts"] for e in log if e["event"] == "data_sent"]
        assert len(sent) >= 3, cfg.name
        assert all(started <= t <= stopped["ts"] for t in sent)
        gaps = [b - a for a, b in zip(sent, sent[1:])]
        assert 0.5 / RATE <= statistics.median(gaps) <= 3.0 / RATE, gaps
        assert len(sent) <= RATE * (stopped["ts"] - started + 0.01) + 1     # never more often than RATE
        # each timer firing sends: the real delay is the virtual wakeup's real time (a firing a hair early, by
        # the loop's clock against the wall clock, ticks once more)
        assert ticks.count(cfg.id) <= 2 * len(sent) + 3, (ticks.count(cfg.id), len(sent))
    # the other member's receipts are stamped on the same virtual clock: after their sends
    sent0 = {e["seq"]: e["ts"] for e in events(cfgs[0]) if e["event"] == "data_sent"}
    got1 = [e for e in events(cfgs[1]) if e["event"] == "data_received" and e["origin"] == 0]
    assert got1 and all(e["ts"] >= sent0[e["seq"]] - 1e-3 for e in got1)
    if dilation > 1:     # the virtual clock is far behind the real one: no ts is a real time
        assert all(e["ts"] < ended - 50.0 for c in cfgs for e in events(c))


@pytest.mark.parametrize("dilation, user_timeout_s, keepalive_s, expect_ms, expect_keep", [
    (1.0, 3.0, 1.0, 3000, 1),        # the defaults: as before
    (5.0, 3.0, 1.0, 15000, 5),
    (5.0, 0.5, 0.1, 2500, 1),        # keepalive in whole seconds, at least 1
    (2.5, 1.0, 3.0, 2500, 8),        # 7.5 s rounds to 8
    (0.5, 2.0, 1.0, 1000, 1),        # faster than real time
])
def test_tcp_timeouts_are_scaled_to_real_seconds(tmp_path, dilation, user_timeout_s, keepalive_s, expect_ms,
                                                 expect_keep):
    cfg = config(0, n=2, transport="tcp", clock={"dilation": dilation, "epoch": 0.0},
                 tcp={"user_timeout_s": user_timeout_s, "keepalive_s": keepalive_s},
                 event_log=str(tmp_path / "m0.jsonl"))
    node = NodeRuntime(cfg)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        node.tune_tcp(sock)
        assert sock.getsockopt(SOL_TCP, TCP_USER_TIMEOUT) == expect_ms
        assert sock.getsockopt(SOL_TCP, socket.TCP_KEEPIDLE) == expect_keep
        assert sock.getsockopt(SOL_TCP, socket.TCP_KEEPINTVL) == expect_keep
        assert sock.getsockopt(SOL_TCP, socket.TCP_KEEPCNT) == 3
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
    node._log.close()


def test_tcp_connect_timeout_is_scaled(tmp_path, monkeypatch):
    cfg = config(0, n=2, transport="tcp", clock={"dilation": 4.0, "epoch": 0.0},
                 tcp={"connect_timeout_s": 1.5}, event_log=str(tmp_path / "m0.jsonl"))
    node = NodeRuntime(cfg)
    timeouts = []

    async def no_answer(aw, timeout):        # stands for a connect that never completes
        timeouts.append(timeout)
        aw.close()
        raise asyncio.TimeoutError

    monkeypatch.setattr(runtime_mod.asyncio, "wait_for", no_answer)
    asyncio.run(node._tcp_connect(1))
    assert timeouts == [6.0] and node.counters["tcp_failed"] == 1
    node._log.close()


# ---- a packed member's pause ---------------------------------------------------------------------------------


def test_a_packed_pause_lasts_its_virtual_duration_times_n(tmp_path):
    dilation, pause_s = 5.0, 0.4          # 2 s real
    epoch = time.time()
    clock = VirtualClock(dilation, epoch)
    socks = bind_loopback(2)
    ports = [s.getsockname()[1] for s in socks]
    (tmp_path / "ctl").mkdir()
    cfgs = [config(i, n=2, ports=ports, seed=5, duration_s=6.0,      # 30 s real: a guard, stopped before
                   clock={"dilation": dilation, "epoch": epoch}, workload={"rate_per_s": 10, "size_bytes": 40},
                   event_log=str(tmp_path / f"m{i}.jsonl"), control=str(tmp_path / "ctl" / f"m{i}.sock"))
            for i in range(2)]
    host = PackedHost(cfgs, socks)
    window = {}

    async def main():
        async def faults():
            while not all(c.control.exists() for c in cfgs):
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.5)
            window["asked"] = time.time()
            await ask(cfgs[1], {"cmd": "pause", "duration_s": pause_s})
            window["paused_v"] = clock.now()            # paused for sure from here
            while (await ask(cfgs[1], {"cmd": "state"}))["state"]["paused"]:
                await asyncio.sleep(0.05)
            window["resumed"] = time.time()
            await asyncio.sleep(0.3)
            for c in cfgs:
                await ask(c, {"cmd": "stop"})
        results = await asyncio.gather(host.run(), faults())
        return results[0]

    assert asyncio.run(main()) == {"m0": "control", "m1": "control"}
    real = window["resumed"] - window["asked"]
    assert real >= clock.real_s(pause_s) - 1e-3, real               # a pause never ends early
    assert real < 3 * clock.real_s(pause_s) + 2.0, real
    # paused from before `paused_v` until at least pause_s virtual seconds after the request was sent
    t0, t1 = window["paused_v"], clock.to_virtual(window["asked"]) + pause_s
    log1 = events(cfgs[1])
    assert t1 - t0 > pause_s / 2 and not [e for e in log1 if t0 < e["ts"] < t1], "a paused member ran"
    assert [e for e in log1 if e["event"] == "data_received" and e["ts"] > t0]     # ... and read again after
