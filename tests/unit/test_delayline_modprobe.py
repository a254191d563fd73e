"""The delay line loads nfnetlink_queue before its daemon starts when the module is not in yet (a stock kernel: the
netem VM's Debian kernel had it unloaded and every run failed on the missing /proc counters file)."""
from __future__ import annotations

from orchestrator.shaping.delayline import supervisor


def test_modprobe_only_when_the_queue_file_is_missing(monkeypatch):
    calls = []
    monkeypatch.setattr(supervisor.subprocess, "run", lambda argv, **kw: calls.append((argv, kw)))
    monkeypatch.setattr(supervisor.os.path, "exists", lambda p: p != supervisor.QUEUE_PROC)
    supervisor.load_queue_module()
    assert [c[0] for c in calls] == [["modprobe", "nfnetlink_queue"]] and calls[0][1]["check"] is False
    calls.clear()
    monkeypatch.setattr(supervisor.os.path, "exists", lambda p: True)
    supervisor.load_queue_module()
    assert calls == []
