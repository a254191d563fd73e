"""Sweep expansion (pure): axes → points, seeds, ids, filters, point experiments."""
from __future__ import annotations

import pytest

from orchestrator.errors import SpecError
from orchestrator.spec import parse_experiment
from orchestrator import sweep as sw

BASE = {
    "name": "t", "topology": {"kind": "tree", "nodes": 16, "degree": 4, "members": {"count": 8, "seed": 5}},
    "protocol": {"gsgc": {"subgroup": 3, "step": "9s"}}, "duration": "30s", "seed": 7,
}


def spec(**axes):
    return sw.parse_sweep({"axes": axes, "repetitions": 2})


def test_cartesian_product_with_repetitions_innermost_and_readable_ids():
    s = sw.parse_sweep({"axes": {"protocol.gsgc.subgroup": [1, 3], "protocol.gsgc.step": ["2s", "5s", "9s"]},
                        "repetitions": 2})
    pts = sw.expand(s, BASE)
    assert len(pts) == 2 * 3 * 2
    assert [p.id for p in pts[:3]] == ["subgroup-1_step-2s_r0", "subgroup-1_step-2s_r1", "subgroup-1_step-5s_r0"]
    assert len({p.id for p in pts}) == len(pts)
    assert pts[0].group == "subgroup-1_step-2s"
    assert dict(pts[1].sets) == {"protocol.gsgc.subgroup": 1, "protocol.gsgc.step": "2s", "seed": 8}


def test_repetitions_have_distinct_seeds_shared_across_points():
    s = sw.parse_sweep({"axes": {"protocol.gsgc.subgroup": [1, 3]},
                        "repetitions": {"count": 3, "seed_paths": ["seed", "topology.members.seed"]}})
    pts = sw.expand(s, BASE)
    seeds = [(dict(p.sets)["seed"], dict(p.sets)["topology.members.seed"]) for p in pts]
    assert seeds == [(7, 5), (8, 6), (9, 7)] * 2


def test_point_experiment_sets_paths_drops_the_sweep_block_and_validates():
    doc = {**BASE, "sweep": {"axes": {"protocol.gsgc.step": ["1s"]}}}
    s = sw.parse_sweep(doc["sweep"])
    (p,) = sw.expand(s, doc)
    exp = sw.point_experiment(doc, p)
    assert "sweep" not in exp and exp["protocol"]["gsgc"] == {"subgroup": 3, "step": "1s"}
    assert doc["protocol"]["gsgc"]["step"] == "9s"          # the base is not modified
    import yaml
    assert parse_experiment(yaml.safe_dump(exp)).protocol["gsgc"]["step"] == "1s"


def test_named_axis_sets_several_paths_and_labels_values():
    s = sw.parse_sweep({"axes": {
        "scheme": {"global": {"protocol.gsgc.local": None, "protocol.gsgc.step": "2s"},
                   "local": {"protocol.gsgc.local": {"group_size": 50, "controllers": 5},
                             "protocol.gsgc.step": "700ms"}},
        "topology.members.count": [50, 100]}})
    pts = sw.expand(s, BASE)
    assert [p.id for p in pts] == ["scheme-global_count-50_r0", "scheme-global_count-100_r0",
                                   "scheme-local_count-50_r0", "scheme-local_count-100_r0"]
    exp = sw.point_experiment(BASE, pts[2])
    assert exp["protocol"]["gsgc"]["local"] == {"group_size": 50, "controllers": 5}
    assert exp["topology"]["members"]["count"] == 50


def test_only_filters_by_axis_name_or_path_and_repetition():
    s = spec(**{"protocol.gsgc.subgroup": [1, 3], "protocol.gsgc.step": ["2s", "5s"]})
    only = sw.parse_only(["subgroup=3", "protocol.gsgc.step=5s", "protocol.gsgc.step=2s", "rep=1"], s)
    pts = sw.expand(s, BASE, only)
    assert [p.id for p in pts] == ["subgroup-3_step-2s_r1", "subgroup-3_step-5s_r1"]


@pytest.mark.parametrize("item, msg", [
    ("b=3", "no axis 'b'"), ("subgroup=4", "has no value '4'"), ("rep=2", "repetitions are 0..1"),
    ("subgroup", "expected AXIS=VALUE")])
def test_only_rejects_unknown_axes_and_values(item, msg):
    s = spec(**{"protocol.gsgc.subgroup": [1, 3]})
    with pytest.raises(SpecError, match=msg):
        sw.parse_only([item], s)


@pytest.mark.parametrize("block, msg", [
    ([1], "expected a mapping"), ({"axes": {"x": 3}}, "expected a list"), ({"axes": {"x": []}}, "no values"),
    ({"axes": {"x": [1, 1]}}, "same label"), ({"axes": {}, "repetitions": 0}, "not a positive integer"),
    ({"axes": {}, "reps": 2}, "unknown key"), ({"axes": {"rep": [1]}}, "not a valid axis name")])
def test_bad_sweep_blocks_are_rejected(block, msg):
    with pytest.raises(SpecError, match=msg):
        sw.parse_sweep(block)


def test_ambiguous_short_names_fall_back_to_the_path():
    s = sw.parse_sweep({"axes": {"a.step": [1], "b.step": [2], "protocol.gsgc.subgroup": [3]}})
    assert [a.name for a in s.axes] == ["a.step", "b.step", "subgroup"]


def test_override_axis_replaces_or_adds_keeping_order():
    s = spec(**{"protocol.gsgc.subgroup": [1, 2, 3], "protocol.gsgc.step": ["1s", "2s"]})
    t = sw.override_axis(s, "subgroup", [1, 3])
    assert [(a.key, [v.label for v in a.values]) for a in t.axes] == [
        ("protocol.gsgc.subgroup", ["1", "3"]), ("protocol.gsgc.step", ["1s", "2s"])]
    u = sw.override_axis(s, "duration", ["40s"])
    assert [a.name for a in u.axes] == ["subgroup", "step", "duration"] and u.repetitions == 2


def test_labels_are_file_name_safe():
    assert sw.label_of("700ms") == "700ms" and sw.label_of(None) == "none" and sw.label_of(2.0) == "2"
    assert sw.label_of({"group_size": 50}) == "group-size-50"   # "_" separates coordinates in ids
    assert sw.label_of("a/b c") == "a-b-c"


def test_seed_paths_must_be_integers():
    s = sw.parse_sweep({"axes": {}, "repetitions": {"count": 2, "seed_paths": ["topology.nodes.x"]}})
    with pytest.raises(SpecError, match="not integers"):
        sw.expand(s, BASE)


def test_set_path_creates_mappings_and_refuses_scalars():
    assert sw.set_path({}, "a.b.c", 1) == {"a": {"b": {"c": 1}}}
    with pytest.raises(SpecError, match="not a mapping"):
        sw.set_path({"a": 3}, "a.b", 1)


def test_digest_changes_with_the_experiment_and_eta():
    assert sw.digest(BASE) == sw.digest(dict(BASE)) != sw.digest({**BASE, "seed": 8})
    assert sw.eta([10.0, 20.0], 3) == 45.0
    assert sw.eta([], 2, first_guess=5.0) == 10.0 and sw.eta([], 2) is None and sw.eta([1.0], 0) == 0.0
