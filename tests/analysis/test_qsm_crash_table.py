"""experiments/qsm_crash_table.py's per-run numbers on a hand-made event log (every expected value worked out in
the comments)."""
from __future__ import annotations

import pytest

from analysis.figlib import Exclude
from experiments.qsm_crash_table import crash_values


def e(node, event, ts, **f):
    return {"node": node, "event": event, "ts": ts, **f}


def test_crash_values_by_hand():
    # 2 first region views (0, 1); h1 crashes at 6.0 s (actual 6.01), the view is applied at 7.03 (lag 1.02 s);
    # h0 and h2 install it at 107.10 and 107.13 (spread 30 ms); h2 recovers a packet of view 1 after it (counted)
    # and one before it (not); one receipt in new view 2; h0 ends old view 0; h2 still caches, h0 still buffers;
    # h0 logged one packet twice
    ev = [e("orchestrator", "action_applied", 106.01, op="crash", targets=["h1"], actual_s=6.01),
          e("orchestrator", "action_applied", 107.03, op="gms_view", targets=["h1"], actual_s=7.03),
          e("h0", "gms_view", 107.10, view=1), e("h2", "gms_view", 107.13, view=1),
          e("h2", "recovered", 106.5, region_index=1), e("h2", "recovered", 107.5, region_index=1),
          e("h2", "data_received", 107.6, origin=0, seq=9, region_index=2),
          e("h0", "data_received", 105.0, origin=2, seq=1, region_index=0),
          e("h0", "data_received", 105.2, origin=2, seq=1, region_index=0),
          e("h0", "view_retired", 110.0, region_index=0),
          e("h0", "node_stopped", 120.0, protocol={"cached": {"2": 0}, "sender": {"buffered": {"r-a#0": 3}}}),
          e("h1", "node_stopped", 120.0, protocol={"cached": {"2": 5}}),     # crashed: not counted
          e("h2", "node_stopped", 120.0, protocol={"cached": {"0": 1}})]
    v = crash_values(ev, first_regions=2)
    assert v == {"duplicates": 1, "view_lag_s": pytest.approx(1.02), "installed": 2,
                 "install_spread_ms": pytest.approx(30.0), "old_recovered_after_view": 1, "new_view_receipts": 1,
                 "old_views_retired": 1, "left_cached": 1, "left_buffered": 1}


def test_a_run_without_the_view_is_excluded_with_the_reason():
    with pytest.raises(Exclude, match="no view after it"):
        crash_values([e("orchestrator", "action_applied", 1.0, op="crash", targets=["h1"], actual_s=1.0)], 2)
