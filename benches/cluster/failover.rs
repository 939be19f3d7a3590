//! Target 4: failover between `distributor` processes. Three replicas, ten
//! members, 1,000 units, poll 500 ms.
//!
//! "New holder's first cycle" is the first increment of a standby's
//! `distributor_cycles_total{outcome="ok"}` after the signal, i.e. the moment
//! a new holder has read the inputs, acted on the pings answered within the
//! cycle's 50 ms grace (slower ones carry over to the next cycle) and written
//! the table if it changed (the counter moves after the cycle's write; with
//! unchanged inputs nothing is written). The bench
//! polls `GET {table}:epoch` and both standbys' `/metrics` every ~2 ms, so
//! figures are late by at most one poll. The time to acquisition (epoch + 1)
//! is reported beside it.
//!
//! Then, with 10,000 members (four ping-server processes) and two replicas,
//! SIGKILL and SIGTERM at ping timeouts of 500 ms and 1 s: the time to the new
//! holder's first cycle, how many pings of its first seconds fail, and whether
//! the table loses rows or is rewritten (it should not: same members, same
//! units). `BENCH_FAILOVER_LARGE_TRIALS=k,t` sets how many SIGKILL and SIGTERM
//! trials run (default 3,2), `BENCH_FAILOVER_LARGE_UNITS` how many units
//! (default 100,000). A standby's first warm round starts five polls
//! after it starts, and each trial respawns the replica it stopped, so by
//! default most of these handovers go to a standby a few seconds old whose
//! channels are still cold; `BENCH_FAILOVER_STANDBY_AGE_MS` (e.g. 15000) makes
//! each trial wait until the standby has run that long. Each trial notes the
//! standby's age and the signal's wall-clock time (to line up with the
//! replicas' logs and traces).
//!
//! SIGKILL lands at a random point of the renewal period, so the lease has
//! between TTL - renew interval and TTL left; standbys do not wait for it:
//! Redis closes the killed holder's connections at once, and a standby that
//! checks the holder's lease connection (every 50 ms, `CLIENT LIST ID`) takes
//! the lease over as soon as it is gone. Signals are sent with kill(2) right
//! after the clock starts.

use std::time::Duration;

use std::time::Instant;

use crate::common::*;

const POLL: Duration = Duration::from_millis(500);
const PING_TIMEOUT: Duration = Duration::from_millis(500);
const REPLICAS: usize = 3;
const KILL_TRIALS: usize = 10;
const TERM_TRIALS: usize = 8;

struct Cluster {
    redis: RedisServer,
    conn: redis::aio::MultiplexedConnection,
    replicas: Vec<Replica>,
    /// When each of `replicas` was started.
    started: Vec<Instant>,
    timing: Timing,
    /// Replica names are `{prefix}-{n}`, n counting every process started.
    prefix: String,
    spawned: usize,
    /// The daemon binary replicas run (this build unless told otherwise).
    bin: std::path::PathBuf,
}

impl Cluster {
    /// `replicas` replica processes on `redis`.
    fn start(
        redis: RedisServer,
        conn: redis::aio::MultiplexedConnection,
        timing: Timing,
        prefix: String,
        replicas: usize,
    ) -> Cluster {
        Cluster::start_of(distributor_bin(), redis, conn, timing, prefix, replicas)
    }

    /// [`Cluster::start`], the replicas running the daemon binary `bin`.
    fn start_of(
        bin: std::path::PathBuf,
        redis: RedisServer,
        conn: redis::aio::MultiplexedConnection,
        timing: Timing,
        prefix: String,
        replicas: usize,
    ) -> Cluster {
        let mut c = Cluster {
            redis,
            conn,
            replicas: Vec::new(),
            started: Vec::new(),
            timing,
            prefix,
            spawned: 0,
            bin,
        };
        for _ in 0..replicas {
            let r = c.spawn();
            c.replicas.push(r);
            c.started.push(Instant::now());
        }
        c
    }

