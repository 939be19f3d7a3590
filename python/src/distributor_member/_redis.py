"""The member's Redis clients: a plain server, Redis Cluster or a Sentinel
master, over TCP or TLS; and the protocol's commands on them.

Row reads go over a client of exactly one connection (the connection its
report names, docs/protocol.md step 4): redis-py's pipelines take any
connection of a pool, so that pool holds one. Every other call goes over
the main client.
"""

from __future__ import annotations

import logging
import ssl
from dataclasses import dataclass
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote, urlsplit

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.sentinel import Sentinel as _Sentinel
from redis.backoff import NoBackoff
from redis.exceptions import ExecAbortError, NoPermissionError, RedisError, ResponseError
from redis.asyncio.retry import Retry

from ._ownership import Connection
from ._redact import redact_url, split_list
from .options import MemberOptions

log = logging.getLogger("distributor_member")

REGISTER = (
    "if redis.call('LPOS',KEYS[1],ARGV[1]) then return 0 end "
    "redis.call('LPUSH',KEYS[1],ARGV[1]) return 1"
)


def coordination_prefix(table: str) -> str:
    """``{T}``, or ``T`` itself when it holds a non-empty {hash tag} (docs/protocol.md, Redis keys)."""
    start = table.find("{")
    end = table.find("}", start + 1) if start >= 0 else -1
    return table if start >= 0 and end > start + 1 else "{" + table + "}"


@dataclass(frozen=True)
class Keys:
    table: str
    meta: str
    members: str
    loads: str
    transit: str
    changed: str
    acked: str
    #: Members' statements for a holder's recovery: member -> ``<tag> <processed> <unit>=<token>,...``.
    held: str
    #: The change history (a stream): one entry per table write, with the rows it wrote.
    changes: str

    @classmethod
    def of(cls, table: str) -> Keys:
        p = coordination_prefix(table)
        return cls(table, p + ":meta", p + ":members", p + ":loads", p + ":transit", p + ":changed", p + ":acked",
                   p + ":held", p + ":changes")


@dataclass(frozen=True)
class _Endpoint:
    host: str
    port: int
    db: int
    username: str | None
    password: str | None
    tls: bool


def _endpoint(url: str) -> _Endpoint:
    # The URL was checked by MemberOptions.validate; no message quotes it.
    try:
        u = urlsplit(url)
        port = u.port or 6379
    except ValueError:
        raise ValueError(f"cannot read the Redis URL {redact_url(url)}") from None
    db = u.path.strip("/")
    return _Endpoint(
        host=u.hostname or "127.0.0.1",
        port=port,
        db=int(db) if db else 0,
        username=unquote(u.username) if u.username else None,
        password=unquote(u.password) if u.password is not None else None,
        tls=u.scheme == "rediss",
    )


def _tls_kwargs(opts: MemberOptions) -> dict[str, Any]:
    kw: dict[str, Any] = {"ssl_cert_reqs": ssl.CERT_REQUIRED}
    cas = split_list(opts.redis_tls_ca or "")
    if cas:
        data = []
        for path in cas:
            with open(path, encoding="utf-8") as f:
                data.append(f.read())
        kw["ssl_ca_data"] = "\n".join(data)
    if opts.redis_tls_cert:
        kw["ssl_certfile"] = opts.redis_tls_cert
        kw["ssl_keyfile"] = opts.redis_tls_key
    return kw


def _common(opts: MemberOptions) -> dict[str, Any]:
    return {
        "decode_responses": True,
        "socket_timeout": opts.redis_timeout,
        "socket_connect_timeout": opts.redis_timeout,
        # One try per call: the member's loop retries at its next turn, and a
        # hanging call must not hold the loop for several timeouts.
        "retry": Retry(NoBackoff(), 0),
    }


