//! The scripts as one Redis Functions library: loaded by the first call that
//! finds it missing, run by `FCALL`, kept by a promoted replica (so the first
//! calls after a failover load nothing), reloaded after a `FUNCTION FLUSH`,
//! and replaced by `EVALSHA` where the ACL does not permit Functions.

use std::time::Duration;

use distributor::edge::redis::{Acquisition, Renewal, Store};

use crate::idle::count_in;
use crate::security::{ADMIN_PASSWORD, PASSWORD, create_acl_user, create_acl_user_with};
use crate::support::*;

const OP: Duration = Duration::from_secs(2);

/// The distributor's libraries on `redis` and their function counts.
async fn libraries(redis: &RedisServer) -> Vec<(String, usize)> {
    let list: redis::Value = redis
        .cmd(&["FUNCTION", "LIST", "LIBRARYNAME", "distributor_*"])
        .await;
    let redis::Value::Array(libs) = list else {
        panic!("FUNCTION LIST: {list:?}")
    };
    libs.into_iter()
        .map(|lib| {
            let fields: Vec<redis::Value> = match lib {
                redis::Value::Array(f) => f,
                redis::Value::Map(m) => m.into_iter().flat_map(|(k, v)| [k, v]).collect(),
                other => panic!("a library: {other:?}"),
            };
            let at = |name: &str| {
                fields
                    .chunks(2)
                    .find(|kv| {
                        redis::from_redis_value_ref::<String>(&kv[0])
                            .ok()
                            .as_deref()
                            == Some(name)
                    })
                    .map(|kv| kv[1].clone())
                    .unwrap_or_else(|| panic!("no {name} in {fields:?}"))
            };
            let name: String = redis::from_redis_value_ref(&at("library_name")).unwrap();
            let functions = match at("functions") {
                redis::Value::Array(f) => f.len(),
                other => panic!("functions: {other:?}"),
            };
            (name, functions)
        })
        .collect()
}

async fn stats(redis: &RedisServer) -> String {
    redis.cmd(&["INFO", "commandstats"]).await
}

