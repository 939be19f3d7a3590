//! The census: each replica learns `(index, replicas)` from an interval counter
//! (seed document 002), including its random-skew extension.
//!
//! Pure; the coordinator does the Redis step and feeds the replies in.
//!
//! ```text
//!  unix time ──┬──────────────┬──────────────┬──────────────┬──▶
//!              │  interval n  │  interval n+1│  interval n+2│
//!  replica A   │   ▲ INCR c:n=1   ▲ INCR c:n+1=1, GET c:n=2 → emit (0, 2)
//!  replica B   │      ▲ INCR c:n=2    ▲ INCR c:n+1=2, GET c:n=2 → emit (1, 2)
//!              └─ each replica runs at interval start + its own random skew
//! ```
//!
//! `number = ceil(now / interval)`; a replica's index for interval n is its INCR
//! result minus one; interval n's replica count is read during n+1. The first
//! result is known between one and two intervals after start. A result is only
//! emitted from two consecutive intervals, so a replica that missed one (Redis
//! down) waits for a clean pair instead of mixing stale numbers.

use std::time::Duration;

/// The end of a replica's census report (`{T}:replicas`: `index replicas
/// unix_ms interval`, `-` for what the census does not know yet) while it
/// holds the lease: ` blocked <why>` when it does not act, ` recovering
/// <tag (why)>` while it recovers from state Redis may have lost; on one line
/// and shortened, so that `distributor status` can say so. Readers that know
/// neither word ignore the end.
pub fn note_suffix(note: &HolderNote<'_>) -> String {
    let (word, text) = match note {
        HolderNote::Blocked(why) => ("blocked", why),
        HolderNote::Recovering(what) => ("recovering", what),
    };
    let text: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(300)
        .collect();
    format!(" {word} {text}")
}

/// What a replica holding the lease says about itself in its census report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HolderNote<'a> {
    /// It holds the lease but does not act, and why.
    Blocked(&'a str),
    /// It recovers from handoff state Redis may have lost: tag and why.
    Recovering(&'a str),
}

/// The note at the end of a replica's census report, if any.
pub fn note_of(report: &str) -> Option<HolderNote<'_>> {
    let mut it = report.splitn(6, ' ');
    for _ in 0..4 {
        it.next()?;
    }
    let word = it.next()?;
    let text = it.next()?;
    match word {
        "blocked" => Some(HolderNote::Blocked(text)),
        "recovering" => Some(HolderNote::Recovering(text)),
        _ => None,
    }
}

/// One census step's reply: our counter value this interval, and the previous
/// interval's final count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CensusReply {
    pub counter: u64,
    pub previous: Option<u64>,
}

/// A replica's place among its peers, valid for one interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CensusView {
    /// 0-based; unique among replicas that counted in the same interval.
    pub index: u64,
    /// How many replicas counted in that interval.
    pub replicas: u64,
    /// The interval number the view describes.
    pub interval: u64,
}

/// `ceil(now / interval)`, both in milliseconds.
pub fn interval_number(now_ms: u64, interval_ms: u64) -> u64 {
    now_ms.div_ceil(interval_ms.max(1))
}

/// Milliseconds from `now_ms` to the next instant `k * interval + skew` (> now).
pub fn delay_to_next_run(now_ms: u64, interval_ms: u64, skew_ms: u64) -> u64 {
    let interval_ms = interval_ms.max(1);
    let skew_ms = skew_ms % interval_ms;
    // How far `now` is past the last `k * interval + skew`.
    let past = (now_ms % interval_ms + interval_ms - skew_ms) % interval_ms;
    interval_ms - past
}

/// When one replica runs its census steps: at `k * interval + skew`, Unix ms.
///
/// A step's interval number comes from the instant it was *scheduled* for,
/// never from the clock after the sleep: a timer that fires a millisecond
/// early or late at an interval boundary would otherwise count one interval
/// twice (and every replica would see one replica too many), or skip one.
/// Each run is scheduled strictly after the previous one, so numbers never
/// repeat even if the wall clock steps back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    interval_ms: u64,
    skew_ms: u64,
}

impl Schedule {
    pub fn new(interval: Duration, skew: Duration) -> Schedule {
        let interval_ms = (interval.as_millis() as u64).max(1);
        Schedule {
            interval_ms,
            skew_ms: skew.as_millis() as u64 % interval_ms,
        }
    }

    /// The first run strictly after `t_ms`.
    pub fn next_after(&self, t_ms: u64) -> u64 {
        t_ms + delay_to_next_run(t_ms, self.interval_ms, self.skew_ms)
    }

    /// The interval number of a run scheduled at `at_ms` (seed 002:
    /// `ceil(now / interval)`, with `now` the scheduled instant).
    pub fn number(&self, at_ms: u64) -> u64 {
        interval_number(at_ms, self.interval_ms)
    }
}

/// The extension's random constant skew: `random() * interval / 2`.
pub fn random_skew(interval: Duration) -> Duration {
    interval.mul_f64(rand::random::<f64>() / 2.0)
}

/// The algorithm's state: the index counted in the previous interval.
#[derive(Debug, Default, Clone)]
pub struct Census {
    pending: Option<(u64, u64)>,
    current: Option<CensusView>,
}

