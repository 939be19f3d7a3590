//! Balance by cost (`-balance cost`, `core::balance`) against balance by
//! count (`sticky`, whose first table is the ring's), in the same run:
//!
//! 1. balance: the busiest member's load ÷ max(mean load, largest unit),
//!    for Zipf(1.0), Zipf(1.2) and lognormal(σ = 2) costs, at 10 × 1,000
//!    and 100 × 100,000, over 5 seeds (which unit gets which cost);
//! 2. moves: after a member leaves (against its units), and after 10 % of
//!    the units change cost (against the proven lower bound);
//! 3. stability: declared costs jitter ±20 % around a fixed truth, 600
//!    re-solves (ten minutes at one a second): units moved after the first
//!    table;
//! 4. speed: the solve after a leave at 1,000 × 100,000 against sticky's
//!    (min / median / max of 7), and 10,000 × 1,000,000 (3 each, only with
//!    `BALANCE_BENCH_LARGE=1`).
//!
//! Run: `cargo bench --bench balance` (`BALANCE_BENCH_SECTIONS=speed,moves`
//! runs only those). Results: `BENCHMARKS.md`, "Balance by cost".

// Real time, measured: the std clock is the right one here.
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::time::Instant;

use distributor::core::balance::{self, Costs, Tolerance};
use distributor::core::costs::{UnitCosts, display_cost};
use distributor::core::load::LoadBook;
use distributor::core::sticky::{self, Table};

#[path = "shared/machine.rs"]
mod machine;

/// xorshift64*: deterministic, no extra dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in (0, 1).
    fn unit(&mut self) -> f64 {
        ((self.next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    fn normal(&mut self) -> f64 {
        let (a, b) = (self.unit(), self.unit());
        (-2.0 * a.ln()).sqrt() * (2.0 * std::f64::consts::PI * b).cos()
    }

    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            v.swap(i, (self.next() % (i as u64 + 1)) as usize);
        }
    }
}

#[derive(Clone, Copy)]
enum Dist {
    Zipf(f64),
    LogNormal(f64),
}

impl Dist {
    fn name(self) -> String {
        match self {
            Dist::Zipf(s) => format!("Zipf({s})"),
            Dist::LogNormal(s) => format!("lognormal(σ={s})"),
        }
    }

    /// `n` costs in thousandths, assigned to units in a seeded random order.
    fn costs(self, n: usize, rng: &mut Rng) -> Vec<u64> {
        let mut c: Vec<u64> = match self {
            Dist::Zipf(s) => (1..=n)
                .map(|k| ((1e9 / (k as f64).powf(s)).round() as u64).max(1))
                .collect(),
            Dist::LogNormal(sigma) => (0..n)
                .map(|_| ((1000.0 * (sigma * rng.normal()).exp()).round() as u64).max(1))
                .collect(),
        };
        rng.shuffle(&mut c);
        c
    }
}

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i:08}")).collect()
}

