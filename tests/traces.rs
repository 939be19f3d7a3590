//! Traces: a holder cycle reaches a real OTLP collector as one linked trace,
//! with the member's ping handling joined to it through `traceparent`, and a
//! handoff's grant linked to the write that revoked what it grants.
//! Its own binary, because it installs the process-wide tracing subscriber.

// Real processes on real time: the std clock is the right one here
// (`clippy.toml` disallows it in the crate, whose clock tests pause).
#![allow(clippy::disallowed_methods)]

mod support;

use std::time::Duration;

use support::otlp::{CollectedSpan, Collector};
use support::*;

fn one<'a>(
    spans: &'a [CollectedSpan],
    name: &str,
    pred: impl Fn(&CollectedSpan) -> bool,
) -> &'a CollectedSpan {
    spans
        .iter()
        .find(|s| s.name == name && pred(s))
        .unwrap_or_else(|| {
            panic!(
                "no {name} span matching; got {:#?}",
                spans.iter().map(|s| &s.name).collect::<Vec<_>>()
            )
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cycle_is_one_linked_trace_including_the_members_ping_and_handoffs() {
    let collector = Collector::start().await;
    let endpoint = collector.endpoint();
    let env = move |k: &str| (k == "OTEL_EXPORTER_OTLP_ENDPOINT").then(|| endpoint.clone());
    let provider = distributor::ops::telemetry::tracer_provider(true, &env).unwrap();
    assert!(provider.is_some(), "an endpoint turns export on");
    let telemetry = distributor::ops::telemetry::init("warn", false, provider);

    let units = units(6);
    let (mut fleet, _) = Fleet::converged(|_| {}, 2, 1, &units).await;
    // A member dies: the next cycles have a failed ping and a table write.
    let dead = fleet.member_id(0);
    fleet.members[0].take().unwrap().abort();
    fleet.wait_for_table(&units, Duration::from_secs(5)).await;
    let live = fleet.member_id(1);
    // A member joins: units move from the live one (revoked, acknowledged,
    // granted in a later write).
    fleet.add_member().await;
    fleet.wait_for_table(&units, Duration::from_secs(10)).await;
    fleet.shutdown().await;
    telemetry.shutdown(Duration::from_secs(10)).await;

    let spans = collector.spans();
    assert!(
        spans.iter().all(|s| s.service_name == "distributor"),
        "service.name defaults to distributor"
    );
    let by_id = |id: &[u8]| spans.iter().find(|s| s.span_id == id);

    // The cycle that noticed the death and wrote the table: a handoff cycle
    // applying the refused ping sent when the member's connection closed
    // (its `refused` span), or a full cycle whose ping failed once.
    let noticed = spans
        .iter()
        .find(|s| {
            let one_failed = match s.name.as_str() {
                "refused" => s.attributes.get("members").map(String::as_str) == Some("1"),
                "ping" => s.attributes.get("failed").map(String::as_str) == Some("1"),
                _ => false,
            };
            one_failed
                && by_id(&s.parent_span_id).is_some_and(|c| {
                    c.attributes.get("changed").map(String::as_str) == Some("true")
                })
        })
        .expect("a cycle that noticed the death");
    assert_eq!(
        noticed.status_code, 2,
        "failed pings mark the span as error"
    );
    let cycle = by_id(&noticed.parent_span_id).unwrap();
    assert_eq!(cycle.name, "cycle");
    let full = noticed.name == "ping";
    assert_eq!(cycle.attributes.get("units").map(String::as_str), Some("6"));
    assert_eq!(cycle.attributes.get("live").map(String::as_str), Some("1"));
    assert_eq!(
        cycle.attributes.get("failed").map(String::as_str),
        Some("1")
    );
    assert!(cycle.attributes.contains_key("epoch") && cycle.attributes.contains_key("generation"));
    let children: &[&str] = if full {
        &["read_inputs", "ping", "assign", "write_table"]
    } else {
        &["refused", "assign", "write_table"]
    };
    for child in children {
        let c = one(&spans, child, |s| s.parent_span_id == cycle.span_id);
        assert_eq!(c.trace_id, cycle.trace_id, "{child} in the cycle's trace");
    }
    let write = one(&spans, "write_table", |s| s.parent_span_id == cycle.span_id);
    assert_eq!(
        write.attributes.get("generation"),
        cycle.attributes.get("generation")
    );
    assert!(
        cycle
            .events
            .iter()
            .any(|(_, a)| a.get("group").map(String::as_str) == Some(SERVICES)),
        "{:?}",
        cycle.events
    );

    // The live member's handling of a ping is a child of a distributor ping span.
    let member_ping = one(&spans, "member_ping", |s| {
        s.attributes.get("member") == Some(&live)
    });
    let parent =
        by_id(&member_ping.parent_span_id).expect("member_ping joined the distributor's trace");
    assert_eq!(parent.name, "ping");
    assert_eq!(parent.trace_id, member_ping.trace_id);
    assert!(
        !spans.iter().any(|s| s.name == "member_ping"
            && s.attributes.get("member") == Some(&dead)
            && s.trace_id == cycle.trace_id),
        "a dead member answers nothing"
    );

    // The write that granted moved units links to the write that revoked them.
    let grant = one(&spans, "write_table", |s| {
        s.attributes.get("moved").is_some_and(|m| m != "0") && !s.links.is_empty()
    });
    for (trace, span) in &grant.links {
        let revoke = by_id(span).expect("the linked revocation was exported");
        assert_eq!(&revoke.trace_id, trace);
        assert_eq!(revoke.name, "write_table");
        assert_ne!(
            revoke.attributes.get("revoked").map(String::as_str),
            Some("0")
        );
        let (r, g) = (
            &revoke.attributes["generation"],
            &grant.attributes["generation"],
        );
        assert!(
            r.parse::<u64>().unwrap() < g.parse::<u64>().unwrap(),
            "{r} then {g}"
        );
    }

    // Lease transitions are spans of their own.
    one(&spans, "lease", |s| {
        s.attributes.get("transition").map(String::as_str) == Some("acquired")
    });
    one(&spans, "lease", |s| {
        s.attributes.get("transition").map(String::as_str) == Some("released")
    });
}
