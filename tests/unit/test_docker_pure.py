"""The Docker backend's pure parts (no engine, no root): container specs, node paths, image build commands,
the error for a missing engine, and the runner-facing config rewrite."""
from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from orchestrator import images
from orchestrator.backends import docker as dk
from orchestrator.backends.base import RunContext
from orchestrator.backends.registry import get_backend
from orchestrator.errors import BackendError, SpecError
from orchestrator.state import LabState


def test_get_backend_knows_docker_and_names_the_choices():
    assert get_backend("docker").name == "docker"
    assert get_backend("docker").driver_class is dk.DockerDriver
    with pytest.raises(SpecError, match="mininet, docker"):
        get_backend("vagrant")


def _driver(lab: str, run: Path) -> dk.DockerDriver:
    from orchestrator.rundir import RunDir

    state = LabState(lab=lab, backend="docker", shaper="tbf")
    return dk.DockerDriver(dk.DockerBackend(), RunContext(None, None, state, RunDir(run), run / "ctl", [], None))


def test_container_spec_isolated_labelled_and_sharing_the_node_directory(monkeypatch, tmp_path):
    monkeypatch.setenv("ORCHESTRATOR_DOCKER_SHARE", str(tmp_path))
    share = dk.share_root("lab1")
    spec = dk.container_spec("lab1", "h3", "img:1", share)
    assert spec["network_mode"] == "none"
    assert spec["name"] == "lab1-h3" and spec["hostname"] == "h3" and spec["image"] == "img:1"
    assert spec["labels"] == {dk.LABEL_APP: "gossip-testbed", dk.LABEL_LAB: "lab1", dk.LABEL_NODE: "h3",
                              dk.LABEL_STATE: str(dk.state_root(persistent=True))}
    # The share is mounted at the same path inside, so config paths mean the same on both sides.
    assert spec["volumes"] == {str(share): {"bind": str(share), "mode": "rw"}}
    assert spec["entrypoint"] == ["sleep", "infinity"] and spec["detach"] is True


def test_node_paths_fit_a_unix_socket_and_the_command_is_an_argv(monkeypatch):
    monkeypatch.delenv("ORCHESTRATOR_DOCKER_SHARE", raising=False)
    p = dk.node_paths("a" * 16, "h9999")
    assert len(str(p["control"]).encode()) < 108
    assert all(v.parent == p["dir"] or v == p["dir"] for v in p.values())
    argv = dk.node_argv(p)
    assert argv[:2] == ["sh", "-c"] and argv[3:] == ["gossipnode", str(p["config"]), str(p["log"])]
    words = shlex.split(argv[2])
    assert words[:6] == ["exec", "python", "-m", "gossipnode", "--config", "$1"] and ">>$2" in "".join(words[6:])


def test_node_config_rewrites_only_the_paths(monkeypatch, tmp_path):
    monkeypatch.setenv("ORCHESTRATOR_DOCKER_SHARE", str(tmp_path))
    cfg = {"name": "h1", "id": 1, "event_log": "/runs/x/events/h1.jsonl", "control": "/tmp/ctl/h1.sock", "seed": 3}
    got = _driver("lab2", tmp_path / "run").configure({"h1": cfg})["h1"]
    assert got == {**cfg, "event_log": str(tmp_path / "orch-docker-lab2" / "h1" / "events.jsonl"),
                   "control": str(tmp_path / "orch-docker-lab2" / "h1" / "ctl.sock")}
    assert cfg["event_log"] == "/runs/x/events/h1.jsonl"          # the caller's dict is left alone


def test_collect_node_files_appends_into_the_run_directory(monkeypatch, tmp_path):
    monkeypatch.setenv("ORCHESTRATOR_DOCKER_SHARE", str(tmp_path / "share"))
    p = dk.node_paths("lab3", "h2")
    p["dir"].mkdir(parents=True)
    p["events"].write_text(json.dumps({"event": "x"}) + "\n")
    p["log"].write_text("hello\n")
    run = tmp_path / "run"
    driver = _driver("lab3", run)
    driver.collect_node_files("h2")
    assert (run / "events" / "h2.jsonl").read_text() == '{"event": "x"}\n'
    assert (run / "logs" / "h2.log").read_text() == "hello\n"
    assert not p["events"].exists() and not p["log"].exists()      # a later run on the same lab starts clean
    driver.collect_node_files("h2")                                  # nothing new: nothing changes
    assert (run / "logs" / "h2.log").read_text() == "hello\n"


def test_missing_engine_is_one_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/nothing.sock")
    with pytest.raises(dk.DockerUnavailable) as exc:
        dk.client()
    msg = str(exc.value)
    assert "not running" in msg and "systemctl start docker" in msg and "dockerd" in msg
    assert isinstance(exc.value, BackendError)


