"""Seed 004's (QSM's) numbers from its text and the point of analysis/figures_qsm.py's rows: shared by its tables
(figures_qsm.py) and its figures (figures_qsm_plots.py), neither of which imports the other's module for them."""
from __future__ import annotations

# the point: the experiment's coordinates, and the run's time dilation and CPU budget (figlib's identity columns) so
# that runs with and without budgets are never averaged together
POINT = ("members", "groups", "regions", "n_senders", "R", "loss", "token_s", "shaper", "dilation", "cpu")
# the paper's numbers, read from its text (seed 004 §3.2-3.10); Figure 9's two ends are in the text, the rest of
# its curve and Figures 12, 13, 19, 20 only as plots (not in the seed's text)
# Figure 1's text gives only JGroups' aggregate throughput relative to one group ("decreases ... by 6% with 2
# groups, 20% with 32 groups and almost 60% with 256 groups"; QSM's curve is a plot); Figure 16's: "with 10
# senders it is still at 80% of its original value", and two senders "can actually multicast faster"
PAPER = {"fig9": {1: 9850, 71: 6500}, "fig12_r5_over_r25": 1.2, "recovery_rounds": 2.5,
         "ack_rounds_small": 1.0, "ack_rounds_large": 3.5,
         "fig1_jgroups_relative": {1: 1.0, 2: 0.94, 32: 0.80, 256: 0.40}, "fig16_10_senders_relative": 0.8}


def marginal_ceiling(model: dict, members: int, cores: float = 2.0) -> float | None:
    left = cores - model["fixed_core_per_member"] * members
    return left / (model["cpu_s_per_receipt"] * (members - 1)) if left > 0 and members > 1 else None
