"""Requirement markers.

A test says what it needs with a marker (root, mininet, docker, ansible, spark, netem). When a requirement is
missing the test is skipped with the reason -- except under CI=true, where CI is root and has everything, so a
test that would be skipped fails instead (a skip there would hide a broken install).

`make test` runs two pytest-xdist workers (`-n 2`, with the scheduler below). Every test that needs root (a lab,
cgroups, the kernel) is in the share `lab`, which one worker runs one test at a time in collection order, as without
xdist; the analysis tests (Spark on synthetic runs, no root) are the share `analysis`, run the same way by the other
worker; the pure unit and node tests are spread over both. A lab test thus runs beside Spark or a pure test: the
machine's other core busy, which every timing bound in a test must tolerate anyway. (Running the budgeted lab tests
beside the others, two labs at once, took the suite to 33 min but broke two timing tests of the delay line and the
multicast hop cost: not done.) (xdist's
own `loadgroup` does not group under pytest 9: it renames the tests' `_nodeid`, which pytest 9 no longer reads.)
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@functools.cache
def _kernel_has_netem() -> bool:
    if os.geteuid() != 0 or not shutil.which("ip"):
        return False
    from orchestrator.shaping.probe import probe_kernel

    return probe_kernel().netem


def _missing(marker: str) -> str | None:
    """Return why `marker`'s requirement is not met here, or None when it is."""
    if marker in ("root", "mininet", "netem", "docker", "ansible") and os.geteuid() != 0:
        return "needs root"
    if marker == "mininet":
        for tool in ("mnexec", "ip", "tc", "iptables"):
            if not shutil.which(tool):
                return f"needs {tool} (run `make setup`)"
    if marker == "netem" and not _kernel_has_netem():
        return "kernel has no sch_netem (run `make test-netem`, which boots a netem kernel)"
    if marker == "docker":
        try:
            import docker  # noqa: F401

            docker.from_env().ping()
        except Exception as exc:  # noqa: BLE001 - any failure means "no engine"
            return f"needs a running Docker engine ({exc.__class__.__name__})"
    if marker == "spark":
        if shutil.which("java") is None:
            return "needs java"
        try:
            import pyspark  # noqa: F401
        except ImportError:
            return "needs pyspark"
    if marker == "ansible":
        try:
            import ansible_runner  # noqa: F401
        except ImportError:
            return "needs ansible-runner"
        for tool in ("/usr/sbin/sshd", "ssh", "ssh-keygen", "sudo", "useradd"):   # the SSH hosts of test_hosts.py
            if shutil.which(tool) is None:
                return f"needs {tool} (run `make setup`: openssh-server, sudo)"
    return None


_REQUIREMENT_MARKERS = ("root", "mininet", "docker", "ansible", "spark", "netem")
_LAB_MARKERS = ("root", "mininet", "docker", "ansible", "netem")
# files outside tests/integration that hold a test with a lab marker (checked at collection: a lab test elsewhere
# stops the session with the file to add here)
_LAB_FILES = ("tests/analysis/test_real_transports.py", "tests/node/test_node_packed.py",
              "tests/unit/test_bench_floor.py")


def share_of(nodeid: str) -> str | None:
    """The share of the test `nodeid` (see the module's docstring): `lab`, `analysis`, or None for a pure test that
    either worker may run."""
    path = nodeid.split("::", 1)[0]
    parts = path.split("/")
    if path in _LAB_FILES or parts[1:2] == ["integration"] or len(parts) == 2:
        return "lab"
    if parts[1:2] == ["analysis"]:
        return "analysis"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test with a lab marker must be in the share `lab`."""
    stray = sorted({it.nodeid.split("::", 1)[0] for it in items if share_of(it.nodeid) != "lab"
                    and any(it.get_closest_marker(m) is not None for m in _LAB_MARKERS)})
    if stray:
        raise pytest.UsageError(f"tests/conftest.py: add {stray} to _LAB_FILES (they hold tests with a lab marker)")


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """xdist's loadscope scheduler over the shares: `lab` and `analysis` are one scope each, every other test its
    own."""
    from xdist.scheduler import LoadScopeScheduling

    class Shares(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return share_of(nodeid) or nodeid

    return Shares(config, log)


def pytest_runtest_setup(item: pytest.Item) -> None:
    in_ci = os.environ.get("CI", "").lower() in ("1", "true", "yes")
    for marker in _REQUIREMENT_MARKERS:
        if item.get_closest_marker(marker) is None:
            continue
        why = _missing(marker)
        if why is None:
            continue
        if in_ci:
            pytest.fail(f"[{marker}] requirement missing in CI: {why}", pytrace=False)
        pytest.skip(f"[{marker}] {why}")


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    """A private orchestrator state directory, so tests never see real labs."""
    d = tmp_path / "state"
    monkeypatch.setenv("ORCHESTRATOR_STATE_DIR", str(d))
    return d


def run_quiet(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True)


@pytest.fixture(scope="session")
def direct_runs(tmp_path_factory):
    """transport -> run directory of the `direct` protocol on that transport (tests/integration/transport_runs.py);
    run once per session, on first use. Tests that use it need the root and mininet markers."""
    from tests.integration.transport_runs import TRANSPORTS, direct_run

    tmp = tmp_path_factory.mktemp("direct-runs")
    cache: dict[str, object] = {}

    def get(transport: str):
        if transport not in cache:
            cache[transport] = direct_run(transport, tmp)
        return cache[transport]

    return {t: (lambda t=t: get(t)) for t in TRANSPORTS}


@pytest.fixture(scope="session")
def spark():
    """One local SparkSession for the whole test session (2 cores, 2 shuffle partitions, no UI, a C1-only driver
    JVM): the analysis tests and the lab tests that analyse their runs share it, so the JVM starts once."""
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
