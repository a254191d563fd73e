"""The pbcast family's report figures (analysis/figures.py): drawn from the plug-in's collected rows, without
Spark; a bar per non-empty bin / per member."""
from __future__ import annotations

import matplotlib.pyplot as plt
import pytest

from analysis import figures


def test_delivery_histogram_draws_a_bar_per_non_empty_bin(tmp_path, monkeypatch):
    drawn = {}
    real = figures._save

    def keep(fig, path):
        drawn["bars"] = [(round(p.get_x() + p.get_width() / 2, 2), p.get_height()) for p in fig.axes[0].patches]
        return real(fig, path)

    monkeypatch.setattr(figures, "_save", keep)
    hist = [{"bin": 0.0, "messages": 2}, {"bin": 0.5, "messages": 0}, {"bin": 1.0, "messages": 40}]
    out = figures.delivery_histogram(hist, tmp_path / "h.png")
    assert out.stat().st_size > 0
    assert drawn["bars"] == [(0.05, 2), (1.05, 40)]                 # the empty bin draws nothing


def test_throughput_per_member_colours_and_orders_members(tmp_path, monkeypatch):
    drawn = {}
    real = figures._save

    def keep(fig, path):
        ax = fig.axes[0]
        drawn["labels"] = [t.get_text() for t in ax.get_xticklabels()]
        drawn["colours"] = [p.get_facecolor()[:3] for p in ax.patches]
        drawn["heights"] = [p.get_height() for p in ax.patches]
        return real(fig, path)

    monkeypatch.setattr(figures, "_save", keep)
    rows = [{"node": "h10", "mean_per_s": 48.0, "min_per_s": 40.0, "max_per_s": 52.0},
            {"node": "h2", "mean_per_s": 30.0, "min_per_s": 0.0, "max_per_s": 50.0},
            {"node": "h1", "mean_per_s": None, "min_per_s": None, "max_per_s": None}]
    figures.throughput_per_member(rows, unperturbed=["h10"], perturbed=["h2"], path=tmp_path / "t.png")
    assert drawn["labels"] == ["h1", "h2", "h10"]                      # natural order
    assert drawn["heights"] == [0, 30.0, 48.0]
    c = plt.matplotlib.colors.to_rgb
    assert drawn["colours"] == [pytest.approx(c("C7")), pytest.approx(c("C3")), pytest.approx(c("C0"))]
