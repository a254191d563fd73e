"""The overlay plug-ins' run_values (analysis/protocols/overlay.py; hyparview, cyclon, scamp, cyclonacked) on small
synthetic run directories whose every number is worked out by hand below. `make_run` and `hand_worked` are the
builders the tests of analysis/figures_hyparview.py and table1_hyparview.py use too."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from analysis.doc import Doc, Para, Table
from analysis.protocols import ProtocolAnalysis, ReportContext, overlay
from analysis.protocols.cyclon import PLUGIN as CYCLON
from analysis.protocols.cyclonacked import PLUGIN as CYCLONACKED
from analysis.protocols.hyparview import PLUGIN as HYPARVIEW
from analysis.protocols.scamp import PLUGIN as SCAMP
from analysis.rundir import load

T0 = 1000.0


def make_run(root: Path, name: str, protocol: str, events: dict[str, list[dict]], n: int = 4, seed: int = 1,
             params: dict | None = None, fraction: float | None = None, status: str = "completed",
             judges: dict | None = None) -> Path:
    """A run directory of `n` members h0.. (ids 0..) with `events` (node -> its events; "orchestrator" too),
    protocol `protocol` with `params`, a crash of `fraction` in the spec's schedule, t0 = T0."""
    d = root / name
    (d / "events").mkdir(parents=True)
    (d / "configs").mkdir()
    names = [f"h{i}" for i in range(n)]
    members = [{"id": i, "name": m, "addr": f"10.0.0.{i + 1}:7000"} for i, m in enumerate(names)]
    spec = {"protocol": {protocol: {}}, "schedule": [] if fraction is None else
            [{"at": "10s", "action": "crash", "fraction": fraction}]}
    (d / "manifest.json").write_text(json.dumps({"run_id": name, "status": status, "seed": seed, "t0_unix": T0,
                                                 "started_at": T0 - 5, "ended_at": T0 + 20, "spec": spec}))
    (d / "plan.json").write_text(json.dumps({"nodes": [{"name": m, "role": "member", "address": f"10.0.0.{i + 1}"}
                                                       for i, m in enumerate(names)], "links": []}))
    for i, m in enumerate(names):
        (d / "configs" / f"{m}.json").write_text(json.dumps({"id": i, "name": m, "members": members, "senders": [],
                                                             "protocol": {"name": protocol, **(params or {})}}))
    for node in [*names, "orchestrator"]:
        rows = events.get(node, [])
        (d / "events" / f"{node}.jsonl").write_text("".join(json.dumps({"node": node, **e}) + "\n" for e in rows))
    if judges is not None:
        (d / "judges.json").write_text(json.dumps(judges))
    return d


def view(t: float, change: int, op: str, peer: int, reason: str = "join", name: str = "partial") -> dict:
    return {"ts": T0 + t, "event": "view_changed", "view": name, "change": change, "op": op, "peer": peer,
            "reason": reason}


def hand_worked(view_name: str = "partial") -> dict[str, list[dict]]:
    """4 members, cycles of 0.5 s; h3 crashes at t0 + 10 (the record at t0 + 10.2, when it was killed); h0
    broadcasts before (seq 1) and after (seq 2) the crash, h1 after it (seq 1). The overlay (`view_name`): before
    the crash 0->1, 0->3, 1->0, 1->2, 2->0, 2->1, 2->3, 3->0, 3->2; at the end (h3 dead) 0->1, 1->0, 1->2, 2->0,
    2->1."""
    ev: dict[str, list[dict]] = {"orchestrator": [
        {"ts": T0, "event": "run_started", "members": ["h0", "h1", "h2", "h3"]},
        {"ts": T0 + 10.2, "event": "action_applied", "op": "crash", "actual_s": 10.0, "targets": ["h3"]},
        {"ts": T0 + 20.0, "event": "run_stopped", "reason": "completed"}]}
    for i in range(4):
        ev[f"h{i}"] = [{"ts": T0 - 1 + 0.1 * i, "event": "node_started", "id": i}]
        ev[f"h{i}"] += [{"ts": T0 + 0.5 * c, "event": "cycle", "cycle": c} for c in range(40) if i != 3 or c <= 20]
    ev["h0"] += [{"ts": T0 + 5, "event": "data_sent", "seq": 1, "cycle": 10},
                 {"ts": T0 + 11, "event": "data_sent", "seq": 2, "cycle": 22}]
    ev["h1"] += [{"ts": T0 + 12, "event": "data_sent", "seq": 1, "cycle": 24}]
    for n, o, s, t, hops in [("h1", 0, 1, 5.1, 1), ("h2", 0, 1, 5.1, 2), ("h3", 0, 1, 5.2, 3),
                             ("h1", 0, 2, 11.1, 1), ("h1", 0, 2, 11.3, 4),                 # a second copy
                             ("h0", 1, 1, 12.1, 5), ("h2", 1, 1, 12.2, 6), ("h3", 1, 1, 12.3, 7)]:
        ev[n].append({"ts": T0 + t, "event": "data_received", "origin": o, "seq": s, "hops": hops})
    ev["h0"] += [view(1.0, 1, "add", 1), view(1.0, 2, "add", 2), view(2.0, 3, "add", 3),
                 view(3.0, 4, "remove", 2, "no_ack"),                     # a false suspicion: nobody had crashed
                 view(4.0, 6, "add", 3, "shuffle"), view(4.0, 5, "remove", 3, "shuffle"),   # same ts: change decides
                 view(11.0, 7, "remove", 3, "no_ack")]                    # after the crash: a true one
    ev["h1"] += [view(1.5, 1, "add", 0), view(1.5, 2, "add", 2), view(1.6, 1, "add", 3, name="other"),
                 view(1.7, 3, "add", 1)]                                   # another view; a self-loop
    ev["h2"] += [view(1.5, 1, "add", 0), view(2.0, 2, "add", 1), view(2.0, 3, "add", 3)]
    ev["h3"] += [view(1.5, 1, "add", 0), view(2.0, 2, "add", 2)]
    for node, rows in ev.items():
        for e in rows:
            if e["event"] == "view_changed" and e["view"] == "partial":
                e["view"] = view_name
    return ev


