"""Readiness: the member is ready once it is registered and has processed a
first read of the table; until then, why not.

:meth:`Readiness._check_ready` sets the ready event and emits
:class:`Ready` once, at the first moment both hold. The account of what is
missing (for :class:`ReadyTimeout`) names the last Redis failure the member
noted, with every password of the options hidden.
"""

from __future__ import annotations

import logging

from ._clock import ago, monotonic
from ._events import Ready
from ._redact import scrub, secrets_of
from ._state import MemberState

log = logging.getLogger("distributor_member")


class Readiness(MemberState):
    """Whether the member is ready, and what it still misses."""

    def _redis_failed(self, error: BaseException) -> None:
        """Notes the last Redis failure (for :meth:`ready`'s timeout), passwords hidden."""
        text = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
        self._last_error = (scrub(text, self._secrets()), monotonic())

    def _secrets(self) -> list[str]:
        """Every password of the options: never shown."""
        return secrets_of(self.options.redis_password, self.options.redis_urls())

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
            missing.append(f"fenced (out of contact: last successful read of redis {ago(read, now)}, "
                           f"last ping {ago(ping, now)})")
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
