//! Issue 41: `Lookup`, a caller's local copy of the table.
//!
//! - After a kill (a real fleet, 10 members × 1,000 units): how long after
//!   the table the lookup shows the victim's units at their new owners.
//! - Memory at 1,000 × 100,000: the copy's own bytes (rows, names, the
//!   8-byte unit index) and this process's resident growth, against the
//!   table's `MEMORY USAGE` in Redis.
//! - A change's cost at 1,000 × 100,000: 10 rows rewritten as a holder
//!   writes them (rows, a `{T}:changes` entry naming them, the generation,
//!   the notification), followed by the changed rows; against the same
//!   change with the entry saying `*` (a whole write), followed by reading
//!   the table whole. From the notification to the copy at the new
//!   generation.

use std::time::{Duration, Instant};

use distributor::core::keys::Keys;
use distributor::{Lookup, LookupOptions, Placement};

use crate::common::*;

const MEMBERS: usize = 1_000;
const PER_MEMBER: usize = 100;
const CHANGES: usize = 10;

pub async fn run() {
    section("lookup: a caller's copy of the table (issue 41)");
    let (table, seen, lag) = crate::detection::lookup_after_kills().await;
    report(
        "lookup: SIGKILL to the table showing the victim's units moved, 10 x 1,000 sticky",
        "ms",
        &table,
        Target::none(),
    );
    report(
        "lookup: SIGKILL to the lookup showing them at their new owners",
        "ms",
        &seen,
        Target::none(),
    );
    report(
        "lookup: the lookup after the table (same kill)",
        "ms",
        &lag,
        Target {
            median: Some(20.0),
            max: None,
        },
    );
    scale().await;
}

/// Memory and change cost at 1,000 × 100,000.
async fn scale() {
    let redis = redis_server();
    let mut conn = redis.conn().await;
    let k = Keys::new(TABLE);
    let row = |m: usize, salt: usize| -> String {
        (0..PER_MEMBER)
            .map(|u| format!("unit-{:08}", (m * PER_MEMBER + u) * 10 + salt))
            .collect::<Vec<_>>()
            .join(",")
    };
    let members: Vec<String> = (0..MEMBERS)
        .map(|m| format!("10.0.{}.{}:7000", m / 250, m % 250))
        .collect();
    let mut pipe = redis::pipe();
    for (m, id) in members.iter().enumerate() {
        pipe.cmd("HSET").arg(TABLE).arg(id).arg(row(m, 0)).ignore();
    }
    pipe.cmd("HSET")
        .arg(&k.meta)
        .arg("generation")
        .arg(1)
        .ignore();
    let () = pipe.query_async(&mut conn).await.unwrap();
    let redis_bytes: u64 = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg(TABLE)
        .arg("SAMPLES")
        .arg(0)
        .query_async(&mut conn)
        .await
        .unwrap();
    let rss_before = rss_kib();
    let opts = LookupOptions {
        redis_url: redis.url(),
        table_key: TABLE.into(),
        ..LookupOptions::default()
    };
    let lookup = Lookup::connect(opts).await.unwrap();
    // Let the first subscription's whole read land first.
    let settled = wait_until(
        Duration::from_secs(10),
        Duration::from_millis(5),
        || async { lookup.reads().whole >= 2 },
    )
    .await;
    assert!(settled, "{:?}", lookup.reads());
    let rss_after = rss_kib();
    let copy = lookup.table();
    assert_eq!(copy.assignments(), MEMBERS * PER_MEMBER);
    report_one(
        "lookup: the copy's bytes ÷ the table's MEMORY USAGE in Redis, 1,000 x 100,000",
        "x",
        copy.bytes() as f64 / redis_bytes as f64,
        Target::max(2.0),
    );
    report_one(
        "lookup: this process's resident growth with the copy (after malloc_trim) ÷ the table's MEMORY USAGE",
        "x",
        (rss_after.saturating_sub(rss_before) * 1024) as f64 / redis_bytes as f64,
        Target::none(),
    );
    note(&format!(
        "table in Redis {:.2} MB; the copy {:.2} MB; resident growth {:.2} MB",
        redis_bytes as f64 / 1e6,
        copy.bytes() as f64 / 1e6,
        rss_after.saturating_sub(rss_before) as f64 / 1e3
    ));
    drop(copy);

    // Changes of CHANGES rows each, followed by their rows, then as whole
    // writes; alternating, so that both see the same machine.
    let (mut by_rows, mut whole) = (Vec::new(), Vec::new());
    let mut generation = 1u64;
    for trial in 0..20 {
        let as_whole = trial % 2 == 1;
        let salt = trial % 9 + 1;
        let changed: Vec<usize> = (0..CHANGES)
            .map(|c| (trial * 37 + c * 101) % MEMBERS)
            .collect();
        let names: Vec<&str> = changed.iter().map(|&m| members[m].as_str()).collect();
        let mut pipe = redis::pipe();
        pipe.atomic();
        for &m in &changed {
            pipe.cmd("HSET")
                .arg(TABLE)
                .arg(&members[m])
                .arg(row(m, salt))
                .ignore();
        }
        let next = generation + 1;
        let rows = if as_whole {
            "*".to_string()
        } else {
            names.join(",")
        };
        pipe.cmd("XADD")
            .arg(&k.changes)
            .arg("*")
            .arg(&[
                ("generation", next.to_string()),
                ("previous_generation", generation.to_string()),
                ("at_ms", "0".into()),
                ("epoch", "1".into()),
                ("writer", "bench".into()),
                ("rows", rows),
                ("members_changed", CHANGES.to_string()),
            ])
            .ignore();
        pipe.cmd("HSET")
            .arg(&k.meta)
            .arg("generation")
            .arg(next)
            .ignore();
        let () = pipe.query_async(&mut conn).await.unwrap();
        let mut copies = lookup.copies();
        copies.borrow_and_update();
        let reads = lookup.reads();
        let t0 = Instant::now();
        let _: i64 = redis::cmd("PUBLISH")
            .arg(&k.table_channel)
            .arg(next)
            .query_async(&mut conn)
            .await
            .unwrap();
        loop {
            tokio::time::timeout(Duration::from_secs(10), copies.changed())
                .await
                .expect("the lookup did not follow the change")
                .unwrap();
            if copies.borrow_and_update().generation() == Some(next) {
                break;
            }
        }
        let took = ms(t0.elapsed());
        let after = lookup.reads();
        let m = changed[0];
        let unit = format!("unit-{:08}", (m * PER_MEMBER) * 10 + salt);
        assert_eq!(
            lookup.owner(&unit),
            Placement::Owned(members[m].as_str().into())
        );
        if as_whole {
            assert_eq!(after.whole, reads.whole + 1, "{after:?}");
            whole.push(took);
        } else {
            assert_eq!(after.rows, reads.rows + 1, "{after:?}");
            by_rows.push(took);
        }
        generation = next;
    }
    report(
        "lookup: notification to the copy at the new generation, 10 of 1,000 rows changed, by rows",
        "ms",
        &by_rows,
        Target::none(),
    );
    report(
        "lookup: the same change read whole (its history entry saying *)",
        "ms",
        &whole,
        Target::none(),
    );
}

/// This process's resident memory, KiB, after the allocator returned what
/// it holds free (a read's transient buffers) to the system.
fn rss_kib() -> u64 {
    // SAFETY: malloc_trim only releases free memory of glibc's heap.
    unsafe {
        libc::malloc_trim(0);
    }
    crate::machine::status_kb(None, "VmRSS:")
}
