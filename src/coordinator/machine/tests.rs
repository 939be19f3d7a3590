//! Tests of the coordinator's state machine: one per transition, property
//! tests over random event sequences (the executor's contract: events in
//! time order, a `Tick` at every `next_wake`), and a model of several
//! replicas sharing a simulated Redis lease (with the holder's lease
//! connection, for fast takeover) with random delays, pauses, crashes and
//! dropped connections.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use proptest::prelude::*;
use std::time::Instant;

use super::*;
use crate::core::lease::LostLease;
use crate::edge::clock;

fn settings() -> Settings {
    Settings {
        lease: LeaseTiming {
            ttl: Duration::from_millis(2000),
            renew_interval: Duration::from_millis(500),
            renew_deadline: Duration::from_millis(1500),
            retry_interval: Duration::from_millis(500),
        },
        poll_interval: Duration::from_millis(1000),
        takeover_check: Some(Duration::from_millis(50)),
        timing: Timing::DEFAULT,
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn grant(epoch: u64) -> LeaseGrant {
    LeaseGrant {
        token: format!("t{epoch}"),
        epoch,
    }
}

fn held(epoch: u64, generation: u64) -> Acquisition {
    Acquisition::Held {
        pttl: Some(ms(1200)),
        holder: "other".into(),
        epoch,
        generation,
        foreign: None,
        record: None,
    }
}

/// Held by a holder that recorded its lease connection, client `client`.
fn held_by(epoch: u64, client: u64) -> Acquisition {
    Acquisition::Held {
        pttl: Some(ms(1200)),
        holder: "other".into(),
        epoch,
        generation: 0,
        foreign: None,
        record: Some(record(epoch, client)),
    }
}

/// A lease connection known by its client id alone.
fn c(client: u64) -> RedisConnection {
    RedisConnection::id(client)
}

fn record(epoch: u64, client: u64) -> HolderRecord {
    HolderRecord {
        token: format!("t{epoch}"),
        epoch,
        client: RedisConnection::id(client),
    }
}

fn summary(epoch: u64, outcome: CycleOutcome) -> CycleSummary {
    CycleSummary {
        epoch,
        outcome,
        generation_floor: 0,
        own_suspicions: false,
        next_release: None,
        verify_now: false,
    }
}

/// A holder of epoch 7 at `t0`, its first cycle running, as right after an
/// acquisition sent at `t0`.
fn holder(t0: Instant) -> Machine {
    let mut m = Machine::new(settings(), t0);
    assert!(matches!(
        m.step(Event::Tick, t0)[..],
        [Action::Acquire { .. }]
    ));
    let a = m.step(Event::Acquired(Ok(Acquisition::Acquired(grant(7)))), t0);
    assert!(a.contains(&Action::BecameHolder { epoch: 7 }), "{a:?}");
    m
}

fn starts_cycle(a: &[Action]) -> bool {
    a.iter().any(|a| matches!(a, Action::StartCycle { .. }))
}

fn stepped_down(a: &[Action]) -> Option<Transition> {
    a.iter().find_map(|a| match a {
        Action::SteppedDown { transition, .. } => Some(*transition),
        _ => None,
    })
}

fn releases(a: &[Action]) -> bool {
    a.iter().any(|a| matches!(a, Action::Release { .. }))
}

#[test]
fn a_standby_attempts_at_once_then_waits_for_the_lease() {
    let t0 = clock::now();
    let mut m = Machine::new(settings(), t0);
    assert_eq!(m.next_wake(), Some(t0));
    let a = m.step(Event::Tick, t0);
    assert_eq!(
        a,
        [Action::Acquire {
            epoch_floor: 0,
            generation_floor: 0,
            takeover: None,
        }]
    );
    assert_eq!(m.next_wake(), None, "waits for the answer");
    assert!(
        m.step(Event::Tick, t0 + ms(10)).is_empty(),
        "one attempt at a time"
    );
    let a = m.step(Event::Acquired(Ok(held(4, 9))), t0 + ms(10));
    assert!(matches!(
        &a[..],
        [Action::SawHolder {
            epoch: 4,
            generation: 9,
            ..
        }]
    ));
    assert_eq!((m.epoch_floor(), m.generation_floor()), (4, 9));
    // The lease expires in 1.2 s, but a standby never waits longer than the
    // retry interval.
    assert_eq!(m.next_wake(), Some(t0 + ms(510)));
    let a = m.step(Event::Tick, t0 + ms(510));
    assert_eq!(
        a,
        [Action::Acquire {
            epoch_floor: 4,
            generation_floor: 9,
            takeover: None,
        }]
    );
    let a = m.step(Event::Acquired(Err(())), t0 + ms(520));
    assert!(a.is_empty());
    assert_eq!(m.next_wake(), Some(t0 + ms(1020)));
}

#[test]
fn an_acquisition_makes_a_holder_that_cycles_and_renews() {
    let t0 = clock::now();
    let mut m = Machine::new(settings(), t0);
    m.step(Event::Tick, t0);
    let a = m.step(
        Event::Acquired(Ok(Acquisition::Acquired(grant(3)))),
        t0 + ms(5),
    );
    assert_eq!(m.epoch_floor(), 3);
    // The lease counts from when the attempt was sent.
    assert!(a.contains(&Action::ActsUntil(t0 + ms(1500))), "{a:?}");
    assert!(starts_cycle(&a), "{a:?}");
    assert!(m.may_act(t0 + ms(1499)) && !m.may_act(t0 + ms(1500)));
    // Renewal due at t0 + 500 ms.
    assert_eq!(m.next_wake(), Some(t0 + ms(500)));
    let a = m.step(Event::Tick, t0 + ms(500));
    let [
        Action::Renew {
            budget, sent_at, ..
        },
    ] = &a[..]
    else {
        panic!("{a:?}")
    };
    assert_eq!(*budget, ms(1000), "what is left before the deadline");
    assert_eq!(*sent_at, t0 + ms(500));
    let a = m.step(
        Event::Renewed {
            sent_at: t0 + ms(500),
            result: Ok(Renewal::Renewed),
        },
        t0 + ms(520),
    );
    assert_eq!(a, [Action::ActsUntil(t0 + ms(2000))]);
    // The next cycle only after the running one finished.
    assert!(!starts_cycle(&m.step(Event::Tick, t0 + ms(1000))));
    let a = m.step(
        Event::CycleDone(summary(3, CycleOutcome::Unchanged)),
        t0 + ms(1100),
    );
    assert!(starts_cycle(&a), "one poll interval after the last: {a:?}");
}

#[test]
fn a_member_down_brings_the_next_full_cycle_forward() {
    let t0 = clock::now();
    let mut m = holder(t0);
    // The first cycle runs; a member goes down meanwhile: the next cycle
    // starts as soon as this one ends, not a poll interval later.
    let a = m.step(Event::MemberDown, t0 + ms(10));
    assert!(!starts_cycle(&a), "never two cycles at once: {a:?}");
    let a = m.step(
        Event::CycleDone(summary(7, CycleOutcome::Unchanged)),
        t0 + ms(20),
    );
    assert!(starts_cycle(&a), "{a:?}");
    let full = |a: &[Action]| {
        a.iter().any(|a| {
            matches!(
                a,
                Action::StartCycle {
                    handoff_only: false,
                    ..
                }
            )
        })
    };
    assert!(full(&a), "a full cycle pings: {a:?}");
    let a = m.step(
        Event::CycleDone(summary(7, CycleOutcome::Written { table: true })),
        t0 + ms(21),
    );
    assert!(!starts_cycle(&a), "back to the poll interval: {a:?}");
    // Another one right after a cycle started: spaced.
    let a = m.step(Event::MemberDown, t0 + ms(21));
    assert!(!starts_cycle(&a), "{a:?}");
    assert_eq!(
        m.next_wake(),
        Some(t0 + ms(20) + Timing::DEFAULT.early_cycle_spacing)
    );
    let a = m.step(
        Event::Tick,
        t0 + ms(20) + Timing::DEFAULT.early_cycle_spacing,
    );
    assert!(full(&a), "{a:?}");
    // A standby ignores it.
    let mut s = Machine::new(settings(), t0);
    s.step(Event::Tick, t0);
    s.step(Event::Acquired(Ok(held(4, 9))), t0 + ms(1));
    assert!(s.step(Event::MemberDown, t0 + ms(2)).is_empty());
}

#[test]
fn a_first_cycle_on_inherited_liveness_is_followed_by_a_full_cycle_at_once() {
    let t0 = clock::now();
    let mut m = holder(t0);
    // The first cycle decided on what the last holder left, pinging nobody:
    // the next full cycle, whose pings verify it, starts as it ends.
    let a = m.step(
        Event::CycleDone(CycleSummary {
            verify_now: true,
            ..summary(7, CycleOutcome::Unchanged)
        }),
        t0 + ms(40),
    );
    assert!(
        a.iter().any(|a| matches!(
            a,
            Action::StartCycle {
                handoff_only: false,
                ..
            }
        )),
        "{a:?}"
    );
    // Then the poll interval as usual.
    let a = m.step(
        Event::CycleDone(summary(7, CycleOutcome::Unchanged)),
        t0 + ms(300),
    );
    assert!(!starts_cycle(&a), "{a:?}");
    assert!(!starts_cycle(&m.step(Event::Tick, t0 + ms(1039))));
    assert!(starts_cycle(&m.step(Event::Tick, t0 + ms(1040))));
    // A cycle of another holding asks nothing.
    let a = m.step(
        Event::CycleDone(CycleSummary {
            verify_now: true,
            ..summary(6, CycleOutcome::Unchanged)
        }),
        t0 + ms(1100),
    );
    assert!(!starts_cycle(&a), "{a:?}");
}

#[test]
fn a_holder_that_cannot_renew_steps_down_at_its_deadline_and_releases() {
    let t0 = clock::now();
    let mut m = holder(t0);
    m.step(Event::Tick, t0 + ms(500));
    let a = m.step(
        Event::Renewed {
            sent_at: t0 + ms(500),
            result: Err(()),
        },
        t0 + ms(600),
    );
    assert!(a.is_empty());
    // Retried soon, never scheduled past the deadline.
    let wake = m.next_wake().unwrap();
    assert!(wake <= t0 + ms(1500) && wake > t0 + ms(600), "{wake:?}");
    let a = m.step(Event::Tick, t0 + ms(1500));
    assert_eq!(stepped_down(&a), Some(Transition::Lapsed));
    assert!(releases(&a), "a lease that may still be ours is given back");
    assert!(
        a.contains(&Action::AbortCycle),
        "the cycle in flight is dropped"
    );
    assert!(!m.may_act(t0 + ms(1500)));
    assert_eq!(
        m.next_wake(),
        Some(t0 + ms(2000)),
        "then waits a retry interval"
    );
}

#[test]
fn any_event_after_the_deadline_steps_down_first() {
    let t0 = clock::now();
    let mut m = holder(t0);
    let a = m.step(Event::Generation(5), t0 + ms(1600));
    assert_eq!(stepped_down(&a), Some(Transition::Lapsed));
    assert_eq!(m.generation_floor(), 5);
}

#[test]
fn a_late_renewal_that_arrives_in_time_keeps_the_lease() {
    let t0 = clock::now();
    let mut m = holder(t0);
    m.step(Event::Tick, t0 + ms(500));
    let a = m.step(
        Event::Renewed {
            sent_at: t0 + ms(500),
            result: Ok(Renewal::Renewed),
        },
        t0 + ms(1600),
    );
    assert_eq!(stepped_down(&a), None, "{a:?}");
    assert!(m.may_act(t0 + ms(1600)));
}

#[test]
fn a_lost_lease_or_a_fenced_write_steps_down_without_a_release() {
    let t0 = clock::now();
    let mut m = holder(t0);
    m.step(Event::Tick, t0 + ms(500));
    let a = m.step(
        Event::Renewed {
            sent_at: t0 + ms(500),
            result: Ok(Renewal::Lost(LostLease::Taken)),
        },
        t0 + ms(510),
    );
    assert_eq!(stepped_down(&a), Some(Transition::Lost));
    assert!(!releases(&a), "not ours any more: nothing to release");
    assert!(a.contains(&Action::SteppedDown {
        epoch: 7,
        transition: Transition::Lost,
        detail: Some(LostLease::Taken.describe())
    }));

    let mut m = holder(t0);
    let a = m.step(
        Event::CycleDone(summary(7, CycleOutcome::Fenced)),
        t0 + ms(100),
    );
    assert_eq!(stepped_down(&a), Some(Transition::Fenced));
    assert!(!releases(&a));
}

#[test]
fn own_suspicions_hand_the_lease_over_once_the_census_counts_others() {
    let t0 = clock::now();
    let census = |replicas| {
        Event::Census(CensusView {
            index: 0,
            replicas,
            interval: 1,
        })
    };
    let suspecting = |outcome| CycleSummary {
        own_suspicions: true,
        ..summary(7, outcome)
    };
    let mut m = holder(t0);
    m.step(census(3), t0);
    let a = m.step(
        Event::CycleDone(suspecting(CycleOutcome::Written { table: false })),
        t0 + ms(100),
    );
    assert_eq!(stepped_down(&a), Some(Transition::Abdicated));
    assert!(releases(&a));
    // Its own release notice does not bring it back at once.
    let wake = m.next_wake();
    m.step(Event::ReleaseNotice { epoch: Some(7) }, t0 + ms(110));
    assert_eq!(m.next_wake(), wake);

    // Alone, or not knowing yet: it keeps the lease and the suspicions...
    let mut m = holder(t0);
    let a = m.step(
        Event::CycleDone(suspecting(CycleOutcome::Written { table: false })),
        t0 + ms(100),
    );
    assert_eq!(
        stepped_down(&a),
        None,
        "no census yet: nobody known to hand over to"
    );
    m.step(census(1), t0 + ms(150));
    let a = m.step(
        Event::CycleDone(suspecting(CycleOutcome::Unchanged)),
        t0 + ms(200),
    );
    assert_eq!(stepped_down(&a), None, "alone: nobody to hand over to");
    // ...and hands over in the first cycle after the census counts others
    // (the episode began earlier; found by chaos scenario 9b).
    m.step(census(3), t0 + ms(250));
    let a = m.step(
        Event::CycleDone(suspecting(CycleOutcome::Unchanged)),
        t0 + ms(300),
    );
    assert_eq!(stepped_down(&a), Some(Transition::Abdicated));

    // Never before the suspicions are stored.
    let mut m = holder(t0);
    m.step(census(3), t0);
    for outcome in [CycleOutcome::Failed, CycleOutcome::Skipped] {
        let a = m.step(Event::CycleDone(suspecting(outcome)), t0 + ms(100));
        assert_eq!(stepped_down(&a), None, "{outcome:?}");
    }
}

#[test]
fn a_stale_cycle_result_changes_nothing() {
    let t0 = clock::now();
    let mut m = holder(t0);
    let a = m.step(
        Event::CycleDone(summary(6, CycleOutcome::Fenced)),
        t0 + ms(100),
    );
    assert_eq!(stepped_down(&a), None);
    assert!(m.holding().is_some());
}

#[test]
fn someone_elses_release_wakes_a_standby_at_once() {
    let t0 = clock::now();
    let mut m = Machine::new(settings(), t0);
    m.step(Event::Tick, t0);
    m.step(Event::Acquired(Ok(held(4, 0))), t0);
    m.step(Event::ReleaseNotice { epoch: Some(4) }, t0 + ms(20));
    assert_eq!(m.next_wake(), Some(t0 + ms(20)));
    // A notice with an unreadable payload does the same.
    let mut m = Machine::new(settings(), t0);
    m.step(Event::Tick, t0);
    m.step(Event::Acquired(Ok(held(4, 0))), t0);
    m.step(Event::ReleaseNotice { epoch: None }, t0 + ms(30));
    assert_eq!(m.next_wake(), Some(t0 + ms(30)));
    // A holder ignores notices.
    let mut m = holder(t0);
    assert!(
        m.step(Event::ReleaseNotice { epoch: Some(2) }, t0 + ms(10))
            .is_empty()
    );
}

#[test]
fn a_standby_checks_the_holders_connection_and_takes_over_once_it_is_closed() {
    let t0 = clock::now();
    let mut m = Machine::new(settings(), t0);
    m.step(Event::Tick, t0);
    let a = m.step(Event::Acquired(Ok(held_by(4, 9))), t0);
    assert!(
        matches!(
            &a[..],
            [Action::SawHolder {
                watchable: true,
                ..
            }]
        ),
        "{a:?}"
    );
    // Checked every 50 ms, well before the next attempt (500 ms).
    assert_eq!(m.next_wake(), Some(t0 + ms(50)));
    assert_eq!(
        m.step(Event::Tick, t0 + ms(50)),
        [Action::CheckHolder { client: c(9) }]
    );
    assert_eq!(m.next_wake(), Some(t0 + ms(500)), "one check at a time");
    assert!(m.step(Event::Tick, t0 + ms(60)).is_empty());
    let open = |client, result| Event::HolderChecked {
        client: c(client),
        result,
    };
    assert!(
        m.step(open(9, Ok(HolderConnection::Open)), t0 + ms(60))
            .is_empty()
    );
    assert_eq!(m.next_wake(), Some(t0 + ms(110)));
    // An error is no reason to take over: check again later.
    m.step(Event::Tick, t0 + ms(110));
    assert!(m.step(open(9, Err(())), t0 + ms(115)).is_empty());
    assert_eq!(m.next_wake(), Some(t0 + ms(165)));
    // An answer about another connection (a late one) changes nothing.
    m.step(Event::Tick, t0 + ms(165));
    assert!(
        m.step(open(8, Ok(HolderConnection::Closed)), t0 + ms(166))
            .is_empty()
    );
    // Closed: take over exactly the record seen.
    let a = m.step(open(9, Ok(HolderConnection::Closed)), t0 + ms(170));
    assert_eq!(
        a,
        [Action::Acquire {
            epoch_floor: 4,
            generation_floor: 0,
            takeover: Some(record(4, 9)),
        }]
    );
    assert_eq!(attempt_sent(&m), Some(t0 + ms(170)));
    // The takeover refused (the holder renewed over a new connection):
    // watch the new record.
    let a = m.step(Event::Acquired(Ok(held_by(4, 12))), t0 + ms(175));
    assert_eq!(stepped_down(&a), None);
    assert_eq!(m.next_wake(), Some(t0 + ms(225)));
    assert_eq!(
        m.step(Event::Tick, t0 + ms(225)),
        [Action::CheckHolder { client: c(12) }]
    );
    // CLIENT not permitted: no more checks until the next attempt.
    assert!(
        m.step(open(12, Ok(HolderConnection::Refused)), t0 + ms(230))
            .is_empty()
    );
    assert_eq!(m.next_wake(), Some(t0 + ms(675)));
    // ...and not for a minute (each refusal is an ACL LOG entry).
    m.step(Event::Tick, t0 + ms(675));
    m.step(Event::Acquired(Ok(held_by(4, 12))), t0 + ms(680));
    assert_eq!(m.next_wake(), Some(t0 + ms(1180)), "not watched");
    m.step(Event::Tick, t0 + ms(60_300));
    m.step(Event::Acquired(Ok(held_by(4, 12))), t0 + ms(60_300));
    assert_eq!(m.next_wake(), Some(t0 + ms(60_350)), "watched again");
    // A holder that recorded no connection is not watched.
    m.step(Event::Tick, t0 + ms(60_350));
    m.step(Event::Tick, t0 + ms(60_800));
    m.step(Event::Acquired(Ok(held(4, 0))), t0 + ms(60_800));
    assert_eq!(m.next_wake(), Some(t0 + ms(61_300)));
    // Nor without takeover checks configured.
    let mut m = Machine::new(
        Settings {
            takeover_check: None,
            ..settings()
        },
        t0,
    );
    m.step(Event::Tick, t0);
    m.step(Event::Acquired(Ok(held_by(4, 9))), t0);
    assert_eq!(m.next_wake(), Some(t0 + ms(500)));
}

#[test]
fn shutdown_releases_what_it_holds_then_stops() {
    let t0 = clock::now();
    let mut m = holder(t0);
    let a = m.step(Event::Shutdown, t0 + ms(10));
    assert!(a.contains(&Action::AbortCycle));
    assert_eq!(stepped_down(&a), Some(Transition::Released));
    assert!(releases(&a));
    assert!(!a.contains(&Action::Stop), "waits for the release");
    assert!(m.step(Event::Tick, t0 + ms(20)).is_empty());
    assert_eq!(m.step(Event::ReleaseDone, t0 + ms(30)), [Action::Stop]);

    let mut m = Machine::new(settings(), t0);
    assert_eq!(m.step(Event::Shutdown, t0), [Action::Stop]);

    // An acquisition in flight at shutdown: what it brings is given back.
    let mut m = Machine::new(settings(), t0);
    m.step(Event::Tick, t0);
    assert!(m.step(Event::Shutdown, t0).is_empty());
    let a = m.step(
        Event::Acquired(Ok(Acquisition::Acquired(grant(9)))),
        t0 + ms(5),
    );
    assert_eq!(a, [Action::Release { grant: grant(9) }]);
    assert_eq!(m.step(Event::ReleaseDone, t0 + ms(6)), [Action::Stop]);
    let mut m = Machine::new(settings(), t0);
    m.step(Event::Tick, t0);
    m.step(Event::Shutdown, t0);
    assert_eq!(m.step(Event::Acquired(Ok(held(1, 0))), t0), [Action::Stop]);
}

#[test]
fn floors_follow_every_source() {
    let t0 = clock::now();
    let mut m = holder(t0);
    m.step(Event::Generation(40), t0);
    let a = m.step(
        Event::CycleDone(CycleSummary {
            generation_floor: 41,
            ..summary(7, CycleOutcome::Written { table: true })
        }),
        t0 + ms(100),
    );
    assert_eq!(m.generation_floor(), 41);
    m.step(Event::Generation(3), t0 + ms(100));
    assert_eq!(m.generation_floor(), 41, "never backwards");
    let _ = a;
    let a = m.step(Event::Tick, t0 + ms(1000));
    assert!(
        a.iter().any(|a| matches!(
            a,
            Action::StartCycle {
                generation_floor: 41,
                ..
            }
        )),
        "{a:?}"
    );
}

// ---------------------------------------------------------------------------
// Property tests over random event sequences.

/// What the environment may do next.
#[derive(Debug, Clone)]
enum Op {
    /// Time passes (ms); ticks are delivered at every `next_wake` meanwhile.
    Advance(u64),
    /// The acquisition in flight answers: acquired, held, or an error.
    AnswerAcquire(u8),
    /// The renewal in flight answers: renewed, lost, or an error.
    AnswerRenew(u8),
    /// The holder check in flight answers: open, closed, refused, an error.
    AnswerCheck(u8),
    /// The cycle in flight ends with this outcome (and maybe a mass failure,
    /// and maybe a handoff wait ending that many ms later, and maybe having
    /// decided on inherited liveness).
    FinishCycle(u8, bool, Option<u64>, bool),
    /// A member acknowledged (`{T}:acked`).
    Hint,
    /// A member's connection closed and its ping failed.
    MemberDown,
    FinishRelease,
    Notice(Option<u64>),
    Generation(u64),
    Census(u64),
    Shutdown,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u64..1200).prop_map(Op::Advance),
        2 => (0u8..4).prop_map(Op::AnswerAcquire),
        2 => (0u8..3).prop_map(Op::AnswerRenew),
        2 => (0u8..4).prop_map(Op::AnswerCheck),
        2 => (0u8..6, any::<bool>(), proptest::option::of(0u64..1500), any::<bool>())
            .prop_map(|(o, m, r, v)| Op::FinishCycle(o, m, r, v)),
        1 => Just(Op::Hint),
        1 => Just(Op::MemberDown),
        1 => Just(Op::FinishRelease),
        1 => proptest::option::of(0u64..20).prop_map(Op::Notice),
        1 => (0u64..100).prop_map(Op::Generation),
        1 => (1u64..4).prop_map(Op::Census),
        1 => Just(Op::Shutdown),
    ]
}

