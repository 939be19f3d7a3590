//! Tests of a member's ownership: one per rule, and a property test that
//! drives it with random reads (generations out of order, skipped, repeated,
//! unreadable), pings, pauses, slow and out-of-order stops, report writes,
//! drains and stops, checking every step against an independent model of
//! the protocol's promises.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use proptest::prelude::*;
use std::time::Instant;

use super::*;
use crate::core::handoff::RunId;

const DEADLINE: Duration = Duration::from_millis(1000);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn tenures(units: &[&str], token: u64) -> Vec<Tenure> {
    units
        .iter()
        .map(|u| Tenure {
            unit: u.to_string(),
            token: FencingToken(token),
        })
        .collect()
}

fn names(units: &[&str]) -> Vec<String> {
    units.iter().map(|u| u.to_string()).collect()
}

/// Writes the due report, if any; returns its `applied`.
fn report(o: &mut Ownership, now: Instant) -> Option<u64> {
    let r = o.report_due()?;
    o.reported(now, r);
    Some(r.applied)
}

/// A member at generation `g` owning `row`, pinged and reported at `t`.
fn owning(t: Instant, g: u64, row: &str) -> Ownership {
    owning_on(t, g, row, None)
}

/// Connection `n` of the model: client ids 0 and 1 on two servers, and by
/// client id alone; the same id on another server is another connection.
fn connection(n: u8) -> RedisConnection {
    let id = u64::from(n % 2);
    match n / 2 {
        0 => RedisConnection::on(id, server(0)),
        1 => RedisConnection::on(id, server(1)),
        _ => RedisConnection::id(id),
    }
}

fn server(n: u8) -> RunId {
    RunId::parse(&format!("{n:040x}")).unwrap()
}

/// Connection `id`, named by its client id alone.
fn c(id: u64) -> Option<RedisConnection> {
    Some(RedisConnection::id(id))
}

/// The same, its reads on the Redis connection `client`.
fn owning_on(t: Instant, g: u64, row: &str, client: Option<RedisConnection>) -> Ownership {
    let mut o = Ownership::new(DEADLINE, 1, t);
    o.ping(t, None);
    o.read(t, t, Some(g), Some(row), client);
    report(&mut o, t);
    o.take_steps();
    o
}

#[test]
fn units_are_acquired_after_a_read_its_report_and_a_ping() {
    let t = crate::core::timing::test_t0();
    let mut o = Ownership::new(DEADLINE, 2, t);
    assert!(o.report_due().is_none(), "nothing to report before a read");
    assert_eq!(
        o.read(t, t, Some(3), Some("a,b"), None),
        ReadOutcome::Processed
    );
    assert!(o.take_steps().is_empty(), "not before the report");
    let r = o.report_due().unwrap();
    assert_eq!(r.encode(), "3 0 1000 2");
    o.reported(t, r);
    assert!(o.take_steps().is_empty(), "not before a ping");
    assert_eq!(o.holds("a", t), None);
    assert!(o.ping(t + ms(10), None));
    assert_eq!(
        o.take_steps(),
        [Step::Acquire {
            units: tenures(&["a", "b"], 3)
        }]
    );
    assert_eq!(o.holds("a", t + ms(10)), Some(FencingToken(3)));
    // The hold runs from the earlier of the read (t) and the ping.
    assert_eq!(o.hold_end("a"), Some(t + DEADLINE));
    assert!(o.report_due().is_none());
}

#[test]
fn a_revocation_completes_before_the_report_and_the_report_before_acquisitions() {
    let t = crate::core::timing::test_t0();
    let mut o = owning(t, 3, "a,b");
    let t1 = t + ms(100);
    o.ping(t1, None);
    o.read(t1, t1, Some(5), Some("b,c"), None);
    assert_eq!(
        o.take_steps(),
        [Step::Revoke {
            units: tenures(&["a"], 3),
            why: Revocation::Moved
        }]
    );
    assert_eq!(o.holds("a", t1), None, "not owned once revoked");
    // While `a` is being stopped, generation 5 is not applied: at most 3.
    assert_eq!(report(&mut o, t1), None);
    let t2 = t1 + ms(200);
    assert!(o.revoked(t2, &names(&["a"])).is_empty());
    assert!(o.take_steps().is_empty(), "c waits for the report");
    assert_eq!(report(&mut o, t2), Some(5));
    assert_eq!(
        o.take_steps(),
        [Step::Acquire {
            units: tenures(&["c"], 5)
        }]
    );
    let owned: Vec<Tenure> = o.owned();
    assert_eq!(
        owned,
        [tenures(&["b"], 3), tenures(&["c"], 5)].concat(),
        "row order, each with the token of its acquisition"
    );
}

/// A stop whose handler panicked may still be running: its unit counts as
/// stopped only once its hold ended, so the acknowledgement (and what waits
/// for it) waits that long, and nothing says it overran.
#[test]
fn a_failed_stop_counts_as_done_only_once_its_hold_ended() {
    let t = crate::core::timing::test_t0();
    let mut o = owning(t, 3, "a,b");
    let t1 = t + ms(100);
    o.ping(t1, None);
    o.read(t1, t1, Some(5), Some("b,c"), None);
    o.take_steps();
    let failed = t1 + ms(5);
    let end = o
        .stop_failed(failed, &names(&["a"]))
        .expect("a is being stopped");
    assert!(
        end > failed && end <= t1 + DEADLINE,
        "its hold's end, within the deadline of the last read showing it"
    );
    assert_eq!(o.next_wake().map(|w| w <= end), Some(true));
    o.tick(end - ms(1));
    assert_eq!(report(&mut o, end - ms(1)), None, "still possibly running");
    o.tick(end);
    assert!(o.take_steps().is_empty(), "no overrun, no revocation");
    assert_eq!(report(&mut o, end), Some(5));
    assert_eq!(o.stopping(), 0);
    // Its hold is over: `c` is not acquired on the strength of it, but by a
    // read and a ping that give a new hold.
    let t2 = end + ms(1);
    o.ping(t2, None);
    o.read(t2, t2, Some(5), Some("b,c"), None);
    assert_eq!(
        o.take_steps(),
        [Step::Acquire {
            units: tenures(&["c"], 5)
        }]
    );
}

