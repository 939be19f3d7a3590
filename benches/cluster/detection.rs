//! Target 3: detection latency at the daemon's default flags (poll 1 s, ping
//! timeout 1 s), measured from the signal to the moment the matching table
//! (`HEXISTS`, polled every millisecond) no longer lists the worker.
//!
//! - killed: SIGKILL of a real `Member` process: its kernel closes the
//!   holder's connection, the holder pings it at once (refused) and cycles
//!   (issue 13: median ≤ 20 ms and max ≤ 100 ms at 10 workers, median
//!   ≤ 50 ms at 1,000);
//! - hung: SIGSTOP of one (the connection stays open, pings time out);
//! - killed while another is hung: SIGKILL of one worker while another one
//!   is SIGSTOPped, i.e. whether one dead worker delays the others' checks.
//!
//! Every trial waits a random 0-500 ms first, so kills land at random points of
//! the holder's cycle. The delays come from a fixed seed (`BENCH_SEED`, default
//! 0), so a repeated run draws the same ones; another seed draws others. Victims are real worker processes (this binary in
//! `member` mode, the `Member` library); the rest of a large fleet are plain
//! ping servers, several per process, listed with `RPUSH`.

use std::time::Duration;

use std::time::Instant;

use crate::common::*;

/// The daemon's defaults (`-poll-interval`, `-ping-timeout`).
const POLL: Duration = Duration::from_secs(1);
const PING_TIMEOUT: Duration = Duration::from_secs(1);
const VICTIMS: usize = 4;

struct Fleet {
    redis: RedisServer,
    conn: redis::aio::MultiplexedConnection,
    _servers: Vec<Proc>,
    /// The members that are never killed, in one process, when
    /// `BENCH_SCALE_MEMBER_HOST=1`, and how many they are.
    host: Option<(Proc, usize)>,
    members: Vec<(Proc, String)>,
    replica: Replica,
}

impl Fleet {
    async fn start(workers: usize, units: usize) -> Fleet {
        Fleet::start_of(&distributor_bin(), workers, units, VICTIMS, &[]).await
    }

    /// With the holder run from the daemon binary `bin`, `extra` flags for
    /// it (e.g. `-assignment=sticky`), and `members` (at least [`VICTIMS`])
    /// of the workers real `Member` processes, which acknowledge what they
    /// are given; the rest are plain ping servers.
    async fn start_of(
        bin: &std::path::Path,
        workers: usize,
        units: usize,
        members: usize,
        extra: &[&str],
    ) -> Fleet {
        assert!((VICTIMS..=workers).contains(&members));
        let redis = redis_server();
        let mut conn = redis.conn().await;
        set_list(&mut conn, UNITS, &unit_names(units)).await;
        let plain = workers - members;
        let (servers, addrs) = if plain > 0 {
            spawn_server_fleet(plain, plain.div_ceil(500))
        } else {
            (Vec::new(), Vec::new())
        };
        if !addrs.is_empty() {
            set_list(&mut conn, SERVICES, &addrs).await;
        }
        // The victims are processes of their own (each is SIGKILLed); the
        // rest share one with `BENCH_SCALE_MEMBER_HOST=1`.
        let (host, own) = if member_host() && members > VICTIMS {
            let (host, ids) = spawn_member_host(&redis.url(), members - VICTIMS);
            (Some((host, ids.len())), VICTIMS)
        } else {
            (None, members)
        };
        let members = (0..own).map(|_| spawn_member(&redis.url())).collect();
        let replica = spawn_replica_of(
            bin,
            &redis.url(),
            &format!("detect-{workers}"),
            &Timing::defaults(POLL, PING_TIMEOUT),
            extra,
        );
        let fleet = Fleet {
            redis,
            conn,
            _servers: servers,
            host,
            members,
            replica,
        };
        wait_for_rows(&fleet.conn, workers, Duration::from_secs(60)).await;
        fleet
    }

    /// Waits until member `i` has its row.
    async fn present(&mut self, i: usize) {
        let id = self.members[i].1.clone();
        let c = self.conn.clone();
        let ok = wait_until(Duration::from_secs(20), Duration::from_millis(5), || {
            let (mut c, id) = (c.clone(), id.clone());
            async move { hexists(&mut c, &id).await }
        })
        .await;
        assert!(ok, "worker {id} did not get a row");
    }

