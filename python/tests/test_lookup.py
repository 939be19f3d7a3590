"""Lookup (issue 41): who owns a unit, from a local copy that follows the
table; against a real redis-server and, where the holder matters, the real
daemon and member processes."""

from __future__ import annotations

import json

import pytest

import distributor_member as dm
from conftest import SERVICES, Fleet, Proc, await_for, run, wait_for

TRANSIT = "{sys-matching-table}:transit"
META = "{sys-matching-table}:meta"


def expected(fleet: Fleet, unit: str) -> dm.Placement:
    """What the stored table and transit say of ``unit``, by a plain scan."""
    if any(f.split(",", 1)[0] == unit for f in fleet.hgetall(TRANSIT)):
        return dm.Placement(dm.PlacementKind.IN_TRANSIT)
    owners = [m for m, row in fleet.table_rows().items() if unit in row]
    if not owners:
        return dm.Placement(dm.PlacementKind.UNOWNED)
    if len(owners) > 1:
        return dm.Placement(dm.PlacementKind.IN_TRANSIT)
    return dm.Placement(dm.PlacementKind.OWNED, owners[0])


def agrees(fleet: Fleet, lookup: dm.Lookup, units: list[str]) -> bool:
    g = fleet.hget(META, "generation")
    if g is None or lookup.generation != int(g):
        return False
    return all(lookup.placement(u) == expected(fleet, u) for u in [*units, "never-listed"])


def test_a_lookup_agrees_with_the_table_and_follows_a_killed_member(fleet: Fleet, procs: list[Proc]) -> None:
    units = [f"unit-{i:03}" for i in range(60)]
    fleet.set_units(units)
    fleet.start_daemon()
    env = {"REDIS_URL": fleet.redis.url, "MEMBER_DEADLINE": "2s", "MEMBER_POLL_INTERVAL": "200ms",
           "MEMBER_SERVICES_KEY": SERVICES, "DISTRIBUTION_NAMESPACE": fleet.table}
    ids = []
    for _ in range(2):
        proc = Proc([], env)
        procs.append(proc)
        assert proc.proc.stdout is not None
        first = json.loads(proc.proc.stdout.readline())
        assert first["event"] == "started"
        ids.append(first["id"])
    wait_for("both members with units", lambda: len(fleet.table_rows()) == 2 and all(fleet.table_rows().values())
             and sum(len(r) for r in fleet.table_rows().values()) == len(units), 30)

    async def scenario() -> None:
        async with await dm.Lookup.connect(fleet.redis.url, fleet.table) as lookup:
            await await_for("the lookup to agree with the table", lambda: agrees(fleet, lookup, units), 10)
            # The first subscription reads the table whole once more: wait for it.
            await await_for("the subscription's read", lambda: lookup.reads >= 2, 5)
            reads, row_reads = lookup.reads, lookup.row_reads
            victim = ids[0]
            theirs = [u for u in units if lookup.owner(u) == victim]
            assert theirs
            procs[0].kill()
            await await_for("the survivor to own every unit in the table",
                            lambda: list(fleet.table_rows()) == [ids[1]] and len(fleet.table_rows()[ids[1]]) == 60, 20)
            await await_for("the lookup to agree again", lambda: agrees(fleet, lookup, units), 10)
            assert all(lookup.owner(u) == ids[1] for u in theirs)
            # Followed by the rows the holder wrote.
            assert lookup.row_reads > row_reads, (reads, lookup.reads)
            assert lookup.answers > 0 and lookup.reads >= 2 and lookup.staleness < 5

    run(scenario(), 60)


def test_transit_is_told_apart_an_unannounced_change_is_polled_and_a_bad_generation_kept_out(fleet: Fleet) -> None:
    r = fleet.r
    r.hset(fleet.table, mapping={"a:1": "u1,u2", "b:2": "u4"})
    r.hset(META, "generation", "5")
    r.hset(TRANSIT, "u3,workers", "5 0 b:2 a:1 0 0")

    async def scenario() -> None:
        lookup = await dm.Lookup.connect(fleet.redis.url, fleet.table, poll_interval=0.05)
        try:
            assert lookup.generation == 5
            assert lookup.owner("u1") == "a:1" and lookup.owner("u4") == "b:2"
            assert lookup.placement("u3") == dm.Placement(dm.PlacementKind.IN_TRANSIT)
            assert lookup.owner("u3") is None
            assert lookup.placement("u9") == dm.Placement(dm.PlacementKind.UNOWNED)
            # The move completes, announced to nobody.
            r.hset(fleet.table, "b:2", "u3,u4")
            r.delete(TRANSIT)
            r.hset(META, "generation", "6")
            await await_for("the poll to follow generation 6", lambda: lookup.generation == 6, 5)
            assert lookup.owner("u3") == "b:2"
            # A generation that is not a counter: the last copy kept.
            r.hset(META, "generation", "x7")
            failures = lookup.read_failures
            await await_for("the bad generation to be counted", lambda: lookup.read_failures > failures, 5)
            assert lookup.generation == 6 and lookup.owner("u1") == "a:1"
        finally:
            await lookup.close()
        with pytest.raises(dm.LookupReadError, match="x7"):
            await dm.Lookup.connect(fleet.redis.url, fleet.table)

    run(scenario(), 30)


