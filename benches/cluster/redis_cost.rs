//! Target 5: what the holder costs Redis, from `INFO all` deltas (commandstats,
//! `total_reads_processed`, net bytes, and the dirty counter
//! `rdb_changes_since_last_save`). One `distributor` process (no standbys),
//! poll 500 ms, ping timeout 500 ms, lease renewal every 500 ms, census every
//! 5 s; members are plain ping servers listed with `RPUSH`, so nothing but the
//! replica and this bench talks to Redis. Fleets: 10 x 1,000 and
//! 1,000 x 100,000, then 10,000 x 1,000,000 with the daemon's defaults (poll and
//! ping timeout 1 s; `BENCH_HUGE=0` skips it).
//!
//! - Requests of a cycle: each list's and the table's WATCH guard (one
//!   `UNWATCH`+`WATCH` pipeline and one `MULTI`+`EXEC` pipeline each), the
//!   `table_state.lua` check, the reports pipeline (two `HGETALL`), and only
//!   when a guard cannot tell a list is unchanged, that list's `LRANGE`;
//!   plus the commit scripts. They go out concurrently, in two sequential
//!   round trips on an idle cycle (arm, then check; the rest beside them).
//!   Lists read (`LRANGE` calls) per idle cycle are held against zero. Table
//!   checks are counted as the holder's cycles (`distributor_cycles_total`,
//!   every outcome: each full or handoff cycle runs one), from snapshots
//!   taken right after a cycle ended. As a cross-check, Redis counts one
//!   read event per request it receives (`total_reads_processed`; a small
//!   pipeline is one event, a multi-megabyte request several): "all-in"
//!   divides every read event of the window (cycles, lease renewals every
//!   500 ms, census, the pub/sub keepalive PING; minus this bench's own INFO)
//!   by the number of cycles, so it depends on the renewal and poll
//!   intervals, not on the fleet.
//! - Writes: the dirty counter counts every key modification. Renewals (one
//!   `PEXPIRE` each) and census steps (`INCR`, `HSET`, two `PEXPIRE`) are
//!   subtracted; what is left was written by cycles.
//! - Renewals = `PEXPIRE` calls - 2 x `INCR` calls (census); commit scripts =
//!   `FCALL` + `EVALSHA` calls - renewals - table checks (a lone replica makes no
//!   acquisition attempts once it holds the lease). Commands run inside
//!   scripts count in commandstats too, which is what makes this bookkeeping
//!   possible. Plain `EVAL` calls are reported too: there should be none.
//! - The ping round's share of the holder's CPU: after the change rounds the
//!   units list is cut to 10 entries (same members, same processes) and a
//!   second idle window measured; what an idle cycle costs beyond that is
//!   what the units cost it.

use std::collections::HashMap;
use std::time::Duration;

use std::time::Instant;

use crate::common::*;

const POLL: Duration = Duration::from_millis(500);
const IDLE_WINDOW: Duration = Duration::from_secs(10);

