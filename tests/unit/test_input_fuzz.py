"""Property test of the input loaders (FUZZ_EXAMPLES=800 for a longer search) (issue 22): whatever bytes an experiment or hosts file holds -- arbitrary
bytes, arbitrary YAML documents, mutations of every file in topologies/ -- the only outcomes are a valid
experiment (hosts list) or one SpecError line naming the file; never another exception, never a hang (a generous
per-input bound, not a speed assertion), and through the CLI exit 2 with nothing built."""
from __future__ import annotations

import atexit
import contextlib
import io
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

from orchestrator.errors import OrchestratorError, SpecError
from orchestrator.hosts.hostsfile import Host, load_hosts
from orchestrator.spec import Experiment, load_experiment

REPO = Path(__file__).resolve().parents[2]
TOPOLOGIES = {p.name: p.read_text() for p in sorted((REPO / "topologies").glob("*.yaml"))}
HANG_S = 60           # an input that takes this long is a hang (every loader bounds its own work far below it)
FUZZ = settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", "80")), deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])

HOSTS_TEXT = """\
defaults: {user: gossip, key: id_test, workdir: /srv/gt}
hosts:
  - {name: node-0, ssh: 192.0.2.10, address: 10.1.0.10}
  - name: node-1
    ssh: 192.0.2.11:2222
    address: 10.1.0.11
    member: h1
    interface: eth0
"""


@contextlib.contextmanager
def bounded(seconds: int = HANG_S):
    def hang(signum, frame):
        raise AssertionError(f"no outcome after {seconds} s: the loader hangs on this input")
    old = signal.signal(signal.SIGALRM, hang)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


WORKDIR = Path(tempfile.mkdtemp(prefix="fuzz-inputs-"))
atexit.register(shutil.rmtree, WORKDIR, True)
(WORKDIR / "id_test").write_text("only its existence is checked\n")


def outcome(load, raw: bytes, name: str):
    """Write `raw` to a file and load it: the result, or the SpecError's message (checked to be one line that
    names the file)."""
    f = WORKDIR / name
    f.write_bytes(raw)
    with bounded():
        try:
            return load(f)
        except SpecError as exc:
            msg = str(exc)
            assert "\n" not in msg and "\r" not in msg, msg
            assert msg.startswith(str(f)), msg
            return msg


def check_experiment(raw: bytes) -> None:
    got = outcome(load_experiment, raw, "exp.yaml")
    assert isinstance(got, (Experiment, str)), got


def check_hosts(raw: bytes) -> None:
    got = outcome(load_hosts, raw, "hosts.yml")
    assert isinstance(got, str) or (isinstance(got, list) and all(isinstance(h, Host) for h in got)), got


# --- strategies -----------------------------------------------------------------------------------------------

EXP_KEYS = ["name", "topology", "kind", "nodes", "degree", "members", "count", "seed", "links", "rate", "delay",
            "jitter", "loss", "queue", "up", "down", "overrides", "subtree", "link", "gemodel", "addressing",
            "protocol", "gsgc", "subgroup", "step", "fail_k", "workload", "senders", "schedule", "at", "action",
            "fraction", "duration", "p", "set", "crashed", "capture", "interfaces", "multicast", "groups", "address",
            "sweep", "Duration", "Loss", "<<"]
HOST_KEYS = ["defaults", "hosts", "name", "ssh", "address", "user", "key", "port", "workdir", "python", "member",
             "interface"]
VALUES = ["5s", "-5s", "90s", "1e999s", "30kbit", "0bit", "1.5", "120%", "h1", "h99", "hé", "r0", "crash",
          "perturb", "explode", "tree", "all", "10.0.0.0/16", "foo", "239.1.0.1", "~nobody/key", "/", "../x",
          "{{ x }}", "[/]", "2024-13-45", "9" * 5000, "\x85", "id_test", "192.0.2.1:99999"]
scalars = (st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=True)
           | st.sampled_from(VALUES) | st.text(max_size=20))


def documents(keys: list[str]):
    key = st.sampled_from(keys) | st.text(max_size=8)
    return st.recursive(scalars, lambda inner: st.lists(inner, max_size=5) | st.dictionaries(key, inner, max_size=6),
                        max_leaves=40)


def dump(doc) -> bytes:
    try:
        return yaml.safe_dump(doc, allow_unicode=True, sort_keys=False).encode()
    except (yaml.YAMLError, ValueError, UnicodeEncodeError):
        return b"x: 1\n"


