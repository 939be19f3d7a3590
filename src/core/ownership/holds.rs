//! Holds in a member's ownership: when each ends (`deadline` after the
//! earlier of the last processed read that showed the unit and the last
//! ping), contact and self-fencing, revocations, acquisitions and the
//! application's stops. Pure: time comes in as `now`.
//!
//! Guarantee: no unit is owned past its hold's end, and an ended hold
//! never comes back (every public call ends the holds that ended by `now`
//! before it records anything).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::{FencingToken, Ownership, Revocation, Step, Stopping, Tenure};

impl Ownership {
    /// Ends the holds that ended by `now`; call it at [`Ownership::next_wake`].
    pub fn tick(&mut self, now: Instant) {
        self.expire(now);
        self.update_contact(now);
    }

    /// The application stopped `units` (revoked earlier). Returns those that
    /// it stopped after their hold had ended, with how long after.
    pub fn revoked(&mut self, now: Instant, units: &[String]) -> Vec<(Tenure, Duration)> {
        // Before the holds that ended are ended: a unit stopped now is
        // reported late here, not also as overrunning.
        let mut late = Vec::new();
        for u in units {
            if let Some(s) = self.stopping.remove(u) {
                let end = self.end_of(s.shown);
                if now > end && !s.fenced {
                    late.push((
                        Tenure {
                            unit: u.clone(),
                            token: s.token,
                        },
                        now - end,
                    ));
                }
            }
        }
        self.expire(now);
        self.update_contact(now);
        self.try_acquire(now);
        late
    }

    /// The application's stop of `units` (revoked earlier) failed: its
    /// handler panicked, so the work may still run. Each counts as stopped
    /// only once its hold has ended (at once if it has), and the report that
    /// acknowledges its revocation waits until then. Returns when the last
    /// of those holds ends.
    pub fn stop_failed(&mut self, now: Instant, units: &[String]) -> Option<Instant> {
        let mut last = None;
        for u in units {
            let Some(end) = self.stopping.get(u).map(|s| self.end_of(s.shown)) else {
                continue;
            };
            if let Some(s) = self.stopping.get_mut(u) {
                s.failed = Some(end);
                last = last.max(Some(end));
            }
        }
        self.expire(now);
        self.update_contact(now);
        self.try_acquire(now);
        last
    }

    /// When the holds of the owned units end (`None`: nothing owned).
    pub(super) fn owned_end(&self) -> Option<Instant> {
        if self.owned.is_empty() {
            return None;
        }
        self.processed.as_ref().map(|p| self.end_of(p.shown))
    }

    /// When a hold refreshed by a read sent at `shown` ends.
    pub(super) fn end_of(&self, shown: Instant) -> Instant {
        match self.last_ping {
            Some(p) => shown.min(p) + self.deadline,
            // Never pinged: no hold (nothing is acquired before a ping).
            None => self.started,
        }
    }

    pub(super) fn contact_end(&self) -> Instant {
        let read = self.last_read.unwrap_or(self.started);
        let ping = self.contact_ping.unwrap_or(self.started);
        read.min(ping) + self.deadline
    }

    pub(super) fn update_contact(&mut self, now: Instant) {
        let fenced = self.stopped || now >= self.contact_end();
        if fenced != self.fenced {
            self.fenced = fenced;
            self.revision += 1;
        }
    }

    /// Ends the holds that ended by `now` (revoked, fenced), and notes
    /// revocations still running past their hold.
    pub(super) fn expire(&mut self, now: Instant) {
        if let Some(end) = self.owned_end()
            && end <= now
        {
            let all: Vec<String> = self.owned.keys().cloned().collect();
            let seen = self.generation();
            self.revoke(all, Revocation::Fenced { ended: end }, seen, true);
        }
        // A failed stop counts as done once its hold ended: no one else
        // can have had the unit before.
        let given_up: Vec<String> = self
            .stopping
            .iter()
            .filter(|(_, s)| s.failed.is_some_and(|end| end <= now))
            .map(|(u, _)| u.clone())
            .collect();
        for u in given_up {
            self.stopping.remove(&u);
        }
        let mut overran: BTreeMap<Instant, Vec<Tenure>> = BTreeMap::new();
        let ends: Vec<(String, Instant)> = self
            .stopping
            .iter()
            .filter(|(_, s)| !s.overran && s.failed.is_none())
            .map(|(u, s)| (u.clone(), self.end_of(s.shown)))
            .filter(|(_, end)| *end <= now)
            .collect();
        for (u, end) in ends {
            let s = self.stopping.get_mut(&u).expect("listed above");
            s.overran = true;
            overran.entry(end).or_default().push(Tenure {
                unit: u,
                token: s.token,
            });
        }
        for (ended, units) in overran {
            self.steps.push(Step::Overran { units, ended });
        }
    }

    pub(super) fn revoke(&mut self, units: Vec<String>, why: Revocation, seen: u64, fenced: bool) {
        if units.is_empty() {
            return;
        }
        let shown = self.processed.as_ref().map_or(self.started, |p| p.shown);
        let mut tenures = Vec::with_capacity(units.len());
        for u in units {
            let Some(token) = self.owned.remove(&u) else {
                continue;
            };
            tenures.push(Tenure {
                unit: u.clone(),
                token,
            });
            self.stopping.insert(
                u,
                Stopping {
                    token,
                    shown,
                    in_row: false,
                    seen,
                    overran: fenced,
                    fenced,
                    failed: None,
                },
            );
        }
        if !tenures.is_empty() {
            self.revision += 1;
            self.steps.push(Step::Revoke {
                units: tenures,
                why,
            });
        }
    }

    /// Acquires the rest of the last processed row, if a written report
    /// names the read's connection, no acknowledgement is owed, and the hold
    /// a read and a ping give is still running.
    pub(super) fn try_acquire(&mut self, now: Instant) {
        if self.draining || self.stopped || self.frozen.is_some() {
            return;
        }
        let Some(p) = &self.processed else {
            return;
        };
        // Owned units are in the row: all of it is owned already. A row
        // older than the table the holder's last ping said Redis holds
        // starts nothing (the holder may have planned past it: a recovery).
        if self.owned.len() == p.row.len()
            || !p.numbered
            || self
                .pinged
                .is_some_and(|(v, _)| p.generation < v.generation)
            || self.written.is_none_or(|w| w.client != p.client)
            || !self.owed.is_empty()
            || self.last_ping.is_none()
            || self.end_of(p.shown) <= now
        {
            return;
        }
        let token = FencingToken(p.generation);
        let new: Vec<Tenure> = p
            .row
            .iter()
            .filter(|u| !self.owned.contains_key(*u) && !self.stopping.contains_key(*u))
            .map(|u| Tenure {
                unit: u.clone(),
                token,
            })
            .collect();
        if new.is_empty() {
            return;
        }
        for t in &new {
            self.owned.insert(t.unit.clone(), token);
        }
        self.revision += 1;
        self.steps.push(Step::Acquire { units: new });
    }
}
