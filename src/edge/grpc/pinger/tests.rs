//! The pinger against real sockets on loopback: tasks that panic, timeouts,
//! refusals, first contacts taking turns.

use super::*;

use futures::StreamExt as _;

#[tokio::test]
async fn a_ping_task_that_panics_still_names_its_member() {
    let mut set = PingSet::new();
    set.push(PingTask::new(
        "a:1".into(),
        tokio::spawn(async { panic!("a ping task failed") }),
    ));
    let ok = PingReport {
        member: "b:1".into(),
        result: Ok(Duration::from_millis(1)),
        at: clock::now(),
        opened: None,
    };
    set.push(PingTask::new("b:1".into(), tokio::spawn(async move { ok })));
    let mut done: Vec<(String, bool)> = Vec::new();
    while let Some((member, report)) = set.next().await {
        done.push((member, report.is_some()));
    }
    done.sort();
    assert_eq!(done, [("a:1".into(), false), ("b:1".into(), true)]);
}

/// A closed port (nothing listens) and a silent one (accepts
/// connections, never answers, while the task returned runs).
async fn closed_and_silent() -> (String, String, tokio::task::JoinHandle<()>) {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_addr = closed.local_addr().unwrap().to_string();
    drop(closed);
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_addr = silent.local_addr().unwrap().to_string();
    let keep = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = silent.accept().await {
            held.push(s);
        }
    });
    (closed_addr, silent_addr, keep)
}

/// Refused (nothing listens: the process is gone) is told apart from a
/// member that does not answer: only the first lets its units move at once.
#[tokio::test]
async fn a_closed_port_is_refused_and_a_silent_one_times_out() {
    let (closed_addr, silent_addr, _keep) = closed_and_silent().await;
    let pinger = Pinger::new(Duration::from_millis(300), None);
    let r = pinger.ping(&closed_addr).await;
    assert!(matches!(r, Err(PingFailure::Refused(_))), "{r:?}");
    let r = pinger.ping(&silent_addr).await;
    assert!(matches!(r, Err(PingFailure::Timeout)), "{r:?}");
}

/// First contacts take turns, each with its whole allowance from its
/// own turn: a member behind a hung one answers (here, is refused)
/// only once the hung one's contact ends.
#[tokio::test]
async fn first_contacts_take_turns() {
    use futures::StreamExt as _;
    let (closed_addr, silent_addr, _keep) = closed_and_silent().await;
    for (turns, waits) in [(1, true), (2, false)] {
        let pinger = Pinger::new(Duration::from_millis(300), None).with_contact_turns(turns);
        let started = clock::now();
        let mut set = pinger.ping_tasks(&[silent_addr.clone(), closed_addr.clone()]);
        let refused = loop {
            let (_, report) = set.next().await.expect("the closed port's report");
            match report {
                Some(r) if r.member == closed_addr => break r,
                _ => {}
            }
        };
        assert!(matches!(refused.result, Err(PingFailure::Refused(_))));
        let waited = started.elapsed();
        assert_eq!(
            waited >= FIRST_CONTACT - Duration::from_millis(100),
            waits,
            "{turns} turn(s): refused after {waited:?}"
        );
    }
}
