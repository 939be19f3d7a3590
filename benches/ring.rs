//! Benchmarks of the assignment (`ring::assign`) at the sizes the service
//! must handle. Targets on the 2-core machine: 10 x 1,000 <= 1 ms,
//! 1,000 x 100,000 <= 100 ms, 10,000 x 1,000,000 <= 2 s with a peak RSS
//! <= 1 GiB.
//!
//! The 10,000 x 1,000,000 case takes most of a second per call, too slow
//! for criterion's repeated sampling, so it runs 3 times, timed with
//! `Instant`, and only when `RING_BENCH_LARGE=1`, keeping a default
//! `cargo bench` to about half a minute. It prints min / median / max and the
//! process's peak RSS (`VmHWM`) right after. To measure its peak memory alone,
//! skip the summary below and the criterion cases (a filter that matches none):
//!
//! ```text
//! cargo bench --bench ring --no-run   # prints the bench executable
//! RING_BENCH_LARGE=1 RING_BENCH_SUMMARY=0 /usr/bin/time -v target/release/deps/ring-<hash> no-such-bench
//! ```
//!
//! Before criterion, a timed summary runs every case a fixed number of times
//! with `Instant` and prints min / median / max with PASS or MISS against the
//! targets, then a growth table (10 members x {1k, 10k, 100k} units and
//! {10, 100, 1,000, 10,000} members x 100k units). `RING_BENCH_SUMMARY=0`
//! skips it. Results and the machine they were measured on: `BENCHMARKS.md`,
//! "Assignment compute".
//!
//! `RING_BENCH_MEM=<members>x<units>` measures the memory of `assign` alone
//! and exits: it builds the inputs, resets the process's peak RSS
//! (`/proc/self/clear_refs`), calls `assign` once and prints the RSS before,
//! the peak during the call, and the difference per unit. With
//! `RING_BENCH_RUNS=<n>` it then times `n` more calls (min / median / max).
//! `RING_BENCH_SORTED=1` passes the units sorted, as the daemon does.

// Real processes on real time: the std clock is the right one here
// (`clippy.toml` disallows it in the crate, whose clock tests pause).
#![allow(clippy::disallowed_methods)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};

#[path = "shared/machine.rs"]
mod machine;
use distributor::core::ring::assign;

/// Names shaped like real ones (a shared prefix, a numeric suffix), in a
/// fixed pseudo-random order: real member and unit lists come from sets in
/// no particular order, and already-sorted input would flatter the sort.
fn names(prefix: &str, count: usize) -> Vec<String> {
    let mut names: Vec<String> = (0..count).map(|i| format!("{prefix}-{i:08}")).collect();
    // Fisher-Yates with xorshift64: deterministic, no extra dependency.
    let mut state = 0x9e37_79b9_7f4a_7c15_u64 ^ count as u64;
    for i in (1..names.len()).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        names.swap(i, (state % (i as u64 + 1)) as usize);
    }
    names
}

fn refs(strings: &[String]) -> Vec<&str> {
    strings.iter().map(String::as_str).collect()
}

fn bench_assign(c: &mut Criterion) {
    let mut group = c.benchmark_group("assign");
    for (members, units, samples) in [(10, 1_000, 100), (100, 10_000, 50), (1_000, 100_000, 20)] {
        let member_names = names("worker", members);
        let unit_names = names("unit", units);
        let input = (refs(&member_names), refs(&unit_names));
        group.sample_size(samples);
        group.measurement_time(Duration::from_secs(5));
        group.throughput(Throughput::Elements(units as u64));
        group.bench_with_input(
            BenchmarkId::from_parameter(format!("{members}x{units}")),
            &input,
            |b, (m, u)| b.iter(|| assign(black_box(m), black_box(u))),
        );
    }
    group.finish();
}

/// Min, median and max of `samples`, in ms.
fn spread(samples: &mut [f64]) -> (f64, f64, f64) {
    samples.sort_by(|a, b| a.total_cmp(b));
    let n = samples.len();
    let median = if n % 2 == 1 {
        samples[n / 2]
    } else {
        (samples[n / 2 - 1] + samples[n / 2]) / 2.0
    };
    (samples[0], median, samples[n - 1])
}

/// Times `runs` calls of `assign` for `members` x `units`, in ms.
fn time_case(members: usize, units: usize, runs: usize) -> Vec<f64> {
    let member_names = names("worker", members);
    let unit_names = names("unit", units);
    let (m, u) = (refs(&member_names), refs(&unit_names));
    // One untimed call warms the allocator and caches.
    black_box(assign(black_box(&m), black_box(&u)));
    (0..runs)
        .map(|_| {
            let start = Instant::now();
            let table = assign(black_box(&m), black_box(&u));
            let elapsed = start.elapsed();
            drop(black_box(table));
            elapsed.as_secs_f64() * 1e3
        })
        .collect()
}

