"""A hold: this member's ownership of one unit for one tenure (one fencing
token), as the application sees it.

A hold keeps no copy of that ownership: it reads the member's ownership
state, under the lock that guards it, each time it is asked, so it says the
unit is held only while that state holds it with this token and before the
hold's end (the fence margin before the holder may give the unit away), and
once the member ended it, never again. It is safe to use from any thread (the
sync wrapper's callbacks).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Protocol

from ._clock import monotonic, wait_event
from ._ownership import Ownership


class HoldOwner(Protocol):
    """What a hold reads of its member: the ownership state, and the lock that guards it."""

    _lock: threading.Lock
    _own: Ownership


class HoldLost(Exception):
    """The hold on a unit has ended: revoked, or contact lost for the
    deadline. Its next owner may already work on it."""

    def __init__(self, unit: str, token: int) -> None:
        super().__init__(f"the hold on unit {unit!r} (token {token}) has ended")
        self.unit = unit
        self.token = token


class Hold:
    """This member's hold on one unit, for one tenure (one fencing token).
    Check it before every side effect on the unit; cheap (no IO)."""

    def __init__(self, member: HoldOwner, unit: str, token: int) -> None:
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

    def admits_route(self, routed_by: int) -> bool:
        """Whether a request routed here by a :class:`~distributor_member.Lookup`
        copy of generation ``routed_by`` reached this holding: it is held now
        and the copy already showed the table that granted it (docs/protocol.md,
        "Lookups"). Refuse the request otherwise: the caller asks again."""
        return self.is_held() and routed_by >= self.token

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
            await wait_event(self._ended, max(0.0, end - monotonic()) + 0.001)

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
