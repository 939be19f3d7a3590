"""The member's clock and its one way of waiting on it.

Every instant the member exposes or compares (hold ends, contact, events) is
on :func:`monotonic`. :func:`wait_event` is the only timed wait of the
member's loops: unlike ``asyncio.wait_for`` it never swallows a
cancellation, so a loop built on it ends when it is cancelled.
"""

from __future__ import annotations

import asyncio
import time


def monotonic() -> float:
    """The member's clock (``time.monotonic``): every instant it exposes is on it."""
    return time.monotonic()


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Waits at most ``timeout`` seconds for ``event``; whether it is set.

    Not ``asyncio.wait_for(event.wait(), timeout)``: before Python 3.12 that
    swallows a cancellation which arrives while the event is being set (the
    inner wait done, ``wait_for`` not resumed yet), and a loop around it then
    runs on after ``cancel()``. ``asyncio.wait`` lets a cancellation through."""
    if event.is_set():
        return True
    waiter = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait({waiter}, timeout=timeout)
    finally:
        waiter.cancel()
    return event.is_set()


def ago(t: float | None, now: float) -> str:
    """How long before ``now`` the instant ``t`` was, for a log line ("never" if it never was)."""
    return "never" if t is None else f"{now - t:.3f} s ago"
