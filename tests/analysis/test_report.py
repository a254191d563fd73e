"""The comparison of several runs and the report rendering (no Spark: they work on collected summaries)."""
from __future__ import annotations

import csv

import pytest

from analysis.doc import Bullets, Doc, Figure, Heading, Para, Table, fmt, to_html, to_markdown
from analysis.protocols.gsgc_values import pooled
from analysis.report import comparison_report


def summary(run_id: str, subgroup: int, step_s: float, tprs: list[float], steps: list[int], shaper="netem"):
    return {"run_id": run_id, "members": 200, "subgroup": subgroup, "step_s": step_s, "fail_k": None,
            "shaper": shaper, "tpr_rounds": len(tprs), "tpr_mean_s": sum(tprs) / len(tprs), "tpr_std_s": None,
            "steps_mean": sum(steps) / len(steps), "tts_median_s": None, "gossip_msgs_per_member_s": None,
            "gossip_bytes_per_member_s": None, "fd_latency_median_s": None, "false_declarations": 0,
            "queue_drops": 0, "tpr_values_s": tprs, "steps_values": steps, "warnings": []}


RUNS = [summary("a", 2, 1.0, [2.0, 3.0], [2, 3]), summary("b", 2, 1.0, [2.0, 3.0], [2, 3]),
        summary("c", 2, 2.0, [4.0], [2]), summary("d", 3, 1.0, [1.0, 2.0, 3.0], [1, 2, 3], shaper="tbf")]


def test_rounds_are_pooled_per_group_size_subgroup_and_step():
    got = [(p["subgroup"], p["step_s"], p["runs"], p["rounds"], p["tpr_mean_s"], p["tpr_std_s"], p["steps_mean"])
           for p in pooled(RUNS)]
    # b=2, 1 s: 2, 3, 2, 3 -> mean 2.5, sample std sqrt(4 * 0.25 / 3); b=2, 2 s: one round, no std;
    # b=3, 1 s: 1, 2, 3 -> mean 2, std 1.
    assert got == [(2, 1.0, 2, 4, 2.5, pytest.approx((1 / 3) ** 0.5), 2.5), (2, 2.0, 1, 1, 4.0, None, 2.0),
                   (3, 1.0, 1, 3, 2.0, 1.0, 2.0)]


def test_comparison_report(tmp_path):
    md, page = comparison_report(RUNS, {"runs/x": "runs/x/manifest.json: file not found"}, tmp_path)
    text = md.read_text()
    assert "runs/x: runs/x/manifest.json: file not found" in text
    assert "the runs used different shapers (netem, tbf): their numbers are not comparable" in text
    assert (tmp_path / "figures" / "tpr_vs_step.png").stat().st_size > 0
    assert "data:image/png;base64," in page.read_text()
    with open(tmp_path / "tpr_vs_step.csv") as f:
        assert [(r["subgroup"], r["step_s"], r["rounds"]) for r in csv.DictReader(f)] == [
            ("2", "1.0", "4"), ("2", "2.0", "1"), ("3", "1.0", "3")]
    with open(tmp_path / "comparison.csv") as f:
        assert [r["run_id"] for r in csv.DictReader(f)] == ["a", "b", "c", "d"]


def test_markdown_and_html_say_the_same(tmp_path):
    png = tmp_path / "figures" / "f.png"
    png.parent.mkdir()
    png.write_bytes(b"\x89PNG fake")
    doc = Doc("T", [Heading(1, "Sec"), Para("a `code` and **bold**"), Bullets(["x <y>"], warn=True),
                    Table(["k", "v"], [["a|b", 0.0123], ["n", None]], note="first 1 of 2"), Figure(png, "cap")])
    md = to_markdown(doc, tmp_path)
    assert md.splitlines() == ["# T", "", "## Sec", "", "a `code` and **bold**", "", "- **warning:** x <y>", "",
                               "| k | v |", "|---|---|", "| a\\|b | 0.012 |", "| n | — |", "", "*first 1 of 2*",
                               "", "![cap](figures/f.png)", "", "*cap*"]
    page = to_html(doc)
    assert "<p>a <code>code</code> and <b>bold</b></p>" in page
    assert "<ul class='warn'><li>x &lt;y&gt;</li></ul>" in page
    assert "<td>a|b</td><td>0.012</td>" in page and "<td>—</td>" in page


@pytest.mark.parametrize("value, text", [(None, "—"), (2.0, "2"), (2.3456, "2.346"), (1234.56, "1235"),
                                         (0.00042, "0.00042"), (True, "yes"), ([1, 2.5], "1, 2.5"), ("s", "s")])
def test_cell_format(value, text):
    assert fmt(value) == text


def test_the_reports_host_speed_row_says_what_was_sampled_or_why_not():
    from analysis.report import host_speed_row
    row = host_speed_row({"samples": 12, "memory": 110.4, "memory_min": 88.3, "compute": 1596.0})
    assert "memory 110.4 (min 88.3)" in row and "1596" in row and "12 samples" in row
    assert host_speed_row(None).startswith("not sampled")
