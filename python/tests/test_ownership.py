"""The member's state machine (docs/protocol.md steps 3 to 6), on a fake clock."""

from __future__ import annotations

from distributor_member._ownership import (
    Acquire,
    Connection,
    GaveUp,
    Outcome,
    Overran,
    Ownership,
    Reason,
    Revoke,
    Step,
)

D, M = 10.0, 0.5
C1 = Connection(7, "a" * 40)
C2 = Connection(8, "a" * 40)


def fresh() -> Ownership:
    return Ownership(deadline=D, weight=1, margin=M, started=0.0)


def acquired(steps: list[Step]) -> list[str]:
    return [t.unit for s in steps if isinstance(s, Acquire) for t in s.units]


def revoked(steps: list[Step]) -> list[tuple[str, Reason]]:
    return [(t.unit, s.reason) for s in steps if isinstance(s, Revoke) for t in s.units]


def started(o: Ownership, row: str = "a,b", g: int = 5, now: float = 1.0) -> Ownership:
    """Pinged, read, reported: owning the row."""
    assert o.ping(now)
    assert o.read(now, now, g, row, C1) is Outcome.PROCESSED
    due = o.report_due()
    assert due is not None and due.applied == g and due.client == C1
    assert acquired(o.take_steps()) == [], "started before the report"
    o.reported(now, due)
    assert acquired(o.take_steps()) == [u for u in row.split(",") if u]
    return o


def test_report_before_start_and_tokens_are_the_generation() -> None:
    o = fresh()
    # A read before any ping acquires nothing, even once reported.
    o.read(0.1, 0.1, 5, "a,b", C1)
    o.reported(0.1, o.report_due())  # type: ignore[arg-type]
    assert acquired(o.take_steps()) == []
    assert o.ping(0.2)
    assert acquired(o.take_steps()) == ["a", "b"]
    assert o.holds("a", 0.3) == 5
    assert o.report_due() is None
    assert o.report_due() is None and o.written is not None
    assert o.written.encode() == f"5 0 10000 1 7 {'a' * 40}"


def test_the_hold_ends_a_margin_before_deadline_after_the_earlier_of_read_and_ping() -> None:
    o = started(fresh(), now=1.0)
    o.ping(3.0)
    # Read shown at 1.0, ping at 3.0: the hold ends at 1 + D; revoked M before.
    assert o.owned_end() == 1.0 + D
    assert o.holds("a", 1.0 + D - M - 0.01) == 5
    assert o.holds("a", 1.0 + D - M) is None
    o.tick(1.0 + D - M)
    steps = o.take_steps()
    assert revoked(steps) == [("a", Reason.FENCED), ("b", Reason.FENCED)]
    assert [s.ended for s in steps if isinstance(s, Revoke)] == [1.0 + D]
    assert o.fenced
    # A ping while the read is that old is refused, and does not count.
    assert not o.ping(1.0 + D)
    assert o.last_ping == 3.0


def test_a_generation_that_takes_units_is_acknowledged_only_after_the_stop_and_before_any_start() -> None:
    o = started(fresh())
    o.read(2.0, 2.0, 6, "b,c", C1)
    steps = o.take_steps()
    assert revoked(steps) == [("a", Reason.MOVED)]
    assert acquired(steps) == []
    # The stop is running: the report may not claim 6 yet, and c waits.
    assert o.report_due() is None
    # Reads go on meanwhile and extend b's hold.
    o.ping(4.0)
    o.read(4.0, 4.0, 6, "b,c", C1)
    assert o.owned_end() == 4.0 + D
    assert acquired(o.take_steps()) == []
    o.revoked(4.5, ["a"])
    due = o.report_due()
    assert due is not None and due.applied == 6
    assert acquired(o.take_steps()) == []
    o.reported(4.6, due)
    assert acquired(o.take_steps()) == ["c"]
    assert o.holds("c", 4.7) == 6 and o.holds("b", 4.7) == 5


def test_a_generation_that_only_adds_needs_no_report() -> None:
    o = started(fresh())
    o.read(2.0, 2.0, 6, "a,b,c", C1)
    assert o.report_due() is None
    assert acquired(o.take_steps()) == ["c"]
    # A gap in the numbering may hide a revocation: it needs a report.
    o.read(3.0, 3.0, 9, "a,b,c,d", C1)
    assert acquired(o.take_steps()) == []
    due = o.report_due()
    assert due is not None and due.applied == 9
    o.reported(3.0, due)
    assert acquired(o.take_steps()) == ["d"]


