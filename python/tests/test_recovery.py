"""Protocol version 2 at the edges: the ping server reads the holder's view
(Ping metadata, Beat field 2), and a member against a real redis-server,
pinged as a holder of version 2 pings, states what it holds for a recovery,
and lets no read of another server than the holder's extend a hold. The
holder is played by the test (no daemon), so that each view is exact."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, cast

import grpc
import pytest

import distributor_member as dm
from conftest import SERVICES, Fleet, await_for, run
from distributor_member._grpc import PingService, decode_beat, encode_beat
from distributor_member._recovery import METADATA, HeldReport, PingView, RecoveryTag

DEADLINE = 2.0


def options(fleet: Fleet, **kw: object) -> dm.MemberOptions:
    base: dict[str, object] = dict(
        redis_url=fleet.redis.url, table_key=fleet.table, services_key=SERVICES, deadline=DEADLINE,
        poll_interval=0.2, reregister_interval=60.0, redis_timeout=0.5, drain_timeout=10.0,
    )
    base.update(kw)
    return dm.MemberOptions(**base)  # type: ignore[arg-type]


def _raw(b: bytes) -> bytes:
    return b


class Holder:
    """Pings one member by calls, each carrying the view set last."""

    def __init__(self, address: str, view: str) -> None:
        self.channel = grpc.aio.insecure_channel(address)
        self.call = self.channel.unary_unary("/proto.GRPCPinger/Ping", request_serializer=_raw,
                                             response_deserializer=_raw)
        self.view = view
        self.answers: list[grpc.StatusCode] = []
        self.task: asyncio.Task[None] | None = None

    async def ping(self) -> grpc.StatusCode:
        try:
            await self.call(b"", metadata=((METADATA, self.view),), timeout=2)
            return grpc.StatusCode.OK
        except grpc.aio.AioRpcError as e:
            return e.code()

    def start(self, every: float = 0.1) -> None:
        async def loop() -> None:
            while True:
                self.answers.append(await self.ping())
                await asyncio.sleep(every)

        self.task = asyncio.create_task(loop())

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.wait({self.task})
        await self.channel.close()


async def stays(what: str, predicate: Callable[[], bool], seconds: float) -> None:
    """``predicate`` holds throughout ``seconds``."""
    end = asyncio.get_running_loop().time() + seconds
    while asyncio.get_running_loop().time() < end:
        assert predicate(), what
        await asyncio.sleep(0.05)


def test_the_ping_server_reads_the_holders_view_from_calls_and_beats() -> None:
    v1 = PingView(3, 9, "ab" * 20, None)
    v2 = PingView(4, 10, None, RecoveryTag(4, 1))
    seen: list[PingView | None] = []

    def admit(view: PingView | None) -> str | None:
        seen.append(view)
        return None

    async def scenario() -> None:
        server = grpc.aio.server()
        server.add_generic_rpc_handlers(PingService(admit, lambda: True).handlers())
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
                call = ch.unary_unary("/proto.GRPCPinger/Ping", request_serializer=_raw, response_deserializer=_raw)
                await call(b"", metadata=((METADATA, v1.encode()),), timeout=2)
                await call(b"", metadata=((METADATA, "7 x - -"),), timeout=2)
                await call(b"", timeout=2)
                assert seen == [v1, None, None]
                seen.clear()

                beats = ch.stream_stream("/proto.Liveness/Beats", request_serializer=_raw,
                                         response_deserializer=_raw)
                stream = beats()
                sent = [encode_beat(1, v1.encode()), encode_beat(2), encode_beat(3, "not a view"), encode_beat(4),
                        encode_beat(5, v2.encode()), encode_beat(6)]
                for seq, beat in enumerate(sent, 1):
                    await stream.write(beat)
                    answer = await stream.read()
                    assert isinstance(answer, bytes)
                    assert decode_beat(answer) == (seq, b""), "answered with its seq alone"
                await stream.done_writing()
                # An empty field keeps the stream's view; a malformed one is none.
                assert seen == [v1, v1, None, None, v2, v2]
        finally:
            await server.stop(0)

    run(scenario(), 30)


def test_a_beat_carries_its_view_in_field_2() -> None:
    beat = encode_beat(300, "1 2 - -")
    assert beat == b"\x08\xac\x02\x12\x071 2 - -"
    assert decode_beat(beat) == (300, b"1 2 - -")
    # Unknown fields are skipped, in any order.
    assert decode_beat(b"\x12\x01x\x18\x05\x08\x07") == (7, b"x")
    with pytest.raises(ValueError):
        decode_beat(b"\x12\x09short")


def test_a_ping_naming_a_recovery_makes_the_member_state_what_it_holds(fleet: Fleet) -> None:
    meta = "{" + fleet.table + "}:meta"
    held_key = "{" + fleet.table + "}:held"
    run_id = str(fleet.r.info("server")["run_id"])

    async def scenario() -> None:
        m = dm.Member(options(fleet))
        await m.start()
        # Units may hold spaces and "=": the statement splits at each pair's last "=".
        fleet.r.hset(fleet.table, m.id, "a=1,b c")
        fleet.r.hset(meta, "generation", 5)
        await m.ready(10)
        holder = Holder(m.id, f"1 5 {run_id} -")
        holder.start()
        try:
            await await_for("both units owned", lambda: sorted(h.unit for h in m.owned()) == ["a=1", "b c"], 10)
            report = fleet.hget(fleet.members_key(), m.id)
            assert report is not None and report.startswith("5 0 2000 1 ")
            # Redis lost the report; the holder recovers and asks.
            fleet.r.hdel(fleet.members_key(), m.id)
            acked = cast(Any, fleet.r).pubsub()
            acked.subscribe("{" + fleet.table + "}:acked")
            confirmed = acked.get_message(timeout=2)
            assert confirmed is not None and confirmed["type"] == "subscribe", confirmed
            holder.view = f"1 5 {run_id} 1.1"
            await await_for("the statement", lambda: fleet.hget(held_key, m.id) is not None, 5)
            assert fleet.hget(held_key, m.id) == "1.1 5 a=1=5,b c=5"
            assert fleet.hget(fleet.members_key(), m.id) == report, "the last report, written again with it"
            got = acked.get_message(timeout=2)
            acked.close()
            assert got is not None and got["type"] == "message" and got["data"] == m.id, got

            # The recovering holder writes generation 6, giving c: c waits
            # while pings name the recovery; a and b stay held.
            fleet.r.hset(fleet.table, m.id, "a=1,b c,c")
            fleet.r.hset(meta, "generation", 6)
            holder.view = f"1 6 {run_id} 1.1"
            await await_for("generation 6 read", lambda: m.generation == 6, 5)
            await stays("nothing starts during the recovery",
                        lambda: sorted(h.unit for h in m.owned()) == ["a=1", "b c"], 1.0)
            assert fleet.hget(held_key, m.id) == "1.1 5 a=1=5,b c=5", "stated once per recovery"
            # The recovery ended.
            holder.view = f"1 6 {run_id} -"
            await await_for("c started", lambda: sorted(h.unit for h in m.owned()) == ["a=1", "b c", "c"], 5)
            c = m.holds("c")
            assert c is not None and c.token == 6
            assert all(a is grpc.StatusCode.OK for a in holder.answers)
        finally:
            await holder.close()
        await m.shutdown()
        assert fleet.hget(held_key, m.id) is None, "the statement goes with the member"
        assert fleet.hget(fleet.members_key(), m.id) is None

    run(scenario(), 60)


def test_reads_of_another_server_than_the_holders_extend_no_hold(fleet: Fleet,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    meta = "{" + fleet.table + "}:meta"
    run_id = str(fleet.r.info("server")["run_id"])
    other = "f" * 40 if run_id != "f" * 40 else "e" * 40
    caplog.set_level(logging.INFO, logger="distributor_member")

    async def scenario() -> None:
        m = dm.Member(options(fleet))
        events = m.events()
        await m.start()
        fleet.r.hset(fleet.table, m.id, "a")
        fleet.r.hset(meta, "generation", 5)
        await m.ready(10)
        holder = Holder(m.id, f"1 5 {run_id} -")
        holder.start()
        try:
            await await_for("a owned", lambda: [h.unit for h in m.owned()] == ["a"], 10)
            hold = m.owned()[0]
            report = fleet.hget(fleet.members_key(), m.id)
            assert report is not None
            fleet.r.lrem(SERVICES, 0, m.id)
            # The holder now writes on another server; this member still reads this one.
            holder.view = f"2 5 {other} -"
            switched = asyncio.get_running_loop().time()

            async def revoked() -> dm.Revoking:
                async for e in events:
                    if isinstance(e, dm.Revoking):
                        return e
                raise AssertionError("no revocation")

            e = await asyncio.wait_for(revoked(), DEADLINE + 2)
            assert e.unit == "a" and e.reason is dm.Reason.FENCED
            assert asyncio.get_running_loop().time() - switched <= DEADLINE + 0.5
            assert not hold.is_held()
            # Registered again at once (not at the re-registration interval).
            assert m.id in fleet.lrange(SERVICES)
            assert any("another redis server" in r.getMessage() for r in caplog.records)
            # Reads of this server count for nothing, not even contact: fenced.
            await await_for("fenced", lambda: m.fenced, 5)

            # It dropped its connections (to find the master again): its
            # reports name a new one.
            def client_id() -> str:
                r = fleet.hget(fleet.members_key(), m.id)
                return r.split()[4] if r is not None else ""

            await await_for("a report naming a new connection", lambda: client_id() != report.split()[4], 5)
            # The holder names this server again: in contact, and a starts again once a
            # generation above the one processed at the freeze is written.
            holder.view = f"3 5 {run_id} -"
            await asyncio.sleep(0.5)
            assert m.owned() == []
            fleet.r.hset(meta, "generation", 6)
            holder.view = f"3 6 {run_id} -"
            await await_for("a owned again", lambda: [h.unit for h in m.owned()] == ["a"], 10)
            assert m.owned()[0].token == 6
        finally:
            await holder.close()
        await m.shutdown()

    run(scenario(), 60)



def test_the_daemons_recovery_after_redis_lost_everything(fleet: Fleet) -> None:
    """Redis restarts empty (no persistence: a new run id, every write lost)
    under the real daemon: its recovery's pings name a tag, each member
    states what it works on for that tag, and the units are split again,
    never worked on by two members at once, with tokens above the old ones."""
    from test_member import Journal, units

    all_units = units(6)
    fleet.set_units(all_units)
    fleet.start_daemon()
    held_key = "{" + fleet.table + "}:held"

    async def scenario() -> None:
        journal = Journal()
        members = [dm.Member(options(fleet, reregister_interval=1.0)) for _ in range(2)]
        for m in members:
            journal.follow(m)
            await m.start()
        await await_for("every unit owned", lambda: sorted(h.unit for m in members for h in m.owned()) == all_units,
                        20)
        before = max(h.token for m in members for h in m.owned())
        fleet.redis.restart_empty()
        fleet.set_units(all_units)
        await await_for("both statements", lambda: len(fleet.hgetall(held_key)) == 2, 30)
        stated = {k: HeldReport.decode(v) for k, v in fleet.hgetall(held_key).items()}
        assert set(stated) == {m.id for m in members}
        tags = {h.tag for h in stated.values() if h is not None}
        assert len(tags) == 1 and None not in stated.values(), stated
        await await_for("every unit owned again",
                        lambda: sorted(h.unit for m in members for h in m.owned()) == all_units
                        and all(h.token > before for m in members for h in m.owned()), 30)
        journal.check_no_overlap()
        for m in members:
            await m.shutdown()
        assert fleet.hgetall(held_key) == {}

    run(scenario(), 90)
