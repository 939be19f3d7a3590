//! Benchmarks of the assignment (`ring::assign`) at the sizes the service
//! must handle. Targets on the 2-core machine: 10 x 1,000 <= 1 ms,
//! 1,000 x 100,000 <= 100 ms, 10,000 x 1,000,000 <= 2 s with a peak RSS
//! <= 1 GiB.
//!
//! The 10,000 x 1,000,000 case takes most of a second per call, too slow
//! for criterion's repeated sampling, so it runs once, timed with `Instant`,
//! and only when `RING_BENCH_LARGE=1`, keeping a default `cargo bench` to
//! about half a minute. To measure its peak memory alone, skip the criterion
//! cases with a filter that matches none of them:
//!
//! ```text
//! cargo bench --bench ring --no-run   # prints the bench executable
//! RING_BENCH_LARGE=1 /usr/bin/time -v target/release/deps/ring-<hash> no-such-bench
//! ```

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use distributor::ring::assign;

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

/// One timed run of 10,000 members x 1,000,000 units (50 million points).
fn run_large() {
    let member_names = names("worker", 10_000);
    let unit_names = names("unit", 1_000_000);
    let (members, units) = (refs(&member_names), refs(&unit_names));
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
}

fn main() {
    if std::env::var_os("RING_BENCH_LARGE").is_some_and(|v| v == "1") {
        run_large();
    }
    let mut criterion = Criterion::default().configure_from_args();
    bench_assign(&mut criterion);
    criterion.final_summary();
}
