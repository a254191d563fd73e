"""The progress display of `analyze`: a line per run and stage on a terminal; nothing when stderr is not a
terminal or with --quiet. The CLI cases run the command as a user would, in a pseudo-terminal."""
from __future__ import annotations

import io
import os
import pty
import re
import select
import shutil
import subprocess
import sys
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
                try:
                    data = os.read(master, 65536)
                except OSError:       # the child closed the terminal
                    break
                if not data:
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


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_quiet_shows_no_progress_on_a_terminal(run_dir):
    if shutil.which("java") is None:
        pytest.skip("[spark] needs java")
    orch = Path(sys.executable).parent / "orchestrator"
    rc, out = _in_a_terminal([str(orch), "analyze", str(run_dir), "--master", "local[2]", "--quiet"])
    assert rc == 0, out[-2000:]
    assert "spark tasks" not in out and ": decode pcaps" not in out and f"{run_dir.name}: done" not in out
    assert "report.html" in out
