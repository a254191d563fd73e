"""The synthetic run directory (the tests' SparkSession, `spark`, is tests/conftest.py's)."""
from __future__ import annotations

import pytest

from tests.analysis import synthetic


@pytest.fixture
def run_dir(tmp_path):
    return synthetic.make_run(tmp_path)
