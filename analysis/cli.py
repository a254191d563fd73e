"""`python -m analysis RUN_DIR... [--master local[*]|spark://...] [--out DIR]`

Analyses each run directory (Parquet tables, metrics, `report.md` / `report.html` in the run directory). With
several run directories, or with `--out`, also writes a comparison report to `--out` (default `./comparison/`).
Problems with single files are warnings (stderr and the report); a directory that is not a run directory is an
error for that run, and the others are still analysed. Exit status: 0; 2 if no argument is a run directory (bad input,
as everywhere else); 1 if some run could not be analysed.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import SparkSession

from analysis import progress, report
from analysis.progress import AnalysisProgress
from analysis.rundir import AnalysisError, load
from analysis.run import analyze_run
from analysis.session import get_spark

DEFAULT_COMPARISON = Path("comparison")


class NoRunDirectory(AnalysisError):
    """None of the arguments is a run directory: bad input (exit 2)."""


@dataclass
class Outcome:
    report_dir: Path
    summaries: list[dict] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # run directory → why it could not be analysed


def run_analysis(run_dirs: list[Path], master: str = "local[*]", out: Path | None = None,
                 quiet: bool = False) -> Outcome:
    """Analyse the runs in one Spark application: the active SparkSession if there is one (left running), else
    a new one on `master`, stopped at the end. Raises AnalysisError if no run could be analysed. A progress
    display per run and stage goes to stderr when it is a terminal and not `quiet` (analysis.progress)."""
    if not run_dirs:
        raise NoRunDirectory("no run directory given")
    compare = len(run_dirs) > 1 or out is not None
    outcome = Outcome(report_dir=(out or DEFAULT_COMPARISON) if compare else Path(run_dirs[0]))
    runs = []
    for d in map(Path, run_dirs):
        try:
            runs.append(load(d))
        except AnalysisError as exc:
            outcome.failed[str(d)] = str(exc)
            print(f"error: {exc}", file=sys.stderr)
    if not runs:
        raise NoRunDirectory("no run could be analysed: " + "; ".join(outcome.failed.values()))
    active = SparkSession.getActiveSession()
    spark = active or get_spark(master)
    try:
        with AnalysisProgress(progress.wanted(quiet), spark.sparkContext) as shown:
            for run in runs:
                shown.start_run(run.run_id)
                res = analyze_run(spark, run, shown.stage)
                shown.stage("report")
                md, _ = report.run_report(res)
                shown.end_run()
                for w in res.warnings:
                    print(f"warning: {run.run_id}: {w}", file=sys.stderr)
                print(f"{run.run_id}: {md.with_suffix('.html')}")
                outcome.summaries.append(res.summary)
    finally:
        if active is None:
            spark.stop()
    if compare:
        md, _ = report.comparison_report(outcome.summaries, outcome.failed, outcome.report_dir)
        print(f"comparison: {md.with_suffix('.html')}")
    return outcome


def analyze(run_dirs: list[Path], master: str = "local[*]", out: Path | None = None, quiet: bool = False) -> Path:
    """The API `orchestrator analyze` calls: analyse the runs and return the directory holding the report (the
    run directory for one run without `out`; else `out`, default ./comparison)."""
    return run_analysis(run_dirs, master, out, quiet).report_dir


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m analysis", description=__doc__.split("\n\n")[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR")
    p.add_argument("--master", default="local[*]", help="Spark master (default: local[*]; spark://host:7077, yarn)")
    p.add_argument("--out", type=Path, default=None,
                   help=f"comparison report directory (default with several runs: ./{DEFAULT_COMPARISON}/)")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no progress display (it is shown only when stderr is a terminal anyway)")
    args = p.parse_args(argv)
    try:
        outcome = run_analysis(args.run_dirs, args.master, args.out, args.quiet)
    except AnalysisError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, NoRunDirectory) else 1
    return 1 if outcome.failed else 0