/// A failed stop's end is fixed when it fails: a unit still in the row
/// (fenced, then back in contact) does not wait for as long as reads show
/// it, and is acquired again once it counts as stopped.
#[test]
fn a_failed_stop_of_a_unit_still_in_the_row_ends_with_its_hold_as_it_was() {
    let t = crate::core::timing::test_t0();
    let mut o = owning(t, 3, "a,b");
    let fenced = t + DEADLINE;
    o.tick(fenced);
    o.take_steps();
    o.revoked(fenced, &names(&["b"]));
    let back = fenced + ms(10);
    o.ping(back, None);
    o.read(back, back, Some(4), Some("a,b"), None);
    let end = o.stop_failed(back + ms(1), &names(&["a"]));
    assert_eq!(end, Some(back + DEADLINE));
    for i in 1..=15 {
        let now = back + ms(100 * i);
        o.ping(now, None);
        o.read(now, now, Some(4), Some("a,b"), None);
        o.tick(now);
        if let Some(r) = o.report_due() {
            o.reported(now, r);
        }
        let want = usize::from(now < back + DEADLINE);
        assert_eq!(o.stopping(), want, "at {:?}", now - back);
    }
    assert_eq!(o.holds("a", back + ms(1500)), Some(FencingToken(4)));
}

/// A failed stop of a unit whose hold already ended is done at once.
#[test]
fn a_failed_stop_after_the_hold_ended_is_done_at_once() {
    let t = crate::core::timing::test_t0();
    let mut o = owning(t, 3, "a,b");
    o.read(t + ms(1), t + ms(1), Some(5), Some("b"), None);
    o.take_steps();
    let late = t + DEADLINE + ms(1);
    o.tick(late);
    o.take_steps();
    let end = o.stop_failed(late, &names(&["a"]));
    assert!(end.is_some_and(|e| e <= late));
    assert_eq!(o.stopping(), 1, "only b, fenced with the rest, is stopping");
    assert_eq!(o.stop_failed(late, &names(&["a"])), None, "once");
}

#[test]
fn a_report_never_covers_a_skipped_revocation_still_being_stopped() {
    let t = crate::core::timing::test_t0();
    let mut o = owning(t, 3, "a,b");
    // Generations 4..=8 are skipped; 9 no longer has `a`. The holder may
    // have revoked it at any of them, so nothing above 3 may be reported
    // until `a` is stopped.
    o.read(t, t, Some(9), Some("b"), None);
    o.take_steps();
    assert!(o.report_due().is_none(), "3 is reported already");
    o.revoked(t, &names(&["a"]));
    assert_eq!(o.report_due().unwrap().applied, 9);
}

/// A weight change makes a report due that carries it and acknowledges
/// nothing new: the generation applied stays the one last reported, and
/// the units stay owned.
#[test]
fn a_weight_change_is_reported_at_the_generation_already_applied() {
    let t = crate::core::timing::test_t0();
    let mut o = owning(t, 4, "a,b");
    assert_eq!(o.report_due(), None);
    o.set_weight(1);
    assert_eq!(o.report_due(), None, "the same weight: nothing to tell");
    o.set_weight(7);
    let r = o.report_due().expect("a report with the new weight");
    assert_eq!((r.applied, r.weight, r.draining), (4, 7, false));
    o.reported(t + ms(1), r);
    assert_eq!(o.report_due(), None);
    assert_eq!(o.holds("a", t + ms(2)), Some(FencingToken(4)));
    assert!(
        o.take_steps().is_empty(),
        "no unit moves on a weight change"
    );
}

/// A read without its generation that took units: the units are stopped,
/// and the next numbered generation is reported even when it is the next
/// one up (the table that took them had a generation this member never
/// saw, and the holder waits for its acknowledgement).
#[test]
fn units_taken_by_a_read_without_generation_are_acknowledged_at_the_next_numbered_one() {
    let t = crate::core::timing::test_t0();
    let mut o = owning(t, 4, "a,b");
    o.read(t + ms(1), t + ms(1), None, Some("a"), None);
    let steps = o.take_steps();
    assert!(
        matches!(&steps[..], [Step::Revoke { units, .. }] if units[0].unit == "b"),
        "{steps:?}"
    );
    o.revoked(t + ms(2), &names(&["b"]));
    o.read(t + ms(3), t + ms(3), Some(5), Some("a"), None);
    assert_eq!(report(&mut o, t + ms(3)), Some(5));
}

#[test]
fn lower_generations_are_ignored() {
    let t = crate::core::timing::test_t0();
    let mut o = owning(t, 7, "a");
    assert_eq!(
        o.read(t, t, Some(6), Some("x"), None),
        ReadOutcome::Stale { processed: 7 }
    );
    assert!(o.take_steps().is_empty());
    assert_eq!(o.generation(), 7);
    // Redis lost writes: the report written last is due again at once (it
    // may be lost too), with what it claimed; once only.
    assert!(o.reassert_due());
    assert_eq!(report(&mut o, t), Some(7));
    assert!(!o.reassert_due());
    o.read(t, t, Some(6), Some("x"), None);
    assert_eq!(o.report_due(), None);
    // The same generation again is processed (and refreshes holds).
    let t1 = t + ms(500);
    o.ping(t1, None);
    assert_eq!(
        o.read(t1, t1, Some(7), Some("a"), None),
        ReadOutcome::Processed
    );
    assert_eq!(o.hold_end("a"), Some(t1 + DEADLINE));
    // An unreadable generation follows the row at the last one, but a unit
    // it adds waits for a read that shows the generation: its token would
    // be 7, maybe the last owner's (the fleet simulation found it).
    o.read(t1, t1, None, Some("a,z"), None);
    assert!(o.take_steps().is_empty());
    assert!(o.report_due().is_none());
    assert!(o.holds("a", t1).is_some(), "a is still held");
    o.read(t1, t1, None, Some("z"), None);
    assert_eq!(
        o.take_steps(),
        [Step::Revoke {
            units: tenures(&["a"], 7),
            why: Revocation::Moved
        }],
        "revocations are followed"
    );
    // Once shown with its generation, the unit is acquired with it.
    o.revoked(t1, &names(&["a"]));
    report(&mut o, t1);
    o.read(t1, t1, Some(8), Some("z"), None);
    report(&mut o, t1);
    assert_eq!(
        o.take_steps(),
        [Step::Acquire {
            units: tenures(&["z"], 8)
        }]
    );
}

