"""Requirement markers, and how `make test` shares the machine.

A test says what it needs with a marker (root, mininet, docker, ansible, spark, netem). When a requirement is
missing the test is skipped with the reason -- except under CI=true, where CI is root and has everything, so a
test that would be skipped fails instead (a skip there would hide a broken install).

`make test` runs two pytest-xdist workers (`-n 2`, with the scheduler below) over four shares:
- `lab`: every test that needs root (a lab, cgroups, the kernel), run by one worker in collection order, the files
  of `_ALONE_FILES` first;
- `analysis`: the analysis and node tests (Spark on synthetic runs, the protocols' simulations; no root), run the
  same way by the other worker while the first runs the `_ALONE_FILES`, then
- the pure unit tests, one at a time by whichever worker needs work (in practice the second, while the first still
  holds the lab lock alone), then
- `lab-beside` (`_BESIDE_FILES`): lab tests whose assertions no load can change (two analyses of the same logs,
  delivery, a sweep's bookkeeping).
Two labs may thus run at once, but never beside a test of `_ALONE_FILES` (the delay line's hold error and queue
drops, the multicast hop cost, the probe, the CPU-budget and virtual-time measurements, ...: what measures the
machine's timing): those hold the lab lock exclusively, from the first to the last, every other lab module holds it
shared (`_LabLock`; a turnstile keeps an exclusive waiter from being overtaken). The bad-input tests of
tests/integration (`_PURE_FILES`) build nothing and are spread like pure tests. Every other bound in a lab test must
hold with the machine busy, as it must in CI anyway. (xdist's own `loadgroup` does not group under pytest 9: it
renames the tests' `_nodeid`, which pytest 9 no longer reads.)
"""
from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import shutil
import subprocess
import time
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


# lab tests that may run beside another lab (the share `lab-beside`): what they assert compares two analyses of the
# same logs (the Spark path against run_values), or is delivery, which load delays but does not change (QSM's
# recovery), or (the sweep) only the bookkeeping, with the fidelity verdicts printed
_BESIDE_FILES = ("tests/integration/test_sweep.py", "tests/integration/test_hyparview_values_spark.py",
                 "tests/integration/test_pbcast_values_spark.py", "tests/integration/test_gsgc_values_spark.py",
                 "tests/integration/test_qsm.py")
# lab tests that measure the machine's timing, or whose undilated runs a second lab would decide (HyParView's 60
# members: mean reliability 0.53 after the crash on an overloaded machine, >= 0.95 alone), run with no other lab
# (first in the share `lab`)
_ALONE_FILES = ("tests/integration/test_delayline.py", "tests/integration/test_lab_delayline.py",
                "tests/integration/test_multicast.py", "tests/integration/test_multicast_docker.py",
                "tests/integration/test_probe.py", "tests/integration/test_transports.py",
                "tests/integration/test_run_signals.py", "tests/integration/test_cpubudget.py",
                "tests/integration/test_virtual_time.py", "tests/integration/test_mininet.py",
                "tests/integration/test_hyparview.py",
                "tests/unit/test_bench_floor.py")
# files under tests/integration that build nothing (bad input through the real CLI, rejected before any lab
# exists): pure tests, spread over both workers
_PURE_FILES = ("tests/integration/test_cli_inputs.py",)