def test_a_lookup_follows_a_redis_restart(fleet: Fleet) -> None:
    fleet.r.hset(fleet.table, mapping={"a:1": "u1", "b:2": "u2"})
    fleet.r.hset(META, "generation", "9")

    async def scenario() -> None:
        async with await dm.Lookup.connect(fleet.redis.url, fleet.table, poll_interval=0.1) as lookup:
            assert lookup.owner("u1") == "a:1"
            fleet.redis.restart_empty()
            r = fleet.redis.client()
            r.hset(fleet.table, mapping={"c:3": "u1,u2"})
            r.hset(META, "generation", "1")
            await await_for("the lookup to read the new server's table",
                            lambda: lookup.generation == 1 and lookup.owner("u1") == "c:3", 15)

    run(scenario(), 40)


def test_a_member_refuses_a_request_routed_by_an_older_copy(fleet: Fleet) -> None:
    units = [f"unit-{i:03}" for i in range(10)]
    fleet.set_units(units)
    fleet.start_daemon()

    async def scenario() -> None:
        m = dm.Member(dm.MemberOptions(redis_url=fleet.redis.url, table_key=fleet.table, services_key=SERVICES,
                                       deadline=2.0, poll_interval=0.2))
        await m.start()
        try:
            async with await dm.Lookup.connect(fleet.redis.url, fleet.table) as lookup:
                await await_for("the member to hold every unit", lambda: len(m.owned()) == len(units), 20)
                await await_for("the lookup to show them", lambda: agrees(fleet, lookup, units), 10)
                g = lookup.generation
                assert g is not None
                for h in m.owned():
                    assert m.routed_current(h.unit, g) and h.admits_route(h.token)
                    assert not m.routed_current(h.unit, h.token - 1)
                assert not m.routed_current("never-listed", g)
        finally:
            await m.shutdown()

    run(scenario(), 60)


def test_sync_lookup(fleet: Fleet) -> None:
    fleet.r.hset(fleet.table, mapping={"a:1": "u1"})
    fleet.r.hset(META, "generation", "3")
    with dm.SyncLookup(fleet.redis.url, fleet.table) as lookup:
        assert lookup.owner("u1") == "a:1" and lookup.generation == 3
        assert lookup.placement("u2").kind is dm.PlacementKind.UNOWNED


def test_a_copy_changed_by_rows_answers_as_the_whole_new_table() -> None:
    import random

    from distributor_member.lookup import Copy, changed_rows

    rng = random.Random(7)
    names = ["u", "v", "w", "é", "x"]
    members = ["a", "b", "c", "d"]

    def row() -> str:
        return ",".join(rng.choice(names + [""]) for _ in range(rng.randrange(0, 5)))

    for _ in range(300):
        table = {m: row() for m in members if rng.random() < 0.7}
        copy = Copy.build(1, table, [])
        for step in range(3):
            changed: dict[str, str | None] = {m: (row() if rng.random() < 0.7 else None)
                                              for m in rng.sample(members, rng.randrange(0, 3))}
            for m, r in changed.items():
                if r is None:
                    table.pop(m, None)
                else:
                    table[m] = r
            transit = [f"{u},g" for u in rng.sample(names, rng.randrange(0, 2))]
            copy = copy.apply(step + 2, changed, transit)
            whole = Copy.build(step + 2, table, transit)
            for u in names + ["never"]:
                assert copy.placement(u) == whole.placement(u), (table, changed, u)

    def entry(g: int, prev: int, rows: str | None) -> tuple[str, dict[str, str]]:
        f = {"generation": str(g), "previous_generation": str(prev)}
        if rows is not None:
            f["rows"] = rows
        return (f"{g}-0", f)

    newest_first = [entry(9, 8, "c"), entry(8, 7, "a,b"), entry(7, 6, "a")]
    assert changed_rows(newest_first, 6, 8) == ["a", "b"]
    assert changed_rows(newest_first, 6, 9) == ["a", "b", "c"]
    assert changed_rows([entry(20, 9, ""), entry(9, 8, "c")], 8, 20) == ["c"]
    assert changed_rows(newest_first[:2], 6, 9) is None
    assert changed_rows([entry(7, 6, "*")], 6, 7) is None
    assert changed_rows([entry(7, 6, None)], 6, 7) is None
    assert changed_rows(newest_first, 6, 10) is None