    fn spawn(&mut self) -> Replica {
        self.spawned += 1;
        let name = format!("{}-{}", self.prefix, self.spawned);
        spawn_replica_of(&self.bin, &self.redis.url(), &name, &self.timing, &[])
    }

    fn respawn(&mut self, i: usize) {
        self.replicas[i] = self.spawn();
        self.started[i] = Instant::now();
    }

    async fn holder(&mut self) -> Option<usize> {
        let h: Option<String> = redis::cmd("HGET")
            .arg(&keys().meta)
            .arg("holder")
            .query_async(&mut self.conn)
            .await
            .ok()?;
        let h = h?;
        self.replicas.iter().position(|r| r.name == h)
    }

    async fn epoch(&mut self) -> u64 {
        let e: Option<u64> = redis::cmd("GET")
            .arg(&keys().epoch)
            .query_async(&mut self.conn)
            .await
            .unwrap_or(None);
        e.unwrap_or(0)
    }

    /// Waits for a holder that has cycled, and for every replica's /metrics.
    async fn settled(&mut self) -> usize {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            assert!(Instant::now() < deadline, "no settled holder");
            if let Some(h) = self.holder().await
                && cycles_ok(self.replicas[h].http_port)
                    .await
                    .is_some_and(|c| c >= 1.0)
            {
                let mut all_up = true;
                for r in &self.replicas {
                    all_up &= cycles_ok(r.http_port).await.is_some();
                }
                if all_up {
                    return h;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

pub async fn run() {
    section("failover between distributor processes (target 4)");
    let fast = Timing {
        ttl: Duration::from_secs(1),
        renew_interval: Duration::from_millis(200),
        renew_deadline: Duration::from_millis(700),
        retry_interval: Duration::from_millis(300),
        ..Timing::defaults(POLL, PING_TIMEOUT)
    };
    let default = Timing::defaults(POLL, PING_TIMEOUT);
    // BENCH_FAILOVER_LARGE_ONLY=1: only the 10,000-member handovers, at the
    // default ping timeout.
    let large_only = std::env::var("BENCH_FAILOVER_LARGE_ONLY").as_deref() == Ok("1");
    if !large_only {
        for timing in [fast, default] {
            setting(timing).await;
        }
    }
    if enough_fds("failover at 10,000 members") {
        let timeouts: &[Duration] = if large_only {
            &[Duration::from_secs(1)]
        } else {
            &[Duration::from_millis(500), Duration::from_secs(1)]
        };
        for timeout in timeouts {
            large_fleet(*timeout).await;
        }
    }
}

/// SIGTERM handover with 10,000 members: a standby has no gRPC connections, so
/// the new holder's first cycle opens 10,000 of them. Does it still answer
/// within the target, and does it mistake slow connects for dead members (and
/// rewrite the table without them, which the lease design means to avoid)?
async fn large_fleet(ping_timeout: Duration) {
    const MEMBERS: usize = 10_000;
    let redis = redis_server();
    let mut conn = redis.conn().await;
    // BENCH_FAILOVER_LARGE_UNITS: units of the 10,000-member fleet (default
    // 100,000); the first cycle's reads and solve grow with them.
    let unit_count: usize = std::env::var("BENCH_FAILOVER_LARGE_UNITS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    set_list(&mut conn, UNITS, &unit_names(unit_count)).await;
    let (servers, addrs) = spawn_server_fleet(MEMBERS, 4);
    set_list(&mut conn, SERVICES, &addrs).await;
    let timing = Timing::defaults(Duration::from_secs(1), ping_timeout);
    let label = format!(
        "10,000 members x {unit_count} units, poll 1 s, ping timeout {} ms",
        ping_timeout.as_millis()
    );
    note(&label);
    let prefix = format!("big-{}", ping_timeout.as_millis());
    let t0 = Instant::now();
    let mut c = Cluster::start(redis, conn, timing, prefix, 2);
    cold_start(&mut c, t0, MEMBERS, ping_timeout).await;
    // BENCH_FAILOVER_LARGE_TRIALS=k,t: SIGKILL and SIGTERM trials (default 3,2).
    let trials: Vec<usize> = std::env::var("BENCH_FAILOVER_LARGE_TRIALS")
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .filter(|v: &Vec<usize>| v.len() == 2)
        .unwrap_or_else(|| vec![3, 2]);
    for (signal, trials) in [("SIGKILL", trials[0]), ("SIGTERM", trials[1])] {
        if trials > 0 {
            large_fleet_trials(&mut c, signal, trials, ping_timeout).await;
        }
    }
    drop(c);
    drop(servers);
}

/// A fresh fleet coming up (no table, no liveness history): the first
/// holder's first table, the most units in transit on the way, and when every
/// member has a row with nothing in transit. A first cycle that acted on the
/// few members answering within its 50 ms grace placed every unit on them and
/// then moved almost all of them; the bench's members never acknowledge, so
/// those moves waited `-handoff-delay` (10 s). n = 1 per run (the fleet comes
/// up once); polled every 20 ms.
async fn cold_start(c: &mut Cluster, t0: Instant, members: usize, ping_timeout: Duration) {
    let mut first: Option<(f64, usize)> = None;
    let mut most_in_transit = 0u64;
    let settled = loop {
        if t0.elapsed() >= Duration::from_secs(120) {
            break None;
        }
        let g = generation(&mut c.conn).await;
        let n = table_rows(&mut c.conn).await;
        let transit = in_transit(&mut c.conn).await.unwrap_or(0);
        most_in_transit = most_in_transit.max(transit);
        if g >= 1 && first.is_none() {
            first = Some((ms(t0.elapsed()), n));
        }
        if n == members && transit == 0 {
            break Some((ms(t0.elapsed()), g));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let t = ping_timeout.as_millis();
    let name = |what: &str| format!("cold start, 10,000 members, timeout {t} ms: {what}");
    let Some((first_at, first_rows)) = first else {
        note(&name("NOT MEASURED, no table within 2 min"));
        return;
    };
    report_one(
        &name("replicas started -> first table written"),
        "ms",
        first_at,
        Target::none(),
    );
    report_one(
        &name("rows in the first table"),
        "rows",
        first_rows as f64,
        Target::none(),
    );
    report_one(
        &name("most units in transit while coming up"),
        "units",
        most_in_transit as f64,
        Target::max(0.0),
    );
    match settled {
        Some((at, generation)) => {
            report_one(
                &name("replicas started -> every member a row, nothing in transit"),
                "ms",
                at,
                Target::none(),
            );
            report_one(
                &name("table generations written by then"),
                "writes",
                generation as f64,
                Target::none(),
            );
        }
        None => note(&name("NOT MEASURED, not settled within 2 min")),
    }
}

async fn large_fleet_trials(c: &mut Cluster, signal: &str, trials: usize, ping_timeout: Duration) {
    const MEMBERS: usize = 10_000;
    let mut to_cycle = Vec::new();
    let mut to_acquire = Vec::new();
    let mut own = Vec::new();
    let mut dropped = Vec::new();
    let mut writes = Vec::new();
    let mut failures = Vec::new();
    let mut solves = Vec::new();
    let mut list_reads = Vec::new();
    for _ in 0..trials {
        if let Err(why) = stable(c, MEMBERS).await {
            note(&format!(
                "failover: {signal}, 10,000 members, timeout {} ms: NOT MEASURED, {why}",
                ping_timeout.as_millis()
            ));
            return;
        }
        let h = c.settled().await;
        let s = 1 - h;
        // BENCH_FAILOVER_STANDBY_AGE_MS: wait until the standby has run that
        // long (its first warm round starts 5 polls after it started), so
        // that the handover is to a standby with warm channels. Default 0: a
        // standby respawned by the last trial may not have warmed yet.
        let min_age = std::env::var("BENCH_FAILOVER_STANDBY_AGE_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(Duration::ZERO, Duration::from_millis);
        let age = c.started[s].elapsed();
        if age < min_age {
            tokio::time::sleep(min_age - age).await;
        }
        note(&format!(
            "failover: {signal}: standby {} has run {} ms",
            c.replicas[s].name,
            c.started[s].elapsed().as_millis()
        ));
        let port = c.replicas[s].http_port;
        let samples = scrape(port).await.unwrap_or_default();
        let solved0 = metric(
            &samples,
            "distributor_solves_total",
            &[("outcome", "solved")],
        )
        .unwrap_or(0.0);
        let read0 = metric(
            &samples,
            "distributor_list_reads_total",
            &[("outcome", "read")],
        )
        .unwrap_or(0.0);
        let cycles0 =
            metric(&samples, "distributor_cycles_total", &[("outcome", "ok")]).unwrap_or(0.0);
        let fails0 = metric_sum(&samples, "distributor_ping_failures_total");
        let writes0 = metric(&samples, "distributor_table_writes_total", &[]).unwrap_or(0.0);
        let hist0 = cycle_histogram(port).await.unwrap_or_default();
        let e0 = c.epoch().await;
        let mut acquired = None;
        let wall0 = std::time::SystemTime::now();
        let t0 = Instant::now();
        if signal == "SIGKILL" {
            c.replicas[h].proc.kill();
        } else {
            c.replicas[h].proc.signal(libc::SIGTERM);
        }
        let first = loop {
            assert!(t0.elapsed() < Duration::from_secs(30), "no new holder");
            if acquired.is_none() && c.epoch().await > e0 {
                acquired = Some(ms(t0.elapsed()));
            }
            if cycles_ok(port).await.is_some_and(|n| n > cycles0) {
                break ms(t0.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        };
        note(&format!(
            "failover: {signal} sent at unix {:.6} s; first cycle after {first:.1} ms",
            wall0
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs_f64()
        ));
        to_cycle.push(first);
        to_acquire.push(acquired.unwrap_or(first));
        // The new holder's own measure of its first cycle (read, ping, solve, write).
        if let Some((sum, count)) = cycle_histogram(port).await
            && count > hist0.1
        {
            own.push((sum - hist0.0) / (count - hist0.1) * 1e3);
        }
        // Watch the table for a few cycles: rows should never go missing.
        let mut fewest = MEMBERS;
        let until = Instant::now() + Duration::from_secs(4);
        while Instant::now() < until {
            let n = table_rows(&mut c.conn).await;
            fewest = fewest.min(n);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let samples = scrape(port).await.unwrap_or_default();
        dropped.push((MEMBERS - fewest) as f64);
        writes
            .push(metric(&samples, "distributor_table_writes_total", &[]).unwrap_or(0.0) - writes0);
        failures.push(metric_sum(&samples, "distributor_ping_failures_total") - fails0);
        // What the new holder solved and read in full in its first 4 s (its
        // first cycle, and idle ones after it): 0 and 0 when it started from
        // its warm view with nothing changed since.
        solves.push(
            metric(
                &samples,
                "distributor_solves_total",
                &[("outcome", "solved")],
            )
            .unwrap_or(0.0)
                - solved0,
        );
        list_reads.push(
            metric(
                &samples,
                "distributor_list_reads_total",
                &[("outcome", "read")],
            )
            .unwrap_or(0.0)
                - read0,
        );
        let _ = c.replicas[h].proc.wait();
        c.respawn(h);
    }
    let t = ping_timeout.as_millis();
    report(
        &format!("failover: {signal} -> first cycle, 10,000 members, timeout {t} ms"),
        "ms",
        &to_cycle,
        Target::max(100.0),
    );
    report(
        &format!("failover: {signal} -> lease acquired (epoch+1), 10,000 members, timeout {t} ms"),
        "ms",
        &to_acquire,
        Target::none(),
    );
    report(
        &format!(
            "failover: {signal}, new holder's first cycle duration, 10,000 members, timeout {t} ms"
        ),
        "ms",
        &own,
        Target::none(),
    );
    report(
        &format!(
            "failover: {signal}, 10,000 members, timeout {t} ms: failed pings, new holder's first 4 s"
        ),
        "pings",
        &failures,
        Target::none(),
    );
    report(
        &format!(
            "failover: {signal}, 10,000 members, timeout {t} ms: solves by the new holder, first 4 s"
        ),
        "solves",
        &solves,
        Target::none(),
    );
    report(
        &format!(
            "failover: {signal}, 10,000 members, timeout {t} ms: lists read in full by the new holder, first 4 s"
        ),
        "lists",
        &list_reads,
        Target::none(),
    );
    report(
        &format!("failover: {signal}, 10,000 members, timeout {t} ms: rows missing from the table"),
        "rows",
        &dropped,
        Target::max(0.0),
    );
    report(
        &format!(
            "failover: {signal}, 10,000 members, timeout {t} ms: table writes by the new holder"
        ),
        "writes",
        &writes,
        Target::max(0.0),
    );
}

/// Waits until the table lists every member and has not changed for 3 s; why
/// not, after two minutes (what the holder's pings did meanwhile).
async fn stable(c: &mut Cluster, members: usize) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut last = (0, 0);
    let mut since = Instant::now();
    loop {
        if Instant::now() >= deadline {
            let mut fails = 0.0;
            let mut oks = 0.0;
            for r in &c.replicas {
                let samples = scrape(r.http_port).await.unwrap_or_default();
                fails += metric_sum(&samples, "distributor_ping_failures_total");
                oks +=
                    metric(&samples, "distributor_ping_duration_seconds_count", &[]).unwrap_or(0.0);
            }
            return Err(format!(
                "the table never settled in 2 min ({} of {members} rows; {fails} failed and {oks} answered pings so far)",
                last.0
            ));
        }
        let n = table_rows(&mut c.conn).await;
        let g = generation(&mut c.conn).await;
        // No handoff under way either: the bench's members never
        // acknowledge, so units that moved while the fleet came up (a first
        // cycle hears from only some of 10,000 members within its grace) stay
        // in transit for `-handoff-delay`; a new holder would inherit them all.
        // (A failed read never passes for "nothing in transit".)
        let transit = in_transit(&mut c.conn).await.unwrap_or(1);
        if (n, g) != last {
            last = (n, g);
            since = Instant::now();
        } else if n == members && transit == 0 && since.elapsed() >= Duration::from_secs(3) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn setting(timing: Timing) {
    let redis = redis_server();
    let mut conn = redis.conn().await;
    set_list(&mut conn, UNITS, &unit_names(1_000)).await;
    let (servers, addrs) = spawn_servers(10);
    set_list(&mut conn, SERVICES, &addrs).await;
    let prefix = format!("fo-{}", timing.ttl.as_millis());
    let mut c = Cluster::start(redis, conn, timing, prefix, REPLICAS);
    let ttl = ms(timing.ttl);
    let label = format!(
        "TTL {} ms (renew {} ms, deadline {} ms, retry {} ms)",
        ttl,
        timing.renew_interval.as_millis(),
        timing.renew_deadline.as_millis(),
        timing.retry_interval.as_millis()
    );
    note(&label);
    let mut rng = Rng::new(0xfa11 ^ timing.ttl.as_millis() as u64 ^ seed().rotate_left(32));

    for (signal, trials) in [("SIGKILL", KILL_TRIALS), ("SIGTERM", TERM_TRIALS)] {
        let mut to_cycle = Vec::new();
        let mut to_acquire = Vec::new();
        let mut own = Vec::new();
        for _ in 0..trials {
            let h = c.settled().await;
            let standbys: Vec<usize> = (0..REPLICAS).filter(|&i| i != h).collect();
            let mut before = Vec::new();
            let mut hist = Vec::new();
            for &s in &standbys {
                before.push(cycles_ok(c.replicas[s].http_port).await.unwrap_or(0.0));
                hist.push(
                    cycle_histogram(c.replicas[s].http_port)
                        .await
                        .unwrap_or_default(),
                );
            }
            let e0 = c.epoch().await;
            tokio::time::sleep(rng.below(timing.renew_interval)).await;
            let t0 = Instant::now();
            if signal == "SIGKILL" {
                c.replicas[h].proc.kill();
            } else {
                c.replicas[h].proc.signal(libc::SIGTERM);
            }
            let deadline = t0 + timing.ttl + Duration::from_secs(10);
            let mut acquired = None;
            let (first_cycle, winner) = 'watch: loop {
                assert!(Instant::now() < deadline, "no new holder cycled");
                if acquired.is_none() && c.epoch().await > e0 {
                    acquired = Some(ms(t0.elapsed()));
                }
                for (k, &s) in standbys.iter().enumerate() {
                    if cycles_ok(c.replicas[s].http_port)
                        .await
                        .is_some_and(|n| n > before[k])
                    {
                        break 'watch (ms(t0.elapsed()), k);
                    }
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            };
            to_cycle.push(first_cycle);
            // The new holder's own measure of that first cycle (read, ping, solve).
            if let Some((sum, count)) =
                cycle_histogram(c.replicas[standbys[winner]].http_port).await
                && count > hist[winner].1
            {
                own.push((sum - hist[winner].0) / (count - hist[winner].1) * 1e3);
            }
            to_acquire.push(acquired.unwrap_or(first_cycle));
            let exit = c.replicas[h].proc.wait();
            if signal == "SIGTERM" {
                assert!(exit.is_some_and(|s| s.success()), "unclean exit on SIGTERM");
            }
            c.respawn(h);
        }
        // Issue 13: a crashed holder is replaced at the speed of a closed
        // connection (median), and never later than its TTL (max).
        let target = if signal == "SIGKILL" {
            Target::median_max(100.0, ttl + 100.0)
        } else {
            Target::max(100.0)
        };
        report(
            &format!("failover: {signal} -> new holder's first cycle, TTL {ttl} ms"),
            "ms",
            &to_cycle,
            target,
        );
        report(
            &format!("failover: {signal} -> lease acquired (epoch+1), TTL {ttl} ms"),
            "ms",
            &to_acquire,
            Target::none(),
        );
        report(
            &format!("failover: {signal}, new holder's first cycle duration, TTL {ttl} ms"),
            "ms",
            &own,
            Target::none(),
        );
    }
    drop(c);
    drop(servers);
}

/// Lease renewals under an idle 10,000-member fleet (issue 24): one holder
/// pings every member each second at the default flags, a standby beside it,
/// for `BENCH_RENEWALS_SECS` (default 600). Counts, from both replicas'
/// metrics, the renewals that failed or timed out and every lease
/// transition, and from Redis the epoch (a change of holder); the holder's
/// CPU over the run. With `BENCH_REFERENCE_BIN` set, that daemon runs first
/// on the same member servers (a Redis of its own), then this one. Run on
/// its own: `scripts/bench renewals`.
pub async fn renewals() {
    const MEMBERS: usize = 10_000;
    let secs: u64 = std::env::var("BENCH_RENEWALS_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(600);
    section(&format!(
        "lease renewals with 10,000 idle members for {secs} s, default flags (issue 24)"
    ));
    if !enough_fds("renewals") {
        return;
    }
    let (servers, addrs) = spawn_server_fleet(MEMBERS, 4);
    let mut bins = Vec::new();
    if let Some(r) = reference_bin() {
        bins.push(("reference", r));
    }
    bins.push(("this", distributor_bin()));
    for (build, bin) in bins {
        renewals_of(bin, build, secs, &addrs, &servers).await;
    }
    drop(servers);
}

async fn renewals_of(
    bin: std::path::PathBuf,
    build: &str,
    secs: u64,
    addrs: &[String],
    servers: &[Proc],
) {
    let redis = redis_server();
    let mut conn = redis.conn().await;
    set_list(&mut conn, UNITS, &unit_names(100_000)).await;
    set_list(&mut conn, SERVICES, addrs).await;
    let timing = Timing::defaults(Duration::from_secs(1), Duration::from_secs(1));
    let mut c = Cluster::start_of(bin, redis, conn, timing, "renew".into(), 2);
    if let Err(why) = stable(&mut c, addrs.len()).await {
        note(&format!("renewals ({build}): NOT MEASURED, {why}"));
        return;
    }
    let h = c.settled().await;
    let transitions = |samples: &[crate::support::Sample], t: &str| {
        metric(
            samples,
            "distributor_lease_transitions_total",
            &[("transition", t)],
        )
        .unwrap_or(0.0)
    };
    let counts = |c: &Cluster| {
        let ports: Vec<u16> = c.replicas.iter().map(|r| r.http_port).collect();
        async move {
            let mut sum = [0.0; 5];
            for port in ports {
                let s = scrape(port).await.unwrap_or_default();
                sum[0] += transitions(&s, "renew_failed");
                sum[1] += transitions(&s, "lapsed") + transitions(&s, "lost");
                sum[2] += metric_sum(&s, "distributor_ping_failures_total");
                sum[3] += metric_sum(&s, "distributor_ping_beats_total");
                sum[4] += metric_sum(&s, "distributor_cycles_total");
            }
            sum
        }
    };
    let before = counts(&c).await;
    let e0 = c.epoch().await;
    let cpu0 = c.replicas[h].proc.cpu();
    let servers0: Duration = servers.iter().map(Proc::cpu).sum();
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    let wall = t0.elapsed();
    let cpu = c.replicas[h].proc.cpu() - cpu0;
    let servers_cpu = servers.iter().map(Proc::cpu).sum::<Duration>() - servers0;
    let after = counts(&c).await;
    let e1 = c.epoch().await;
    let label = format!("{build}, 10,000 idle members, {secs} s");
    report_one(
        &format!("renewals: failed or timed out, {label}"),
        "renewals",
        after[0] - before[0],
        Target::max(0.0),
    );
    report_one(
        &format!("renewals: leases lost or lapsed, {label}"),
        "leases",
        after[1] - before[1],
        Target::max(0.0),
    );
    report_one(
        &format!("renewals: holder changes (epoch), {label}"),
        "changes",
        (e1 - e0) as f64,
        Target::max(0.0),
    );
    report_one(
        &format!("renewals: failed pings, {label}"),
        "pings",
        after[2] - before[2],
        Target::none(),
    );
    report_one(
        &format!("renewals: holder CPU, % of one core, {label}"),
        "%",
        cpu.as_secs_f64() / wall.as_secs_f64() * 100.0,
        Target::none(),
    );
    // Cycles, not wall / poll: a cycle starts a poll interval after the
    // last one ended, so at 10,000 members there are fewer than one a second.
    let cycles = (after[4] - before[4]).max(1.0);
    let per = |d: Duration| d.as_secs_f64() * 1e6 / (addrs.len() as f64 * cycles);
    report_one(
        &format!("renewals: holder cycles, {label}"),
        "cycles",
        cycles,
        Target::none(),
    );
    report_one(
        &format!("renewals: holder CPU per member per cycle, {label}"),
        "us",
        per(cpu),
        Target::none(),
    );
    report_one(
        &format!("renewals: members' servers' CPU per member per cycle, {label}"),
        "us",
        per(servers_cpu),
        Target::none(),
    );
    report_one(
        &format!("renewals: holder resident memory at the end, {label}"),
        "MiB",
        c.replicas[h].proc.rss_mib(),
        Target::none(),
    );
    note(&format!(
        "renewals ({build}): {:.0} of the pings were beats",
        after[3] - before[3]
    ));
    drop(c);
}
