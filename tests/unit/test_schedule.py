"""The schedule: validation before anything is built, seeded targets, expansion into timed operations."""
import pytest

from orchestrator.errors import SpecError
from orchestrator.plan import build_plan
from orchestrator.schedule import PERTURB_INTERVAL_S, OpKind, expand, most_down, parse_schedule, with_gms
from orchestrator.spec import parse_experiment

PLAN = build_plan(parse_experiment("topology: {kind: tree, nodes: 40, degree: 4, members: {count: 20, seed: 3}}\n"))
MEMBERS = [n.name for n in PLAN.members]
ROUTER = next(n.name for n in PLAN.nodes if n.role == "router")


def timeline(raw, seed=1, duration=60.0):
    return expand(parse_schedule(raw), PLAN, duration, seed)


def test_crash_fraction_is_seeded():
    raw = [{"at": "20s", "action": "crash", "fraction": 0.25}]
    a = timeline(raw, seed=1).ops[0].targets
    assert len(a) == 5 and set(a) <= set(MEMBERS)
    assert timeline(raw, seed=1).ops[0].targets == a
    others = {timeline(raw, seed=s).ops[0].targets for s in range(2, 8)}
    assert any(o != a for o in others)


def test_restart_crashed_and_no_double_crash():
    tl = timeline([{"at": 10, "action": "crash", "nodes": [MEMBERS[0]]},
                   {"at": 20, "action": "restart", "crashed": True}])
    assert [(o.kind, o.targets) for o in tl.ops] == [("crash", (MEMBERS[0],)), ("start", (MEMBERS[0],))]
    with pytest.raises(SpecError, match="not running"):
        timeline([{"at": 10, "action": "crash", "nodes": [MEMBERS[0]]},
                  {"at": 20, "action": "crash", "nodes": [MEMBERS[0]]}])
    with pytest.raises(SpecError, match="has not crashed"):
        timeline([{"at": 10, "action": "restart", "nodes": [MEMBERS[1]]}])


def test_a_crash_is_a_kill_unless_it_says_silent():
    tl = timeline([{"at": 10, "action": "crash", "nodes": [MEMBERS[0]]},
                   {"at": 20, "action": "crash", "nodes": [MEMBERS[1], MEMBERS[2]], "mode": "silent"}])
    assert [(o.kind, o.targets, o.params) for o in tl.ops] == [
        ("crash", (MEMBERS[0],), None), ("crash", (MEMBERS[1], MEMBERS[2]), "silent")]
    with pytest.raises(SpecError, match="schedule\\[0\\].*mode.*'kill' or 'silent'"):
        timeline([{"at": 10, "action": "crash", "nodes": [MEMBERS[0]], "mode": "quiet"}])


def test_pause_expands_to_stop_and_cont():
    tl = timeline([{"at": "5s", "action": "pause", "nodes": [MEMBERS[2]], "duration": "3s"}])
    assert [(o.t, o.kind) for o in tl.ops] == [(5.0, "stop_signal"), (8.0, "cont_signal")]


def test_perturb_sleeps_are_seeded_and_balanced():
    raw = [{"at": 10, "action": "perturb", "nodes": [MEMBERS[3]], "p": 0.3, "duration": "20s"}]
    ops = timeline(raw).ops
    assert ops == timeline(raw).ops
    kinds = [o.kind for o in ops]
    assert kinds.count("stop_signal") == kinds.count("cont_signal") > 0
    # Alternating stop/cont, all inside the window, on the 100 ms grid.
    assert all(k == ("stop_signal" if j % 2 == 0 else "cont_signal") for j, k in enumerate(kinds))
    assert all(10 <= o.t <= 30 for o in ops)
    assert all(abs((o.t - 10) / PERTURB_INTERVAL_S - round((o.t - 10) / PERTURB_INTERVAL_S)) < 1e-6 for o in ops)
    # Time asleep ~ p of the window (200 intervals, p = 0.3: 60 ± 3 sigma ~ 19).
    asleep = sum(b.t - a.t for a, b in zip(ops[::2], ops[1::2]))
    assert abs(asleep / PERTURB_INTERVAL_S - 60) < 20