    /// Milliseconds from `t0` until member `i` has no row (polled every 1 ms).
    async fn gone_after(&mut self, i: usize, t0: Instant) -> f64 {
        let id = self.members[i].1.clone();
        let deadline = t0 + Duration::from_secs(20);
        loop {
            if !hexists(&mut self.conn, &id).await {
                return ms(t0.elapsed());
            }
            assert!(Instant::now() < deadline, "worker {id} was never dropped");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Milliseconds from `t0` until no unit is in transit from member `i`
    /// (polled every 1 ms): its units are owned again. Call once its row
    /// is gone. The transit hash is read only when the table's generation
    /// moved (units are owned again only by a table write, which numbers a
    /// new generation): reading a transit hash of thousands of entries every
    /// millisecond would load the Redis the holder writes to, and slow what
    /// it measures.
    async fn owned_after(&mut self, i: usize, t0: Instant) -> f64 {
        let id = self.members[i].1.clone();
        let deadline = t0 + Duration::from_secs(20);
        let mut checked: Option<Option<String>> = None;
        loop {
            let generation: Option<String> = redis::cmd("HGET")
                .arg(keys().meta)
                .arg("generation")
                .query_async(&mut self.conn)
                .await
                .unwrap();
            if checked.as_ref() != Some(&generation) {
                let transit: Vec<String> = redis::cmd("HVALS")
                    .arg(keys().transit)
                    .query_async(&mut self.conn)
                    .await
                    .unwrap();
                let owing = transit.iter().any(|v| {
                    v.split(' ')
                        .nth(3)
                        .is_some_and(|from| from.split(',').any(|m| m == id))
                });
                if !owing {
                    return ms(t0.elapsed());
                }
                checked = Some(generation);
            }
            assert!(Instant::now() < deadline, "worker {id}'s units never moved");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Replaces killed member `i` with a fresh process (and unlists the dead one).
    async fn replace(&mut self, i: usize) {
        let dead = self.members[i].1.clone();
        let _: i64 = redis::cmd("LREM")
            .arg(SERVICES)
            .arg(0)
            .arg(&dead)
            .query_async(&mut self.conn)
            .await
            .unwrap();
        self.members[i] = spawn_member(&self.redis.url());
        self.present(i).await;
    }

    /// `trials` SIGKILLs of the victims in turn, each at a random point of
    /// the poll (from `rng`), each victim replaced after: milliseconds to
    /// its row gone and to its units owned again, and the table bytes the
    /// holder sent in between as a percentage of the table (where its
    /// metrics count them).
    async fn kills(&mut self, rng: &mut Rng, trials: usize) -> Kills {
        let mut k = Kills::default();
        for trial in 0..trials {
            let i = trial % VICTIMS;
            self.present(i).await;
            tokio::time::sleep(rng.below(POLL)).await;
            let sent = self.table_bytes_sent().await;
            let t0 = Instant::now();
            self.members[i].0.kill();
            k.gone.push(self.gone_after(i, t0).await);
            k.owned.push(self.owned_after(i, t0).await);
            if let (Some((b0, _)), Some((b1, size))) = (sent, self.table_bytes_sent().await)
                && size > 0.0
            {
                k.bytes_percent.push((b1 - b0) / size * 100.0);
            }
            self.replace(i).await;
        }
        k
    }

    /// The table bytes the holder sent so far (both kinds of write) and the
    /// size of its last table, if its metrics count them.
    async fn table_bytes_sent(&self) -> Option<(f64, f64)> {
        let m = scrape(self.replica.http_port).await?;
        let sent: Option<f64> = ["rows", "whole"]
            .iter()
            .map(|kind| metric(&m, "distributor_table_write_bytes_total", &[("kind", kind)]))
            .sum();
        Some((sent?, metric(&m, "distributor_table_size_bytes", &[])?))
    }

    async fn cycle_histogram(&self) -> Option<(f64, f64)> {
        cycle_histogram(self.replica.http_port).await
    }

    /// Mean duration of the cycles of a quiet 3 s window.
    async fn idle_cycle_ms(&self) -> Option<f64> {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let (s0, c0) = self.cycle_histogram().await?;
        tokio::time::sleep(Duration::from_secs(3)).await;
        let (s1, c1) = self.cycle_histogram().await?;
        (c1 > c0).then(|| (s1 - s0) / (c1 - c0) * 1e3)
    }
}

/// What [`Fleet::kills`] measured, per trial.
#[derive(Default)]
struct Kills {
    gone: Vec<f64>,
    owned: Vec<f64>,
    bytes_percent: Vec<f64>,
}

pub async fn run() {
    section("detection latency at the default flags: poll 1 s, ping timeout 1 s (target 3)");
    // (workers, units, killed trials, hung trials, killed-while-hung trials,
    // killed target median, max)
    for (workers, units, killed, hung, mixed, target) in [
        (10, 1_000, 25, 6, 6, Target::median_max(20.0, 100.0)),
        (1_000, 10_000, 25, 6, 6, Target::median_max(50.0, 300.0)),
        (1_000, 100_000, 12, 0, 0, Target::median_max(50.0, 300.0)),
    ] {
        scenario(workers, units, killed, hung, mixed, target).await;
    }
}

async fn scenario(
    workers: usize,
    units: usize,
    killed: usize,
    hung: usize,
    mixed: usize,
    target: Target,
) {
    let mut f = Fleet::start(workers, units).await;
    let mut rng = Rng::new(0x5eed ^ workers as u64 ^ units as u64 ^ seed().rotate_left(32));
    let label = format!("{workers} workers x {units} units");
    if let Some(c) = f.idle_cycle_ms().await {
        note(&format!(
            "idle holder cycle (read + ping, no solve or write), {label}: mean {c:.1} ms"
        ));
    }

    // Killed: connection refused. Its row goes in the write that revokes its
    // units; they are owned again once a ping on a connection opened after
    // that write is refused too (the next write).
    let k = f.kills(&mut rng, killed).await;
    report(&format!("detect: SIGKILL, {label}"), "ms", &k.gone, target);
    report(
        &format!("detect: SIGKILL to its units owned again, {label}"),
        "ms",
        &k.owned,
        Target::none(),
    );

    // Hung: SIGSTOP, the connection stays up and pings time out.
    let mut lat = Vec::new();
    for trial in 0..hung {
        let i = trial % VICTIMS;
        f.present(i).await;
        tokio::time::sleep(rng.below(POLL)).await;
        let t0 = Instant::now();
        f.members[i].0.signal(libc::SIGSTOP);
        lat.push(f.gone_after(i, t0).await);
        f.members[i].0.signal(libc::SIGCONT);
    }
    let bound = ms(POLL + PING_TIMEOUT) + 100.0;
    if hung > 0 {
        report(
            &format!("detect: SIGSTOP, {label}"),
            "ms",
            &lat,
            Target::max(bound),
        );
    }

    // Killed while another worker is hung: does one dead worker delay the others?
    let mut lat = Vec::new();
    for trial in 0..mixed {
        let (h, k) = (trial % VICTIMS, (trial + 1) % VICTIMS);
        f.present(h).await;
        f.present(k).await;
        f.members[h].0.signal(libc::SIGSTOP);
        let t = Instant::now();
        f.gone_after(h, t).await;
        tokio::time::sleep(rng.below(POLL)).await;
        let t0 = Instant::now();
        f.members[k].0.kill();
        lat.push(f.gone_after(k, t0).await);
        f.members[h].0.signal(libc::SIGCONT);
        f.replace(k).await;
    }
    if mixed > 0 {
        report(
            &format!("detect: SIGKILL while another is SIGSTOPped, {label}"),
            "ms",
            &lat,
            target,
        );
    }
    let cpu = f.replica.proc.cpu();
    note(&format!(
        "holder CPU over the {label} run: {:.1} s",
        cpu.as_secs_f64()
    ));
}

/// Issue 24's reference: SIGKILL of a worker to its units owned again, at
/// the default flags, in `ring` and `sticky` mode, in the same run. Each
/// mode starts a fleet of its own; kills land at random points of the cycle
/// (seeded as above). With `BENCH_REFERENCE_BIN` set, each case runs with
/// that daemon first, then with this one. Up to 100 workers, every worker
/// is a real `Member` (it acknowledges, so units leave transit as a fleet of
/// members lets them); the 1,000-worker case has 4 and 996 plain servers,
/// whose units wait in transit for their deadline.
/// `BENCH_SCALE_MEMBER_HOST=1`: the members that are never killed run in
/// one process instead of one each.
fn member_host() -> bool {
    std::env::var("BENCH_SCALE_MEMBER_HOST").as_deref() == Ok("1")
}

pub async fn scale() {
    section("kill to units owned again, ring and sticky (issue 24's reference)");
    let mut bins = Vec::new();
    if let Some(r) = reference_bin() {
        bins.push(("reference", r));
    }
    bins.push(("this", distributor_bin()));
    // (workers, units, of which members, trials)
    let cases = [
        (10, 1_000, 10, 25),
        (100, 100_000, 100, 12),
        (1_000, 100_000, VICTIMS, 12),
    ];
    // BENCH_SCALE_ONLY (e.g. `100x100000:sticky`) runs one case alone.
    let only = std::env::var("BENCH_SCALE_ONLY").ok();
    for (workers, units, members, trials) in cases {
        for assignment in ["ring", "sticky"] {
            let case = format!("{workers}x{units}:{assignment}");
            if only.as_ref().is_some_and(|o| *o != case) {
                continue;
            }
            for (build, bin) in &bins {
                let fleet = (workers, units, members);
                kills(bin, build, assignment, fleet, trials).await;
            }
        }
    }
}

async fn kills(
    bin: &std::path::Path,
    build: &str,
    assignment: &str,
    (workers, units, members): (usize, usize, usize),
    trials: usize,
) {
    let flag = format!("-assignment={assignment}");
    let mut f = Fleet::start_of(bin, workers, units, members, &[flag.as_str()]).await;
    let mut rng = Rng::new(0x5ca1e ^ workers as u64 ^ units as u64 ^ seed().rotate_left(32));
    let k = f.kills(&mut rng, trials).await;
    let hosted = match &f.host {
        Some((_, n)) => format!(", {n} in one process"),
        None => String::new(),
    };
    let label = format!(
        "{build}, {assignment}, {workers} workers ({members} members{hosted}) x {units} units"
    );
    report(
        &format!("scale: SIGKILL to its row gone, {label}"),
        "ms",
        &k.gone,
        Target::none(),
    );
    report(
        &format!("scale: SIGKILL to its units owned again, {label}"),
        "ms",
        &k.owned,
        Target::none(),
    );
    if !k.bytes_percent.is_empty() {
        report(
            &format!(
                "scale: table bytes sent from the kill to owned again, % of the table, {label}"
            ),
            "%",
            &k.bytes_percent,
            Target::none(),
        );
    }
    let cpu = f.replica.proc.cpu();
    note(&format!(
        "holder CPU over the {label} run: {:.1} s",
        cpu.as_secs_f64()
    ));
}

/// Issue 41: a `Lookup` in this process (a caller that is not a member)
/// while victims are SIGKILLed, 10 workers (all members) × 1,000 units,
/// `sticky`: from the kill to the lookup's copy showing every unit of the
/// victim at a live owner, against the same for the table itself (the
/// bench's 1 ms poll, as in [`scale`]). The lag is the difference, per
/// kill; negative when the lookup saw the write before the poll did.
pub async fn lookup_after_kills() -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let mut f = Fleet::start_of(&distributor_bin(), 10, 1_000, 10, &["-assignment=sticky"]).await;
    let opts = distributor::LookupOptions {
        redis_url: f.redis.url(),
        table_key: TABLE.into(),
        ..distributor::LookupOptions::default()
    };
    let lookup = distributor::Lookup::connect(opts).await.unwrap();
    let mut rng = Rng::new(0x100c ^ seed().rotate_left(32));
    let (mut table, mut seen, mut lag) = (Vec::new(), Vec::new(), Vec::new());
    for trial in 0..12 {
        let i = trial % VICTIMS;
        f.present(i).await;
        let victim = f.members[i].1.clone();
        // The victim's units, once the lookup shows them at the victim.
        let mut units: Vec<String> = Vec::new();
        let shown = wait_until(Duration::from_secs(20), Duration::from_millis(5), || {
            let copy = lookup.table();
            let c = f.conn.clone();
            let victim = victim.clone();
            async move {
                let mut c = c;
                let row: Option<String> = redis::cmd("HGET")
                    .arg(TABLE)
                    .arg(&victim)
                    .query_async(&mut c)
                    .await
                    .unwrap_or(None);
                let mine: Vec<String> = row
                    .unwrap_or_default()
                    .split(',')
                    .filter(|u| !u.is_empty())
                    .map(str::to_string)
                    .collect();
                !mine.is_empty()
                    && mine.iter().all(|u| {
                        copy.owner(u) == distributor::Placement::Owned(victim.as_str().into())
                    })
            }
        })
        .await;
        assert!(shown, "the lookup never showed {victim}'s units");
        let row: String = redis::cmd("HGET")
            .arg(TABLE)
            .arg(&victim)
            .query_async(&mut f.conn)
            .await
            .unwrap();
        units.extend(row.split(',').filter(|u| !u.is_empty()).map(str::to_string));
        tokio::time::sleep(rng.below(POLL)).await;
        let mut copies = lookup.copies();
        copies.borrow_and_update();
        let watch_victim = victim.clone();
        let watcher = tokio::spawn(async move {
            loop {
                if copies.changed().await.is_err() {
                    return None;
                }
                let copy = std::sync::Arc::clone(&copies.borrow_and_update());
                let moved = units.iter().all(|u| match copy.owner(u) {
                    distributor::Placement::Owned(m) => *m != *watch_victim,
                    _ => false,
                });
                if moved {
                    return Some(Instant::now());
                }
            }
        });
        let t0 = Instant::now();
        f.members[i].0.kill();
        f.gone_after(i, t0).await;
        let owned = f.owned_after(i, t0).await;
        let at = tokio::time::timeout(Duration::from_secs(20), watcher)
            .await
            .expect("the lookup never showed the victim's units moved")
            .unwrap()
            .expect("the lookup ended");
        let shown = ms(at.saturating_duration_since(t0));
        table.push(owned);
        seen.push(shown);
        lag.push(shown - owned);
        f.replace(i).await;
    }
    note(&format!("lookup reads over the run: {:?}", lookup.reads()));
    (table, seen, lag)
}