#[test]
fn a_unit_still_being_stopped_comes_back_only_after_its_stop() {
    let t = crate::core::timing::test_t0();
    let mut o = owning(t, 3, "a");
    o.read(t, t, Some(4), Some(""), None);
    o.take_steps();
    report(&mut o, t);
    o.read(t, t, Some(5), Some("a"), None);
    report(&mut o, t);
    assert!(o.take_steps().is_empty(), "a is still being stopped");
    assert_eq!(o.holds("a", t), None);
    o.revoked(t, &names(&["a"]));
    report(&mut o, t);
    assert_eq!(
        o.take_steps(),
        [Step::Acquire {
            units: tenures(&["a"], 5)
        }]
    );
}

#[test]
fn a_hold_ends_a_deadline_after_the_earlier_of_read_and_ping_and_stays_ended() {
    let t = crate::core::timing::test_t0();
    let mut o = owning(t, 3, "a");
    // Pings go on, reads stop: the hold ends a deadline after the read.
    o.ping(t + ms(900), None);
    assert_eq!(o.next_wake(), Some(t + DEADLINE));
    assert!(o.holds("a", t + ms(999)).is_some());
    assert!(o.holds("a", t + DEADLINE).is_none(), "ended, even unticked");
    // The process was paused; it wakes long after, and a ping and a fresh
    // read arrive before anything else: the hold is ended first, at its end.
    let woke = t + ms(5000);
    o.ping(woke, None);
    assert_eq!(
        o.take_steps(),
        [Step::Revoke {
            units: tenures(&["a"], 3),
            why: Revocation::Fenced {
                ended: t + DEADLINE
            }
        }]
    );
    o.read(woke, woke, Some(3), Some("a"), None);
    assert!(o.take_steps().is_empty(), "still being stopped");
    o.revoked(woke, &names(&["a"]));
    report(&mut o, woke);
    assert_eq!(
        o.take_steps(),
        [Step::Acquire {
            units: tenures(&["a"], 3)
        }],
        "back with a fresh read and ping, the table unchanged"
    );
}

#[test]
fn contact_is_lost_without_reads_or_without_pings_and_comes_back_with_both() {
    let t = crate::core::timing::test_t0();
    let mut o = Ownership::new(DEADLINE, 1, t);
    assert!(!o.fenced(), "not fenced at start");
    assert!(o.ping(t, None), "answers its first ping before any read");
    o.tick(t + DEADLINE);
    assert!(o.fenced(), "no read within the deadline");
    assert!(!o.ping(t + DEADLINE, None), "UNAVAILABLE while fenced");
    let t1 = t + ms(1500);
    o.read(t1, t1, Some(1), Some("a"), None);
    assert!(!o.fenced());
    report(&mut o, t1);
    assert_eq!(o.take_steps().len(), 1, "acquired: read and ping are fresh");
    // Pings stop.
    let t2 = t + ms(1900);
    o.read(t2, t2, Some(1), Some("a"), None);
    assert_eq!(o.next_wake(), Some(t + ms(2000)));
    o.tick(t + ms(2000));
    assert!(o.fenced());
    assert!(matches!(
        o.take_steps()[..],
        [Step::Revoke {
            why: Revocation::Fenced { .. },
            ..
        }]
    ));
    assert_eq!(o.holds("a", t + ms(2000)), None);
    assert!(
        o.ping(t + ms(2100), None),
        "a ping with a fresh read ends the fence"
    );
}

#[test]
fn a_drain_reports_takes_units_away_as_draining_and_completes_on_an_empty_row() {
    let t = crate::core::timing::test_t0();
    let mut o = owning(t, 3, "a,b");
    o.drain(t);
    assert_eq!(o.report_due().unwrap().encode(), "3 1 1000 1");
    report(&mut o, t);
    assert!(!o.drained());
    o.read(t, t, Some(4), Some(""), None);
    assert_eq!(
        o.take_steps(),
        [Step::Revoke {
            units: tenures(&["a", "b"], 3),
            why: Revocation::Draining
        }]
    );
    o.revoked(t, &names(&["a", "b"]));
    assert!(!o.drained(), "generation 4 not yet reported");
    report(&mut o, t);
    assert!(o.drained());
    // A row with units again (a holder that had not seen the drain): nothing
    // is acquired, and the drain is not complete.
    o.read(t, t, Some(5), Some("c"), None);
    report(&mut o, t);
    assert!(o.take_steps().is_empty());
    assert!(!o.drained());
    // No field at all is as good as an empty one.
    o.read(t, t, Some(6), None, None);
    report(&mut o, t);
    assert!(o.drained());
}

#[test]
fn a_stop_revokes_everything_and_settles_when_stops_end_or_overrun() {
    let t = crate::core::timing::test_t0();
    let mut o = owning(t, 3, "a,b");
    o.stop(t);
    assert!(o.fenced());
    assert!(!o.ping(t, None), "UNAVAILABLE once stopped");
    assert_eq!(
        o.take_steps(),
        [Step::Revoke {
            units: tenures(&["a", "b"], 3),
            why: Revocation::Shutdown
        }]
    );
    assert!(!o.settled(t));
    o.revoked(t, &names(&["a"]));
    assert!(!o.settled(t));
    // `b` hangs: past its hold, waiting longer helps nobody.
    o.tick(t + DEADLINE);
    assert_eq!(
        o.take_steps(),
        [Step::Overran {
            units: tenures(&["b"], 3),
            ended: t + DEADLINE
        }]
    );
    assert!(o.settled(t + DEADLINE));
    let late = o.revoked(t + ms(1500), &names(&["b"]));
    assert_eq!(late, [(tenures(&["b"], 3)[0].clone(), ms(500))]);
}

#[test]
fn a_read_on_another_connection_than_reported_is_not_processed_while_units_are_held() {
    let t = crate::core::timing::test_t0();
    let mut o = owning_on(t, 3, "a,b", c(1));
    assert_eq!(o.written_report().unwrap().encode(), "3 0 1000 1 1");
    let t1 = t + ms(300);
    o.ping(t1, None);
    // Reconnected: the read on client 2 takes `a` away, but counts for
    // nothing, not even contact.
    assert_eq!(
        o.read(t1, t1, Some(4), Some("b"), c(2)),
        ReadOutcome::OtherConnection { named: c(1) }
    );
    assert!(o.take_steps().is_empty(), "no revocation");
    assert_eq!(o.generation(), 3);
    assert_eq!(o.hold_end("a"), Some(t + DEADLINE), "no hold refreshed");
    assert_eq!(o.last_contact().0, Some(t), "no contact refreshed");
    // A report naming the new connection is due, with what was last written.
    let r = o.report_due().unwrap();
    assert_eq!(r.encode(), "3 0 1000 1 2");
    // A read on the old connection still counts until it is written.
    o.read(t1, t1, Some(3), Some("a,b"), c(1));
    assert_eq!(o.hold_end("a"), Some(t1 + DEADLINE));
    o.reported(t1, r);
    // Now only reads on client 2 count.
    let t2 = t1 + ms(100);
    assert_eq!(
        o.read(t2, t2, Some(3), Some("a,b"), c(1)),
        ReadOutcome::OtherConnection { named: c(2) }
    );
    assert_eq!(
        o.read(t2, t2, Some(4), Some("b"), c(2)),
        ReadOutcome::Processed
    );
    assert_eq!(
        o.take_steps(),
        [Step::Revoke {
            units: tenures(&["a"], 3),
            why: Revocation::Moved
        }]
    );
}

