//! gRPC services on one server, routed by path (`/<package.Service>/<Method>`)
//! as tonic's own router does, without the HTTP router (axum) that tonic's
//! `router` feature pulls in: the member library serves its ping, beat and
//! health services with this, so a worker does not build an HTTP framework.
//!
//! Guarantees: a request goes to the service its path names, readied before
//! it is called; a path naming none is answered `UNIMPLEMENTED`, as tonic's
//! router answers it.

use std::convert::Infallible;
use std::task::{Context, Poll};

use tonic::body::Body;
use tonic::codegen::{BoxFuture, Service, http};
use tonic::server::NamedService;

/// Routes each request to `first` when its path names `first`'s service,
/// else to `rest` (more routes, ending with [`Unimplemented`]).
#[derive(Clone)]
pub(crate) struct Route<A, B> {
    first: A,
    rest: B,
}

impl<A, B> Route<A, B> {
    pub(crate) fn new(first: A, rest: B) -> Route<A, B> {
        Route { first, rest }
    }
}

/// The end of the routes: answers `UNIMPLEMENTED`.
#[derive(Clone, Copy)]
pub(crate) struct Unimplemented;

impl Service<http::Request<Body>> for Unimplemented {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<http::Response<Body>, Infallible>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: http::Request<Body>) -> Self::Future {
        Box::pin(async {
            let (parts, ()) = tonic::Status::unimplemented("")
                .into_http::<()>()
                .into_parts();
            Ok(http::Response::from_parts(parts, Body::empty()))
        })
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

impl<A, B> Service<http::Request<Body>> for Route<A, B>
where
    A: Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>
        + NamedService
        + Clone
        + Send
        + 'static,
    A::Future: Send + 'static,
    B: Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>
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
        } else {
            oneshot(self.rest.clone(), req)
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
