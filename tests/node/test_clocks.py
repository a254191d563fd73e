"""The step clock's two readings of the paper's "starting points scattered randomly during the interval of one
step" (GSGC `start_phase`), and its skipping after a stop — hand-worked against the seeded draws."""
from __future__ import annotations

import random

import pytest

from gossipnode.clocks import StepClock


def draws(seed: int, n: int) -> list[float]:
    r = random.Random(seed)
    return [r.random() for _ in range(n)]


def fire(clock: StepClock, n: int) -> list[float]:
    out = []
    for _ in range(n):
        out.append(clock.due)
        assert clock.advance(clock.due) == 0
    return out


def test_per_step_draws_a_new_point_in_every_step():
    u = draws(7, 5)
    c = StepClock(2.0, 100.0, random.Random(7))
    assert fire(c, 5) == pytest.approx([100.0 + 2.0 * (k + u[k]) for k in range(5)])


def test_fixed_phase_keeps_the_first_draw_in_every_step_and_draws_nothing_more():
    rng = random.Random(7)
    u0 = draws(7, 1)[0]
    c = StepClock(2.0, 100.0, rng, fixed_phase=True)
    assert fire(c, 6) == pytest.approx([100.0 + 2.0 * (k + u0) for k in range(6)])
    assert rng.random() == draws(7, 2)[1]        # the member's stream moved by the one phase draw only


def test_both_readings_start_at_the_same_point():
    assert StepClock(0.5, 3.0, random.Random(11)).due == StepClock(0.5, 3.0, random.Random(11), fixed_phase=True).due


def test_a_stopped_member_skips_the_missed_steps_and_keeps_its_phase():
    u0 = draws(3, 1)[0]
    c = StepClock(1.0, 0.0, random.Random(3), fixed_phase=True)
    assert c.due == pytest.approx(u0)
    # the process was stopped: step 0's firing comes 4.7 s late, inside step s = int(u0 + 4.7) (4 or 5); it
    # stands for step 0, steps 1..s are missed, and step s + 1 fires at its fixed phase
    late = u0 + 4.7
    s = int(late)
    assert c.advance(late) == s
    assert c.due == pytest.approx(s + 1 + u0)


def test_gsgc_start_phase_is_checked():
    from pydantic import ValidationError

    from gossipnode.protocols.gsgc.params import GsgcParams

    assert GsgcParams(name="gsgc", subgroup=1, step_s=1.0).start_phase == "per_step"
    assert GsgcParams(name="gsgc", subgroup=1, step_s=1.0, start_phase="fixed").start_phase == "fixed"
    with pytest.raises(ValidationError):
        GsgcParams(name="gsgc", subgroup=1, step_s=1.0, start_phase="random")
