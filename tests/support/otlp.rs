//! An in-test OpenTelemetry collector: a real OTLP/gRPC TraceService on loopback
//! that keeps every span it receives, so tests can assert names, parent links and
//! attributes of what the daemon exports.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value;

/// A span as received, flattened for assertions.
#[derive(Debug, Clone)]
pub struct CollectedSpan {
    pub name: String,
    pub trace_id: Vec<u8>,
    pub span_id: Vec<u8>,
    pub parent_span_id: Vec<u8>,
    pub attributes: BTreeMap<String, String>,
    /// 0 unset, 1 ok, 2 error.
    pub status_code: i32,
    pub status_message: String,
    pub events: Vec<(String, BTreeMap<String, String>)>,
    /// Links to other spans: (trace id, span id).
    pub links: Vec<(Vec<u8>, Vec<u8>)>,
    pub service_name: String,
}

fn flatten(attrs: &[KeyValue]) -> BTreeMap<String, String> {
    attrs
        .iter()
        .map(|kv| {
            let v = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(Value::StringValue(s)) => s.clone(),
                Some(Value::IntValue(i)) => i.to_string(),
                Some(Value::BoolValue(b)) => b.to_string(),
                Some(Value::DoubleValue(d)) => d.to_string(),
                other => format!("{other:?}"),
            };
            (kv.key.clone(), v)
        })
        .collect()
}

#[derive(Clone, Default)]
struct Sink(Arc<Mutex<Vec<CollectedSpan>>>);

#[tonic::async_trait]
impl TraceService for Sink {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut out = self.0.lock().unwrap();
        for rs in request.into_inner().resource_spans {
            let resource = flatten(
                rs.resource
                    .as_ref()
                    .map(|r| r.attributes.as_slice())
                    .unwrap_or(&[]),
            );
            let service_name = resource.get("service.name").cloned().unwrap_or_default();
            for ss in rs.scope_spans {
                for s in ss.spans {
                    out.push(CollectedSpan {
                        name: s.name,
                        trace_id: s.trace_id,
                        span_id: s.span_id,
                        parent_span_id: s.parent_span_id,
                        attributes: flatten(&s.attributes),
                        status_code: s.status.as_ref().map_or(0, |st| st.code),
                        status_message: s.status.map(|st| st.message).unwrap_or_default(),
                        events: s
                            .events
                            .into_iter()
                            .map(|e| (e.name, flatten(&e.attributes)))
                            .collect(),
                        links: s
                            .links
                            .into_iter()
                            .map(|l| (l.trace_id, l.span_id))
                            .collect(),
                        service_name: service_name.clone(),
                    });
                }
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

/// A running collector; stops when dropped.
pub struct Collector {
    pub addr: SocketAddr,
    sink: Sink,
    task: tokio::task::JoinHandle<()>,
}

impl Collector {
    pub async fn start() -> Collector {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let sink = Sink::default();
        let service = TraceServiceServer::new(sink.clone());
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
        let task = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(incoming)
                .await;
        });
        Collector { addr, sink, task }
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn spans(&self) -> Vec<CollectedSpan> {
        self.sink.0.lock().unwrap().clone()
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.task.abort();
    }
}