def test_links_partition_heal():
    sub = MEMBERS[5]
    parent = PLAN.node(sub).parent
    tl = timeline([{"at": 5, "action": "partition", "subtree": sub},
                   {"at": 6, "action": "link", "links": [[parent, sub]], "direction": "up", "set": {"loss": "5%"}},
                   {"at": 9, "action": "heal"}])
    lid = PLAN.link_of(parent, sub).id
    assert tl.ops[0].kind == "link_cut" and set(tl.ops[0].links) == {(lid, "down"), (lid, "up")}
    assert tl.ops[1].links == ((lid, "up"),) and tl.ops[1].params.loss == "5%"
    assert tl.ops[2].kind == "link_restore" and set(tl.ops[2].links) == {(lid, "down"), (lid, "up")}


def test_a_membership_service_announces_a_view_after_each_crash_and_takes_a_restarted_member_back():
    # crashes at 10 s (two members) and 20 s, a restart of the first two at 30 s (QSM §2.1: "it would need to
    # rejoin the system": a view adds them back), one of them crashed again at 35 s (removed again), one at 59.5 s
    # (its view would come after the end); the failure detector takes 1.5 s
    a, b, c = MEMBERS[2], MEMBERS[5], MEMBERS[7]
    tl = with_gms(timeline([{"at": 10, "action": "crash", "nodes": [a, b]},
                            {"at": 20, "action": "crash", "nodes": [c]},
                            {"at": 30, "action": "restart", "nodes": [a, b]},
                            {"at": 35, "action": "crash", "nodes": [a]},
                            {"at": 59.5, "action": "crash", "nodes": [MEMBERS[9]]}]), PLAN, 1.5, 60.0)
    views = [o for o in tl.ops if o.kind == OpKind.GMS_VIEW]
    assert [(o.t, o.index, o.targets) for o in views] == [(11.5, 0, (a, b)), (21.5, 1, (c,)), (31.5, 2, (a, b)),
                                                          (36.5, 3, (a,))]
    # each carries every view's change so far (member ids: plan order) and who is down then (not sent to)
    assert views[0].params == ((("remove", (2, 5)),), tuple(sorted((a, b))))
    assert views[1].params == ((("remove", (2, 5)), ("remove", (7,))), tuple(sorted((a, b, c))))
    assert views[2].params == ((("remove", (2, 5)), ("remove", (7,)), ("add", (2, 5))), (c,))   # running again
    assert views[3].params[0][-1] == ("remove", (2,)) and views[3].params[1] == tuple(sorted((a, c)))
    assert [o.kind for o in tl.ops].count(OpKind.CRASH) == 4 and tl.ops == sorted(tl.ops)
    # a restart of a member no view removed yet (its view is still due) is added after that view
    tl = with_gms(timeline([{"at": 10, "action": "crash", "nodes": [a]}, {"at": 10.5, "action": "restart",
                                                                            "nodes": [a]}]), PLAN, 1.5, 60.0)
    assert [(o.t, o.params[0][-1]) for o in tl.ops if o.kind == OpKind.GMS_VIEW] == [(11.5, ("remove", (2,))),
                                                                                      (12.0, ("add", (2,)))]
    assert with_gms(timeline([]), PLAN, 1.0, 60.0).ops == []


