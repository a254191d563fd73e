"""analysis.netem_compare's table (pure): agreement is overlapping 95 % intervals, excluded runs are listed."""
from __future__ import annotations

from analysis.netem_compare import compare_table, isolation_table, overlap, side


def rows(shaper, values, exp="pbcast-small", dilation=None, **extra):
    n = dilation if dilation is not None else 5 if shaper == "netem" else 1
    return [{"experiment": exp, "shaper": shaper, "protocol": "pbcast", "point": f"p{i}", "excluded": "",
             "delivered_to_all_fraction": v, "dilation": n, "verdict": "faithful", **extra}
            for i, v in enumerate(values)]


def test_overlap_by_hand():
    assert overlap(1.0, 0.1, 1.15, 0.1) is True        # [0.9, 1.1] and [1.05, 1.25]
    assert overlap(1.0, 0.1, 1.25, 0.1) is False       # [0.9, 1.1] and [1.15, 1.35]
    assert overlap(1.0, None, 1.0, 0.1) is None


def test_table_verdicts_and_excluded_runs():
    same = rows("netem", [0.98, 0.99, 1.0]) + rows("delayline", [0.99, 1.0, 0.98])
    apart = rows("netem", [0.5, 0.51, 0.52], exp="x") + rows("delayline", [0.9, 0.91, 0.92], exp="x")
    gone = [{**rows("netem", [None], exp="x")[0], "point": "p9", "excluded": "not completed (failed: boom)"}]
    t = compare_table(same + apart + gone)
    line = next(x for x in t.splitlines() if x.startswith("| pbcast-small | delivered_to_all_fraction"))
    assert line.endswith("| yes |") and "(3)" in line
    line = next(x for x in t.splitlines() if x.startswith("| x | delivered_to_all_fraction"))
    assert line.endswith("| **no** |")
    assert "1 of 2 metrics agree" in t
    assert "- x (netem), p9: not completed (failed: boom)" in t
    assert "- pbcast-small, netem: 3 runs at dilation 5, 3 faithful" in t
    assert "- pbcast-small, delayline: 3 runs at dilation 1, 3 faithful" in t


def test_isolation_table_names_the_cause():
    """The chain netem (VM, N = 5) -> delay line in the VM (N = 5) -> on the host (N = 5) -> on the host (N = 1):
    the one step whose sides disagree is the cause. The main table ignores the isolating runs."""
    vm, host = {"kernel": "6.1-vm"}, {"kernel": "6.18-host"}

    def four(exp, netem, dl_vm, dl5, dl1):
        return (rows("netem", netem, exp=exp, **vm) + rows("delayline", dl_vm, exp=exp, dilation=5, **vm)
                + rows("delayline", dl5, exp=exp, dilation=5, **host) + rows("delayline", dl1, exp=exp, **host))

    lo, hi = [0.5, 0.51, 0.52], [0.9, 0.91, 0.92]
    shaper = four("s", lo, hi, hi, hi)
    machine = four("m", lo, lo, hi, hi)
    dilation = four("d", lo, lo, lo, hi)
    drift = four("x", [0.5, 0.51, 0.52], [0.52, 0.53, 0.54], [0.54, 0.55, 0.56], [0.56, 0.57, 0.58])
    # the machine moves it past the whole difference, the dilation a little back: the machine, offset
    offset = four("o", [0.5, 0.51, 0.52], [0.49, 0.5, 0.51], [0.95, 0.96, 0.97], [0.9, 0.91, 0.92])
    allrows = shaper + machine + dilation + drift + offset
    assert [side(r, {"6.1-vm"}) for r in shaper[::3]] == ["netem", "delayline@5 (VM)", "delayline@5", "delayline"]
    t = compare_table(allrows)
    main = t.split("The main table's two sides apart")[0]
    line = next(x for x in main.splitlines() if x.startswith("| s | delivered_to_all_fraction"))
    assert "0.510 ± 0.025 (3) | 0.910 ± 0.025 (3) |" in line and line.endswith("| **no** |")
    assert "- s, delayline@5 (VM): 3 runs at dilation 5, 3 faithful" in t
    iso = isolation_table(allrows).splitlines()
    head = next(x for x in iso if x.startswith("| experiment"))
    assert ("netem -> delayline@5 (VM) (shaper) | delayline@5 (VM) -> delayline@5 (machine) | "
            "delayline@5 -> delayline (dilation) |") in head

    def cause(exp):
        return next(x for x in iso if x.startswith(f"| {exp} | delivered_to_all_fraction")).split(" | ")[-1]
    assert cause("s") == "the shaper |"
    assert cause("m") == "the machine |"
    assert cause("d") == "the dilation |"
    assert cause("x") == "not isolated (no single step differs) |"
    assert cause("o") == "the machine (the dilation step goes against it) |"
    assert isolation_table(rows("netem", [1.0]) + rows("delayline", [1.0])) == ""
