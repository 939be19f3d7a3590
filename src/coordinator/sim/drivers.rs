//! What runs beside the replicas in a simulated fleet: the members' reads,
//! stops and hold ends in time order (`drive_members`), and the lagging
//! replica's copies of the keyspace that a failover may promote
//! (`keep_copies`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::world::World;
use crate::edge::clock;

/// How long the copies of the keyspace go back (a promoted replica lagged
/// by at most this).
const COPIES_KEPT: Duration = Duration::from_secs(2);

/// A replica's copy of the keyspace, taken every few milliseconds when it
/// changed: a failover to a replica that lagged restores one of them.
pub(super) async fn keep_copies(world: Arc<Mutex<World>>) {
    let mut copied = None;
    loop {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let now = clock::now();
        let mut w = world.lock().expect("world lock");
        let copy = {
            let s = w.server.lock().expect("server lock");
            let at = (s.run, s.keyspace.changes());
            (copied != Some(at)).then(|| {
                copied = Some(at);
                s.keyspace.copy()
            })
        };
        if let Some(copy) = copy {
            w.copies.push_back((now, copy));
        }
        // The newest copy older than the window stays: a replica lags by
        // at most the window, and holds at least that copy.
        while w.copies.len() > 1 && w.copies[1].0 + COPIES_KEPT <= now {
            w.copies.pop_front();
        }
    }
}

/// Every member's reads, stops and hold ends, in time order.
pub(super) async fn drive_members(world: Arc<Mutex<World>>) {
    loop {
        let wake = {
            let w = world.lock().expect("world lock");
            let now = clock::now();
            (0..w.members.len())
                .map(|i| w.member_wake(i, now))
                .min()
                .unwrap_or_else(|| clock::now() + Duration::from_millis(100))
        };
        tokio::time::sleep_until(wake.max(clock::now() + Duration::from_millis(1)).into()).await;
        let now = clock::now();
        let mut w = world.lock().expect("world lock");
        if std::env::var_os("SIM_DEBUG").is_some() {
            eprintln!("{} members wake", w.ms(now));
        }
        let due: Vec<usize> = w
            .restart_at
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(i, _)| *i)
            .collect();
        for i in due {
            w.restart_member(i, now);
        }
        for i in 0..w.members.len() {
            if !w.members[i].active(now) {
                // A paused or dead process does nothing; its reads resume
                // when it does.
                let m = &mut w.members[i];
                if m.next_read <= now {
                    m.next_read = now + m.read_every;
                }
                continue;
            }
            if w.members[i].next_read <= now {
                let every = w.members[i].read_every;
                w.members[i].next_read = now + every;
                w.member_read(i, now);
                if !w.members[i].alive {
                    // It crashed on what it read (a poison unit).
                    continue;
                }
            }
            w.member_refresh(i, now);
            w.member_tick(i, now);
        }
    }
}
