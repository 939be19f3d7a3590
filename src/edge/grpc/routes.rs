//! Two gRPC services on one server, routed by path (`/<package.Service>/<Method>`)
//! as tonic's own router does, without the HTTP router (axum) that tonic's
//! `router` feature pulls in: the member library serves its ping and health
//! services with this, so a worker does not build an HTTP framework.
//!
//! Guarantees: a request goes to the service its path names, readied before
//! it is called; a path naming neither is answered `UNIMPLEMENTED`, as
//! tonic's router answers it.

use std::convert::Infallible;
use std::task::{Context, Poll};

use tonic::body::Body;
use tonic::codegen::{BoxFuture, Service, http};
use tonic::server::NamedService;

/// Routes each request to `first` or `second` by the service name in its path.
#[derive(Clone)]
pub(crate) struct TwoServices<A, B> {
    first: A,
    second: B,
}

impl<A, B> TwoServices<A, B> {
    pub(crate) fn new(first: A, second: B) -> TwoServices<A, B> {
        TwoServices { first, second }
    }
}

/// Whether `path` is a method of the service named `name`.
fn names(path: &str, name: &str) -> bool {
    path.strip_prefix('/')
        .and_then(|p| p.strip_prefix(name))
        .is_some_and(|rest| rest.len() > 1 && rest.starts_with('/'))
}

/// Readies `svc`, then calls it (the `Service` contract), in one future.
fn oneshot<S>(mut svc: S, req: http::Request<Body>) -> BoxFuture<http::Response<Body>, Infallible>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    Box::pin(async move {
        std::future::poll_fn(|cx| svc.poll_ready(cx)).await?;
        svc.call(req).await
    })
}

impl<A, B> Service<http::Request<Body>> for TwoServices<A, B>
where
    A: Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>
        + NamedService
        + Clone
        + Send
        + 'static,
    A::Future: Send + 'static,
    B: Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>
        + NamedService
        + Clone
        + Send
        + 'static,
    B::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<http::Response<Body>, Infallible>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // Each call readies its own clone of the service it goes to.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let path = req.uri().path();
        if names(path, A::NAME) {
            oneshot(self.first.clone(), req)
        } else if names(path, B::NAME) {
            oneshot(self.second.clone(), req)
        } else {
            Box::pin(async {
                let (parts, ()) = tonic::Status::unimplemented("")
                    .into_http::<()>()
                    .into_parts();
                Ok(http::Response::from_parts(parts, Body::empty()))
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::names;

    #[test]
    fn paths_name_their_service() {
        assert!(names("/proto.GRPCPinger/Ping", "proto.GRPCPinger"));
        assert!(names(
            "/grpc.health.v1.Health/Check",
            "grpc.health.v1.Health"
        ));
        assert!(!names("/proto.GRPCPinger/", "proto.GRPCPinger"));
        assert!(!names("/proto.GRPCPingerX/Ping", "proto.GRPCPinger"));
        assert!(!names("proto.GRPCPinger/Ping", "proto.GRPCPinger"));
        assert!(!names("/grpc.health.v1.Health/Check", "proto.GRPCPinger"));
    }
}
