"""Carrying out what the ownership state asks after each change of it: the
application's handler calls (``acquired``, ``revoked``) and the events that
go with them, and the fence's coming and going.

Every change of the state (a read, a ping, a report, a tick, a stop) is
followed by :meth:`HandlerCalls._changed`, which takes the state's steps and
carries them out. Each unit's callbacks run in a task of their own, so a slow
one delays no read, no ping and no other unit; for one unit, ``revoked``
starts only once ``acquired`` returned. A unit counts as stopped (and the
generation that revoked it can be reported) only once ``revoked`` returned
(at once without one); if it raised or was cancelled, its work may still
run, so the unit counts as stopped only once its hold has ended by itself.
"""

from __future__ import annotations

import asyncio
import logging

from ._clock import ago, monotonic
from ._events import Acquired, Fenced, Released, Revoking, Unfenced
from ._hold import Hold
from ._ownership import Acquire, GaveUp, Overran, Reason, Revoke, Tenure
from ._state import MemberState, Phase

log = logging.getLogger("distributor_member")


class HandlerCalls(MemberState):
    """The steps of the ownership state, carried out: handler-call tasks, events, wakes."""

    def _changed(self, watchdog: bool = False) -> None:
        """Carries out what the state asks (steps), after every change of it."""
        with self._lock:
            steps = self._own.take_steps()
            fenced = self._own.fenced
        now = monotonic()
        for step in steps:
            if isinstance(step, Revoke):
                self._revoke(step, now)
            elif isinstance(step, Acquire):
                self._acquire(step.units, now)
            elif isinstance(step, Overran):
                log.error("a revocation is still running after the hold ended: the next owner may already work "
                          "on %s (make revocations finish within the deadline minus the fence margin)",
                          ",".join(t.unit for t in step.units), extra={"member": self._id})
            elif isinstance(step, GaveUp):
                self._gave_up(step, now)
        if fenced != self._fenced_seen:
            self._fenced_seen = fenced
            if fenced and self._phase in (Phase.FOLLOWING, Phase.DRAINING):
                with self._lock:
                    read, ping = self._own.last_read, self._own.contact_ping
                log.warning("fenced: no successful read of the table or no ping within the deadline; holding "
                            "nothing and answering pings unavailable (last read %s, last ping %s)",
                            ago(read, now), ago(ping, now), extra={"member": self._id})
                self._emit(Fenced(now))
                # Leave the fence quickly: read at once.
                self._want_read = True
            elif not fenced:
                log.info("in contact again: reads and pings within the deadline", extra={"member": self._id})
                self._emit(Unfenced(now))
        if self._wake is not None:
            self._wake.set()
        if not watchdog and self._watch_wake is not None:
            self._watch_wake.set()

    def _revoke(self, step: Revoke, now: float) -> None:
        assert self._loop is not None
        if step.reason is Reason.FENCED:
            log.warning("hold ended (no successful read or no ping within the deadline, or the process was "
                        "paused): revoking %d units at once", len(step.units), extra={"member": self._id})
        for t in step.units:
            hold = self._holds.pop(t.unit, None)
            if hold is None or hold.token != t.token:
                hold = Hold(self, t.unit, t.token)
            hold._end()
            self._emit(Revoking(hold, step.reason, now))
            task = self._loop.create_task(self._stop_unit(hold, step.reason, step.ended))
            self._unit_tasks.add(task)
            task.add_done_callback(self._unit_tasks.discard)

    def _acquire(self, tenures: list[Tenure], now: float) -> None:
        assert self._loop is not None
        log.debug("acquired %d units at generation %d", len(tenures), tenures[0].token, extra={"member": self._id})
        for t in tenures:
            hold = Hold(self, t.unit, t.token)
            self._holds[t.unit] = hold
            self._emit(Acquired(hold, now))
            if self._acquired_cb is not None:
                task = self._loop.create_task(self._start_unit(hold))
                hold._acquiring = task
                self._unit_tasks.add(task)
                task.add_done_callback(self._unit_tasks.discard)

    async def _start_unit(self, hold: Hold) -> None:
        assert self._acquired_cb is not None
        try:
            await self._acquired_cb(hold)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("the acquisition callback of %s failed", hold.unit, extra={"member": self._id})

    async def _stop_unit(self, hold: Hold, reason: Reason, ended: float | None) -> None:
        # For one unit, the revocation starts only once its acquisition returned.
        if hold._acquiring is not None:
            await asyncio.wait({hold._acquiring})
        if self._revoked_cb is not None:
            # In a task of its own, so that a cancellation of the callback
            # (it awaited a task it had cancelled, say) is told apart from one
            # of this task (the loop closing), which goes on to the callback.
            call = asyncio.ensure_future(self._revoked_cb(hold, reason))
            try:
                await asyncio.wait({call})
            except asyncio.CancelledError:
                call.cancel()
                raise
            error = None if call.cancelled() else call.exception()
            if call.cancelled() or error is not None:
                self._stop_failed(hold, reason, error)
                return
        now = monotonic()
        with self._lock:
            s = self._own.stopping.get(hold.unit)
            hold_end = ended if ended is not None else (
                self._own.end_of(s.shown) if s is not None and self._own.last_ping is not None else None)
            late = self._own.revoked(now, [hold.unit])
        for t, by in late:
            log.error("the revocation of %s (token %d) finished %.3f s after its hold had ended: it may have "
                      "overlapped with the next owner", t.unit, t.token, by, extra={"member": self._id})
        is_late = hold_end is not None and now > hold_end
        self._emit(Released(hold, reason, now, hold_end, is_late))
        self._changed()

    def _stop_failed(self, hold: Hold, reason: Reason, error: BaseException | None) -> None:
        """The revocation callback raised ``error`` (``None``: it was
        cancelled): the unit's work may still run, so it counts as stopped
        only once its hold has ended by itself, and the acknowledgement of
        the generation that revoked it waits until then (the holder waits
        out this member's deadline meanwhile)."""
        self._stops_failed += 1
        now = monotonic()
        with self._lock:
            stopping = hold.unit in self._own.stopping
            if stopping:
                self._failed_stops[hold.unit] = (hold, reason)
            end = self._own.stop_failed(now, [hold.unit])
        what = "was cancelled" if error is None else f"raised {type(error).__name__}: {error}"
        wait = f"{max(0.0, end - now):.3f} s" if end is not None else "no time"
        log.error("the revocation callback of %s (token %d) %s: its work may still run, so the unit counts as "
                  "stopped only once its hold ends (in %s), and the acknowledgement of its revocation waits until "
                  "then", hold.unit, hold.token, what, wait, extra={"member": self._id},
                  exc_info=(type(error), error, error.__traceback__) if error is not None else None)
        if not stopping:
            self._emit(Released(hold, reason, now, None, False, failed=True))
        self._changed()

    def _gave_up(self, step: GaveUp, now: float) -> None:
        """Failed stops whose hold has now ended: they count as stopped."""
        for t in step.units:
            failed = self._failed_stops.pop(t.unit, None)
            if failed is None or failed[0].token != t.token:
                continue
            hold, reason = failed
            log.info("the hold on %s (token %d), whose revocation failed, has ended: counting it as stopped",
                     t.unit, t.token, extra={"member": self._id})
            self._emit(Released(hold, reason, now, step.ended, False, failed=True))
