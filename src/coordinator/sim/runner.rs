//! Running seeds: many at a time on every core (`run_seeds`), and shrinking
//! a failing one (`shrink`) to the fewest faults and schedule events that
//! still fail, for a trace a person can read.

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::{Omit, Run, SeedOutcome, run_seed, run_seed_omitting};

/// Shrinks a failing seed: leaves out the store faults, the member faults,
/// then ever smaller runs of schedule events, keeping each omission after
/// which a violation remains, within `budget` runs. Returns what it left
/// out and the last failing outcome (`None`: the seed does not fail).
pub fn shrink(seed: u64, run: Run, budget: usize) -> Option<(Omit, SeedOutcome)> {
    let mut outcome = run_seed(seed, run);
    if outcome.violations.is_empty() {
        return None;
    }
    let mut omit = Omit::default();
    let runs = std::cell::Cell::new(0);
    let attempt = |candidate: Omit, omit: &mut Omit, outcome: &mut SeedOutcome| {
        runs.set(runs.get() + 1);
        let o = run_seed_omitting(seed, run, candidate);
        if !o.violations.is_empty() {
            *omit = candidate;
            *outcome = o;
        }
    };
    attempt(
        Omit {
            store_faults: true,
            ..omit
        },
        &mut omit,
        &mut outcome,
    );
    attempt(
        Omit {
            member_faults: true,
            ..omit
        },
        &mut omit,
        &mut outcome,
    );
    let n = outcome.events.min(128);
    let mut chunk = n.div_ceil(2).max(1);
    loop {
        for start in (0..n).step_by(chunk) {
            if runs.get() >= budget {
                return Some((omit, outcome));
            }
            let end = (start + chunk).min(n);
            let bits = (start..end).fold(0u128, |b, i| b | (1 << i));
            if omit.events & bits == bits {
                continue;
            }
            let candidate = Omit {
                events: omit.events | bits,
                ..omit
            };
            attempt(candidate, &mut omit, &mut outcome);
        }
        if chunk == 1 {
            return Some((omit, outcome));
        }
        chunk = chunk.div_ceil(2);
    }
}

/// What a batch of seeds did.
#[derive(Debug, Default)]
pub struct Batch {
    /// The outcomes of the seeds with a violation, by seed.
    pub failed: Vec<SeedOutcome>,
    /// The faults injected, by kind, over every seed.
    pub injected: BTreeMap<&'static str, usize>,
    /// The crashes each poison unit caused, one entry per seed with one.
    pub poison_crashes: Vec<usize>,
    /// Units quarantined that were not the poison unit, and the units
    /// listed, over the seeds without a poison unit (the quarantine's false
    /// positives under unrelated failures) and over those with one (its
    /// companions too).
    pub healthy_quarantined: [usize; 2],
    pub units_listed: [usize; 2],
}

/// Runs `seeds`, `threads` at a time.
pub fn run_seeds(seeds: impl Iterator<Item = u64> + Send, run: Run, threads: usize) -> Batch {
    let seeds = Mutex::new(seeds);
    let batch = Mutex::new(Batch::default());
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| {
                loop {
                    let Some(seed) = seeds.lock().expect("seeds lock").next() else {
                        return;
                    };
                    let outcome = run_seed(seed, run);
                    let mut b = batch.lock().expect("batch lock");
                    for (k, n) in &outcome.injected {
                        *b.injected.entry(k).or_default() += n;
                    }
                    b.poison_crashes.extend(outcome.poison);
                    let k = usize::from(outcome.poison.is_some());
                    b.healthy_quarantined[k] += outcome.healthy_quarantined;
                    b.units_listed[k] += outcome.units_listed;
                    if !outcome.violations.is_empty() {
                        b.failed.push(outcome);
                    }
                }
            });
        }
    });
    let mut batch = batch.into_inner().expect("batch lock");
    batch.failed.sort_by_key(|o| o.seed);
    batch
}
