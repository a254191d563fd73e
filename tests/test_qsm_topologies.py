"""The QSM Figure 1, 14, 15 and 16 experiment files (topologies/qsm-fig1*.yaml, qsm-fig14-sweep.yaml,
qsm-fig16*.yaml, qsm-fig15-sweep.yaml) validate without building anything: each template rendered at its extreme
values goes through the orchestrator's experiment validation (models, plan, schedule: `parse_experiment`) and the
node config writer (`node_configs`, whose node model runs QSM's group/region/multicast checks); every sweep point
passes the sweep's own pre-run validation (`sweeprun._prepare`) and equals the template rendered with the same
values. The files name only their groups: the plan derives each region's IP multicast group (its name `r-` + the
groups while that fits 64 characters, else `r--` + a digest: G = 32 validates)."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from orchestrator import sweep as sw
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
    assert "multicast" not in doc                              # derived by the plan
    assert doc["topology"]["nodes"] == 25 and doc["workload"]["senders"] == ["h0"]
    cfgs = configs(doc)
    assert len(cfgs) == 25
    for name, cfg in cfgs.items():
        assert [g["name"] for g in cfg["protocol"]["groups"]] == names
        assert list(mcast(cfg)) == [region]                    # every member has its region's group
        assert mcast(cfg)[region]["address"] == "239.192.0.1"
        assert mcast(cfg)[region]["may_send"] == (name == "h0")
        assert cfg["senders"] == [0]


def test_fig1_many_groups_fit_the_group_name_limit():
    """G = 16: the region's multicast group `r-a-...-p` has 33 characters (the limit is 64); with 32 groups the
    joined names would have 65 (a..z, g27..g32), so the region is named by its digest, `r--` + 24 hex digits."""
    region = "r-" + "-".join("abcdefghijklmnop")
    assert len(region) == 33
    assert all(list(mcast(c)) == [region] for c in configs(render("qsm-fig1.yaml", groups=16)).values())
    names = {tuple(mcast(c)) for c in configs(render("qsm-fig1.yaml", groups=32)).values()}
    assert len(names) == 1 and len(next(iter(names))) == 1
    (name,) = next(iter(names))
    assert name.startswith("r--") and len(name) == 27


@pytest.mark.parametrize("S", [1, 4])
def test_fig16_senders_in_one_group(S):
    doc = render("qsm-fig16.yaml", senders=S)
    hs = [f"h{i}" for i in range(S)]
    assert doc["workload"]["senders"] == hs and "multicast" not in doc
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
    assert [p.id for p, _ in _points("qsm-fig1-sweep.yaml", {"Gs": "1,32"})] == [
        "groups-1_r0", "groups-1_r1", "groups-32_r0", "groups-32_r1"]


def test_fig14_sweep_splits_one_group_into_k_regions():
    """k regions: group a of 25 members and k - 1 artificial groups holding consecutive slices; h0 (slice 0, in a
    only) sends into all k regions, every other member receives exactly its own."""
    pts = _points("qsm-fig14-sweep.yaml")
    assert [p.id for p, _ in pts] == [f"regions-{k}_r{r}" for k in (1, 2, 4, 8) for r in (0, 1, 2)]
    for p, doc in pts:
        k = int(p.coord("regions"))
        assert [g["name"] for g in doc["protocol"]["qsm"]["groups"]] == ["a"] + [f"x{j}" for j in range(1, k)]
        assert doc["nodes"]["cpu"] == 0.2 and doc["time"]["dilation"] == 4 and doc["seed"] == 1 + p.rep
        cfgs = configs(doc)
        regions = {next(g["name"] for g in c["multicast"] if g["receive"]) for c in cfgs.values()}
        assert len(regions) == k
        assert sorted(g["name"] for g in cfgs["h0"]["multicast"] if g["may_send"]) == sorted(regions)
        assert all(not g["may_send"] for n, c in cfgs.items() if n != "h0" for g in c["multicast"])


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
