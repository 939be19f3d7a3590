"""The member's state, shared by its parts: each part of :class:`Member`
(the handler calls, contact, the Redis edge, readiness, leaving, the
follower) is a class of its own module that derives from
:class:`MemberState` and works on these attributes; :class:`Member` derives
from them all.

Every attribute is set here, in one constructor, so that no part depends on
another having run first. What the protocol decides (holds, reports,
contact) lives in ``_own`` (:class:`Ownership`), and the measured loads in
``_book``; both are read or changed only under ``_lock``, since other threads
reach them too (the sync wrapper's callbacks check holds and report loads).
The rest is changed on the member's event loop only.
"""

from __future__ import annotations

import asyncio
import enum
import threading
from typing import Any

import grpc

from ._clock import monotonic
from ._events import AcquiredCallback, Drained, Event, EventStream, RevokedCallback
from ._hold import Hold
from ._load import LoadBook
from ._ownership import Ownership, Reason
from ._recovery import RecoveryTag
from ._redis import Clients, Keys, RowReader
from .options import MemberOptions


class Phase(enum.Enum):
    """Where the member is in its life; it only moves forward (down this list)."""

    FOLLOWING = 1
    DRAINING = 2
    STOPPING = 3
    LEAVING = 4


class MemberState:
    """The attributes every part of the member works on, and the one thing
    they all do with them: emit an event."""

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
        self._phase = Phase.FOLLOWING
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

    def _emit(self, event: Event) -> None:
        for s in list(self._streams):
            s._queue.put_nowait(event)
