"""`orchestrator analyze` / `python -m analysis` exit codes without starting Spark: bad input is 2, as everywhere."""
from analysis.cli import main


def test_no_run_directory_is_bad_input(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    assert "manifest.json: file not found" in capsys.readouterr().err
