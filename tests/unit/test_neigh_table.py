"""The kernel's ARP table is one for all namespaces: `up` raises its limits with the namespace count (pure part)."""
from orchestrator.backends.netns import neigh_thresholds


def test_defaults_grow_with_the_namespaces():
    assert neigh_thresholds(0, (128, 512, 1024)) == (128, 512, 1024)
    # 2 500 namespaces (gsgc-scale.yaml): ~2 entries a link end; room for 4 a namespace above the defaults
    assert neigh_thresholds(2500, (128, 512, 1024)) == (5128, 8012, 11024)


def test_never_lowered_and_ordered():
    assert neigh_thresholds(10, (4096, 8192, 16384)) == (4096, 8192, 16384)
    for n in (0, 1, 100, 10_000):
        t1, t2, t3 = neigh_thresholds(n, (128, 512, 1024))
        assert t1 <= t2 <= t3