def test_a_batching_membership_service_announces_views_at_most_once_per_batch():
    # QSM §2.1: the GMS "groups requests in batches and performs changes at a predefined maximum rate". Detection
    # 1 s, batches 2 s apart: crashes at 10 and 10.5 s are due at 11 and 11.5; the first view goes out at 11 and
    # the second waits for 13; a crash at 12.8 (due 13.8 > 13) makes the next batch at 15, where the leave at 14
    # (told at once: due 14) joins it. Changes of one kind in a row in a batch make one view.
    a, b, c, d = MEMBERS[2], MEMBERS[5], MEMBERS[7], MEMBERS[9]
    base = timeline([{"at": 10, "action": "crash", "nodes": [a]},
                     {"at": 10.5, "action": "crash", "nodes": [b]},
                     {"at": 12.8, "action": "crash", "nodes": [c]},
                     {"at": 14, "action": "leave", "nodes": [d]},
                     {"at": 59.5, "action": "crash", "nodes": [MEMBERS[11]]}])
    tl = with_gms(base, PLAN, 1.0, 60.0, batch_s=2.0)
    views = [o for o in tl.ops if o.kind == OpKind.GMS_VIEW]
    assert [(o.t, o.targets) for o in views] == [(11.0, (a,)), (13.0, (b,)), (15.0, tuple(sorted((c, d))))]
    assert [o.params[0] for o in views] == [
        (("remove", (2,)),), (("remove", (2,)), ("remove", (5,))),
        (("remove", (2,)), ("remove", (5,)), ("remove", (7, 9)))]           # c and d: one view
    # without batching, the same schedule: one view per change, when each is due
    plain = [o for o in with_gms(base, PLAN, 1.0, 60.0).ops if o.kind == OpKind.GMS_VIEW]
    assert [o.t for o in plain] == [11.0, 11.5, 13.8, 14.0]
    # a join and a crash in one batch: two views, announced together
    tl = with_gms(timeline([{"at": 1, "action": "join", "nodes": [a]}, {"at": 1.2, "action": "crash", "nodes": [b]},
                            {"at": 1.3, "action": "crash", "nodes": [c]}]), PLAN, 0.5, 60.0, batch_s=1.0)
    views = [o for o in tl.ops if o.kind == OpKind.GMS_VIEW]
    assert [(o.t, o.params[0]) for o in views] == [(1.5, (("add", (2,)),)),
                                                   (2.5, (("add", (2,)), ("remove", (5, 7))))]


def test_a_member_paused_when_a_view_came_gets_it_again_as_it_resumes():
    a, b, c = MEMBERS[2], MEMBERS[5], MEMBERS[7]
    tl = with_gms(timeline([{"at": 10, "action": "pause", "nodes": [a, b], "duration": "3s"},
                            {"at": 10.5, "action": "crash", "nodes": [c]},
                            {"at": 20, "action": "pause", "nodes": [a], "duration": "2s"}]), PLAN, 1.0, 60.0)
    views = [(o.t, o.index, o.targets, o.params) for o in tl.ops if o.kind == OpKind.GMS_VIEW]
    # the view at 11.5 s (while a and b are paused), then again at 13 s as they resume (the pause's entry); the
    # second pause sees no view: nothing more
    gone = (("remove", (7,)),)
    assert views == [(11.5, 1, (c,), (gone, (c,))), (13.0, 0, tuple(sorted((a, b))), (gone, (c,)))]
    cont = next(k for k, o in enumerate(tl.ops) if o.kind == OpKind.CONT_SIGNAL)
    assert tl.ops[cont + 1].kind == OpKind.GMS_VIEW      # after they are running again


def test_a_joiner_is_added_by_a_view_after_its_first_start_and_not_sent_views_before():
    # c crashes at 2 s, d and e join at 5 s, e crashes at 20 s and is restarted at 30 s (a rejoin, as after any
    # crash); the GMS's delay is 1 s
    c, d, e = MEMBERS[7], MEMBERS[4], MEMBERS[6]
    tl = with_gms(timeline([{"at": 2, "action": "crash", "nodes": [c]},
                            {"at": 5, "action": "join", "nodes": [d, e]},
                            {"at": 20, "action": "crash", "nodes": [e]},
                            {"at": 30, "action": "restart", "nodes": [e]}]), PLAN, 1.0, 60.0)
    views = [(o.t, o.params) for o in tl.ops if o.kind == OpKind.GMS_VIEW]
    ids = {n: MEMBERS.index(n) for n in (c, d, e)}
    first = ("remove", (ids[c],))
    added = ("add", tuple(sorted((ids[d], ids[e]))))
    # the view at 3 s is not sent to the joiners (not started: down); the one adding them comes 1 s after they
    # start, with every change so far (they replay the first); the restart at 30 s adds e back
    assert views == [(3.0, ((first,), tuple(sorted((c, d, e))))),
                     (6.0, ((first, added), (c,))),
                     (21.0, ((first, added, ("remove", (ids[e],))), tuple(sorted((c, e))))),
                     (31.0, ((first, added, ("remove", (ids[e],)), ("add", (ids[e],))), (c,)))]


