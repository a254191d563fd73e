"""Where a lab's state lives: labs whose things survive a reboot (Docker containers, remote hosts' qdiscs and
processes) keep it where it survives (/var/lib/orchestrator), namespace labs in /run (issue #16)."""
from __future__ import annotations

import shutil

import pytest

from orchestrator import lab as labmod
from orchestrator.backends import fake, registry
from orchestrator.shaping.probe import Capabilities
from orchestrator.spec import parse_experiment
from orchestrator.state import LabState, list_labs, load_state, state_root


@pytest.fixture
def roots(tmp_path, monkeypatch):
    monkeypatch.delenv("ORCHESTRATOR_STATE_DIR", raising=False)
    monkeypatch.setenv("ORCHESTRATOR_RUN_STATE_DIR", str(tmp_path / "run"))
    monkeypatch.setenv("ORCHESTRATOR_PERSISTENT_STATE_DIR", str(tmp_path / "varlib"))
    monkeypatch.setattr(labmod, "probe", lambda cache=True: Capabilities("test", False, True, True, True))
    return tmp_path / "run", tmp_path / "varlib"


class SurvivingFake(fake.FakeBackend):
    state_survives_reboot = True


def test_a_lab_whose_things_survive_a_reboot_keeps_its_state_where_it_survives(roots, tmp_path):
    run, varlib = roots
    f = tmp_path / "x.yaml"
    for name, backend in (("ns", fake.FakeBackend()), ("ct", SurvivingFake())):
        f.write_text(f"name: {name}\ntopology: {{kind: tree, nodes: 3, degree: 2}}\n")
        labmod.up(labmod.prepare(f), backend=backend)
    assert (varlib / "ct" / "state.json").exists() and (run / "ns" / "state.json").exists()
    assert list_labs() == ["ct", "ns"] and load_state("ct").persistent
    shutil.rmtree(run)                                      # a reboot: /run is empty again
    assert list_labs() == ["ct"] and load_state("ct").load_plan().nodes


def test_which_backends_survive_a_reboot():
    assert registry.backend_class("docker").state_survives_reboot
    assert registry.backend_class("hosts").state_survives_reboot
    assert not registry.backend_class("mininet").state_survives_reboot


def test_one_state_dir_overrides_both(tmp_path, monkeypatch):
    monkeypatch.setenv("ORCHESTRATOR_STATE_DIR", str(tmp_path / "one"))
    assert state_root(True) == state_root(False) == tmp_path / "one"
    LabState(lab="a", backend="docker", shaper="tbf", persistent=True).save()
    assert list_labs() == ["a"]


def test_defaults(monkeypatch):
    for v in ("ORCHESTRATOR_STATE_DIR", "ORCHESTRATOR_RUN_STATE_DIR", "ORCHESTRATOR_PERSISTENT_STATE_DIR"):
        monkeypatch.delenv(v, raising=False)
    assert str(state_root(False)) == "/run/orchestrator" and str(state_root(True)) == "/var/lib/orchestrator"
    assert parse_experiment("topology: {kind: tree, nodes: 3, degree: 2}\n")   # (the module imports cleanly)
