"""Who owns a unit, for callers that are not members (an API server routing a
request to the worker that owns its unit, a dashboard), answered from a local
copy of the matching table without a Redis call.

The copy follows the table: the holder's notification of each write
(``{T}:changed``, a hint whose payload is never read) and a poll of the
generation (``poll_interval``) make it check ``meta.generation``; a different
one makes it read the table again, whole, with the units in transit, in one
transaction. A (re)subscription and every ``resync_interval`` read it whole
whatever the generation says (a hand edit numbers nothing). A failed read keeps
the last copy. Every answer comes from one generation. It is a cache: a
member's hold is the truth (docs/protocol.md, "Lookups").
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from redis.exceptions import RedisError

from ._redact import scrub, secrets_of
from ._redis import Clients, Keys, subscription
from .options import MemberOptions

log = logging.getLogger("distributor_member")


class PlacementKind(enum.Enum):
    #: In one member's row and not in transit.
    OWNED = "owned"
    #: Moving between owners (or in two rows of a hand-edited table): ask again shortly.
    IN_TRANSIT = "in_transit"
    #: In no row and not in transit: not listed, or no member can take it.
    UNOWNED = "unowned"


@dataclass(frozen=True)
class Placement:
    kind: PlacementKind
    #: The owner's ``host:port`` when :attr:`kind` is ``OWNED``.
    owner: str | None = None


_IN_TRANSIT = Placement(PlacementKind.IN_TRANSIT)
_UNOWNED = Placement(PlacementKind.UNOWNED)


class LookupReadError(Exception):
    """A lookup could not read the table (the message names the key and value)."""


@dataclass(frozen=True)
class Copy:
    """One generation of the table, indexed by unit."""

    generation: int | None
    rows: Mapping[str, str]
    owners: Mapping[str, str]
    #: Units in more than one member's row: member -> the members holding them.
    shared: Mapping[str, frozenset[str]]
    transit: frozenset[str]

    @classmethod
    def build(cls, generation: int | None, rows: Mapping[str, str], transit: list[str]) -> Copy:
        return cls(generation, {}, {}, {}, frozenset()).apply(generation, dict(rows), transit, whole=True)

    def apply(self, generation: int | None, changed: Mapping[str, str | None], transit: list[str],
              whole: bool = False) -> Copy:
        """The next generation's copy from this one and the rows that changed
        (member -> new row, ``None``: removed); ``whole``: ``changed`` is the
        whole table."""
        rows = {} if whole else dict(self.rows)
        owners: dict[str, str] = {} if whole else dict(self.owners)
        shared: dict[str, set[str]] = {} if whole else {u: set(ms) for u, ms in self.shared.items()}

        def holders(u: str) -> set[str]:
            if u in shared:
                return shared[u]
            o = owners.get(u)
            return {o} if o is not None else set()

        def store(u: str, ms: set[str]) -> None:
            shared.pop(u, None)
            owners.pop(u, None)
            if len(ms) == 1:
                owners[u] = next(iter(ms))
            elif ms:
                shared[u] = ms

        for member, row in changed.items():
            for u in {x for x in rows.get(member, "").split(",") if x}:
                store(u, holders(u) - {member})
            if row is None:
                rows.pop(member, None)
                continue
            rows[member] = row
            for u in {x for x in row.split(",") if x}:
                store(u, holders(u) | {member})
        moving = frozenset(f.split(",", 1)[0] for f in transit if "," in f and all(f.split(",", 1)))
        return Copy(generation, rows, owners, {u: frozenset(ms) for u, ms in shared.items()}, moving)

    def placement(self, unit: str) -> Placement:
        if unit in self.transit or unit in self.shared:
            return _IN_TRANSIT
        owner = self.owners.get(unit)
        return Placement(PlacementKind.OWNED, owner) if owner is not None else _UNOWNED


#: At most this many generations are followed by their changed rows.
_MAX_FOLLOWED = 64


def changed_rows(entries: list[tuple[str, dict[str, str]]], start: int, target: int) -> list[str] | None:
    """The members whose rows the writes after generation ``start`` up to
    ``target`` set or deleted, from ``{T}:changes`` entries (``rows`` of
    each); ``None`` unless they form one unbroken chain, each saying its rows."""
    chain = []
    for _, f in entries:
        try:
            g, prev = int(f.get("generation", "")), int(f.get("previous_generation", ""))
        except ValueError:
            return None
        if start < g <= target:
            chain.append((g, prev, f.get("rows")))
    chain.sort()
    at, members = start, set[str]()
    for g, prev, rows in chain:
        if prev != at or rows is None or rows == "*":
            return None
        members.update(m for m in rows.split(",") if m)
        at = g
    return sorted(members) if at == target else None


def _generation(key: str, raw: Any) -> int | None:
    if raw is None:
        return None
    text = raw if isinstance(raw, str) else str(raw)
    if not text.isdigit() or int(text) >= 2**53:
        raise LookupReadError(f"{key} generation is {text[:64]!r}: expected an integer in 0..2^53-1")
    return int(text)


class Lookup:
    """A local copy of the matching table that follows every change.

    ``lookup = await Lookup.connect("redis://...", table="sys-matching-table")``,
    or ``await Lookup.from_env()`` (the member's ``REDIS_*`` variables), or
    ``async with await Lookup.connect(...) as lookup:``. :meth:`owner` and
    :meth:`placement` make no Redis call.
    """

    def __init__(self, options: MemberOptions, poll_interval: float = 1.0, resync_interval: float = 30.0) -> None:
        options.validate()
        if not 0 < poll_interval <= 3600 or not 0 < resync_interval <= 3600:
            raise ValueError("poll_interval and resync_interval must be in (0, 3600] seconds")
        self.options = options
        self.poll_interval = poll_interval
        self.resync_interval = resync_interval
        self._keys = Keys.of(options.table_key)
        self._clients: Clients | None = None
        self._copy = Copy.build(None, {}, [])
        self._tasks: list[asyncio.Task[None]] = []
        self._wake = asyncio.Event()
        self._whole = True
        self._closing = False
        self._confirmed = time.monotonic()
        #: Questions answered, reads of the table whole, reads of only the
        #: rows a change wrote, and failed reads.
        self.answers = 0
        self.reads = 0
        self.row_reads = 0
        self.read_failures = 0

    @classmethod
    async def connect(cls, redis_url: str = "redis://127.0.0.1:6379", table: str = "sys-matching-table", *,
                      options: MemberOptions | None = None, poll_interval: float = 1.0,
                      resync_interval: float = 30.0) -> Lookup:
        """Connects and reads the table once (raising :class:`LookupReadError`
        or a Redis error if that fails), then follows it."""
        opts = options if options is not None else MemberOptions(redis_url=redis_url, table_key=table)
        lookup = cls(opts, poll_interval, resync_interval)
        await lookup.start()
        return lookup

    @classmethod
    async def from_env(cls, environ: Mapping[str, str] | None = None, **kwargs: Any) -> Lookup:
        """As :meth:`connect`, with :meth:`MemberOptions.from_env`."""
        return await cls.connect(options=MemberOptions.from_env(environ), **kwargs)

    async def start(self) -> None:
        self._clients = Clients(self.options)
        try:
            await self._read_whole()
        except BaseException:
            await self._clients.aclose()
            self._clients = None
            raise
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._listen(), name="distributor-lookup-listen"),
                       loop.create_task(self._follow(), name="distributor-lookup-follow")]

    async def close(self) -> None:
        """Ends the tasks and closes the connections."""
        self._closing = True
        for t in self._tasks:
            t.cancel()
        if self._tasks:
            # A task whose cancellation a closing connection swallowed sees
            # ``_closing`` at its next turn.
            await asyncio.wait(self._tasks, timeout=2.0)
        self._tasks = []
        if self._clients is not None:
            await self._clients.aclose()
            self._clients = None

    async def __aenter__(self) -> Lookup:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    def owner(self, unit: str) -> str | None:
        """The owner's ``host:port``; ``None`` while the unit is in transit or owned by nobody."""
        return self.placement(unit).owner

    def placement(self, unit: str) -> Placement:
        """Where ``unit`` is in the copy: owned, in transit (ask again shortly), or unowned."""
        self.answers += 1
        return self._copy.placement(unit)

    @property
    def generation(self) -> int | None:
        """The table generation of the copy (``None``: Redis stores none)."""
        return self._copy.generation

    @property
    def copy(self) -> Copy:
        """The copy now: answers from one generation, however many are asked."""
        return self._copy

    @property
    def staleness(self) -> float:
        """Seconds since the copy was last confirmed current."""
        return max(0.0, time.monotonic() - self._confirmed)

    def _shown(self, error: BaseException) -> str:
        """An error's text with every password of the options hidden."""
        text = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
        return scrub(text, secrets_of(self.options.redis_password, self.options.redis_urls()))

    async def _read_whole(self) -> None:
        assert self._clients is not None
        k = self._keys
        try:
            async with self._clients.main.pipeline(transaction=True) as p:
                p.execute_command("HGETALL", k.table)
                p.execute_command("HGET", k.meta, "generation")
                p.execute_command("HGETALL", k.transit)
                rows, raw, transit = await p.execute()
        except (RedisError, OSError):
            self.read_failures += 1
            raise
        try:
            generation = _generation(k.meta, raw)
        except LookupReadError:
            self.read_failures += 1
            raise
        self.reads += 1
        self._copy = Copy.build(generation, dict(rows or {}), list(transit or []))
        self._confirmed = time.monotonic()

    async def _check(self, whole: bool) -> None:
        assert self._clients is not None
        if not whole:
            raw = await self._clients.main.execute_command("HGET", self._keys.meta, "generation")
            target = _generation(self._keys.meta, raw)
            if target == self._copy.generation:
                self._confirmed = time.monotonic()
                return
            if await self._follow_changes(target):
                return
        await self._read_whole()

    async def _follow_changes(self, target: int | None) -> bool:
        """Takes the copy to ``target`` (or a later generation the table
        reached meanwhile) by reading only the rows the writes in between set
        or deleted; ``False`` where the change history cannot say which (the
        caller reads the table whole)."""
        assert self._clients is not None
        start, k = self._copy.generation, self._keys
        # A holder may write again between the generation's read and the
        # rows' (a revocation, then its grant): follow it, a few times.
        for _ in range(3):
            if start is None or target is None or not 0 < target - start <= _MAX_FOLLOWED:
                return False
            try:
                entries = await self._clients.main.execute_command(
                    "XREVRANGE", k.changes, "+", "-", "COUNT", target - start + 8)
            except RedisError:
                return False
            parsed = []
            for entry in entries or []:
                fields = entry[1] if isinstance(entry[1], dict) else dict(zip(entry[1][::2], entry[1][1::2]))
                parsed.append((str(entry[0]), {str(a): str(b) for a, b in fields.items()}))
            members = changed_rows(parsed, start, target)
            if members is None:
                return False
            try:
                async with self._clients.main.pipeline(transaction=True) as p:
                    if members:
                        p.execute_command("HMGET", k.table, *members)
                    p.execute_command("HGET", k.meta, "generation")
                    p.execute_command("HGETALL", k.transit)
                    got = await p.execute()
            except (RedisError, OSError):
                self.read_failures += 1
                raise
            rows = got[0] if members else []
            read = _generation(k.meta, got[-2])
            if read == target:
                self.row_reads += 1
                self._copy = self._copy.apply(target, dict(zip(members, rows)), list(got[-1] or []))
                self._confirmed = time.monotonic()
                return True
            if read is None or read < target:
                # Gone back, or gone: Redis lost writes.
                return False
            target = read
        return False

    async def _follow(self) -> None:
        failing = False
        whole_at = time.monotonic() + self.resync_interval
        while not self._closing:
            try:
                await asyncio.wait_for(self._wake.wait(), self.poll_interval)
            except asyncio.TimeoutError:
                pass
            self._wake.clear()
            # Taken before the read: a resubscription meanwhile asks again.
            whole = self._whole or time.monotonic() >= whole_at
            self._whole = False
            try:
                await self._check(whole)
                if whole:
                    whole_at = time.monotonic() + self.resync_interval
                if failing:
                    failing = False
                    log.info("lookup: reads work again", extra={"table": self.options.table_key})
            except (RedisError, OSError, LookupReadError) as e:
                if not isinstance(e, LookupReadError):
                    self.read_failures += 1
                # Read whole once reads work again.
                self._whole = True
                if not failing:
                    failing = True
                    log.warning("lookup: could not read the table; answering from the last copy until a read "
                                "works: %s", self._shown(e), extra={"table": self.options.table_key})

    async def _listen(self) -> None:
        assert self._clients is not None

        def subscribed() -> None:
            # Messages may have been missed while unsubscribed.
            self._whole = True
            self._wake.set()

        while not self._closing:
            try:
                await subscription(self._clients.main, self._keys.changed, subscribed, self._wake.set)
            except (RedisError, OSError) as e:
                log.debug("lookup: the subscription to table changes was lost: %s", self._shown(e))
            await asyncio.sleep(0.5)


class SyncLookup:
    """A blocking :class:`Lookup` for applications without asyncio: its
    tasks run on the event loop thread the :class:`~distributor_member.SyncMember`
    instances share; :meth:`owner` and :meth:`placement` are plain calls."""

    def __init__(self, redis_url: str = "redis://127.0.0.1:6379", table: str = "sys-matching-table", *,
                 options: MemberOptions | None = None, poll_interval: float = 1.0,
                 resync_interval: float = 30.0, timeout: float = 30.0) -> None:
        from .sync import _loop

        self._loop = _loop()
        connecting = Lookup.connect(redis_url, table, options=options, poll_interval=poll_interval,
                                    resync_interval=resync_interval)
        self._lookup = asyncio.run_coroutine_threadsafe(connecting, self._loop).result(timeout)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **kwargs: Any) -> SyncLookup:
        """As :meth:`Lookup.from_env`."""
        return cls(options=MemberOptions.from_env(environ), **kwargs)

    def owner(self, unit: str) -> str | None:
        return self._lookup.owner(unit)

    def placement(self, unit: str) -> Placement:
        return self._lookup.placement(unit)

    @property
    def generation(self) -> int | None:
        return self._lookup.generation

    def close(self, timeout: float = 10.0) -> None:
        asyncio.run_coroutine_threadsafe(self._lookup.close(), self._loop).result(timeout)

    def __enter__(self) -> SyncLookup:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
