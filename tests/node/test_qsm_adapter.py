"""The orchestrator's QSM adapter: groups given as member ids are checked against the number of members (names
are left to the node model, which knows them: tests/integration/test_qsm.py's bad-input cases)."""
from __future__ import annotations

import pytest

from orchestrator.errors import SpecError
from orchestrator.protocols import Context
from orchestrator.protocols.qsm import ADAPTER


def test_ids_are_checked():
    ctx = Context(members=4, seed=1)
    ok = {"groups": [{"name": "a", "members": [0, 1, 2]}, {"name": "b", "members": [2, 3]}], "partition_size": 2}
    assert ADAPTER.to_node(dict(ok), ctx) == ok
    with pytest.raises(SpecError, match=r"protocol.qsm: members \[3\] belong to no group"):
        ADAPTER.to_node({"groups": [{"name": "a", "members": [0, 1, 2]}]}, ctx)
    with pytest.raises(SpecError, match="not a member"):
        ADAPTER.to_node({"groups": [{"name": "a", "members": "all"}, {"name": "b", "members": [7]}]}, ctx)


def test_names_are_left_to_the_node_model():
    params = {"groups": [{"name": "a", "members": ["h0", "h9"]}]}
    assert ADAPTER.to_node(dict(params), Context(members=4, seed=1)) == params