#[test]
fn a_read_on_another_connection_is_processed_while_nothing_is_held_and_acquires_after_its_report() {
    let t = crate::core::timing::test_t0();
    let mut o = owning_on(t, 3, "", c(1));
    assert_eq!(
        o.read(t, t, Some(4), Some("a"), c(2)),
        ReadOutcome::Processed
    );
    assert_eq!(o.generation(), 4);
    assert!(
        o.take_steps().is_empty(),
        "not before a report names client 2"
    );
    let r = o.report_due().unwrap();
    assert_eq!((r.applied, r.client), (3, c(2)), "the applied last written");
    o.reported(t, r);
    assert_eq!(
        o.take_steps(),
        [Step::Acquire {
            units: tenures(&["a"], 4)
        }]
    );
    // No client (Redis does not tell) is a connection of its own.
    o.read(t, t, Some(4), Some("a"), None);
    assert_eq!(o.report_due().unwrap().client, None);
}

/// After a Redis failover the member's new connection may get the client id
/// its old one had on the old server: it is another connection all the
/// same, and only a report naming it (with the new server's run id) lets
/// its reads count.
#[test]
fn the_same_client_id_on_another_server_is_another_connection() {
    let t = crate::core::timing::test_t0();
    let (old, new) = (
        RedisConnection::on(5, server(1)),
        RedisConnection::on(5, server(2)),
    );
    let mut o = owning_on(t, 3, "a", Some(old));
    assert_eq!(
        o.written_report().unwrap().encode(),
        format!("3 0 1000 1 5 {}", server(1))
    );
    assert_eq!(
        o.read(t, t, Some(3), Some("a"), Some(new)),
        ReadOutcome::OtherConnection { named: Some(old) }
    );
    let r = o.report_due().unwrap();
    assert_eq!(r.client, Some(new));
    o.reported(t, r);
    assert_eq!(
        o.read(t, t, Some(3), Some("a"), Some(new)),
        ReadOutcome::Processed
    );
}

#[test]
fn a_generation_that_only_adds_units_is_acquired_without_a_report() {
    let t = crate::core::timing::test_t0();
    let mut o = owning(t, 3, "a");
    o.read(t, t, Some(4), Some("a,b"), None);
    assert!(o.report_due().is_none());
    assert_eq!(
        o.take_steps(),
        [Step::Acquire {
            units: tenures(&["b"], 4)
        }]
    );
    // Neither does a new generation with the same row.
    o.read(t, t, Some(5), Some("a,b"), None);
    assert!(o.report_due().is_none());
    assert_eq!(o.written_report().unwrap().applied, 3);
    // A generation that takes one is acknowledged, at itself.
    o.read(t, t, Some(6), Some("b"), None);
    o.take_steps();
    o.revoked(t, &names(&["a"]));
    assert_eq!(report(&mut o, t), Some(6));
}

#[test]
fn units_taken_from_the_row_are_acknowledged_even_if_never_started() {
    let t = crate::core::timing::test_t0();
    // Never pinged: nothing was acquired, yet the holder waits for these.
    let mut o = Ownership::new(DEADLINE, 1, t);
    o.read(t, t, Some(3), Some("a,b"), None);
    report(&mut o, t);
    o.read(t, t, Some(4), Some("a"), None);
    assert_eq!(report(&mut o, t), Some(4));
    // A row that disappears took its units too.
    o.read(t, t, Some(5), None, None);
    assert_eq!(report(&mut o, t), Some(5));
    // Nothing to take from a missing row.
    o.read(t, t, Some(6), Some("c"), None);
    assert_eq!(report(&mut o, t), None);
}

#[test]
fn an_acknowledgement_owed_holds_up_acquisitions_until_written() {
    let t = crate::core::timing::test_t0();
    let mut o = owning(t, 3, "a");
    o.read(t, t, Some(4), Some("b"), None);
    o.take_steps();
    o.revoked(t, &names(&["a"]));
    assert!(o.take_steps().is_empty(), "b waits for the report of 4");
    // A later generation that only adds does not skip it.
    o.read(t, t, Some(5), Some("b,c"), None);
    assert!(o.take_steps().is_empty());
    assert_eq!(report(&mut o, t), Some(5));
    assert_eq!(
        o.take_steps(),
        [Step::Acquire {
            units: tenures(&["b", "c"], 5)
        }]
    );
}

#[test]
fn a_report_for_draining_alone_keeps_the_applied_last_written_and_draining_reports_every_generation()
 {
    let t = crate::core::timing::test_t0();
    let mut o = owning(t, 3, "a");
    // Generation 4 only added a unit: not acknowledged.
    o.read(t, t, Some(4), Some("a,b"), None);
    o.drain(t);
    // While draining, every new generation is reported: 4 too.
    assert_eq!(o.report_due().unwrap().encode(), "4 1 1000 1");
    report(&mut o, t);
    o.read(t, t, Some(5), Some("a,b"), None);
    assert_eq!(report(&mut o, t), Some(5));
    assert_eq!(report(&mut o, t), None);
}

