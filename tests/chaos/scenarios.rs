//! The scenarios. Each asserts what a user cares about; the checker
//! asserts the invariants on every sample meanwhile, and every wait is a poll
//! with a deadline.

use std::time::{Duration, SystemTime};

use distributor::core::keys::Keys;
use std::time::Instant;

use crate::checker::{GRACE, TTL};
use crate::cluster::{Cluster, Cut, FAILOVER_SLACK, Options, WORKER_DEADLINE, ms, say};
use crate::support::docker::bollard;
use crate::support::{Fleet, TABLE};

/// Generous upper bound for waits whose time is asserted separately.
const LONG: Duration = Duration::from_secs(20);

/// The ownership check's bound where Redis goes away: after a data loss
/// (scenarios 3 and 8) the table is right within 12 s of the restart
/// (workers re-register every 5 s; scenario 3 asserts the 12 s), and after a
/// promotion (scenario 10) a holder acts within 10 s of the master's death
/// (asserted), the killed worker's units in other rows within a detection
/// window after that; plus 1 s for members to take the units of their rows.
const OUTAGE_REOWN: Duration = Duration::from_secs(13);

/// 1. SIGKILL the holder five times in a row: each time another replica takes
///    over within TTL + slack, and the table (same members, same units) never
///    changes, not even its generation.
pub async fn sigkill_holder(docker: bollard::Docker) {
    let mut c = Cluster::start(&docker, "sigkill-holder", Options::host(5)).await;
    let before = c.checker.last().unwrap();
    let digest = before.matching_table().digest().to_string();
    c.checker.freeze(Some(digest.clone()));
    c.checker.freeze_services(Some(before.services.clone()));
    for round in 1..=5 {
        let (h, e) = c.holder().await;
        let t0 = Instant::now();
        c.kill_replica(h).await;
        let (n, e2, took) = c.wait_new_holder(Some(h), e, LONG, t0).await;
        say(&format!(
            "  round {round}: SIGKILL {} (epoch {e}) -> {} holds epoch {e2} after {}",
            c.replicas[h].id,
            c.replicas[n].id,
            ms(took)
        ));
        assert!(
            took <= TTL + FAILOVER_SLACK,
            "takeover took {took:?}, more than TTL {TTL:?} + {FAILOVER_SLACK:?}"
        );
        c.timings
            .record("failover after SIGKILL of the holder", took);
        c.start_replica(h).await;
    }
    let after = c.checker.last().unwrap();
    assert_eq!(after.matching_table().digest(), digest, "the table changed");
    assert_eq!(
        after.generation(),
        before.generation(),
        "a new generation was written"
    );
    c.finish().await;
}

/// 2. Freeze the holder (cgroup freezer) for longer than the TTL; another
///    replica takes over, and a worker dies meanwhile so that the table moves
///    on. Thawed, the old holder must not write: it steps down, Redis rejects
///    its lease, and the checker sees no write of its epoch.
pub async fn frozen_holder(docker: bollard::Docker) {
    let mut c = Cluster::start(&docker, "frozen-holder", Options::host(5)).await;
    let s = c.holder_sample().await;
    let (h, e) = c.holder_of(&s);
    let token = s.lease.clone().unwrap();
    let frozen_id = c.replicas[h].id.clone();
    // A frozen process answers /metrics with its old belief once it thaws,
    // until its event loop catches up: its gauge is watched separately below.
    c.checker
        .mute_holder(&frozen_id, Instant::now() + Duration::from_secs(3600));

    let t0 = Instant::now();
    c.replicas[h].container.pause().await.unwrap();
    let (n, e2, took) = c.wait_new_holder(Some(h), e, LONG, t0).await;
    say(&format!(
        "  froze {frozen_id} (epoch {e}); {} holds epoch {e2} after {}",
        c.replicas[n].id,
        ms(took)
    ));
    assert!(took <= TTL + FAILOVER_SLACK, "takeover took {took:?}");
    c.timings.record("failover after freezing the holder", took);

    let t1 = Instant::now();
    c.kill_worker(0);
    let d = c.wait_table("the table without worker 0", LONG, t1).await;
    c.timings
        .record("detection of a killed worker (old holder frozen)", d);
    let s = c.checker.last().unwrap();
    assert_eq!(s.meta_u64("epoch"), Some(e2), "written by the new holder");

    // Frozen for well over the TTL.
    let min_freeze = TTL * 2;
    if t0.elapsed() < min_freeze {
        tokio::time::sleep(min_freeze - t0.elapsed()).await;
    }
    let frozen_for = t0.elapsed();
    let thaw_at = SystemTime::now();
    let t2 = Instant::now();
    c.replicas[h].container.unpause().await.unwrap();
    c.wait_until(
        "the thawed replica reports holder 0",
        LONG,
        || c.gauge(h, "distributor_holder", &[]),
        |g| g == Some(0.0),
    )
    .await;
    let stepped = t2.elapsed();
    c.checker.mute_holder(&frozen_id, Instant::now());
    c.timings.record("step-down after thawing", stepped);

    let records = c.log_records(h).await;
    let step_down = records
        .iter()
        .find(|r| r.message.contains("stepping down") && r.at >= thaw_at)
        .unwrap_or_else(|| panic!("{frozen_id} logged no step-down after the thaw"));
    let fenced = c
        .gauge(h, "distributor_fenced_writes_total", &[])
        .await
        .unwrap_or(0.0);
    say(&format!(
        "  {frozen_id} was frozen {}, thawed, and stepped down ({}: {}); fenced writes: {fenced}",
        ms(frozen_for),
        step_down.field("reason"),
        step_down.message
    ));

    // The thawed replica's credentials are dead in Redis: a write with its token
    // and epoch, through the daemon's own script, is rejected.
    let keys = Keys::new(TABLE);
    let reply: redis::Value = redis::Script::new(distributor::edge::redis::scripts::COMMIT)
        .key(&keys.table)
        .key(&keys.meta)
        .key(&keys.epoch)
        .key(&keys.lease)
        .key(&keys.liveness)
        .key(&keys.suspects)
        .arg(&token)
        .arg(e)
        .arg(0)
        .arg("stale")
        .arg(0)
        .arg(&frozen_id)
        .arg(&keys.table_channel)
        .arg("1")
        .arg(1)
        .arg(0)
        .arg(0)
        .arg(0)
        .arg(0)
        .arg("127.0.0.1:1")
        .arg("stale-unit")
        .invoke_async(&mut c.redis_conn().await)
        .await
        .unwrap();
    say(&format!("  a write with its stale grant: {reply:?}"));
    assert!(
        format!("{reply:?}").contains("lease"),
        "Redis accepted a stale write: {reply:?}"
    );

    // For a while longer, nothing but the new holder writes.
    c.observe(Duration::from_secs(2)).await;
    let s = c.checker.last().unwrap();
    assert_eq!(
        s.meta.get("writer"),
        Some(&c.replicas[n].id),
        "the last write is the new holder's"
    );
    assert_eq!(s.meta_u64("epoch"), Some(e2));
    c.finish().await;
}

