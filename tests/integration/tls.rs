//! TLS: Redis over `rediss://` with a custom CA and a client certificate, and
//! pings over mutual TLS; a member with a certificate from elsewhere counts as
//! failing, with the reason `tls`.

use std::time::Duration;

use distributor::config::PingTls;
use distributor::edge::tls::TlsFiles;

use crate::security::{ADMIN_PASSWORD, PASSWORD, create_acl_user};
use crate::support::pki::Pki;
use crate::support::*;

/// TLS with client certificates *and* a restricted ACL user: the core
/// scenarios (table, member death, holder crash) on a production-like Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_over_mutual_tls_with_an_acl_user() {
    let pki = Pki::new("redis");
    let (server_cert, server_key) = pki.issue("redis-server", &["127.0.0.1", "localhost"]);
    let (client_cert, client_key) = pki.issue("distributor", &["distributor"]);
    let tls_port = free_port();
    let (port_s, ca_s) = (tls_port.to_string(), pki.ca().display().to_string());
    let (cert_s, key_s) = (
        server_cert.display().to_string(),
        server_key.display().to_string(),
    );
    let redis = RedisServer::start_with(&[
        "--tls-port",
        &port_s,
        "--tls-cert-file",
        &cert_s,
        "--tls-key-file",
        &key_s,
        "--tls-ca-cert-file",
        &ca_s,
        "--tls-auth-clients",
        "yes",
        "--requirepass",
        ADMIN_PASSWORD,
    ]);
    create_acl_user(&redis).await;
    let mut fleet = Fleet::new(redis);
    fleet.config.redis_url = format!("rediss://distributor:{PASSWORD}@127.0.0.1:{tls_port}");
    let files = TlsFiles {
        ca: vec![pki.ca()],
        cert: Some(client_cert.clone()),
        key: Some(client_key.clone()),
    };
    fleet.config.redis_tls = files.clone();
    let units = units(8);
    fleet.set_units(&units).await;
    for _ in 0..2 {
        let mut opts = fleet.member_options();
        opts.redis_tls = files.clone();
        fleet
            .members
            .push(Some(distributor::Member::start(opts).await.unwrap()));
    }
    fleet.add_replica();
    fleet.add_replica();
    fleet.wait_for_table(&units, Duration::from_secs(10)).await;
    fleet.members[0].take().unwrap().abort();
    let table = fleet.wait_for_table(&units, Duration::from_secs(10)).await;
    let holder = fleet.wait_for_holder().await;
    let generation = fleet.generation().await;
    fleet.replicas[holder].take().unwrap().abort();
    wait_for("a new holder over TLS", Duration::from_secs(10), || async {
        fleet
            .statuses()
            .iter()
            .any(|s| s.role == distributor::Role::Holder && s.cycles >= 3)
    })
    .await;
    assert_eq!(fleet.table().await, table);
    assert_eq!(fleet.generation().await, generation);

    // Without a client certificate the TLS port refuses us.
    let no_cert = TlsFiles {
        ca: vec![pki.ca()],
        ..Default::default()
    };
    let url = format!("rediss://127.0.0.1:{tls_port}");
    let store =
        distributor::edge::redis::Store::open_tls(&url, TABLE, Duration::from_secs(2), &no_cert)
            .unwrap();
    assert!(store.read_table().await.is_err());
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pings_over_mutual_tls_and_a_stranger_fails_with_reason_tls() {
    let pki = Pki::new("pings");
    let stranger_ca = Pki::new("stranger");
    let (member_cert, member_key) = pki.issue("member", &["127.0.0.1", "localhost"]);
    let (holder_cert, holder_key) = pki.issue("holder", &["holder"]);
    let (bad_cert, bad_key) = stranger_ca.issue("impostor", &["127.0.0.1"]);

    let mut fleet = Fleet::new(RedisServer::start());
    fleet.config.ping_tls = Some(PingTls {
        files: TlsFiles {
            ca: vec![pki.ca()],
            cert: Some(holder_cert),
            key: Some(holder_key),
        },
        domain: None,
    });
    let units = units(9);
    fleet.set_units(&units).await;
    // Members serve TLS and require a client certificate from our CA.
    let member_tls = TlsFiles {
        ca: vec![pki.ca()],
        cert: Some(member_cert),
        key: Some(member_key),
    };
    for _ in 0..2 {
        let mut opts = fleet.member_options();
        opts.tls = Some(member_tls.clone());
        fleet
            .members
            .push(Some(distributor::Member::start(opts).await.unwrap()));
    }
    // One member presents a certificate from another CA; one speaks plaintext.
    let mut opts = fleet.member_options();
    opts.tls = Some(TlsFiles {
        ca: vec![pki.ca()],
        cert: Some(bad_cert),
        key: Some(bad_key),
    });
    let impostor = distributor::Member::start(opts).await.unwrap();
    let plain = distributor::Member::start(fleet.member_options())
        .await
        .unwrap();
    let r = fleet.add_replica();
    fleet.wait_for_table(&units, Duration::from_secs(10)).await;
    let table = fleet.table().await;
    assert!(table.units_of(impostor.id()).is_empty() && table.units_of(plain.id()).is_empty());

    let metrics = fleet.replicas[r].as_ref().unwrap().metrics();
    wait_for("tls failures counted", Duration::from_secs(5), || {
        let samples = parse_metrics(&metrics.encode());
        let tls = metric(
            &samples,
            "distributor_ping_failures_total",
            &[("reason", "tls")],
        )
        .unwrap_or(0.0);
        async move { tls >= 2.0 }
    })
    .await;
    // The members demand our client certificate: a holder without one fails.
    let good = fleet.member_id(0);
    let anonymous = distributor::edge::tls::ping_client(
        &TlsFiles {
            ca: vec![pki.ca()],
            ..Default::default()
        },
        None,
    )
    .unwrap();
    let pinger =
        distributor::edge::grpc::Pinger::new(Duration::from_secs(2), None).with_tls(anonymous);
    // TLS 1.3 rejects a missing client certificate only after the client's side
    // of the handshake; the client then sees an alert, a reset or nothing at all
    // (a timeout), depending on timing. Any of them is a failed ping.
    let failure = pinger.ping(&good).await;
    assert!(
        failure.is_err(),
        "a holder without a client certificate must not get an answer"
    );
    let full = fleet.config.ping_tls.as_ref().unwrap();
    let pinger = distributor::edge::grpc::Pinger::new(Duration::from_secs(2), None)
        .with_tls(distributor::edge::tls::ping_client(&full.files, None).unwrap());
    pinger.ping(&good).await.unwrap();
    impostor.shutdown().await;
    plain.shutdown().await;
    fleet.shutdown().await;
}
