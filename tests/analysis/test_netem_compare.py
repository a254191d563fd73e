"""analysis.netem_compare's table (pure): agreement is overlapping 95 % intervals, excluded runs are listed."""
from __future__ import annotations

from analysis.netem_compare import compare_table, isolation_table, merged, overlap, side


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


def test_a_netem_run_at_another_dilation_starts_its_own_chain():
    """`make repro-netem-isolate NCI_N=10`: netem and the delay line in the VM at N = 10, the delay line here at 10;
    the main table keeps netem at its own dilation (5) and the N = 10 chain names its cause."""
    vm, host = {"kernel": "6.1-vm"}, {"kernel": "6.18-host"}
    lo, hi = [0.5, 0.51, 0.52], [0.9, 0.91, 0.92]
    main = rows("netem", hi) + rows("delayline", hi, **host)
    ten = (rows("netem", lo, dilation=10, **vm) + rows("delayline", lo, dilation=10, **vm)
           + rows("delayline", hi, dilation=10, **host))
    allrows = [{**r, "kernel": "6.1-vm"} for r in main[:3]] + main[3:] + ten
    assert [side(r, {"6.1-vm"}, 5.0) for r in ten[::3]] == ["netem@10", "delayline@10 (VM)", "delayline@10"]
    t = compare_table(allrows)
    line = next(x for x in t.split("At dilation")[0].splitlines()
                if x.startswith("| pbcast-small | delivered_to_all_fraction"))
    assert "0.910 ± 0.025 (3) | 0.910 ± 0.025 (3)" in line and line.endswith("| yes |")
    iso = isolation_table(allrows)
    assert "The main table's two sides apart" not in iso       # no delay line at N = 5: no main chain
    assert iso.count("At dilation 10") == 1
    head = next(x for x in iso.splitlines() if x.startswith("| experiment"))
    assert ("netem@10 -> delayline@10 (VM) (shaper) | delayline@10 (VM) -> delayline@10 (machine) | "
            "delayline@10 -> delayline (dilation) | cause of a netem@10 / delayline disagreement |") in head
    line = next(x for x in iso.splitlines() if x.startswith("| pbcast-small | delivered_to_all_fraction"))
    assert line.endswith("| yes | **no** | yes | the machine |")
    assert "- pbcast-small, netem@10: 3 runs at dilation 10, 3 faithful" in t


def test_merge_keeps_other_sweeps_and_replaces_a_rerun():
    old = [{"shaper": "netem", "experiment": "e", "point": "p0", "dilation": "5.0", "kernel": "k", "v": "1"},
           {"shaper": "delayline", "experiment": "e", "point": "p0", "dilation": "1.0", "kernel": "h", "v": "2"}]
    new = [{"shaper": "delayline", "experiment": "e", "point": "p0", "dilation": 1.0, "kernel": "h", "v": 3},
           {"shaper": "netem", "experiment": "e", "point": "p0", "dilation": 10.0, "kernel": "k", "v": 4}]
    assert merged(old, new) == [old[0], *new]


def test_a_rate_is_not_shown_as_a_time():
    t = isolation_table(rows("netem", [50.0, 50.0], throughput_unperturbed_per_s=50.0, kernel="vm")
                        + rows("delayline", [50.0, 50.0], dilation=5, throughput_unperturbed_per_s=50.0,
                               kernel="host"))
    line = next(x for x in t.splitlines() if "throughput_unperturbed_per_s" in x)
    assert "| 50 ± 0 (2) |" in line and " ms " not in line