def test_a_read_on_another_connection_counts_for_nothing_until_reported() -> None:
    o = started(fresh())
    end = o.owned_end()
    o.ping(3.0)
    assert o.read(3.0, 3.0, 6, "b", C2) is Outcome.OTHER_CONNECTION
    assert o.take_steps() == [] and o.owned_end() == end, "processed a read on another connection"
    due = o.report_due()
    assert due is not None and due.client == C2 and due.applied == 5
    o.reported(3.1, due)
    assert o.read(3.2, 3.2, 6, "b", C2) is Outcome.PROCESSED
    assert revoked(o.take_steps()) == [("a", Reason.MOVED)]


def test_a_lower_generation_is_ignored_and_extends_no_hold() -> None:
    o = started(fresh(), now=1.0)
    o.ping(2.0)
    assert o.read(2.0, 2.0, 3, "a,b,z", C1) is Outcome.STALE
    assert o.take_steps() == [] and o.owned_end() == 1.0 + D
    o.ping(1.0 + D - M)
    o.tick(1.0 + D - M)
    assert revoked(o.take_steps()) == [("a", Reason.FENCED), ("b", Reason.FENCED)]


def test_a_missing_generation_stops_but_starts_nothing() -> None:
    o = started(fresh())
    o.read(2.0, 2.0, None, "b,c", C1)
    steps = o.take_steps()
    assert revoked(steps) == [("a", Reason.MOVED)] and acquired(steps) == []
    o.revoked(2.1, ["a"])
    assert acquired(o.take_steps()) == []
    # The next numbered read acknowledges what the unnumbered one took, then starts.
    o.read(2.2, 2.2, 6, "b,c", C1)
    assert acquired(o.take_steps()) == []
    due = o.report_due()
    assert due is not None and due.applied == 6
    o.reported(2.3, due)
    assert acquired(o.take_steps()) == ["c"]


def test_nothing_starts_while_a_fenced_stop_runs() -> None:
    o = started(fresh(), row="a", now=1.0)
    o.tick(1.0 + D - M)
    assert revoked(o.take_steps()) == [("a", Reason.FENCED)]
    t = 1.0 + D
    o.read(t, t, 6, "a,b", C1)
    assert o.ping(t + 0.1)
    assert o.report_due() is None
    assert acquired(o.take_steps()) == [], "started while a fenced stop runs"
    o.revoked(t + 0.2, ["a"])
    assert acquired(o.take_steps()) == ["a", "b"]


def test_a_stop_past_the_hold_is_overrun() -> None:
    o = started(fresh(), now=1.0)
    o.read(2.0, 2.0, 6, "b", C1)
    o.take_steps()
    o.tick(1.0 + D + 0.01)
    steps = o.take_steps()
    assert any(isinstance(s, Overran) and [t.unit for t in s.units] == ["a"] for s in steps)
    late = o.revoked(1.0 + D + 0.5, ["a"])
    assert [t.unit for t, _ in late] == ["a"]


def test_drain_completes_on_the_report_of_an_empty_row() -> None:
    o = started(fresh())
    o.drain(2.0)
    due = o.report_due()
    assert due is not None and due.draining and due.applied == 5
    o.reported(2.0, due)
    o.read(2.1, 2.1, 6, "", C1)
    assert revoked(o.take_steps()) == [("a", Reason.DRAINING), ("b", Reason.DRAINING)]
    assert not o.drained()
    o.revoked(2.2, ["a", "b"])
    due = o.report_due()
    assert due is not None and due.applied == 6 and due.draining
    o.reported(2.3, due)
    assert o.drained()


def test_a_weight_change_makes_a_report_due() -> None:
    o = started(fresh())
    o.set_weight(4)
    due = o.report_due()
    assert due is not None and due.weight == 4 and due.applied == 5
    assert due.encode().split()[3] == "4"


