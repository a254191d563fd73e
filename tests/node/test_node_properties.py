"""Properties over random loss and crash patterns (hypothesis), in the simulated network.

Safety: S never exceeds the R of a live member, so nothing is garbage-collected that a live member has not
received. "Live" means not crashed and never declared failed by anyone: a member that some member declared
failed has left the group in that member's view (the paper's membership semantics), and S may legitimately
pass it. Liveness: with loss below 100 % rounds keep completing.
"""
from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .gsgc_sim import Sim, make_configs

EXAMPLES = int(os.environ.get("GSGC_PROPERTY_EXAMPLES", "40"))  # raise it for a soak run
PROPERTY_SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def local_groups(n: int, controllers: int) -> list[dict]:
    halves = [list(range(n // 2)), list(range(n // 2, n))]
    return [{"members": h, "controllers": h[:controllers]} for h in halves]


class SafetyWatch:
    """Checks the invariant after every simulated action."""

    def __init__(self, sim: Sim) -> None:
        self.declared: set[int] = set()
        self.seen = 0
        self.checks = 0
        sim.observers.append(self)

    def __call__(self, sim: Sim) -> None:
        for node_id, event in sim.events[self.seen:]:
            if event.event == "declared_failed":
                self.declared.add(event.fields["member"])
            elif event.event == "data_skipped":
                assert node_id in self.declared, f"live member {node_id} lost data it never received: {event}"
        self.seen = len(sim.events)
        protected = {j: sim.nodes[j].r_array() for j in sim.live() if j not in self.declared}
        for i, node in sim.nodes.items():
            for j, r in protected.items():
                assert all(s <= x for s, x in zip(node.stability, r)), (
                    f"t={sim.now:.3f}: S at member {i} is {node.stability}, above R {r} of live member {j}"
                )
        self.checks += 1


@PROPERTY_SETTINGS
@given(
    n=st.integers(3, 8),
    b=st.integers(1, 3),
    m=st.integers(1, 3),
    loss=st.floats(0.0, 0.9),
    fail_k=st.integers(4, 10),
    crashes=st.lists(st.tuples(st.integers(0, 7), st.floats(0.0, 30.0)), max_size=3),
    controllers=st.sampled_from([0, 1, 2]),  # 0: global gossip; else local gossip, this many SCs per group
    seed=st.integers(0, 2**16),
)
def test_stability_never_passes_a_live_members_r(n, b, m, loss, fail_k, crashes, controllers, seed):
    groups = local_groups(n, controllers) if controllers and n >= 4 else None
    cfgs = make_configs(n, subgroup=b, fail_k=fail_k, senders=range(m), rate_per_s=3.0, local_groups=groups,
                        seed=seed)
    sim = Sim(cfgs, loss=loss, seed=seed)
    for who, at in crashes:
        sim.crash(who % n, at)
    watch = SafetyWatch(sim)
    sim.run(40.0)
    assert watch.checks > 0
    if loss == 0.0 and not crashes:
        assert sim.of("gc"), "a loss-free, crash-free run must garbage-collect"


@PROPERTY_SETTINGS
@given(
    n=st.integers(3, 8),
    b=st.integers(1, 3),
    loss=st.floats(0.0, 0.9),
    controllers=st.sampled_from([0, 1, 2]),
    seed=st.integers(0, 2**16),
)
def test_rounds_complete_while_loss_is_below_100_percent(n, b, loss, controllers, seed):
    groups = local_groups(n, controllers) if controllers and n >= 4 else None
    cfgs = make_configs(n, subgroup=b, senders=[0], rate_per_s=2.0, stop_s=5.0, local_groups=groups, seed=seed)
    sim = Sim(cfgs, loss=loss, seed=seed)
    level = "sc" if groups else "global"
    deliveries = 1.0 - loss
    deadline = 40.0 + 60.0 / deliveries  # steps of 1 s; about 10 rounds' worth of slack at the loss rate
    t = 0.0
    while t < deadline:
        t += 10.0
        sim.run(t)
        constructed = [e.fields["round"] for _, e in sim.of("round_completed")
                       if e.fields["level"] == level and e.fields["via"] == "constructed"]
        if len(set(constructed)) >= 3 and all(node.main.round >= 2 for node in sim.nodes.values()):
            break
    else:
        raise AssertionError(f"rounds did not complete by {deadline:.0f} s at loss {loss:.2f}: "
                             f"rounds {[node.main.round for node in sim.nodes.values()]}, {level} rounds {constructed}")