/// A member cut off from Redis misses tables 3 to 5: one gave it `c`, one
/// revoked it again. It never held `c`, and the row it reads next, at 6,
/// takes nothing from the row it processed; but the holder waits for its
/// acknowledgement of 5 (found by chaos scenario 10: a Redis failover while
/// units moved). Reading 6 after a gap, it acknowledges 6 before it
/// acquires anything new.
#[test]
fn a_generation_after_a_gap_is_acknowledged() {
    let t = crate::core::timing::test_t0();
    let mut o = owning(t, 2, "a,b");
    assert_eq!(o.written_report().unwrap().applied, 2);
    o.ping(t, None);
    assert_eq!(
        o.read(t, t, Some(6), Some("a,b,d"), None),
        ReadOutcome::Processed
    );
    assert!(o.take_steps().is_empty(), "nothing before the report");
    assert_eq!(report(&mut o, t), Some(6));
    assert_eq!(
        o.take_steps(),
        [Step::Acquire {
            units: tenures(&["d"], 6)
        }]
    );
    // The next generation in turn that only adds units needs no report.
    assert_eq!(
        o.read(t, t, Some(7), Some("a,b,d,e"), None),
        ReadOutcome::Processed
    );
    assert_eq!(report(&mut o, t), None);
    assert_eq!(
        o.take_steps(),
        [Step::Acquire {
            units: tenures(&["e"], 7)
        }]
    );
}

/// Rows ignored as stale are missed tables until a numbered read: a read
/// whose generation cannot be read does not settle them.
#[test]
fn ignored_rows_are_acknowledged_at_the_next_numbered_generation() {
    let t = crate::core::timing::test_t0();
    let mut o = owning(t, 5, "a,b");
    o.ping(t, None);
    assert_eq!(
        o.read(t, t, Some(3), Some("a,x"), None),
        ReadOutcome::Stale { processed: 5 }
    );
    assert_eq!(report(&mut o, t), Some(5), "the last report, again");
    // Unnumbered: followed at 5 for what it takes (b), nothing more.
    assert_eq!(o.read(t, t, None, Some("a"), None), ReadOutcome::Processed);
    o.take_steps();
    o.revoked(t, &names(&["b"]));
    assert_eq!(report(&mut o, t), None, "5 is acknowledged already");
    // 6 takes nothing from the row processed last, but follows the
    // ignored rows: acknowledged.
    assert_eq!(
        o.read(t, t, Some(6), Some("a"), None),
        ReadOutcome::Processed
    );
    assert_eq!(report(&mut o, t), Some(6));
}

#[test]
fn a_lower_generation_is_ignored_until_the_holder_writes_above() {
    let t = crate::core::timing::test_t0();
    let mut o = owning(t, 50, "a");
    // While `a` is held, the lower generation is ignored.
    let t1 = t + ms(400);
    o.ping(t1, None);
    assert_eq!(
        o.read(t1, t1, Some(3), Some("a,x"), None),
        ReadOutcome::Stale { processed: 50 }
    );
    assert!(o.take_steps().is_empty());
    // Its hold ends (no read of generation 50 refreshed it); it is stopped.
    let t2 = t + DEADLINE;
    o.ping(t2, None);
    assert!(matches!(
        o.read(t2, t2, Some(3), Some("a,x"), None),
        ReadOutcome::Stale { processed: 50 }
    ));
    o.take_steps();
    o.revoked(t2, &names(&["a"]));
    // Nothing held or stopping: still ignored. Generation 3's rows may give
    // this member units that lost writes (50 and below) gave others.
    assert_eq!(
        o.read(t2, t2, Some(3), Some("a,x"), None),
        ReadOutcome::Stale { processed: 50 }
    );
    assert_eq!(o.generation(), 50);
    assert!(
        o.take_steps().is_empty(),
        "nothing starts from generation 3"
    );
    assert_eq!(
        o.written_report().unwrap().applied,
        50,
        "reports never go back"
    );
    // The holder, reading that report, writes above it.
    let t3 = t2 + ms(10);
    o.ping(t3, None);
    assert_eq!(
        o.read(t3, t3, Some(51), Some("a,x"), None),
        ReadOutcome::Processed
    );
    assert_eq!(o.generation(), 51);
    // It only adds units to the row of 50, but the rows it ignored may have
    // given it units that 51 revoked: it acknowledges 51, then acquires.
    assert!(o.take_steps().is_empty(), "nothing before the report");
    assert_eq!(report(&mut o, t3), Some(51));
    assert_eq!(
        o.take_steps(),
        [Step::Acquire {
            units: tenures(&["a", "x"], 51)
        }]
    );
}

// ---------------------------------------------------------------------------
// The model.

#[derive(Debug, Clone)]
enum Op {
    /// Time passes (a large value is a pause: nothing happens meanwhile).
    Wait(u64),
    /// A read sent `ago` ms before now, of generation `base + dg` (`None`:
    /// unreadable), with a row of the units in the mask (`None`: no field),
    /// or, with `add`, of the last processed row and those units. `client`:
    /// on the current connection (`None`), or on a new one that Redis names
    /// `Some(Some(c))` or does not name `Some(None)`.
    Read {
        ago: u64,
        dg: Option<i8>,
        row: Option<u8>,
        add: bool,
        client: Option<Option<u8>>,
    },
    Ping,
    Tick,
    /// One of the units being stopped is stopped.
    Stopped(usize),
    /// The due report is written.
    Reported,
    Drain,
    Stop,
}

impl Op {
    /// A read of the last processed generation, all of `row`, now, on the
    /// current connection.
    /// A read of `row` at the next generation (the holder writes one above
    /// every generation a member reported, so a member that saw Redis lose
    /// writes gets one).
    fn read_now(row: u8) -> Op {
        Op::Read {
            ago: 0,
            dg: Some(1),
            row: Some(row),
            add: false,
            client: None,
        }
    }
}

fn op() -> impl Strategy<Value = Op> {
    let dg = prop_oneof![9 => -2i8..4, 1 => -100i8..-2];
    let client = prop::option::weighted(0.15, prop::option::weighted(0.8, 0u8..6));
    prop_oneof![
        6 => (0u64..700).prop_map(Op::Wait),
        1 => (700u64..4000).prop_map(Op::Wait),
        7 => (
            0u64..300,
            prop::option::weighted(0.95, dg),
            prop::option::weighted(0.9, any::<u8>()),
            prop::bool::weighted(0.3),
            client,
        )
            .prop_map(|(ago, dg, row, add, client)| Op::Read { ago, dg, row, add, client }),
        5 => Just(Op::Ping),
        2 => Just(Op::Tick),
        4 => (0usize..8).prop_map(Op::Stopped),
        4 => Just(Op::Reported),
        1 => Just(Op::Drain),
        1 => Just(Op::Stop),
    ]
}

const UNITS: [&str; 6] = ["u0", "u1", "u2", "u3", "u4", "u5"];