#[tokio::test]
async fn scripts_run_as_one_library_loaded_once_and_again_after_a_flush() {
    let redis = RedisServer::start();
    let store = Store::open(&redis.url(), TABLE, OP).unwrap();
    let Acquisition::Acquired(grant) = store.acquire(&lease_claim("a")).await.unwrap() else {
        panic!("a free lease")
    };
    let libs = libraries(&redis).await;
    assert_eq!(libs.len(), 1, "{libs:?}");
    assert_eq!(
        libs[0].1,
        distributor::edge::redis::scripts::Which::ALL.len(),
        "every script is a function: {libs:?}"
    );
    let ttl = Duration::from_secs(30);
    for _ in 0..3 {
        assert_eq!(
            store.renew(&grant, ttl, OP).await.unwrap(),
            Renewal::Renewed
        );
    }
    let info = stats(&redis).await;
    assert_eq!(count_in(&info, "function|load"), 1, "loaded once: {info}");
    assert!(count_in(&info, "fcall") >= 4, "{info}");
    assert_eq!(count_in(&info, "evalsha"), 0, "{info}");
    assert_eq!(count_in(&info, "eval"), 0, "{info}");

    // Gone (a flush, a restart without persistence): loaded again by the
    // call that finds it missing, which then runs.
    let () = redis.cmd(&["FUNCTION", "FLUSH"]).await;
    assert_eq!(
        store.renew(&grant, ttl, OP).await.unwrap(),
        Renewal::Renewed
    );
    assert_eq!(libraries(&redis).await, libs);
    let info = stats(&redis).await;
    assert_eq!(count_in(&info, "function|load"), 2, "{info}");
    assert_eq!(count_in(&info, "evalsha"), 0, "{info}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promoted_replica_runs_the_library_without_loading_it() {
    let master = RedisServer::start();
    let replica =
        RedisServer::start_with(&["--replicaof", "127.0.0.1", &master.port().to_string()]);
    let holder = Store::open(&master.url(), TABLE, OP).unwrap();
    let Acquisition::Acquired(grant) = holder.acquire(&lease_claim("a")).await.unwrap() else {
        panic!("a free lease")
    };
    let libs = libraries(&master).await;
    wait_for(
        "the replica has the library",
        Duration::from_secs(10),
        || async { libraries(&replica).await == libs },
    )
    .await;
    let () = replica.cmd(&["REPLICAOF", "NO", "ONE"]).await;
    let loads = count_in(&stats(&replica).await, "function|load");

    let moved = Store::open(&replica.url(), TABLE, OP).unwrap();
    let ttl = Duration::from_secs(30);
    assert_eq!(
        moved.renew(&grant, ttl, OP).await.unwrap(),
        Renewal::Renewed
    );
    let info = stats(&replica).await;
    assert_eq!(
        count_in(&info, "function|load"),
        loads,
        "nothing loaded: {info}"
    );
    assert_eq!(count_in(&info, "evalsha"), 0, "{info}");
    assert!(count_in(&info, "fcall") >= 1, "{info}");
    drop(holder);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_functions_in_the_acl_scripts_run_by_evalsha() {
    let redis = RedisServer::start_with(&["--requirepass", ADMIN_PASSWORD]);
    create_acl_user_with(&redis, "+client|id +client|list +info").await;
    let url = format!("redis://distributor:{PASSWORD}@127.0.0.1:{}", redis.port());
    let store = Store::open(&url, TABLE, OP).unwrap();
    let Acquisition::Acquired(grant) = store.acquire(&lease_claim("a")).await.unwrap() else {
        panic!("a free lease")
    };
    let ttl = Duration::from_secs(30);
    for _ in 0..3 {
        assert_eq!(
            store.renew(&grant, ttl, OP).await.unwrap(),
            Renewal::Renewed
        );
    }
    assert_eq!(libraries(&redis).await, vec![]);
    let info = stats(&redis).await;
    assert!(count_in(&info, "evalsha") >= 4, "{info}");
    // Refused once, then not asked again within the backoff.
    let refused: u64 = count_in(&info, "fcall");
    assert_eq!(
        refused, 0,
        "a refused command is not counted as a call: {info}"
    );
    let log: Vec<redis::Value> = redis.cmd(&["ACL", "LOG"]).await;
    assert_eq!(log.len(), 1, "one refusal in ACL LOG: {log:?}");

    // With the documented ACL, the same user runs the library.
    create_acl_user(&redis).await;
    let fresh = Store::open(&url, TABLE, OP).unwrap();
    assert_eq!(
        fresh.renew(&grant, ttl, OP).await.unwrap(),
        Renewal::Renewed
    );
    assert_eq!(libraries(&redis).await.len(), 1);
}

/// The lease's renewal and release go on when Redis' memory is full (as
/// they did as scripts, whose `PEXPIRE` Redis allows then): their functions
/// carry `allow-oom`, and the table's state, which only reads, `no-writes`.
#[tokio::test]
async fn renewals_go_on_when_memory_is_full() {
    let redis = RedisServer::start();
    let store = Store::open(&redis.url(), TABLE, OP).unwrap();
    let Acquisition::Acquired(grant) = store.acquire(&lease_claim("a")).await.unwrap() else {
        panic!("a free lease")
    };
    let () = redis
        .cmd(&["CONFIG", "SET", "maxmemory-policy", "noeviction"])
        .await;
    let () = redis.cmd(&["CONFIG", "SET", "maxmemory", "1"]).await;
    let mut c = redis.conn().await;
    let refused: redis::RedisResult<()> = redis::cmd("SET")
        .arg("x")
        .arg("y")
        .query_async(&mut c)
        .await;
    assert!(
        refused.is_err_and(|e| e.code() == Some("OOM")),
        "memory is full"
    );
    let ttl = Duration::from_secs(30);
    assert_eq!(
        store.renew(&grant, ttl, OP).await.unwrap(),
        Renewal::Renewed
    );
    assert!(store.release(&grant).await.unwrap(), "released");
    let () = redis.cmd(&["CONFIG", "SET", "maxmemory", "0"]).await;
}
