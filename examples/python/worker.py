#!/usr/bin/env python3
"""A worker of distributor's safe handoff protocol, in Python (grpcio, redis-py).

It follows docs/protocol.md, "Protocol, for workers in any language", step by step:

1. Serve `/proto.GRPCPinger/Ping` (google.protobuf.Empty is zero bytes, so no
   generated code is needed), `/proto.Liveness/Beats` (the same answer as a
   stream of small messages, encoded by hand below) and
   `grpc.health.v1.Health/Check`.
2. Register with docs/protocol.md's EVAL (LPOS, else LPUSH); again every
   --reregister-ms, with its report, in case Redis lost its data.
3. Follow its row: `MULTI; HGET <table> <id>; HGET {<table>}:meta generation;
   CLIENT ID; INFO server; EXEC` (without INFO, or without both, where Redis
   refuses them), on one dedicated connection, on every `{<table>}:changed`
   message (a hint only) and every --poll-ms. The client id and the server's
   run id name the connection: ids are numbered per server, so the run id
   tells the holder, after a Redis failover, that an id is not this one.
4. Apply each generation g in increasing order: stop every unit not in the
   row, completely; then, if that took units away (or followed generations
   it did not process, which may have given units and taken them again; or
   at start, when the draining flag changed, or on a new connection), report `HSET
   {<table>}:members <id> "<g> <draining> <deadline_ms> 1 <client id> <run id>"` and
   `PUBLISH {<table>}:acked <id>`; only then start the new units, with
   fencing token g. A generation that only adds units needs no report (each
   report costs the holder a cycle). A read on another connection than the
   last report names, while it holds or stops units, counts for nothing: it
   reports the new connection, then reads again. A lower generation is
   ignored (Redis lost writes) until the holder, reading the report, writes
   one above it.
5. Fence itself: its hold on a unit ends --deadline-ms after the earlier of
   the (monotonic) send instant of the last read showing the unit (on the
   reported connection: the holder may ask Redis whether that one still
   exists) and the last ping it answered OK. A watchdog stops everything --work-ms (the stop's
   own length) plus 100 ms before that. Then pings get UNAVAILABLE (and pings
   so refused do not count) until a read sent after the fence succeeded, and
   nothing starts until every stop finished. The work checks its hold before
   every side effect, so a process frozen past its hold (SIGSTOP) does
   nothing after it and, once thawed, reports the release at the hold's end,
   before anything else.
6. Drain on SIGTERM/SIGINT: report draining=1 (and PUBLISH), keep
   acknowledging until its field is present and empty at a generation it
   acknowledged, then LREM itself, HDEL its report, exit 0. After
   --drain-timeout seconds, or a second signal: stop everything, deregister,
   exit 0.

7. Measured load (-balance load): with --unit-load UNIT=LOAD (repeatable)
   and --default-load LOAD (every other unit), the worker's stand-in
   application measures that load once a second for each unit it holds. Samples are smoothed (exponential average with
   --load-half-life seconds; the first samples averaged plainly), and every
   --load-report-ms the smoothed loads of the units it holds are written:
   `HSET {<table>}:loads <id> "<unix_ms> <unit>=<load>,..."`; HDEL on leaving.

With --events, stdout carries one JSON object per line per ownership change
and nothing else (logs go to stderr); `generation` is the unit's token:
  {"event":"acquired","unit":"u","member":"host:port","generation":7,"unix_us":T}
  {"event":"released",...,"unix_us":T}  (+ "reason":"fenced" when the hold ended
  first; then unix_us is the earlier of the stop's end and the hold's end)
"""

import argparse
import asyncio
import json
import logging
import signal
import sys
import time

import grpc
import redis.asyncio as aioredis
from redis.exceptions import ExecAbortError, NoPermissionError, RedisError

log = logging.getLogger("worker")

REGISTER = ("if redis.call('LPOS',KEYS[1],ARGV[1]) then return 0 end "
            "redis.call('LPUSH',KEYS[1],ARGV[1]) return 1")
SERVING, NOT_SERVING = b"\x08\x01", b"\x08\x02"  # HealthCheckResponse.status