fn print_line(label: &str, samples: &mut [f64], target_ms: Option<f64>) {
    let n = samples.len();
    let (min, median, max) = spread(samples);
    let verdict = match target_ms {
        None => "info".to_string(),
        Some(t) => format!(
            "target: max <= {t} ms  {}",
            if max <= t { "PASS" } else { "MISS" }
        ),
    };
    println!(
        "RESULT ring: assign {label:<18} n={n:<3} min={min:>9.3} median={median:>9.3} max={max:>9.3} ms  {verdict}"
    );
}

/// The targets with min / median / max, then how time grows.
fn summary() {
    println!(
        "ring summary ({} cores)",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    for (members, units, runs, target) in [(10, 1_000, 200, 1.0), (1_000, 100_000, 15, 100.0)] {
        let mut t = time_case(members, units, runs);
        print_line(&format!("{members}x{units}"), &mut t, Some(target));
    }
    println!("growth (median ms; per unit in ns):");
    println!("| members | units | min ms | median ms | max ms | ns per unit |");
    println!("|---|---|---|---|---|---|");
    for (members, units, runs) in [
        (10, 1_000, 100),
        (10, 10_000, 30),
        (10, 100_000, 10),
        (100, 100_000, 10),
        (1_000, 100_000, 10),
        (10_000, 100_000, 10),
    ] {
        let mut t = time_case(members, units, runs);
        let (min, median, max) = spread(&mut t);
        println!(
            "| {members} | {units} | {min:.3} | {median:.3} | {max:.3} | {:.0} |",
            median * 1e6 / units as f64
        );
    }
}

/// Timed runs of 10,000 members x 1,000,000 units (50 million points).
fn run_large() {
    let member_names = names("worker", 10_000);
    let unit_names = names("unit", 1_000_000);
    let (members, units) = (refs(&member_names), refs(&unit_names));
    let mut samples = Vec::new();
    for _ in 0..3 {
        let start = Instant::now();
        let table = assign(black_box(&members), black_box(&units));
        let elapsed = start.elapsed();
        let sizes = || table.values().map(Vec::len);
        assert_eq!(sizes().sum::<usize>(), units.len());
        assert_eq!((sizes().min(), sizes().max()), (Some(100), Some(100)));
        println!(
            "assign/10000x1000000 (single run): {:.3} s",
            elapsed.as_secs_f64()
        );
        samples.push(elapsed.as_secs_f64() * 1e3);
    }
    print_line("10000x1000000", &mut samples, Some(2000.0));
    let peak_kb = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .unwrap_or(0);
    println!(
        "RESULT ring: peak RSS after 10000x1000000: {peak_kb} kB (whole process, inputs included)  target: <= 1048576 kB  {}",
        if peak_kb > 0 && peak_kb <= 1_048_576 {
            "PASS"
        } else {
            "MISS"
        }
    );
}

/// `RING_BENCH_MEM`: the peak RSS of one `assign` call above the inputs.
fn run_memory(case: &str) {
    let (members, units) = case
        .split_once('x')
        .and_then(|(m, u)| Some((m.parse::<usize>().ok()?, u.parse::<usize>().ok()?)))
        .expect("RING_BENCH_MEM=<members>x<units>");
    let runs: usize = std::env::var("RING_BENCH_RUNS").map_or(0, |n| n.parse().unwrap());
    let member_names = names("worker", members);
    let unit_names = names("unit", units);
    let (m, mut u) = (refs(&member_names), refs(&unit_names));
    if std::env::var_os("RING_BENCH_SORTED").is_some_and(|v| v == "1") {
        u.sort_unstable();
    }
    let before = machine::status_kb(None, "VmRSS:");
    // "5" resets the peak RSS to the current RSS (Linux 4.0+).
    let reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
    let start = Instant::now();
    let table = assign(black_box(&m), black_box(&u));
    let elapsed = start.elapsed();
    let peak = machine::status_kb(None, "VmHWM:");
    assert_eq!(table.values().map(Vec::len).sum::<usize>(), units);
    drop(black_box(table));
    let above = peak.saturating_sub(before);
    println!(
        "RESULT ring: memory {members}x{units}: RSS before {before} kB, peak {peak} kB{}, assign {above} kB = {:.1} bytes per unit ({:.3} s)",
        if reset {
            ""
        } else {
            " (peak not reset: includes input building)"
        },
        above as f64 * 1024.0 / units as f64,
        elapsed.as_secs_f64()
    );
    if runs > 0 {
        let mut samples: Vec<f64> = (0..runs)
            .map(|_| {
                let start = Instant::now();
                let table = assign(black_box(&m), black_box(&u));
                let elapsed = start.elapsed();
                drop(black_box(table));
                elapsed.as_secs_f64() * 1e3
            })
            .collect();
        print_line(&format!("{members}x{units}"), &mut samples, None);
    }
}

fn main() {
    if let Ok(case) = std::env::var("RING_BENCH_MEM") {
        run_memory(&case);
        return;
    }
    if std::env::var_os("RING_BENCH_LARGE").is_some_and(|v| v == "1") {
        run_large();
    }
    if std::env::var_os("RING_BENCH_SUMMARY").is_none_or(|v| v != "0") {
        summary();
    }
    let mut criterion = Criterion::default().configure_from_args();
    bench_assign(&mut criterion);
    criterion.final_summary();
}
