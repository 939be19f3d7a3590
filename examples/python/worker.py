#!/usr/bin/env python3
"""The reference worker of distributor's handoff protocol, in Python: a thin
command line over the `distributor_member` package (python/ in this
repository), which follows docs/protocol.md ("Protocol, for workers in any
language") step by step: it serves the ping (and beats, and the health
service), registers, follows its row, acknowledges the generations that take
units away, fences itself when it loses contact, drains on SIGTERM/SIGINT
(a second signal stops at once), and writes measured loads.

The stand-in application runs one task per unit that checks its hold before
every step; stopping a unit takes --work-ms (the fence margin is --work-ms +
100 ms: units are stopped that long before their hold ends). With
--unit-load UNIT=LOAD (repeatable) and --default-load LOAD, it measures that
load once a second for each unit it holds (`Member.report_load`); the
smoothed loads are written every --load-report-ms.

It is configured as every member is, by the variables of the README's member
table (`MemberOptions.from_env`: REDIS_URL, REDIS_SENTINEL_MASTER, REDIS_USER,
REDIS_PASS, MEMBER_WEIGHT, MEMBER_FENCE_MARGIN, ...); a flag given wins over its
variable. With Redis Sentinel:
  REDIS_SENTINEL_MASTER=mymaster REDIS_URL=redis://s1:26379,redis://s2:26379 \
      python examples/python/worker.py --listen 127.0.0.1:7001

A worker that cannot use Redis does not run on: when its member is not ready
--ready-timeout seconds (30) after the start (Redis unreachable, or
misconfigured: sentinels without REDIS_SENTINEL_MASTER, cluster mode against a
plain node...), or when the member stops by itself, it stops and exits 1, its
last line on stderr saying why ("worker: not ready within 30 s: cannot use
Redis at redis://10.0.0.5:6379: ..."). Redis lost later on is ridden out (the
member fences itself and retries). An invalid flag or variable exits 2, naming
it; a drain (SIGTERM) exits 0.

With --events, stdout carries one JSON object per line per ownership change
and nothing else (logs go to stderr); `generation` is the unit's fencing token:
  {"event":"acquired","unit":"u","member":"host:port","generation":7,"unix_us":T}
  {"event":"released",...,"unix_us":T}  (+ "reason":"fenced" when the hold ended
  first; then unix_us is the earlier of the stop's end and the hold's end)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time
from collections.abc import Callable
from typing import Any

try:
    import distributor_member as dm
except ImportError:  # run from a checkout without the package installed
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python", "src"))
    import distributor_member as dm

log = logging.getLogger("worker")


def wall_us(mono: float) -> int:
    """A time.monotonic() instant as Unix microseconds."""
    return time.time_ns() // 1000 - int((time.monotonic() - mono) * 1e6)


class Work:
    """The application: one task per unit, checking its hold before every step."""

    def __init__(self, stop_ms: int) -> None:
        self.stop_s = stop_ms / 1000
        self.tasks: dict[str, asyncio.Task[None]] = {}

    async def acquired(self, hold: dm.Hold) -> None:
        self.tasks[hold.unit] = asyncio.create_task(self.run(hold))

    async def run(self, hold: dm.Hold) -> None:
        while True:
            await asyncio.sleep(0.05)
            if not hold.is_held():  # check the hold before every side effect
                return
            # ... one step of work on hold.unit, writes fenced downstream by hold.token

    async def revoked(self, hold: dm.Hold, _reason: dm.Reason) -> None:
        task = self.tasks.pop(hold.unit, None)
        if task is not None:
            task.cancel()
            # Its end, before returning (gather: its cancellation is not raised here).
            await asyncio.gather(task, return_exceptions=True)
        await asyncio.sleep(self.stop_s)  # flushing, closing: still touching the unit


async def print_events(member: dm.Member, events: dm.EventStream) -> None:
    async for e in events:
        if isinstance(e, dm.Acquired):
            out = {"event": "acquired", "unit": e.unit, "member": member.id, "generation": e.token,
                   "unix_us": wall_us(e.at)}
        elif isinstance(e, dm.Released):
            fenced = e.reason is dm.Reason.FENCED or e.late
            at = min(e.at, e.hold_end) if fenced and e.hold_end is not None else e.at
            out = {"event": "released", "unit": e.unit, "member": member.id, "generation": e.token,
                   "unix_us": wall_us(at)}
            if fenced:
                out["reason"] = "fenced"
        else:
            continue
        sys.stdout.write(json.dumps(out, separators=(",", ":")) + "\n")
        sys.stdout.flush()


async def measure(member: dm.Member, unit_load: dict[str, float], default: float | None) -> None:
    """The stand-in application measures the load of each unit it holds, once a second."""
    while True:
        for hold in member.owned():
            load = unit_load.get(hold.unit, default)
            if load is not None and hold.is_held():
                member.report_load(hold.unit, load)
        await asyncio.sleep(1.0)


class WorkerMember(dm.Member):
    """The package's member, noting whether it was asked to stop
    (dm.run_until_signal drains it on a signal, and stops it on a second):
    a member that ends without being asked failed."""

    asked_to_stop = False

    async def drain(self) -> dm.Drained:
        self.asked_to_stop = True
        return await super().drain()

    async def shutdown(self) -> dm.Drained:
        self.asked_to_stop = True
        return await super().shutdown()


async def redis_problem(opts: dm.MemberOptions) -> str | None:
    """Reads the table's generation once, connected as the member connects
    (one node, a Redis Cluster, or the master the Sentinels name): None when
    Redis answers, else why not, in one line that names the URLs without
    their passwords."""
    # The member's own connection code, so that the answer is the member's
    # (a private module: an example may use it, an application should not).
    from distributor_member._redis import Clients, Keys

    clients: Clients | None = None
    try:
        clients = Clients(opts)
        await asyncio.wait_for(clients.main.execute_command("HGET", Keys.of(opts.table_key).meta, "generation"),
                               3 * opts.redis_timeout)
        return None
    except Exception as e:  # whatever it is, it is the reason
        problem = f"{type(e).__name__}: {e}" if str(e) else f"{type(e).__name__} (no answer)"
    finally:
        if clients is not None:
            await clients.aclose()
    urls = opts.redacted_redis_url()
    if opts.redis_sentinel_master:
        what = f"the master {opts.redis_sentinel_master!r} through the Sentinels {urls}"
    elif opts.cluster():
        what = f"the Redis Cluster {urls}"
    else:
        what = f"Redis at {urls}"
    hint = ""
    if not opts.redis_sentinel_master and not opts.redis_cluster and len(opts.redis_urls()) > 1:
        hint = " (several URLs without REDIS_SENTINEL_MASTER are Redis Cluster seed nodes)"
    return " ".join(f"cannot use {what}: {problem}{hint}".split())


async def failure(member: WorkerMember, running: asyncio.Task[dm.Drained], ready_timeout: float) -> str | None:
    """Waits until the member ends on a signal (None), or fails: not ready
    within ready_timeout seconds (0: no bound), or ended by itself (why)."""
    try:
        await member.ready(timeout=ready_timeout or None)
        ready = True
    except asyncio.TimeoutError:
        if not member.asked_to_stop:  # (else it drains: let it)
            return f"not ready within {ready_timeout:g} s"
        ready = False
    except dm.MemberError:
        ready = False  # it ended before it was ready: on a signal, or by itself
    await asyncio.wait({running})
    if member.asked_to_stop:
        return None
    return "the member stopped by itself" if ready else "the member stopped before it was ready"


async def main(args: argparse.Namespace, opts: dm.MemberOptions) -> int:
    work = Work(args.work_ms or 0)
    member = WorkerMember(opts, acquired=work.acquired, revoked=work.revoked)
    events = member.events() if args.events else None
    await member.start()
    tasks = []
    if events is not None:
        tasks.append(asyncio.create_task(print_events(member, events)))
    if args.unit_load or args.default_load is not None:
        tasks.append(asyncio.create_task(measure(member, dict(args.unit_load), args.default_load)))
    running = asyncio.create_task(dm.run_until_signal(member))
    why = await failure(member, running, args.ready_timeout)
    # Asked before the member is stopped: its reason is the current one.
    problem = await redis_problem(opts) if why is not None else None
    if why is not None and not member.closed:
        log.error("%s: stopping", why)
        await member.shutdown()
    how = await running
    if tasks and events is not None:
        await asyncio.wait_for(asyncio.shield(tasks[0]), 5)  # every event printed (it ends after Left)
    for t in tasks:
        t.cancel()
    log.info("worker %s exited (%s)", member.id, how.value)
    if why is not None:
        # One line, last on stderr: what an operator or a supervisor reads.
        reason = f"{why}: {problem}" if problem else f"{why} (Redis answers; see the log above)"
        print(f"worker: {reason}", file=sys.stderr, flush=True)
        return 1
    return 0


def unit_load(text: str) -> tuple[str, float]:
    """UNIT=LOAD (the last '=' separates them), LOAD from 0 to 1e9."""
    unit, _, load = text.rpartition("=")
    value = float(load)
    if not unit or not (0 <= value <= 1e9):
        raise ValueError(text)
    return unit, value


#: The flags that set a field of MemberOptions: (flag, field, value of the flag → value of the field).
FLAGS: list[tuple[str, str, Callable[[Any], Any]]] = [
    ("--redis-url", "redis_url", str),
    ("--redis-sentinel-master", "redis_sentinel_master", str),
    ("--services-key", "services_key", str),
    ("--table", "table_key", str),
    ("--listen", "listen", str),
    ("--advertise", "advertise", str),
    ("--deadline-ms", "deadline", lambda ms: ms / 1000),
    ("--drain-timeout", "drain_timeout", float),
    ("--poll-ms", "poll_interval", lambda ms: ms / 1000),
    ("--reregister-ms", "reregister_interval", lambda ms: ms / 1000),
    ("--load-half-life", "load_half_life", float),
    ("--load-report-ms", "load_report_interval", lambda ms: ms / 1000),
]


class FlagError(ValueError):
    """A flag's value that the options refuse: the message names the flag."""


