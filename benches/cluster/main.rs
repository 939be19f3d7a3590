//! Cluster benchmarks with a real `redis-server`, real gRPC servers and real
//! `distributor` processes on loopback. Each section prints `RESULT` lines
//! (min / median / max and PASS or MISS against its target) and the run ends
//! with a Markdown summary; see `BENCHMARKS.md`.
//!
//! ```text
//! cargo bench --bench cluster                      # every section (~6 min on 2 cores)
//! cargo bench --bench cluster -- detection failover # only the sections named
//! ```
//!
//! Sections: `pings` (target 2), `detection` (3), `failover` (4),
//! `redis_cost` (5), `table_write` (6), `memory` (holder peak RSS per unit),
//! `handoff` (revoke → acknowledge → grant between live members), `rolling`
//! (owner changes per unit over a rolling restart, issue 23), `drain`
//! (SIGTERM to exit of a draining worker, issue 39), `scale` (kill
//! to units owned again in `ring` and `sticky` up to 1,000 × 100,000, issue
//! 24's reference), `ui` (the
//! status page's first render in headless Chromium, issue 14).
//! The assignment itself (target 1) is
//! `benches/ring.rs`. The 10,000-member runs need about 12,000 open files:
//! the bench raises its soft limit to the hard one, and skips them (saying so)
//! if that is not enough.

// Real processes on real time: the std clock is the right one here
// (`clippy.toml` disallows it in the crate, whose clock tests pause).
#![allow(clippy::disallowed_methods)]

#[path = "../shared/machine.rs"]
mod machine;
#[path = "../../tests/support/mod.rs"]
mod support;

mod common;
mod detection;
mod drain;
mod failover;
mod handoff;
mod lookup;
mod member_reads;
mod memory;
mod pings;
mod redis_cost;
mod rolling;
mod table_write;
mod ui;

const SECTIONS: &[&str] = &[
    "pings",
    "detection",
    "failover",
    "redis_cost",
    "table_write",
    "memory",
    "handoff",
    "member_reads",
    "rolling",
    "drain",
    "scale",
    "lookup",
    "ui",
    "renewals",
];

/// Sections that run only when named (`renewals` takes 10 minutes).
const NAMED_ONLY: &[&str] = &["renewals"];

fn main() {
    if let Ok(mode) = std::env::var(common::CHILD_ENV) {
        common::child_main(&mode);
        return;
    }
    common::raise_fd_limit();
    // `cargo bench` passes `--bench`; other words select sections.
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let chosen: Vec<&str> = SECTIONS
        .iter()
        .copied()
        .filter(|s| {
            if filters.is_empty() {
                !NAMED_ONLY.contains(s)
            } else {
                filters.iter().any(|f| s.contains(f.as_str()))
            }
        })
        .collect();
    if chosen.is_empty() {
        println!("cluster: no section matches {filters:?} (sections: {SECTIONS:?})");
        return;
    }
    println!(
        "cluster benchmarks: {} cores, {}; sections {chosen:?}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        common::cpu_model()
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let started = std::time::Instant::now();
    for s in chosen {
        let t = std::time::Instant::now();
        rt.block_on(async {
            match s {
                "pings" => pings::run().await,
                "detection" => detection::run().await,
                "failover" => failover::run().await,
                "redis_cost" => redis_cost::run().await,
                "table_write" => table_write::run().await,
                "memory" => memory::run().await,
                "member_reads" => member_reads::run().await,
                "handoff" => handoff::run().await,
                "rolling" => rolling::run().await,
                "drain" => drain::run().await,
                "scale" => detection::scale().await,
                "lookup" => lookup::run().await,
                "ui" => ui::run().await,
                "renewals" => failover::renewals().await,
                _ => unreachable!(),
            }
        });
        println!("    ({s} took {:.0} s)", t.elapsed().as_secs_f64());
    }
    common::print_summary();
    println!("cluster: done in {:.0} s", started.elapsed().as_secs_f64());
}