/// The environment's view of what is in flight, to answer only real calls
/// and to check the machine's contract.
#[derive(Default, Debug)]
struct InFlight {
    acquire: bool,
    renew: Option<Instant>,
    cycle: Option<(u64, Instant)>,
    release: usize,
    /// The send instants of the acquisition and renewals that succeeded, per epoch.
    good_sends: BTreeMap<u64, Instant>,
    next_epoch: u64,
    stopped: bool,
    /// Whether a lease was given up without a release since.
    owes_release: bool,
    /// The client id of the holder check in flight.
    check: Option<u64>,
    /// Client ids Redis said are closed.
    closed: BTreeSet<u64>,
}

fn check(m: &Machine, a: &[Action], now: Instant, f: &mut InFlight, before: (u64, u64)) {
    let s = settings();
    assert!(
        m.epoch_floor() >= before.0 && m.generation_floor() >= before.1,
        "floors went back"
    );
    if let Some(l) = m.holding() {
        assert!(
            now < l.acts_until(),
            "a holder past its deadline at {now:?}"
        );
        // The local deadline comes from a call that succeeded, and is before
        // Redis could expire the lease it extended (sent + TTL).
        let sent = f.good_sends[&l.epoch()];
        assert_eq!(l.acts_until(), sent + s.lease.renew_deadline);
        assert!(l.acts_until() < sent + s.lease.ttl);
    }
    for action in a {
        match action {
            Action::Acquire { takeover, .. } => {
                assert!(!f.acquire, "two acquisitions in flight");
                f.acquire = true;
                if let Some(r) = takeover {
                    assert!(
                        f.closed.contains(&r.client.client),
                        "took over a holding whose connection was not seen closed"
                    );
                }
            }
            Action::CheckHolder { client } => {
                assert!(f.check.is_none(), "two holder checks in flight");
                assert!(
                    matches!(m.phase(), Phase::Standby { .. }),
                    "only a standby checks the holder"
                );
                f.check = Some(client.client);
            }
            Action::Renew { grant, sent_at, .. } => {
                assert!(f.renew.is_none(), "two renewals in flight");
                assert!(m.holding().is_some_and(|l| l.epoch() == grant.epoch));
                // The answer carries what the action said (never the
                // environment's own idea of the send time).
                f.renew = Some(*sent_at);
            }
            Action::StartCycle {
                grant, acts_until, ..
            } => {
                assert!(f.cycle.is_none(), "two cycles in flight");
                assert!(now < *acts_until, "a cycle that may not write");
                assert!(m.may_act(now), "a cycle without a valid lease");
                f.cycle = Some((grant.epoch, now));
            }
            Action::AbortCycle => f.cycle = None,
            Action::Release { .. } => {
                f.release += 1;
                f.owes_release = false;
            }
            Action::SteppedDown { transition, .. } => {
                if transition.releases() {
                    assert!(
                        a.iter().any(|x| matches!(x, Action::Release { .. })),
                        "gave up a lease without releasing it"
                    );
                }
                f.renew = None;
            }
            Action::Stop => {
                assert_eq!(f.release, 0, "stopped before a release finished");
                assert!(!f.owes_release);
                f.stopped = true;
            }
            _ => {}
        }
    }
    if f.stopped {
        assert_eq!(*m.phase(), Phase::Stopped);
    }
}

