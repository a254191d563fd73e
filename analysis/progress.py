"""The progress display of `analyze` (rich, on stderr): per run, the stage it is in (decode the pcaps, read the
event logs, the generic metrics, the plug-in's metrics, the report) with a bar over the stages, the Spark tasks
of the stage (completed / total over Spark's active stages, polled from the status tracker), and a line per
finished stage with its duration ("<run>: decode pcaps 12.3 s").

Shown only when stderr is a terminal and not asked to be quiet; otherwise every call does nothing, so the
analysis calls it unconditionally. Spark's own console progress bar stays off (analysis.session): it interleaves
with the log lines and knows nothing of the analysis' stages.
"""
from __future__ import annotations

import sys
import threading
import time
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

if TYPE_CHECKING:
    from pyspark import SparkContext

# The stages of one run, in order (analysis.run.analyze_run and analysis.cli call `stage` with these).
STAGES = ("decode pcaps", "read event logs", "generic metrics", "protocol metrics", "report")
POLL_S = 0.5


def wanted(quiet: bool = False, stream=None) -> bool:
    """Show progress: not quiet, and the stream (stderr) is a terminal."""
    stream = stream if stream is not None else sys.stderr
    return not quiet and bool(getattr(stream, "isatty", lambda: False)())


class AnalysisProgress:
    """`with AnalysisProgress(enabled, sc) as p: p.start_run(name); p.stage("decode pcaps"); ...; p.end_run()`."""

    def __init__(self, enabled: bool, sc: SparkContext | None = None, console: Console | None = None) -> None:
        self.enabled = enabled
        self.sc = sc
        self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                  TimeElapsedColumn(), console=console or Console(stderr=True),
                                  disable=not enabled, transient=False)
        self._run = None
        self._tasks = None
        self._name = ""
        self._current: tuple[str, float] | None = None   # the current stage and when it started
        self._stop = threading.Event()
        self._poller: threading.Thread | None = None

    def __enter__(self) -> AnalysisProgress:
        if self.enabled:
            self._progress.start()
            if self.sc is not None:
                self._tasks = self._progress.add_task("spark tasks", total=None)
                self._poller = threading.Thread(target=self._poll, name="analysis-progress", daemon=True)
                self._poller.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            self._stop.set()
            if self._poller is not None:
                self._poller.join()
            if self._tasks is not None:
                self._progress.remove_task(self._tasks)
            self._progress.stop()

    def start_run(self, name: str) -> None:
        if not self.enabled:
            return
        self._name = name
        self._current = None
        self._run = self._progress.add_task(f"{name}: starting", total=len(STAGES))

    def stage(self, name: str) -> None:
        """Enter a stage of the current run (one of STAGES): the previous ones are done."""
        if not self.enabled or self._run is None:
            return
        self._finish_stage()
        self._current = (name, time.monotonic())
        done = STAGES.index(name) if name in STAGES else 0
        self._progress.update(self._run, completed=done, description=f"{self._name}: {name}")

    def _finish_stage(self) -> None:
        """A line that stays above the bars: the stage that ended and how long it took."""
        if self._current is not None:
            name, t = self._current
            self._progress.console.print(f"{self._name}: {name} {time.monotonic() - t:.1f} s", highlight=False,
                                         markup=False)
            self._current = None

    def end_run(self, ok: bool = True) -> None:
        if not self.enabled or self._run is None:
            return
        self._finish_stage()
        self._progress.update(self._run, completed=len(STAGES),
                              description=f"{self._name}: {'done' if ok else 'failed'}")
        self._run = None

    def _poll(self) -> None:
        tracker = self.sc.statusTracker()
        while not self._stop.wait(POLL_S):
            try:
                infos = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
            except Exception:  # noqa: BLE001 — the context is stopping: the display is not worth an error
                return
            infos = [i for i in infos if i is not None]
            total = sum(i.numTasks for i in infos)
            done = sum(i.numCompletedTasks for i in infos)
            if self._tasks is not None:
                self._progress.update(self._tasks, total=total or None, completed=done,
                                      description=f"spark tasks ({len(infos)} active stage(s))")
