"""How often an asyncio timer can fire (docs/qsm.md, "Sender credits"): a callback rescheduled every 1/RATE s
for 1 s, late fires skipping to the next interval (what QSM's sender did before its credits), against the rate it
asked for. The node runtime's event loop is asyncio's: its epoll waits in whole milliseconds (rounded up), so a
timer due in 0.3 ms fires after 1 ms. The floor measured in the same run: the rate asked for.

    python benchmarks/bench_timer_floor.py [RATE ...]
"""
from __future__ import annotations

import asyncio
import sys


async def wakeups(rate: float, seconds: float = 1.0) -> int:
    loop = asyncio.get_running_loop()
    n, due = 0, loop.time()
    end = due + seconds
    done = loop.create_future()

    def fire() -> None:
        nonlocal n, due
        n += 1
        now = loop.time()
        due += 1 / rate
        if due <= now:
            due = now + 1 / rate
        if now < end:
            loop.call_at(due, fire)
        else:
            done.set_result(None)
    loop.call_at(due, fire)
    await done
    return n


def main(argv: list[str]) -> int:
    print(f"{'asked (/s)':>10} {'fired (/s)':>10}  ({type(asyncio.new_event_loop()._selector).__name__})")
    for rate in [float(x) for x in argv] or [100.0, 500.0, 1000.0, 3000.0, 10000.0]:
        print(f"{rate:10.0f} {asyncio.run(wakeups(rate)):10d}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