/// What the model knows of a unit the member works on (owned or stopping).
#[derive(Debug, Clone)]
struct Work {
    token: FencingToken,
    /// Highest processed generation whose row had it during this tenure.
    seen: u64,
    /// Send instant of the last processed read whose row had it.
    shown: Instant,
    stopping: bool,
}

/// The last processed read.
#[derive(Debug, Clone)]
struct Seen {
    generation: u64,
    row: Option<BTreeSet<String>>,
    sent: Instant,
    client: Option<RedisConnection>,
    /// A read showed this row with its generation.
    numbered: bool,
}

/// A written report: `applied`, `draining`, `client`.
type Written = (u64, bool, Option<RedisConnection>);

struct Model {
    t: Instant,
    o: Ownership,
    work: BTreeMap<String, Work>,
    processed: Option<Seen>,
    last_ping: Option<Instant>,
    /// Send instant of the last successful read that counted (processed or
    /// stale; not one on another connection than reported).
    last_read: Option<Instant>,
    last_read_done: Instant,
    written: Option<Written>,
    /// Processed generations that took units from the row, or that came
    /// after tables the member did not see, above the last written `applied`.
    owed: BTreeSet<u64>,
    /// A stale read since the last processed one.
    ignored: bool,
    /// The report written last is due again: the first stale read since
    /// the last processed one showed Redis lost writes.
    reassert: bool,
    /// Since Redis lost writes (a stale read, or a generation gone),
    /// nothing starts until a generation above this one is processed.
    frozen: Option<u64>,
    /// The connection reads go over now, and the one of the last read.
    conn: Option<RedisConnection>,
    client: Option<RedisConnection>,
    draining: bool,
    stopped: bool,
    started: Instant,
    /// Holds the next call must end first, with their ends.
    expect_fenced: BTreeMap<String, Instant>,
    /// The view at the last revision: it may change only with the revision.
    view: (u64, Vec<Tenure>, u64, bool, bool),
}

impl Model {
    fn new() -> Model {
        let t = crate::core::timing::test_t0();
        Model {
            t,
            o: Ownership::new(DEADLINE, 1, t),
            work: BTreeMap::new(),
            processed: None,
            last_ping: None,
            last_read: None,
            last_read_done: t,
            written: None,
            owed: BTreeSet::new(),
            ignored: false,
            reassert: false,
            frozen: None,
            conn: None,
            client: None,
            draining: false,
            stopped: false,
            started: t,
            expect_fenced: BTreeMap::new(),
            view: (0, Vec::new(), 0, false, false),
        }
    }

    /// When the model says a hold refreshed at `shown` ends.
    fn end(&self, shown: Instant) -> Instant {
        shown.min(self.last_ping.expect("nothing is held before a ping")) + DEADLINE
    }

    fn apply(&mut self, op: &Op) {
        let now = self.t;
        match *op {
            Op::Wait(n) => self.t += ms(n),
            Op::Read {
                ago,
                dg,
                row,
                add,
                client,
            } => self.read(now, ago, dg, row, add, client),
            Op::Ping => {
                self.fence(now);
                let ok = self.o.ping(now, None);
                self.last_ping = Some(now);
                self.thaw();
                let steps = self.o.take_steps();
                self.steps(steps, now);
                // Answered OK unless stopped or no read for the deadline.
                let read = self.last_read.unwrap_or(self.started);
                assert_eq!(ok, !self.stopped && now < read + DEADLINE);
                assert_eq!(ok, !self.o.fenced());
            }
            Op::Tick => {
                self.fence(now);
                self.o.tick(now);
                let steps = self.o.take_steps();
                self.steps(steps, now);
            }
            Op::Stopped(i) => {
                let stopping: Vec<String> = self
                    .work
                    .iter()
                    .filter(|(_, w)| w.stopping)
                    .map(|(u, _)| u.clone())
                    .collect();
                if stopping.is_empty() {
                    return;
                }
                let u = stopping[i % stopping.len()].clone();
                self.fence(now);
                self.o.revoked(now, std::slice::from_ref(&u));
                self.work.remove(&u);
                let steps = self.o.take_steps();
                self.steps(steps, now);
            }
            Op::Reported => {
                self.fence(now);
                if let Some(r) = self.o.report_due() {
                    self.check_report(&r);
                    self.o.reported(now, r);
                    self.reassert = false;
                    self.written = Some((r.applied, r.draining, r.client));
                    self.owed = self.owed.split_off(&(r.applied + 1));
                    assert_eq!(self.o.written_report(), Some(r));
                } else {
                    self.o.tick(now);
                }
                let steps = self.o.take_steps();
                self.steps(steps, now);
            }
            Op::Drain => {
                self.fence(now);
                self.o.drain(now);
                let steps = self.o.take_steps();
                self.steps(steps, now);
                if !self.draining && self.processed.is_some() {
                    assert!(self.o.report_due().is_some_and(|r| r.draining));
                }
                self.draining = true;
            }
            Op::Stop => {
                self.fence(now);
                self.o.stop(now);
                let steps = self.o.take_steps();
                let was_owned: BTreeSet<String> = self
                    .work
                    .iter()
                    .filter(|(_, w)| !w.stopping)
                    .map(|(u, _)| u.clone())
                    .collect();
                let mut revoked = BTreeSet::new();
                for s in &steps {
                    if let Step::Revoke {
                        units,
                        why: Revocation::Shutdown,
                    } = s
                    {
                        revoked.extend(units.iter().map(|t| t.unit.clone()));
                    }
                }
                if !self.stopped {
                    assert_eq!(revoked, was_owned, "a stop revokes everything owned");
                }
                self.stopped = true;
                self.steps(steps, now);
            }
        }
        self.check(!matches!(op, Op::Wait(_)));
    }