/// 3. SIGKILL Redis and start it again with no data, twice. No replica crashes,
///    the holder stops acting while Redis is away, the workers re-register by
///    themselves, the producer rewrites its units, and the table is right again
///    within a bounded time.
pub async fn redis_data_loss(docker: bollard::Docker) {
    let mut c = Cluster::start(&docker, "redis-data-loss", Options::host(5)).await;
    c.reown = OUTAGE_REOWN;
    for round in 1..=2 {
        let t0 = Instant::now();
        c.kill_redis().await;
        c.wait_until(
            "no replica acts as holder while Redis is down",
            LONG,
            || async {
                let mut holders = 0.0;
                for i in 0..c.replicas.len() {
                    holders += c.gauge(i, "distributor_holder", &[]).await.unwrap_or(0.0);
                }
                holders
            },
            |h| h == 0.0,
        )
        .await;
        c.timings
            .record("holder stops acting after Redis died", t0.elapsed());
        // Down for a while longer than the lease, then back without data.
        if t0.elapsed() < TTL * 2 {
            tokio::time::sleep(TTL * 2 - t0.elapsed()).await;
        }
        let t1 = Instant::now();
        c.restart_redis().await;
        let empty: Vec<String> = redis::cmd("KEYS")
            .arg("*")
            .query_async(&mut c.redis_conn().await)
            .await
            .unwrap();
        say(&format!(
            "  round {round}: Redis back after {}, keys right after the restart: {empty:?}",
            ms(t1.duration_since(t0))
        ));
        c.write_units().await;
        let d = c
            .wait_table("the full table again, every worker re-registered", LONG, t1)
            .await;
        c.timings.record("recovery after Redis lost its data", d);
        assert!(
            d <= Duration::from_secs(12),
            "recovery took {d:?}: workers re-register every 5 s, plus a cycle"
        );
        for i in 0..c.replicas.len() {
            assert!(c.replica_running(i).await, "{} crashed", c.replicas[i].id);
        }
    }
    c.finish().await;
}

