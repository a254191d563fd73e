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


# --- issue 16/22: the loader's rough edges ------------------------------------------------------------------------

TOPO = "topology: {kind: tree, nodes: 9, degree: 4}\n"


@pytest.mark.parametrize("text,expected", [
    ("Duration: 10s\n" + TOPO, "bad.yaml:1: Duration: unknown key"),                # was "(top level)"
    (TOPO + "links: {Loss: 1%}\n", "bad.yaml:2: links.Loss: unknown key"),         # was without the line
    (TOPO + "links:\n  rate: 1mbit\n  Loss: 1%\n", "bad.yaml:4: links.Loss: unknown key"),
    (TOPO + "links: {overrides: [{subtree: h1, Delay: 5ms}]}\n", "bad.yaml:2: links.overrides[0].Delay: unknown key"),
])
def test_capitalised_keys_keep_their_name_and_line(text, expected):
    assert _error(text) == expected


def test_duplicate_keys_name_both_lines():
    assert _error("duration: 80s\n" + TOPO + "duration: 10s\n") == \
        "bad.yaml:3: duration: duplicate key (first on line 1)"
    assert _error(TOPO + "links:\n  rate: 1mbit\n  delay: 5ms\n  rate: 2mbit\n") == \
        "bad.yaml:5: links.rate: duplicate key (first on line 3)"


def test_schedule_errors_are_located_like_every_other_field():
    text = TOPO + "duration: 30s\nschedule:\n  - {at: 5s, action: crash, count: 1}\n  - at: 5s\n" \
                  "    action: crash\n    nodes: [h1, h99]\n"
    msg = _error(text)
    assert msg.startswith("bad.yaml:7: schedule[1].nodes[1]: ") and "unknown node 'h99'" in msg, msg


def test_templates_are_sandboxed(tmp_path):
    for attack in ("{{ ''.__class__.__mro__ }}", "{{ ''.__class__.__mro__[1].__subclasses__() }}",
                   "{{ cycler.__init__.__globals__.os }}", "{{ x.__class__ }}"):
        f = tmp_path / "t.yaml"
        f.write_text(TOPO + f"description: '{attack}'\n")
        with pytest.raises(SpecError) as exc:
            load_experiment(f, {"x": "1"} if "x." in attack else None)
        msg = str(exc.value)
        assert msg.startswith(f"{f}:2: template error: ") and "unsafe" in msg and "sandbox" in msg, msg


def test_template_errors_name_the_source_line(tmp_path):
    src = ("name: t1\n"                                # 1
           "{% set n = 9 %}\n"                         # 2
           "topology: {kind: tree, nodes: {{ n }}, degree: 4}\n"
           "links:\n"                                  # 4
           "{% for d in ['down'] %}\n"                 # 5
           "  {{ d }}: {rate: 1mbit}\n"                # 6
           "{% endfor %}\n"                            # 7
           "  delay: {{ delay }}\n"                    # 8
           "  queue: 0\n")                             # 9: the error, rendered on another line
    f = tmp_path / "t.yaml"
    f.write_text(src)
    msg = str(pytest.raises(SpecError, load_experiment, f, {"delay": "5ms"}).value)
    assert msg.startswith(f"{f}:9: links.queue: "), msg
    msg = str(pytest.raises(SpecError, load_experiment, f, {"delay": "soon"}).value)
    assert msg.startswith(f"{f}:8: links.delay: "), msg
    f.write_text("{% for i in range(2) %}\nx{{ i }}: 1\n{% endfor %}\n" + TOPO)    # lines a loop made
    msg = str(pytest.raises(SpecError, load_experiment, f).value)
    assert msg.startswith(f"{f} (rendered line 2): x0: unknown key"), msg
    f.write_text(TOPO + "description: {{ undefined_thing }}\n")
    msg = str(pytest.raises(SpecError, load_experiment, f).value)
    assert msg.startswith(f"{f}:2: template error: ") and "--set" in msg, msg


def test_hosts_file_is_parsed_once(tmp_path, monkeypatch):
    """hostsfile.py re-composed the whole YAML for every host (quadratic in the number of hosts)."""
    import yaml

    from orchestrator.hosts.hostsfile import parse_hosts

    (tmp_path / "k").write_text("x\n")
    text = "defaults: {user: root, key: k}\nhosts:\n" + "".join(
        f"  - {{name: n{i}, ssh: 192.0.2.{i}, address: 10.1.0.{i}}}\n" for i in range(1, 40))
    calls = []
    real = yaml.SafeLoader.get_single_node
    monkeypatch.setattr(yaml.SafeLoader, "get_single_node", lambda self: calls.append(1) or real(self))
    monkeypatch.setattr(yaml, "compose", lambda *a, **k: calls.append(1) or pytest.fail("composed again"))
    assert len(parse_hosts(text, "h.yml", tmp_path)) == 39
    assert len(calls) == 1
    dup = text.replace("defaults: {user: root, key: k}\n", "defaults: {user: root, key: k, user: gossip}\n")
    with pytest.raises(SpecError, match=r"^h\.yml:1: defaults\.user: duplicate key \(first on line 1\)$"):
        parse_hosts(dup, "h.yml", tmp_path)


def test_unreadable_inputs_are_one_line_spec_errors(tmp_path):
    f = tmp_path / "bin.yaml"
    f.write_bytes(b"name: x\n\xff\xfe\n")
    with pytest.raises(SpecError, match=r"bin\.yaml:2: not UTF-8 text \(byte 0xff at offset 8\)"):
        load_experiment(f)
    with pytest.raises(SpecError, match="not a regular file"):
        load_experiment("/dev/zero")
    with pytest.raises(SpecError, match="is a directory"):
        load_experiment(tmp_path)


def test_a_variable_the_experiment_does_not_use_is_refused(tmp_path):
    tpl = tmp_path / "t.yaml"
    tpl.write_text("topology: {kind: tree, nodes: {{ n | default(3) }}, degree: 2}\n")
    assert load_experiment(tpl, {"n": "5"}).topology.nodes == 5
    with pytest.raises(SpecError, match=r"--set m: .*t.yaml has no variable 'm' \(its variables: n\)"):
        load_experiment(tpl, {"m": "5"})
    plain = tmp_path / "p.yaml"
    plain.write_text("topology: {kind: tree, nodes: 3, degree: 2}\n")
    with pytest.raises(SpecError, match=r"--set x: .*p.yaml is not a template"):
        load_experiment(plain, {"x": "1"})


def test_a_node_config_the_node_refuses_is_one_located_line(tmp_path):
    from orchestrator.lab import prepare

    f = tmp_path / "q.yaml"
    f.write_text("topology: {kind: tree, nodes: 4, degree: 2}\n"
                 "protocol:\n  qsm:\n    groups:\n      - {name: a, members: all}\n"
                 "workload: {senders: [h0], rate_per_s: 10, size_bytes: 10}\n")
    with pytest.raises(SpecError) as err:
        prepare(f)
    msg = str(err.value)
    assert msg.startswith(f"{f}:3: protocol.qsm: workload size_bytes 10 is below a QSM DATA message's headers"), msg
    assert "pydantic" not in msg and "input_value" not in msg and "\n" not in msg