    fn read(
        &mut self,
        now: Instant,
        ago: u64,
        dg: Option<i8>,
        mask: Option<u8>,
        add: bool,
        client: Option<Option<u8>>,
    ) {
        // Reads are sequential: sent after the last one came back.
        let sent = now
            .checked_sub(ms(ago))
            .unwrap_or(now)
            .max(self.last_read_done);
        if let Some(c) = client {
            self.conn = c.map(connection);
        }
        let client = self.conn;
        let base = self.processed.as_ref().map_or(0, |p| p.generation) as i64;
        let g = dg.map(|d| (base + i64::from(d)).max(0) as u64);
        let mut row: Option<BTreeSet<String>> = mask.map(|mask| {
            UNITS
                .iter()
                .enumerate()
                .filter(|(i, _)| mask & (1 << i) != 0)
                .map(|(_, u)| u.to_string())
                .collect()
        });
        if add
            && let Some(r) = &mut row
            && let Some(Seen {
                row: Some(last), ..
            }) = &self.processed
        {
            r.extend(last.iter().cloned());
        }
        let text = row
            .as_ref()
            .map(|r| r.iter().map(String::as_str).collect::<Vec<_>>().join(","));
        self.fence(now);
        let out = self.o.read(now, sent, g, text.as_deref(), client);
        self.last_read_done = now;
        self.client = client;
        let steps = self.o.take_steps();
        let only_fenced = |steps: &[Step]| {
            steps.iter().all(|s| {
                matches!(
                    s,
                    Step::Revoke {
                        why: Revocation::Fenced { .. },
                        ..
                    } | Step::Overran { .. }
                )
            })
        };
        let working = !self.work.is_empty();
        let named = self.written.map(|w| w.2);
        if working && named != Some(client) {
            // On another connection than reported: counts for nothing.
            assert_eq!(
                out,
                ReadOutcome::OtherConnection {
                    named: named.flatten()
                }
            );
            assert!(
                only_fenced(&steps),
                "a read on another connection did something: {steps:?}"
            );
            self.steps(steps, now);
            return;
        }
        self.last_read = Some(sent);
        // A generation gone after a numbered one was processed: Redis lost
        // writes; the last report is due again (once), and the tables
        // missed are unknown.
        if dg.is_none() && self.processed.as_ref().is_some_and(|p| p.numbered) {
            if !self.ignored {
                self.reassert = true;
            }
            self.ignored = true;
            self.freeze();
        }
        let g = g.unwrap_or(base as u64);
        let expected = ReadOutcome::Processed;
        if let Some(p) = &self.processed
            && g < p.generation
        {
            assert_eq!(
                out,
                ReadOutcome::Stale {
                    processed: p.generation
                }
            );
            assert!(only_fenced(&steps), "a stale read did something: {steps:?}");
            if !self.ignored {
                self.reassert = true;
            }
            self.ignored = true;
            self.freeze();
            self.steps(steps, now);
            return;
        }
        assert_eq!(out, expected);
        let r = row.clone().unwrap_or_default();
        let mut revoked = BTreeSet::new();
        for s in &steps {
            if let Step::Revoke { units, why } = s
                && !matches!(why, Revocation::Fenced { .. })
            {
                assert!(
                    matches!(why, Revocation::Moved | Revocation::Draining),
                    "{why:?}"
                );
                assert_eq!(*why == Revocation::Draining, self.draining);
                revoked.extend(units.iter().map(|t| t.unit.clone()));
            }
        }
        let want: BTreeSet<String> = self
            .work
            .iter()
            .filter(|(u, w)| !w.stopping && !r.contains(*u) && !self.stopped)
            .map(|(u, _)| u.clone())
            .collect();
        assert_eq!(
            revoked, want,
            "revoked exactly the owned units not in the row"
        );
        let took = self.processed.as_ref().is_some_and(|p| {
            p.row
                .as_ref()
                .is_some_and(|last| last.iter().any(|u| !r.contains(u)))
        });
        // A numbered generation that is not the next one after the last
        // seen (or the first, or one after ignored rows): the member may have
        // been given and taken units it never saw.
        // (A read of the last seen generation and row again changes nothing.)
        let again = self
            .processed
            .as_ref()
            .is_some_and(|p| p.generation == g && p.row == row);
        let unseen = dg.is_some()
            && (self.ignored || self.processed.as_ref().is_none_or(|p| g > p.generation + 1));
        if !again && dg.is_some() {
            self.ignored = false;
        }
        // A read without its generation that took units came from a table
        // whose generation the member never saw: like ignored rows, the
        // next numbered generation must acknowledge it.
        if !again && dg.is_none() && took {
            self.ignored = true;
        }
        if !again && (took || unseen) && self.written.is_none_or(|w| g > w.0) {
            self.owed.insert(g);
        }
        for (u, w) in self.work.iter_mut() {
            if r.contains(u) {
                w.seen = w.seen.max(g);
                w.shown = w.shown.max(sent);
            }
        }
        let numbered =
            dg.is_some() || (again && self.processed.as_ref().is_some_and(|p| p.numbered));
        self.processed = Some(Seen {
            generation: g,
            row,
            sent,
            client,
            numbered,
        });
        if !again {
            self.thaw();
        }
        self.steps(steps, now);
    }

    fn freeze(&mut self) {
        if self.frozen.is_none() {
            self.frozen = Some(self.processed.as_ref().map_or(0, |p| p.generation));
        }
    }

    /// Units start again once a numbered generation above the frozen one
    /// was processed (pings here say nothing of their holder).
    fn thaw(&mut self) {
        if let (Some(at), Some(p)) = (self.frozen, &self.processed)
            && p.numbered
            && p.generation > at
        {
            self.frozen = None;
        }
    }

    /// Every call first ends the holds that ended by `now`: the model
    /// expects exactly those fenced, each at its own end, before anything
    /// else the call does.
    fn fence(&mut self, now: Instant) {
        let ended: BTreeMap<String, Instant> = self
            .work
            .iter()
            .filter(|(_, w)| !w.stopping && self.end(w.shown) <= now)
            .map(|(u, w)| (u.clone(), self.end(w.shown)))
            .collect();
        for u in ended.keys() {
            self.work.get_mut(u).unwrap().stopping = true;
        }
        self.expect_fenced = ended;
    }

