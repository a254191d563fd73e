"""QSM's sender credits (§2.4: "Sending a message consumes a credit out of a fixed pool of size C ... When the timer
expires, we increase the number of credits by ΔT μ_snd, where ΔT is the actual amount of time that has elapsed"):
a workload timer that fires late sends what came due since, up to C at once. Before, a late timer sent one message
and skipped the rest, so a sender whose event loop wakes once a millisecond (epoll's resolution) could not pass
about 1 000 messages per real second at any configured rate (docs/reproduction-qsm.md, Figure 9 with budgets)."""
from __future__ import annotations

import pytest

from gossipnode.config import NodeConfig
from gossipnode.protocols.qsm.core import QsmNode


def sender(rate: float = 3000, credits: int | None = None, stop_s: float = 100.0) -> QsmNode:
    members = [{"id": i, "name": f"m{i}", "addr": f"127.0.0.1:{20000 + i}"} for i in range(2)]
    params = {"name": "qsm", "groups": [{"name": "a", "members": [0, 1]}], "rate_control": False,
              **({"send_credits": credits} if credits is not None else {})}
    cfg = NodeConfig.model_validate({
        "name": "m0", "id": 0, "listen": members[0]["addr"], "members": members, "protocol": params,
        "senders": [0], "workload": {"rate_per_s": rate, "size_bytes": 64, "start_s": 0.0, "stop_s": stop_s},
        "seed": 1, "event_log": "/nonexistent/m0.jsonl",
        "multicast": [{"name": "r-a", "address": "239.2.1.1", "port": 7300}]})
    return QsmNode(cfg, 0.0)


def sends(out) -> list:
    return [e for e in out.events if e.event == "data_sent"]


def skipped(out) -> int:
    return sum(e.fields["missed"] for e in out.events if e.event == "steps_skipped")


def test_a_timer_a_millisecond_late_sends_every_message_due_since():
    node = sender(rate=3000)
    first = node.due
    out = node.tick(first + 0.001)                  # due at first, first + 1/3000, + 2/3000, + 3/3000
    assert len(sends(out)) == 4 and skipped(out) == 0
    assert node.due == pytest.approx(first + 4 / 3000)


def test_over_a_second_the_sender_keeps_its_rate_with_a_millisecond_timer():
    node = sender(rate=3000)
    t, sent = 0.0, 0
    while t < 1.0:
        t += 0.0011                                 # a wakeup every 1.1 ms, as epoll's resolution gives
        sent += len(sends(node.tick(t)))
    assert abs(sent - 3000 * t) <= 3                # not t / 1.1 ms = 909


def test_beyond_the_credit_pool_the_rest_is_skipped():
    node = sender(rate=3000, credits=8)
    first = node.due
    out = node.tick(first + 1.0)                    # a second late (a paused member): 3001 sends were due
    assert len(sends(out)) == 8
    assert 2990 <= skipped(out) <= 2994             # the 2 993 due after the 8 sent
    assert node.due == pytest.approx(first + 1.0 + 1 / 3000)


def test_a_timer_on_time_sends_one():
    node = sender(rate=100)
    out = node.tick(node.due)
    assert len(sends(out)) == 1 and skipped(out) == 0
