"""The follower: the member's task that makes its Redis calls, one at a
time, and moves it through its phases (following, draining, stopping,
leaving) to its close.

One call at a time, in this order of precedence: a statement a holder's
recovery asks for, then a due report (the statement goes first, so nothing
starts meanwhile; both wait out a failed write's retry delay), then a read,
then a registration, then (draining, once drained) the check that the
holder took every unit over. It never waits on
the application: the handler calls run in tasks of their own. However the
task ends (left, cancelled, or a bug), every hold has ended and the member
closes.
"""

from __future__ import annotations

import asyncio
import logging

from redis.exceptions import RedisError

from ._clock import monotonic, wait_event
from ._edge import RedisEdge
from ._events import Drained
from ._failures import Failures
from ._leaving import Leaving
from ._ownership import Report
from ._redis import refused_command
from ._state import Phase

log = logging.getLogger("distributor_member")


class Follower(RedisEdge, Leaving):
    """The follower task's loop, its choice of the next call, and stopping."""

    def _stop(self, why: str, ending: Drained = Drained.STOPPED) -> None:
        if self._phase in (Phase.STOPPING, Phase.LEAVING):
            return
        log.info(why, extra={"member": self._id})
        with self._lock:
            self._own.stop(monotonic())
        self._phase = Phase.STOPPING
        self._ending = ending
        self._changed()

    async def _follow(self) -> None:
        assert self._wake is not None and self._done is not None
        o = self.options
        next_poll = 0.0
        next_register = 0.0
        reads = Failures("reading the matching table", self._id)
        try:
            while True:
                now = monotonic()
                if self._phase is Phase.DRAINING:
                    if now >= self._drain_until:
                        log.warning("the drain timed out (no holder emptied this member's row); stopping every unit",
                                    extra={"member": self._id})
                        self._stop("stopping after the drain timeout", Drained.TIMED_OUT)
                        continue
                    with self._lock:
                        lost = self._own.fenced and self._own.settled(now)
                    if lost:
                        log.warning("lost contact while draining: every hold has ended, nothing is left to hand "
                                    "over; deregistering", extra={"member": self._id})
                        self._phase = Phase.LEAVING
                        self._ending = Drained.FENCED
                if self._phase is Phase.STOPPING:
                    with self._lock:
                        settled = self._own.settled(now)
                    if settled:
                        self._phase = Phase.LEAVING
                if self._phase is Phase.LEAVING:
                    await self._leave()
                    break
                if self._phase is not Phase.STOPPING:
                    if now >= next_poll:
                        self._want_read = True
                        next_poll = now + o.poll_interval
                    if now >= next_register:
                        self._want_register = True
                        self._want_refresh = True
                        next_register = now + o.reregister_interval
                    if await self._io(now, reads):
                        continue
                wake_at = min(next_poll, next_register)
                if self._phase is Phase.DRAINING:
                    wake_at = min(wake_at, self._drain_until)
                if self._report_wait > now:
                    wake_at = min(wake_at, self._report_wait)
                timeout = max(0.0, min(wake_at - monotonic(), 0.25))
                await wait_event(self._wake, timeout)
                self._wake.clear()
        except asyncio.CancelledError:
            # Cancelled from outside (the loop shutting down, say): still end
            # every hold, stop the other tasks and resolve ``done``.
            self._end_holds()
            await self._close(None)
            raise
        except Exception as e:  # a bug: end every hold rather than run on unchecked
            log.exception("the member's loop failed: every unit is stopped", extra={"member": self._id})
            with self._lock:
                self._own.stop(monotonic())
            self._changed()
            self._ending = Drained.STOPPED
            await self._close(e)
            return
        await self._close(None)

    async def _io(self, now: float, reads: Failures) -> bool:
        """Makes the next Redis call wanted now, if any; whether it made one."""
        assert self._clients is not None and self._reader is not None
        if self._report_wait <= now:
            # A holder recovering from lost state asks what this member works
            # on: the statement goes first (nothing starts meanwhile).
            with self._lock:
                held = self._own.held_due(monotonic())
                last = self._own.written
            if held is not None:
                await self._state_held(held, last)
                return True
            with self._lock:
                due = self._own.report_due()
                written = self._own.written
            report: Report | None = due
            announce = True
            if report is None and self._want_refresh and written is not None:
                report, announce = written, False
            if report is not None:
                self._want_refresh = False
                await self._write_report(report, written, announce)
                return True
        if self._want_read:
            self._want_read = False
            await self._read(reads)
            return True
        if self._want_register:
            self._want_register = False
            await self._register()
            return True
        if self._want_transit and self._phase is Phase.DRAINING:
            with self._lock:
                drained = self._own.drained()
            if drained:
                self._want_transit = False
                try:
                    waits = await self._transit_waits()
                except RedisError as e:
                    self._redis_failed(e)
                    if not refused_command(e):
                        log.debug("could not read the units in transit; retrying: %s", e, extra={"member": self._id})
                        return True
                    log.warning("hgetall on the units in transit is not permitted: leaving after the last report "
                                "(the holder may wait this member's deadline for its units)",
                                extra={"member": self._id})
                    waits = False
                except OSError as e:
                    self._redis_failed(e)
                    log.debug("could not read the units in transit; retrying: %s", e, extra={"member": self._id})
                    return True
                if not waits:
                    log.info("drained: the holder moved every unit away; deregistering", extra={"member": self._id})
                    self._phase = Phase.LEAVING
                    self._ending = Drained.HANDED_OVER
                return True
        return False
