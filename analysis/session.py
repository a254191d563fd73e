"""The SparkSession the analysis runs in, local or on a cluster.

The executors run `analysis.pcap` (and through it `gossipnode.wire`): both packages are zipped and shipped with
`addPyFile`, so a cluster needs only Python and Spark, not this project. The run directories must be at the same
path on the driver and on every executor (a shared filesystem): the executors open the pcaps, Spark reads the
event logs and writes the Parquet tables there through `file://` URIs.
"""
from __future__ import annotations

import atexit
import os
import sys
import tempfile
import zipfile
from pathlib import Path

from pyspark.sql import SparkSession

import analysis
import gossipnode


def get_spark(master: str = "local[*]", conf: dict[str, str] | None = None) -> SparkSession:
    if master.startswith("local"):
        # A local Spark binds to loopback only: no listening on the machine's real interfaces.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = (SparkSession.builder.master(master).appName("gossip-testbed-analysis")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.ui.showConsoleProgress", "false"))
    if master.startswith("local") and "PYSPARK_PYTHON" not in os.environ:
        builder = builder.config("spark.pyspark.python", sys.executable)  # workers see this venv's packages
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    ship_code(spark)
    return spark


def ship_code(spark: SparkSession) -> Path:
    """Zip the `analysis` and `gossipnode` packages and add them to the executors' Python path."""
    fd, name = tempfile.mkstemp(prefix="analysis-code-", suffix=".zip")
    os.close(fd)
    out = Path(name)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for pkg in (analysis, gossipnode):
            root = Path(pkg.__file__).parent
            for f in sorted(root.rglob("*.py")):
                zf.write(f, f.relative_to(root.parent).as_posix())
    spark.sparkContext.addPyFile(str(out))
    atexit.register(out.unlink, missing_ok=True)
    return out
