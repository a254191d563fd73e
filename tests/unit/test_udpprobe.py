"""The fidelity probe's UDP train tool (orchestrator/udpprobe.py) on loopback: the sink ends as soon as the whole
train arrived (the idle wait is only for a train that lost packets)."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

UDP_TOOL = [sys.executable, "-m", "orchestrator.udpprobe"]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train(count_arg: list[str], sent: int) -> tuple[dict, float]:
    port = free_port()
    sink = subprocess.Popen([*UDP_TOOL, "sink", str(port), "5", *count_arg], stdout=subprocess.PIPE, text=True)
    try:
        assert sink.stdout.readline().strip() == "ready"
        subprocess.run([*UDP_TOOL, "source", "127.0.0.1", str(port), str(sent), "100", "0"], check=True)
        t = time.monotonic()
        out, _ = sink.communicate(timeout=30)
        return json.loads(out.strip().splitlines()[-1]), time.monotonic() - t
    finally:
        if sink.poll() is None:
            sink.kill()
            sink.wait()


def test_the_sink_ends_when_the_whole_train_arrived_and_waits_idle_only_for_a_short_one():
    got, after = train(["10"], 10)
    assert len(got["times"]) == 10 and got["sizes"] == [100] * 10
    assert after < 3.0                   # it did not wait its 5 s idle time (a bound on a mechanism, not speed)
    got, after = train(["12"], 10)       # two packets "lost": the idle wait ends it (5 s after the last arrival,
    assert len(got["times"]) == 10 and after >= 4.0      # which came before the source exited)
    assert subprocess.run([*UDP_TOOL, "sink"], capture_output=True).returncode == 2
