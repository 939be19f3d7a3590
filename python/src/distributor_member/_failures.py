"""A failure that goes on (a read, a subscription, a write retried in a
loop), summarised in the log: one line when it starts, then one every
:data:`FAILURE_SUMMARY` seconds while it lasts, then one when it works
again; never one line per attempt.
"""

from __future__ import annotations

import logging

from ._clock import monotonic

log = logging.getLogger("distributor_member")

#: How often a failure that goes on is summarised in the log.
FAILURE_SUMMARY = 30.0


class Failures:
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
