"""Packed members: several members in one process and one loop (`gossipnode.packed`), on loopback UDP.

The GSGC loopback cluster run packed behaves as processes do (rounds complete, buffers are collected); faults act
on one member while its process-mates run on: a paused member is declared failed by the others and skips its
missed steps at resume; a crashed member writes nothing more and its peers declare it failed; a restart is a
fresh runtime. The CLI runs packed members from --configs or a manifest. One root test opens two members'
sockets in two network namespaces.
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from gossipnode import control, netns
from gossipnode.config import NodeConfig
from gossipnode.packed import CRASHED, FAILED, PackedHost, check_packable, read_manifest

from .cluster import bind_loopback, events
from .gsgc_sim import make_configs

REPO = Path(__file__).resolve().parents[2]


def packed_cluster(tmp_path: Path, n: int, **kw):
    socks = bind_loopback(n)
    (tmp_path / "ctl").mkdir(exist_ok=True)
    cfgs = make_configs(n, ports=[s.getsockname()[1] for s in socks], log_dir=tmp_path / "events",
                        control_dir=tmp_path / "ctl", **kw)
    return cfgs, PackedHost(cfgs, socks)


async def ask(cfg, req: dict) -> dict:
    return await asyncio.to_thread(control.request, cfg.control, req)


def kinds(log: list[dict]) -> Counter:
    return Counter(e["event"] for e in log)


def test_packed_cluster_completes_rounds_and_collects_garbage(tmp_path):
    n, duration = 12, 5.0
    cfgs, host = packed_cluster(tmp_path, n, subgroup=2, step_s=0.1, fail_k=30, senders=[0, 6], rate_per_s=10.0,
                                size_bytes=100, duration_s=duration)
    states = {}

    async def main():
        async def probe():
            await asyncio.sleep(duration / 2)
            states[5] = await asyncio.to_thread(control.dump_state, cfgs[5].control)
        results = await asyncio.gather(host.run(), probe())
        return results[0]

    reasons = asyncio.run(main())
    assert reasons == {cfg.name: "duration" for cfg in cfgs}
    assert states[5]["node"] == "m5" and not states[5]["paused"] and states[5]["runtime"]["packets_in"] > 0
    for cfg in cfgs:
        log = events(cfg)
        k = kinds(log)
        assert log[0]["event"] == "node_started" and log[-1]["event"] == "node_stopped", cfg.name
        assert {"bad_packet", "error", "declared_failed", "send_error"}.isdisjoint(k), (cfg.name, k)
        assert k["round_completed"] >= 3, (cfg.name, k)
        assert sum(e["discarded"] for e in log if e["event"] == "gc") > 0, cfg.name
        assert {e["node"] for e in log} == {cfg.name}          # each member its own log
        assert len({e["pid"] for e in log if e["event"] == "node_started"}) == 1
    assert len({events(c)[0]["pid"] for c in cfgs}) == 1       # ... and one process
    assert not list((tmp_path / "ctl").iterdir())               # control sockets removed


def test_paused_member_is_declared_failed_while_its_process_mates_run(tmp_path):
    n, victim = 8, 3
    cfgs, host = packed_cluster(tmp_path, n, subgroup=2, step_s=0.1, fail_k=8, duration_s=9.0)
    window = {}

    async def main():
        async def faults():
            await asyncio.sleep(1.5)
            await ask(cfgs[victim], {"cmd": "pause"})
            window["paused"] = time.time()                 # paused for sure from here ...
            state = (await ask(cfgs[victim], {"cmd": "state"}))["state"]
            assert state["paused"]
            with pytest.raises(control.ControlError, match="paused"):
                await ask(cfgs[victim], {"cmd": "workload", "op": "start"})
            await asyncio.sleep(3.0)
            window["resumed"] = time.time()                # ... to here
            await ask(cfgs[victim], {"cmd": "resume"})
        results = await asyncio.gather(host.run(), faults())
        return results[0]

    reasons = asyncio.run(main())
    assert set(reasons.values()) == {"duration"}
    t0, t1 = window["paused"], window["resumed"]
    vlog = events(cfgs[victim])
    assert not [e for e in vlog if t0 < e["ts"] < t1], "a paused member handled something"
    skipped = [e for e in vlog if e["event"] == "steps_skipped" and e["ts"] >= t1]
    assert skipped and max(e["missed"] for e in skipped) >= 10, skipped   # its timers fired late and skipped
    for cfg in cfgs:
        if cfg.id == victim:
            continue
        log = events(cfg)
        declared = [e for e in log if e["event"] == "declared_failed" and e["member"] == victim]
        assert declared and t0 < declared[0]["ts"] < t1 + 0.5, (cfg.name, declared)
        assert [e for e in log if e["event"] == "round_completed" and t0 + 0.5 < e["ts"] < t1], cfg.name
        assert not [e for e in log if e["event"] == "declared_failed" and e["member"] != victim], cfg.name


def test_crashed_member_is_silent_its_peers_declare_it_failed_and_restart_is_fresh(tmp_path):
    n, victim = 8, 5
    cfgs, host = packed_cluster(tmp_path, n, subgroup=2, step_s=0.1, fail_k=8, duration_s=8.0)
    window = {}

    async def main():
        async def faults():
            await asyncio.sleep(1.5)
            await ask(cfgs[victim], {"cmd": "crash"})
            window["crashed"] = time.time()
            assert host.by_name[f"m{victim}"].state == CRASHED
            with pytest.raises(control.ControlError, match="crashed"):
                await ask(cfgs[victim], {"cmd": "state"})
            await asyncio.sleep(3.0)
            window["restarted"] = time.time()
            reply = await ask(cfgs[victim], {"cmd": "restart"})
            assert reply["incarnation"] == 2
            state = (await ask(cfgs[victim], {"cmd": "state"}))["state"]
            assert state["incarnation"] == 2 and state["runtime"].get("packets_in", 0) < 50
            # the new runtime's config says it is the member's second process (a protocol can tell a restart)
            member = host.by_name[f"m{victim}"]
            assert member.runtime_cfg.incarnation == 1 and member.runtime.cfg.incarnation == 1
        results = await asyncio.gather(host.run(), faults())
        return results[0]

    reasons = asyncio.run(main())
    assert set(reasons.values()) == {"duration"}
    t0, t1 = window["crashed"], window["restarted"]
    vlog = events(cfgs[victim])
    assert not [e for e in vlog if t0 <= e["ts"] < t1], "a crashed member wrote an event"
    starts = [e for e in vlog if e["event"] == "node_started"]
    stops = [e for e in vlog if e["event"] == "node_stopped"]
    assert len(starts) == 2 and starts[1]["ts"] >= t1          # the restart is a new runtime ...
    assert len(stops) == 1 and stops[0]["ts"] > starts[1]["ts"]  # ... and the crash left no goodbye
    for cfg in cfgs:
        if cfg.id == victim:
            continue
        declared = [e for e in events(cfg) if e["event"] == "declared_failed"]
        assert [e["member"] for e in declared] == [victim], (cfg.name, declared)
        assert t0 < declared[0]["ts"] < t1, cfg.name


def test_a_member_that_cannot_start_does_not_stop_the_others(tmp_path):
    socks = bind_loopback(3)
    (tmp_path / "ctl").mkdir()
    cfgs = make_configs(3, ports=[s.getsockname()[1] for s in socks], log_dir=tmp_path / "events",
                        control_dir=tmp_path / "ctl", subgroup=1, step_s=0.1, duration_s=1.5)
    socks[0].close()
    socks[1].close()                 # m0 and m1 bind their own; m2's address stays taken
    try:
        host = PackedHost(cfgs)
        reasons = asyncio.run(host.run())
    finally:
        socks[2].close()
    assert host.by_name["m2"].state == FAILED and "Address already in use" in reasons["m2"], reasons
    assert reasons["m0"] == reasons["m1"] == "duration"
    for cfg in cfgs[:2]:             # they ran and gossiped with each other (rounds wait for m2: no fail_k)
        log = events(cfg)
        assert log[0]["event"] == "node_started" and log[-1]["event"] == "node_stopped"
        assert log[-1]["runtime"]["packets_in"] > 0, log[-1]
    assert not events(cfgs[2])                      # it never started: no node_started, no node_stopped


def test_members_that_would_share_a_file_or_address_are_refused(tmp_path):
    cfgs = make_configs(3, log_dir=tmp_path)
    check_packable(cfgs)
    with pytest.raises(ValueError, match="event_log"):
        check_packable([cfgs[0], cfgs[1].model_copy(update={"event_log": cfgs[0].event_log})])
    with pytest.raises(ValueError, match="listen"):
        check_packable([cfgs[0], cfgs[1].model_copy(update={"listen": cfgs[0].listen})])
    check_packable([cfgs[0], cfgs[1].model_copy(update={"listen": cfgs[0].listen, "netns": "other"})])
    (tmp_path / "m.txt").write_text("# members\na.json\n/abs/b.json  # the second\n\n")
    assert read_manifest(tmp_path / "m.txt") == [tmp_path / "a.json", Path("/abs/b.json")]
    (tmp_path / "m.json").write_text('["a.json"]')
    assert read_manifest(tmp_path / "m.json") == [tmp_path / "a.json"]


def _write_configs(tmp_path: Path, n: int, **kw) -> list[Path]:
    socks = bind_loopback(n)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()                # the node binds them itself
    (tmp_path / "ctl").mkdir(exist_ok=True)
    cfgs = make_configs(n, ports=ports, log_dir=tmp_path / "events", control_dir=tmp_path / "ctl", **kw)
    paths = []
    for cfg in cfgs:
        path = tmp_path / f"{cfg.name}.json"
        path.write_text(cfg.model_dump_json())
        paths.append(path)
    return paths


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO / "node_image")}


def test_cli_runs_a_manifest_of_members_in_one_process_until_sigterm(tmp_path):
    paths = _write_configs(tmp_path, 4, subgroup=2, step_s=0.1)
    manifest = tmp_path / "members.txt"
    manifest.write_text("\n".join(p.name for p in paths) + "\n")
    proc = subprocess.Popen([sys.executable, "-m", "gossipnode", "--manifest", str(manifest)], env=_env(),
                            stderr=subprocess.PIPE, text=True)
    try:
        ctl = [tmp_path / "ctl" / f"m{i}.sock" for i in range(4)]
        deadline = time.time() + 60
        while not all(c.exists() for c in ctl) and time.time() < deadline and proc.poll() is None:
            time.sleep(0.1)
        deadline = time.time() + 60
        while time.time() < deadline:
            state = control.dump_state(ctl[1])
            if state["protocol"]["global"]["round"] >= 3:
                break
            time.sleep(0.2)
        assert state["protocol"]["global"]["round"] >= 3, state
        control.request(ctl[2], {"cmd": "crash"})
        assert proc.poll() is None                       # one member's crash leaves the process running
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    pids = set()
    for i in range(4):
        log = [json.loads(line) for line in (tmp_path / "events" / f"m{i}.jsonl").read_text().splitlines()]
        pids |= {e["pid"] for e in log if e["event"] == "node_started"}
        assert (log[-1]["event"] == "node_stopped") == (i != 2), log[-1]
    assert len(pids) == 1
    assert not list((tmp_path / "ctl").iterdir())


def test_cli_refuses_a_bad_config_and_runs_nothing(tmp_path):
    paths = _write_configs(tmp_path, 2)
    (tmp_path / "bad.json").write_text("{}")
    out = subprocess.run([sys.executable, "-m", "gossipnode", "--configs", str(paths[0]), str(tmp_path / "bad.json")],
                         env=_env(), capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stderr.startswith(f"gossipnode: {tmp_path / 'bad.json'}: ")
    assert not (tmp_path / "events").exists()


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None, reason="needs root and iproute2")
def test_members_of_one_process_open_their_sockets_in_their_own_namespaces(tmp_path):
    """Two namespaces joined by a veth pair; each member binds the same port on its own address inside its own
    namespace (the process stays in its own); GSGC rounds complete across the veth."""
    tag = uuid.uuid4().hex[:6]
    ns = [f"h8pk{tag}a", f"h8pk{tag}b"]
    addrs = ["10.251.0.1", "10.251.0.2"]
    try:
        for name in ns:
            _ip("netns", "add", name)
            _ip("-n", name, "link", "set", "lo", "up")
        _ip("link", "add", f"pk{tag}a", "netns", ns[0], "type", "veth", "peer", "name", f"pk{tag}b", "netns", ns[1])
        for k, name in enumerate(ns):
            dev = f"pk{tag}{'ab'[k]}"
            _ip("-n", name, "addr", "add", f"{addrs[k]}/24", "dev", dev)
            _ip("-n", name, "link", "set", dev, "up")
        base = make_configs(2, subgroup=1, step_s=0.1, duration_s=3.0, log_dir=tmp_path / "events")
        members = [{"id": i, "name": f"m{i}", "addr": f"{addrs[i]}:7100"} for i in range(2)]
        cfgs = [c.model_validate({**c.model_dump(mode="json"), "members": members, "listen": members[i]["addr"],
                                  "netns": ns[i]}) for i, c in enumerate(base)]
        own = os.stat("/proc/thread-self/ns/net").st_ino
        reasons = asyncio.run(PackedHost(cfgs).run())
        assert os.stat("/proc/thread-self/ns/net").st_ino == own          # back in our own namespace
        assert reasons == {"m0": "duration", "m1": "duration"}
        for cfg in cfgs:
            k = kinds(events(cfg))
            assert k["round_completed"] >= 3 and not k["bad_packet"], (cfg.name, k)
        with pytest.raises(OSError):
            with netns.entered(f"h8pk{tag}nosuch"):
                pass
    finally:
        for name in ns:
            subprocess.run(["ip", "netns", "del", name], capture_output=True)


def test_over_tcp_a_paused_member_reads_late_and_a_crashed_one_fails_its_connections(tmp_path):
    """`direct` over TCP, packed: a paused member reads nothing while paused, then what its socket buffers held;
    a crash closes its connections without a goodbye, and its peers hear `failed`."""
    socks = bind_loopback(4)
    ports = [s.getsockname()[1] for s in socks]
    members = [{"id": i, "name": f"m{i}", "addr": f"127.0.0.1:{ports[i]}"} for i in range(4)]
    (tmp_path / "ctl").mkdir()
    cfgs = [NodeConfig.model_validate({
        "name": f"m{i}", "id": i, "listen": members[i]["addr"], "members": members,
        "protocol": {"name": "direct", "transport": "tcp"}, "senders": [0, 1], "seed": 3, "duration_s": 6.0,
        "workload": {"rate_per_s": 20, "size_bytes": 40}, "event_log": str(tmp_path / f"m{i}.jsonl"),
        "control": str(tmp_path / "ctl" / f"m{i}.sock")}) for i in range(4)]
    host = PackedHost(cfgs, socks)
    window = {}

    async def main():
        async def faults():
            await asyncio.sleep(1.5)
            await ask(cfgs[2], {"cmd": "pause", "duration_s": 1.5})
            window["paused"] = time.time()
            await ask(cfgs[3], {"cmd": "crash"})
            window["crashed"] = time.time()
            await asyncio.sleep(1.0)
            window["resumed"] = time.time()        # resumes by itself 1.5 s after the pause: not yet
            await ask(cfgs[3], {"cmd": "stop"})     # releases the crashed member (else it awaits a restart)
        results = await asyncio.gather(host.run(), faults())
        return results[0]

    reasons = asyncio.run(main())
    assert reasons == {"m0": "duration", "m1": "duration", "m2": "duration", "m3": "crash"}, reasons
    t0, t1 = window["paused"], window["resumed"]
    log2 = events(cfgs[2])
    assert not [e for e in log2 if t0 < e["ts"] < t1], "a paused member handled something"
    late = [e for e in log2 if e["event"] == "data_received" and e["ts"] > t1]
    sent_during = {(int(e["node"][1:]), e["seq"]) for c in cfgs[:2] for e in events(c)
                   if e["event"] == "data_sent" and t0 < e["ts"] < t1}
    assert sent_during and sent_during <= {(e["origin"], e["seq"]) for e in late}   # queued, read at resume
    assert not [e for e in events(cfgs[3]) if e["ts"] >= window["crashed"]]
    assert events(cfgs[3])[-1]["event"] != "node_stopped"
    for cfg in cfgs[:2]:
        failed = [e for e in events(cfg) if e["event"] == "connection_failed" and e["peer"] == 3]
        assert failed and failed[0]["ts"] >= t0 - 0.1, (cfg.name, failed)


def test_a_restarted_member_runs_the_protocol_without_waiting_for_a_common_start(tmp_path):
    """Members that waited for the common start (`wait_for_start`): after a crash, `restart` must run the protocol
    at once — nobody sends `start` again (it came back idle before)."""
    socks = bind_loopback(3)
    (tmp_path / "ctl").mkdir()
    cfgs = make_configs(3, ports=[s.getsockname()[1] for s in socks], log_dir=tmp_path / "events",
                        control_dir=tmp_path / "ctl", subgroup=1, step_s=0.1, duration_s=30.0)
    cfgs = [c.model_copy(update={"wait_for_start": True}) for c in cfgs]
    host = PackedHost(cfgs, socks)
    window = {}

    def ran_again() -> bool:
        lines = cfgs[1].event_log.read_text().splitlines()   # the last line may still be half written
        return any('"round_started"' in ln and json.loads(ln)["ts"] > window["restarted"] for ln in lines[:-1])

    async def main():
        async def faults():
            await asyncio.sleep(0.3)
            for c in cfgs:
                await ask(c, {"cmd": "start"})
            await asyncio.sleep(0.5)
            await ask(cfgs[1], {"cmd": "crash"})
            await asyncio.sleep(0.3)
            window["restarted"] = time.time()
            await ask(cfgs[1], {"cmd": "restart"})
            # stop once the restarted member ran a round (steps of 0.1 s), or after 20 s on a starved machine
            deadline = time.monotonic() + 20.0
            while time.monotonic() < deadline and not ran_again():
                await asyncio.sleep(0.2)
            for c in cfgs:
                await ask(c, {"cmd": "stop"})
        await asyncio.gather(host.run(), faults())

    asyncio.run(main())
    log = events(cfgs[1])
    started = [e["ts"] for e in log if e["event"] == "protocol_started"]
    assert len(started) == 2 and started[1] >= window["restarted"]
    assert [e for e in log if e["event"] == "round_started" and e["ts"] > window["restarted"]]