/// 4. Cut the holder off the bridge network that it shares with Redis. It
///    stops acting before its lease can expire, another replica takes over,
///    and after healing there is still exactly one holder.
pub async fn partition(docker: bollard::Docker) {
    let mut c = Cluster::start(&docker, "partition", Options::bridge(5)).await;
    let digest = c
        .checker
        .last()
        .unwrap()
        .matching_table()
        .digest()
        .to_string();
    c.checker.freeze(Some(digest));
    let s = c.holder_sample().await;
    let (h, e) = c.holder_of(&s);
    let token = s.lease.clone().unwrap();
    let cut_id = c.replicas[h].id.clone();
    let cut_name = c.replicas[h].name.clone();

    let cut_at = SystemTime::now();
    let t0 = Instant::now();
    c.network.as_ref().unwrap().disconnect(&cut_name).await;
    let (n, e2, took) = c.wait_new_holder(Some(h), e, LONG, t0).await;
    say(&format!(
        "  cut {cut_id} (epoch {e}) off; {} holds epoch {e2} after {}",
        c.replicas[n].id,
        ms(took)
    ));
    c.timings
        .record("failover after partitioning the holder", took);

    // Its lease could expire no earlier than (sample time + PTTL) of any sample
    // that saw its token.
    let earliest_expiry = c
        .checker
        .scan(
            t0 - Duration::from_secs(5),
            None,
            |acc: Option<SystemTime>, s| {
                if s.lease.as_ref() == Some(&token) {
                    let exp = s.at + Duration::from_millis(s.pttl_ms.max(0) as u64);
                    Some(acc.map_or(exp, |a| a.max(exp)))
                } else {
                    acc
                }
            },
        )
        .expect("samples that saw the cut holder's lease");
    let records = c.log_records(h).await;
    let step_down = records
        .iter()
        .find(|r| r.message.contains("stepping down") && r.at >= cut_at)
        .unwrap_or_else(|| panic!("{cut_id} logged no step-down after the cut"));
    let margin = earliest_expiry
        .duration_since(step_down.at)
        .unwrap_or_else(|e| {
            panic!(
                "{cut_id} stepped down {:?} after its lease could expire",
                e.duration()
            )
        });
    say(&format!(
        "  {cut_id} stepped down ({}) {} after the cut, {} before its lease could expire",
        step_down.field("reason"),
        ms(step_down.at.duration_since(cut_at).unwrap_or_default()),
        ms(margin)
    ));
    c.timings.record(
        "partitioned holder stops acting (from the cut)",
        step_down.at.duration_since(cut_at).unwrap_or_default(),
    );

    // Heal.
    c.network
        .as_ref()
        .unwrap()
        .connect(&cut_name, &cut_name)
        .await;
    c.wait_healthy(h).await;
    // Still one holder: the new one, seen so by every replica's gauge, for 3 s
    // (and the monitor checks that no two holdings overlap).
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        let mut holders = Vec::new();
        for i in 0..c.replicas.len() {
            if c.gauge(i, "distributor_holder", &[]).await == Some(1.0) {
                holders.push(c.replicas[i].id.clone());
            }
        }
        assert!(
            holders.len() <= 1,
            "several holders after healing: {holders:?}"
        );
        let s = c.checker.last().unwrap();
        assert_eq!(
            s.holder(),
            Some(c.replicas[n].id.as_str()),
            "the lease moved"
        );
        c.checker.assert_ok();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        c.gauge(n, "distributor_holder", &[]).await,
        Some(1.0),
        "the new holder still acts"
    );
    c.finish().await;
}

/// 5. Kill workers one by one (SIGKILL), then start them again: each loss is
///    detected, and each return included, within the detection window.
pub async fn members(docker: bollard::Docker) {
    // Four workers die one after another: units of two of them would be
    // held for the quarantine's trials (`core::quarantine`), and this
    // scenario times how fast a killed worker's units are owned again.
    let mut options = Options::host(6);
    options.env.push(("QUARANTINE_AFTER", "0"));
    let mut c = Cluster::start(&docker, "members", options).await;
    for i in 0..4 {
        let t = Instant::now();
        c.kill_worker(i);
        let d = c
            .wait_table(&format!("the table without worker {i}"), LONG, t)
            .await;
        c.timings.record("detection of a killed worker", d);
        assert!(d <= GRACE, "detection took {d:?}");
    }
    for i in 0..4 {
        let t = Instant::now();
        c.start_worker(i);
        let d = c
            .wait_table(&format!("the table with worker {i} again"), LONG, t)
            .await;
        c.timings.record("re-inclusion of a restarted worker", d);
        assert!(d <= GRACE, "re-inclusion took {d:?}");
    }
    // Fewer units than workers: every running worker keeps a row, an empty
    // one without units (the checker compares with the solver's table).
    let t = Instant::now();
    c.units = crate::support::units(4);
    c.write_units().await;
    c.wait_table("4 units over 6 workers: 2 empty rows", LONG, t)
        .await;
    let s = c.checker.last().unwrap();
    assert_eq!(s.table.len(), 6, "a row per running worker");
    assert_eq!(s.table.values().filter(|r| r.is_empty()).count(), 2);
    c.finish().await;
}

/// 6. SIGKILL every replica, let the lease lapse, start one: it takes over and
///    resumes from Redis without a reshuffle (no table write at all).
pub async fn all_replicas_killed(docker: bollard::Docker) {
    let mut c = Cluster::start(&docker, "all-replicas-killed", Options::host(5)).await;
    let before = c.checker.last().unwrap();
    let digest = before.matching_table().digest().to_string();
    c.checker.freeze(Some(digest.clone()));
    c.checker.freeze_services(Some(before.services.clone()));
    let (_, e) = c.holder().await;
    for i in 0..c.replicas.len() {
        c.kill_replica(i).await;
    }
    let t = Instant::now();
    c.wait_sample("the lease lapses", LONG, t, |s| s.lease.is_none())
        .await;
    let t0 = Instant::now();
    c.start_replica(1).await;
    let (h, e2, took) = c.wait_new_holder(None, e, LONG, t0).await;
    assert_eq!(h, 1);
    say(&format!(
        "  all killed; {} alone holds epoch {e2} {} after its start",
        c.replicas[1].id,
        ms(took)
    ));
    c.timings
        .record("takeover by a lone restarted replica (from start)", took);
    c.wait_until(
        "five holder cycles on the restarted replica",
        LONG,
        || c.gauge(1, "distributor_cycles_total", &[("outcome", "ok")]),
        |n| n.unwrap_or(0.0) >= 5.0,
    )
    .await;
    let writes = c.gauge(1, "distributor_table_writes_total", &[]).await;
    assert_eq!(writes, Some(0.0), "the resumed holder rewrote the table");
    let after = c.checker.last().unwrap();
    assert_eq!(after.matching_table().digest(), digest);
    assert_eq!(after.generation(), before.generation());
    assert_eq!(after.meta.get("writer"), before.meta.get("writer"));
    c.finish().await;
}

