"""The integration tests' reader of event logs (tests/integration/helpers.py, `event_lines`): a torn last line of a
killed member is skipped, nothing else."""
from __future__ import annotations

import json

import pytest

from tests.integration.helpers import event_lines


def test_event_lines_skip_only_a_torn_last_line(tmp_path):
    f = tmp_path / "h1.jsonl"
    f.write_text('{"a": 1}\n{"a": 2}\n{"ts": 1, "reason": "shuffl')          # killed mid-write
    assert event_lines(f) == [{"a": 1}, {"a": 2}]
    f.write_text('{"a": 1}\n{"a": 2}')                                     # complete, only the newline missing
    assert event_lines(f) == [{"a": 1}, {"a": 2}]
    f.write_text('{"a": 1}\n{"a": \n{"a": 2}\n')                           # a broken line inside: an error
    with pytest.raises(json.JSONDecodeError):
        event_lines(f)
