//! Shared by the examples (`#[path]`-included): why a member's Redis cannot
//! be used, in one line, for a worker that gives up at start.
//!
//! A `Member` retries Redis for as long as it runs (an outage later on is
//! ridden out); an application that must not run without it bounds
//! `Member::ready` and, when that runs out, asks Redis once itself to say
//! why.

use std::time::Duration;

use distributor::MemberOptions;
use distributor::edge::redis::url::display_urls;
use distributor::edge::redis::{RedisOptions, Store};

/// The bound of the one call, and of the whole check.
const CALL: Duration = Duration::from_secs(2);
const CHECK: Duration = Duration::from_secs(10);

/// Reads the table's generation once, connected as the member connects
/// (one node, a Redis Cluster, or the master the sentinels name): `None`
/// when Redis answers, else why not, in one line that names the URLs
/// without their passwords.
pub async fn redis_problem(opts: &MemberOptions) -> Option<String> {
    let redis = RedisOptions {
        cluster: opts.redis_cluster,
        sentinel: opts.redis_sentinel.clone(),
        tls: opts.redis_tls.clone(),
        ..RedisOptions::from_urls(&opts.redis_url)
    };
    let problem = match Store::connect(&redis, &opts.table_key, CALL) {
        Err(e) => e.to_string(),
        Ok(store) => match tokio::time::timeout(CHECK, store.read_generation()).await {
            Ok(Ok(_)) => return None,
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no answer within {CHECK:?}"),
        },
    };
    let urls = display_urls(&opts.redis_url);
    let what = match &opts.redis_sentinel {
        Some(s) => format!("the master {:?} through the sentinels {urls}", s.master),
        None if redis.is_cluster() => format!("the Redis Cluster {urls}"),
        None => format!("Redis at {urls}"),
    };
    // The mistake of giving sentinels without their master's name: they are
    // taken as cluster seeds.
    let hint = if opts.redis_sentinel.is_none() && !opts.redis_cluster && redis.urls.len() > 1 {
        " (several URLs without REDIS_SENTINEL_MASTER are Redis Cluster seed nodes)"
    } else {
        ""
    };
    let line = format!("cannot use {what}: {problem}{hint}");
    Some(line.split_whitespace().collect::<Vec<_>>().join(" "))
}