/// 7. Restart every replica in turn with SIGTERM: each exits cleanly, a holder
///    hands over at once, never two act at the same moment, and the table
///    never changes.
pub async fn rolling_restart(docker: bollard::Docker) {
    let mut c = Cluster::start(&docker, "rolling-restart", Options::host(5)).await;
    let before = c.checker.last().unwrap();
    let digest = before.matching_table().digest().to_string();
    c.checker.freeze(Some(digest.clone()));
    c.checker.freeze_services(Some(before.services.clone()));
    let mut handovers = 0;
    for i in 0..c.replicas.len() {
        let (h, e) = c.holder().await;
        let t0 = Instant::now();
        let code = c.stop_replica(i).await;
        assert_eq!(code, Some(0), "{} did not exit cleanly", c.replicas[i].id);
        if h == i {
            let (n, e2, took) = c.wait_new_holder(Some(i), e, LONG, t0).await;
            say(&format!(
                "  SIGTERM {} (holder, epoch {e}) -> {} holds epoch {e2} after {}",
                c.replicas[i].id,
                c.replicas[n].id,
                ms(took)
            ));
            c.timings
                .record("handover after SIGTERM of the holder", took);
            handovers += 1;
        } else {
            say(&format!("  SIGTERM {} (standby)", c.replicas[i].id));
        }
        let t1 = Instant::now();
        c.start_replica(i).await;
        c.wait_ready(i).await;
        c.timings
            .record("restarted replica ready (/readyz)", t1.elapsed());
    }
    assert!(handovers >= 1, "the holder was never restarted");
    let after = c.checker.last().unwrap();
    assert_eq!(after.matching_table().digest(), digest);
    assert_eq!(after.generation(), before.generation());
    c.finish().await;
}

/// 8. The generation is never reused after Redis lost its data, as long as a
///    replica that saw it survives. The two standbys restart (so they missed
///    every `{T}:changed` message) and learn the generation from their
///    acquisition attempts alone; the holder is frozen, so that it cannot
///    restore the floor; Redis loses its data; a standby takes over. Restored
///    floors go to `meta.generation_floor` (the checker flags a
///    `meta.generation` without its table write), and the first table write
///    after the loss carries a generation above every one a replica saw.
pub async fn generation_after_data_loss(docker: bollard::Docker) {
    let mut c = Cluster::start(&docker, "generation-reset", Options::host(3)).await;
    c.reown = OUTAGE_REOWN;
    let before = c.checker.last().unwrap();
    assert!(before.meta.contains_key("writer"), "the first table write");
    let before = before.generation().unwrap();
    let (h, _) = c.holder().await;
    for i in (0..c.replicas.len()).filter(|i| *i != h) {
        assert_eq!(c.stop_replica(i).await, Some(0));
        c.start_replica(i).await;
        // Survivors that saw it: the guarantee is about them.
        c.wait_until(
            &format!("{} saw generation {before}", c.replicas[i].id),
            LONG,
            || c.gauge(i, "distributor_generation", &[]),
            |g| g.unwrap_or(0.0) >= before as f64,
        )
        .await;
    }
    let mut seen = 0.0f64;
    for i in 0..c.replicas.len() {
        seen = seen.max(c.gauge(i, "distributor_generation", &[]).await.unwrap());
    }
    let seen = seen as u64;
    // A frozen process answers /metrics with its old belief once it thaws.
    let frozen_id = c.replicas[h].id.clone();
    c.checker
        .mute_holder(&frozen_id, Instant::now() + Duration::from_secs(3600));
    c.replicas[h].container.pause().await.unwrap();
    c.kill_redis().await;
    tokio::time::sleep(TTL).await;
    let t1 = Instant::now();
    c.restart_redis().await;
    c.write_units().await;
    let s = c
        .wait_sample("the first table write after the data loss", LONG, t1, |s| {
            s.meta.contains_key("writer")
        })
        .await;
    say(&format!(
        "  generation before the loss {before} (highest a replica saw: {seen}), first write after it: generation {:?} by {:?} in epoch {:?} (floor {:?})",
        s.generation(),
        s.meta.get("writer"),
        s.meta.get("epoch"),
        s.meta.get("generation_floor"),
    ));
    c.replicas[h].container.unpause().await.unwrap();
    c.wait_until(
        "the thawed replica reports holder 0",
        LONG,
        || c.gauge(h, "distributor_holder", &[]),
        |g| g == Some(0.0),
    )
    .await;
    c.checker.mute_holder(&frozen_id, Instant::now());
    c.checker.assert_ok();
    assert!(
        s.generation().is_some_and(|g| g > seen),
        "the first table write after the data loss has generation {:?}, not above {seen}, the highest a surviving replica saw",
        s.generation()
    );
    c.finish().await;
}

