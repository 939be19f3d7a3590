"""SIGTERM/SIGINT handling: the first signal drains, a second stops at once."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Iterable

from .member import Drained, Member

log = logging.getLogger("distributor_member")

DEFAULT_SIGNALS = (signal.SIGTERM, signal.SIGINT)


async def run_until_signal(member: Member, signals: Iterable[signal.Signals] = DEFAULT_SIGNALS) -> Drained:
    """Runs a started member until one of ``signals`` (default SIGTERM and
    SIGINT) arrives, then drains it (:meth:`Member.drain`: the holder moves
    every unit away, bounded by the drain timeout); a second signal stops it
    at once (:meth:`Member.shutdown`: every unit stopped, then
    deregistered). Returns how the member ended (also when it ended on its
    own). Must run in the main thread's event loop."""
    loop = asyncio.get_running_loop()
    signals = tuple(signals)
    received = 0

    def on_signal(sig: signal.Signals) -> None:
        nonlocal received
        received += 1
        if received == 1:
            log.info("%s: draining (a second signal stops at once)", sig.name.lower(), extra={"member": member.id})
            loop.create_task(member.drain())
        else:
            log.info("%s again: stopping now", sig.name.lower(), extra={"member": member.id})
            loop.create_task(member.shutdown())

    for s in signals:
        loop.add_signal_handler(s, on_signal, s)
    try:
        return await member.wait_closed()
    finally:
        for s in signals:
            loop.remove_signal_handler(s)