fn refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn rows<'t, 'a>(
    t: &'t Table<'a>,
) -> impl Iterator<Item = (&'a str, std::iter::Copied<std::slice::Iter<'t, &'a str>>)> + 't {
    t.iter().map(|(m, r)| (*m, r.iter().copied()))
}

fn none() -> std::iter::Empty<(&'static str, Vec<&'static str>)> {
    std::iter::empty()
}

/// The busiest member's load ÷ max(mean, largest unit); and max / mean.
fn quality(t: &Table<'_>, cost: &dyn Fn(&str) -> u64) -> (f64, f64) {
    let loads: Vec<u64> = t
        .values()
        .map(|r| r.iter().map(|u| cost(u)).sum())
        .collect();
    let total: u64 = loads.iter().sum();
    let mean = total as f64 / loads.len() as f64;
    let largest = t.values().flatten().map(|u| cost(u)).max().unwrap_or(0) as f64;
    let busiest = *loads.iter().max().unwrap() as f64;
    (busiest / mean.max(largest), busiest / mean)
}

fn spread(v: &mut [f64]) -> (f64, f64, f64) {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (v[0], v[v.len() / 2], v[v.len() - 1])
}

fn section_balance(tol: Tolerance) {
    println!(
        "== 1. balance: busiest ÷ max(mean, largest unit) (busiest ÷ mean), 5 seeds: min / median / max"
    );
    for (members, units) in [(10usize, 1_000usize), (100, 100_000)] {
        let m = names("worker", members);
        let u = names("unit", units);
        let mw: Vec<(&str, u32)> = m.iter().map(|x| (x.as_str(), 1)).collect();
        let us = refs(&u);
        for dist in [Dist::Zipf(1.0), Dist::Zipf(1.2), Dist::LogNormal(2.0)] {
            let (mut count, mut cost, mut count_mean, mut cost_mean) =
                (vec![], vec![], vec![], vec![]);
            let mut hot = vec![];
            for seed in 1..=5u64 {
                let mut rng = Rng(seed * 0x9e37_79b9_7f4a_7c15);
                let c = dist.costs(units, &mut rng);
                let map: BTreeMap<&str, u64> = us.iter().copied().zip(c).collect();
                let f = |x: &str| map[x];
                let by_count = sticky::assign(none(), &mw, &us);
                let by_cost = balance::assign(none(), &mw, &us, Costs::Lookup(&f), tol);
                let (a, b) = quality(&by_count, &f);
                count.push(a);
                count_mean.push(b);
                let (a, b) = quality(&by_cost.table, &f);
                cost.push(a);
                cost_mean.push(b);
                hot.push(by_cost.hot.len() as f64);
            }
            let p = |v: &mut Vec<f64>| {
                let (a, b, c) = spread(v);
                format!("{a:.3} / {b:.3} / {c:.3}")
            };
            println!(
                "{members:>4} x {units:<7} {:<17} count {} ({})   cost {} ({})   hot units {}",
                dist.name(),
                p(&mut count),
                p(&mut count_mean),
                p(&mut cost),
                p(&mut cost_mean),
                p(&mut hot)
            );
        }
    }
}

fn section_moves(tol: Tolerance) {
    println!("== 2. moves (10 x 1,000, Zipf(1.0), 5 seeds)");
    let m = names("worker", 10);
    let u = names("unit", 1_000);
    let mw: Vec<(&str, u32)> = m.iter().map(|x| (x.as_str(), 1)).collect();
    let us = refs(&u);
    for seed in 1..=5u64 {
        let mut rng = Rng(seed * 0x9e37_79b9_7f4a_7c15);
        let c = Dist::Zipf(1.0).costs(1_000, &mut rng);
        let map: BTreeMap<&str, u64> = us.iter().copied().zip(c).collect();
        let f = |x: &str| map[x];
        let first = balance::assign(none(), &mw, &us, Costs::Lookup(&f), tol).table;
        // A leave: the member with the most units (never the hot one's).
        let gone = *first.iter().max_by_key(|(_, r)| r.len()).unwrap().0;
        let rest: Vec<(&str, u32)> = mw.iter().copied().filter(|&(x, _)| x != gone).collect();
        let next = balance::assign(rows(&first), &rest, &us, Costs::Lookup(&f), tol).table;
        let (moved, kept) = sticky::moved_and_kept(rows(&first), &next);
        let placed = 1_000 - moved - kept;
        // A cost change: 10 % of the units get a cost ×0.5 to ×2.
        let mut changed = map.clone();
        for x in us.iter().take(100) {
            let factor = 0.5 + 1.5 * rng.unit();
            let v = changed.get_mut(x).unwrap();
            *v = ((*v as f64 * factor) as u64).max(1);
        }
        let g = |x: &str| changed[x];
        let after = balance::assign(rows(&first), &mw, &us, Costs::Lookup(&g), tol);
        let moved_c = sticky::moved(rows(&first), &after.table);
        println!(
            "seed {seed}: leave: departed {} units, placed {placed}, moved {moved}: total {:.2}x the departed   cost change: moved {moved_c}, lower bound {}",
            first[gone].len(),
            (placed + moved) as f64 / first[gone].len() as f64,
            after.minimum
        );
    }
}

fn section_stability(tol: Tolerance) {
    println!(
        "== 3. stability: costs jitter ±20 % around a fixed truth, 600 re-solves (10 x 1,000 and 100 x 100,000, Zipf(1.0))"
    );
    for (members, units, rounds) in [(10usize, 1_000usize, 600usize), (100, 100_000, 60)] {
        let m = names("worker", members);
        let u = names("unit", units);
        let mw: Vec<(&str, u32)> = m.iter().map(|x| (x.as_str(), 1)).collect();
        let us = refs(&u);
        let mut rng = Rng(7);
        let truth = Dist::Zipf(1.0).costs(units, &mut rng);
        let jitter = |rng: &mut Rng| -> BTreeMap<&str, u64> {
            us.iter()
                .zip(&truth)
                .map(|(x, &c)| (*x, ((c as f64 * (0.8 + 0.4 * rng.unit())) as u64).max(1)))
                .collect()
        };
        let c0 = jitter(&mut rng);
        let mut table = balance::assign(none(), &mw, &us, Costs::Lookup(&|x| c0[x]), tol).table;
        let (mut moved, mut solves_moving) = (0, 0);
        for _ in 0..rounds {
            let c = jitter(&mut rng);
            let next = balance::assign(rows(&table), &mw, &us, Costs::Lookup(&|x| c[x]), tol).table;
            let n = sticky::moved(rows(&table), &next);
            moved += n;
            solves_moving += usize::from(n > 0);
            table = next;
        }
        println!(
            "{members:>4} x {units:<7} {rounds} re-solves: {moved} units moved in {solves_moving} of them"
        );
    }
}

/// The scenario: measured loads jitter ±20 % around a fixed truth,
/// one sample a second per unit for ten minutes, smoothed as members do
/// (`LoadBook`, half-life 60 s) and re-solved at every report (10 s), from
/// the first report on. Simulated time: no sleeping.
fn section_measured(tol: Tolerance) {
    println!(
        "== 3b. stability, measured load: samples ±20 % each second, half-life 60 s, a solve every 10 s for 10 minutes (Zipf(1.0))"
    );
    for (members, units) in [(10usize, 1_000usize), (100, 10_000)] {
        let m = names("worker", members);
        let u = names("unit", units);
        let mw: Vec<(&str, u32)> = m.iter().map(|x| (x.as_str(), 1)).collect();
        let us = refs(&u);
        let mut rng = Rng(13);
        let truth = Dist::Zipf(1.0).costs(units, &mut rng);
        let mut book = LoadBook::new(std::time::Duration::from_secs(60));
        let t0 = Instant::now();
        let mut table: Option<Table<'_>> = None;
        let (mut moved, mut solves_moving, mut solves) = (0, 0, 0);
        for second in 0..600u64 {
            let at = t0 + std::time::Duration::from_secs(second);
            for (x, &c) in us.iter().zip(&truth) {
                book.sample(x, c as f64 * (0.8 + 0.4 * rng.unit()), at);
            }
            if second % 10 != 9 {
                continue;
            }
            let loads: Vec<u64> = us
                .iter()
                .map(|x| book.load(x).map_or(1, |l| (l.round() as u64).max(1)))
                .collect();
            let next = match &table {
                None => balance::assign(none(), &mw, &us, Costs::Aligned(&loads), tol).table,
                Some(t) => {
                    let next =
                        balance::assign(rows(t), &mw, &us, Costs::Aligned(&loads), tol).table;
                    let n = sticky::moved(rows(t), &next);
                    moved += n;
                    solves_moving += usize::from(n > 0);
                    solves += 1;
                    next
                }
            };
            table = Some(next);
        }
        println!(
            "{members:>4} x {units:<7} {solves} re-solves after the first table: {moved} units moved in {solves_moving} of them"
        );
    }
}

fn timed(runs: usize, mut f: impl FnMut()) -> (f64, f64, f64) {
    let mut v: Vec<f64> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    spread(&mut v)
}

fn section_speed(tol: Tolerance) {
    println!(
        "== 4. speed: the solve after one member leaves (Zipf(1.0) costs looked up in UnitCosts), ms: min / median / max"
    );
    let mut sizes = vec![(1_000usize, 100_000usize, 7usize)];
    if std::env::var("BALANCE_BENCH_LARGE").as_deref() == Ok("1") {
        sizes.push((10_000, 1_000_000, 3));
    }
    for (members, units, runs) in sizes {
        let m = names("worker", members);
        let u = names("unit", units);
        let mw: Vec<(&str, u32)> = m.iter().map(|x| (x.as_str(), 1)).collect();
        let us = refs(&u);
        let mut rng = Rng(11);
        let c = Dist::Zipf(1.0).costs(units, &mut rng);
        // As the daemon looks costs up: decoded from `{T}:costs`' text.
        let (costs, _) = UnitCosts::decode(us.iter().zip(&c).map(|(u, &c)| (*u, display_cost(c))));
        // Looked up once per costs read, in the units' order, as the
        // daemon does (`holder::solve`): the units are sorted.
        let aligned: Vec<u64> = us.iter().map(|x| costs.of(x)).collect();
        let f = Costs::Aligned(&aligned);
        let rest: Vec<(&str, u32)> = mw[1..].to_vec();
        let count_first = sticky::assign(none(), &mw, &us);
        let cost_first = balance::assign(none(), &mw, &us, f, tol).table;
        let s = timed(runs, || {
            std::hint::black_box(sticky::assign(rows(&count_first), &rest, &us));
        });
        let b = timed(runs, || {
            std::hint::black_box(balance::assign(rows(&cost_first), &rest, &us, f, tol));
        });
        println!(
            "{members:>6} x {units:<9} sticky {:.1} / {:.1} / {:.1}   cost {:.1} / {:.1} / {:.1}   cost ÷ sticky (medians) {:.2}",
            s.0,
            s.1,
            s.2,
            b.0,
            b.1,
            b.2,
            b.1 / s.1
        );
    }
}

fn main() {
    // `cargo bench` passes `--bench`; nothing to filter.
    let tol = Tolerance::DEFAULT;
    println!("cpu: {}", machine::cpu_model());
    // `BALANCE_BENCH_SECTIONS=speed` (or `balance,moves`, ...): only those.
    let only = std::env::var("BALANCE_BENCH_SECTIONS").unwrap_or_default();
    let run = |name: &str| only.is_empty() || only.split(',').any(|s| s == name);
    if run("balance") {
        section_balance(tol);
    }
    if run("moves") {
        section_moves(tol);
    }
    if run("stability") {
        section_stability(tol);
        section_measured(tol);
    }
    if run("speed") {
        section_speed(tol);
    }
}
