//! Tests of what a holder's ping tells a member (`PingView`): reads count
//! only on the holder's server, no older than its generation; a ping of an
//! older holder refreshes no hold; a recovery is answered with a statement,
//! after which nothing starts from the rows processed before it.

use super::*;
use crate::core::handoff::{PingView, RecoveryTag};

fn view(epoch: u64, generation: u64, on: u8) -> Option<PingView> {
    Some(PingView {
        epoch,
        generation,
        server: Some(server(on)),
        recovery: None,
    })
}

fn recovering(epoch: u64, generation: u64, on: u8, seq: u32) -> Option<PingView> {
    Some(PingView {
        recovery: Some(RecoveryTag { epoch, seq }),
        ..view(epoch, generation, on).unwrap()
    })
}

/// A member owning `row` at generation `g`, reading on connection 0 of
/// server 0, pinged by a holder of epoch 1 on server 0.
fn viewed(t: Instant, g: u64, row: &str) -> Ownership {
    let mut o = Ownership::new(DEADLINE, 1, t);
    o.ping(t, view(1, g, 0));
    o.read(t, t, Some(g), Some(row), Some(connection(0)));
    report(&mut o, t);
    o.take_steps();
    o
}

/// Finding 1 of issue 38: an old master cut off from the sentinels keeps
/// answering a member's reads with the last row; the holder, on the new
/// master, pings the member. Those reads must not keep the holds.
#[test]
fn reads_of_another_server_than_the_holders_extend_no_hold() {
    let t = crate::core::timing::test_t0();
    let mut o = viewed(t, 5, "a");
    assert_eq!(o.holds("a", t), Some(FencingToken(5)));
    // The holder now writes on server 1, and pings say so; the member
    // still reads server 0, which shows the same generation and row.
    for k in 1..=15 {
        let now = t + ms(100 * k);
        o.ping(now, view(2, 5, 1));
        let out = o.read(now, now, Some(5), Some("a"), Some(connection(0)));
        assert_eq!(
            out,
            ReadOutcome::OtherServer { holder: server(1) },
            "a read of the old master counts for nothing"
        );
    }
    // The hold ended the deadline after the last ping that named server 0.
    assert_eq!(o.holds("a", t + DEADLINE), None);
    let steps = o.take_steps();
    assert!(
        steps.iter().any(|s| matches!(
            s,
            Step::Revoke {
                why: Revocation::Fenced { ended },
                ..
            } if *ended == t + DEADLINE
        )),
        "fenced at its deadline: {steps:?}"
    );
    // Its last report is due again (on whichever server it reads), and it
    // registers again: the holder there learns of it.
    assert!(o.reassert_due());
}

/// A read of the old server sent before the holder's first ping named the
/// new one keeps the hold only as long as the pings that named the old
/// server allow.
#[test]
fn a_ping_naming_another_server_ends_what_the_old_ones_reads_extend() {
    let t = crate::core::timing::test_t0();
    let mut o = viewed(t, 5, "a");
    // Reads of server 0 go on; the last ping that names it is at t + 200.
    o.ping(t + ms(200), view(1, 5, 0));
    o.read(
        t + ms(600),
        t + ms(600),
        Some(5),
        Some("a"),
        Some(connection(0)),
    );
    // The new holder's ping names server 1: the read at t + 600 (after the
    // last ping naming server 0) no longer counts past that ping.
    o.ping(t + ms(700), view(2, 5, 1));
    assert_eq!(o.hold_end("a"), Some(t + ms(200) + DEADLINE));
}

#[test]
fn a_ping_of_an_older_holder_is_contact_but_refreshes_no_hold() {
    let t = crate::core::timing::test_t0();
    let mut o = viewed(t, 5, "a");
    o.ping(t + ms(100), view(3, 5, 0));
    o.read(
        t + ms(100),
        t + ms(100),
        Some(5),
        Some("a"),
        Some(connection(0)),
    );
    assert_eq!(o.hold_end("a"), Some(t + ms(100) + DEADLINE));
    // The holder of epoch 2 has not noticed it lost its lease yet.
    assert!(o.ping(t + ms(900), view(2, 5, 0)));
    o.read(
        t + ms(900),
        t + ms(900),
        Some(5),
        Some("a"),
        Some(connection(0)),
    );
    assert_eq!(
        o.hold_end("a"),
        Some(t + ms(100) + DEADLINE),
        "only the holder of the highest epoch refreshes"
    );
    assert!(!o.fenced(), "but it counts as contact");
}

/// Sent after a ping that named generation 9 of the same server, a read of
/// generation 7 shows writes lost since: ignored, as a lower generation is.
#[test]
fn a_read_below_the_pinged_generation_is_ignored() {
    let t = crate::core::timing::test_t0();
    let mut o = viewed(t, 5, "a");
    o.ping(t + ms(10), view(1, 9, 0));
    assert_eq!(
        o.read(
            t + ms(20),
            t + ms(20),
            Some(7),
            Some("a,b"),
            Some(connection(0))
        ),
        ReadOutcome::Behind { pinged: 9 }
    );
    assert_eq!(o.generation(), 5);
    assert!(o.take_steps().is_empty());
    assert!(o.reassert_due(), "the last report is due again");
    // One sent before that ping is processed as usual.
    assert_eq!(
        o.read(
            t + ms(30),
            t + ms(5),
            Some(9),
            Some("a"),
            Some(connection(0))
        ),
        ReadOutcome::Processed
    );
}