impl Census {
    /// Feeds the reply of the step for interval `number`; returns the view when
    /// one can be emitted.
    pub fn step(&mut self, number: u64, reply: CensusReply) -> Option<CensusView> {
        let emitted = match (self.pending, reply.previous) {
            (Some((n, index)), Some(replicas)) if n + 1 == number && index < replicas => {
                Some(CensusView {
                    index,
                    replicas,
                    interval: n,
                })
            }
            _ => None,
        };
        self.pending = Some((number, reply.counter.saturating_sub(1)));
        if emitted.is_some() {
            self.current = emitted;
        }
        emitted
    }

    /// The last emitted view.
    pub fn current(&self) -> Option<CensusView> {
        self.current
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holding_replica_says_why_it_blocks_or_recovers_in_its_report() {
        let r = format!(
            "0 2 9000 7{}",
            note_suffix(&HolderNote::Blocked("cannot read x:\nthe key"))
        );
        assert_eq!(
            note_of(&r),
            Some(HolderNote::Blocked("cannot read x: the key"))
        );
        let r = format!(
            "0 2 9000 7{}",
            note_suffix(&HolderNote::Recovering("4.1 (the table's server changed)"))
        );
        assert_eq!(
            note_of(&r),
            Some(HolderNote::Recovering("4.1 (the table's server changed)"))
        );
        assert_eq!(note_of("0 2 9000 7"), None);
        assert_eq!(note_of("0 2 9000 7 later something"), None);
        assert_eq!(note_of("- - 9000 -"), None);
        assert_eq!(note_of("- - 9000"), None);
    }

    #[test]
    fn interval_numbers_and_schedule() {
        assert_eq!(interval_number(10_000, 5_000), 2);
        assert_eq!(interval_number(10_001, 5_000), 3);
        assert_eq!(delay_to_next_run(10_000, 5_000, 0), 5_000);
        assert_eq!(delay_to_next_run(10_000, 5_000, 1_000), 1_000);
        assert_eq!(delay_to_next_run(11_500, 5_000, 1_000), 4_500);
        for now in [0, 1, 4_999, 123_456_789] {
            let d = delay_to_next_run(now, 5_000, 700);
            assert!(d > 0 && d <= 5_000);
            assert_eq!((now + d) % 5_000, 700);
        }
        let s = random_skew(Duration::from_secs(4));
        assert!(s <= Duration::from_secs(2));
    }

    #[test]
    fn numbers_come_from_the_schedule_not_from_the_clock_after_the_sleep() {
        // Skew 0: runs fall exactly on interval boundaries, where a timer that
        // fires a millisecond late would read the next interval's number from
        // the clock, and the next run (a millisecond early) the same one again.
        let s = Schedule::new(Duration::from_millis(1000), Duration::ZERO);
        let mut last = 0;
        let mut numbers = Vec::new();
        let mut from_clock = Vec::new();
        for (k, jitter) in [1i64, -1, 2, -2, 0, 1, -1].into_iter().enumerate() {
            let now = 10_000 + k as u64 * 1000;
            let at = s.next_after(now.max(last));
            let woke = (at as i64 + jitter) as u64;
            numbers.push(s.number(at));
            from_clock.push(interval_number(woke, 1000));
            last = at;
        }
        assert!(
            numbers.windows(2).all(|w| w[1] == w[0] + 1),
            "one number per run, consecutive: {numbers:?}"
        );
        let mut seen = from_clock.clone();
        seen.dedup();
        assert_ne!(
            seen.len(),
            from_clock.len(),
            "the clock after the sleep repeats one: {from_clock:?}"
        );
        // A wall clock that steps back never brings a number back.
        let at = s.next_after(last.max(last - 5_000));
        assert!(s.number(at) > *numbers.last().unwrap());
    }

    #[test]
    fn three_replicas_learn_distinct_indexes() {
        let mut replicas = [Census::default(), Census::default(), Census::default()];
        // Interval 10: each INCRs in turn; previous counter unknown.
        for (i, c) in replicas.iter_mut().enumerate() {
            assert_eq!(
                c.step(
                    10,
                    CensusReply {
                        counter: i as u64 + 1,
                        previous: None
                    }
                ),
                None
            );
        }
        // Interval 11: arrival order changes; the emitted index is interval 10's.
        let order = [2, 0, 1];
        let mut seen = Vec::new();
        for (k, &i) in order.iter().enumerate() {
            let v = replicas[i]
                .step(
                    11,
                    CensusReply {
                        counter: k as u64 + 1,
                        previous: Some(3),
                    },
                )
                .unwrap();
            assert_eq!((v.index, v.replicas, v.interval), (i as u64, 3, 10));
            seen.push(v.index);
        }
        seen.sort();
        assert_eq!(seen, [0, 1, 2]);
    }

    #[test]
    fn a_missed_interval_emits_nothing() {
        let mut c = Census::default();
        c.step(
            10,
            CensusReply {
                counter: 1,
                previous: None,
            },
        );
        assert_eq!(
            c.step(
                12,
                CensusReply {
                    counter: 1,
                    previous: Some(2)
                }
            ),
            None
        );
        let v = c
            .step(
                13,
                CensusReply {
                    counter: 1,
                    previous: Some(1),
                },
            )
            .unwrap();
        assert_eq!((v.index, v.replicas, v.interval), (0, 1, 12));
        assert_eq!(c.current(), Some(v));
    }
}
