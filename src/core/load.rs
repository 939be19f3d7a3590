//! Measured load (`-balance load`): what members report of the units they
//! own, smoothed where it is measured, and what the holder makes of it.
//!
//! Pure. Time comes in as values.
//!
//! # Protocol: `{T}:loads`
//!
//! A hash: field = the member's id (its `host:port`), value =
//! `<unix_ms> <unit>=<load>[,<unit>=<load>...]` (only `<unix_ms>` when it
//! owns nothing). A member writes its own field only, with the smoothed
//! load of every unit it owns at that moment ([`LoadBook::encode`]), and
//! removes it when it leaves. A load is a decimal number from 0 to 1e9 in
//! whatever the application measures (CPU seconds a second, items a
//! minute); units never contain `,`, and a `=` in a unit name is fine (the
//! last `=` separates the load).
//!
//! # Smoothing
//!
//! [`LoadBook`] keeps a time-weighted exponential average per unit with a
//! half-life: a sample `Δt` after the last one counts `2^(Δt / h)` times as
//! much. The average starts as the plain mean of the first samples (weights
//! summed, not assumed), so early values are not pulled towards zero or the
//! first sample. Smoothing on the member means the value in Redis is the
//! smoothed one: every replica, and the holder after a failover, reads the
//! same loads.
//!
//! # The holder's reading ([`decode_loads`])
//!
//! For each unit, the newest report wins (by `unix_ms`, then by member id):
//! after a move the new owner's report replaces the old owner's as soon as
//! it writes. A field that does not parse is skipped whole and reported; so
//! is a load that is not a number from 0 to 1e9. Loads are kept in
//! thousandths, at least one (a unit measured at 0 costs a thousandth), and
//! a unit nobody reports counts as the mean of the reported ones, as an
//! undeclared cost does (`core::costs`).
//!
//! A field older than [`LoadAge::max_age`] by the reader's clock is left
//! out, and so is one dated more than [`LoadAge::max_ahead`] after it: a
//! member that stopped writing (killed, or removed without `-forget-after`)
//! neither counts in the mean nor keeps its old units' loads, and one whose
//! clock runs ahead wins for a unit it no longer reports for at most
//! `max_age + max_ahead`. Members write every `load_report_interval` (at
//! most a minute), so a living member's field is never that old. The
//! decoding says when its answer changes by time alone
//! ([`DecodedLoads::fresh_until`]): the reader decodes again then, even if
//! nobody wrote.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::core::costs::{MAX_COST, SCALE, UnitCosts, UnreadableCost};
use crate::core::inputs::excerpt;

/// Per-unit smoothed load on a member (see the module docs).
#[derive(Debug, Clone)]
pub struct LoadBook {
    half_life: Duration,
    units: HashMap<String, Smoothed>,
    reported: bool,
}

#[derive(Debug, Clone, Copy)]
struct Smoothed {
    /// Decayed sums of samples and of their weights.
    sum: f64,
    weight: f64,
    at: Instant,
}

impl LoadBook {
    pub fn new(half_life: Duration) -> LoadBook {
        LoadBook {
            half_life,
            units: HashMap::new(),
            reported: false,
        }
    }

    /// Records a measurement of `unit`'s load at `at`. A value that is not
    /// a number from 0 to 1e9 is refused (`false`).
    pub fn sample(&mut self, unit: &str, load: f64, at: Instant) -> bool {
        if !(load.is_finite() && (0.0..=MAX_COST).contains(&load)) {
            return false;
        }
        self.reported = true;
        let half_life = self.half_life;
        let s = self.units.entry(unit.to_string()).or_insert(Smoothed {
            sum: 0.0,
            weight: 0.0,
            at,
        });
        let decay = decay(at.saturating_duration_since(s.at), half_life);
        s.sum = s.sum * decay + load;
        s.weight = s.weight * decay + 1.0;
        s.at = s.at.max(at);
        true
    }

