"""The member: serves the ping, registers, follows its row of the matching
table with the handoff protocol (docs/protocol.md), hands units to the
application one by one, takes them back, and fences itself when it loses
contact.

Structure (all on one asyncio loop):

- the *follower* task makes one Redis call at a time (a due report before a
  read, a read before a registration) and never waits on the application;
- the *watchdog* task ends holds at their end (minus the fence margin), even
  while a Redis call hangs;
- the ping handlers count pings answered OK and refuse pings while fenced;
  what a ping says of its holder (protocol version 2) goes to the state:
  when it names a recovery, the follower first writes what this member
  works on (``{T}:held``) with its last report;
- each unit's ``acquired`` and ``revoked`` callbacks run in a task of their
  own (for one unit, ``revoked`` starts only once ``acquired`` returned), so
  a slow stop delays no read, no ping and no other unit's callbacks. What the
  protocol orders stays ordered: a generation that took units is reported
  only once they stopped, and units are started only after that report. A
  ``revoked`` callback that raises (or is cancelled) has not shown that its
  work stopped: its unit counts as stopped only once its hold has ended by
  itself, and that report waits until then.

This module holds :class:`Member`'s public face (its API, and starting it)
and every name importers reach through it. The member's parts are classes
of modules of their own, one concern each, over the state they share
(``_state``, the constructor's too): the handler calls (``_calls``), the
ping server and the watchdog (``_contact``), the Redis calls (``_edge``),
readiness (``_readiness``), leaving and closing (``_leaving``) and the
follower (``_follow``); the hold, the events and the errors are the
``_hold``, ``_events`` and ``_errors`` modules.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ._clock import ago, wait_event
from ._contact import Contact
from ._errors import READY_TIMEOUT_DOC, MemberError, ReadyTimeout
from ._events import (
    Acquired,
    AcquiredCallback,
    Drained,
    Event,
    EventStream,
    Fenced,
    Left,
    Ready,
    Released,
    RevokedCallback,
    Revoking,
    Unfenced,
)
from ._failures import Failures
from ._follow import Follower
from ._hold import Hold, HoldLost
from ._ownership import Reason
from ._redis import Clients, RowReader
from ._state import Phase
from .options import MAX_WEIGHT, OptionsError

# Offered by this module too, under these names, to code that imports them
# from here (``import x as x`` is what mypy --strict counts as an export; the
# tests reach _wait_event).
from ._clock import monotonic as monotonic
from ._edge import REPORT_RETRY as REPORT_RETRY
from ._failures import FAILURE_SUMMARY as FAILURE_SUMMARY
from ._leaving import CLOSE_BOUND as CLOSE_BOUND
from ._leaving import LEAVE_BOUND as LEAVE_BOUND
from ._leaving import SERVER_STOP_GRACE as SERVER_STOP_GRACE
from .options import MemberOptions as MemberOptions

_wait_event = wait_event
_ago = ago
_Failures = Failures
_Phase = Phase
_READY_TIMEOUT_DOC = READY_TIMEOUT_DOC

__all__ = [
    "Member",
    "Hold",
    "HoldLost",
    "Drained",
    "Reason",
    "Event",
    "EventStream",
    "Acquired",
    "Revoking",
    "Released",
    "Fenced",
    "Unfenced",
    "Ready",
    "Left",
    "MemberError",
    "ReadyTimeout",
    "AcquiredCallback",
    "RevokedCallback",
]

log = logging.getLogger("distributor_member")


class Member(Follower, Contact):
    """A worker of the distributor: ``async with Member(options, acquired=...,
    revoked=...) as m: ...`` (or :meth:`start` and :meth:`shutdown`).

    ``acquired(hold)`` is awaited when a unit becomes this member's: start
    its work and return. ``revoked(hold, reason)`` is awaited when it is taken
    back: stop the work completely, then return; the member reports that to
    the holder, which only then gives the unit to its next owner. If it
    raises (or is cancelled), the work may still run: the unit counts as
    stopped, and that report is written, only once its hold has ended (the
    holder waits out the deadline meanwhile). Each unit's calls run in a task
    of their own. Without ``revoked`` a revocation
    completes at once: then check the hold before every side effect (or
    follow :meth:`events`). Leaving the ``async with`` block shuts the member
    down (:meth:`shutdown`); call :meth:`drain` first to hand units over.
    """

    # -- public API ---------------------------------------------------------

    @property
    def id(self) -> str:
        """The member id: the address in the services list (known once started)."""
        return self._id

    @property
    def port(self) -> int:
        """The port the ping server listens on (known once started)."""
        return self._port

    @property
    def generation(self) -> int:
        """The last processed table generation (0 before the first)."""
        with self._lock:
            return self._own.generation

    @property
    def fenced(self) -> bool:
        """Out of contact (or stopping): holding nothing, answering pings UNAVAILABLE."""
        with self._lock:
            return self._own.fenced

    @property
    def in_table(self) -> bool:
        """Whether the last processed read found a field for this member."""
        with self._lock:
            return self._own.in_table()

    @property
    def stops_failed(self) -> int:
        """How many revocation callbacks raised or were cancelled (each such
        unit counted as stopped only once its hold had ended)."""
        return self._stops_failed

    @property
    def weight(self) -> int:
        with self._lock:
            return self._own.weight

    async def __aenter__(self) -> Member:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._done is not None and not self._done.done():
            await self.shutdown()

    async def start(self) -> None:
        """Binds and starts the ping server, then registers and follows the
        table in the background. Redis being unreachable is not an error
        here: it is retried. Raises :class:`MemberError` if the address
        cannot be bound or is not one others can dial."""
        if self._started:
            raise MemberError("already started")
        self._started = True
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._done = loop.create_future()
        self._ready = asyncio.Event()
        self._wake = asyncio.Event()
        self._watch_wake = asyncio.Event()
        o = self.options
        server = self._bind()
        self._clients = Clients(o)
        self._reader = RowReader(self._clients, self._keys, self._id)
        await server.start()
        self._server = server
        with self._lock:
            # The hold and contact clocks start now.
            self._own.started = monotonic()
        log.info("member %s serving; following %s, deadline %.3f s", self._id, o.table_key, o.deadline,
                 extra={"member": self._id})
        follow = loop.create_task(self._follow(), name="distributor-member-follow")
        follow.add_done_callback(self._follow_ended)
        self._tasks = [
            follow,
            loop.create_task(self._listen(), name="distributor-member-listen"),
            loop.create_task(self._watchdog(), name="distributor-member-watchdog"),
            loop.create_task(self._write_loads(), name="distributor-member-loads"),
        ]

    async def ready(self, timeout: float | None = None) -> None:
        """Waits until the member registered and processed its first read of
        the table. Raises :class:`MemberError` if it stopped first, and
        :class:`ReadyTimeout` (a :class:`TimeoutError`, and an
        :class:`asyncio.TimeoutError`) after ``timeout`` seconds, saying what
        is missing."""
        ready, done = self._require()
        wait_ready: asyncio.Future[Any] = asyncio.ensure_future(ready.wait())
        try:
            await asyncio.wait({wait_ready, done}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            wait_ready.cancel()
        if ready.is_set():
            return
        if done.done():
            raise MemberError("the member stopped before it was ready")
        raise ReadyTimeout(self._not_ready(timeout))

    def events(self) -> EventStream:
        """A new async iterator of this member's events from now on
        (:class:`Acquired`, :class:`Revoking`, :class:`Released`,
        :class:`Fenced`, :class:`Unfenced`, :class:`Ready`, :class:`Left`);
        it ends after :class:`Left`. Each subscriber has its own unbounded queue."""
        s = EventStream(self)
        self._streams.add(s)
        if self._done is not None and self._done.done():
            s.close()
        return s

    def holds(self, unit: str) -> Hold | None:
        """The current hold on ``unit``, if it is held now."""
        h = self._holds.get(unit)
        return h if h is not None and h.is_held() else None

    def routed_current(self, unit: str, routed_by: int) -> bool:
        """Whether a request for ``unit`` routed by a lookup copy of generation
        ``routed_by`` reached the current holding (:meth:`Hold.admits_route`)."""
        h = self.holds(unit)
        return h is not None and h.admits_route(routed_by)

    def owned(self) -> list[Hold]:
        """The holds of the units owned now, in row order."""
        with self._lock:
            now = monotonic()
            tenures = [t for t in self._own.owned_units() if self._own.holds(t.unit, now) == t.token]
        return [self._holds[t.unit] for t in tenures if t.unit in self._holds]

    def set_weight(self, weight: int) -> None:
        """Changes the capacity weight (1 to 1000): a report with it is written."""
        if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= MAX_WEIGHT:
            raise OptionsError("weight", str(weight), f"must be a whole number from 1 to {MAX_WEIGHT}")
        with self._lock:
            self._own.set_weight(weight)
        self._changed()

    def report_load(self, unit: str, value: float) -> bool:
        """A measurement of ``unit``'s load (0 to 1e9, any unit of your own),
        for ``-balance load``: smoothed (``load_half_life``) and written for
        the units owned every ``load_report_interval``. ``False``: not such a
        number, ignored."""
        with self._lock:
            return self._book.sample(unit, value, monotonic())

    async def drain(self) -> Drained:
        """Reports draining, waits until the holder moved every unit away
        (each revocation returned and was reported), then deregisters and
        stops serving; after ``drain_timeout`` it stops the units itself."""
        _, done = self._require()
        if self._phase is Phase.FOLLOWING:
            now = monotonic()
            log.info("draining: reporting it and waiting for the holder to move every unit away",
                     extra={"member": self._id})
            with self._lock:
                self._own.drain(now)
            self._phase = Phase.DRAINING
            self._drain_until = now + self.options.drain_timeout
            self._changed()
        return await asyncio.shield(done)

    async def shutdown(self) -> Drained:
        """Stops now: revokes every unit (waiting for each revocation, at
        most until its hold ends), deregisters and stops serving. The units
        then wait for the holder to see this member gone; prefer :meth:`drain`."""
        _, done = self._require()
        self._stop("stopping: revoking every unit, then deregistering")
        return await asyncio.shield(done)

    async def wait_closed(self) -> Drained:
        """Waits until the member has left (a drain, a shutdown)."""
        _, done = self._require()
        return await asyncio.shield(done)

    @property
    def closed(self) -> bool:
        return self._done is not None and self._done.done()

    # -- internals ----------------------------------------------------------

    def _require(self) -> tuple[asyncio.Event, asyncio.Future[Drained]]:
        if self._ready is None or self._done is None:
            raise MemberError("the member is not started")
        return self._ready, self._done
