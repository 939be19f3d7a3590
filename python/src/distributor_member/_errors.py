"""The member's own errors: :class:`MemberError` (it could not start, or was
used wrongly) and :class:`ReadyTimeout` (:meth:`Member.ready` timed out).

:class:`ReadyTimeout` is both a :class:`TimeoutError` and an
:class:`asyncio.TimeoutError` on every supported Python, so either
``except`` catches it.
"""

from __future__ import annotations

import asyncio
import sys


class MemberError(Exception):
    """The member could not start (its address), or was used wrongly."""


READY_TIMEOUT_DOC = """:meth:`Member.ready` timed out: a :class:`TimeoutError` (and an
    :class:`asyncio.TimeoutError`) whose message says what the member waited
    for and what is missing (registration, first read, report, contact with
    Redis or a holder's ping, the last Redis error), passwords hidden."""

if sys.version_info >= (3, 11):

    class ReadyTimeout(TimeoutError):
        __doc__ = READY_TIMEOUT_DOC

else:  # asyncio.TimeoutError is another class before Python 3.11: this is both

    class ReadyTimeout(asyncio.TimeoutError, TimeoutError):
        __doc__ = READY_TIMEOUT_DOC
