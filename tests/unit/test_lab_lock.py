"""The lab lock of `make test`'s two workers (tests/conftest.py, `_LabLock`): lab modules that share it run
together, an exclusive one runs alone, and a shared taker that comes after a waiting exclusive one waits for it."""
from __future__ import annotations

import threading

from tests.conftest import _LabLock


def _enter_in_thread(lock: _LabLock, module: str, exclusive: bool) -> threading.Thread:
    t = threading.Thread(target=lock.enter, args=(module, exclusive), daemon=True)
    t.start()
    return t


def test_shared_takers_hold_it_together_and_an_exclusive_one_waits_for_them(tmp_path):
    a, b, c = (_LabLock(tmp_path) for _ in range(3))
    a.enter("tests/integration/test_sweep.py", exclusive=False)
    tb = _enter_in_thread(b, "tests/integration/test_docker.py", exclusive=False)
    tb.join(10)
    assert not tb.is_alive()                      # two shared holders at once
    tc = _enter_in_thread(c, "tests/integration/test_delayline.py", exclusive=True)
    tc.join(0.3)
    assert tc.is_alive()                          # waits while either holds it
    a.leave()
    tc.join(0.3)
    assert tc.is_alive()
    b.leave()
    tc.join(10)
    assert not tc.is_alive() and c.module == "tests/integration/test_delayline.py"
    c.leave()


def test_a_shared_taker_does_not_overtake_a_waiting_exclusive_one(tmp_path):
    a, b, c = (_LabLock(tmp_path) for _ in range(3))
    a.enter("m1", exclusive=False)
    tb = _enter_in_thread(b, "m2", exclusive=True)
    tb.join(0.3)
    assert tb.is_alive()
    tc = _enter_in_thread(c, "m3", exclusive=False)
    tc.join(0.3)
    assert tc.is_alive()                          # queued behind the exclusive waiter, though only shared is held
    a.leave()
    tb.join(10)
    assert not tb.is_alive()
    tc.join(0.3)
    assert tc.is_alive()                          # the exclusive holder runs alone
    b.leave()
    tc.join(10)
    assert not tc.is_alive()
    c.leave()


def test_the_same_module_keeps_its_hold_and_a_new_one_takes_it_again(tmp_path):
    a, b = _LabLock(tmp_path), _LabLock(tmp_path)
    a.enter("m1", exclusive=True)
    fd = a.fd
    a.enter("m1", exclusive=True)
    assert a.fd == fd                             # no re-acquisition inside a module
    tb = _enter_in_thread(b, "m2", exclusive=False)
    tb.join(0.3)
    assert tb.is_alive()
    a.enter("m3", exclusive=False)                # the next module: released, then taken shared
    tb.join(10)
    assert not tb.is_alive()
    a.leave()
    b.leave()
    assert a.fd is None and a.module is None