/// 9. Cut the holder off the workers, not off Redis (`iptables` in its network
///    namespace: `DROP`, then `REJECT` with a TCP reset), with `FORGET_AFTER`
///    short. Every worker fails for it in one cycle: it keeps their units,
///    records them as suspects and hands the lease over; the next holder finds
///    them answering and clears them. The table never changes, nobody is
///    forgotten for several `FORGET_AFTER` periods, and after healing there is
///    one holder.
///
///    The cut lands between two of the holder's ping rounds (the test waits
///    for the end of a cycle, then 80 ms); [`cut_during_a_ping_round`] cuts
///    in the middle of one.
pub async fn holder_cut_from_workers(docker: bollard::Docker) {
    const FORGET_AFTER: Duration = Duration::from_secs(1);
    let mut opts = Options::bridge(5);
    opts.env.push(("FORGET_AFTER", "1s"));
    let mut c = Cluster::start(&docker, "holder-cut-from-workers", opts).await;
    let s = c.checker.last().unwrap();
    c.checker
        .freeze(Some(s.matching_table().digest().to_string()));
    c.checker.freeze_services(Some(s.services.clone()));
    for how in [Cut::Drop, Cut::Reject] {
        let s = c.holder_sample().await;
        let (h, e) = c.holder_of(&s);
        let cut_id = c.replicas[h].id.clone();
        const ABDICATED: &[(&str, &str)] = &[("transition", "abdicated")];
        let transitions = "distributor_lease_transitions_total";
        let abdicated_before = c.gauge(h, transitions, ABDICATED).await.unwrap();
        // A holder that counts itself alone does not hand over (see docs/guarantees.md).
        wait_census(&c, h).await;
        let pid = c.replica_pid(h).await;
        let all: Vec<usize> = (0..c.workers.len()).collect();
        let round_over = c.after_holder_cycle(h).await;
        tokio::time::sleep_until((round_over + Duration::from_millis(80)).into()).await;
        let cut_at = SystemTime::now();
        let t0 = Instant::now();
        c.cut_from_workers(h, pid, how, &all);
        let (n, e2, took) = c.wait_new_holder(Some(h), e, LONG, t0).await;
        say(&format!(
            "  {how:?}: cut {cut_id} (epoch {e}) off the workers; {} holds epoch {e2} after {}",
            c.replicas[n].id,
            ms(took)
        ));
        c.timings.record(
            match how {
                Cut::Drop => "handover after cutting the holder off the workers (DROP)",
                Cut::Reject | Cut::RejectIcmp => {
                    "handover after cutting the holder off the workers (REJECT)"
                }
            },
            took,
        );
        assert!(
            took <= TTL + FAILOVER_SLACK,
            "the handover took {took:?}: an abdication gives the lease back at once"
        );
        assert_eq!(
            c.gauge(h, transitions, ABDICATED).await,
            Some(abdicated_before + 1.0),
            "{cut_id} did not abdicate"
        );
        let records = c.log_records(h).await;
        let step_down = records
            .iter()
            .find(|r| r.message.contains("stepping down") && r.at >= cut_at)
            .unwrap_or_else(|| panic!("{cut_id} logged no step-down after the cut"));
        assert!(
            step_down
                .field("reason")
                .contains("most of a group failed at once"),
            "{cut_id} stepped down for another reason: {}",
            step_down.field("reason")
        );
        // The next holder pings them itself: they answer, the suspicion is
        // cleared, and nothing moved (the checker froze the table).
        let new_id = c.replicas[n].id.clone();
        let cleared = c
            .wait_sample("the next holder clears the suspects", LONG, t0, |s| {
                s.holder() == Some(new_id.as_str()) && s.suspects.is_empty()
            })
            .await;
        c.timings.record(
            "suspects cleared by the next holder (from the cut)",
            cleared.sent.unwrap().duration_since(t0),
        );
        let suspected = c.checker.scan(t0, 0, |m, s| m.max(s.suspects.len()));
        say(&format!(
            "  {cut_id} stepped down ({}); suspects seen in Redis: at most {suspected}",
            step_down.field("reason")
        ));
        // Several FORGET_AFTER periods with the cut in place: nobody forgotten
        // (services frozen in the checker), the lease stays where it went.
        let t1 = Instant::now();
        c.observe(FORGET_AFTER * 3 + Duration::from_millis(500))
            .await;
        let moved = c.checker.scan(t1, None, |m, s| {
            m.or_else(|| (s.holder() != Some(new_id.as_str())).then(|| s.clone()))
        });
        if let Some(s) = moved {
            panic!("the lease left {new_id} during the cut:\n{s}");
        }
        // Heal: still one holder, the new one, for 2 s.
        c.heal_cuts();
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            let mut holders = Vec::new();
            for i in 0..c.replicas.len() {
                if c.gauge(i, "distributor_holder", &[]).await == Some(1.0) {
                    holders.push(c.replicas[i].id.clone());
                }
            }
            assert!(
                holders.len() <= 1,
                "several holders after healing: {holders:?}"
            );
            c.checker.assert_ok();
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(
            c.gauge(n, "distributor_holder", &[]).await,
            Some(1.0),
            "the new holder still acts"
        );
    }
    let s = c.checker.last().unwrap();
    assert!(s.suspects.is_empty(), "suspects left: {:?}", s.suspects);
    c.finish().await;
}

