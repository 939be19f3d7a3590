"""What a holder's ping tells the member (protocol version 2, ``PingView``),
on a fake clock: reads count only on the holder's server, no older than its
generation; a ping of an older holder refreshes no hold; a recovery is
answered with a statement, after which nothing starts from the rows
processed before it. One test per rule, as the daemon's
``core::ownership::tests::views``; the margin is 0 there, as in the daemon."""

from __future__ import annotations

from distributor_member._ownership import (
    Acquire,
    Connection,
    Outcome,
    Ownership,
    Reason,
    Revoke,
    Step,
    Tenure,
)
from distributor_member._recovery import (
    MAX_COUNT,
    HeldReport,
    PingView,
    RecoveryTag,
    decode_view,
    parse_count,
)

D = 1.0
T = 10.0


def ms(n: int) -> float:
    return n / 1000


def server(n: int) -> str:
    return f"{n:040x}"


def connection(n: int) -> Connection:
    """Client ids 0 and 1 on servers 0 and 1, as the daemon's tests."""
    return Connection(n % 2, server(n // 2))


def view(epoch: int, generation: int, on: int) -> PingView:
    return PingView(epoch, generation, server(on), None)


def recovering(epoch: int, generation: int, on: int, seq: int) -> PingView:
    return PingView(epoch, generation, server(on), RecoveryTag(epoch, seq))


def fresh(t: float = T) -> Ownership:
    return Ownership(deadline=D, weight=1, margin=0.0, started=t)


def report(o: Ownership, now: float) -> int | None:
    due = o.report_due()
    if due is None:
        return None
    o.reported(now, due)
    return due.applied


def acquires(units: list[str], token: int) -> list[Step]:
    return [Acquire([Tenure(u, token) for u in units])]


def viewed(t: float, g: int, row: str) -> Ownership:
    """Owning ``row`` at generation ``g``, reading on connection 0 of server
    0, pinged by a holder of epoch 1 on server 0."""
    o = fresh(t)
    o.ping(t, view(1, g, 0))
    o.read(t, t, g, row, connection(0))
    report(o, t)
    o.take_steps()
    return o


def test_reads_of_another_server_than_the_holders_extend_no_hold() -> None:
    # An old master cut off from the sentinels keeps answering the member's
    # reads with the last row; the holder, on the new master, pings.
    t = T
    o = viewed(t, 5, "a")
    assert o.holds("a", t) == 5
    for k in range(1, 16):
        now = t + ms(100 * k)
        o.ping(now, view(2, 5, 1))
        assert o.read(now, now, 5, "a", connection(0)) is Outcome.OTHER_SERVER, \
            "a read of the old master counts for nothing"
    # The hold ended the deadline after the last ping that named server 0.
    assert o.holds("a", t + D) is None
    steps = o.take_steps()
    assert any(isinstance(s, Revoke) and s.reason is Reason.FENCED and s.ended == t + D for s in steps), steps
    # Its last report is due again (on whichever server it reads), and it registers again.
    assert o.reassert_due()
    due = o.report_due()
    assert due is not None and due.applied == 5 and due.client == connection(0)


def test_the_first_read_of_another_server_reasserts_once_and_freezes() -> None:
    t = T
    o = viewed(t, 5, "a")
    o.ping(t + ms(10), view(1, 5, 1))
    assert o.read(t + ms(20), t + ms(20), 5, "a", connection(0)) is Outcome.OTHER_SERVER
    assert o.reassert_due() and o.frozen == 5
    assert report(o, t + ms(21)) == 5
    # Still the other server: not due again.
    assert o.read(t + ms(30), t + ms(30), 5, "a", connection(0)) is Outcome.OTHER_SERVER
    assert not o.reassert_due() and o.report_due() is None
    # A read of the holder's server ends the episode; the next other one reasserts again.
    assert o.read(t + ms(40), t + ms(40), 5, "a", connection(2)) is not Outcome.OTHER_SERVER
    assert o.read(t + ms(50), t + ms(50), 5, "a", connection(0)) is Outcome.OTHER_SERVER
    assert o.reassert_due()
    # A read naming no server (INFO not permitted) is not of another server.
    o2 = viewed(t, 5, "a")
    assert o2.read(t + ms(10), t + ms(10), 5, "a", Connection(0, None)) is not Outcome.OTHER_SERVER


def test_a_ping_naming_another_server_ends_what_the_old_ones_reads_extend() -> None:
    t = T
    o = viewed(t, 5, "a")
    # Reads of server 0 go on; the last ping that names it is at t + 200.
    o.ping(t + ms(200), view(1, 5, 0))
    o.read(t + ms(600), t + ms(600), 5, "a", connection(0))
    # The new holder's ping names server 1: the read at t + 600 (after the
    # last ping naming server 0) no longer counts past that ping.
    o.ping(t + ms(700), view(2, 5, 1))
    assert o.owned_end() == t + ms(200) + D


def test_a_ping_of_an_older_holder_is_contact_but_refreshes_no_hold() -> None:
    t = T
    o = viewed(t, 5, "a")
    o.ping(t + ms(100), view(3, 5, 0))
    o.read(t + ms(100), t + ms(100), 5, "a", connection(0))
    assert o.owned_end() == t + ms(100) + D
    # The holder of epoch 2 has not noticed it lost its lease yet.
    assert o.ping(t + ms(900), view(2, 5, 0))
    o.read(t + ms(900), t + ms(900), 5, "a", connection(0))
    assert o.owned_end() == t + ms(100) + D, "only the holder of the highest epoch refreshes"
    assert o.contact_ping == t + ms(900)
    assert not o.fenced, "but it counts as contact"
    assert o.pinged_view == view(3, 5, 0), "nor does it replace the view"


def test_a_read_below_the_pinged_generation_is_ignored() -> None:
    t = T
    o = viewed(t, 5, "a")
    o.ping(t + ms(10), view(1, 9, 0))
    assert o.read(t + ms(20), t + ms(20), 7, "a,b", connection(0)) is Outcome.BEHIND
    assert o.generation == 5
    assert o.take_steps() == []
    assert o.reassert_due(), "the last report is due again"
    # One sent before that ping is processed as usual.
    assert o.read(t + ms(30), t + ms(5), 9, "a", connection(0)) is Outcome.PROCESSED


def test_nothing_starts_from_a_row_older_than_the_pinged_generation() -> None:
    t = T
    o = fresh(t)
    o.read(t, t, 6, "a", connection(0))
    report(o, t)
    o.ping(t + ms(1), view(4, 10, 0))
    assert o.take_steps() == [], "row 6 is older than 10"
    o.read(t + ms(2), t + ms(2), 10, "b", connection(0))
    report(o, t + ms(2))
    assert o.take_steps() == acquires(["b"], 10)


def test_a_recovery_is_answered_once_and_nothing_starts_until_it_ends() -> None:
    t = T
    o = fresh(t)
    o.ping(t, view(1, 5, 0))
    o.read(t, t, 5, "a,b", connection(0))
    report(o, t)
    assert o.take_steps() == acquires(["a", "b"], 5)
    assert o.held_due(t) is None, "no recovery, no statement"
    o.ping(t + ms(10), recovering(2, 5, 0, 1))
    stated = o.held_due(t + ms(10))
    assert stated is not None, "a statement is due"
    assert stated.tag == RecoveryTag(2, 1)
    assert stated.processed == 5
    assert stated.units == {"a": 5, "b": 5}
    assert stated.encode() == "2.1 5 a=5,b=5"
    assert o.held_due(t + ms(10)) is None, "being written"
    o.held_written(stated.tag, False)
    again = o.held_due(t + ms(20))
    assert again is not None, "due again after a failed write"
    o.held_written(again.tag, True)
    assert o.held_due(t + ms(30)) is None, "once per recovery"

    # The recovering holder writes generation 9: processed, and what it
    # takes is revoked, but nothing new starts while pings name the recovery.
    o.read(t + ms(40), t + ms(40), 9, "a,c", connection(0))
    o.revoked(t + ms(41), ["b"])
    assert report(o, t + ms(42)) == 9
    o.ping(t + ms(50), recovering(2, 9, 0, 1))
    steps = o.take_steps()
    assert not any(isinstance(s, Acquire) for s in steps), steps
    # The recovery ended: pings name none, at generation 9.
    o.ping(t + ms(60), view(2, 9, 0))
    assert o.take_steps() == acquires(["c"], 9)
    # A new recovery asks again.
    o.ping(t + ms(70), recovering(2, 9, 0, 2))
    stated = o.held_due(t + ms(70))
    assert stated is not None and stated.tag == RecoveryTag(2, 2) and stated.units == {"a": 5, "c": 9}


def test_a_statement_names_stopping_units_within_their_hold_only() -> None:
    t = T
    o = viewed(t, 5, "a,b")
    # b moves away at 6; its stop runs.
    o.ping(t + ms(100), view(1, 6, 0))
    o.read(t + ms(100), t + ms(100), 6, "a", connection(0))
    assert [s.reason for s in o.take_steps() if isinstance(s, Revoke)] == [Reason.MOVED]
    o.ping(t + ms(200), recovering(1, 6, 0, 1))
    stated = o.held_due(t + ms(200))
    assert stated is not None and stated.units == {"a": 5, "b": 5} and stated.processed == 6
    o.held_written(stated.tag, True)
    # Past b's hold (shown at t), its stop still running: no longer named.
    o.ping(t + ms(900), recovering(1, 6, 0, 2))
    o.read(t + ms(900), t + ms(900), 6, "a", connection(0))
    later = o.held_due(t + D + ms(1))
    assert later is not None and later.units == {"a": 5}, later


def test_after_a_lower_generation_nothing_starts_from_the_rows_processed_before() -> None:
    t = T
    o = fresh(t)
    o.read(t, t, 8, "a", connection(0))
    report(o, t)
    # The read of a lower generation comes before the first ping.
    assert o.read(t + ms(1), t + ms(1), 3, "", connection(0)) is Outcome.STALE
    o.ping(t + ms(2))
    assert o.take_steps() == [], "a of 8 does not start"
    o.read(t + ms(3), t + ms(3), 9, "a", connection(0))
    report(o, t + ms(3))
    o.ping(t + ms(4))
    assert o.take_steps() == acquires(["a"], 9)


def test_a_lower_generation_makes_the_last_report_due_again_once() -> None:
    t = T
    o = viewed(t, 7, "a")
    assert o.read(t, t, 5, "x", connection(0)) is Outcome.STALE
    assert o.reassert_due()
    assert report(o, t) == 7
    assert not o.reassert_due()
    assert o.read(t, t, 6, "x", connection(0)) is Outcome.STALE
    assert o.report_due() is None, "once per episode"


def test_a_missing_generation_after_a_numbered_one_reasserts_and_freezes() -> None:
    t = T
    o = viewed(t, 5, "a")
    assert o.read(t + ms(10), t + ms(10), None, "a,b", connection(0)) is Outcome.PROCESSED
    assert o.reassert_due() and o.frozen == 5
    assert report(o, t + ms(10)) == 5
    o.ping(t + ms(20), view(1, 5, 0))
    assert o.take_steps() == [], "b has no token"
    # The generation is back, above: reported (the tables missed), then b starts.
    o.read(t + ms(30), t + ms(30), 6, "a,b", connection(0))
    assert o.frozen is None
    assert report(o, t + ms(30)) == 6
    assert o.take_steps() == acquires(["b"], 6)


def test_pings_without_a_view_behave_as_before() -> None:
    t = T
    o = fresh(t)
    assert o.ping(t, None)
    o.read(t, t, 5, "a", connection(0))
    report(o, t)
    assert o.take_steps() == acquires(["a"], 5)
    # Reads of any server count; no statement is ever due.
    o.ping(t + ms(100), None)
    assert o.read(t + ms(100), t + ms(100), 5, "a", connection(2)) is Outcome.OTHER_CONNECTION
    assert o.held_due(t + ms(100)) is None and o.frozen is None and o.pinged is None
    assert o.last_ping == o.contact_ping == t + ms(100)


# -- the encodings ---------------------------------------------------------


def test_a_ping_view_round_trips_and_tolerates_later_fields() -> None:
    v = PingView(7, 42, "a" * 40, RecoveryTag(7, 2))
    assert PingView.decode(v.encode()) == v
    assert PingView.decode(v.encode() + " later") == v
    bare = PingView(7, 42, None, None)
    assert bare.encode() == "7 42 - -"
    assert PingView.decode("7 42 - -") == bare
    assert PingView.decode("7 42 " + "AB" * 20 + " -") == PingView(7, 42, "ab" * 20), "run ids are lowercased"
    for bad in ["", "7", "7 42", "7 42 xyz -", "7 42 - 7", "x 42 - -", "7 42 - 7.x", "7  42 - -",
                "-1 42 - -", "+7 42 - -", f"{MAX_COUNT + 1} 0 - -", "7 42 - 7.4294967296", "٧ 42 - -"]:
        assert PingView.decode(bad) is None, bad
    assert decode_view(None) is None
    assert decode_view(b"\xff\xfe") is None, "not ASCII: none, no error"
    assert decode_view(b"7 42 - 7.1") == PingView(7, 42, None, RecoveryTag(7, 1))


def test_a_statement_round_trips_with_units_holding_spaces_and_equals() -> None:
    h = HeldReport(RecoveryTag(3, 1), 19, {"a b": 4, "x=y": 19, "u": 7})
    assert h.encode() == "3.1 19 a b=4,u=7,x=y=19"
    assert HeldReport.decode(h.encode()) == h
    empty = HeldReport(RecoveryTag(3, 1), 19, {})
    assert empty.encode() == "3.1 19 "
    assert HeldReport.decode("3.1 19 ") == empty
    assert HeldReport.decode("3.1 19") == empty
    for bad in ["", "3.1", "x 19 u=1", "3.1 x u=1", "3.1 19 u", "3.1 19 u=x", "3.1 19 =1", "3.1 19 u=1,u=2",
                "3.1 19 u=1,"]:
        assert HeldReport.decode(bad) is None, bad


def test_counters_are_canonical_digits_below_two_to_the_53() -> None:
    assert parse_count("0") == 0 and parse_count("007") == 7 and parse_count(str(MAX_COUNT)) == MAX_COUNT
    for bad in ["", str(MAX_COUNT + 1), "99999999999999999", "-1", "+1", " 1", "1 ", "1e3", "1.0", "0x10", "١"]:
        assert parse_count(bad) is None, bad
