"""Queue drops per link direction from tc statistics and the delay line's counters (no Spark)."""
from __future__ import annotations

from analysis.queues import queue_drops, total_drops
from tests.analysis import synthetic as syn


def tc() -> dict:
    return {"h0": syn.tc_qdiscs({"h0-eth0": 5, "h0-eth1": 0}), "h1": syn.tc_qdiscs({"h1-eth0": 0}),
            "h2": syn.tc_qdiscs({"h2-eth0": 0, "h2-eth1": 3})}


def test_root_qdisc_drops_per_link_direction():
    warnings: list[str] = []
    rows = queue_drops(syn.plan(), tc(), None, warnings)
    got = [(r["link"], r["direction"], r["node"], r["dev"], r["qdisc"], r["drops"], r["overlimits"]) for r in rows]
    # tbf's drops already include its pfifo's: 5, not 10. h3 has no tc file.
    assert got == [
        ("h0-h1", "down", "h0", "h0-eth0", "tbf+pfifo", 5, 10), ("h0-h1", "up", "h1", "h1-eth0", "tbf+pfifo", 0, 0),
        ("h0-h2", "down", "h0", "h0-eth1", "tbf+pfifo", 0, 0), ("h0-h2", "up", "h2", "h2-eth0", "tbf+pfifo", 0, 0),
        ("h2-h3", "down", "h2", "h2-eth1", "tbf+pfifo", 3, 6), ("h2-h3", "up", "h3", "h3-eth0", None, None, None)]
    assert total_drops(rows) == 8
    assert warnings == []


def test_delay_line_counters_are_added_per_direction():
    warnings: list[str] = []
    delayline = {"queues": {"h0-h1/down": {"overflowed": 2, "lost": 1, "cut_dropped": 0},
                            "h2-h3/up": {"overflowed": 4, "lost": 0, "cut_dropped": 7},
                            "h9-h10/up": {"overflowed": 1}}}
    rows = queue_drops(syn.plan(), tc(), delayline, warnings)
    got = {(r["link"], r["direction"]): (r["shaper_overflowed"], r["shaper_lost"], r["shaper_cut_dropped"])
           for r in rows}
    assert got[("h0-h1", "down")] == (2, 1, 0) and got[("h2-h3", "up")] == (4, 0, 7)
    assert got[("h0-h1", "up")] == (None, None, None)
    assert total_drops(rows) == 5 + 3 + 2 + 4
    assert warnings == ["tc/delayline.json: 1 queue(s) name no link direction of the plan (e.g. 'h9-h10/up')"]


def test_unknown_delay_line_format_and_missing_root_are_warnings():
    warnings: list[str] = []
    stats = tc()
    stats["h1"] = [q for q in stats["h1"] if q["dev"] != "h1-eth0"]
    queue_drops(syn.plan(), stats, {"namespaces": 3}, warnings)
    assert warnings == ["tc/delayline.json: format not understood (no `queues` object); shaper drops not shown",
                        "tc/h1.json: no root qdisc on h1-eth0 (link h0-h1 up)"]