class Clients:
    """The main client and the rows client (one connection)."""

    def __init__(self, opts: MemberOptions) -> None:
        self.cluster = opts.cluster()
        urls = opts.redis_urls()
        common = _common(opts)
        first = _endpoint(urls[0])
        username = opts.redis_username
        password = opts.redis_password
        self.main: Any
        self.rows: Any
        self._sentinel: Any = None
        if opts.redis_sentinel_master:
            ends = [_endpoint(u) for u in urls]
            sentinel_kwargs: dict[str, Any] = {
                "socket_timeout": opts.redis_timeout,
                "socket_connect_timeout": opts.redis_timeout,
            }
            if first.username:
                sentinel_kwargs["username"] = first.username
            if first.password is not None:
                sentinel_kwargs["password"] = first.password
            master_kwargs = dict(common)
            if username:
                master_kwargs["username"] = username
            if password is not None:
                master_kwargs["password"] = password
            if first.tls:
                tls = _tls_kwargs(opts)
                sentinel_kwargs.update(ssl=True, **tls)
                master_kwargs.update(ssl=True, **tls)
            sentinel_class: Any = _Sentinel
            self._sentinel = sentinel_class([(e.host, e.port) for e in ends], sentinel_kwargs=sentinel_kwargs)
            name = opts.redis_sentinel_master
            self.main = self._sentinel.master_for(name, db=first.db, **master_kwargs)
            # A non-blocking pool of one: the member makes one row read at a time.
            self.rows = self._sentinel.master_for(name, db=first.db, max_connections=1, **master_kwargs)
        elif self.cluster:
            kw = dict(common)
            kw["username"] = username or first.username
            kw["password"] = password if password is not None else first.password
            if first.tls:
                kw.update(ssl=True, **_tls_kwargs(opts))
            nodes = [ClusterNode(e.host, e.port) for e in (_endpoint(u) for u in urls)]
            kw.pop("retry")
            self.main = RedisCluster(startup_nodes=nodes, **kw)
            # Cluster members name no connection (docs/protocol.md, step 4):
            # one client serves both.
            self.rows = self.main
        else:
            kw = dict(common)
            kw.update(host=first.host, port=first.port, db=first.db,
                      username=username or first.username,
                      password=password if password is not None else first.password)
            if first.tls:
                kw.update(ssl=True, **_tls_kwargs(opts))
            self.main = Redis(**kw)
            pool_kw = dict(kw)
            pool_kw.pop("retry")
            if first.tls:
                from redis.asyncio.connection import SSLConnection

                ssl_kw = {k: pool_kw.pop(k) for k in list(pool_kw) if k.startswith("ssl")}
                ssl_kw.pop("ssl", None)
                pool = BlockingConnectionPool(max_connections=1, connection_class=SSLConnection,
                                              **pool_kw, **ssl_kw)
            else:
                pool = BlockingConnectionPool(max_connections=1, **pool_kw)
            self.rows = Redis(connection_pool=pool, retry=Retry(NoBackoff(), 0))

    async def find_master_again(self) -> None:
        """Drops every connection (the subscription's too), so that the next
        call connects anew: where the sentinels name the master, they are
        asked again (an old master still answering is left); elsewhere it
        reconnects to the same node. A call running on another task then fails
        once and is retried as any failure is."""
        seen: set[int] = set()
        for c in (self.main, self.rows):
            pool = getattr(c, "connection_pool", None)
            if pool is None or id(pool) in seen:
                continue
            seen.add(id(pool))
            try:
                await pool.disconnect(inuse_connections=True)
            except (RedisError, OSError, RuntimeError) as e:
                log.debug("could not drop a redis connection: %s", e)

    async def aclose(self) -> None:
        for c in {id(self.main): self.main, id(self.rows): self.rows}.values():
            try:
                await c.aclose()
            except (RedisError, OSError, RuntimeError):
                pass


async def subscription(client: Any, channel: str, subscribed: Callable[[], None],
                       message: Callable[[], None]) -> None:
    """One subscription to ``channel`` on ``client``: ``subscribed()`` once
    it is established (messages may have been missed before), ``message()``
    for each message (a hint: its payload is never read). Returns, or raises
    the Redis error, when the connection ends; the pubsub is closed either way."""
    ps = client.pubsub()
    try:
        await ps.subscribe(channel)
        subscribed()
        async for m in ps.listen():
            if m.get("type") == "message":
                message()
    finally:
        try:
            await ps.aclose()
        except (RedisError, OSError):
            pass


def run_id(info: object) -> str | None:
    """The run id in redis-py's parsed INFO reply (one of only digits comes as
    an int), lowercased as a holder's ping names it."""
    v = info.get("run_id") if isinstance(info, dict) else None
    if isinstance(v, int):
        v = "%040d" % v
    return v.lower() if isinstance(v, str) and len(v) == 40 else None


def refused_command(e: RedisError) -> bool:
    """Whether ``e`` says a command was not permitted, renamed or disabled."""
    text = str(e)
    return isinstance(e, (NoPermissionError, ExecAbortError)) or (
        isinstance(e, ResponseError)
        and any(w in text for w in ("NOPERM", "unknown command", "unknown subcommand", "EXECABORT"))
    )


@dataclass
class RowRead:
    row: str | None
    generation: int | None
    generation_error: str | None
    client: Connection | None


class RowReader:
    """Reads the row, the generation, and the connection's name in one transaction."""

    def __init__(self, clients: Clients, keys: Keys, member: str) -> None:
        self.clients = clients
        self.keys = keys
        self.member = member
        self.ask_client = not clients.cluster
        self.ask_server = not clients.cluster
        self.ask_again_at = 0.0

    async def read(self, now: float) -> RowRead:
        if not self.clients.cluster and now >= self.ask_again_at:
            # An ACL fixed meanwhile takes effect.
            self.ask_client = self.ask_server = True
        while True:
            asked_client, asked_server = self.ask_client, self.ask_client and self.ask_server
            try:
                async with self.clients.rows.pipeline(transaction=True) as p:
                    p.execute_command("HGET", self.keys.table, self.member)
                    p.execute_command("HGET", self.keys.meta, "generation")
                    if asked_client:
                        p.execute_command("CLIENT ID")
                        if asked_server:
                            p.execute_command("INFO", "server")
                    got = await p.execute()
            except RedisError as e:
                if not asked_client or not refused_command(e):
                    raise
                text = str(e)
                # redis-py names the refused command: "Command # 4 (INFO server) of pipeline ...".
                if asked_server and ("(INFO" in text or "'info'" in text):
                    log.warning("info is not permitted: reports name the connection by client id alone, so after "
                                "a redis failover a refusal of this address may wait for its deadline "
                                "(asked again in a minute)", extra={"member": self.member})
                    self.ask_server = False
                else:
                    log.warning("client id is not permitted: reports name no connection, so a refusal of this "
                                "address will not move its units before its deadline (asked again in a minute)",
                                extra={"member": self.member})
                    self.ask_client = False
                self.ask_again_at = now + 60.0
                continue
            row = got[0]
            raw_generation = got[1]
            generation: int | None = None
            error: str | None = None
            if raw_generation is not None:
                try:
                    generation = int(raw_generation)
                    if generation < 0:
                        raise ValueError
                except (TypeError, ValueError):
                    generation, error = None, "not a whole number"
            else:
                error = "missing"
            client = None
            if asked_client:
                client = Connection(int(got[2]), run_id(got[3]) if asked_server else None)
            return RowRead(row if isinstance(row, str) else None, generation, error, client)