def test_an_empty_field_is_no_units_and_none_is_no_field() -> None:
    o = fresh()
    o.ping(0.1)
    o.read(0.1, 0.1, 1, "", C1)
    assert o.in_table() and o.owned_units() == []
    o.read(0.2, 0.2, 2, None, C1)
    assert not o.in_table()


def gave_up(steps: list[Step]) -> list[tuple[str, float]]:
    return [(t.unit, s.ended) for s in steps if isinstance(s, GaveUp) for t in s.units]


def test_a_failed_stop_counts_as_done_only_once_its_hold_ended() -> None:
    o = started(fresh(), row="a,b", now=1.0)
    o.ping(2.0)
    o.read(2.0, 2.0, 6, "b,c", C1)
    assert revoked(o.take_steps()) == [("a", Reason.MOVED)]
    # The stop of a fails at 2.1: its work may still run. Its hold ends a
    # deadline after the last read that showed it (at 1.0).
    end = o.stop_failed(2.1, ["a"])
    assert end == 1.0 + D
    assert o.stop_failed(2.1, ["a"]) is None, "once"
    assert o.next_wake() is not None and o.next_wake() <= end  # type: ignore[operator]
    # Reads and pings go on, b's hold is extended, but nothing acknowledges
    # generation 6 (and c does not start) before a's hold ended.
    for t in (4.0, 6.0, 8.0, end - 0.01):
        o.ping(t)
        o.read(t, t, 6, "b,c", C1)
        o.tick(t)
        assert o.report_due() is None, f"acknowledged at {t} while a's work may run"
        assert o.take_steps() == []
        assert o.holds("b", t) == 5
    o.ping(end)
    o.tick(end)
    steps = o.take_steps()
    assert gave_up(steps) == [("a", end)]
    assert not any(isinstance(s, Overran) for s in steps), "a failed stop is no overrun"
    assert "a" not in o.stopping
    due = o.report_due()
    assert due is not None and due.applied == 6
    o.reported(end, due)
    assert acquired(o.take_steps()) == ["c"]


def test_other_units_of_the_generation_stop_at_once_but_the_report_waits() -> None:
    o = started(fresh(), row="a,b,c", now=1.0)
    o.ping(2.0)
    o.read(2.0, 2.0, 6, "c", C1)
    assert revoked(o.take_steps()) == [("a", Reason.MOVED), ("b", Reason.MOVED)]
    o.revoked(2.1, ["b"])
    assert "b" not in o.stopping
    o.stop_failed(2.2, ["a"])
    assert o.report_due() is None
    o.tick(1.0 + D)
    assert gave_up(o.take_steps()) == [("a", 1.0 + D)]
    due = o.report_due()
    assert due is not None and due.applied == 6


def test_a_failed_stop_after_its_hold_ended_is_done_at_once() -> None:
    o = started(fresh(), row="a,b", now=1.0)
    o.read(1.5, 1.5, 6, "b", C1)
    o.take_steps()
    late = 1.0 + D + 0.01
    o.tick(late)
    assert any(isinstance(s, Overran) for s in o.take_steps())
    assert o.stop_failed(late, ["a"]) == 1.0 + D
    assert gave_up(o.take_steps()) == [("a", 1.0 + D)]
    assert list(o.stopping) == ["b"], "only b, fenced with the rest, is being stopped"


def test_reads_no_longer_extend_the_hold_of_a_failed_stop() -> None:
    # Fenced (a ping missing) while the row still lists the unit: the stop
    # fails; reads that go on showing it do not push its end back.
    o = started(fresh(), row="a", now=1.0)
    for t in (3.0, 5.0, 7.0, 9.0):
        o.read(t, t, 5, "a", C1)
    o.tick(1.0 + D - M)
    assert revoked(o.take_steps()) == [("a", Reason.FENCED)]
    end = o.stop_failed(1.0 + D - M + 0.01, ["a"])
    assert end == 1.0 + D
    o.read(1.0 + D - 0.2, 1.0 + D - 0.2, 5, "a", C1)
    o.tick(1.0 + D)
    assert gave_up(o.take_steps()) == [("a", 1.0 + D)]
    # Contact again: a starts anew, with a hold of its own.
    t = 1.0 + D + 0.1
    assert o.ping(t)
    o.read(t, t, 5, "a", C1)
    assert acquired(o.take_steps()) == ["a"]