@st.composite
def mutated(draw, texts: list[str]) -> bytes:
    """A valid file with a few edits: lines deleted, duplicated, swapped, re-indented, values replaced, bytes
    flipped, the end cut off."""
    lines = draw(st.sampled_from(texts)).splitlines(keepends=True) or ["\n"]
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["delete", "dup", "swap", "indent", "value", "insert", "cut"]))
        if op == "delete" and len(lines) > 1:
            del lines[i]
        elif op == "dup":
            lines.insert(i, lines[i])
        elif op == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "indent":
            lines[i] = " " * draw(st.integers(0, 6)) + lines[i].lstrip(" ")
        elif op == "value" and ":" in lines[i]:
            k = lines[i].index(":")
            lines[i] = lines[i][:k + 1] + " " + draw(st.sampled_from(VALUES) | st.text(max_size=12)) + "\n"
        elif op == "insert":
            lines.insert(i, draw(st.text(max_size=30)) + "\n")
        elif op == "cut":
            lines = lines[:i + 1]
            lines[-1] = lines[-1][:draw(st.integers(0, len(lines[-1])))]
    raw = bytearray("".join(lines).encode())
    if raw and draw(st.booleans()):
        raw[draw(st.integers(0, len(raw) - 1))] = draw(st.integers(0, 255))
    return bytes(raw)


@st.composite
def replaced(draw, texts: list[str], keys: list[str]) -> bytes:
    """A valid file's document with one value anywhere replaced by an arbitrary one."""
    doc = yaml.safe_load(draw(st.sampled_from(texts)))
    node, parent, where = doc, None, None
    for _ in range(draw(st.integers(0, 4))):
        if isinstance(node, dict) and node:
            k = draw(st.sampled_from(sorted(node, key=str)))
        elif isinstance(node, list) and node:
            k = draw(st.integers(0, len(node) - 1))
        else:
            break
        parent, where, node = node, k, node[k]
    new = draw(documents(keys))
    if parent is None:
        doc = new
    else:
        parent[where] = new
    return dump(doc)


PLAIN_TOPOLOGIES = [t for t in TOPOLOGIES.values() if "{{" not in t and "{%" not in t]


# --- the properties ---------------------------------------------------------------------------------------------

@FUZZ
@given(st.binary(max_size=4096))
def test_experiment_loader_on_arbitrary_bytes(raw):
    check_experiment(raw)


@FUZZ
@given(documents(EXP_KEYS).map(dump))
def test_experiment_loader_on_arbitrary_yaml(raw):
    check_experiment(raw)


@FUZZ
@given(mutated(list(TOPOLOGIES.values())) | replaced(PLAIN_TOPOLOGIES, EXP_KEYS))
def test_experiment_loader_on_mutated_topologies(raw):
    check_experiment(raw)


def test_every_topology_file_loads():
    for name in TOPOLOGIES:
        assert isinstance(load_experiment(REPO / "topologies" / name), Experiment), name


@FUZZ
@given(st.binary(max_size=2048) | documents(HOST_KEYS).map(dump) | mutated([HOSTS_TEXT])
       | replaced([HOSTS_TEXT], HOST_KEYS))
def test_hosts_loader(raw):
    check_hosts(raw)


@pytest.mark.parametrize("raw", [
    b"a: &a [*a]\n",                                                            # a recursive alias
    b"a: &a [1,2,3,4,5,6,7,8,9]\n" + b"".join(                                  # a billion laughs
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n".encode() for i in range(9)),
    b"[" * 100_000,                                                             # deep nesting
    b"topology: {kind: tree, nodes: 9, degree: 4}\nduration: 1000000000s\nschedule:\n"
    b"  - {at: 1s, action: perturb, count: 9, p: 0.5, duration: 999999999s}\n",   # a week of perturbation ops
    b"{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}\n",
    b"{{ 'x' * 1000000000 }}\n", b"{{ 9 ** 9 ** 9 }}\n", b"{{ ''.__class__.__mro__ }}\n",
    b"\xff\xfe" + "topology: 1".encode("utf-16-le"), b"x: \x00\n", b"x: 2024-02-30\n",
])
def test_known_bombs_are_one_line_errors(raw, monkeypatch):
    import orchestrator.source

    monkeypatch.setattr(orchestrator.source, "TEMPLATE_TIMEOUT_S", 2.0)    # the template loop stops sooner
    assert isinstance(outcome(load_experiment, raw, "bomb.yaml"), str)
    assert isinstance(outcome(load_hosts, raw, "bomb.yml"), str)


# --- through the CLI: exit 2, one line, nothing built ------------------------------------------------------------

def cli_up(path: Path) -> tuple[int, str]:
    from orchestrator import cli

    err = io.StringIO()
    argv = sys.argv
    sys.argv = ["orchestrator", "up", str(path)]
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()), bounded():
            try:
                cli.main()
                code = 0
            except SystemExit as exc:
                code = exc.code
    finally:
        sys.argv = argv
    return code, err.getvalue()


@settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", "80")) // 3, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=1024) | documents(EXP_KEYS).map(dump) | mutated(list(TOPOLOGIES.values())))
def test_cli_rejects_bad_input_with_exit_2_and_builds_nothing(state_dir, raw):
    f = WORKDIR / "cli.yaml"
    f.write_bytes(raw)
    try:
        load_experiment(f)
        return                      # a valid experiment: `up` would build it (that is not this test)
    except OrchestratorError:
        pass
    code, err = cli_up(f)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith(f"error: {f}"), (code, err)
    assert not state_dir.exists() or not any(state_dir.iterdir())
