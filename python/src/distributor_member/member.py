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
"""

from __future__ import annotations

import asyncio
import enum
import logging
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import grpc
from redis.exceptions import RedisError

from ._grpc import PingService, server_credentials
from ._load import LoadBook
from ._ownership import Acquire, GaveUp, Outcome, Overran, Ownership, Reason, Report, Revoke, Tenure
from ._recovery import HeldReport, PingView, RecoveryTag
from ._redact import check_member_addr, scrub
from ._redis import REGISTER, Clients, Keys, RowReader, refused_command
from .options import MAX_WEIGHT, MemberOptions, OptionsError, split_host_port

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

#: How long a failed report waits before it is written again.
REPORT_RETRY = 0.25
#: How often a failure that goes on is summarised in the log.
FAILURE_SUMMARY = 30.0
#: The longest a deregistration may take when leaving.
LEAVE_BOUND = 3.0
#: The longest the member's other tasks may take to end once cancelled when it closes.
CLOSE_BOUND = 5.0
#: How long the ping server lets the calls in flight finish when the member
#: closes, before it cancels them (the holder's and the standbys' open beat
#: streams included, which would otherwise last the whole grace).
SERVER_STOP_GRACE = 0.01


async def _wait_event(event: asyncio.Event, timeout: float) -> bool:
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


def monotonic() -> float:
    """The member's clock (``time.monotonic``): every instant it exposes is on it."""
    return time.monotonic()


class MemberError(Exception):
    """The member could not start (its address), or was used wrongly."""


_READY_TIMEOUT_DOC = """:meth:`Member.ready` timed out: a :class:`TimeoutError` (and an
    :class:`asyncio.TimeoutError`) whose message says what the member waited
    for and what is missing (registration, first read, report, contact with
    Redis or a holder's ping, the last Redis error), passwords hidden."""

if sys.version_info >= (3, 11):

    class ReadyTimeout(TimeoutError):
        __doc__ = _READY_TIMEOUT_DOC

else:  # asyncio.TimeoutError is another class before Python 3.11: this is both

    class ReadyTimeout(asyncio.TimeoutError, TimeoutError):
        __doc__ = _READY_TIMEOUT_DOC


class HoldLost(Exception):
    """The hold on a unit has ended: revoked, or contact lost for the
    deadline. Its next owner may already work on it."""

    def __init__(self, unit: str, token: int) -> None:
        super().__init__(f"the hold on unit {unit!r} (token {token}) has ended")
        self.unit = unit
        self.token = token


class Drained(enum.Enum):
    """How :meth:`Member.drain` (or the member's end) went."""

    #: The holder moved every unit away; deregistered.
    HANDED_OVER = "handed_over"
    #: The drain timeout passed first: the member stopped its units itself, then deregistered.
    TIMED_OUT = "timed_out"
    #: Contact was lost while draining: every hold had ended; deregistered if Redis answered.
    FENCED = "fenced"
    #: Stopped by :meth:`Member.shutdown`: every unit stopped, then deregistered.
    STOPPED = "stopped"