fn drive(ops: Vec<Op>) {
    let s = settings();
    let mut now = clock::now();
    let mut m = Machine::new(s, now);
    let mut f = InFlight {
        next_epoch: 1,
        ..InFlight::default()
    };
    let feed = |m: &mut Machine, f: &mut InFlight, ev: Event, now: Instant| {
        let before = (m.epoch_floor(), m.generation_floor());
        if let Event::Acquired(_) = &ev {
            f.acquire = false;
        }
        if let Event::ReleaseDone = &ev {
            f.release -= 1;
        }
        let a = m.step(ev, now);
        check(m, &a, now, f, before);
    };
    for op in ops {
        if f.stopped {
            break;
        }
        match op {
            Op::Advance(d) => {
                let until = now + ms(d);
                while let Some(w) = m.next_wake().filter(|w| *w <= until) {
                    now = now.max(w);
                    feed(&mut m, &mut f, Event::Tick, now);
                    if f.stopped {
                        break;
                    }
                }
                now = until;
            }
            Op::AnswerAcquire(k) if f.acquire => {
                let ev = match k {
                    0 => {
                        let epoch = f.next_epoch;
                        f.next_epoch += 1;
                        // Sent when the machine asked: the last Acquire.
                        f.good_sends.insert(epoch, attempt_sent(&m).unwrap_or(now));
                        Acquisition::Acquired(grant(epoch))
                    }
                    1 => held(f.next_epoch, 7),
                    3 => held_by(f.next_epoch, f.next_epoch % 3),
                    _ => {
                        feed(&mut m, &mut f, Event::Acquired(Err(())), now);
                        continue;
                    }
                };
                let was_stopping = matches!(m.phase(), Phase::Stopping { .. });
                if was_stopping && matches!(ev, Acquisition::Acquired(_)) {
                    f.owes_release = true;
                }
                feed(&mut m, &mut f, Event::Acquired(Ok(ev)), now);
            }
            Op::AnswerRenew(k) if f.renew.is_some() => {
                let sent_at = f.renew.take().unwrap();
                let result = match k {
                    0 => {
                        if let Some(l) = m.holding() {
                            let e = f.good_sends.entry(l.epoch()).or_insert(sent_at);
                            *e = (*e).max(sent_at);
                        }
                        Ok(Renewal::Renewed)
                    }
                    1 => Ok(Renewal::Lost(LostLease::Expired)),
                    _ => Err(()),
                };
                feed(&mut m, &mut f, Event::Renewed { sent_at, result }, now);
            }
            Op::AnswerCheck(k) if f.check.is_some() => {
                let client = f.check.take().unwrap();
                let result = match k {
                    0 => Ok(HolderConnection::Open),
                    1 => {
                        f.closed.insert(client);
                        Ok(HolderConnection::Closed)
                    }
                    2 => Ok(HolderConnection::Refused),
                    _ => Err(()),
                };
                feed(
                    &mut m,
                    &mut f,
                    Event::HolderChecked {
                        client: c(client),
                        result,
                    },
                    now,
                );
            }
            Op::FinishCycle(k, mass, release, verify_now) if f.cycle.is_some() => {
                let (epoch, _) = f.cycle.take().unwrap();
                let outcome = match k {
                    0 => CycleOutcome::Skipped,
                    1 => CycleOutcome::Unchanged,
                    2 => CycleOutcome::NotActing,
                    3 => CycleOutcome::Written { table: true },
                    4 => CycleOutcome::Fenced,
                    _ => CycleOutcome::Failed,
                };
                let ev = Event::CycleDone(CycleSummary {
                    epoch,
                    outcome,
                    generation_floor: 0,
                    own_suspicions: mass,
                    next_release: release.map(|r| now + ms(r)),
                    verify_now,
                });
                feed(&mut m, &mut f, ev, now);
            }
            Op::FinishRelease if f.release > 0 => feed(&mut m, &mut f, Event::ReleaseDone, now),
            Op::Hint => feed(&mut m, &mut f, Event::HandoffHint, now),
            Op::MemberDown => feed(&mut m, &mut f, Event::MemberDown, now),
            Op::Notice(e) => feed(&mut m, &mut f, Event::ReleaseNotice { epoch: e }, now),
            Op::Generation(g) => feed(&mut m, &mut f, Event::Generation(g), now),
            Op::Census(n) => {
                let view = CensusView {
                    index: 0,
                    replicas: n,
                    interval: 1,
                };
                feed(&mut m, &mut f, Event::Census(view), now)
            }
            Op::Shutdown => {
                if m.holding().is_some() {
                    f.owes_release = true;
                }
                feed(&mut m, &mut f, Event::Shutdown, now)
            }
            _ => {}
        }
    }
}

