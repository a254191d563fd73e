"""gossipnode.config: the node config file the orchestrator writes."""
from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from gossipnode.config import NodeConfig, load_config, parse_addr


def config(**overrides):
    base = {
        "name": "m1",
        "id": 1,
        "listen": "10.0.0.2:7000",
        "members": [{"id": i, "name": f"m{i}", "addr": f"10.0.0.{i + 1}:7000"} for i in range(4)],
        "protocol": {"name": "gsgc", "subgroup": 2, "step_s": 0.5, "fail_k": 8},
        "senders": [0, 2],
        "workload": {"rate_per_s": 5, "size_bytes": 64, "start_s": 1, "stop_s": 10},
        "seed": 7,
        "event_log": "/tmp/ev/m1.jsonl",
        "control": "/tmp/ctl/m1.sock",
        "duration_s": 30,
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            base[key] = {**base[key], **value}
        else:
            base[key] = value
    return base


def test_a_full_config_parses():
    cfg = NodeConfig.model_validate(config())
    assert cfg.n == 4
    assert cfg.protocol.subgroup == 2 and cfg.protocol.fail_k == 8
    assert cfg.protocol.suspect_threshold == 6  # ceil(3 * 8 / 4)
    assert cfg.workload.stop_s == 10
    assert str(cfg.control) == "/tmp/ctl/m1.sock"


def test_local_groups_parse():
    groups = [{"members": [0, 1], "controllers": [1]}, {"members": [2, 3], "controllers": [2, 3]}]
    cfg = NodeConfig.model_validate(config(protocol={"local_groups": groups}))
    assert [g.controllers for g in cfg.protocol.local_groups] == [[1], [2, 3]]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"members": [{"id": 0, "name": "a", "addr": "10.0.0.1:1"}, {"id": 2, "name": "b", "addr": "10.0.0.2:1"}],
          "id": 0}, "exactly 0..1"),
        ({"id": 9}, "id 9 is not among the members"),
        ({"listen": "localhost:7000"}, "not an IPv4 address"),
        ({"listen": "10.0.0.1"}, "is not 'ip:port'"),
        ({"senders": [0, 0]}, "distinct member ids"),
        ({"senders": [7]}, "distinct member ids"),
        ({"workload": None}, "no workload"),
        ({"protocol": {"local_groups": [{"members": [0, 1], "controllers": [0]}]}}, "partition the members"),
        ({"protocol": {"local_groups": [{"members": [0, 1], "controllers": [2]}, {"members": [2, 3], "controllers": [2]}]}},
         r"controllers \[2\] are not members"),
        ({"protocol": {"suspect_k": 9}}, "suspect_k"),
        ({"protocol": {"fail_k": 3}}, "greater than or equal to 4"),
        ({"protocol": {"typo": 1}}, "Extra inputs are not permitted"),
        ({"protocol": {"name": "nosuchprotocol"}}, "does not match any of the expected tags: .*'gsgc'"),
        ({"protocol": {"name": None}}, "name"),
        ({"workload": {"size_bytes": 10}}, "below a GSGC DATA message's headers \\(19 bytes\\)"),
        ({"workload": {"start_s": 10, "stop_s": 5}}, "not after start_s"),
    ],
)
def test_invalid_configs_are_rejected(overrides, message):
    with pytest.raises(ValidationError, match=message):
        NodeConfig.model_validate(config(**overrides))


def test_load_config_names_the_file(tmp_path):
    good = tmp_path / "node.json"
    good.write_text(json.dumps(config()))
    assert load_config(good).name == "m1"
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="bad.json"):
        load_config(bad)
    with pytest.raises(ValueError, match="missing.json"):
        load_config(tmp_path / "missing.json")


def test_parse_addr():
    assert parse_addr("127.0.0.1:5000") == ("127.0.0.1", 5000)
    with pytest.raises(ValueError):
        parse_addr("127.0.0.1:99999")
