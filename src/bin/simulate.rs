//! `simulate [SEEDS | FIRST..LAST]`: runs the deterministic simulation of a
//! fleet (`coordinator::sim`) over seeds 1..=SEEDS (2,000 by default), on
//! every core, and ends with one line:
//! `simulated N seeds, V violations, R seeds/s`. A failing seed's schedule
//! and what followed are printed, then the first few failing seeds shrunk
//! (the faults and events left out while a violation stays).
//! `--trace SEED` prints one seed's; `--shrink SEED` shrinks one;
//! `--replay SEED N` checks that N runs give the same trace.
//! `SIMULATE_SHRINK=0` skips shrinking the first failing seeds.

use std::time::{Duration, Instant};

use distributor::coordinator::sim::{Run, SeedOutcome, run_seed, run_seeds, shrink};

/// Runs a shrink may take per failing seed, and the failing seeds shrunk.
const SHRINK_BUDGET: usize = 300;
const SHRINK_SEEDS: usize = 3;

/// Prints a failing seed shrunk: what it left out, then its trace.
fn print_shrunk(seed: u64, run: Run) {
    match shrink(seed, run, SHRINK_BUDGET) {
        Some((omit, o)) => {
            println!(
                "--- seed {seed}, shrunk ({} of {} events left; replay: simulate --shrink {seed}) ---",
                o.events - omit.events.count_ones() as usize,
                o.events
            );
            println!("{}", o.trace.join("\n"));
            print_violations(&o);
        }
        None => println!("--- seed {seed} does not fail when run again alone ---"),
    }
}

fn print_violations(o: &SeedOutcome) {
    for v in &o.violations {
        println!("seed {}: violation at {} ms: {}", o.seed, v.at_ms, v.what);
    }
}

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let run = Run::default();
    if let [flag, seed] = args.as_slice()
        && flag == "--trace"
    {
        let Ok(seed) = seed.parse() else {
            eprintln!("simulate: --trace takes a seed, not {seed:?}");
            return std::process::ExitCode::from(2);
        };
        let o = run_seed(seed, run);
        println!("{}", o.trace.join("\n"));
        println!("seed {seed}: {} violations", o.violations.len());
        return if o.violations.is_empty() {
            std::process::ExitCode::SUCCESS
        } else {
            std::process::ExitCode::FAILURE
        };
    }
    if let [flag, seed] = args.as_slice()
        && flag == "--shrink"
    {
        let Ok(seed) = seed.parse() else {
            eprintln!("simulate: --shrink takes a seed, not {seed:?}");
            return std::process::ExitCode::from(2);
        };
        print_shrunk(seed, run);
        return std::process::ExitCode::SUCCESS;
    }
    if let [flag, seed, times] = args.as_slice()
        && flag == "--replay"
    {
        // Runs one seed `times` times in this process: every trace must be
        // the first one (determinism, past hash-map seeds and threads).
        let (Ok(seed), Ok(times)) = (seed.parse(), times.parse::<usize>()) else {
            eprintln!("simulate: --replay SEED TIMES");
            return std::process::ExitCode::from(2);
        };
        let first = run_seed(seed, run).trace;
        for i in 1..times {
            let again = run_seed(seed, run).trace;
            if again != first {
                let at = first
                    .iter()
                    .zip(&again)
                    .position(|(a, b)| a != b)
                    .unwrap_or(0);
                println!(
                    "seed {seed}: run {i} differs at line {at}:\n  {:?}\n  {:?}",
                    first.get(at),
                    again.get(at)
                );
                return std::process::ExitCode::FAILURE;
            }
        }
        println!("seed {seed}: {times} runs, the same trace");
        return std::process::ExitCode::SUCCESS;
    }
    let (first, last) = match args.first().map(String::as_str) {
        None => (1, 2_000),
        Some(a) => match a.split_once("..") {
            Some((f, l)) => match (f.parse(), l.parse()) {
                (Ok(f), Ok(l)) => (f, l),
                _ => {
                    eprintln!("simulate: a range is FIRST..LAST, not {a:?}");
                    return std::process::ExitCode::from(2);
                }
            },
            None => match a.parse() {
                Ok(n) => (1, n),
                Err(_) => {
                    eprintln!("simulate: SEEDS is a number of seeds, not {a:?}");
                    return std::process::ExitCode::from(2);
                }
            },
        },
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    #[allow(clippy::disallowed_methods)] // the run's real speed, for the last line
    let started = Instant::now();
    let batch = run_seeds(first..=last, run, threads);
    let failed = &batch.failed;
    let took = started.elapsed().max(Duration::from_millis(1));
    let n = last.saturating_sub(first) + 1;
    for o in failed {
        println!("--- seed {} ---", o.seed);
        println!("{}", o.trace.join("\n"));
        print_violations(o);
    }
    // SIMULATE_SHRINK=0 skips the shrinking (a quicker look at many seeds).
    let shrinks = match std::env::var("SIMULATE_SHRINK").as_deref() {
        Ok("0") => 0,
        _ => SHRINK_SEEDS,
    };
    for o in failed.iter().take(shrinks) {
        print_shrunk(o.seed, run);
    }
    let violations: usize = failed.iter().map(|o| o.violations.len()).sum();
    if !failed.is_empty() {
        let seeds: Vec<String> = failed.iter().map(|o| o.seed.to_string()).collect();
        println!(
            "failing seeds: {} (replay one: simulate --trace SEED)",
            seeds.join(" ")
        );
    }
    let injected: Vec<String> = batch
        .injected
        .iter()
        .map(|(k, n)| format!("{k}={n}"))
        .collect();
    println!("injected: {}", injected.join(", "));
    let mut crashes = batch.poison_crashes.clone();
    crashes.sort_unstable();
    let rate = |k: usize| {
        100.0 * batch.healthy_quarantined[k] as f64 / batch.units_listed[k].max(1) as f64
    };
    println!(
        "quarantine: healthy units quarantined {} of {} listed ({:.2} %) in seeds without a poison unit",
        batch.healthy_quarantined[0],
        batch.units_listed[0],
        rate(0)
    );
    if let (Some(min), Some(max)) = (crashes.first(), crashes.last()) {
        println!(
            "quarantine: {} seeds with a poison unit, crashes it caused min {min} / median {} / max {max}, \
             other units quarantined {} of {} ({:.2} %)",
            crashes.len(),
            crashes[crashes.len() / 2],
            batch.healthy_quarantined[1],
            batch.units_listed[1],
            rate(1)
        );
    }
    println!(
        "simulated {n} seeds, {violations} violations, {:.1} seeds/s",
        n as f64 / took.as_secs_f64()
    );
    if failed.is_empty() {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    }
}