class Hold:
    """This member's hold on one unit, for one tenure (one fencing token).
    Check it before every side effect on the unit; cheap (no IO)."""

    def __init__(self, member: Member, unit: str, token: int) -> None:
        self._member = member
        self.unit = unit
        #: The fencing token: the generation at which the unit was acquired.
        #: It grows from one owner to the next.
        self.token = token
        self._ended = asyncio.Event()
        self._ended_sync = threading.Event()
        self._acquiring: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"Hold(unit={self.unit!r}, token={self.token}, held={self.is_held()})"

    def is_held(self) -> bool:
        """Whether this member still owns the unit with this token now: not
        revoked, and the hold's end (:attr:`ends`) not reached."""
        return self.ends is not None

    def check(self) -> int:
        """The fencing token if held; raises :class:`HoldLost` otherwise."""
        if not self.is_held():
            raise HoldLost(self.unit, self.token)
        return self.token

    @property
    def ends(self) -> float | None:
        """When the hold ends (on :func:`time.monotonic`'s clock) unless a read
        and a ping extend it; ``None`` once it has ended. It is the fence
        margin before the instant the holder may give the unit to another
        member, so a side effect bounded by it ends in time."""
        if self._ended_sync.is_set():
            return None
        m = self._member
        with m._lock:
            now = monotonic()
            if m._own.holds(self.unit, now) != self.token:
                return None
            return m._own.owned_lapse()

    @property
    def ended(self) -> bool:
        return not self.is_held()

    async def wait_ended(self) -> None:
        """Resolves when the hold ends: the unit is revoked (moved, drained,
        fenced, or the member stops). Cancel-safe."""
        while not self._ended.is_set():
            end = self.ends
            if end is None:
                return
            await _wait_event(self._ended, max(0.0, end - monotonic()) + 0.001)

    def wait_ended_sync(self, timeout: float | None = None) -> bool:
        """:meth:`wait_ended` for threads (the sync wrapper's callbacks):
        whether it ended within ``timeout`` seconds."""
        deadline = None if timeout is None else monotonic() + timeout
        while True:
            end = self.ends
            if end is None:
                return True
            wait = end - monotonic() + 0.001
            if deadline is not None:
                wait = min(wait, deadline - monotonic())
                if wait <= 0:
                    return self.ends is None
            if self._ended_sync.wait(max(0.0, wait)):
                return True

    def _end(self) -> None:
        self._ended.set()
        self._ended_sync.set()


# Events -------------------------------------------------------------------


@dataclass(frozen=True)
class Acquired:
    """The unit is this member's from now on (``hold.token`` is its fencing token)."""

    hold: Hold
    at: float

    @property
    def unit(self) -> str:
        return self.hold.unit

    @property
    def token(self) -> int:
        return self.hold.token


@dataclass(frozen=True)
class Revoking:
    """The member takes the unit back: its hold has ended; the revocation
    callback (if any) runs now."""

    hold: Hold
    reason: Reason
    at: float

    @property
    def unit(self) -> str:
        return self.hold.unit

    @property
    def token(self) -> int:
        return self.hold.token


@dataclass(frozen=True)
class Released:
    """The unit's stop finished (the revocation callback returned) at ``at``.
    ``hold_end`` is the instant the holder could give it away at the
    earliest (monotonic, ``None`` if it was never pinged); ``late`` says the
    stop finished after it. ``failed``: the revocation callback raised or was
    cancelled, so its work may have gone on; the unit counted as stopped only
    once its hold had ended, at ``at`` (then ``hold_end <= at``, and not late)."""

    hold: Hold
    reason: Reason
    at: float
    hold_end: float | None
    late: bool
    failed: bool = False

    @property
    def unit(self) -> str:
        return self.hold.unit

    @property
    def token(self) -> int:
        return self.hold.token


@dataclass(frozen=True)
class Fenced:
    """Contact lost: no successful read or no ping within the deadline (minus
    the margin). Every unit is revoked and pings are answered UNAVAILABLE."""

    at: float


@dataclass(frozen=True)
class Unfenced:
    """In contact again: reads and pings within the deadline."""

    at: float


@dataclass(frozen=True)
class Ready:
    """Registered, and the first read of the table processed."""

    at: float


@dataclass(frozen=True)
class Left:
    """The member has left: deregistered (if Redis answered) and stopped serving."""

    how: Drained
    at: float


Event = Acquired | Revoking | Released | Fenced | Unfenced | Ready | Left

AcquiredCallback = Callable[[Hold], Awaitable[None]]
RevokedCallback = Callable[[Hold, Reason], Awaitable[None]]


class EventStream:
    """One :meth:`Member.events` subscriber."""

    def __init__(self, member: Member) -> None:
        self._member = member
        self._queue: asyncio.Queue[Event | None] = asyncio.Queue()

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> Event:
        item = await self._queue.get()
        if item is None:
            self._member._streams.discard(self)
            raise StopAsyncIteration
        return item

    def close(self) -> None:
        """Stops this subscription: the iteration ends."""
        self._queue.put_nowait(None)


