"""A session-scoped local SparkSession (2 cores, 2 shuffle partitions, no UI) and the synthetic run directory."""
from __future__ import annotations

import shutil

import pytest

from tests.analysis import synthetic


@pytest.fixture(scope="session")
def spark():
    if shutil.which("java") is None:
        pytest.skip("[spark] needs java")
    pytest.importorskip("pyspark")
    from analysis.session import get_spark

    session = get_spark("local[2]", {"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2",
                                     "spark.ui.enabled": "false"})
    yield session
    session.stop()


@pytest.fixture
def run_dir(tmp_path):
    return synthetic.make_run(tmp_path)
