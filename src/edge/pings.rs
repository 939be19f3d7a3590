//! What a holder cycle asks of the members' pings, as a trait: a task per
//! member that reports its answer (a call, or a beat on its stream), and
//! forgetting members no longer listed. [`crate::edge::grpc::Pinger`] pings
//! over gRPC; the simulation answers from its simulated members.

use std::collections::HashSet;

use crate::core::handoff::PingView;
use crate::edge::grpc::{PingSet, Pinger};

/// Pings members for a holder cycle.
pub trait MemberPings: Clone + Send + Sync + 'static {
    /// One ping per member, each its own task; a report per member.
    fn ping_tasks(&self, members: &[String]) -> PingSet;

    /// Forgets (closes) what is kept for members not in `listed`.
    fn retain(&self, listed: &HashSet<&str>);

    /// What every ping from now on tells the members of the holder.
    fn set_view(&self, view: Option<PingView>);

    /// How many pings went as beats on members' streams, in all.
    fn beats_sent(&self) -> u64 {
        0
    }
}

impl MemberPings for Pinger {
    fn ping_tasks(&self, members: &[String]) -> PingSet {
        Pinger::ping_tasks(self, members)
    }

    fn retain(&self, listed: &HashSet<&str>) {
        Pinger::retain(self, listed)
    }

    fn set_view(&self, view: Option<PingView>) {
        Pinger::set_view(self, view)
    }

    fn beats_sent(&self) -> u64 {
        Pinger::beats_sent(self)
    }
}