def share_of(nodeid: str) -> str | None:
    """The share of the test `nodeid` (see the module's docstring): `lab`, `lab-beside`, `analysis`, or None for a
    pure test that either worker may run."""
    path = nodeid.split("::", 1)[0]
    parts = path.split("/")
    if path in _BESIDE_FILES:
        return "lab-beside"
    if path in _PURE_FILES:
        return None
    if path in _LAB_FILES or parts[1:2] == ["integration"] or len(parts) == 2:
        return "lab"
    if parts[1:2] in (["analysis"], ["node"]):
        return "analysis"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test with a lab marker must be in a lab share; the files of `_ALONE_FILES` come first in theirs."""
    stray = sorted({it.nodeid.split("::", 1)[0] for it in items if share_of(it.nodeid) not in ("lab", "lab-beside")
                    and any(it.get_closest_marker(m) is not None for m in _LAB_MARKERS)})
    if stray:
        raise pytest.UsageError(f"tests/conftest.py: add {stray} to _LAB_FILES (they hold tests with a lab marker)")
    items.sort(key=_run_order)


# the collection's order, which is the order the scheduler hands out its scopes (`Shares`): the lab (its
# `_ALONE_FILES` first), the analysis, the pure tests, then `lab-beside`, so that the worker that ends the analysis
# runs the pure tests while the alone batch holds the lab lock, instead of waiting for it
_SHARE_ORDER = {"lab": 0, "analysis": 1, None: 2, "lab-beside": 3}


def _run_order(item: pytest.Item) -> tuple[int, bool]:
    share = share_of(item.nodeid)
    return _SHARE_ORDER[share], share == "lab" and item.nodeid.split("::", 1)[0] not in _ALONE_FILES


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """xdist's loadscope scheduler over the shares: `lab`, `analysis` and `lab-beside` are one scope each, every
    other test its own, handed out in collection order (`_run_order`), not largest first: each worker starts one of
    the first two, and a worker takes the next scope when it has at most two tests left."""
    from xdist.scheduler import LoadScopeScheduling

    class Shares(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return share_of(nodeid) or nodeid

    config.option.loadscopereorder = False
    return Shares(config, log)


@contextlib.contextmanager
def _flock(path: Path, mode: int):
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, mode)
        yield fd
    finally:
        os.close(fd)          # closing releases the lock


class _LabLock:
    """A readers-writer lock between the xdist workers (files in the session's shared temporary directory): a lab
    module of `_ALONE_FILES` holds it exclusively, any other lab module shared. Taken at a module's first test and
    released after its last, so module-scoped labs are covered. The turnstile (taken by everyone before the lock
    itself, and held by an exclusive taker until it has it) keeps shared takers from overtaking a waiting exclusive
    one."""

    def __init__(self, root: Path):
        self.turnstile, self.lock = root / "lab.turnstile", root / "lab.lock"
        self.fd: int | None = None
        self.module: str | None = None

    def enter(self, module: str, exclusive: bool) -> None:
        if self.module == module:
            return
        self.leave()
        with _flock(self.turnstile, fcntl.LOCK_EX):
            fd = os.open(self.lock, os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        self.fd, self.module = fd, module

    def leave(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
        self.fd = self.module = None


def _holder(item: pytest.Item) -> str:
    """Who holds the lab lock for `item`: its module, or `alone` for every module of `_ALONE_FILES` (they come one
    after another and keep it from the first to the last: no other lab slips in between)."""
    path = item.nodeid.split("::", 1)[0]
    return "alone" if path in _ALONE_FILES else path


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """Under xdist, a lab test runs holding `_LabLock` (see the module's docstring)."""
    share = share_of(item.nodeid)
    lock: _LabLock | None = getattr(item.config, "_lab_lock", None)
    if lock is None and hasattr(item.config, "workerinput") and share in ("lab", "lab-beside"):
        root = item.config._tmp_path_factory.getbasetemp().parent      # shared by the workers of this session
        lock = item.config._lab_lock = _LabLock(root)
    holder = _holder(item)
    if lock is not None and share in ("lab", "lab-beside"):
        lock.enter(holder, exclusive=holder == "alone")
    elif lock is not None:
        lock.leave()
    start = time.time()
    yield
    if lock is not None and (nextitem is None or _holder(nextitem) != holder):
        lock.leave()
    if os.environ.get("TEST_TIMELINE"):       # worker, start, end, test: which share ends the run, and when
        worker = getattr(item.config, "workerinput", {}).get("workerid", "main")
        with open(os.environ["TEST_TIMELINE"], "a") as f:
            f.write(f"{worker} {start:.1f} {time.time():.1f} {share} {item.nodeid}\n")


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