def test_a_leave_is_announced_at_once_and_views_go_out_in_time_order():
    # a crash at 10 s (its view 1.5 s later, at 11.5), a leave at 11 s (its view at once): the leave's view is
    # announced first, and the crash's then carries both changes; the leaver is killed (a crash op, mode leave)
    a, b = MEMBERS[2], MEMBERS[5]
    tl = with_gms(timeline([{"at": 10, "action": "crash", "nodes": [a]},
                            {"at": 11, "action": "leave", "nodes": [b]}]), PLAN, 1.5, 60.0)
    assert [(o.t, o.kind, o.params) for o in tl.ops if o.kind == OpKind.CRASH] == [(10.0, "crash", None),
                                                                                 (11.0, "crash", "leave")]
    views = [(o.t, o.index, o.params[0]) for o in tl.ops if o.kind == OpKind.GMS_VIEW]
    assert views == [(11.0, 1, (("remove", (5,)),)), (11.5, 0, (("remove", (5,)), ("remove", (2,))))]
    with pytest.raises(SpecError, match="not running"):
        timeline([{"at": 10, "action": "leave", "nodes": [a]}, {"at": 12, "action": "leave", "nodes": [a]}])


def test_a_leave_needs_a_membership_service():
    from orchestrator.schedule import check_leaves
    from orchestrator.source import FieldError

    tl = timeline([{"at": 10, "action": "leave", "count": 1}])
    check_leaves(tl, True, "qsm")
    with pytest.raises(FieldError, match="leave at 10.0: gsgc has no membership service the orchestrator plays"):
        check_leaves(tl, False, "gsgc")
    check_leaves(timeline([{"at": 10, "action": "crash", "count": 1}]), False, "gsgc")


def test_most_members_down_at_once():
    # 2 down at 10 s, one back at 20 s, 2 more at 30 s: 3 down at once; pauses and joins are nobody down
    a, b, c, d = MEMBERS[:4]
    tl = timeline([{"at": 10, "action": "crash", "nodes": [a, b]}, {"at": 20, "action": "restart", "nodes": [a]},
                   {"at": 30, "action": "crash", "nodes": [c, d]}, {"at": 40, "action": "restart", "crashed": True},
                   {"at": 45, "action": "pause", "nodes": [a], "duration": "5s"},
                   {"at": 50, "action": "join", "nodes": [MEMBERS[5]]}])
    assert most_down(tl) == 3
    assert most_down(timeline([])) == 0
    assert most_down(timeline([{"at": 5, "action": "crash", "fraction": 0.25}])) == 5


def test_join_members_start_late():
    tl = timeline([{"at": 30, "action": "join", "nodes": [MEMBERS[4]]}])
    assert tl.joiners == [MEMBERS[4]] and tl.ops[0].kind == "start"