@pytest.fixture
def run(tmp_path):
    return load(make_run(tmp_path, "r", "cyclon", hand_worked(), params={"cycle_s": 0.5}, fraction=0.25, seed=3))


def test_reliability_after_the_crash_cycles_to_heal_and_the_crash(run):
    v = CYCLON.run_values(run)
    # (0, 1) at t0+5: h1, h2, h3 counted, all received: 4/4. (0, 2) at t0+11: h3 crashed at t0+10, h1 and h2
    # counted, h1 received: 2/3. (1, 1) at t0+12: h0, h2 counted, both received (h3's receipt is a dead member's).
    assert (v["protocol"], v["members"], v["crash_fraction"], v["crashed"], v["survivors"]) == ("cyclon", 4, 0.25, 1, 3)
    assert v["crash_spread_s"] == pytest.approx(0.2)
    assert (v["reliability_before"], v["broadcasts_before"], v["broadcasts_after"]) == (1.0, 1, 2)
    assert v["reliability_after"] == pytest.approx(5 / 6)
    assert v["reliability_after_failure"] == pytest.approx([2 / 3, 1.0])
    # every member's last cycle at the crash is 20; the senders' cycles 22 and 24 are 2 and 4 after it
    assert v["crash_cycle"] == 20
    assert v["reliability_by_cycle"] == [{"cycle": 2, "broadcasts": 1, "reliability": pytest.approx(2 / 3)},
                                         {"cycle": 4, "broadcasts": 1, "reliability": 1.0}]
    # 4-cycle windows from cycle 0: 2/3, 5/6, 5/6, then cycles 3-6 hold cycle 4 alone: 1.0 >= 1.0 - 0.01
    assert v["cycles_to_heal_mean"] == 3
    # every broadcast from the 2nd after the crash on is healed; its cycle 24 is 4 after the crash's 20
    assert (v["heal_broadcast"], v["cycles_to_heal"]) == (2, 4)
    # 2 cycles of 0.5 s from the crash's end (t0 + 10.2): [10.2, 11.2) holds (0, 2) only
    assert (v["reliability_after_first"], v["broadcasts_after_first"]) == (pytest.approx(2 / 3), 1)
    assert (v["false_suspicions_before"], v["suspicions_after"]) == (1, 1)
    assert v["max_hops_before"] == 3.0                     # (0, 1) alone, sent before the crash: hops 1, 2, 3
    # the generic values come along: per message the others alive at the send, (0, 2) reached 1 of 2
    assert v["data_messages"] == 3 and v["delivery_ratio_mean"] == pytest.approx(2.5 / 3)


