"""The SparkSession the analysis runs in, local or on a cluster.

The executors run `analysis.pcap` (and through it `gossipnode.wire`). A local Spark's workers import both from
the driver's source tree (PYTHONPATH); for a cluster both packages are zipped and shipped with `addPyFile`, so a
cluster needs only Spark and Python with pyarrow and numpy (the ingest decodes whole pcap buffers with numpy),
not this project. The run directories must be at the same path on the driver and on every executor (a shared
filesystem): the executors open the pcaps, Spark reads the event logs and writes the Parquet tables there through
`file://` URIs.
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


LOG4J2 = Path(__file__).resolve().parent / "log4j2.properties"


def get_spark(master: str = "local[*]", conf: dict[str, str] | None = None) -> SparkSession:
    if master.startswith("local"):
        # A local Spark binds to loopback only: no listening on the machine's real interfaces.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = (SparkSession.builder.master(master).appName("gossip-testbed-analysis")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.ui.showConsoleProgress", "false"))
    if master.startswith("local") and "PYSPARK_PYTHON" not in os.environ:
        # The local workers run this venv's Python (pyarrow for the Arrow ingest). The SparkContext takes the
        # workers' Python from PYSPARK_PYTHON (else `python3` on the PATH); the spark.pyspark.python setting
        # only reaches a driver started by spark-submit.
        os.environ["PYSPARK_PYTHON"] = sys.executable
        builder = builder.config("spark.pyspark.python", sys.executable)
    if master.startswith("local"):
        # Local workers import this project from where the driver does (not from a zip: gossipnode finds its
        # protocol packages on the filesystem, which a zip on the path is not).
        paths = [*source_roots(), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        builder = builder.config("spark.executorEnv.PYTHONPATH", os.pathsep.join(dict.fromkeys(paths)))
    conf = dict(conf or {})
    # Spark's log4j2 at ERROR from the JVM's start (setLogLevel comes too late for the start-up warnings).
    conf["spark.driver.extraJavaOptions"] = " ".join(filter(None, [
        f"-Dlog4j2.configurationFile=file:{LOG4J2}", conf.get("spark.driver.extraJavaOptions")]))
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if not master.startswith("local"):
        ship_code(spark)
    return spark


def source_roots() -> list[str]:
    """The directories holding the `analysis` and `gossipnode` packages the driver imported."""
    return list(dict.fromkeys(str(Path(pkg.__file__).resolve().parent.parent) for pkg in (analysis, gossipnode)))


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