/// When the acquisition in flight was sent (the machine keeps it).
fn attempt_sent(m: &Machine) -> Option<Instant> {
    match m.phase() {
        Phase::Acquiring { sent_at } => Some(*sent_at),
        _ => None,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Over random sequences: never writes without a valid lease, steps down
    /// before the lease can expire, floors only grow, one call of each kind in
    /// flight, a lease given up is released, shutdown stops only after.
    #[test]
    fn the_machine_keeps_its_guarantees(ops in proptest::collection::vec(op(), 1..80)) {
        drive(ops);
    }
}

// ---------------------------------------------------------------------------
// Several replicas, one simulated Redis lease.

/// A Redis lease as `acquire.lua`, `renew.lua` and `release.lua` keep it,
/// with the holder's connection record (`meta.holder_conn`) and the
/// connections Redis has open.
#[derive(Default, Debug)]
struct RedisLease {
    holder: Option<(String, Instant)>,
    epoch: u64,
    /// `(token, client id)`: the connection the holder of `token` renews on,
    /// as its last acquisition or renewal recorded it.
    conn: Option<(String, u64)>,
    /// Client ids of the open connections.
    open: BTreeSet<u64>,
    /// Tokens whose holding a takeover replaced.
    taken_over: BTreeSet<String>,
    /// Every acquisition: (when, replica, epoch, takeover).
    acquisitions: Vec<(Instant, usize, u64, bool)>,
}

impl RedisLease {
    fn at(&mut self, t: Instant) -> Option<&str> {
        if self.holder.as_ref().is_some_and(|(_, exp)| *exp <= t) {
            self.holder = None;
        }
        self.holder.as_ref().map(|(t, _)| t.as_str())
    }

    /// Whether a write fenced by `grant` passes at `t` (`commit.lua`).
    fn accepts(&mut self, grant: &LeaseGrant, t: Instant) -> bool {
        self.at(t) == Some(grant.token.as_str()) && self.epoch == grant.epoch
    }

    /// Processes one call at `t` that arrived on connection `client` and
    /// records `arg` as the caller's client id (`None`: not known yet);
    /// returns the replica's answer.
    fn process(
        &mut self,
        call: &CallKind,
        replica: usize,
        (client, arg): (u64, Option<u64>),
        t: Instant,
        ttl: Duration,
    ) -> Event {
        let _ = client;
        let current = self.at(t).map(str::to_string);
        match call {
            CallKind::Acquire { takeover } => {
                // The takeover's compare-and-set: exactly the record seen.
                let replaced = takeover.as_ref().is_some_and(|r| {
                    current.as_deref() == Some(r.token.as_str())
                        && self.epoch == r.epoch
                        && self.conn == Some((r.token.clone(), r.client.client))
                });
                if replaced {
                    let r = takeover.as_ref().unwrap();
                    assert!(
                        !self.open.contains(&r.client.client),
                        "took over a holding whose connection is open"
                    );
                    self.taken_over.insert(r.token.clone());
                }
                match current {
                    Some(_) if !replaced => {
                        let token = current.unwrap();
                        let record = match &self.conn {
                            Some((t, id)) if *t == token => Some(HolderRecord {
                                token: token.clone(),
                                epoch: self.epoch,
                                client: c(*id),
                            }),
                            _ => None,
                        };
                        Event::Acquired(Ok(Acquisition::Held {
                            pttl: Some(self.holder.as_ref().unwrap().1 - t),
                            holder: String::new(),
                            epoch: self.epoch,
                            generation: 0,
                            foreign: None,
                            record,
                        }))
                    }
                    _ => {
                        self.epoch += 1;
                        let token = format!("r{replica}-{}", self.epoch);
                        self.holder = Some((token.clone(), t + ttl));
                        self.conn = arg.map(|c| (token.clone(), c));
                        self.acquisitions
                            .push((t, replica, self.epoch, takeover.is_some()));
                        Event::Acquired(Ok(Acquisition::Acquired(LeaseGrant {
                            token,
                            epoch: self.epoch,
                        })))
                    }
                }
            }
            CallKind::Fix { token, epoch } => self.process(
                &CallKind::Renew {
                    sent_at: t,
                    token: token.clone(),
                    epoch: *epoch,
                },
                replica,
                (client, arg),
                t,
                ttl,
            ),
            CallKind::Renew {
                sent_at,
                token,
                epoch,
            } => {
                let ok = current.as_deref() == Some(token.as_str()) && self.epoch == *epoch;
                if ok {
                    self.holder = Some((token.clone(), t + ttl));
                    self.conn = arg.map(|c| (token.clone(), c));
                }
                Event::Renewed {
                    sent_at: *sent_at,
                    result: Ok(if ok {
                        Renewal::Renewed
                    } else {
                        Renewal::Lost(LostLease::Taken)
                    }),
                }
            }
            CallKind::Release { token } => {
                if current.as_deref() == Some(token.as_str()) {
                    self.holder = None;
                }
                Event::ReleaseDone
            }
            CallKind::Check { client: asked } => Event::HolderChecked {
                client: c(*asked),
                result: Ok(if self.open.contains(asked) {
                    HolderConnection::Open
                } else {
                    HolderConnection::Closed
                }),
            },
        }
    }
}

#[derive(Debug, Clone)]
enum CallKind {
    Acquire {
        takeover: Option<HolderRecord>,
    },
    Renew {
        sent_at: Instant,
        token: String,
        epoch: u64,
    },
    Release {
        token: String,
    },
    Check {
        client: u64,
    },
    /// The edge's own renewal that corrects the connection record; its answer
    /// goes to nobody.
    Fix {
        token: String,
        epoch: u64,
    },
}

impl CallKind {
    /// The executor's answer to a call that failed (no reply by its deadline).
    fn failed(&self) -> Event {
        match self {
            CallKind::Acquire { .. } => Event::Acquired(Err(())),
            CallKind::Renew { sent_at, .. } => Event::Renewed {
                sent_at: *sent_at,
                result: Err(()),
            },
            CallKind::Release { .. } => Event::ReleaseDone,
            CallKind::Check { client } => Event::HolderChecked {
                client: c(*client),
                result: Err(()),
            },
            CallKind::Fix { .. } => Event::Tick,
        }
    }
}

/// A call on its way to Redis: (processed at, replica, call, (the client id
/// of the connection it goes over, the id the edge records), reply delay).
type ToRedis = (Instant, usize, CallKind, (u64, Option<u64>), Duration);

/// A fault of a replica: at `at` ms, its Redis connection closes, and it
/// reconnects at once (`crash: false`, a dropped connection) or never runs
/// again (`crash: true`, SIGKILL).
#[derive(Debug, Clone, Copy)]
struct Fault {
    replica: u64,
    at: u64,
    crash: bool,
}

/// Runs `n` replicas against one simulated lease: every call reaches Redis
/// after a random delay (or is lost, and fails after a call deadline) and its
/// answer comes back after another; replicas are
/// paused now and then (a GC pause, a frozen container) and then catch up;
/// each replica's monotonic clock runs at its own rate (up to 10% off Redis'
/// clock). A cycle writes the instant it starts.
///
/// Faults close a replica's Redis connection: calls that reached Redis on it
/// are processed (their answers are lost: the executor sees an error at its
/// deadline), later ones go over a new connection with a new client id, which
/// the edge learns from the first answer on it (the pipelined `CLIENT ID`)
/// and records from its next call on. A crashed replica never runs again.
///
/// Checked at every step:
/// - a takeover only ever replaces a holding whose recorded connection is
///   closed (in `RedisLease::process`);
/// - whenever a replica writes, Redis accepts the write, unless that replica's
///   holding was taken over (then the write is fenced and the replica steps
///   down); epochs of accepted writes never go back;
/// - at most one replica that may act holds the lease in Redis, and any other
///   that may act was taken over (its writes are fenced): so at most one
///   replica's writes are ever accepted. Without faults nobody is taken over,
///   so no two replicas ever act at once (the renew deadline's margin below
///   the TTL is what absorbs the clock rates: acting until the TTL fails
///   this test).
///
/// Returns the lease's history.
// Replicas are indexes into several parallel vectors (machines, clocks, pauses).
#[allow(clippy::needless_range_loop)]
fn simulate(
    n: usize,
    delays: Vec<u64>,
    pauses: Vec<(u64, u64, u64)>,
    rates: Vec<f64>,
    faults: Vec<Fault>,
) -> RedisLease {
    let s = settings();
    let t0 = clock::now();
    let tick = ms(5);
    let mut machines: Vec<Machine> = (0..n).map(|_| Machine::new(s, t0)).collect();
    let mut redis = RedisLease::default();
    // Each replica's connection (its client id) and the id its edge last learned.
    let mut conn: Vec<u64> = (1..=n as u64).collect();
    let mut learned: Vec<Option<u64>> = vec![None; n];
    let mut next_client = n as u64 + 1;
    redis.open.extend(conn.iter().copied());
    let mut crashed = vec![false; n];
    let mut faults: Vec<(usize, Instant, bool)> = faults
        .iter()
        .map(|f| ((f.replica as usize) % n, t0 + ms(f.at), f.crash))
        .collect();
    faults.sort_by_key(|f| f.1);
    let mut last_accepted_epoch = 0;
    let mut to_redis: Vec<ToRedis> = Vec::new();
    // (delivered at, replica, event), in order per replica
    let mut to_replica: Vec<(Instant, usize, Event)> = Vec::new();
    // Every call draws two delays (out, back), so outgoing delays are the
    // even draws: the even indexes of an even-length list, every index of an
    // odd-length one. All of them lost: nothing ever reaches Redis.
    let all_lost = delays
        .iter()
        .enumerate()
        .filter(|(i, _)| delays.len() % 2 == 1 || i % 2 == 0)
        .all(|(_, d)| *d >= 350);
    let mut delay = delays.into_iter().cycle();
    let frozen: Vec<(usize, Instant, Instant)> = pauses
        .iter()
        .map(|(r, from, len)| ((*r as usize) % n, t0 + ms(*from), t0 + ms(from + len)))
        .collect();
    let paused = |r: usize, t: Instant| {
        frozen
            .iter()
            .any(|(fr, a, b)| *fr == r && *a <= t && t < *b)
    };
    // A replica's clock: its own rate since t0.
    let local = |r: usize, t: Instant| t0 + (t - t0).mul_f64(rates[r % rates.len()]);
    let mut now = t0;
    while now < t0 + ms(20_000) {
        now += tick;
        // Connections that close now: what reached Redis on them is
        // processed first, its answers lost.
        while let Some(&(r, at, crash)) = faults.first().filter(|f| f.1 <= now) {
            faults.remove(0);
            if crashed[r] {
                continue;
            }
            to_redis.sort_by_key(|c| c.0);
            let mut i = 0;
            while i < to_redis.len() {
                if to_redis[i].1 == r {
                    let (_, _, call, ids, _) = to_redis.remove(i);
                    redis.process(&call, r, ids, at, s.lease.ttl);
                    if !matches!(call, CallKind::Fix { .. }) {
                        to_replica.push((at + ms(500), r, call.failed()));
                    }
                } else {
                    i += 1;
                }
            }
            redis.open.remove(&conn[r]);
            if crash {
                crashed[r] = true;
            } else {
                conn[r] = next_client;
                redis.open.insert(next_client);
                next_client += 1;
            }
        }
        to_redis.sort_by_key(|c| c.0);
        let due: Vec<_> = to_redis.iter().filter(|c| c.0 <= now).cloned().collect();
        to_redis.retain(|c| c.0 > now);
        for (at, r, call, ids, back) in due {
            let answer = redis.process(&call, r, ids, at, s.lease.ttl);
            // The edge learns the id of the connection its call went over
            // with the answer (the pipelined CLIENT ID), and when it recorded
            // another, corrects the record with one more renewal on the same
            // connection (`Store::acquire`, `Store::renew`) before answering.
            let mut answered = at + back;
            if !crashed[r] && ids.1 != Some(ids.0) {
                learned[r] = Some(ids.0);
                let grant = match &answer {
                    Event::Acquired(Ok(Acquisition::Acquired(g))) => Some(g.clone()),
                    Event::Renewed {
                        result: Ok(Renewal::Renewed),
                        ..
                    } => machines[r].holding().map(|l| l.grant.clone()),
                    _ => None,
                };
                if let Some(g) = grant {
                    let fix = CallKind::Fix {
                        token: g.token,
                        epoch: g.epoch,
                    };
                    let fixed_at = at + back + back;
                    to_redis.push((fixed_at, r, fix, (ids.0, Some(ids.0)), back));
                    answered = fixed_at + back;
                }
            }
            if !matches!(call, CallKind::Fix { .. }) {
                to_replica.push((answered, r, answer));
            }
        }
        for r in 0..n {
            if crashed[r] || paused(r, now) {
                continue;
            }
            let mut events: Vec<Event> = Vec::new();
            to_replica.sort_by_key(|e| e.0);
            let mut i = 0;
            while i < to_replica.len() {
                if to_replica[i].1 == r && to_replica[i].0 <= now {
                    events.push(to_replica.remove(i).2);
                } else {
                    i += 1;
                }
            }
            let here = local(r, now);
            if machines[r].next_wake().is_some_and(|w| w <= here) {
                events.push(Event::Tick);
            }
            for ev in events {
                for a in machines[r].step(ev, here) {
                    let call = match a {
                        Action::Acquire { takeover, .. } => CallKind::Acquire { takeover },
                        Action::Renew { grant, sent_at, .. } => CallKind::Renew {
                            sent_at,
                            token: grant.token,
                            epoch: grant.epoch,
                        },
                        Action::Release { grant } => CallKind::Release { token: grant.token },
                        Action::CheckHolder { client } => CallKind::Check {
                            client: client.client,
                        },
                        Action::StartCycle { grant, .. } => {
                            let outcome = if redis.accepts(&grant, now) {
                                assert!(
                                    grant.epoch >= last_accepted_epoch,
                                    "an accepted write of epoch {} after one of epoch {}",
                                    grant.epoch,
                                    last_accepted_epoch
                                );
                                last_accepted_epoch = grant.epoch;
                                CycleOutcome::Unchanged
                            } else {
                                assert!(
                                    redis.taken_over.contains(&grant.token),
                                    "replica {r} writes at {:?} without the lease in redis",
                                    now - t0
                                );
                                CycleOutcome::Fenced
                            };
                            let done = Event::CycleDone(summary(grant.epoch, outcome));
                            to_replica.push((now + tick, r, done));
                            continue;
                        }
                        _ => continue,
                    };
                    let out = delay.next().unwrap();
                    let back = ms(delay.next().unwrap());
                    if out >= 350 {
                        // Lost on the way (a partition): the executor's call
                        // deadline turns it into an error.
                        to_replica.push((now + ms(500), r, call.failed()));
                        continue;
                    }
                    to_redis.push((now + ms(out), r, call, (conn[r], learned[r]), back));
                }
            }
        }
        let acting: Vec<usize> = (0..n)
            .filter(|r| !crashed[*r] && !paused(*r, now))
            .filter(|r| machines[*r].may_act(local(*r, now)))
            .collect();
        let mut accepted = 0;
        for &r in &acting {
            let grant = machines[r].holding().unwrap().grant.clone();
            if redis.accepts(&grant, now) {
                accepted += 1;
            } else {
                assert!(
                    redis.taken_over.contains(&grant.token),
                    "replica {r} acts at {:?} on a lease redis does not give it",
                    now - t0
                );
            }
        }
        assert!(
            accepted <= 1,
            "two acting holders whose writes redis accepts at {:?}: {acting:?}",
            now - t0
        );
    }
    // Somebody held the lease at some point, unless every call was lost.
    assert_eq!(redis.epoch >= 1, !all_lost, "epoch {}", redis.epoch);
    redis
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Two or three replicas, delays up to 400 ms each way, pauses up to 3 s,
    /// clocks up to 10% fast or slow: never two acting holders, and every act
    /// is on a lease Redis holds.
    #[test]
    fn replicas_sharing_a_lease_never_act_at_once(
        n in 2usize..4,
        delays in proptest::collection::vec(0u64..400, 1..40),
        pauses in proptest::collection::vec((0u64..3, 0u64..18_000, 0u64..3_000), 0..6),
        rates in proptest::collection::vec(0.9f64..1.1, 3),
    ) {
        let redis = simulate(n, delays, pauses, rates, vec![]);
        prop_assert!(redis.taken_over.is_empty(), "a takeover with no connection closed");
    }

    /// The same with crashes and dropped connections (fast takeover): a
    /// takeover only of a closed connection's holding, and at any instant at
    /// most one replica whose writes Redis accepts; a replica taken over
    /// while alive is fenced.
    #[test]
    fn takeovers_never_give_two_holders_whose_writes_are_accepted(
        n in 2usize..4,
        delays in proptest::collection::vec(0u64..400, 1..40),
        pauses in proptest::collection::vec((0u64..3, 0u64..18_000, 0u64..3_000), 0..4),
        rates in proptest::collection::vec(0.9f64..1.1, 3),
        faults in proptest::collection::vec(
            (0u64..3, 0u64..18_000, any::<bool>())
                .prop_map(|(replica, at, crash)| Fault { replica, at, crash }),
            1..6,
        ),
    ) {
        let redis = simulate(n, delays, pauses, rates, faults);
        if std::env::var_os("SHOW_TAKEOVERS").is_some() {
            eprintln!("takeovers {}", redis.taken_over.len());
        }
    }
}

/// A crashed holder is replaced within a few checks, not a TTL: with calls
/// taking 1 ms each way, a standby acquires a new epoch by takeover within
/// 150 ms of the crash. A dropped connection of a live holder can cost it the
/// lease (it renews over its new connection 0 to 500 ms later) and it is then
/// fenced; never two accepted writers (checked inside `simulate`).
#[test]
fn a_crashed_holder_is_replaced_within_a_few_checks() {
    let crash = Fault {
        replica: 0,
        at: 3000,
        crash: true,
    };
    let redis = simulate(2, vec![1], vec![], vec![1.0], vec![crash]);
    let t0 = redis.acquisitions[0].0;
    assert_eq!(redis.acquisitions[0].1, 0, "replica 0 acquires first");
    let (at, replica, _, takeover) = redis.acquisitions[1];
    assert_eq!((replica, takeover), (1, true));
    let after = at - (t0 + ms(3000));
    assert!(after <= ms(150), "replaced {after:?} after the crash");

    let drop = Fault {
        replica: 0,
        at: 3000,
        crash: false,
    };
    simulate(2, vec![1], vec![], vec![1.0], vec![drop]);
}

/// Found once by the property test above (its liveness check miscounted which
/// delays are outgoing): every outgoing call lost means no holder, and one
/// outgoing delay that arrives means one.
#[test]
fn the_shared_lease_model_counts_only_outgoing_delays_as_lost() {
    simulate(2, vec![350, 0], vec![], vec![0.9, 0.9, 0.9], vec![]);
    simulate(2, vec![0, 350], vec![], vec![0.9, 0.9, 0.9], vec![]);
}