/// 10. Redis as a master and a replica; the distributor's replicas count
///     nothing until one Redis replica has it (`REDIS_WAIT_REPLICAS=1`). Three
///     times: SIGKILL a worker, SIGKILL the master a random 0-400 ms later
///     (while the new table is being computed, written or acknowledged),
///     promote the replica (`REPLICAOF NO ONE`), move the alias `redis` to it,
///     and start a fresh replica of it (the roles alternate). Never two acting
///     holders, epoch and generation monotonic across each promotion (the
///     checker follows the promoted server), a holder acts again (done with
///     the recovery a state written on another server starts) and the table
///     is right within bounded times.
pub async fn redis_promotion(docker: bollard::Docker) {
    const ROUNDS: usize = 3;
    let mut opts = Options::bridge(5);
    opts.replicated_redis = true;
    opts.env.push(("REDIS_WAIT_REPLICAS", "1"));
    let mut c = Cluster::start(&docker, "redis-promotion", opts).await;
    c.reown = OUTAGE_REOWN;
    let started = Instant::now();
    let delays: Vec<u64> = (0..ROUNDS).map(|_| rand::random_range(0..400)).collect();
    say(&format!("  master killed {delays:?} ms after each worker"));
    for (round, delay) in delays.into_iter().enumerate() {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "{ROUNDS} promotions take more than 2 minutes"
        );
        let before = c.holder_sample().await;
        let (_, e) = c.holder_of(&before);
        let t0 = Instant::now();
        c.kill_worker(round);
        tokio::time::sleep(Duration::from_millis(delay)).await;
        let t1 = Instant::now();
        // Until a holder acts on the promoted master, the table stays as it
        // was: the killed worker's detection window starts then.
        c.checker.failover(true);
        c.kill_redis_master().await;
        let last_on_old = c.checker.last().unwrap();
        c.promote_redis_replica().await;
        let promoted = t1.elapsed();
        let mut ok_cycles = Vec::new();
        for i in 0..c.replicas.len() {
            ok_cycles.push(
                c.gauge(i, "distributor_cycles_total", &[("outcome", "ok")])
                    .await
                    .unwrap_or(0.0),
            );
        }
        // A holder acts on the promoted master: a successful cycle (its
        // writes acknowledged by the fresh replica) after the promotion, and
        // done recovering. (A holder that finds its state written on another
        // server asks every member what it works on and plans nothing for
        // 3 s: part of the failover, so the checker's bounds start after it.)
        let deadline = Instant::now() + LONG;
        let acting = loop {
            c.checker.assert_ok();
            let mut found = None;
            for (i, before) in ok_cycles.iter().enumerate() {
                let holder = c.gauge(i, "distributor_holder", &[]).await;
                let ok = c
                    .gauge(i, "distributor_cycles_total", &[("outcome", "ok")])
                    .await;
                let recovering = c.gauge(i, "distributor_recovering", &[]).await;
                if holder == Some(1.0) && ok.is_some_and(|n| n > *before) && recovering == Some(0.0)
                {
                    found = Some(i);
                }
            }
            if let Some(i) = found {
                // Units of the killed worker, if the write that moved them
                // was lost, wait out its deadline: it cannot say it holds
                // nothing, and its refused connection is no proof (a
                // firewall refuses too).
                c.checker.failover_ends_at(Instant::now() + WORKER_DEADLINE);
                break i;
            }
            assert!(
                Instant::now() < deadline,
                "no replica acted on the promoted master within {LONG:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let acts = t1.elapsed();
        let d = c
            .wait_table(&format!("the table without worker {round}"), LONG, t0)
            .await;
        let s = c.checker.last().unwrap();
        say(&format!(
            "  round {}: worker {round} killed, master killed {delay} ms later (last sample on it: epoch {:?}, generation {:?}); promoted in {}; {} acts after {} (epoch {:?}); table right {} after the worker's kill, generation {:?}",
            round + 1,
            last_on_old.epoch,
            last_on_old.generation(),
            ms(promoted),
            c.replicas[acting].id,
            ms(acts),
            s.epoch,
            ms(d),
            s.generation()
        ));
        c.timings
            .record("promotion done (from the master's SIGKILL)", promoted);
        c.timings
            .record("a holder acts again (from the master's SIGKILL)", acts);
        c.timings.record(
            "table right on the promoted master (from the worker's kill)",
            d,
        );
        assert!(
            acts <= Duration::from_secs(10),
            "a holder acted again only {acts:?} after the master died"
        );
        assert!(
            s.epoch >= Some(e),
            "epoch {:?} below {e} after the promotion",
            s.epoch
        );
        assert!(
            s.generation() > before.generation(),
            "no new table after the worker's kill"
        );
        // Back to full strength before the next round: the worker, and the
        // fresh replica online (it acknowledged the holder's writes already).
        let t2 = Instant::now();
        c.start_worker(round);
        c.wait_table(&format!("the table with worker {round} again"), LONG, t2)
            .await;
        c.wait_redis_replica().await;
    }
    c.finish().await;
}

/// 9b. A cut of the holder's network that lands while a ping round is in
///    flight splits the failures over two cycles. Staged so that it happens
///    every time: worker 0's path is cut just before a round (its ping is
///    lost), the other workers' just after that round (they answered it), and
///    right after the start, while the holder's census may still count
///    itself alone. The table must never change: the first cycle waits for
///    the pings in flight before it takes worker 0's failure as a lone one,
///    and the holder hands over as soon as its census counts the others,
///    however late that is (both were defects: units moved twice, or the
///    holder kept its suspicions and confirmed them alone 10 s later).
pub async fn cut_during_a_ping_round(docker: bollard::Docker) {
    let mut c = Cluster::start(&docker, "cut-during-a-ping-round", Options::bridge(5)).await;
    let s = c.checker.last().unwrap();
    c.checker
        .freeze(Some(s.matching_table().digest().to_string()));
    c.checker.freeze_services(Some(s.services.clone()));
    let s = c.holder_sample().await;
    let (h, e) = c.holder_of(&s);
    let pid = c.replica_pid(h).await;
    let round_over = c.after_holder_cycle(h).await;
    tokio::time::sleep_until((round_over + Duration::from_millis(20)).into()).await;
    let t0 = Instant::now();
    c.cut_from_workers(h, pid, Cut::Drop, &[0]);
    // The round during which worker 0 is cut off and the others are not.
    c.after_holder_cycle(h).await;
    c.cut_from_workers(h, pid, Cut::Drop, &[1, 2, 3, 4]);
    // Let it play out before the checker's verdict (at the end): the cut
    // holder abdicates, the next one clears the suspects.
    let deadline = Instant::now() + LONG;
    let taken = loop {
        let new = c.checker.find(t0, |s| {
            s.epoch.is_some_and(|x| x > e) && s.holder().is_some_and(|x| x != c.replicas[h].id)
        });
        if let Some(s) = new {
            break s;
        }
        assert!(Instant::now() < deadline, "no handover within {LONG:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    let writes = c.checker.scan(t0, Vec::new(), |mut w: Vec<String>, s| {
        let line = format!(
            "generation {:?} by {:?} (epoch {:?}): {} rows",
            s.generation(),
            s.meta.get("writer"),
            s.meta.get("epoch"),
            s.table.len()
        );
        if w.last() != Some(&line) {
            w.push(line);
        }
        w
    });
    say(&format!(
        "  cut {} off worker 0, one ping round later off the others; {:?} holds epoch {:?} after {}; tables since the first cut:\n    {}",
        c.replicas[h].id,
        taken.holder(),
        taken.epoch,
        ms(taken.sent.unwrap().duration_since(t0)),
        writes.join("\n    ")
    ));
    c.heal_cuts();
    c.finish().await;
}

/// Waits until replica `i`'s census counts all the replicas.
async fn wait_census(c: &Cluster, i: usize) {
    let all = c.replicas.len() as f64;
    c.wait_until(
        &format!("{}'s census counts {all} replicas", c.replicas[i].id),
        LONG,
        || c.gauge(i, "distributor_census_replicas", &[]),
        |n| n == Some(all),
    )
    .await;
}

/// 11. Restart every worker in turn with SIGTERM while a producer churns the
///     units. A drained worker has the holder move its units away (each one
///     released first, then acknowledged, then granted to the next owner),
///     leaves the services list and `{T}:members`, and exits 0; it starts
///     again on the same address and gets units again. The ownership check
///     (every scenario's) finds no unit with two owners, and the table is the
///     solver's after every step.
pub async fn workers_rolling_restart(docker: bollard::Docker) {
    /// A drain is a few handoff cycles; the worker gives up after 30 s.
    const DRAIN_LIMIT: Duration = Duration::from_secs(10);
    let mut c = Cluster::start(&docker, "workers-rolling-restart", Options::host(5)).await;
    let started = Instant::now();
    c.wait_owners("every unit owned by its row's member (events)", LONG)
        .await;
    let keys = Keys::new(TABLE);
    let mut churned = 0;
    let mut handed_over = 0;
    for i in 0..c.workers.len() {
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "{i} worker restarts take more than 90 s"
        );
        let id = c.workers[i].id.clone();
        let held: Vec<String> = c
            .owners
            .owners()
            .into_iter()
            .filter(|(_, o)| o.contains(&id))
            .map(|(u, _)| u)
            .collect();
        assert!(!held.is_empty(), "{id} holds nothing to hand over");
        let t0 = Instant::now();
        let term_us = crate::support::ownership::unix_us_now();
        c.terminate_worker(i);
        // The producer churns while the worker drains.
        churn(&mut c, &mut churned).await;
        let status = c.wait_worker_exit(i, DRAIN_LIMIT).await;
        let drained = t0.elapsed();
        assert!(status.success(), "{id} after SIGTERM: {status:?}");
        c.timings
            .record("worker drained and exited 0 (from SIGTERM)", drained);
        let mut conn = c.redis_conn().await;
        let listed: Vec<String> = redis::cmd("LRANGE")
            .arg(crate::support::SERVICES)
            .arg(0)
            .arg(-1)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(!listed.contains(&id), "{id} still listed: {listed:?}");
        let report: Option<String> = redis::cmd("HGET")
            .arg(&keys.members)
            .arg(&id)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(report, None, "{id}'s report in {} stays", keys.members);
        // It handed every unit over: released for the drain (or moved by
        // the churn), none by its fence or by giving up.
        let released: Vec<serde_json::Value> = c
            .owners
            .events_of(&id)
            .into_iter()
            .filter(|e| e["event"] == "released")
            .collect();
        let odd: Vec<&serde_json::Value> = released
            .iter()
            .filter(|e| e["reason"] != "draining" && e["reason"] != "moved")
            .collect();
        assert!(odd.is_empty(), "{id} released units otherwise: {odd:?}");
        let d = c
            .wait_table(&format!("the table without worker {i}"), LONG, t0)
            .await;
        c.timings
            .record("table without the drained worker (from SIGTERM)", d);
        c.wait_owners("the drained worker's units owned by others (events)", LONG)
            .await;
        // When each unit it held (and that is still listed) was acquired by
        // its next owner, counted from the SIGTERM.
        let next = next_owner_at(&c, &held, &id, term_us);
        handed_over += next.len();
        if let Some(max) = next.iter().max() {
            c.timings.record(
                "drained worker's units owned by others (from SIGTERM)",
                *max,
            );
        }

        let t1 = Instant::now();
        c.start_worker(i);
        churn(&mut c, &mut churned).await;
        let d = c
            .wait_table(&format!("the table with worker {i} again"), LONG, t1)
            .await;
        c.timings
            .record("restarted worker back in the table (from its start)", d);
        let d = c
            .wait_owners("the restarted worker's units owned (events)", LONG)
            .await;
        c.timings.record(
            "restarted worker's units acquired (events, after the table)",
            d,
        );
        say(&format!(
            "  worker {i} ({id}): SIGTERM, drained its {} units in {}, exit 0, restarted; units churned so far: {churned}",
            held.len(),
            ms(drained)
        ));
    }
    assert!(
        handed_over >= c.workers.len(),
        "too few units handed over by drains: {handed_over}"
    );
    c.finish().await;
}