class _Failures:
    """A failure that goes on, summarised: one line, then one every 30 s, then one on recovery."""

    def __init__(self, what: str, member: str) -> None:
        self.what, self.member = what, member
        self.since: float | None = None
        self.said: float | None = None
        self.count = 0

    def failed(self, error: BaseException) -> None:
        now = monotonic()
        self.count += 1
        if self.since is None:
            self.since = now
        kind = type(error).__name__
        if self.said is None:
            log.warning("%s failed (%s: %s); retrying, further failures are summarised", self.what, kind, error,
                        extra={"member": self.member})
            self.said = now
        elif now - self.said >= FAILURE_SUMMARY:
            log.warning("%s still failing (%s: %s): %d failures in %.0f s", self.what, kind, error, self.count,
                        now - self.since, extra={"member": self.member})
            self.said = now

    def recovered(self) -> None:
        if self.since is not None:
            log.info("%s works again after %d failures in %.1f s", self.what, self.count, monotonic() - self.since,
                     extra={"member": self.member})
        self.since = self.said = None
        self.count = 0


class _Phase(enum.Enum):
    FOLLOWING = 1
    DRAINING = 2
    STOPPING = 3
    LEAVING = 4


class Member:
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

    def __init__(
        self,
        options: MemberOptions,
        *,
        acquired: AcquiredCallback | None = None,
        revoked: RevokedCallback | None = None,
    ) -> None:
        options.validate()
        self.options = options
        self._acquired_cb = acquired
        self._revoked_cb = revoked
        self._lock = threading.Lock()
        self._own = Ownership(options.deadline, options.weight, options.margin, monotonic())
        self._holds: dict[str, Hold] = {}
        self._streams: set[EventStream] = set()
        self._keys = Keys.of(options.table_key)
        self._book = LoadBook(options.load_half_life)
        self._id = ""
        self._port = 0
        self._started = False
        self._phase = _Phase.FOLLOWING
        self._ending = Drained.STOPPED
        self._drain_until = 0.0
        self._want_read = True
        self._want_register = True
        self._want_refresh = False
        self._want_transit = False
        self._registered = False
        self._read_once = False
        self._report_wait = 0.0
        self._fenced_seen = False
        self._tasks: list[asyncio.Task[Any]] = []
        self._unit_tasks: set[asyncio.Task[None]] = set()
        self._done: asyncio.Future[Drained] | None = None
        self._ready: asyncio.Event | None = None
        self._wake: asyncio.Event | None = None
        self._watch_wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: grpc.aio.Server | None = None
        self._clients: Clients | None = None
        self._reader: RowReader | None = None
        self._stale = False
        self._other_connection: object = None
        self._other_server: str | None = None
        #: How many times every Redis connection was dropped to find the master again.
        self._dropped = 0
        self._held_failing: RecoveryTag | None = None
        self._bad_generation = False
        #: Units whose stop failed, waiting for their hold to end: their hold and why they were revoked.
        self._failed_stops: dict[str, tuple[Hold, Reason]] = {}
        #: The last Redis failure (kind and message, passwords hidden), for :meth:`ready`'s timeout.
        self._last_error: tuple[str, float] | None = None
        self._stops_failed = 0

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
        # so_reuseport off: a second process must not share this address.
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        service = PingService(self._admit, self._serving)
        server.add_generic_rpc_handlers(service.handlers())
        try:
            if o.tls_cert and o.tls_key:
                port = server.add_secure_port(o.listen, server_credentials(o.tls_cert, o.tls_key, o.tls_ca))
            else:
                port = server.add_insecure_port(o.listen)
        except RuntimeError as e:
            raise MemberError(f"cannot listen on {o.listen}: {e}") from None
        if not port:
            raise MemberError(f"cannot listen on {o.listen}")
        host, _ = split_host_port(o.listen)
        self._port = port
        if o.advertise:
            self._id = o.advertise
        else:
            self._id = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        why = check_member_addr(self._id)
        if why:
            raise OptionsError("advertise", self._id, why)
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
        if self._phase is _Phase.FOLLOWING:
            now = monotonic()
            log.info("draining: reporting it and waiting for the holder to move every unit away",
                     extra={"member": self._id})
            with self._lock:
                self._own.drain(now)
            self._phase = _Phase.DRAINING
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

    def _stop(self, why: str, ending: Drained = Drained.STOPPED) -> None:
        if self._phase in (_Phase.STOPPING, _Phase.LEAVING):
            return
        log.info(why, extra={"member": self._id})
        with self._lock:
            self._own.stop(monotonic())
        self._phase = _Phase.STOPPING
        self._ending = ending
        self._changed()

    def _emit(self, event: Event) -> None:
        for s in list(self._streams):
            s._queue.put_nowait(event)

    def _serving(self) -> bool:
        with self._lock:
            fenced = self._own.fenced
        return not fenced and self._phase in (_Phase.FOLLOWING, _Phase.DRAINING)

    def _admit(self, view: PingView | None = None) -> str | None:
        now = monotonic()
        with self._lock:
            ok = self._own.ping(now, view)
        self._changed()
        if ok:
            return None
        return "fenced: no successful read of the matching table or no ping within the deadline, or stopping"

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
            if fenced and self._phase in (_Phase.FOLLOWING, _Phase.DRAINING):
                with self._lock:
                    read, ping = self._own.last_read, self._own.contact_ping
                log.warning("fenced: no successful read of the table or no ping within the deadline; holding "
                            "nothing and answering pings unavailable (last read %s, last ping %s)",
                            _ago(read, now), _ago(ping, now), extra={"member": self._id})
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

    # The follower -----------------------------------------------------------

    async def _follow(self) -> None:
        assert self._wake is not None and self._done is not None
        o = self.options
        next_poll = 0.0
        next_register = 0.0
        reads = _Failures("reading the matching table", self._id)
        try:
            while True:
                now = monotonic()
                if self._phase is _Phase.DRAINING:
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
                        self._phase = _Phase.LEAVING
                        self._ending = Drained.FENCED
                if self._phase is _Phase.STOPPING:
                    with self._lock:
                        settled = self._own.settled(now)
                    if settled:
                        self._phase = _Phase.LEAVING
                if self._phase is _Phase.LEAVING:
                    await self._leave()
                    break
                if self._phase is not _Phase.STOPPING:
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
                if self._phase is _Phase.DRAINING:
                    wake_at = min(wake_at, self._drain_until)
                if self._report_wait > now:
                    wake_at = min(wake_at, self._report_wait)
                timeout = max(0.0, min(wake_at - monotonic(), 0.25))
                await _wait_event(self._wake, timeout)
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

    async def _io(self, now: float, reads: _Failures) -> bool:
        """Makes the next Redis call wanted now, if any; whether it made one."""
        assert self._clients is not None and self._reader is not None
        main = self._clients.main
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
                try:
                    await main.execute_command("HSET", self._keys.members, self._id, report.encode())
                except (RedisError, OSError) as e:
                    self._redis_failed(e)
                    log.debug("could not write this member's report; retrying: %s", e, extra={"member": self._id})
                    self._report_wait = monotonic() + REPORT_RETRY
                    return True
                before = written.client if written is not None else None
                with self._lock:
                    self._own.reported(monotonic(), report)
                if written is not None and before != report.client:
                    # Reads on the connection this report names count from now on.
                    self._want_read = True
                if announce:
                    try:
                        await main.execute_command("PUBLISH", self._keys.acked, self._id)
                    except (RedisError, OSError) as e:
                        self._redis_failed(e)
                        log.debug("could not announce the report: %s", e, extra={"member": self._id})
                    log.debug("reported %s", report.encode(), extra={"member": self._id})
                self._changed()
                return True
        if self._want_read:
            self._want_read = False
            sent = monotonic()
            try:
                got = await self._reader.read(sent)
            except (RedisError, OSError) as e:
                self._redis_failed(e)
                reads.failed(e)
                return True
            reads.recovered()
            if got.generation is None and got.generation_error == "not a whole number" and not self._bad_generation:
                log.warning("the table's generation is unreadable; following the row at the last generation",
                            extra={"member": self._id})
            self._bad_generation = got.generation_error == "not a whole number"
            with self._lock:
                processed = self._own.generation
                outcome = self._own.read(monotonic(), sent, got.generation, got.row, got.client)
                reassert = self._own.reassert_due()
                view = self._own.pinged_view
            if outcome is Outcome.PROCESSED:
                self._stale = False
                self._other_connection = None
            elif outcome is Outcome.STALE:
                if not self._stale:
                    log.warning("the table's generation went back (%s after %d: redis lost writes); ignoring rows "
                                "until the holder writes one above", got.generation, processed,
                                extra={"member": self._id})
                self._stale = True
            elif outcome is Outcome.BEHIND:
                if not self._stale:
                    log.warning("the table's generation (%s) is below the one the holder's ping named (%s: redis "
                                "lost writes); ignoring rows until the holder writes one above it", got.generation,
                                view.generation if view is not None else "?", extra={"member": self._id})
                self._stale = True
            elif outcome is Outcome.OTHER_SERVER:
                read_server = got.client.server if got.client is not None else None
                if self._other_server != read_server:
                    log.warning("this member reads another redis server (%s) than the one the holder writes on (%s; "
                                "an old master still answering): its reads extend no hold; finding the master again",
                                read_server, view.server if view is not None else "?", extra={"member": self._id})
                self._other_server = read_server
                self._dropped += 1
                await self._clients.find_master_again()
            else:
                if self._other_connection != got.client:
                    log.info("this member's redis connection changed (%s): naming it in a report before its reads "
                             "extend any hold", got.client, extra={"member": self._id})
                self._other_connection = got.client
            if outcome is not Outcome.OTHER_SERVER:
                self._other_server = None
            if reassert:
                # Redis lost writes (or this member read another server): its
                # report written last is due again, and it registers again now
                # (the list may have lost it).
                self._want_register = True
            self._want_transit = True
            self._read_once = True
            self._check_ready()
            self._changed()
            return True
        if self._want_register:
            self._want_register = False
            try:
                added = await main.execute_command("EVAL", REGISTER, 1, self.options.services_key, self._id)
            except (RedisError, OSError) as e:
                self._redis_failed(e)
                log.debug("could not register; retrying: %s", e, extra={"member": self._id})
                return True
            if added:
                log.info("%s in %s", "re-registered (the list had lost this member)" if self._registered
                         else "registered", self.options.services_key, extra={"member": self._id})
            self._registered = True
            self._check_ready()
            return True
        if self._want_transit and self._phase is _Phase.DRAINING:
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
                    self._phase = _Phase.LEAVING
                    self._ending = Drained.HANDED_OVER
                return True
        return False

    async def _state_held(self, held: HeldReport, last: Report | None) -> None:
        """Writes the statement for the holder's recovery (``HSET {T}:held``),
        this member's last report again (Redis may have lost it) and the
        ``{T}:acked`` hint, in one round trip (the hint apart on a cluster)."""
        assert self._clients is not None
        main = self._clients.main
        ok = False
        try:
            async with main.pipeline(transaction=False) as p:
                p.execute_command("HSET", self._keys.held, self._id, held.encode())
                if last is not None:
                    p.execute_command("HSET", self._keys.members, self._id, last.encode())
                if not self._clients.cluster:
                    p.execute_command("PUBLISH", self._keys.acked, self._id)
                await p.execute()
            ok = True
        except (RedisError, OSError) as e:
            self._redis_failed(e)
            if self._held_failing != held.tag:
                log.warning("could not state what this member works on for the holder's recovery %s; retrying: %s",
                            held.tag, e, extra={"member": self._id})
            self._held_failing = held.tag
            self._report_wait = monotonic() + REPORT_RETRY
        finally:
            with self._lock:
                self._own.held_written(held.tag, ok)
        if ok:
            self._held_failing = None
            log.info("stated what this member works on (%d units at generation %d) for the holder's recovery %s",
                     len(held.units), held.processed, held.tag, extra={"member": self._id})
            if self._clients.cluster:
                try:
                    await main.execute_command("PUBLISH", self._keys.acked, self._id)
                except (RedisError, OSError) as e:
                    self._redis_failed(e)
                    log.debug("could not announce the statement: %s", e, extra={"member": self._id})
        self._changed()

    async def _transit_waits(self) -> bool:
        """Whether the holder still waits on a unit revoked from this member
        (``{T}:transit``): leaving before it read the acknowledgement would
        make the unit wait for the deadline."""
        assert self._clients is not None
        entries = await self._clients.main.execute_command("HGETALL", self._keys.transit)
        values = entries.values() if isinstance(entries, dict) else entries[1::2]
        for v in values:
            fields = str(v).split()
            if len(fields) >= 4:
                if self._id in fields[3].split(","):
                    return True
            elif self._id in str(v):
                return True
        return False

    def _redis_failed(self, error: BaseException) -> None:
        """Notes the last Redis failure (for :meth:`ready`'s timeout), passwords hidden."""
        text = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
        self._last_error = (scrub(text, self._secrets()), monotonic())

    def _secrets(self) -> list[str]:
        """Every password of the options: never shown."""
        secrets = [self.options.redis_password or ""]
        for url in self.options.redis_urls():
            try:
                secrets.append(urlsplit(url).password or "")
            except ValueError:
                pass
        return secrets

    def _not_ready(self, timeout: float | None) -> str:
        """Why the member is not ready: what it waits for, and what is missing."""
        o = self.options
        now = monotonic()
        missing = []
        if not self._registered:
            missing.append(f"not registered in {o.services_key!r}")
        if not self._read_once:
            missing.append(f"no read of the table {o.table_key!r} processed")
        with self._lock:
            written = self._own.written
            fenced = self._own.fenced
            read, ping = self._own.last_read, self._own.contact_ping
        if written is None:
            missing.append("no report written")
        if fenced:
            missing.append(f"fenced (out of contact: last successful read of redis {_ago(read, now)}, "
                           f"last ping {_ago(ping, now)})")
        if self._last_error is not None:
            error, at = self._last_error
            missing.append(f"last redis error {now - at:.1f} s ago: {error}")
        waited = "" if timeout is None else f" within {timeout:g} s"
        return (f"member {self._id} not ready{waited} (waiting to be registered in {o.services_key!r} and to "
                f"process a first read of {o.table_key!r} at {o.redacted_redis_url()}): " + "; ".join(missing))

    def _check_ready(self) -> None:
        assert self._ready is not None
        if self._registered and self._read_once and not self._ready.is_set():
            self._ready.set()
            log.info("ready: registered, and the first read of the table processed", extra={"member": self._id})
            self._emit(Ready(monotonic()))

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
        self._phase = _Phase.LEAVING
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
        self._phase = _Phase.LEAVING
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

    async def _listen(self) -> None:
        """Subscribes to ``{T}:changed``: every message (only a hint) makes a read."""
        assert self._clients is not None and self._wake is not None
        failures = _Failures("the subscription to table changes", self._id)
        while True:
            ps = self._clients.main.pubsub()
            dropped = self._dropped
            try:
                await ps.subscribe(self._keys.changed)
                failures.recovered()
                self._want_read = True
                self._wake.set()
                async for m in ps.listen():
                    if m.get("type") == "message":
                        self._want_read = True
                        self._wake.set()
            except (RedisError, OSError) as e:
                # Connections this member dropped itself (to find the master
                # again) are no failure: subscribe anew.
                if self._dropped == dropped:
                    self._redis_failed(e)
                    failures.failed(e)
            finally:
                try:
                    await ps.aclose()
                except (RedisError, OSError):
                    pass
            await asyncio.sleep(0.5)

    async def _watchdog(self) -> None:
        """Ends holds at their end, whatever else waits (a hanging call included)."""
        assert self._watch_wake is not None
        while True:
            with self._lock:
                wake = self._own.next_wake()
            timeout = 1.0 if wake is None else min(1.0, max(0.0, wake - monotonic()))
            await _wait_event(self._watch_wake, timeout)
            self._watch_wake.clear()
            with self._lock:
                self._own.tick(monotonic())
            self._changed(watchdog=True)

    async def _write_loads(self) -> None:
        """Writes the smoothed loads of the owned units every load_report_interval, once one was reported."""
        assert self._clients is not None
        failures = _Failures("writing the measured loads", self._id)
        while True:
            await asyncio.sleep(self.options.load_report_interval)
            with self._lock:
                if not self._book.reported:
                    continue
                now = monotonic()
                owned = {t.unit for t in self._own.owned_units() if self._own.holds(t.unit, now) is not None}
                self._book.retain(owned)
                value = self._book.encode(owned, int(time.time() * 1000))
            try:
                await self._clients.main.execute_command("HSET", self._keys.loads, self._id, value)
                failures.recovered()
            except (RedisError, OSError) as e:
                self._redis_failed(e)
                failures.failed(e)


def _ago(t: float | None, now: float) -> str:
    return "never" if t is None else f"{now - t:.3f} s ago"