def run_id(info):
    """The run id in redis-py's parsed INFO reply (it turns one of only digits into an int)."""
    v = info.get("run_id") if isinstance(info, dict) else None
    v = "%040d" % v if isinstance(v, int) else v
    return v if isinstance(v, str) and len(v) == 40 else None


def coordination_prefix(table):
    """`{T}`, or `T` itself when it has a non-empty {hash tag} (docs/protocol.md: Redis keys)."""
    start = table.find("{")
    end = table.find("}", start + 1) if start >= 0 else -1
    return table if end > start + 1 else "{" + table + "}"


def wall_us(mono):
    """A time.monotonic() instant as Unix microseconds."""
    return time.time_ns() // 1000 - int((time.monotonic() - mono) * 1e6)


class Work:
    """The application: one task per unit. Its stop takes --work-ms."""

    def __init__(self, stop_ms):
        self.stop_s, self.tasks = stop_ms / 1000, {}

    def start(self, unit, token, holds):
        self.tasks[unit] = asyncio.create_task(self.run(unit, token, holds))

    async def run(self, unit, token, holds):
        while True:
            await asyncio.sleep(0.05)
            if not holds(unit):  # check the hold before every side effect
                return
            # ... one step of work on `unit`, writes fenced downstream by `token`

    async def stop(self, unit):
        self.tasks.pop(unit).cancel()
        await asyncio.sleep(self.stop_s)  # flushing, closing: still touching the unit


class Held:
    def __init__(self, token, seen):
        self.token, self.seen, self.stopping = token, seen, None


class LoadBook:
    """Per-unit smoothed load: a time-weighted exponential average (docs/assignment.md, "Measured load")."""

    def __init__(self, half_life):
        self.half_life, self.units = half_life, {}  # unit -> [decayed sum, decayed weight, at]

    def sample(self, unit, load, at):
        if not (0 <= load <= 1e9):  # also refuses NaN
            return False
        s = self.units.setdefault(unit, [0.0, 0.0, at])
        decay = 0.0 if self.half_life <= 0 else 2 ** (-max(0.0, at - s[2]) / self.half_life)
        s[0], s[1], s[2] = s[0] * decay + load, s[1] * decay + 1.0, max(s[2], at)
        return True

    def encode(self, owned, unix_ms):
        body = ",".join("%s=%.3f" % (u, self.units[u][0] / self.units[u][1])
                        for u in sorted(owned) if u in self.units)
        return "%d %s" % (unix_ms, body) if body else "%d" % unix_ms


