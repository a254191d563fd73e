"""Spark analysis of run directories: pcaps and event logs → Parquet tables → GSGC metrics → reports.

Entry points: `python -m analysis RUN_DIR...` (`analysis.cli.main`) and `analysis.cli.analyze(run_dirs, master,
out)`. See the Analysis section of README.md.
"""
