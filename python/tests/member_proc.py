"""A member in its own process, configured by the environment
(MemberOptions.from_env): prints its id, then its events as JSON lines, and
drains on SIGTERM (run_until_signal). Exits 0 once it left."""

from __future__ import annotations

import asyncio
import json
import logging
import sys

import distributor_member as dm


async def main() -> int:
    member = dm.Member(dm.MemberOptions.from_env())
    events = member.events()
    await member.start()

    def say(**fields: object) -> None:
        sys.stdout.write(json.dumps(fields) + "\n")
        sys.stdout.flush()

    say(event="started", id=member.id)

    async def report() -> None:
        async for e in events:
            if isinstance(e, (dm.Acquired, dm.Released)):
                say(event=type(e).__name__.lower(), unit=e.unit, token=e.token)
            elif isinstance(e, dm.Left):
                say(event="left", how=e.how.value)
            else:
                say(event=type(e).__name__.lower())

    printer = asyncio.create_task(report())
    await dm.run_until_signal(member)
    await asyncio.wait_for(printer, 5)
    return 0


if __name__ == "__main__":
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    sys.exit(asyncio.run(main()))