/// The idle window, `BENCH_IDLE_SECS` seconds if set (longer, to attach a
/// profiler to the holder meanwhile).
fn idle_window_length() -> Duration {
    std::env::var("BENCH_IDLE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(IDLE_WINDOW, Duration::from_secs)
}

/// Whether to run the fleet of `members` members (`BENCH_COST_MEMBERS`, a
/// comma-separated list; all when unset).
fn selected(members: usize) -> bool {
    std::env::var("BENCH_COST_MEMBERS").map_or(true, |v| {
        v.split(',').any(|m| m.trim() == members.to_string())
    })
}

struct Snap {
    calls: HashMap<String, (u64, u64)>,
    info: HashMap<String, String>,
    cycles: f64,
    /// Every outcome (ok, handoff, errors): one table check each.
    all_cycles: f64,
    ping_failures: f64,
    pings_ok: f64,
    cycle_seconds: f64,
    lists_read: f64,
    lists_cached: f64,
    at: Instant,
}

struct Delta {
    cycles: f64,
    lists_read: f64,
    lists_cached: f64,
    evals: f64,
    requests: f64,
    ping_failures: f64,
    pings_ok: f64,
    cycle_seconds: f64,
    secs: f64,
    reads: f64,
    dirty: f64,
    net_in: f64,
    net_out: f64,
    renewals: f64,
    census: f64,
    commits: f64,
    read_pipelines: f64,
    commit_usec: f64,
}

struct Fleet {
    _redis: RedisServer,
    conn: redis::aio::MultiplexedConnection,
    _servers: Vec<Proc>,
    addrs: Vec<String>,
    replica: Replica,
}

impl Fleet {
    async fn snap(&mut self) -> Snap {
        let samples = scrape(self.replica.http_port).await.unwrap_or_default();
        let info = info(&mut self.conn, "all").await;
        Snap {
            calls: command_calls(&info),
            info,
            cycles: metric(&samples, "distributor_cycles_total", &[("outcome", "ok")])
                .unwrap_or(0.0),
            all_cycles: metric_sum(&samples, "distributor_cycles_total"),
            lists_read: metric(
                &samples,
                "distributor_list_reads_total",
                &[("outcome", "read")],
            )
            .unwrap_or(0.0),
            lists_cached: metric(
                &samples,
                "distributor_list_reads_total",
                &[("outcome", "cached")],
            )
            .unwrap_or(0.0),
            ping_failures: metric_sum(&samples, "distributor_ping_failures_total"),
            pings_ok: metric(&samples, "distributor_ping_duration_seconds_count", &[])
                .unwrap_or(0.0),
            cycle_seconds: metric(&samples, "distributor_cycle_duration_seconds_sum", &[])
                .unwrap_or(0.0),
            at: Instant::now(),
        }
    }

    async fn table_bytes(&self) -> f64 {
        let samples = scrape(self.replica.http_port).await.unwrap_or_default();
        metric(&samples, "distributor_table_size_bytes", &[]).unwrap_or(0.0)
    }

    async fn wait_cycles(&self, n: f64) {
        let port = self.replica.http_port;
        let start = cycles_ok(port).await.unwrap_or(0.0);
        let ok = wait_until(
            Duration::from_secs(30),
            Duration::from_millis(20),
            || async move { cycles_ok(port).await.unwrap_or(0.0) >= start + n },
        )
        .await;
        assert!(ok, "the holder stopped cycling");
    }
}

fn delta(a: &Snap, b: &Snap) -> Delta {
    let calls = |c: &str| {
        let x = b.calls.get(c).map_or(0, |v| v.0);
        let y = a.calls.get(c).map_or(0, |v| v.0);
        x.saturating_sub(y) as f64
    };
    let usec = |c: &str| {
        let x = b.calls.get(c).map_or(0, |v| v.1);
        let y = a.calls.get(c).map_or(0, |v| v.1);
        x.saturating_sub(y) as f64
    };
    let stat = |k: &str| num(&b.info, k).saturating_sub(num(&a.info, k)) as f64;
    let census = calls("incr");
    let renewals = calls("pexpire") - 2.0 * census;
    // Scripts run by FCALL (EVALSHA where Functions are refused): renewals,
    // table checks (one per cycle) and commits (a lone holder acquires
    // nothing).
    let table_checks = b.all_cycles - a.all_cycles;
    let scripts = calls("fcall") + calls("evalsha");
    let commits = scripts - renewals - table_checks;
    let lranges = calls("lrange");
    Delta {
        cycles: b.cycles - a.cycles,
        lists_read: b.lists_read - a.lists_read,
        lists_cached: b.lists_cached - a.lists_cached,
        evals: calls("eval"),
        // Guards (a WATCH pipeline and an EXEC each), table checks, reports
        // pipelines (two HGETALL each), list reads, commits.
        requests: calls("watch")
            + calls("exec")
            + table_checks
            + calls("hgetall") / 2.0
            + lranges
            + commits,
        ping_failures: b.ping_failures - a.ping_failures,
        pings_ok: b.pings_ok - a.pings_ok,
        cycle_seconds: b.cycle_seconds - a.cycle_seconds,
        secs: (b.at - a.at).as_secs_f64(),
        // The second INFO's own request is counted before it reports.
        reads: stat("total_reads_processed") - 1.0,
        dirty: stat("rdb_changes_since_last_save"),
        net_in: stat("total_net_input_bytes"),
        net_out: stat("total_net_output_bytes"),
        renewals,
        census,
        commits,
        // One LRANGE per list read: one services list and the units list.
        read_pipelines: lranges / 2.0,
        commit_usec: usec("fcall") + usec("evalsha"),
    }
}

pub async fn run() {
    section("redis cost of idle and changed cycles (target 5)");
    let fast = Timing::defaults(POLL, Duration::from_millis(500));
    for (members, units, changes) in [(10, 1_000, 2), (1_000, 100_000, 2)] {
        if selected(members) {
            fleet_cost(members, units, changes, fast).await;
        }
    }
    if std::env::var_os("BENCH_HUGE").is_none_or(|v| v != "0")
        && selected(10_000)
        && enough_fds("redis_cost huge")
    {
        // The daemon's defaults, poll 1 s and ping timeout 1 s; BENCH_HUGE_FAST=1
        // tries the 500 ms settings of the smaller fleets instead.
        let huge = if std::env::var_os("BENCH_HUGE_FAST").is_some_and(|v| v == "1") {
            fast
        } else {
            Timing::defaults(Duration::from_secs(1), Duration::from_secs(1))
        };
        fleet_cost(10_000, 1_000_000, 1, huge).await;
    }
}

async fn fleet_cost(members: usize, units: usize, change_rounds: usize, timing: Timing) {
    let label = format!(
        "{members} x {units}{}",
        if timing.poll == POLL {
            String::new()
        } else {
            format!(", poll {} ms", timing.poll.as_millis())
        }
    );
    let redis = redis_server();
    let mut conn = redis.conn().await;
    set_list(&mut conn, UNITS, &unit_names(units)).await;
    let (servers, addrs) = spawn_server_fleet(members, members.div_ceil(2_500));
    set_list(&mut conn, SERVICES, &addrs).await;
    let replica = spawn_replica(&redis.url(), &format!("cost-{members}"), &timing);
    let mut f = Fleet {
        _redis: redis,
        conn,
        _servers: servers,
        addrs,
        replica,
    };
    wait_for_rows(&f.conn, members, Duration::from_secs(180)).await;
    f.wait_cycles(3.0).await;

    // Idle: nothing changes.
    let idle = idle_window(&mut f, &label).await;

    // Changed cycles: add a unit, remove it, drop a member, list it again.
    let mut scripts = Vec::new();
    let mut bytes = Vec::new();
    let mut script_ms = Vec::new();
    let mut ping_failures = 0.0;
    let mut evals = 0.0;
    for round in 0..change_rounds {
        let extra = format!("unit-extra-{round}");
        let member = f.addrs[round % f.addrs.len()].clone();
        let changes: [(&str, &str, &str, &str); 4] = [
            ("RPUSH", UNITS, "", &extra),
            ("LREM", UNITS, "0", &extra),
            ("LREM", SERVICES, "0", &member),
            ("RPUSH", SERVICES, "", &member),
        ];
        for (cmd, key, count, value) in changes {
            let g0 = generation(&mut f.conn).await;
            // Snapshots right after a cycle ended: none is half counted.
            f.wait_cycles(1.0).await;
            let a = f.snap().await;
            let mut c = redis::cmd(cmd);
            c.arg(key);
            if !count.is_empty() {
                c.arg(count);
            }
            c.arg(value);
            let _: i64 = c.query_async(&mut f.conn).await.unwrap();
            let conn = f.conn.clone();
            let ok = wait_until(Duration::from_secs(20), Duration::from_millis(1), || {
                let mut c = conn.clone();
                async move { generation(&mut c).await > g0 }
            })
            .await;
            assert!(ok, "no table write after {cmd} {key} {value}");
            // Two more cycles would show any follow-up write.
            f.wait_cycles(2.0).await;
            let b = f.snap().await;
            let d = delta(&a, &b);
            evals += d.evals;
            scripts.push(d.commits);
            // Idle traffic in the window (renewals, cycle reads) is a few hundred bytes.
            bytes.push(d.net_in);
            script_ms.push(d.commit_usec / 1e3);
            ping_failures += d.ping_failures;
        }
    }
    if change_rounds > 0 {
        report(
            &format!("redis: commit scripts per change, {label}"),
            "scripts",
            &scripts,
            Target::max(1.0),
        );
        report(
            &format!("redis: bytes sent to Redis per change, {label}"),
            "bytes",
            &bytes,
            Target::none(),
        );
        report(
            &format!("redis: script time in Redis per change, {label}"),
            "ms",
            &script_ms,
            Target::none(),
        );
        note(&format!(
            "{label}: table size (member + row bytes) {:.0} bytes; every change rewrites the whole hash; \
             {ping_failures} ping failures during the change windows",
            f.table_bytes().await
        ));
        note(&format!(
            "{label}: {evals} plain EVAL calls during the change windows"
        ));
    }

    // The ping round's share: the same members, 10 units.
    if units > 10 {
        let g0 = generation(&mut f.conn).await;
        let _: () = redis::cmd("LTRIM")
            .arg(UNITS)
            .arg(0)
            .arg(9)
            .query_async(&mut f.conn)
            .await
            .unwrap();
        let conn = f.conn.clone();
        let ok = wait_until(Duration::from_secs(20), Duration::from_millis(5), || {
            let mut c = conn.clone();
            async move { generation(&mut c).await > g0 }
        })
        .await;
        assert!(ok, "no table write after LTRIM");
        f.wait_cycles(3.0).await;
        let base = idle_window(&mut f, &format!("{members} x 10 (same members)")).await;
        report_one(
            &format!("redis: idle holder CPU per cycle beyond the ping round, {label}"),
            "ms",
            idle.cpu_ms - base.cpu_ms,
            Target::none(),
        );
    }
}

/// What one idle window measured, per cycle.
struct Idle {
    cpu_ms: f64,
}

/// An idle window of [`IDLE_WINDOW`]: Redis cost and holder CPU per cycle.
async fn idle_window(f: &mut Fleet, label: &str) -> Idle {
    // Idle means no handoff under way either: units still in transit (after
    // a change, until `-handoff-delay` releases them) end in one more write.
    let conn = f.conn.clone();
    let settled = wait_until(Duration::from_secs(120), Duration::from_millis(20), || {
        let mut c = conn.clone();
        async move {
            let n: u64 = redis::cmd("HLEN")
                .arg(distributor::core::keys::Keys::new(TABLE).transit)
                .query_async(&mut c)
                .await
                .unwrap_or(1);
            n == 0
        }
    })
    .await;
    assert!(settled, "units stayed in transit");
    f.wait_cycles(2.0).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Snapshots right after a cycle ended: none is half counted.
    f.wait_cycles(1.0).await;
    let cpu0 = f.replica.proc.cpu();
    let a = f.snap().await;
    note(&format!(
        "{label}: idle window starts, holder pid {}",
        f.replica.proc.pid
    ));
    tokio::time::sleep(idle_window_length()).await;
    f.wait_cycles(1.0).await;
    let b = f.snap().await;
    let cpu = f.replica.proc.cpu() - cpu0;
    let d = delta(&a, &b);
    let per = |x: f64| x / d.cycles;
    note(&format!(
        "{label} idle window: {:.1} s, {} cycles, {} renewals, {} census steps, {} read events, \
         {} key writes (dirty), {} commit scripts, {} lists read, {} lists known unchanged, \
         {} plain EVAL calls",
        d.secs,
        d.cycles,
        d.renewals,
        d.census,
        d.reads,
        d.dirty,
        d.commits,
        d.lists_read,
        d.lists_cached,
        d.evals
    ));
    report_one(
        &format!("redis: idle requests per cycle, {label}"),
        "req",
        per(d.requests),
        Target::none(),
    );
    report_one(
        &format!("redis: idle lists read (LRANGE) per cycle, {label}"),
        "lists",
        per(d.read_pipelines * 2.0),
        Target::max(0.0),
    );
    report_one(
        &format!("redis: idle read events per cycle, all-in, {label}"),
        "RT",
        per(d.reads),
        Target::none(),
    );
    let cycle_writes = d.dirty - d.renewals - 4.0 * d.census;
    report_one(
        &format!("redis: idle key writes per cycle, by cycles, {label}"),
        "writes",
        per(cycle_writes),
        Target::max(0.0),
    );
    report_one(
        &format!("redis: idle key writes per second, lease+census, {label}"),
        "writes/s",
        d.dirty / d.secs,
        Target::none(),
    );
    report_one(
        &format!("redis: idle bytes read from Redis per cycle, {label}"),
        "bytes",
        per(d.net_out),
        Target::none(),
    );
    let cpu_ms = ms(cpu) / d.cycles;
    report_one(
        &format!("redis: idle holder CPU per cycle, {label}"),
        "ms",
        cpu_ms,
        Target::none(),
    );
    note(&format!(
        "{label} idle: mean cycle (read + ping, until the write decision) {:.1} ms; \
         {} ping failures in the window",
        d.cycle_seconds / d.cycles * 1e3,
        d.ping_failures
    ));
    // Pings whose result a cycle took in (answered within its 50 ms grace, or
    // carried from the one before), per cycle; each member once would be `members`.
    report_one(
        &format!("redis: idle ping results per cycle, {label}"),
        "pings",
        per(d.pings_ok + d.ping_failures),
        Target::none(),
    );
    Idle { cpu_ms }
}