def read_varint(data, i):
    """A protobuf varint at `data[i:]`: its value and the index after it."""
    value, shift = 0, 0
    while True:
        if i >= len(data) or shift > 63:
            raise ValueError("truncated varint")
        b = data[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, i


def write_varint(value):
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def decode_beat(data):
    """The `seq` (field 1) of a `proto.Beat`; other fields are skipped."""
    i, seq = 0, 0
    while i < len(data):
        key, i = read_varint(data, i)
        if key & 7 == 0:
            value, i = read_varint(data, i)
            if key >> 3 == 1:
                seq = value
        elif key & 7 == 2:
            n, i = read_varint(data, i)
            i += n
        else:
            raise ValueError("unexpected wire type in a beat")
    return seq


def encode_beat(seq):
    """A `proto.Beat`: `seq` (field 1)."""
    return b"\x08" + write_varint(seq) if seq else b""


class Worker:
    def __init__(self, args, r, rows, ident):
        self.args, self.r, self.rows, self.id = args, r, rows, ident
        prefix = coordination_prefix(args.table)
        self.meta, self.members = prefix + ":meta", prefix + ":members"
        self.loads_key, self.book = prefix + ":loads", LoadBook(args.load_half_life)
        self.changed, self.acked = prefix + ":changed", prefix + ":acked"
        self.deadline = args.deadline_ms / 1000
        self.budget = args.work_ms / 1000 + 0.1  # fence this long before a hold ends
        self.app = Work(args.work_ms)
        self.units = {}  # unit -> Held
        self.last_ping = None  # monotonic: last ping answered OK
        self.last_read = None  # monotonic send instant of the last successful read
        self.fenced_at = time.monotonic()  # pings get UNAVAILABLE until a read sent after this
        self.applied, self.row = 0, None  # the last generation processed, and its row
        self.ignored = False  # a lower generation was ignored since it
        # The rows connection: (CLIENT ID, run id or None), if Redis tells.
        self.client, self.ask_client, self.ask_server = None, True, True
        self.ask_again_at = 0.0  # a refused CLIENT ID or INFO is asked again after a minute
        self.reported = self.reported_draining = self.reported_client = None
        self.draining = self.leaving = False
        self.wake, self.done = asyncio.Event(), asyncio.Event()

    # Step 5: the hold.
    def hold_end(self, seen):
        return float("-inf") if self.last_ping is None else min(seen, self.last_ping) + self.deadline

    def holds(self, unit):
        """Whether the application may still act on `unit` (before every side effect)."""
        h = self.units.get(unit)
        if h is None or h.stopping is not None:
            return False
        if time.monotonic() < self.hold_end(h.seen):
            return True
        self.check()
        return False

    def check(self):
        """Fences (stops everything) when a hold is about to end. Runs first
        in every ping, read and side effect, so a thawed process stops first."""
        now = time.monotonic()
        ends = [self.hold_end(h.seen) for h in self.units.values() if h.stopping is None]
        if self.fenced_at is None and self.last_read is not None:
            ends.append(self.hold_end(self.last_read))
        if ends and min(ends) - self.budget <= now:
            if self.fenced_at is None:
                log.warning("fenced: no read or ping for %.1f s; stopping everything", self.deadline - self.budget)
                self.fenced_at = now
                self.wake.set()  # a read after the fence, to answer the next ping
            for unit in list(self.units):
                self.stop(unit)

    async def watchdog(self):
        while True:
            self.check()
            ends = [self.hold_end(h.seen) for h in self.units.values() if h.stopping is None]
            await asyncio.sleep(min([0.25] + [max(0.005, e - self.budget - time.monotonic()) for e in ends]))

    def stop(self, unit):
        h = self.units[unit]
        if h.stopping is None:
            h.stopping = asyncio.create_task(self.stopped(unit, h))
        return h.stopping

    async def stopped(self, unit, h):
        await self.app.stop(unit)
        end, reason = self.hold_end(h.seen), None
        mono = time.monotonic()
        if self.fenced_at is not None or mono > end:
            mono, reason = min(mono, end), "fenced"
        del self.units[unit]
        self.emit("released", unit, h.token, mono, reason)
        self.wake.set()  # start what waited for this stop

    def emit(self, event, unit, token, mono, reason=None):
        if not self.args.events:
            return
        e = {"event": event, "unit": unit, "member": self.id, "generation": token, "unix_us": wall_us(mono)}
        if reason:
            e["reason"] = reason
        sys.stdout.write(json.dumps(e, separators=(",", ":")) + "\n")
        sys.stdout.flush()

    # Step 1: pings, as calls or as beats on one stream (a beat is a ping).
    def admit(self, now):
        """A ping arrived at `now`: None to answer it OK, else why not."""
        self.check()
        if self.fenced_at is not None:
            if self.last_read is None or self.last_read <= self.fenced_at:
                return "fenced: waiting for a read"
            log.info("unfenced: a read succeeded and a ping came")
            self.fenced_at = None
            self.wake.set()
        self.last_ping = now
        return None

    async def ping(self, _request, context):
        refused = self.admit(time.monotonic())
        if refused:
            await context.abort(grpc.StatusCode.UNAVAILABLE, refused)
        return b""

    async def beats(self, requests, context):
        # A beat is a ping: answered with its seq, or, when a ping would be
        # refused, the stream ends UNAVAILABLE (the holder then calls Ping).
        # The headers go at once: the holder waits for them before its first
        # beat (grpcio would otherwise send them with the first answer).
        await context.send_initial_metadata(())
        async for beat in requests:
            refused = self.admit(time.monotonic())
            if refused:
                await context.abort(grpc.StatusCode.UNAVAILABLE, refused)
            yield encode_beat(decode_beat(beat))

    async def health(self, _request, _context):
        return NOT_SERVING if self.fenced_at is not None or self.leaving else SERVING

    # Steps 3 and 4: follow the row.
    async def read(self):
        sent = time.monotonic()
        if sent >= self.ask_again_at:  # (an ACL fixed meanwhile takes effect)
            self.ask_client = self.ask_server = True
        try:
            async with self.rows.pipeline(transaction=True) as p:
                p.hget(self.args.table, self.id).hget(self.meta, "generation")
                if self.ask_client:
                    p.client_id()
                    if self.ask_server:
                        p.info("server")
                got = await p.execute()
        except RedisError as e:
            # Refused: not permitted (NOPERM), or renamed or disabled (redis-py
            # raises the queued "unknown command" error itself). Anything else
            # is a failed read.
            refused = isinstance(e, (NoPermissionError, ExecAbortError)) or any(
                w in str(e) for w in ("unknown command", "unknown subcommand"))
            if not refused:
                raise
            if self.ask_client and self.ask_server and ("(INFO" in str(e) or "'info'" in str(e)):
                # (redis-py names the refused command: "Command # 4 (INFO server) ...".)
                log.warning("INFO is not permitted (%s): reports name the connection by client id "
                            "alone, so after a Redis failover a refusal of this address may wait "
                            "for its deadline", e)
                self.ask_server = False
                self.ask_again_at = time.monotonic() + 60
            elif self.ask_client:
                log.warning("CLIENT ID is not permitted (%s): reports name no connection, so a "
                            "refusal of this address will not move its units before its deadline", e)
                self.ask_client = False
                self.ask_again_at = time.monotonic() + 60
            else:
                raise
            return await self.read()
        client = None
        if self.ask_client:
            client = (got[2], run_id(got[3]) if self.ask_server else None)
        return sent, got[0], int(got[1] or 0), client

    async def apply(self, sent, row, g, client):
        self.check()
        self.client = client
        if self.units and client != self.reported_client:
            # Reconnected: the holder asks Redis about the reported connection
            # only, so no read on another one may extend a hold. Report, read again.
            log.info("redis connection %s, reported %s: reporting it", client, self.reported_client)
            await self.report()
            self.wake.set()
            return
        wanted = [u for u in (row or "").split(",") if u]
        if g < self.applied:
            # Redis lost writes (a lagging replica promoted, or its data): the
            # lower generation's row may hold units those writes gave others.
            # Ignored until the holder, reading our report, writes above it.
            log.warning("generation %d after %d: ignored", g, self.applied)
            self.ignored = True
            return
        self.last_read = sent
        for u, h in self.units.items():
            if u in wanted and h.stopping is None:
                h.seen = sent
        await asyncio.gather(*[self.stop(u) for u in list(self.units) if u not in wanted])
        # Acknowledge what took units away (or changed the draining flag or the
        # connection): a generation that only adds units needs no acknowledgement.
        lost = self.row is None or any(u not in wanted for u in self.row)
        # Tables not processed (a gap in the numbering, rows ignored as
        # lower) may have given this worker units and taken them again: the
        # holder waits for that acknowledgement too.
        missed = g > self.applied + 1 or (self.ignored and g != self.applied)
        if g != self.applied:
            self.ignored = False
        self.applied = g
        drained = self.draining and row == ""  # its end needs this very generation acknowledged
        changed = self.reported_draining != self.draining or self.reported_client != client
        if lost or missed or changed or (drained and self.reported != self.report_value()):
            await self.report()
        self.row = wanted  # (after the report: if it failed, the next read reports)
        if self.draining:
            if drained and not self.units:
                await self.finish("drained")
            return
        if self.fenced_at is not None or any(h.stopping for h in self.units.values()):
            return  # (a thawed process prints every fenced release before anything else)
        if self.hold_end(sent) - self.budget <= time.monotonic():
            return
        for u in wanted:
            if u not in self.units:
                self.units[u] = Held(g, sent)
                self.app.start(u, g, self.holds)
                self.emit("acquired", u, g, time.monotonic())

    def report_value(self):
        client = ""
        if self.client is not None:
            client = " %d" % self.client[0] + ("" if self.client[1] is None else " " + self.client[1])
        return "%d %d %d 1%s" % (self.applied, self.draining, self.args.deadline_ms, client)

    async def report(self, again=False):
        """Writes and announces a report, or (again) writes the last one again."""
        written = (self.reported if again else self.report_value(), self.draining, self.client)
        p = self.r.pipeline(transaction=False).hset(self.members, self.id, written[0])
        await (p if again else p.publish(self.acked, self.id)).execute()
        if not again:  # (a signal may change self.draining meanwhile)
            self.reported, self.reported_draining, self.reported_client = written

    async def follow(self):
        next_register = 0.0
        while not self.leaving:
            try:
                await self.apply(*await self.read())
                now = time.monotonic()
                if now >= next_register and not self.leaving:  # step 2, after the first report
                    if await self.r.eval(REGISTER, 1, self.args.services_key, self.id):
                        log.info("registered in %s", self.args.services_key)
                    if self.reported:
                        await self.report(again=True)  # heals a Redis that lost it
                    next_register = now + self.args.reregister_ms / 1000
            except (RedisError, OSError, ValueError) as e:
                log.warning("redis: %s", e)
            try:
                await asyncio.wait_for(self.wake.wait(), self.args.poll_ms / 1000)
            except asyncio.TimeoutError:
                pass
            self.wake.clear()

    async def listen(self):
        while True:
            ps = self.r.pubsub()
            try:
                await ps.subscribe(self.changed)
                self.wake.set()
                async for m in ps.listen():
                    if m["type"] == "message":
                        self.wake.set()
            except (RedisError, OSError) as e:
                log.warning("subscription: %s", e)
            finally:
                await ps.aclose()
            await asyncio.sleep(0.5)

    # Step 7: measured load.
    def report_load(self, unit, load):
        """The application's measurement of `unit`'s load (any number from 0 to 1e9)."""
        return self.book.sample(unit, load, time.monotonic())

    async def loads(self):
        """The stand-in application measures --unit-load's units it holds; the smoothed loads are written."""
        measured = dict(args_pair(x) for x in self.args.unit_load)
        next_write = time.monotonic() + self.args.load_report_ms / 1000
        while not self.leaving:
            for u in list(self.units):
                load = measured.get(u, self.args.default_load)
                if load is not None and self.holds(u):
                    self.report_load(u, load)
            if time.monotonic() >= next_write and self.book.units:
                owned = [u for u in self.units if u in self.book.units]
                for u in list(self.book.units):
                    if u not in self.units:
                        del self.book.units[u]
                try:
                    await self.r.hset(self.loads_key, self.id, self.book.encode(owned, int(time.time() * 1000)))
                except (RedisError, OSError) as e:
                    log.warning("could not write the measured loads: %s", e)
                next_write = time.monotonic() + self.args.load_report_ms / 1000
            await asyncio.sleep(min(1.0, self.args.load_report_ms / 1000))

    # Step 6: drain.
    def on_signal(self):
        if self.draining:
            asyncio.ensure_future(self.finish("second signal"))
            return
        log.info("draining")
        self.draining = True
        self.wake.set()
        asyncio.get_running_loop().call_later(self.args.drain_timeout, lambda: asyncio.ensure_future(self.finish("drain timeout")))

    async def finish(self, why):
        if self.leaving:
            return
        self.leaving = True
        log.info("leaving (%s)", why)
        await asyncio.gather(*[self.stop(u) for u in list(self.units)])
        try:
            await self.r.lrem(self.args.services_key, 0, self.id)
            await self.r.hdel(self.members, self.id)
            await self.r.hdel(self.loads_key, self.id)
        except (RedisError, OSError) as e:
            log.warning("could not deregister: %s", e)
        self.done.set()


async def main(args):
    opts = dict(decode_responses=True, socket_timeout=2, socket_connect_timeout=2)
    r = aioredis.from_url(args.redis_url, **opts)
    # Row reads go over one connection, the one CLIENT ID names (it changes on a reconnect).
    rows = aioredis.Redis(connection_pool=aioredis.BlockingConnectionPool.from_url(
        args.redis_url, max_connections=1, **opts))
    server = grpc.aio.server()
    port = server.add_insecure_port(args.listen)
    host = args.listen.rsplit(":", 1)[0]
    ident = args.advertise or "%s:%d" % (host, port)
    if not args.advertise and host in ("0.0.0.0", "[::]", ""):
        sys.exit("listening on all interfaces: give --advertise")
    w = Worker(args, r, rows, ident)
    unary = grpc.unary_unary_rpc_method_handler
    server.add_generic_rpc_handlers((
        grpc.method_handlers_generic_handler("proto.GRPCPinger", {"Ping": unary(w.ping)}),
        grpc.method_handlers_generic_handler(
            "proto.Liveness", {"Beats": grpc.stream_stream_rpc_method_handler(w.beats)}),
        grpc.method_handlers_generic_handler("grpc.health.v1.Health", {"Check": unary(w.health)}),
    ))
    await server.start()
    log.info("worker %s serving; deadline %d ms", ident, args.deadline_ms)
    loop = asyncio.get_running_loop()
    for s in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(s, w.on_signal)
    tasks = [asyncio.create_task(c) for c in (w.follow(), w.listen(), w.watchdog(), w.loads())]
    await w.done.wait()
    for t in tasks:
        t.cancel()
    await server.stop(None)
    await rows.aclose()
    await r.aclose()
    log.info("worker %s exited", ident)


def args_pair(text):
    """UNIT=LOAD (the last '=' separates them), LOAD from 0 to 1e9."""
    unit, _, load = text.rpartition("=")
    value = float(load)
    if not unit or not (0 <= value <= 1e9):
        raise ValueError(text)
    return unit, value


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--redis-url", default="redis://127.0.0.1:6379")
    p.add_argument("--services-key", default="sys-robots-list")
    p.add_argument("--table", default="sys-matching-table")
    p.add_argument("--listen", default="127.0.0.1:0", help="host:port to serve gRPC on")
    p.add_argument("--advertise", help="the address the distributor dials (default: --listen as bound)")
    p.add_argument("--deadline-ms", type=int, default=10000, help="fencing deadline (at most 300000)")
    p.add_argument("--drain-timeout", type=float, default=30.0, help="seconds")
    p.add_argument("--work-ms", type=int, default=0, help="how long stopping a unit takes")
    p.add_argument("--poll-ms", type=int, default=1000, help="row polling, besides notifications")
    p.add_argument("--reregister-ms", type=int, default=5000)
    p.add_argument("--events", action="store_true", help="JSON ownership events on stdout")
    p.add_argument("--unit-load", action="append", default=[], metavar="UNIT=LOAD",
                   help="measure this load for UNIT while holding it (-balance load); repeatable")
    p.add_argument("--default-load", type=float, metavar="LOAD",
                   help="measure this load for every unit not in --unit-load (default: none)")
    p.add_argument("--load-half-life", type=float, default=60.0, help="seconds; 0: the last sample alone")
    p.add_argument("--load-report-ms", type=int, default=10000, help="how often the smoothed loads are written")
    args = p.parse_args()
    try:
        for x in args.unit_load:
            args_pair(x)
        if args.default_load is not None and not 0 <= args.default_load <= 1e9:
            raise ValueError(args.default_load)
    except ValueError:
        p.error("--unit-load takes UNIT=LOAD, and --default-load LOAD, with LOAD a number from 0 to 1e9")
    if args.load_report_ms <= 0:
        p.error("--load-report-ms must be positive")
    if not 0 < args.deadline_ms <= 300000 or args.work_ms / 1000 + 0.1 >= args.deadline_ms / 2000:
        p.error("need 0 < --deadline-ms <= 300000 and --work-ms + 100 below half of it")
    return args


if __name__ == "__main__":
    arguments = parse()
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(levelname)s worker: %(message)s")
    asyncio.run(main(arguments))
