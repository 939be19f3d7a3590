//! The holder's view in a member's ownership (protocol version 2): pings,
//! a change of Redis server, lost writes, the freeze and thaw they cause,
//! and the statement a recovery asks for. Pure; the rules are those of
//! `core::ownership`'s module documentation, under "Rules of the holder's
//! view".

use std::collections::BTreeMap;
use std::time::Instant;

use super::Ownership;
use crate::core::handoff::{HeldReport, PingView, RecoveryTag};

impl Ownership {
    /// A ping received at `now`, with what it says of its holder (`None`
    /// from a holder that says nothing). Returns whether to answer it OK:
    /// `false` while fenced (or stopped).
    ///
    /// A ping of a lower epoch than one already seen counts as contact but
    /// refreshes no hold. A ping that names another Redis server than the
    /// last one did ends what reads of the old server can extend: holds
    /// refreshed by them end the deadline after the last ping that named
    /// that server.
    pub fn ping(&mut self, now: Instant, view: Option<PingView>) -> bool {
        // Holds that ended before this ping stay ended.
        self.expire(now);
        self.contact_ping = Some(self.contact_ping.map_or(now, |p| p.max(now)));
        let refreshes = view.is_none_or(|v| v.epoch >= self.max_epoch);
        if refreshes {
            if let Some(v) = view {
                let before = self.pinged.and_then(|(p, _)| p.server);
                if let (Some(old), Some(new)) = (before, v.server)
                    && old != new
                    && let Some(last) = self.last_ping
                {
                    self.server_changed(last);
                }
                self.max_epoch = v.epoch;
                self.pinged = Some((v, now));
                if v.recovery.is_some_and(|r| self.held_written != Some(r)) {
                    self.freeze();
                }
            }
            self.last_ping = Some(self.last_ping.map_or(now, |p| p.max(now)));
            self.thaw();
        }
        self.update_contact(now);
        self.try_acquire(now);
        !self.fenced
    }

    /// The holder writes on another server than the one the last ping
    /// named: reads of that one refreshed the holds up to `last` (the last
    /// ping naming it) at most.
    fn server_changed(&mut self, last: Instant) {
        if let Some(p) = &mut self.processed {
            p.shown = p.shown.min(last);
        }
        for s in self.stopping.values_mut() {
            s.shown = s.shown.min(last);
        }
        self.revision += 1;
    }

    /// A read showed that Redis lost writes this member saw: the tables it
    /// missed are unknown (the next generation it processes is reported),
    /// its last report is written again at once, also re-registering, and
    /// nothing more starts from the rows processed so far.
    pub(super) fn lost_writes(&mut self) {
        if !self.missed {
            self.reassert = true;
        }
        self.missed = true;
        self.freeze();
    }

    /// Nothing more starts from the rows processed so far (see `frozen`).
    pub(super) fn freeze(&mut self) {
        if self.frozen.is_none() {
            self.frozen = Some(self.generation());
        }
    }

    /// Units start again once a generation above the one processed when
    /// the freeze began was processed, and the holder's last ping (if it
    /// says anything) names no recovery and a generation at most the one
    /// processed: a table written after the recovery's plan.
    pub(super) fn thaw(&mut self) {
        let Some(at) = self.frozen else { return };
        let g = self.generation();
        let numbered = self.processed.as_ref().is_some_and(|p| p.numbered);
        let pinged_ok = self
            .pinged
            .is_none_or(|(v, _)| v.recovery.is_none() && v.generation <= g);
        if numbered && g > at && pinged_ok {
            self.frozen = None;
        }
    }

    /// Whether a lower generation than the last processed was read since
    /// the last processed one (and a registration and report are due again).
    pub fn reassert_due(&self) -> bool {
        self.reassert
    }

    /// The statement the holder's recovery asks for (a ping named a
    /// recovery whose statement was not written yet), if due: every unit
    /// worked on within its hold (owned, or being stopped), with its token,
    /// and the last processed generation. From now on nothing starts from
    /// the rows processed so far, only from a later generation: so after
    /// the statement this member works only on what it names and what a
    /// holder that read it writes. Pass the outcome of its write to
    /// [`Ownership::held_written`].
    pub fn held_due(&mut self, now: Instant) -> Option<HeldReport> {
        let tag = self.pinged.and_then(|(v, _)| v.recovery)?;
        if self.held_written == Some(tag) || self.held_building == Some(tag) {
            return None;
        }
        self.expire(now);
        let owned_end = self.owned_end();
        let mut units: BTreeMap<String, u64> = BTreeMap::new();
        if owned_end.is_some_and(|end| now < end) && !self.stopped {
            units.extend(self.owned.iter().map(|(u, t)| (u.clone(), t.0)));
        }
        units.extend(
            self.stopping
                .iter()
                .filter(|(_, s)| match s.failed {
                    Some(end) => now < end,
                    None => !s.overran && now < self.end_of(s.shown),
                })
                .map(|(u, s)| (u.clone(), s.token.0)),
        );
        self.freeze();
        self.held_building = Some(tag);
        Some(HeldReport {
            tag,
            processed: self.generation(),
            units,
        })
    }

    /// The statement for `tag` was written (`ok`), or its write failed (it
    /// is due again).
    pub fn held_written(&mut self, tag: RecoveryTag, ok: bool) {
        if self.held_building == Some(tag) {
            self.held_building = None;
        }
        if ok {
            self.held_written = Some(tag);
        }
    }
}
