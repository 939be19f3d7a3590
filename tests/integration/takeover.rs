//! Fast takeover: a holder whose Redis connection closes without a release
//! (a crash) is replaced as soon as a standby sees the connection gone, long
//! before its lease would expire; a live holder whose connection was killed is
//! fenced, never a second writer; where `CLIENT` is not permitted, standbys
//! wait out the TTL and say so.
//!
//! The leases here are long (30 s) so that a takeover within the wait's bound
//! can only be a fast one; the bounds are generous liveness limits, never
//! speed claims (those are in `benches/cluster/failover.rs`).

use std::time::Duration;

use distributor::{Role, Status, Takeover};

use crate::security::{ADMIN_PASSWORD, PASSWORD, create_acl_user_with};
use crate::support::*;

/// A lease that only a fast takeover replaces within the tests' bounds.
fn long_lease(c: &mut distributor::Config) {
    c.lease.ttl = Duration::from_secs(30);
    c.lease.renew_deadline = Duration::from_secs(20);
}

fn acting(s: &Status, above: u64) -> bool {
    s.role == Role::Holder && s.epoch > above
}

/// The Redis client id the holder recorded for its lease connection (the
/// record is `<token> <client id>@<run id>`).
async fn recorded_client(redis: &RedisServer) -> Option<String> {
    let conn: Option<String> = redis.cmd(&["HGET", &keys().meta, "holder_conn"]).await;
    let token: Option<String> = redis.cmd(&["GET", &keys().lease]).await;
    conn?
        .strip_prefix(&format!("{} ", token?))
        .map(|c| c.split('@').next().unwrap_or_default().to_string())
        .filter(|id| !id.is_empty())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_holder_is_replaced_long_before_its_lease_expires() {
    let units = units(20);
    let (mut fleet, before) = Fleet::converged(long_lease, 3, 3, &units).await;
    let old = fleet.wait_for_holder().await;
    let old_epoch = fleet.statuses()[old].epoch;
    wait_for(
        "the holder records its connection",
        Duration::from_secs(10),
        || async { recorded_client(&fleet.redis).await.is_some() },
    )
    .await;
    wait_for("the standbys watch it", Duration::from_secs(10), || async {
        fleet
            .statuses()
            .iter()
            .all(|s| s.takeover == Takeover::Fast)
    })
    .await;

    // A crash: the task stops, nothing is released, its connections close.
    let started = std::time::Instant::now();
    fleet.replicas[old].take().unwrap().abort();
    wait_for("a new holder", Duration::from_secs(15), || async {
        fleet.replicas.iter().flatten().any(|r| {
            let s = r.status().borrow().clone();
            acting(&s, old_epoch) && s.cycles >= 1
        })
    })
    .await;
    eprintln!("takeover after a crash: {:?} (ttl 30 s)", started.elapsed());
    let pttl: i64 = fleet.redis.cmd(&["PTTL", &keys().lease]).await;
    assert!(pttl > 10_000, "a fresh lease of the new holder: {pttl} ms");
    assert_eq!(fleet.table().await, before, "the same table");
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_holder_whose_connection_is_killed_is_fenced() {
    let units = units(20);
    // Renewals 10 s apart: the holder does not correct its record before a
    // standby sees the connection gone, so the takeover happens.
    let (fleet, _) = Fleet::converged(
        |c| {
            long_lease(c);
            c.lease.renew_interval = Duration::from_secs(10);
        },
        3,
        2,
        &units,
    )
    .await;
    let old = fleet.wait_for_holder().await;
    let old_epoch = fleet.statuses()[old].epoch;
    wait_for("the standby watches", Duration::from_secs(10), || async {
        fleet.statuses()[1 - old].takeover == Takeover::Fast
    })
    .await;
    let client = recorded_client(&fleet.redis).await.unwrap();
    let killed: i64 = fleet.redis.cmd(&["CLIENT", "KILL", "ID", &client]).await;
    assert_eq!(killed, 1);
    let new = 1 - old;
    wait_for(
        "the standby takes over",
        Duration::from_secs(15),
        || async { acting(&fleet.statuses()[new], old_epoch) },
    )
    .await;
    let new_epoch = fleet.statuses()[new].epoch;
    // Until the takeover the old holder could still write, legitimately.
    let writes_before = fleet.statuses()[old].table_writes;

    // Both may believe they hold the lease for a moment; only one's writes
    // count. A change of units makes both try to write.
    let more = units_range(0, 25);
    fleet.set_units(&more).await;
    fleet.wait_for_table(&more, Duration::from_secs(15)).await;
    wait_for(
        "the old holder steps down",
        Duration::from_secs(15),
        || async { fleet.statuses()[old].role == Role::Standby },
    )
    .await;
    let epoch_written: Option<u64> = fleet.redis.cmd(&["HGET", &keys().meta, "epoch"]).await;
    assert_eq!(
        epoch_written,
        Some(new_epoch),
        "the last write is the new holder's"
    );
    let s = fleet.statuses();
    assert_eq!(
        s[old].table_writes, writes_before,
        "the old holder wrote nothing after the takeover"
    );
    assert!(acting(&s[new], old_epoch));
    fleet.shutdown().await;
}

fn units_range(from: usize, to: usize) -> Vec<String> {
    units(to).into_iter().skip(from).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_client_permission_standbys_wait_out_the_ttl_and_say_so() {
    // An ACL without the optional CLIENT commands.
    let redis = RedisServer::start_with(&["--requirepass", ADMIN_PASSWORD]);
    create_acl_user_with(&redis, "+llen +memory|usage +watch +unwatch").await;
    let url = format!("redis://distributor:{PASSWORD}@127.0.0.1:{}", redis.port());
    let units = units(12);
    let ttl = Duration::from_secs(3);
    let (mut fleet, _) = Fleet::converged_on(
        redis,
        |c| {
            c.redis_url = url.clone();
            c.lease.ttl = ttl;
            c.lease.renew_deadline = Duration::from_secs(2);
        },
        3,
        2,
        &units,
    )
    .await;
    let old = fleet.wait_for_holder().await;
    let old_epoch = fleet.statuses()[old].epoch;
    wait_for("both say ttl", Duration::from_secs(10), || async {
        fleet
            .statuses()
            .iter()
            .all(|s| matches!(&s.takeover, Takeover::Ttl(_)))
    })
    .await;
    assert_eq!(recorded_client(&fleet.redis).await, None);
    let out = cli(&url, &["status"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("takeover: ttl ("), "{text}");

    // A crash is noticed only when the lease expires: at the earliest one TTL
    // after the last renewal (at most a renew interval before the crash).
    let renew = fleet.config.lease.renew_interval;
    let started = std::time::Instant::now();
    fleet.replicas[old].take().unwrap().abort();
    wait_for(
        "a new holder after the ttl",
        Duration::from_secs(20),
        || async { fleet.statuses().iter().any(|s| acting(s, old_epoch)) },
    )
    .await;
    let took = started.elapsed();
    eprintln!("takeover without CLIENT: {took:?} (ttl {ttl:?})");
    assert!(
        took >= ttl - renew,
        "{took:?}: before the lease could expire"
    );
    fleet.shutdown().await;
}

/// A replica promoted to master has the lease and its connection record, but
/// none of the old master's connections: the record's client id names
/// nothing there (or another connection). A standby asking the promoted
/// server must not read that as the holder's crash, since the holder may be
/// alive and about to renew over a new connection. Once it renews there, its
/// record names the new server and a close is seen at once again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_of_a_failed_over_master_is_never_read_as_closed() {
    use distributor::edge::redis::{Acquisition, HolderConnection, Renewal, Store};
    let master = RedisServer::start();
    let replica =
        RedisServer::start_with(&["--replicaof", "127.0.0.1", &master.port().to_string()]);
    let op = Duration::from_secs(2);
    let holder = Store::open(&master.url(), TABLE, op).unwrap();
    let Acquisition::Acquired(grant) = holder.acquire(&lease_claim("a")).await.unwrap() else {
        panic!("a free lease")
    };
    let recorded = || async {
        let conn: Option<String> = replica.cmd(&["HGET", &keys().meta, "holder_conn"]).await;
        conn
    };
    let on_master: Option<String> = master.cmd(&["HGET", &keys().meta, "holder_conn"]).await;
    let on_master = on_master.expect("a record");
    assert!(on_master.contains('@'), "names the server: {on_master}");
    wait_for(
        "the replica has the record",
        Duration::from_secs(10),
        || async { recorded().await.as_ref() == Some(&on_master) },
    )
    .await;
    let () = replica.cmd(&["REPLICAOF", "NO", "ONE"]).await;

    // The standby asks the promoted server.
    let standby = Store::open(&replica.url(), TABLE, op).unwrap();
    let watched = || async {
        let Acquisition::Held { record, .. } = standby.acquire(&lease_claim("b")).await.unwrap()
        else {
            panic!("still held")
        };
        record.expect("a record").client
    };
    let old = watched().await;
    assert_eq!(
        standby.holder_connection(old).await.unwrap(),
        HolderConnection::Open,
        "a connection of another server is never seen closed"
    );

    // The holder reconnects to the promoted server and renews there.
    let moved = Store::open(&replica.url(), TABLE, op).unwrap();
    let ttl = Duration::from_secs(30);
    assert_eq!(
        moved.renew(&grant, ttl, op).await.unwrap(),
        Renewal::Renewed
    );
    let new = watched().await;
    assert_ne!(new, old, "the record names the new connection");
    assert_eq!(
        standby.holder_connection(new).await.unwrap(),
        HolderConnection::Open
    );
    drop(moved);
    wait_for(
        "the holder's close is seen",
        Duration::from_secs(10),
        || async { standby.holder_connection(new).await.unwrap() == HolderConnection::Closed },
    )
    .await;
    drop(holder);
}
