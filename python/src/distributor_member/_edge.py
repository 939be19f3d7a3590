"""The member's Redis edge: the protocol's calls (docs/protocol.md) and what
each answer changes. Row reads, reports, registration, the statement for a
holder's recovery, the units in transit, the subscription to table changes
and the measured loads.

A failed call is noted (for :meth:`Member.ready`'s account of what is
missing) and logged, not raised, except the read of the units in transit,
whose caller decides; it is made again when next wanted. A report or a
statement that failed is written again no sooner than :data:`REPORT_RETRY`
later. A read's answer goes to the ownership state whole: the state alone
decides which holds it extends and which units it starts or stops.
"""

from __future__ import annotations

import asyncio
import logging
import time

from redis.exceptions import RedisError

from ._calls import HandlerCalls
from ._clock import monotonic
from ._failures import Failures
from ._ownership import Outcome, Report
from ._readiness import Readiness
from ._recovery import HeldReport
from ._redis import REGISTER, subscription

log = logging.getLogger("distributor_member")

#: How long a failed report waits before it is written again.
REPORT_RETRY = 0.25


class RedisEdge(HandlerCalls, Readiness):
    """The Redis calls of the member, each with what its answer changes."""

    async def _write_report(self, report: Report, written: Report | None, announce: bool) -> None:
        """Writes ``report`` as this member's (``HSET {T}:members``) and, if
        ``announce``, says so on ``{T}:acked``; ``written`` is the report
        written before it (``None``: none yet)."""
        assert self._clients is not None
        main = self._clients.main
        try:
            await main.execute_command("HSET", self._keys.members, self._id, report.encode())
        except (RedisError, OSError) as e:
            self._redis_failed(e)
            log.debug("could not write this member's report; retrying: %s", e, extra={"member": self._id})
            self._report_wait = monotonic() + REPORT_RETRY
            return
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

    async def _read(self, reads: Failures) -> None:
        """Reads this member's row of the table with its generation, and hands
        it to the ownership state; says what the state made of it when that
        is news (a generation gone back, another server, a new connection)."""
        assert self._clients is not None and self._reader is not None
        sent = monotonic()
        try:
            got = await self._reader.read(sent)
        except (RedisError, OSError) as e:
            self._redis_failed(e)
            reads.failed(e)
            return
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

    async def _register(self) -> None:
        """Puts this member in the services list unless it is there (``REGISTER``)."""
        assert self._clients is not None
        try:
            added = await self._clients.main.execute_command("EVAL", REGISTER, 1, self.options.services_key,
                                                             self._id)
        except (RedisError, OSError) as e:
            self._redis_failed(e)
            log.debug("could not register; retrying: %s", e, extra={"member": self._id})
            return
        if added:
            log.info("%s in %s", "re-registered (the list had lost this member)" if self._registered
                     else "registered", self.options.services_key, extra={"member": self._id})
        self._registered = True
        self._check_ready()

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

    async def _listen(self) -> None:
        """Subscribes to ``{T}:changed``: every message (only a hint) makes a read."""
        assert self._clients is not None and self._wake is not None
        failures = Failures("the subscription to table changes", self._id)
        wake = self._wake

        def read() -> None:
            self._want_read = True
            wake.set()

        def subscribed() -> None:
            failures.recovered()
            read()

        while True:
            dropped = self._dropped
            try:
                await subscription(self._clients.main, self._keys.changed, subscribed, read)
            except (RedisError, OSError) as e:
                # Connections this member dropped itself (to find the master
                # again) are no failure: subscribe anew.
                if self._dropped == dropped:
                    self._redis_failed(e)
                    failures.failed(e)
            await asyncio.sleep(0.5)

    async def _write_loads(self) -> None:
        """Writes the smoothed loads of the owned units every load_report_interval, once one was reported."""
        assert self._clients is not None
        failures = Failures("writing the measured loads", self._id)
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
