//! A membership change's sticky solve, whole against reassigned
//! (`core::sticky::reassign`), in the same run, through the holder's call
//! (`MatchingTable::solve_counted`, with and without `current_is_solved`):
//! one member leaves, one joins, one member's weight doubles, from a
//! balanced table of 10 × 1,000, 100 × 100,000 and 1,000 × 100,000
//! (`STICKY_BENCH_LARGE=1` adds 10,000 × 1,000,000). Each case alternates
//! the two solves, 15 times each, and prints min / median / max and the
//! ratio of the medians; both must give the same table (checked every time).
//! Then the time of the write's delta (`core::delta::TableDelta::between`,
//! the rows that changed and the next digest from the base's): a holder's
//! write paid it twice before `TableDelta::again` (once for the digest, once
//! for the commit), and pays it once now.
//! Last, a leave while a quarantine tries 16 units (pins): the leave's
//! solve, and a later cycle's solve again against the fixed-point check
//! that replaces it.
//!
//! Run: `cargo bench --bench sticky`. Results: `BENCHMARKS.md`, "Sticky
//! reassign: a membership change's solve".

// Real time, measured: the std clock is the right one here.
#![allow(clippy::disallowed_methods)]

use std::time::Instant;

use distributor::core::controls::Controls;
use distributor::core::delta::TableDelta;
use distributor::core::inputs::Inputs;
use distributor::core::sticky::holds_exactly;
use distributor::core::table::{Assignment, MatchingTable, Solve};

#[path = "shared/machine.rs"]
mod machine;

fn inputs(members: &[String], units: &[String]) -> Inputs {
    Inputs::one_group("g", members, units)
}

fn solve(
    inp: &Inputs,
    current: &MatchingTable,
    weight: &dyn Fn(&str) -> u32,
    solved: bool,
) -> MatchingTable {
    let how = Solve {
        assignment: Assignment::Sticky,
        current: Some(current),
        weight,
        current_is_solved: solved,
        ..Solve::ring()
    };
    MatchingTable::solve_counted(inp, |_| true, &how).0
}

/// A member's capacity weight.
type Weight = dyn Fn(&str) -> u32;

fn spread(samples: &mut [f64]) -> (f64, f64, f64) {
    samples.sort_by(f64::total_cmp);
    (
        samples[0],
        samples[samples.len() / 2],
        samples[samples.len() - 1],
    )
}

fn case(label: &str, members: usize, units: usize) {
    const RUNS: usize = 15;
    let names: Vec<String> = (0..members)
        .map(|i| format!("10.0.{}.{}:7000", i / 250, i % 250))
        .collect();
    let mut sorted_names = names.clone();
    sorted_names.sort();
    let mut units: Vec<String> = (0..units).map(|i| format!("site-{i:08}.example")).collect();
    units.sort();
    let one = |_: &str| 1;
    let first = solve(
        &inputs(&names, &units),
        &MatchingTable::default(),
        &one,
        false,
    );
    let balanced = solve(&inputs(&names, &units), &first, &one, false);
    balanced.digest();
    let leaver = names[members / 2].clone();
    let doubled = names[members / 3].clone();
    let without: Vec<String> = names.iter().filter(|m| **m != leaver).cloned().collect();
    let mut with = names.clone();
    with.push("10.9.9.9:7000".to_string());
    let double = move |m: &str| if m == doubled { 2 } else { 1 };
    let changes: [(&str, Inputs, &Weight); 3] = [
        ("leave", inputs(&without, &units), &one),
        ("join", inputs(&with, &units), &one),
        ("weight", inputs(&names, &units), &double),
    ];
    for (change, inp, weight) in changes {
        let (mut whole, mut fast) = (Vec::new(), Vec::new());
        for _ in 0..RUNS {
            let t = Instant::now();
            let a = solve(&inp, &balanced, weight, false);
            whole.push(t.elapsed().as_secs_f64() * 1e3);
            let t = Instant::now();
            let b = solve(&inp, &balanced, weight, true);
            fast.push(t.elapsed().as_secs_f64() * 1e3);
            assert!(a == b, "{label} {change}: the two solves differ");
        }
        // The write's delta from the balanced table (its digest known, as
        // the holder's last write's is).
        let next = solve(&inp, &balanced, weight, true);
        let mut delta = Vec::new();
        let mut changed = 0;
        for _ in 0..RUNS {
            let fresh = MatchingTable::from_rows(next.rows().clone());
            let t = Instant::now();
            changed = TableDelta::between(&balanced, &fresh).written.len();
            delta.push(t.elapsed().as_secs_f64() * 1e3);
        }
        let (d0, d1, d2) = spread(&mut delta);
        let (w0, w1, w2) = spread(&mut whole);
        let (f0, f1, f2) = spread(&mut fast);
        println!(
            "{label:>16} {change:<7} whole {w0:8.3} / {w1:8.3} / {w2:8.3} ms   \
             reassigned {f0:7.3} / {f1:7.3} / {f2:7.3} ms   ratio {:.3}",
            f1 / w1
        );
        println!(
            "{label:>16} {change:<7} the write's delta ({changed} rows written) \
             {d0:7.3} / {d1:7.3} / {d2:7.3} ms"
        );
    }
}

