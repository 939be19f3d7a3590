"""Leaving: deregistering, then closing (the member's other tasks, the ping
server, the Redis clients) and resolving ``done``.

Every step is bounded in time (:data:`LEAVE_BOUND` each, :data:`CLOSE_BOUND`
for the tasks to end), and a step that fails or hangs is logged and passed
over, so the member always gets to resolve ``done``, emit :class:`Left` and
end every event stream, once: even when it is cancelled meanwhile, and even
when its follower task ended without closing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any

from redis.exceptions import RedisError

from ._clock import monotonic
from ._events import Left
from ._state import MemberState, Phase

log = logging.getLogger("distributor_member")

#: The longest a deregistration may take when leaving.
LEAVE_BOUND = 3.0
#: The longest the member's other tasks may take to end once cancelled when it closes.
CLOSE_BOUND = 5.0
#: How long the ping server lets the calls in flight finish when the member
#: closes, before it cancels them (the holder's and the standbys' open beat
#: streams included, which would otherwise last the whole grace).
SERVER_STOP_GRACE = 0.01


class Leaving(MemberState):
    """How the member leaves and closes."""

    async def _leave(self) -> None:
        """Deregisters: ``LREM`` from the list, then ``HDEL`` of the report, the statement (``{T}:held``) and the loads."""
        assert self._clients is not None
        for t in self._tasks:
            if t.get_name() == "distributor-member-loads":
                t.cancel()
        main = self._clients.main

        async def deregister() -> None:
            await main.execute_command("LREM", self.options.services_key, 0, self._id)
            await main.execute_command("HDEL", self._keys.members, self._id)
            await main.execute_command("HDEL", self._keys.held, self._id)
            await main.execute_command("HDEL", self._keys.loads, self._id)

        try:
            await asyncio.wait_for(deregister(), LEAVE_BOUND)
            log.info("deregistered from %s", self.options.services_key, extra={"member": self._id})
        except (RedisError, OSError, asyncio.TimeoutError) as e:
            log.warning("could not deregister (%s); the distributor will see this member fail", type(e).__name__,
                        extra={"member": self._id})

    async def _close(self, error: BaseException | None) -> None:
        """Stops the other tasks, the ping server and the clients, then
        resolves ``done``: always, even if this is cancelled or a step fails."""
        self._phase = Phase.LEAVING
        current = asyncio.current_task()
        others = [t for t in self._tasks if t is not current]
        try:
            for t in others:
                t.cancel()
            if self._server is not None:
                # A tiny grace (a ping being answered gets its answer), not a
                # longer one: the member closes once it has deregistered (or
                # tried) and every hold has ended, so nothing it still serves
                # matters. A refused connection from now on is the truth
                # (nothing works on this member's units any more), and a grace
                # would only hold the process up for as long as the holder's
                # or a standby's beat stream stays open: all of it.
                await self._bounded(self._server.stop(SERVER_STOP_GRACE), "stop the ping server")
            if self._clients is not None:
                await self._bounded(self._clients.aclose(), "close the redis clients")
            # Wait for the other tasks to end, cancelling again whichever still
            # runs: a cancellation can be swallowed (asyncio.wait_for before
            # Python 3.12, a library), and awaiting such a task would never end.
            pending = set(others)
            give_up = monotonic() + CLOSE_BOUND
            while pending:
                _, pending = await asyncio.wait(pending, timeout=0.1)
                if not pending:
                    break
                if monotonic() >= give_up:
                    log.error("tasks still running %.0f s after they were cancelled, left behind: %s", CLOSE_BOUND,
                              ", ".join(t.get_name() for t in pending), extra={"member": self._id})
                    break
                for t in pending:
                    t.cancel()
        finally:
            self._finish(others)

    async def _bounded(self, step: Awaitable[Any], what: str) -> None:
        """One step of closing, at most LEAVE_BOUND long; a failure is only logged."""
        task = asyncio.ensure_future(step)
        try:
            await asyncio.wait({task}, timeout=LEAVE_BOUND)
        finally:
            if not task.done():
                task.cancel()
        if not task.done():
            log.warning("could not %s within %.0f s", what, LEAVE_BOUND, extra={"member": self._id})
        elif not task.cancelled() and task.exception() is not None:
            log.warning("could not %s: %r", what, task.exception(), extra={"member": self._id})

    def _finish(self, tasks: list[asyncio.Task[Any]]) -> None:
        """Resolves ``done`` (once): says so, emits :class:`Left` and ends every event stream."""
        for t in tasks:
            if t.done() and not t.cancelled() and t.exception() is not None:
                log.debug("the task %s had failed: %r", t.get_name(), t.exception(), extra={"member": self._id})
        if self._done is None or self._done.done():
            return
        self._phase = Phase.LEAVING
        ending = self._ending
        log.info("left (%s)", ending.value, extra={"member": self._id})
        self._emit(Left(ending, monotonic()))
        for s in list(self._streams):
            s.close()
        self._done.set_result(ending)

    def _end_holds(self) -> None:
        """Ends every hold at once, without running the revocation callbacks
        (the member's task was cancelled: nothing would wait for them)."""
        with self._lock:
            self._own.stop(monotonic())
        for hold in self._holds.values():
            hold._end()

    def _follow_ended(self, task: asyncio.Task[None]) -> None:
        """The follower's task ended: if it did not get to resolve ``done``
        (cancelled before it first ran, say), stop the other tasks and resolve
        it here, so that nothing waits on the member forever."""
        if self._done is None or self._done.done():
            return
        why = "cancelled" if task.cancelled() else repr(task.exception())
        log.warning("the member's task ended before it closed (%s): stopping", why, extra={"member": self._id})
        self._end_holds()
        others = [t for t in self._tasks if t is not task]
        for t in others:
            t.cancel()
        if self._server is not None and self._loop is not None and not self._loop.is_closed():
            stop = self._loop.create_task(self._server.stop(0), name="distributor-member-server-stop")
            stop.add_done_callback(lambda t: t.cancelled() or t.exception())
        self._finish(others)