def test_the_overlay_before_the_crash_and_at_the_end(run):
    v = CYCLON.run_values(run)
    # before: 4 live members, 9 edges (0->2 removed by the suspicion; 0->3 re-added at t0+4, change 6 after 5;
    # h1's `other` view and its self-loop left out); in-degrees 0: 3, 1: 2, 2: 2, 3: 2
    assert (v["members_before"], v["edges_before"]) == (4, 9)
    assert v["indegree_before"] == [{"indegree": 2, "members": 3}, {"indegree": 3, "members": 1}]
    # undirected: 0-1, 0-2, 0-3, 1-2, 2-3: degree 10 / 4; clustering (2/3 + 1 + 2/3 + 1) / 4
    assert v["degree_before"] == 2.5 and v["out_degree_before"] == 2.25
    assert v["clustering_before"] == pytest.approx(5 / 6)
    assert v["clustering_random_before"] == pytest.approx(2.5 / 3)
    # shortest paths from 0: 1, 2, 1; from 1: 1, 1, 2; from 2: 1, 1, 1; from 3: 1, 2, 1 -> 15 / 12
    assert (v["shortest_path_before"], v["reachable_pairs_before"]) == (1.25, 12)
    assert v["shortest_path_random_before"] == pytest.approx(math.log(4) / math.log(2.25))
    # the end (t0 + 20, h3 dead): 0->1, 1->0, 1->2, 2->0, 2->1, a triangle undirected
    assert (v["members_end"], v["edges_end"], v["clustering_end"], v["degree_end"]) == (3, 5, 1.0, 2.0)
    assert v["shortest_path_end"] == pytest.approx(7 / 6)
    assert v["indegree_end"] == [{"indegree": 1, "members": 1}, {"indegree": 2, "members": 2}]


def test_each_plugin_reads_its_own_view(tmp_path):
    d = make_run(tmp_path, "h", "hyparview", hand_worked("active"), params={"cycle_s": 0.5, "join_interval_s": 0.05})
    v = HYPARVIEW.run_values(load(d))
    assert (v["edges_before"], v["join_interval_s"]) == (9, 0.05)
    assert v["crash_fraction"] is None                       # no crash in the spec's schedule; the log has one
    assert CYCLON.run_values(load(d))["edges_before"] == 0      # no `partial` view in it
    assert {p.view for p in (SCAMP, CYCLONACKED, CYCLON)} == {"partial"}


def test_a_run_without_a_crash(tmp_path):
    ev = hand_worked()
    ev["orchestrator"] = [e for e in ev["orchestrator"] if e["event"] != "action_applied"]
    v = CYCLON.run_values(load(make_run(tmp_path, "r", "cyclon", ev)))
    assert (v["crashed"], v["crash_spread_s"], v["crash_cycle"], v["reliability_after"]) == (0, None, None, None)
    # nobody crashed: (0, 2) counts h1, h2, h3 and reached h1 (2/4), (1, 1) reached all of h0, h2, h3
    assert v["broadcasts_before"] == 3 and v["reliability_before"] == pytest.approx((1 + 2 / 4 + 1) / 3)
    assert v["max_hops_before"] == pytest.approx((3 + 4 + 7) / 3)    # every broadcast: the largest hops each
    assert (v["false_suspicions_before"], v["suspicions_after"]) == (2, 0)
    # `before` is the end: h3 alive, 0->3 removed at t0+11
    assert (v["members_before"], v["edges_before"]) == (4, 8) and v["edges_end"] == 8


def test_graph_values_of_small_graphs():
    g = overlay.graph_values({0, 1, 2, 3}, {(0, 1), (1, 2), (2, 3), (3, 0)})     # a directed ring
    assert (g["clustering"], g["degree"], g["out_degree"], g["shortest_path"]) == (0.0, 2.0, 1.0, 2.0)
    assert g["shortest_path_random"] is None and g["clustering_random"] == pytest.approx(2 / 3)
    g = overlay.graph_values({0, 1, 2}, set())
    assert (g["edges"], g["shortest_path"], g["reachable_pairs"], g["clustering"]) == (0, None, 0, 0.0)
    assert g["indegree"] == [{"indegree": 0, "members": 3}]
    assert overlay.graph_values(set(), set())["clustering"] is None


def test_the_report_and_the_sweep_read_the_values(run, tmp_path):
    plugin = CYCLON
    s = plugin.run_values(run)
    doc = Doc("r")
    plugin.report(doc, ReportContext(run, s, {}, [], tmp_path))
    table = next(b for b in doc.blocks if isinstance(b, Table))
    assert [r[:3] for r in table.rows] == [["before", "4", "9"], ["end", "3", "5"]]
    assert any(isinstance(b, Para) and "0.667, 1" in b.text for b in doc.blocks)
    assert plugin.sweep_values(s, {})["cycles_to_heal_mean"] == 3
    assert dict(plugin.key_metrics(s))["cycles to heal"] == "4"
    assert type(plugin).metrics is ProtocolAnalysis.metrics and plugin.summary({}, {}) == {}   # no Spark of its own