    fn steps(&mut self, steps: Vec<Step>, now: Instant) {
        let expected = std::mem::take(&mut self.expect_fenced);
        let mut fenced = BTreeMap::new();
        for s in steps {
            match s {
                Step::Revoke {
                    units,
                    why: Revocation::Fenced { ended },
                } => {
                    assert!(ended <= now);
                    for t in units {
                        assert_eq!(self.work[&t.unit].token, t.token);
                        fenced.insert(t.unit, ended);
                    }
                }
                Step::Revoke { units, .. } => {
                    for t in units {
                        let w = self
                            .work
                            .get_mut(&t.unit)
                            .expect("revoked a unit not owned");
                        assert!(!w.stopping, "revoked twice: {}", t.unit);
                        assert_eq!(w.token, t.token);
                        w.stopping = true;
                    }
                }
                Step::Acquire { units } => {
                    assert_eq!(
                        self.frozen, None,
                        "acquired after Redis lost writes, from rows processed before"
                    );
                    let p = self.processed.clone().expect("acquired before a read");
                    assert!(!self.draining && !self.stopped, "acquired while leaving");
                    let w = self.written.expect("acquired before any report");
                    assert_eq!(
                        w.2, p.client,
                        "acquired before a report named the read's connection"
                    );
                    assert!(
                        self.owed.is_empty(),
                        "acquired before acknowledging {:?}",
                        self.owed
                    );
                    let ping = self.last_ping.expect("acquired before a ping");
                    for t in units {
                        assert!(p.row.as_ref().is_some_and(|r| r.contains(&t.unit)));
                        assert!(
                            !self.work.contains_key(&t.unit),
                            "acquired while still worked on: {}",
                            t.unit
                        );
                        assert_eq!(t.token, FencingToken(p.generation));
                        assert!(p.sent.min(ping) + DEADLINE > now, "acquired without a hold");
                        self.work.insert(
                            t.unit,
                            Work {
                                token: t.token,
                                seen: p.generation,
                                shown: p.sent,
                                stopping: false,
                            },
                        );
                    }
                }
                Step::Overran { units, ended } => {
                    assert!(ended <= now);
                    for t in units {
                        assert!(self.work.get(&t.unit).is_some_and(|w| w.stopping));
                    }
                }
            }
        }
        assert_eq!(fenced, expected, "fenced exactly the holds that ended");
    }

    /// The most a report may claim: every unit still worked on was in a
    /// processed row of a generation `≥ applied` since its acquisition.
    fn claimable(&self) -> u64 {
        let g = self.processed.as_ref().map_or(0, |p| p.generation);
        self.work.values().map(|w| w.seen).fold(g, u64::min)
    }

    /// The report due by the rules, if any.
    fn due(&self) -> Option<Written> {
        self.processed.as_ref()?;
        let most = self.claimable();
        let Some(w) = self.written else {
            return Some((most, self.draining, self.client));
        };
        let owed = self.owed.iter().any(|&g| g <= most);
        if owed || (self.draining && most > w.0) {
            Some((most, self.draining, self.client))
        } else if w.1 != self.draining || w.2 != self.client || self.reassert {
            Some((w.0, self.draining, self.client))
        } else {
            None
        }
    }

    /// A report claims every unit revoked at a generation `≤ applied` is
    /// stopped: every unit still worked on must have been in a processed row
    /// of a generation `≥ applied`. Reports never go back (but after a
    /// start-over, which forgot the last one).
    fn check_report(&self, r: &MemberReport) {
        let p = self.processed.as_ref().expect("a report before a read");
        assert!(r.applied <= p.generation);
        for (u, w) in &self.work {
            assert!(
                r.applied <= w.seen,
                "report {} while {u} (last seen at {}) is still worked on",
                r.applied,
                w.seen
            );
        }
        assert!(
            self.written.is_none_or(|w| w.0 <= r.applied),
            "report went back"
        );
        assert_eq!(r.draining, self.draining);
        assert_eq!(
            r.client, self.client,
            "a report names the last read's connection"
        );
    }

    fn check(&mut self, called: bool) {
        let now = self.t;
        let view = (
            self.o.revision(),
            self.o.owned(),
            self.o.generation(),
            self.o.in_table(),
            self.o.fenced(),
        );
        if view.0 == self.view.0 {
            assert_eq!(view, self.view, "the view changed, the revision did not");
        }
        self.view = view;
        let owned: BTreeSet<String> = self.o.owned().into_iter().map(|t| t.unit).collect();
        let model: BTreeSet<String> = self
            .work
            .iter()
            .filter(|(_, w)| !w.stopping)
            .map(|(u, _)| u.clone())
            .collect();
        assert_eq!(owned, model);
        assert_eq!(
            self.o.stopping(),
            self.work.values().filter(|w| w.stopping).count()
        );
        for (u, w) in &self.work {
            let held = self.o.holds(u, now);
            if w.stopping {
                assert_eq!(held, None);
            } else {
                // Owned means held, within the model's bound.
                let end = self.end(w.shown);
                assert_eq!(self.o.hold_end(u), Some(end));
                assert_eq!(held, (now < end).then_some(w.token));
            }
        }
        let due = self.o.report_due();
        assert_eq!(
            due.map(|r| (r.applied, r.draining, r.client)),
            self.due(),
            "a report is due exactly when the rules say"
        );
        if let Some(r) = due {
            self.check_report(&r);
        }
        assert_eq!(
            self.o
                .written_report()
                .map(|r| (r.applied, r.draining, r.client)),
            self.written
        );
        if self.o.drained() {
            assert!(self.work.is_empty());
            let p = self.processed.as_ref().unwrap();
            assert!(p.row.as_ref().is_none_or(BTreeSet::is_empty));
            assert_eq!(self.written.map(|w| (w.0, w.1)), Some((p.generation, true)));
        }
        // Right after a call, nothing is due by time until the next wake-up.
        if called && let Some(w) = self.o.next_wake() {
            assert!(w > now, "a wake-up in the past");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn ownership_keeps_its_promises(ops in prop::collection::vec(op(), 1..80)) {
        let mut m = Model::new();
        for op in &ops {
            m.apply(op);
        }
        // Liveness: once every stop completes and the due reports are
        // written, nothing is owed; a fresh read (on the reported
        // connection) and ping then give the member its whole row (unless
        // it is leaving), once what that read took is stopped and reported.
        m.apply(&Op::Tick);
        while m.o.stopping() > 0 {
            m.apply(&Op::Stopped(0));
        }
        m.apply(&Op::Reported);
        m.apply(&Op::Reported);
        prop_assert!(m.o.report_due().is_none());
        prop_assert!(m.owed.is_empty());
        m.apply(&Op::Ping);
        m.apply(&Op::read_now(0b111));
        while m.o.stopping() > 0 {
            m.apply(&Op::Stopped(0));
        }
        m.apply(&Op::Reported);
        m.apply(&Op::Reported);
        m.apply(&Op::Ping);
        if !m.draining && !m.stopped {
            let owned: Vec<String> = m.o.owned().into_iter().map(|t| t.unit).collect();
            prop_assert_eq!(owned, names(&["u0", "u1", "u2"]));
        }
    }
}

/// Rules of the holder's view (protocol version 2: `PingView`).
mod views;
