"""The progress display of `analyze`: a line per run and stage on a terminal; nothing when stderr is not a
terminal or with --quiet. The CLI cases run on a pseudo-terminal: the display case runs the `orchestrator` command
as a user would (a fresh Spark application in its own process); the --quiet case calls the same entry point
(orchestrator.cli.main, which the `orchestrator` script runs) in this process with its stdout and stderr on a
pseudo-terminal, in the session's Spark application -- the display is decided per call from --quiet and whether
stderr is a terminal, not from how Spark was started, and a second fresh Spark application costs minutes here."""
from __future__ import annotations

import io
import os
import pty
import re
import select
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from rich.console import Console

from analysis import progress
from analysis.progress import STAGES, AnalysisProgress

ROOT = Path(__file__).resolve().parents[2]


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_wanted_only_on_a_terminal_and_not_quiet():
    assert progress.wanted(False, _Tty()) and not progress.wanted(True, _Tty())
    assert not progress.wanted(False, io.StringIO())


def test_every_stage_of_every_run_is_shown():
    out = _Tty()
    console = Console(file=out, force_terminal=True, width=120)
    with AnalysisProgress(True, None, console) as p:
        for run in ("run-a", "run-b"):
            p.start_run(run)
            for s in STAGES:
                p.stage(s)
            p.end_run()
    text = out.getvalue()
    assert "run-a: done" in text and "run-b: done" in text and f"{len(STAGES)}/{len(STAGES)}" in text
    for run in ("run-a", "run-b"):
        for s in STAGES:
            assert re.search(rf"{run}: {s} \d+\.\d s", text), (run, s)


def test_disabled_writes_nothing():
    out = _Tty()
    with AnalysisProgress(False, None, Console(file=out, force_terminal=True)) as p:
        p.start_run("run-a")
        p.stage("decode pcaps")
        p.end_run()
    assert out.getvalue() == ""


def _read_pty(master: int) -> bytes | None:
    """The next output on the terminal's master side, or None once every writer has closed it."""
    try:
        data = os.read(master, 65536)
    except OSError:           # the writers closed the terminal
        return None
    return data or None


def _in_a_terminal(argv: list[str], timeout_s: float = 1500) -> tuple[int, str]:
    """Run argv with stdout and stderr on a pseudo-terminal (as in a user's shell); (exit status, output)."""
    master, slave = pty.openpty()
    env = {**os.environ, "COLUMNS": "160", "TERM": "xterm"}
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, cwd=ROOT, env=env)
    os.close(slave)
    chunks = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if ready:
                data = _read_pty(master)
                if data is None:
                    break
                chunks.append(data)
            elif proc.poll() is not None:
                break
        rc = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    return rc, re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode(errors="replace"))  # no colours


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(1800)   # a fresh Spark application: minutes on a loaded 2-core machine
def test_orchestrator_analyze_shows_the_stages_on_a_terminal(run_dir, tmp_path):
    if shutil.which("java") is None:
        pytest.skip("[spark] needs java")
    orch = Path(sys.executable).parent / "orchestrator"
    rc, out = _in_a_terminal([str(orch), "analyze", str(run_dir), "--master", "local[2]"])
    assert rc == 0, out[-2000:]
    for s in STAGES:                        # a line per finished stage, with its duration
        assert re.search(rf"{run_dir.name}: {s} \d+\.\d s", out), (s, out[-3000:])
    assert f"{run_dir.name}: done" in out and "spark tasks" in out
    assert (run_dir / "report.html").exists()


def _in_this_process_on_a_terminal(call) -> tuple[object, str]:
    """Run call() with this process's stdout and stderr (file descriptors 1 and 2, and sys.stdout/sys.stderr) on a
    pseudo-terminal; (what call returned, the terminal's output). The descriptors are restored afterwards."""
    master, slave = pty.openpty()
    chunks: list[bytes] = []

    def read() -> None:
        while (data := _read_pty(master)) is not None:
            chunks.append(data)

    reader = threading.Thread(target=read, name="pty-reader", daemon=True)
    reader.start()
    saved_fds = {fd: os.dup(fd) for fd in (1, 2)}
    saved_streams = sys.stdout, sys.stderr
    try:
        for stream in (*saved_streams, sys.__stdout__, sys.__stderr__):
            stream.flush()
        for fd in (1, 2):
            os.dup2(slave, fd)
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - closed below
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
        try:
            result = call()
        finally:
            sys.stdout.close()   # flushes
            sys.stderr.close()
    finally:
        sys.stdout, sys.stderr = saved_streams
        for fd, saved in saved_fds.items():
            os.dup2(saved, fd)
            os.close(saved)
        os.close(slave)
    reader.join(timeout=60)
    os.close(master)
    return result, re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode(errors="replace"))


@pytest.mark.spark
def test_quiet_shows_no_progress_on_a_terminal(spark, run_dir, monkeypatch):
    from orchestrator import cli

    monkeypatch.setenv("COLUMNS", "160")
    monkeypatch.setenv("TERM", "xterm")
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "argv", ["orchestrator", "analyze", str(run_dir), "--master", "local[2]", "--quiet"])

    def entry_point() -> object:          # what the `orchestrator` script does: sys.exit(main())
        assert progress.wanted(False), "stderr is a terminal here, so only --quiet can hide the display"
        try:
            return cli.main()
        except SystemExit as exc:
            return exc.code

    rc, out = _in_this_process_on_a_terminal(entry_point)
    assert rc == 0, out[-2000:]
    assert "spark tasks" not in out and ": decode pcaps" not in out and f"{run_dir.name}: done" not in out
    assert "report.html" in out
    assert spark.range(3).count() == 3     # the session's application was used and left running