def member_options(args: argparse.Namespace) -> dm.MemberOptions:
    """The environment as MemberOptions.from_env reads it, with the flags
    given over it. The fence margin is --work-ms + 100 ms when --work-ms is
    given or MEMBER_FENCE_MARGIN is unset. Raises FlagError for a flag's bad
    value, dm.OptionsError (naming the variable) for a variable's."""
    given: dict[str, tuple[str, Any, Any]] = {}  # field -> (flag, as given, value)
    for flag, field, convert in FLAGS:
        raw = getattr(args, flag[2:].replace("-", "_"))
        if raw is not None:
            given[field] = (flag, raw, convert(raw))
    if args.work_ms is not None or not os.environ.get("MEMBER_FENCE_MARGIN"):
        work_ms = args.work_ms or 0
        given["fence_margin"] = ("--work-ms", work_ms, work_ms / 1000 + 0.1)
    try:
        return dm.MemberOptions.from_env(**{field: value for field, (_, _, value) in given.items()})
    except dm.OptionsError as e:
        if e.env is not None or e.field not in given:
            raise
        flag, raw, _ = given[e.field]
        if e.field == "fence_margin":
            raise FlagError(f"{flag} {raw}: the fence margin, {flag} + 100 ms, {e.reason}") from None
        raise FlagError(f"{flag} {raw!r}: {e.reason}") from None


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0],
                                epilog="Unset flags take the member variables (MemberOptions.from_env) or their "
                                       "defaults. SIGTERM/SIGINT drains, a second signal stops at once.")
    p.add_argument("--redis-url", help="Redis URL; several comma-separated: Redis Cluster seeds, or the Sentinels "
                                       "with --redis-sentinel-master (env REDIS_URL; default redis://127.0.0.1:6379)")
    p.add_argument("--redis-sentinel-master", help="Redis Sentinel: the master's name; --redis-url then lists "
                                                   "the Sentinels (env REDIS_SENTINEL_MASTER)")
    p.add_argument("--services-key", help="the services list to join (env MEMBER_SERVICES_KEY; default sys-robots-list)")
    p.add_argument("--table", help="the matching table key (env DISTRIBUTION_NAMESPACE; default sys-matching-table)")
    p.add_argument("--listen", help="host:port to serve gRPC on (env MEMBER_LISTEN; default 127.0.0.1:0)")
    p.add_argument("--advertise", help="the address the distributor dials (env MEMBER_ADVERTISE; default: --listen as bound)")
    p.add_argument("--deadline-ms", type=int, help="fencing deadline, at most 300000 (env MEMBER_DEADLINE; default 10 s)")
    p.add_argument("--drain-timeout", type=float, help="seconds (env MEMBER_DRAIN_TIMEOUT; default 30)")
    p.add_argument("--work-ms", type=int, help="how long stopping a unit takes (default 0); the fence margin is "
                                              "this + 100 ms (default: MEMBER_FENCE_MARGIN, else 100 ms)")
    p.add_argument("--poll-ms", type=int, help="row polling, besides notifications (env MEMBER_POLL_INTERVAL; default 1 s)")
    p.add_argument("--reregister-ms", type=int, help="(env MEMBER_REREGISTER_INTERVAL; default 5 s)")
    p.add_argument("--events", action="store_true", help="JSON ownership events on stdout")
    p.add_argument("--unit-load", action="append", default=[], metavar="UNIT=LOAD",
                   help="measure this load for UNIT while holding it (-balance load); repeatable")
    p.add_argument("--default-load", type=float, metavar="LOAD",
                   help="measure this load for every unit not in --unit-load (default: none)")
    p.add_argument("--load-half-life", type=float,
                   help="seconds; 0: the last sample alone (env MEMBER_LOAD_HALF_LIFE; default 60)")
    p.add_argument("--load-report-ms", type=int,
                   help="how often the smoothed loads are written (env MEMBER_LOAD_REPORT_INTERVAL; default 10 s)")
    p.add_argument("--ready-timeout", type=float, default=30.0,
                   help="seconds: exit 1 when the member is not ready this long after the start (Redis "
                        "unreachable or misconfigured); 0: wait for ever (default 30)")
    args = p.parse_args()
    try:
        args.unit_load = [unit_load(x) for x in args.unit_load]
        if args.default_load is not None and not 0 <= args.default_load <= 1e9:
            raise ValueError(args.default_load)
    except ValueError:
        p.error("--unit-load takes UNIT=LOAD, and --default-load LOAD, with LOAD a number from 0 to 1e9")
    if args.load_report_ms is not None and args.load_report_ms <= 0:
        p.error("--load-report-ms must be positive")
    if args.deadline_ms is not None and not 0 < args.deadline_ms <= 300000:
        p.error("need 0 < --deadline-ms <= 300000")
    if args.work_ms is not None and args.work_ms < 0:
        p.error("--work-ms must not be negative")
    if not args.ready_timeout >= 0:
        p.error("--ready-timeout must not be negative")
    return args


if __name__ == "__main__":
    arguments = parse()
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(levelname)s worker: %(message)s")
    try:
        options = member_options(arguments)
    except (FlagError, dm.OptionsError) as e:
        sys.stderr.write(f"worker: {e}\n")
        sys.exit(2)
    try:
        sys.exit(asyncio.run(main(arguments, options)))
    except (dm.OptionsError, dm.MemberError) as e:
        sys.exit(f"worker: {e}")
