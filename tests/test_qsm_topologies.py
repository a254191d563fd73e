"""The QSM Figure 1, 15 and 16 experiment files (topologies/qsm-fig1*.yaml, qsm-fig16*.yaml, qsm-fig15-sweep.yaml)
validate without building anything: each template rendered at its extreme values goes through the orchestrator's
experiment validation (models, plan, schedule: `parse_experiment`) and the node config writer (`node_configs`,
whose node model runs QSM's group/region/multicast checks); every sweep point passes the sweep's own pre-run
validation (`sweeprun._prepare`) and equals the template rendered with the same values.

G = 16 is refused: its region's multicast group name has 2 x 16 + 1 = 33 characters, the orchestrator allows
1-32 (the node's model would take it: checked below on a hand-edited node config)."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from orchestrator import sweep as sw
from orchestrator.errors import SpecError
from orchestrator.nodeconfig import node_configs
from orchestrator.plan import build_plan
from orchestrator.spec import parse_document, parse_experiment
from orchestrator.sweeprun import SweepOptions, _prepare, load_base, sweep_spec

TOPO = Path(__file__).resolve().parent.parent / "topologies"
LETTERS = "abcdefghijklmnopqrstuvwxyz"


def render(name: str, **variables) -> dict:
    return parse_document((TOPO / name).read_text(), name, {k: str(v) for k, v in variables.items()})


def configs(doc: dict) -> dict[str, dict]:
    exp = parse_experiment(yaml.safe_dump(doc, sort_keys=False))
    return node_configs(exp, build_plan(exp), Path("/tmp/r"), Path("/tmp/c"))


def mcast(cfg: dict) -> dict[str, dict]:
    return {g["name"]: g for g in cfg.get("multicast", [])}


@pytest.mark.parametrize("G", [1, 2, 15])
def test_fig1_all_groups_on_all_members_one_region(G):
    doc = render("qsm-fig1.yaml", groups=G)
    names = list(LETTERS[:G])
    region = "r-" + "-".join(names)                       # e.g. G = 2: r-a-b; G = 15: r-a-...-o, 31 characters
    assert len(region) == 2 * G + 1
    assert [g["name"] for g in doc["protocol"]["qsm"]["groups"]] == names
    assert doc["multicast"]["groups"] == [{"name": region, "address": "239.1.0.1", "members": "all",
                                           "senders": ["h0"]}]
    assert doc["topology"]["nodes"] == 25 and doc["workload"]["senders"] == ["h0"]
    cfgs = configs(doc)
    assert len(cfgs) == 25
    for name, cfg in cfgs.items():
        assert [g["name"] for g in cfg["protocol"]["groups"]] == names
        assert list(mcast(cfg)) == [region]                    # every member has its region's group
        assert mcast(cfg)[region]["may_send"] == (name == "h0")
        assert cfg["senders"] == [0]


def test_fig1_sixteen_groups_fit_the_group_name_limit():
    """G = 16: the region's multicast group `r-a-...-p` has 33 characters (the limit is 64); 32 groups' name would
    have 65 and is refused before anything is built."""
    doc = render("qsm-fig1.yaml", groups=16)
    region = "r-" + "-".join("abcdefghijklmnop")
    assert len(region) == 33 and doc["multicast"]["groups"][0]["name"] == region
    cfgs = configs(doc)
    assert all(list(mcast(c)) == [region] for c in cfgs.values())
    with pytest.raises(SpecError, match="is invalid: 1-64 characters"):
        render("qsm-fig1.yaml", groups=32)


@pytest.mark.parametrize("S", [1, 4])
def test_fig16_senders_in_one_group(S):
    doc = render("qsm-fig16.yaml", senders=S)
    hs = [f"h{i}" for i in range(S)]
    assert doc["workload"]["senders"] == hs and doc["multicast"]["groups"][0]["senders"] == hs
    assert doc["protocol"]["qsm"]["groups"] == [{"name": "a", "members": "all"}]
    cfgs = configs(doc)
    assert len(cfgs) == 25
    for name, cfg in cfgs.items():
        assert cfg["senders"] == list(range(S))
        assert list(mcast(cfg)) == ["r-a"] and mcast(cfg)["r-a"]["may_send"] == (name in hs)


def _points(name: str, variables: dict | None = None) -> list[tuple[sw.Point, dict]]:
    base = load_base(TOPO / name, variables or {})
    points = sw.expand(sweep_spec(base, SweepOptions(), name), base)
    prepared = _prepare(base, points, Path("/nonexistent"), name)      # validates every point, builds nothing
    return [(p, prepared[p.id][0]) for p in points]


def _same(a: dict, b: dict) -> None:
    strip = ("name", "description")
    assert {k: v for k, v in a.items() if k not in strip} == {k: v for k, v in b.items() if k not in strip}


def test_fig1_sweep_points_are_the_template():
    pts = _points("qsm-fig1-sweep.yaml")
    assert [p.id for p, _ in pts] == [f"groups-{g}_r{r}" for g in (1, 2, 4, 8, 16) for r in (0, 1)]
    for p, doc in pts:
        _same(doc, render("qsm-fig1.yaml", groups=p.coord("groups"), seed=1 + p.rep))
        configs(doc)
    with pytest.raises(SpecError, match="groups-32_r0.*1-64 characters"):
        _points("qsm-fig1-sweep.yaml", {"Gs": "1,32"})


def test_fig16_sweep_points_are_the_template():
    pts = _points("qsm-fig16-sweep.yaml")
    assert [p.id for p, _ in pts] == [f"senders-{s}_r{r}" for s in (1, 2, 3, 4) for r in (0, 1)]
    for p, doc in pts:
        _same(doc, render("qsm-fig16.yaml", senders=p.coord("senders"), seed=1 + p.rep))
        assert len(configs(doc)["h0"]["senders"]) == int(p.coord("senders"))


def test_fig15_sweep_points_are_the_fig9_template():
    pts = _points("qsm-fig15-sweep.yaml")
    tokens = ("250ms", "500ms", "1s", "2s")
    assert [p.id for p, _ in pts] == [f"token-interval-{t}_r{r}" for t in tokens for r in (0, 1)]
    for p, doc in pts:
        token = p.coord("token_interval")
        _same(doc, render("qsm-fig9.yaml", members=25, loss="1%", token=token, seed=1 + p.rep))
        want = {"250ms": 0.25, "500ms": 0.5, "1s": 1.0, "2s": 2.0}[token]
        assert configs(doc)["h7"]["protocol"]["token_interval_s"] == want