@pytest.mark.parametrize("raw,words", [
    ([{"at": 5, "action": "explode", "nodes": ["h1"]}], "unknown action 'explode'"),
    ([{"at": "90s", "action": "crash", "fraction": 0.1}], "beyond the duration"),
    ([{"at": 5, "action": "crash", "fraction": 1.5}], "less than or equal to 1"),
    ([{"at": 5, "action": "crash", "nodes": ["h999"]}], "unknown node 'h999'"),
    ([{"at": 5, "action": "crash", "nodes": [ROUTER]}], "is a router"),
    ([{"at": 5, "action": "pause", "nodes": [MEMBERS[0]]}], "pause needs duration"),
    ([{"at": 50, "action": "pause", "nodes": [MEMBERS[0]], "duration": "20s"}], "beyond the duration"),
    ([{"at": 5, "action": "crash", "fraction": 0.1, "colour": "red"}], "unknown key"),
    ([{"at": 5, "action": "crash", "count": 21}], "only 20 are eligible"),
    ([{"at": 5, "action": "link", "links": [[MEMBERS[0], MEMBERS[1]]], "set": {"delay": "1ms"}}], "not linked"),
])
def test_bad_schedules_are_rejected(raw, words):
    with pytest.raises(SpecError) as exc:
        timeline(raw)
    assert words in str(exc.value) and "schedule[0]" in str(exc.value)


# --- faults as typed data -------------------------------------------------------------------------------------

def test_each_action_is_its_own_model_and_declares_its_operations():
    from orchestrator.schedule import ACTION_TYPES, ACTIONS, Crash, LinkChange, OpKind, Pause

    acts = parse_schedule([{"at": 1, "action": "crash", "nodes": [MEMBERS[0]]},
                           {"at": 2, "action": "pause", "count": 1, "duration": "1s"},
                           {"at": 3, "action": "link", "subtree": MEMBERS[1], "set": {"delay": "1ms"}}])
    assert [type(a) for a in acts] == [Crash, Pause, LinkChange]
    assert acts[1].duration_s == 1.0 and acts[2].set.delay == "1ms"
    assert set(ACTIONS) == {"crash", "restart", "pause", "perturb", "link", "partition", "heal", "join", "leave",
                            "workload"}
    # every operation an action expands to is one it declares, and together they cover every OpKind
    assert set().union(*(t.OPS for t in ACTION_TYPES)) == set(OpKind)
    tl = timeline([{"at": 1, "action": "crash", "nodes": [MEMBERS[0]]}, {"at": 2, "action": "restart", "crashed": True},
                   {"at": 3, "action": "pause", "count": 2, "duration": "1s"},
                   {"at": 4, "action": "perturb", "count": 1, "p": 0.5, "duration": "2s"},
                   {"at": 5, "action": "partition", "subtree": MEMBERS[1]}, {"at": 6, "action": "heal"},
                   {"at": 7, "action": "workload", "op": "start"}], seed=3)
    assert len(tl.ops) > 7
    for op in tl.ops:
        assert op.kind in type(tl.actions[op.index]).OPS


@pytest.mark.parametrize("raw,where,words", [
    ({"at": 5, "action": "crash", "nodes": ["h1"], "p": 0.5}, "schedule[0].p", "unknown key for crash"),
    ({"at": 5, "action": "workload"}, "schedule[0].op", "workload needs op"),
    ({"at": 5, "action": "perturb", "count": 1, "duration": "1s"}, "schedule[0].p", "perturb needs p"),
    ({"at": 5, "nodes": ["h1"]}, "schedule[0].action", "each entry needs `action:`"),
    ({"at": 5, "action": "heal", "links": [["h0", "h1"]], "subtree": "h1"}, "schedule[0]", "exactly one of links"),
    ({"at": 5, "action": "partition", "direction": "sideways", "subtree": "h1"}, "schedule[0].direction", "'both'"),
])
def test_typed_actions_locate_each_problem(raw, where, words):
    with pytest.raises(SpecError) as exc:
        parse_schedule([raw])
    assert str(exc.value).startswith(where + ":") and words in str(exc.value), str(exc.value)


def test_every_shipped_experiment_still_validates():
    from pathlib import Path

    from orchestrator.spec import load_experiment

    files = sorted((Path(__file__).resolve().parents[2] / "topologies").glob("*.yaml"))
    with_schedule = [f for f in files if load_experiment(f).schedule]
    assert with_schedule            # the check is not vacuous
