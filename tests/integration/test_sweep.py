"""`orchestrator sweep` end to end on Mininet (root): the reduced GSGC sweep (b in {1, 3}, three step intervals, two
repetitions on a 12-member tree, 25 s runs) with its comparison table and figure, a Spark cross-check of the light TPR
path, and an interrupted sweep that resumes without re-running finished points."""
from __future__ import annotations

import csv
import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from .helpers import ORCH, REPO, lab_namespaces, unique_lab

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.slow]


def small_experiment(tmp: Path, name: str, **changes) -> Path:
    doc = yaml.safe_load((REPO / "topologies" / "gsgc-sweep-small.yaml").read_text())
    doc["name"] = name
    doc["topology"]["nodes"] = 12
    doc["workload"]["senders"] = 12
    doc["duration"] = "25s"
    doc["sweep"]["axes"]["protocol.gsgc.step"] = ["250ms", "750ms", "2s"]
    doc.update(changes)
    f = tmp / f"{name}.yaml"
    f.write_text(yaml.safe_dump(doc, sort_keys=False))
    return f


def index(root: Path) -> dict:
    return json.loads((root / "sweep.json").read_text())


@pytest.fixture(scope="module")
def reduced_sweep(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sweep")
    lab = unique_lab("sw")
    f = small_experiment(tmp, lab)
    root = tmp / "sweep"
    t0 = time.monotonic()
    p = subprocess.run([*ORCH, "sweep", str(f), "--out", str(root), "--engine", "events"], cwd=REPO,
                       capture_output=True, text=True, timeout=1500)
    print(f"reduced sweep: {time.monotonic() - t0:.0f} s")
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.strip().splitlines()[-1] == str(root)
    assert lab_namespaces(lab) == []
    return root


def test_reduced_sweep_gives_one_point_per_b_and_step(reduced_sweep):
    data = index(reduced_sweep)
    assert len(data["selected"]) == 12
    assert {data["points"][p]["status"] for p in data["selected"]} == {"completed"}
    assert len({data["points"][p]["run_dir"] for p in data["selected"]}) == 12
    seeds = {p: dict(map(tuple, data["points"][p]["sets"]))["seed"] for p in data["selected"]}
    assert {seeds[p] for p in seeds if p.endswith("_r0")} == {1} and {seeds[p] for p in seeds if p.endswith("_r1")} == {2}
    out = reduced_sweep / "analysis"
    rows = list(csv.DictReader((out / "summary.csv").open()))
    assert sorted((r["c.subgroup"], r["c.step"]) for r in rows) == sorted(
        (b, s) for b in ("1", "3") for s in ("250ms", "750ms", "2s"))
    assert all(r["runs"] == "2" for r in rows)
    assert {float(r["step_s"]) for r in rows} == {0.25, 0.75, 2.0}
    for fig in ("tpr_steps_vs_step.png", "queues_vs_step.png"):
        assert (out / "figures" / fig).stat().st_size > 5000
    md = (out / "sweep.md").read_text()
    assert "| subgroup | step | runs (with TPR) | TPR (s) | steps/round | avg queue | max queue |" in md
    # The shape (steps falling to a floor, TPR then linear in the step interval) is reported, not asserted.
    print("\n".join(line for line in md.splitlines() if line.startswith("|")))
    with_tpr = [r for r in rows if r["tpr_s_mean"]]
    assert len(with_tpr) >= 4, "most points should complete a round after round 0 in 20 s"
    assert all(r["max_queue_mean"] and float(r["max_queue_mean"]) >= 1 for r in rows)


@pytest.mark.spark
def test_the_event_path_agrees_with_the_spark_analysis(reduced_sweep):
    from analysis.cli import run_analysis
    from analysis.sweep import events_summary

    data = index(reduced_sweep)
    run_dir = reduced_sweep / data["points"]["subgroup-3_step-750ms_r0"]["run_dir"]
    outcome = run_analysis([run_dir], "local[2]", reduced_sweep / "analysis" / "check")
    spark = outcome.summaries[0]
    light = events_summary(run_dir)
    assert spark["tpr_values_s"] == pytest.approx(light["tpr_all_values_s"])   # every round, both paths
    assert spark["steps_values"] == light["steps_all_values"]
    assert set(light["tpr_values_s"]) <= set(light["tpr_all_values_s"])
    assert spark["queue_drops"] == light["queue_drops"] == 0


def test_an_interrupted_sweep_resumes_without_rerunning_finished_points(tmp_path):
    lab = unique_lab("rs")
    f = small_experiment(tmp_path, lab, duration="15s")
    root = tmp_path / "sweep"
    argv = [*ORCH, "sweep", str(f), "--out", str(root), "--only", "subgroup=3", "--only", "rep=0",
            "--engine", "events", "--no-analyze"]
    p = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline:       # wait until point 1 finished and point 2's nodes run
            time.sleep(1)
            if not (root / "sweep.json").exists():
                continue
            pts = index(root)["points"]
            second = pts.get("subgroup-3_step-750ms_r0", {})
            if second.get("status") == "running":
                runs = [d for d in (root / "points" / second["id"]).iterdir() if d.is_dir()]
                if runs and (runs[0] / "manifest.json").exists() and json.loads(
                        (runs[0] / "manifest.json").read_text()).get("status") == "running":
                    break
        else:
            pytest.fail("the second point never started")
        p.send_signal(signal.SIGINT)
        _, errs = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode != 0
    pts = index(root)["points"]
    first = pts["subgroup-3_step-250ms_r0"]
    assert first["status"] == "completed"
    assert pts["subgroup-3_step-750ms_r0"]["status"] == "interrupted"
    interrupted_dir = pts["subgroup-3_step-750ms_r0"]["run_dir"]
    assert "subgroup-3_step-2s_r0" not in pts
    assert lab_namespaces(lab) == []

    p2 = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert p2.returncode == 0, p2.stderr[-3000:]
    assert "1 finished before, skipped" in p2.stderr
    pts2 = index(root)["points"]
    assert pts2["subgroup-3_step-250ms_r0"] == first                    # untouched: not run again
    assert {pts2[p]["status"] for p in pts2} == {"completed"}
    assert pts2["subgroup-3_step-750ms_r0"]["run_dir"] != interrupted_dir
    assert len(list((root / "points" / "subgroup-3_step-250ms_r0").glob(f"{lab}-*"))) == 1
    assert lab_namespaces(lab) == []
