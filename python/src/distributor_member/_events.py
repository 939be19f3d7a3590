"""What the member tells the application: its events (:class:`Acquired`,
:class:`Revoking`, :class:`Released`, :class:`Fenced`, :class:`Unfenced`,
:class:`Ready`, :class:`Left`), how it left (:class:`Drained`), the types of
its handler callbacks, and the subscription that delivers the events.

Events are frozen values stamped on the member's clock (:func:`monotonic`).
Each subscriber has its own unbounded queue, so a slow subscriber delays
neither the member nor another subscriber, and gets every event from its
subscription on, in the order emitted, ending after :class:`Left` (at once
when it subscribed after it).
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from ._hold import Hold
from ._ownership import Reason


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


class _OfHold:
    """An event about one hold: its unit and fencing token come from it."""

    hold: Hold

    @property
    def unit(self) -> str:
        return self.hold.unit

    @property
    def token(self) -> int:
        return self.hold.token


@dataclass(frozen=True)
class Acquired(_OfHold):
    """The unit is this member's from now on (``hold.token`` is its fencing token)."""

    hold: Hold
    at: float


@dataclass(frozen=True)
class Revoking(_OfHold):
    """The member takes the unit back: its hold has ended; the revocation
    callback (if any) runs now."""

    hold: Hold
    reason: Reason
    at: float


@dataclass(frozen=True)
class Released(_OfHold):
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


class Subscriptions(Protocol):
    """What a subscription reads of its member: the set of its open event streams."""

    _streams: set[EventStream]


class EventStream:
    """One :meth:`Member.events` subscriber."""

    def __init__(self, member: Subscriptions) -> None:
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
