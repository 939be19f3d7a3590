"""shutdown(), drain(), wait_closed() and ``async with`` return once the
member's task has ended, whatever ended it. No daemon and no redis-server:
the member points at a port nobody listens on (its Redis calls fail at once
and are retried), which is all it takes to start, stop and leave. Every await
is bounded: a regression fails in seconds instead of hanging the suite."""

from __future__ import annotations

import asyncio

import pytest

import distributor_member as dm
from distributor_member import member as member_module
from conftest import free_port, run

BOUND = 10.0


def options() -> dm.MemberOptions:
    return dm.MemberOptions(
        redis_url=f"redis://127.0.0.1:{free_port()}", table_key="shutdown-table", services_key="shutdown-services",
        deadline=2.0, poll_interval=0.2, reregister_interval=1.0, redis_timeout=0.5, listen="127.0.0.1:0",
    )


def task(m: dm.Member, name: str) -> asyncio.Task[object]:
    found = [t for t in asyncio.all_tasks() if t.get_name() == f"distributor-member-{name}"]
    assert len(found) == 1, found
    return found[0]


async def all_ended(m: dm.Member) -> None:
    """Every task of the member has ended (bounded)."""
    tasks = m._tasks
    _, pending = await asyncio.wait(tasks, timeout=BOUND)
    assert not pending, [t.get_name() for t in pending]


def test_wait_event_lets_a_cancellation_through() -> None:
    # The race of asyncio.wait_for before Python 3.12: the event is set, the
    # inner wait has returned, and the cancellation arrives before wait_for
    # resumed; wait_for then returns the result and the cancellation is lost.
    async def scenario() -> None:
        event = asyncio.Event()
        waiting = asyncio.ensure_future(member_module._wait_event(event, BOUND))
        await asyncio.sleep(0)  # waiting on the event now
        event.set()
        await asyncio.sleep(0)  # the inner wait has returned; the waiter not resumed yet
        waiting.cancel()
        await asyncio.wait({waiting}, timeout=BOUND)
        assert waiting.cancelled()

    run(scenario(), 30)


def test_shutdown_returns_when_a_wake_races_the_close(monkeypatch: pytest.MonkeyPatch) -> None:
    # The hang seen in the suite: the watchdog is woken (a ping, a unit
    # released) just before the closing member cancels it. With
    # asyncio.wait_for around its wait the cancellation was swallowed, the
    # watchdog ran on, and the member waited for it forever in shutdown().
    async def scenario() -> None:
        m = dm.Member(options())
        leave = m._leave

        async def leave_then_wake_the_watchdog() -> None:
            await leave()
            assert m._watch_wake is not None
            m._watch_wake.set()
            await asyncio.sleep(0)  # the watchdog's wait has returned, the watchdog not resumed

        monkeypatch.setattr(m, "_leave", leave_then_wake_the_watchdog)
        await m.start()
        await asyncio.sleep(0.3)
        assert await asyncio.wait_for(m.shutdown(), BOUND) is dm.Drained.STOPPED
        assert m.closed
        await all_ended(m)

    run(scenario(), 30)


def test_close_outlasts_a_task_that_swallows_its_cancellation(monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> None:
        m = dm.Member(options())
        swallowed = 0

        async def stubborn_watchdog() -> None:
            nonlocal swallowed
            while True:
                try:
                    await asyncio.sleep(0.05)
                except asyncio.CancelledError:
                    swallowed += 1
                    if swallowed > 2:
                        raise

        monkeypatch.setattr(m, "_watchdog", stubborn_watchdog)
        await m.start()
        await asyncio.sleep(0.2)
        assert await asyncio.wait_for(m.shutdown(), BOUND) is dm.Drained.STOPPED
        assert swallowed == 3
        await all_ended(m)

    run(scenario(), 30)


@pytest.mark.parametrize("when", ["before it ran", "while it runs", "while it closes"])
def test_shutdown_returns_when_the_members_task_is_cancelled(when: str, monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> None:
        m = dm.Member(options())
        closing = asyncio.Event()
        if when == "while it closes":
            leave = m._leave

            async def slow_leave() -> None:
                await leave()
                closing.set()
                await asyncio.sleep(BOUND)

            monkeypatch.setattr(m, "_leave", slow_leave)
        events = m.events()
        await m.start()
        follow = task(m, "follow")
        if when == "before it ran":
            follow.cancel()
        elif when == "while it runs":
            await asyncio.sleep(0.3)
            follow.cancel()
        else:
            m._stop("stopping")
            await asyncio.wait_for(closing.wait(), BOUND)
            follow.cancel()
        assert await asyncio.wait_for(m.wait_closed(), BOUND) is dm.Drained.STOPPED
        assert await asyncio.wait_for(m.shutdown(), BOUND) is dm.Drained.STOPPED
        assert await asyncio.wait_for(m.drain(), BOUND) is dm.Drained.STOPPED
        await asyncio.wait_for(m.__aexit__(None, None, None), BOUND)
        await all_ended(m)
        assert follow.cancelled()
        seen = []

        async def collect() -> None:
            async for e in events:
                seen.append(e)

        await asyncio.wait_for(collect(), BOUND)
        assert isinstance(seen[-1], dm.Left)

    run(scenario(), 30)


def test_shutdown_returns_when_closing_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> None:
        m = dm.Member(options())
        await m.start()
        assert m._clients is not None
        clients = m._clients

        async def broken_aclose() -> None:
            await clients.aclose()
            raise RuntimeError("closing failed")

        monkeypatch.setattr(clients, "aclose", broken_aclose)
        await asyncio.sleep(0.2)
        assert await asyncio.wait_for(m.shutdown(), BOUND) is dm.Drained.STOPPED
        await all_ended(m)

    run(scenario(), 30)


def test_async_with_returns_when_the_members_loop_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> None:
        m = dm.Member(options())

        async def failing_io(now: float, reads: object) -> bool:
            raise RuntimeError("a bug in the loop")

        monkeypatch.setattr(m, "_io", failing_io)

        async def body() -> None:
            async with m:
                assert await asyncio.wait_for(m.wait_closed(), BOUND) is dm.Drained.STOPPED
                with pytest.raises(dm.MemberError):
                    await asyncio.wait_for(m.ready(), BOUND)

        await asyncio.wait_for(body(), BOUND)
        assert await asyncio.wait_for(m.shutdown(), BOUND) is dm.Drained.STOPPED
        await all_ended(m)

    run(scenario(), 30)