/// The producer replaces two units: the oldest two go, two new ones come.
async fn churn(c: &mut Cluster, churned: &mut usize) {
    c.units.drain(..2);
    for _ in 0..2 {
        c.units.push(format!("churn-{:04}", *churned));
        *churned += 1;
    }
    c.write_units().await;
}

/// For each of `units` that `from` held at `since_us` and that another member
/// acquired after it: how long after `since_us` that was.
fn next_owner_at(c: &Cluster, units: &[String], from: &str, since_us: u64) -> Vec<Duration> {
    let lines: Vec<serde_json::Value> = c.owners.all_events();
    units
        .iter()
        .filter_map(|u| {
            lines
                .iter()
                .filter(|e| {
                    e["event"] == "acquired"
                        && e["unit"] == u.as_str()
                        && e["member"] != from
                        && e["unix_us"].as_u64().is_some_and(|t| t >= since_us)
                })
                .filter_map(|e| e["unix_us"].as_u64())
                .min()
                .map(|t| Duration::from_micros(t - since_us))
        })
        .collect()
}

/// 12. A firewall REJECTs one worker's pings from the holder only, with a TCP
///     reset and then with an ICMP port-unreachable: the holder's connection
///     to it is refused, as if its process were gone, while the worker runs
///     and reads Redis. A refusal is not a death for a member that names its
///     Redis connection (docs/protocol.md, step 4): the holder fails the
///     worker and revokes its units, but releases them only on its
///     acknowledgement (or its deadline), never on the refusal, since Redis
///     still has the worker's connection. The ownership check finds no unit
///     worked on by two workers; healed, the worker gets units again.
///
///     Workers take 300 ms to stop a unit, so that a holder that took the
///     refusal for a death would grant a unit while its worker still stops
///     it, and the ownership check would see it twice.
pub async fn reject_one_worker_from_the_holder(docker: bollard::Docker) {
    let opts = Options {
        work_ms: 300,
        ..Options::bridge(5)
    };
    let mut c = Cluster::start(&docker, "reject-one-worker", opts).await;
    for (n, how) in [Cut::Reject, Cut::RejectIcmp].into_iter().enumerate() {
        let s = c.holder_sample().await;
        let (h, _) = c.holder_of(&s);
        let pid = c.replica_pid(h).await;
        // One that holds units (with 40 units over 5, each does).
        let victim = n;
        let id = c.workers[victim].id.clone();
        let held = s
            .table
            .get(&id)
            .map_or(0, |r| r.split(',').filter(|u| !u.is_empty()).count());
        assert!(held > 0, "{id} holds nothing to move: {:?}", s.table);
        // For the checker it stops answering (its row must go, and the table
        // be the solver's for the others); it runs on.
        c.checker.worker(&id, false);
        let t0 = Instant::now();
        c.cut_from_workers(h, pid, how, &[victim]);
        let others: Vec<String> = c
            .running_workers()
            .into_iter()
            .filter(|w| *w != id)
            .collect();
        let expected = Fleet::expected(&others, &c.units);
        let moved = c
            .wait_sample(
                &format!("{id}'s units move away ({how:?})"),
                LONG,
                t0,
                |s| s.matching_table() == expected,
            )
            .await;
        let took = moved.sent.unwrap().duration_since(t0);
        c.timings.record(
            match how {
                Cut::RejectIcmp => "units moved from a worker REJECTed (ICMP) by the holder",
                _ => "units moved from a worker REJECTed (TCP reset) by the holder",
            },
            took,
        );
        // Every unit owned by exactly its row's member (the REJECTed worker
        // released its units, by its acknowledgement: it was not dead).
        c.wait_owners(&format!("{id} released its {held} units"), LONG)
            .await;
        assert!(
            c.workers[victim]
                .process
                .as_mut()
                .is_some_and(|p| p.running()),
            "{id} was supposed to run on"
        );
        say(&format!(
            "  {how:?}: {id} (holding {held}) REJECTed by the holder; its units moved in {}",
            ms(took)
        ));
        let healed = Instant::now();
        c.heal_cuts();
        c.checker.worker(&id, true);
        let d = c
            .wait_table(&format!("{id} gets units again"), LONG, healed)
            .await;
        c.timings
            .record("a REJECTed worker back in the table after healing", d);
        c.wait_owners("every unit owned by its row's member", LONG)
            .await;
    }
    c.finish().await;
}
