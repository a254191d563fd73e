"""One path for every way a user stops the orchestrator: Ctrl-C (SIGINT), SIGTERM and SIGHUP (a closed terminal
or SSH session) all raise `Interrupted`, so `up` removes what it built and `run` stops, collects, marks the
manifest `interrupted (<signal>)` and tears down. While that cleanup runs, further signals are noted, not raised
(a second Ctrl-C must not leave a half-removed lab)."""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """Raised in the main thread when one of SIGNALS arrives (a KeyboardInterrupt, so Ctrl-C code paths apply)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum

    @property
    def name(self) -> str:
        return "Ctrl-C" if self.signum == signal.SIGINT else signal.Signals(self.signum).name


def describe(exc: BaseException) -> str:
    return exc.name if isinstance(exc, Interrupted) else "Ctrl-C"


def _install(handler) -> dict | None:
    if threading.current_thread() is not threading.main_thread():
        return None                    # signals can only be handled in the main thread
    return {s: signal.signal(s, handler) for s in SIGNALS}


def _restore(old: dict | None) -> None:
    for s, h in (old or {}).items():
        signal.signal(s, h)


@contextmanager
def interrupts():
    """SIGINT, SIGTERM and SIGHUP raise Interrupted inside this block; the previous handlers come back after."""
    def handler(signum, frame):
        raise Interrupted(signum)

    old = _install(handler)
    try:
        yield
    finally:
        _restore(old)


@contextmanager
def shielded():
    """Inside this block those signals are only recorded (the list it yields), never raised."""
    received: list[int] = []
    old = _install(lambda signum, frame: received.append(signum))
    try:
        yield received
    finally:
        _restore(old)
