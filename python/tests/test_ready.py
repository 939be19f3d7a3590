"""``Member.ready(timeout)`` says, when it times out, what it waited for and
what is missing, never a password."""

from __future__ import annotations

import asyncio

import pytest

import distributor_member as dm
from conftest import SERVICES, Fleet, free_port, run


def test_a_ready_timeout_says_what_is_missing_when_redis_is_unreachable() -> None:
    async def scenario() -> None:
        o = dm.MemberOptions(
            redis_url=f"redis://member:Url-Secret@127.0.0.1:{free_port()}", redis_password="Option-Secret",
            table_key="ready-table", services_key="ready-services", deadline=1.0, poll_interval=0.2,
            reregister_interval=0.5, redis_timeout=0.3, listen="127.0.0.1:0",
        )
        m = dm.Member(o)
        await m.start()
        try:
            # Longer than the deadline minus the fence margin: fenced by then.
            with pytest.raises(dm.ReadyTimeout) as caught:
                await m.ready(1.3)
            e = caught.value
            assert isinstance(e, TimeoutError) and isinstance(e, asyncio.TimeoutError)
            text = str(e)
            for part in (f"member {m.id} not ready within 1.3 s", "registered in 'ready-services'",
                         "first read of 'ready-table'", "redis://member:***@127.0.0.1:",
                         "not registered in 'ready-services'", "no read of the table 'ready-table' processed",
                         "no report written", "fenced (out of contact: last successful read of redis never, "
                         "last ping never)", "last redis error", "ConnectionError"):
                assert part in text, (part, text)
            assert "Secret" not in text, text
        finally:
            await asyncio.wait_for(m.shutdown(), 10)

    run(scenario(), 30)


def test_a_ready_timeout_names_the_registration_that_redis_refuses(fleet: Fleet) -> None:
    # The ACL lets the member read its row and report, not register (EVAL).
    fleet.r.acl_setuser("member", enabled=True, passwords=["+Member-Secret"], keys=["*"], channels=["*"],
                        categories=["+@all"], commands=["-eval"])

    async def scenario() -> None:
        o = dm.MemberOptions.from_env({"REDIS_URL": fleet.redis.url, "REDIS_USER": "member",
                                       "REDIS_PASS": "Member-Secret", "MEMBER_DEADLINE": "10s",
                                       "MEMBER_POLL_INTERVAL": "200ms", "MEMBER_REREGISTER_INTERVAL": "200ms",
                                       "MEMBER_SERVICES_KEY": SERVICES})
        m = dm.Member(o)
        await m.start()
        try:
            with pytest.raises(TimeoutError) as caught:
                await m.ready(1.0)
            text = str(caught.value)
            assert f"not registered in {SERVICES!r}" in text, text
            assert "no read of the table" not in text and "no report written" not in text, text
            assert "fenced" not in text, text
            assert "NoPermissionError" in text and "eval" in text.lower(), text
            assert "Member-Secret" not in text, text
        finally:
            await asyncio.wait_for(m.shutdown(), 10)

    run(scenario(), 30)
