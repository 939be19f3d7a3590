//! The worker-side ownership check of every scenario. The example workers run
//! with `--events`: each prints one JSON line per acquisition and release on
//! stdout, which goes to a file of its own per process (a restarted worker is
//! a new process with a new file). The test adds markers: `listed` whenever
//! it writes the units list (and when Redis loses it), `exited` when a
//! worker process is gone, `end` at the end. At the end of every scenario
//! [`Journal::check`] gives all of it to the ownership checker of
//! `tests/support/ownership.rs`: no unit with two owners at the same time,
//! fencing tokens growing from owner to owner, every listed unit owned again
//! within the scenario's bound.
//!
//! **Exits.** A process's `exited` marker comes after all of its lines and
//! is dated when the test reaped it (`waitpid` returned): a SIGKILLed process
//! prints nothing more, and it cannot work on anything once it is reaped, so
//! its open holds end there, never later. (Its lease on a unit from the
//! holder's point of view, "deadline after its last read", is the holder's
//! business: the overlap check compares what processes did.) A process that
//! exited by itself (a drain) must have printed a release for everything it
//! acquired: one that did not is a violation, not closed silently.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use crate::support::ownership::{self, Bounds, Report};

/// How a worker process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// SIGKILL (by the test): holds end when the signal was sent.
    Killed,
    /// It exited by itself (SIGTERM: a drain), having released everything.
    Exited,
}

/// One worker process.
struct Life {
    member: String,
    events: PathBuf,
    ended: Option<(Ending, u64)>,
}

#[derive(Default)]
struct State {
    lives: Vec<Life>,
    /// `listed` and `end` markers.
    markers: Vec<String>,
    /// Listings count from [`Journal::arm`] on.
    armed: bool,
}

/// Every worker process's events, and the test's markers.
#[derive(Default)]
pub struct Journal(Mutex<State>);

impl Journal {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A worker process for `member` starts, printing its events to `events`.
    pub fn started(&self, member: &str, events: PathBuf) {
        let mut s = self.state();
        assert!(
            s.lives
                .iter()
                .all(|l| l.member != member || l.ended.is_some()),
            "{member} runs already"
        );
        s.lives.push(Life {
            member: member.to_string(),
            events,
            ended: None,
        });
    }

    /// `member`'s running process ended at `unix_us` (killed: when the signal
    /// was sent; exited by itself: when it was reaped).
    pub fn ended(&self, member: &str, how: Ending, unix_us: u64) {
        let mut s = self.state();
        let life = s
            .lives
            .iter_mut()
            .rev()
            .find(|l| l.member == member && l.ended.is_none())
            .unwrap_or_else(|| panic!("{member} does not run"));
        life.ended = Some((how, unix_us));
    }

    /// The units list from now on (only once armed: before the cluster
    /// converged nobody owes anyone ownership).
    pub fn listed(&self, units: &[String]) {
        let mut s = self.state();
        if s.armed {
            s.markers
                .push(ownership::listed_line(units, ownership::unix_us_now()));
        }
    }

    /// The cluster converged on `units`: liveness counts from now on.
    pub fn arm(&self, units: &[String]) {
        self.state().armed = true;
        self.listed(units);
    }

    /// Every line for the checker. `complete`: every process has ended (or
    /// will print nothing that matters), so a last line without its newline
    /// is given to the checker too (which flags it); otherwise it may be
    /// half written and is left out.
    fn lines(s: &State, complete: bool) -> Vec<String> {
        let mut lines = Vec::new();
        for life in &s.lives {
            lines.extend(read_lines(&life.events, complete));
            if let Some((_, at)) = life.ended {
                lines.push(ownership::exited_line(&life.member, at));
            }
        }
        lines.extend(s.markers.iter().cloned());
        lines
    }

    /// Who holds each unit now, by the events.
    pub fn owners(&self) -> BTreeMap<String, BTreeSet<String>> {
        let s = self.state();
        // Only the intervals matter here, not the liveness verdict.
        let bounds = Bounds {
            reown: std::time::Duration::from_secs(24 * 3600),
        };
        let mut owners: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for i in ownership::check(&Self::lines(&s, false), &bounds).intervals {
            if i.to_us.is_none() {
                owners.entry(i.unit).or_default().insert(i.member);
            }
        }
        owners
    }

    /// What `member`'s last process printed: its event lines, parsed.
    pub fn events_of(&self, member: &str) -> Vec<serde_json::Value> {
        let s = self.state();
        let Some(life) = s.lives.iter().rev().find(|l| l.member == member) else {
            return Vec::new();
        };
        read_lines(&life.events, false)
            .iter()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Every process's event lines so far, parsed.
    pub fn all_events(&self) -> Vec<serde_json::Value> {
        let s = self.state();
        s.lives
            .iter()
            .flat_map(|l| read_lines(&l.events, false))
            .filter_map(|l| serde_json::from_str(&l).ok())
            .collect()
    }

    /// The check, with an `end` marker now. Call it once every worker
    /// process has ended.
    pub fn check(&self, bounds: &Bounds) -> Report {
        let mut s = self.state();
        s.markers
            .push(ownership::end_line(ownership::unix_us_now()));
        let lines = Self::lines(&s, true);
        let mut report = ownership::check(&lines, bounds);
        // A process that exited by itself released what it held.
        for life in &s.lives {
            if let Some((Ending::Exited, _)) = life.ended {
                let own = read_lines(&life.events, true);
                for i in ownership::check(&own, bounds).intervals {
                    if i.to_us.is_none() {
                        report.violations.push(format!(
                            "{} exited by itself still holding {} (acquired with generation {} at {}): no release printed",
                            life.member, i.unit, i.generation, i.from_us
                        ));
                    }
                }
            }
        }
        report
    }

    /// The events files, for a failure message.
    pub fn files(&self) -> Vec<PathBuf> {
        self.state()
            .lives
            .iter()
            .map(|l| l.events.clone())
            .collect()
    }
}

fn read_lines(path: &Path, complete: bool) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    if !complete && !text.is_empty() && !text.ends_with('\n') {
        lines.pop();
    }
    lines
}
