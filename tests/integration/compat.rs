//! Wire compatibility: the exact ping path, gRPC health, and a worker that uses
//! nothing but raw Redis commands and a bare gRPC server.

use std::time::Duration;

use tonic::codegen::http::uri::PathAndQuery;
use tonic_prost::ProstCodec;

use crate::support::*;

#[tokio::test]
async fn member_answers_the_go_ping_path_and_grpc_health() {
    let redis = RedisServer::start();
    let fleet = Fleet::new(redis);
    let member = distributor::Member::start(fleet.member_options())
        .await
        .unwrap();
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", member.id()))
        .unwrap()
        .connect()
        .await
        .unwrap();

    // The literal path the Go implementation calls, with google.protobuf.Empty
    // (an empty message) both ways.
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready().await.unwrap();
    let path = PathAndQuery::from_static("/proto.GRPCPinger/Ping");
    let reply: tonic::Response<()> = grpc
        .unary(
            tonic::Request::new(()),
            path,
            ProstCodec::<(), ()>::default(),
        )
        .await
        .unwrap();
    assert_eq!(reply.into_inner(), ());

    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    for service in ["", "proto.GRPCPinger"] {
        let status = health
            .check(tonic_health::pb::HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner()
            .status;
        assert_eq!(
            status,
            tonic_health::pb::health_check_response::ServingStatus::Serving as i32,
            "{service:?}"
        );
    }
    member.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_using_only_redis_commands_and_a_grpc_server_gets_work() {
    let mut fleet = Fleet::new(RedisServer::start());
    let units = units(12);
    fleet.set_units(&units).await;
    // A "foreign" worker: a plain gRPC server with the ping service, registered
    // with a plain LPUSH, reading its row with a plain HGET.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(distributor::edge::grpc::ping_service())
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    let () = fleet.redis.cmd(&["LPUSH", SERVICES, &addr]).await;
    fleet.add_member().await;
    fleet.add_replica();

    wait_for(
        "the foreign worker's row",
        Duration::from_secs(10),
        || async {
            let row: Option<String> = fleet.redis.cmd(&["HGET", TABLE, &addr]).await;
            row.is_some()
        },
    )
    .await;
    let mine: String = fleet.redis.cmd(&["HGET", TABLE, &addr]).await;
    let table = fleet.table().await;
    let others = table.units_of(&fleet.member_id(0)).len();
    assert_eq!(mine.split(',').count() + others, 12);
    server.abort();
    fleet.shutdown().await;
}