/// [`solve`] under `controls` (the holder passes a quarantine's trials as
/// pins), counting its moves as the holder does; `solved` vouches for
/// `current` as the last solve's table (`sticky::reassign` then).
fn solve_pinned(
    inp: &Inputs,
    current: &MatchingTable,
    controls: &Controls,
    solved: bool,
) -> MatchingTable {
    let how = Solve {
        assignment: Assignment::Sticky,
        current: Some(current),
        controls: Some(controls),
        current_is_solved: solved,
        ..Solve::ring()
    };
    MatchingTable::solve_counted(inp, |_| true, &how).0
}

/// A leave while a quarantine tries 16 held units (its most), each pinned
/// to a member of its own: the leave's solve, whole or reassigned from the
/// table solved under the same pins (the holder's case: its memo), and
/// what each later cycle of the handoff pays for the same inputs: the
/// solve again, from the table it returned, or the check that the table is
/// that fixed point (`sticky::holds_exactly`), which the holder makes
/// instead since pins alone keep it.
fn pinned_case(label: &str, members: usize, units: usize) {
    const RUNS: usize = 15;
    const TRIALS: usize = 16;
    let names: Vec<String> = (0..members)
        .map(|i| format!("10.0.{}.{}:7000", i / 250, i % 250))
        .collect();
    let mut units: Vec<String> = (0..units).map(|i| format!("site-{i:08}.example")).collect();
    units.sort();
    let mut controls = Controls::default();
    for k in 0..TRIALS {
        let unit = &units[k * units.len() / TRIALS];
        controls
            .pins
            .insert(unit.clone(), names[(k * 7 + 1) % members].clone());
    }
    let all = inputs(&names, &units);
    let first = solve_pinned(&all, &MatchingTable::default(), &controls, false);
    let balanced = solve_pinned(&all, &first, &controls, false);
    let leaver = names[members / 2].clone();
    let without: Vec<String> = names.iter().filter(|m| **m != leaver).cloned().collect();
    let inp = inputs(&without, &units);
    let (mut leave, mut reassigned) = (Vec::new(), Vec::new());
    let (mut again, mut check) = (Vec::new(), Vec::new());
    for _ in 0..RUNS {
        let t = Instant::now();
        let next = solve_pinned(&inp, &balanced, &controls, false);
        leave.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        let fast = solve_pinned(&inp, &balanced, &controls, true);
        reassigned.push(t.elapsed().as_secs_f64() * 1e3);
        assert!(
            fast == next,
            "{label}: the reassigned leave under pins differs from the whole solve"
        );
        let t = Instant::now();
        let same = solve_pinned(&inp, &next, &controls, false);
        again.push(t.elapsed().as_secs_f64() * 1e3);
        assert!(
            same == next,
            "{label}: a solve under pins moved its own result"
        );
        let t = Instant::now();
        let fixed = holds_exactly(next.rows(), &[], &next);
        check.push(t.elapsed().as_secs_f64() * 1e3);
        assert!(fixed, "{label}: the result is not recognised");
    }
    let (l0, l1, l2) = spread(&mut leave);
    let (r0, r1, r2) = spread(&mut reassigned);
    let (a0, a1, a2) = spread(&mut again);
    let (c0, c1, c2) = spread(&mut check);
    println!(
        "{label:>16} leave under {TRIALS} trial pins: whole {l0:8.3} / {l1:8.3} / {l2:8.3} ms   \
         reassigned {r0:7.3} / {r1:7.3} / {r2:7.3} ms   ratio {:.3}",
        r1 / l1
    );
    println!(
        "{label:>16} a later cycle under pins: solved again {a0:7.3} / {a1:7.3} / {a2:7.3} ms, \
         checked {c0:7.3} / {c1:7.3} / {c2:7.3} ms   ratio {:.3}",
        c1 / a1
    );
}

fn main() {
    println!(
        "cpu: {} (n = 15 per figure, min / median / max)",
        machine::cpu_model()
    );
    case("10 x 1,000", 10, 1_000);
    case("100 x 100,000", 100, 100_000);
    case("1,000 x 100,000", 1_000, 100_000);
    if std::env::var("STICKY_BENCH_LARGE").as_deref() == Ok("1") {
        case("10,000 x 1M", 10_000, 1_000_000);
    }
    pinned_case("10 x 1,000", 10, 1_000);
    pinned_case("100 x 100,000", 100, 100_000);
    pinned_case("1,000 x 100,000", 1_000, 100_000);
}