def test_debootstrap_command_and_import_changes(tmp_path):
    argv = images.debootstrap_argv("bookworm", tmp_path / "rootfs", "http://deb.debian.org/debian")
    assert argv[0] == "debootstrap" and "--variant=minbase" in argv
    include = next(a for a in argv if a.startswith("--include=")).split("=", 1)[1].split(",")
    assert {"python3", "python3-venv", "iputils-ping"} <= set(include)
    assert argv[-3:] == ["bookworm", str(tmp_path / "rootfs"), "http://deb.debian.org/debian"]
    assert any(c.startswith("ENV PATH=") for c in images.import_changes())


def test_dockerfile_keeps_base_image_overridable():
    text = (images.NODE_DIR / "Dockerfile").read_text()
    assert "ARG BASE_IMAGE=" in text and "FROM ${BASE_IMAGE}" in text
    assert 'ENTRYPOINT ["python", "-m", "gossipnode"]' in text
    assert Path(images.NODE_DIR / "wheels").is_dir()


def test_source_digest_follows_the_node_sources(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("x = 1\n")
    first = dk.source_digest(tmp_path)
    assert first == dk.source_digest(tmp_path) and len(first) == 64
    (tmp_path / "pkg" / "a.py").write_text("x = 2\n")
    assert dk.source_digest(tmp_path) != first
    (tmp_path / "pkg" / "notes.txt").write_text("not code")
    assert dk.source_digest(tmp_path) == dk.source_digest(tmp_path)
    assert dk.source_digest() == dk.source_digest(images.NODE_DIR / "gossipnode")


# --- rough edges: no shell string built from a path, the SDK's typed errors ---------------------------------------

def test_a_hostile_share_path_is_data_not_shell(monkeypatch, tmp_path):
    """ORCHESTRATOR_DOCKER_SHARE comes from the environment: with quotes and a command substitution in it the
    node's command still names exactly that file (the script never contains the path) and runs nothing else."""
    import subprocess

    evil = tmp_path / 'a"$(touch PWNED)"b'
    monkeypatch.setenv("ORCHESTRATOR_DOCKER_SHARE", str(evil))
    p = dk.node_paths("lab", "h1")
    p["dir"].mkdir(parents=True)
    argv = dk.node_argv(p)
    assert str(evil) not in argv[2]
    # Run it as the container would, with `python` a stand-in that prints its arguments.
    fakebin = tmp_path / "bin"
    fakebin.mkdir()
    (fakebin / "python").write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    (fakebin / "python").chmod(0o755)
    subprocess.run(argv, cwd=tmp_path, env={"PATH": f"{fakebin}:/usr/bin:/bin"}, check=True, timeout=30)
    assert p["log"].read_text().splitlines() == ["-m", "gossipnode", "--config", str(p["config"])]
    assert not (tmp_path / "PWNED").exists() and not list(tmp_path.rglob("PWNED"))


class _Images:
    def __init__(self, exc):
        self.exc = exc

    def get(self, name):
        raise self.exc


class _Containers(_Images):
    pass


class _Client:
    def __init__(self, exc):
        self.images, self.containers = _Images(exc), _Containers(exc)


def _api_error(cls, status: int, text: str):
    import requests

    resp = requests.Response()
    resp.status_code = status
    return cls(text, response=resp, explanation=text)


def test_docker_errors_are_told_apart(monkeypatch, tmp_path):
    from docker.errors import APIError, ImageNotFound, NotFound

    from orchestrator.backends.base import NullProgress
    from orchestrator.plan import build_plan
    from orchestrator.spec import parse_experiment

    monkeypatch.setenv("ORCHESTRATOR_STATE_DIR", str(tmp_path))
    plan = build_plan(parse_experiment("topology: {kind: tree, nodes: 3, degree: 2}\n"))
    state = LabState(lab="lab4", backend="docker", shaper="tbf", backend_data={"containers": ["lab4-h1"]})
    b = dk.DockerBackend()
    # A missing image is one thing ...
    monkeypatch.setattr(b, "_docker", lambda: _Client(_api_error(ImageNotFound, 404, "no such image")))
    with pytest.raises(BackendError, match="does not exist: build it"):
        b.up(plan, state, NullProgress())
    # ... an engine failing is another: it is not reported as a missing image (it was, under `except Exception`).
    monkeypatch.setattr(b, "_docker", lambda: _Client(_api_error(APIError, 500, "engine exploded")))
    with pytest.raises(BackendError, match="engine failed looking up the node image .*engine exploded"):
        b.up(plan, state, NullProgress())
    with pytest.raises(BackendError, match="engine failed looking up container lab4-h1: engine exploded"):
        b._container(state, "h1")
    monkeypatch.setattr(b, "_docker", lambda: _Client(_api_error(NotFound, 404, "no such container")))
    with pytest.raises(BackendError, match="container lab4-h1 of lab 'lab4' does not exist"):
        b._container(state, "h1")
    # A bug in our own code is not an engine error: it is not swallowed into a BackendError.
    monkeypatch.setattr(b, "_docker", lambda: _Client(TypeError("a bug")))
    with pytest.raises(TypeError):
        b._container(state, "h1")
