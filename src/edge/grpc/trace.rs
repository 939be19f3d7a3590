//! Trace context across the ping RPC: W3C `traceparent` in gRPC metadata,
//! written by the holder's pinger ([`inject`]) and read by the member's
//! responder ([`extract`]), so a worker's ping handling appears under the
//! distributor's cycle. Independent of how spans are exported (that is the
//! daemon's `ops::telemetry`): a member library builds it without the
//! exporter.
//!
//! Guarantees: a missing or malformed `traceparent` only leaves the span
//! without a parent; a context that does not fit in metadata is dropped.

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt;

struct MetadataInjector<'a>(&'a mut tonic::metadata::MetadataMap);

impl Injector for MetadataInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(k), Ok(v)) = (
            tonic::metadata::MetadataKey::from_bytes(key.as_bytes()),
            tonic::metadata::MetadataValue::try_from(value.as_str()),
        ) {
            self.0.insert(k, v);
        }
    }
}

struct MetadataExtractor<'a>(&'a tonic::metadata::MetadataMap);

impl Extractor for MetadataExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0
            .keys()
            .filter_map(|k| match k {
                tonic::metadata::KeyRef::Ascii(k) => Some(k.as_str()),
                tonic::metadata::KeyRef::Binary(_) => None,
            })
            .collect()
    }
}

/// Writes the current span's context into outgoing gRPC metadata (`traceparent`).
pub fn inject(metadata: &mut tonic::metadata::MetadataMap) {
    let cx = tracing::Span::current().context();
    TraceContextPropagator::new().inject_context(&cx, &mut MetadataInjector(metadata));
}

/// Makes `span` a child of the trace context carried by incoming metadata.
pub fn extract(metadata: &tonic::metadata::MetadataMap, span: &tracing::Span) {
    let cx = TraceContextPropagator::new().extract(&MetadataExtractor(metadata));
    let _ = span.set_parent(cx);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_round_trips_through_metadata() {
        let mut md = tonic::metadata::MetadataMap::new();
        MetadataInjector(&mut md).set(
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into(),
        );
        let cx = TraceContextPropagator::new().extract(&MetadataExtractor(&md));
        use opentelemetry::trace::TraceContextExt as _;
        let sc = cx.span().span_context().clone();
        assert!(sc.is_valid());
        assert_eq!(
            sc.trace_id().to_string(),
            "0af7651916cd43dd8448eb211c80319c"
        );
        assert_eq!(sc.span_id().to_string(), "b7ad6b7169203331");
    }
}