    /// Whether any sample was ever recorded: a member whose application
    /// never reports a load writes no `{T}:loads` field.
    pub fn reported(&self) -> bool {
        self.reported
    }

    /// `unit`'s smoothed load, if it was ever sampled.
    pub fn load(&self, unit: &str) -> Option<f64> {
        self.units.get(unit).map(|s| s.sum / s.weight)
    }

    /// Forgets the units `keep` says no: those no longer owned.
    pub fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        self.units.retain(|u, _| keep(u));
    }

    /// The `{T}:loads` value for `owned` units that were sampled, sorted.
    pub fn encode<'a>(&self, owned: impl IntoIterator<Item = &'a str>, unix_ms: u64) -> String {
        let mut pairs: Vec<(&str, f64)> = owned
            .into_iter()
            .filter_map(|u| Some((u, self.load(u)?)))
            .collect();
        pairs.sort_by(|a, b| a.0.cmp(b.0));
        let body: Vec<String> = pairs.iter().map(|(u, l)| format!("{u}={l:.3}")).collect();
        if body.is_empty() {
            unix_ms.to_string()
        } else {
            format!("{unix_ms} {}", body.join(","))
        }
    }
}

/// How much an average keeps after `elapsed`: `2^(−elapsed / half_life)`
/// (0 with no half-life: the last sample alone).
fn decay(elapsed: Duration, half_life: Duration) -> f64 {
    if half_life.is_zero() {
        return 0.0;
    }
    (-(elapsed.as_secs_f64() / half_life.as_secs_f64())).exp2()
}

/// One `{T}:loads` value: its time and `(unit, load)` pairs.
pub fn decode_report(value: &str) -> Option<(u64, Vec<(&str, f64)>)> {
    let (ms, body) = value.split_once(' ').unwrap_or((value, ""));
    let ms: u64 = ms.parse().ok()?;
    let mut pairs = Vec::new();
    for item in body.split(',').filter(|s| !s.is_empty()) {
        let (unit, load) = item.rsplit_once('=')?;
        let load: f64 = load.parse().ok()?;
        if unit.is_empty() || !(load.is_finite() && (0.0..=MAX_COST).contains(&load)) {
            return None;
        }
        pairs.push((unit, load));
    }
    Some((ms, pairs))
}

/// How old, or how far ahead of the reader's clock, a `{T}:loads` field
/// may be dated and still count (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadAge {
    pub max_age: Duration,
    pub max_ahead: Duration,
}

/// A `{T}:loads` field left out for its date: the member's id and how far
/// its date is from the reader's clock (negative: ahead of it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaleLoads {
    pub member: String,
    pub age_ms: i64,
}

/// The `{T}:loads` hash as the holder reads it ([`decode_loads`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DecodedLoads {
    pub costs: UnitCosts,
    /// Fields that could not be read, as unreadable costs: the member's id
    /// and the value.
    pub unreadable: Vec<UnreadableCost>,
    /// Fields left out for their date, sorted by member.
    pub stale: Vec<StaleLoads>,
    /// The reader's unix ms at which the first field counted now turns too
    /// old, or the first one left out for being ahead comes within bounds:
    /// the same hash decodes differently from then on.
    pub fresh_until: Option<u64>,
}

/// Whether a decoding whose [`DecodedLoads::fresh_until`] was `fresh_until`
/// still holds at `now_ms`: a reader that finds the hash unchanged decodes
/// it again once this is false.
pub fn still_holds(fresh_until: Option<u64>, now_ms: u64) -> bool {
    fresh_until.is_none_or(|until| now_ms < until)
}

