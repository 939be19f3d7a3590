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


async def main(args: argparse.Namespace) -> int:
    opts = dm.MemberOptions(
        redis_url=args.redis_url,
        services_key=args.services_key,
        table_key=args.table,
        listen=args.listen,
        advertise=args.advertise,
        deadline=args.deadline_ms / 1000,
        poll_interval=args.poll_ms / 1000,
        reregister_interval=args.reregister_ms / 1000,
        drain_timeout=args.drain_timeout,
        fence_margin=args.work_ms / 1000 + 0.1,
        load_half_life=args.load_half_life,
        load_report_interval=args.load_report_ms / 1000,
    )
    work = Work(args.work_ms)
    member = dm.Member(opts, acquired=work.acquired, revoked=work.revoked)
    events = member.events() if args.events else None
    await member.start()
    tasks = []
    if events is not None:
        tasks.append(asyncio.create_task(print_events(member, events)))
    if args.unit_load or args.default_load is not None:
        tasks.append(asyncio.create_task(measure(member, dict(args.unit_load), args.default_load)))
    how = await dm.run_until_signal(member)
    if tasks and events is not None:
        await asyncio.wait_for(asyncio.shield(tasks[0]), 5)  # every event printed (it ends after Left)
    for t in tasks:
        t.cancel()
    log.info("worker %s exited (%s)", member.id, how.value)
    return 0


def unit_load(text: str) -> tuple[str, float]:
    """UNIT=LOAD (the last '=' separates them), LOAD from 0 to 1e9."""
    unit, _, load = text.rpartition("=")
    value = float(load)
    if not unit or not (0 <= value <= 1e9):
        raise ValueError(text)
    return unit, value


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
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
        args.unit_load = [unit_load(x) for x in args.unit_load]
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
    try:
        sys.exit(asyncio.run(main(arguments)))
    except (dm.OptionsError, dm.MemberError) as e:
        sys.exit(f"worker: {e}")
