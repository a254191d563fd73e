"""Experiment files: parsing, units, and one clear error line (file:line: field: problem) for bad input."""
import pytest

from orchestrator.errors import SpecError
from orchestrator.spec import check_name, load_experiment, parse_experiment
from orchestrator.units import parse_probability, parse_rate, parse_time

GOOD = """\
name: t1
topology:
  kind: tree
  nodes: 13
  degree: 4
links:
  rate: 30kbit
  delay: 5ms
  queue: 64
  up: {loss: 1%}
  overrides:
    - {subtree: h1, delay: 10ms}
"""


def test_good_file_parses():
    exp = parse_experiment(GOOD, "good.yaml")
    assert exp.topology.nodes == 13 and exp.links.rate == "30kbit"
    assert exp.links.overrides[0].subtree == "h1"


@pytest.mark.parametrize("text,expected", [
    ("30kbit", 30_000), ("1.5mbit", 1_500_000), ("2gbit", 2_000_000_000), ("800bit", 800), (1000, 1000),
])
def test_parse_rate(text, expected):
    assert parse_rate(text) == expected


@pytest.mark.parametrize("bad", ["-30kbit", "30kbps", "fast", "0bit", -5])
def test_parse_rate_rejects(bad):
    with pytest.raises(ValueError):
        parse_rate(bad)


def test_parse_time_and_probability():
    assert parse_time("5ms") == pytest.approx(0.005)
    assert parse_time("250us") == pytest.approx(0.00025)
    assert parse_time("2s") == 2.0
    assert parse_probability("0.1%") == pytest.approx(0.001)
    assert parse_probability(0.25) == 0.25
    for bad in ("120%", 1.5, "-1%", "lots"):
        with pytest.raises(ValueError):
            parse_probability(bad)


def _error(text: str) -> str:
    with pytest.raises(SpecError) as exc:
        parse_experiment(text, "bad.yaml")
    return str(exc.value)


@pytest.mark.parametrize("text,line,path,words", [
    ("topology: {kind: tree, nodes: 9, degree: 4}\nlinx: {}\n", 2, "linx", "unknown key"),
    ("topology:\n  kind: tree\n  nodes: 9\n  degree: 1\n", 4, "topology.degree", "greater than or equal to 2"),
    ("topology:\n  kind: tree\n  nodes: 9\n  degree: 4\n  members: {count: 20}\n", 5, "topology.members",
     "larger than nodes"),
    ("topology: {kind: tree, nodes: 9, degree: 4}\nlinks:\n  rate: -30kbit\n", 3, "links.rate", "positive"),
    ("topology: {kind: tree, nodes: 9, degree: 4}\nlinks:\n  loss: 120%\n", 3, "links.loss", "outside 0..100"),
    ("topology: {kind: tree, nodes: 9, degree: 4}\nlinks:\n  up:\n    delay: soon\n", 4, "links.up.delay",
     "unit"),
    ("name: 'x; rm -rf /'\ntopology: {kind: tree, nodes: 9, degree: 4}\n", 1, "name", "metacharacters"),
])
def test_bad_input_names_file_line_field(text, line, path, words):
    msg = _error(text)
    first = msg.splitlines()[0]
    assert first.startswith(f"bad.yaml:{line}: {path}: "), first
    assert words in first


def test_malformed_yaml_names_line():
    msg = _error("topology:\n  kind: tree\n  nodes: [1, 2\n")
    assert msg.startswith("bad.yaml:") and "malformed YAML" in msg


def test_not_a_mapping():
    assert "YAML mapping" in _error("- just\n- a list\n")


def test_missing_file(tmp_path):
    with pytest.raises(SpecError, match="no such experiment file"):
        load_experiment(tmp_path / "nope.yaml")


def test_jinja_template(tmp_path):
    f = tmp_path / "sweep.yaml"
    f.write_text("topology: {kind: tree, nodes: {{ n }}, degree: 4}\n")
    assert load_experiment(f, {"n": "21"}).topology.nodes == 21
    with pytest.raises(SpecError, match="undefined"):
        load_experiment(f)


@pytest.mark.parametrize("name", ["lab1", "a", "gsgc-200"])
def test_good_names(name):
    assert check_name(name) == name


@pytest.mark.parametrize("name", ["", "1lab", "a b", "x;y", "$(id)", "a" * 17, "Lab"])
def test_bad_names(name):
    with pytest.raises(SpecError):
        check_name(name)