/// The holder's costs from the `{T}:loads` hash's `(member, value)` pairs,
/// in any order, read at `now_ms` (unix ms): for each unit the newest
/// report's load among those dated within `age` (see the module docs).
pub fn decode_loads<I, K, V>(pairs: I, now_ms: u64, age: LoadAge) -> DecodedLoads
where
    I: IntoIterator<Item = (K, V)>,
    K: AsRef<str>,
    V: AsRef<str>,
{
    let pairs: Vec<(K, V)> = pairs.into_iter().collect();
    let oldest = now_ms.saturating_sub(age.max_age.as_millis() as u64);
    let latest = now_ms.saturating_add(age.max_ahead.as_millis() as u64);
    let mut newest: HashMap<&str, ((u64, &str), f64)> = HashMap::new();
    let mut unreadable = Vec::new();
    let mut stale = Vec::new();
    let mut fresh_until: Option<u64> = None;
    let mut until = |at: u64| fresh_until = Some(fresh_until.map_or(at, |f| f.min(at)));
    for (member, value) in &pairs {
        let (member, value) = (member.as_ref(), value.as_ref());
        let Some((ms, loads)) = decode_report(value) else {
            unreadable.push(UnreadableCost {
                unit: excerpt(member.as_bytes()),
                value: excerpt(value.as_bytes()),
            });
            continue;
        };
        if ms < oldest || ms > latest {
            stale.push(StaleLoads {
                member: member.to_string(),
                age_ms: (now_ms as i64).saturating_sub(ms as i64),
            });
            if ms > latest {
                // Counted once the reader's clock is within `max_ahead`.
                until(ms - age.max_ahead.as_millis() as u64);
            }
            continue;
        }
        // Too old one millisecond past `max_age`.
        until(ms.saturating_add(age.max_age.as_millis() as u64) + 1);
        for (unit, load) in loads {
            let key = (ms, member);
            match newest.get(unit) {
                Some((k, _)) if *k >= key => {}
                _ => {
                    newest.insert(unit, (key, load));
                }
            }
        }
    }
    unreadable.sort_by(|a, b| (&a.unit, &a.value).cmp(&(&b.unit, &b.value)));
    stale.sort_by(|a, b| a.member.cmp(&b.member));
    let thousandths = newest
        .into_iter()
        .map(|(u, (_, load))| (u, ((load * SCALE as f64).round() as u64).max(1)));
    DecodedLoads {
        costs: UnitCosts::from_thousandths(thousandths),
        unreadable,
        stale,
        fresh_until,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::timing::test_t0;

    #[test]
    fn the_average_halves_an_old_samples_weight_each_half_life() {
        let t0 = test_t0();
        let mut b = LoadBook::new(Duration::from_secs(60));
        assert!(b.sample("a", 10.0, t0));
        assert_eq!(b.load("a"), Some(10.0), "the first sample alone");
        // A minute later, the old sample weighs half as much as the new one.
        b.sample("a", 40.0, t0 + Duration::from_secs(60));
        assert!((b.load("a").unwrap() - (10.0 * 0.5 + 40.0) / 1.5).abs() < 1e-9);
        // Two samples at once count alike: a plain mean at the start.
        let mut c = LoadBook::new(Duration::from_secs(60));
        c.sample("u", 8.0, t0);
        c.sample("u", 12.0, t0);
        assert_eq!(c.load("u"), Some(10.0));
        assert!(!c.sample("u", f64::NAN, t0));
        assert!(!c.sample("u", -1.0, t0));
        assert_eq!(c.load("u"), Some(10.0), "refused samples change nothing");
    }

    #[test]
    fn jitter_is_smoothed_towards_the_truth() {
        let t0 = test_t0();
        let mut b = LoadBook::new(Duration::from_secs(60));
        // ±20 % around 100, one sample a second for ten minutes.
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        for s in 0..600u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let j = (x % 4001) as f64 / 10_000.0 - 0.2;
            b.sample("u", 100.0 * (1.0 + j), t0 + Duration::from_secs(s));
            if s >= 30 {
                let l = b.load("u").unwrap();
                assert!((l - 100.0).abs() < 6.0, "{s}: {l}");
            }
        }
    }

    #[test]
    fn reports_encode_and_decode_and_the_newest_wins() {
        let t0 = test_t0();
        let mut b = LoadBook::new(Duration::from_secs(60));
        b.sample("u=1", 2.5, t0);
        b.sample("v", 0.0, t0);
        b.sample("gone", 9.0, t0);
        let value = b.encode(["v", "u=1", "never"], 1_000);
        assert_eq!(value, "1000 u=1=2.500,v=0.000");
        assert_eq!(b.encode([], 7), "7");
        assert_eq!(decode_report("7"), Some((7, vec![])));
        let DecodedLoads {
            costs,
            unreadable: bad,
            ..
        } = decode_loads(
            [
                ("m1:1", "1000 u=1=2.500,v=0.000".to_string()),
                ("m2:1", "2000 v=4".to_string()),
                ("m3:1", "1500 v=9".to_string()),
                ("m4:1", "junk".to_string()),
                ("m5:1", "3000 w=-1".to_string()),
            ],
            3_000,
            AGE,
        );
        assert_eq!(costs.of("u=1"), 2500);
        assert_eq!(costs.of("v"), 4000, "m2's report is the newest");
        assert_eq!(bad.len(), 2);
        assert_eq!(bad[0].unit, "\"m4:1\"");
        // Unreported units count as the mean of the reported ones.
        assert_eq!(costs.of("x"), 3250);
        assert_eq!(decode_report("1 a=1,=2"), None);
        assert_eq!(decode_report("1 a=inf"), None);
    }

    const AGE: LoadAge = LoadAge {
        max_age: Duration::from_secs(300),
        max_ahead: Duration::from_secs(60),
    };

    #[test]
    fn fields_too_old_or_too_far_ahead_are_left_out_until_their_date_fits() {
        let now = 1_000_000_000;
        let min = 60_000;
        let pairs = [
            // Killed five minutes and a millisecond ago: left out.
            ("dead:1", format!("{} u=50", now - 5 * min - 1)),
            // Its unit's new owner, whose report is older than the clock
            // runner's but counts.
            ("new:1", format!("{} u=2,v=3", now - 10_000)),
            // A clock running 61 s ahead: left out, not winning `u`.
            ("ahead:1", format!("{} u=90,w=7", now + min + 1_000)),
            // 59 s ahead: counts, and wins `v` as the newest.
            ("near:1", format!("{} v=4", now + 59_000)),
        ];
        let d = decode_loads(pairs.clone(), now, AGE);
        assert_eq!(
            d.costs.of("u"),
            2000,
            "the dead member's and the far-ahead's left out"
        );
        assert_eq!(d.costs.of("v"), 4000);
        assert_eq!(d.costs.declared(), 2, "w is not counted either");
        assert_eq!(
            d.stale,
            vec![
                StaleLoads {
                    member: "ahead:1".into(),
                    age_ms: -((min + 1_000) as i64),
                },
                StaleLoads {
                    member: "dead:1".into(),
                    age_ms: 5 * min as i64 + 1,
                },
            ]
        );
        // The answer holds until the far-ahead field comes within bounds
        // (1 s from now), before `new:1` turns old.
        assert_eq!(d.fresh_until, Some(now + 1_000));
        assert!(still_holds(d.fresh_until, now + 999) && !still_holds(d.fresh_until, now + 1_000));
        assert!(still_holds(None, u64::MAX), "nothing changes by time");
        let later = decode_loads(pairs.clone(), now + 1_000, AGE);
        assert_eq!(later.costs.of("u"), 90_000, "now the newest, counted");
        assert_eq!(later.costs.of("w"), 7000);
        // At exactly `max_age` a field still counts; a millisecond later not.
        let at = now - 10_000 + 5 * min;
        let edge = decode_loads([("new:1", format!("{} u=2", now - 10_000))], at, AGE);
        assert_eq!((edge.costs.of("u"), edge.fresh_until), (2000, Some(at + 1)));
        let past = decode_loads([("new:1", format!("{} u=2", now - 10_000))], at + 1, AGE);
        assert_eq!(past.costs.declared(), 0);
        assert_eq!(past.stale.len(), 1);
        assert_eq!(past.fresh_until, None, "nothing changes by time any more");
    }
}