/// A row older than the table the holder's last ping named starts
/// nothing (the holder may have planned past it); the next read of a
/// newer one does.
#[test]
fn nothing_starts_from_a_row_older_than_the_pinged_generation() {
    let t = crate::core::timing::test_t0();
    let mut o = Ownership::new(DEADLINE, 1, t);
    o.read(t, t, Some(6), Some("a"), Some(connection(0)));
    report(&mut o, t);
    o.ping(t + ms(1), view(4, 10, 0));
    assert!(o.take_steps().is_empty(), "row 6 is older than 10");
    o.read(
        t + ms(2),
        t + ms(2),
        Some(10),
        Some("b"),
        Some(connection(0)),
    );
    report(&mut o, t + ms(2));
    assert_eq!(
        o.take_steps(),
        [Step::Acquire {
            units: tenures(&["b"], 10)
        }]
    );
}

/// A holder's recovery: the ping names it; the member states what it
/// works on (within its hold) and the generation it processed, once per
/// recovery, and starts nothing from the rows it processed before: only
/// once the holder pings without the recovery, at a generation it
/// processed above them.
#[test]
fn a_recovery_is_answered_once_and_nothing_starts_until_it_ends() {
    let t = crate::core::timing::test_t0();
    let mut o = Ownership::new(DEADLINE, 1, t);
    o.ping(t, view(1, 5, 0));
    o.read(t, t, Some(5), Some("a,b"), Some(connection(0)));
    let r = o.report_due().unwrap();
    o.reported(t, r);
    assert_eq!(
        o.take_steps(),
        [Step::Acquire {
            units: tenures(&["a", "b"], 5)
        }]
    );
    assert!(o.held_due(t).is_none(), "no recovery, no statement");
    o.ping(t + ms(10), recovering(2, 5, 0, 1));
    let stated = o.held_due(t + ms(10)).expect("a statement is due");
    assert_eq!(stated.tag, RecoveryTag { epoch: 2, seq: 1 });
    assert_eq!(stated.processed, 5);
    assert_eq!(
        stated.units.keys().map(String::as_str).collect::<Vec<_>>(),
        ["a", "b"]
    );
    assert!(o.held_due(t + ms(10)).is_none(), "being written");
    o.held_written(stated.tag, false);
    let again = o
        .held_due(t + ms(20))
        .expect("due again after a failed write");
    o.held_written(again.tag, true);
    assert!(o.held_due(t + ms(30)).is_none(), "once per recovery");

    // The recovering holder writes generation 9: processed, and what it
    // takes is revoked, but nothing new starts while pings name the
    // recovery.
    o.read(
        t + ms(40),
        t + ms(40),
        Some(9),
        Some("a,c"),
        Some(connection(0)),
    );
    o.revoked(t + ms(41), &names(&["b"]));
    assert_eq!(report(&mut o, t + ms(42)), Some(9));
    o.ping(t + ms(50), recovering(2, 9, 0, 1));
    let steps = o.take_steps();
    assert!(
        !steps.iter().any(|s| matches!(s, Step::Acquire { .. })),
        "{steps:?}"
    );
    // The recovery ended: pings name none, at generation 9.
    o.ping(t + ms(60), view(2, 9, 0));
    assert_eq!(
        o.take_steps(),
        [Step::Acquire {
            units: tenures(&["c"], 9)
        }]
    );
}

/// Redis lost writes (a lower generation read): nothing starts from the
/// row processed before (a table Redis lost may have given it), until a
/// generation above it is processed.
#[test]
fn after_a_lower_generation_nothing_starts_from_the_rows_processed_before() {
    let t = crate::core::timing::test_t0();
    let mut o = Ownership::new(DEADLINE, 1, t);
    o.read(t, t, Some(8), Some("a"), Some(connection(0)));
    report(&mut o, t);
    // The read of a lower generation comes before the first ping.
    assert_eq!(
        o.read(t + ms(1), t + ms(1), Some(3), Some(""), Some(connection(0))),
        ReadOutcome::Stale { processed: 8 }
    );
    o.ping(t + ms(2), None);
    assert!(o.take_steps().is_empty(), "a of 8 does not start");
    o.read(
        t + ms(3),
        t + ms(3),
        Some(9),
        Some("a"),
        Some(connection(0)),
    );
    report(&mut o, t + ms(3));
    o.ping(t + ms(4), None);
    assert_eq!(
        o.take_steps(),
        [Step::Acquire {
            units: tenures(&["a"], 9)
        }]
    );
}
