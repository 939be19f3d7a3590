"""A blocking wrapper of :class:`~distributor_member.Member` for applications
without asyncio: the members' event loop runs in a thread of its own (one for
every SyncMember of the process), and the
callbacks are plain functions run in a thread pool (one call per unit at a
time; different units concurrently)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import signal
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from .member import Drained, Hold, Member, MemberError, Reason
from .options import MemberOptions

T = TypeVar("T")

_shared: asyncio.AbstractEventLoop | None = None
_shared_lock = threading.Lock()


def _loop() -> asyncio.AbstractEventLoop:
    """The event loop of every SyncMember in this process, in a daemon thread
    of its own (grpc.aio is safest with one loop at a time)."""
    global _shared
    with _shared_lock:
        if _shared is None or _shared.is_closed():
            loop = asyncio.new_event_loop()

            def run() -> None:
                asyncio.set_event_loop(loop)
                loop.run_forever()

            threading.Thread(target=run, name="distributor-member-loop", daemon=True).start()
            _shared = loop
        return _shared

SyncAcquired = Callable[[Hold], None]
SyncRevoked = Callable[[Hold, Reason], None]


class SyncMember:
    """``with SyncMember(options, acquired=start, revoked=stop) as m: ...``.

    ``acquired(hold)`` and ``revoked(hold, reason)`` run in a thread pool of
    ``max_workers`` threads: ``revoked`` must return once the unit's work has
    stopped completely (if it raises, the unit counts as stopped only once
    its hold has ended: see :class:`Member`). :class:`Hold` is thread-safe: check it before every
    side effect (``hold.check()``), or wait on ``hold.wait_ended_sync()``.
    Leaving the ``with`` block shuts the member down; call :meth:`drain`
    first to hand the units over."""

    def __init__(
        self,
        options: MemberOptions,
        *,
        acquired: SyncAcquired | None = None,
        revoked: SyncRevoked | None = None,
        max_workers: int = 32,
    ) -> None:
        options.validate()
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=max_workers,
                                                           thread_name_prefix="distributor-member-unit")
        self._loop = _loop()
        acq, rev = acquired, revoked

        async def on_acquired(hold: Hold) -> None:
            assert acq is not None
            await self._loop.run_in_executor(self._pool, acq, hold)

        async def on_revoked(hold: Hold, reason: Reason) -> None:
            assert rev is not None
            await self._loop.run_in_executor(self._pool, rev, hold, reason)

        self.member = Member(options, acquired=on_acquired if acq else None, revoked=on_revoked if rev else None)

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def start(self) -> None:
        """Binds the ping server and starts following the table (in the background)."""
        try:
            self._call(self.member.start())
        except BaseException:
            self._stop_loop()
            raise

    def __enter__(self) -> SyncMember:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.member.closed:
            self.shutdown()
        self._stop_loop()

    @property
    def id(self) -> str:
        return self.member.id

    def wait_ready(self, timeout: float | None = None) -> None:
        """Waits until registered and the first read processed; see :meth:`Member.ready`."""
        self._call(self.member.ready(timeout))

    def holds(self, unit: str) -> Hold | None:
        return self.member.holds(unit)

    def owned(self) -> list[Hold]:
        return self.member.owned()

    def routed_current(self, unit: str, routed_by: int) -> bool:
        return self.member.routed_current(unit, routed_by)

    def set_weight(self, weight: int) -> None:
        async def set_it() -> None:
            self.member.set_weight(weight)

        self._call(set_it())

    def report_load(self, unit: str, value: float) -> bool:
        return self.member.report_load(unit, value)

    def drain(self, timeout: float | None = None) -> Drained:
        """Hands every unit over, then deregisters (see :meth:`Member.drain`)."""
        return self._call(self.member.drain(), timeout)

    def shutdown(self, timeout: float | None = None) -> Drained:
        """Stops every unit, then deregisters (see :meth:`Member.shutdown`)."""
        return self._call(self.member.shutdown(), timeout)

    def wait_closed(self, timeout: float | None = None) -> Drained:
        return self._call(self.member.wait_closed(), timeout)

    def run_until_signal(self) -> Drained:
        """Blocks the calling (main) thread until SIGTERM or SIGINT, then
        drains; a second signal stops at once. Returns how the member ended."""
        if threading.current_thread() is not threading.main_thread():
            raise MemberError("run_until_signal must be called from the main thread")
        received = []

        def on_signal(signum: int, _frame: object) -> None:
            received.append(signum)
            coro = self.member.drain() if len(received) == 1 else self.member.shutdown()
            asyncio.run_coroutine_threadsafe(coro, self._loop)

        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            future = asyncio.run_coroutine_threadsafe(self.member.wait_closed(), self._loop)
            while True:
                try:
                    return future.result(0.2)
                except concurrent.futures.TimeoutError:
                    continue
        finally:
            for s, h in previous.items():
                signal.signal(s, h)

    def _stop_loop(self) -> None:
        self._pool.shutdown(wait=False)
