"""A session-scoped local SparkSession (2 cores, 2 shuffle partitions, no UI, a C1-only driver JVM) and the synthetic
run directory."""
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

    # -XX:TieredStopAtLevel=1: the driver JVM compiles with C1 only. The tests' many small jobs never repay C2's
    # compilations, which compete with them for the two cores (about a sixth less CPU for the Spark tests); the
    # plans and results are the same. `orchestrator analyze` itself (test_progress.py) keeps Spark's defaults.
    session = get_spark("local[2]", {"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2",
                                     "spark.ui.enabled": "false",
                                     "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1"})
    yield session
    session.stop()


@pytest.fixture
def run_dir(tmp_path):
    return synthetic.make_run(tmp_path)
