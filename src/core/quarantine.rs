//! Poison units: a unit whose owners keep dying is given to nobody.
//!
//! A unit that crashes any worker holding it (a "key of death") would, with
//! deaths detected in milliseconds, move from worker to worker and take the
//! fleet down. The holder counts, per unit, the deaths of members holding it
//! (lone deaths: the mass-failure guard's deaths do not count) within
//! `-quarantine-window`; at `-quarantine-after` of them, of two members at
//! least, the unit is quarantined: out of the solve, in no row, recorded in
//! `{T}:quarantine` until an operator releases it.
//!
//! Deaths alone cannot tell the poison unit from its companions: units that
//! were in the same dead rows (they moved with it, or a restarted worker got
//! them all back, as the ring gives a member the same units) carry the same
//! evidence. So a unit one death short of the threshold is *held*: given to
//! nobody for a while, and tried alone on a member that never died holding
//! it and holds no other trial (a pin, chosen by hashing; several held
//! units are tried at once on as many members). A trial passes
//! once that member held the unit for its probation without dying; its
//! death names the unit, alone, at the threshold. Deaths a quarantined unit
//! explains (the same member's death, at the same instant) are removed from
//! every other unit's evidence, so its companions go back to work at once.
//! A worker that crash-loops for a reason of its own only ever gives one
//! member's deaths: its units are tried elsewhere, pass, and are never
//! quarantined.
//!
//! Pure: deaths, the stored records, the table's owners, the members and
//! the time come in as values. Guarantees, tested below:
//! - a unit is quarantined only at `after` deaths within the window, of two
//!   distinct members at least (or of its trial's member), and never while
//!   `after` is 0;
//! - a held unit is placed only on trial, and a trial's member holds no
//!   other trial (one that never died holding it when there is one), so a
//!   death in a trial names its unit alone; held units number at most
//!   [`HOLD_LIMIT`] (more candidates than that are not held: holding them
//!   would keep too much work from running while they wait for trials);
//! - a record counts as saved only once a write is confirmed or a read
//!   shows it; a stored record that disappears (an operator's release)
//!   restarts that unit's count;
//! - the excluded set (quarantined and held) changes only through these
//!   calls, and its key names it exactly.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use xxhash_rust::xxh3::Xxh3;

use crate::core::inputs::{check_unit, excerpt};

/// At most this many units are held for trials at once; more candidates
/// than that are not held (see the module documentation).
pub const HOLD_LIMIT: usize = 16;

/// The shortest probation of a trial (see [`QuarantineRule::probation_ms`]).
pub const PROBATION_MIN_MS: u64 = 1_000;

/// When a unit is quarantined (`-quarantine-after`, `-quarantine-window`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuarantineRule {
    /// Distinct members' deaths that quarantine a unit; 0: never.
    pub after: u32,
    /// How long a death counts.
    pub window_ms: u64,
    /// How long a trial's member must hold the unit without dying to clear
    /// it: twice the longest the holder may take to see a death, at least
    /// [`PROBATION_MIN_MS`] ([`QuarantineRule::probation_for`]). A unit
    /// that kills more slowly passes its trial, and is quarantined (with
    /// whatever shares its evidence) at its next death.
    pub probation_ms: u64,
}

impl QuarantineRule {
    pub const OFF: QuarantineRule = QuarantineRule {
        after: 0,
        window_ms: 0,
        probation_ms: PROBATION_MIN_MS,
    };

    /// The probation for a holder that sees a death within `detection`
    /// (failed pings: the poll interval times the failure threshold, plus
    /// a ping's timeout; a closed connection is seen far sooner).
    pub fn probation_for(detection: std::time::Duration) -> u64 {
        (detection.as_millis() as u64)
            .saturating_mul(2)
            .max(PROBATION_MIN_MS)
    }

    pub fn enabled(&self) -> bool {
        self.after > 0
    }
}

/// One death that counts against a unit: the member, and when (unix ms).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Death {
    pub member: String,
    pub at_ms: u64,
}

/// A quarantine as `{T}:quarantine` stores it: `<since_ms>
/// <member>@<ms>,...` (the deaths that caused it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub since_ms: u64,
    pub deaths: Vec<Death>,
}

impl Record {
    pub fn encode(&self) -> String {
        format!("{} {}", self.since_ms, self.deaths_text())
    }

    /// The deaths as the record lists them: `member@ms,...`.
    pub fn deaths_text(&self) -> String {
        let deaths: Vec<String> = self
            .deaths
            .iter()
            .map(|d| format!("{}@{}", d.member, d.at_ms))
            .collect();
        deaths.join(",")
    }

    /// `None` when the value does not parse: the unit stays quarantined
    /// all the same (a field is what quarantines), its record unknown.
    pub fn decode(s: &str) -> Option<Record> {
        let (since, deaths) = s.split_once(' ').unwrap_or((s, ""));
        let since_ms = since.parse().ok()?;
        let deaths = deaths
            .split(',')
            .filter(|d| !d.is_empty())
            .map(|d| {
                let (member, at) = d.rsplit_once('@')?;
                Some(Death {
                    member: member.to_string(),
                    at_ms: at.parse().ok()?,
                })
            })
            .collect::<Option<Vec<Death>>>()?;
        Some(Record { since_ms, deaths })
    }
}

/// A field of `{T}:quarantine` that names no unit (skipped, and reported).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnreadableQuarantine {
    pub field: String,
    pub why: &'static str,
}

/// One death counted against a unit.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Counted {
    member: String,
    at_ms: u64,
    /// The unit was being tried alone on that member.
    trial: bool,
}

/// A held unit being tried: placed alone on its member.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Trial {
    /// The member it is pinned to: one no other trial is on.
    pin: String,
    /// Its owner and since when, once a table gives it one.
    held_by: Option<(String, u64)>,
}

/// What changed in one call, for the log, metrics and the history.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QuarantineEvents {
    /// Units quarantined now, with their records.
    pub quarantined: Vec<(String, Record)>,
    /// Units a read showed released (no longer in `{T}:quarantine`).
    pub released: Vec<String>,
}

impl QuarantineEvents {
    pub fn is_empty(&self) -> bool {
        self.quarantined.is_empty() && self.released.is_empty()
    }

    fn extend(&mut self, other: QuarantineEvents) {
        self.quarantined.extend(other.quarantined);
        self.released.extend(other.released);
    }
}

/// The holder's quarantine book; see the module documentation.
#[derive(Debug, Clone, Default)]
pub struct Quarantine {
    rule: Option<QuarantineRule>,
    /// Unit → the deaths of members holding it, within the window, oldest
    /// first. Shared until written: the holder hands a copy of its view to
    /// every cycle, and a death at 100 × 100,000 leaves evidence on 1,000
    /// units, which only deaths and their window's end change.
    evidence: Arc<BTreeMap<String, Vec<Counted>>>,
    /// `{T}:quarantine` as last read or confirmed written: unit → its
    /// record (`None`: a value that does not parse).
    stored: BTreeMap<String, Option<Record>>,
    /// Whether `stored` was ever read (a disappearance before that is no
    /// release).
    read: bool,
    /// Decided, not yet known to be in Redis.
    unsaved: BTreeMap<String, Record>,
    /// Units that passed a trial: placed as any other from now on.
    tried: BTreeSet<String>,
    /// Held units being tried, each alone on its member, by unit.
    trials: BTreeMap<String, Trial>,
    /// Units held (one death short, not tried), sorted.
    held: BTreeSet<String>,
    /// Events not yet taken by the caller.
    events: QuarantineEvents,
    /// Units quarantined and not yet named by a table write's history
    /// entry.
    unrecorded: BTreeSet<String>,
}

impl Quarantine {
    pub fn new(rule: QuarantineRule) -> Quarantine {
        Quarantine {
            rule: rule.enabled().then_some(rule),
            ..Quarantine::default()
        }
    }

    /// Follows the settings (a holder's rule can change with its replica):
    /// turned off, every count and hold is dropped; stored records stay
    /// (an operator releases them).
    pub fn configure(&mut self, rule: QuarantineRule) {
        let rule = rule.enabled().then_some(rule);
        if self.rule == rule {
            return;
        }
        self.rule = rule;
        if rule.is_none() {
            self.evidence = Arc::default();
            self.tried.clear();
        }
        self.rehold();
    }

    /// A quarantined unit's deaths as its record lists them:
    /// `member@ms,...` (empty: unknown).
    pub fn quarantined_record(&self, unit: &str) -> String {
        self.unsaved
            .get(unit)
            .or_else(|| self.stored.get(unit).and_then(Option::as_ref))
            .map(Record::deaths_text)
            .unwrap_or_default()
    }

    /// Lone deaths, each with the units of the member's row, at `now_ms`:
    /// counted against those units; a unit that reaches the threshold is
    /// quarantined (returned, and unsaved until written). Units quarantined
    /// already gather no evidence.
    pub fn observe_deaths<'a>(
        &mut self,
        deaths: impl IntoIterator<Item = (&'a str, Vec<&'a str>)>,
        now_ms: u64,
    ) -> Vec<String> {
        let Some(rule) = self.rule else {
            return Vec::new();
        };
        self.prune(now_ms);
        let mut touched = BTreeSet::new();
        for (member, units) in deaths {
            for unit in units {
                if self.is_quarantined(unit) {
                    continue;
                }
                let trial = self.trials.get(unit).is_some_and(|t| t.pin == member);
                Arc::make_mut(&mut self.evidence)
                    .entry(unit.to_string())
                    .or_default()
                    .push(Counted {
                        member: member.to_string(),
                        at_ms: now_ms,
                        trial,
                    });
                touched.insert(unit.to_string());
            }
        }
        let reached: Vec<String> = touched
            .into_iter()
            .filter(|u| self.convicts(u, rule))
            .collect();
        // Every unit that reached it is quarantined, ties included (a
        // poison unit among them must not go on), each with its own deaths;
        // then the deaths they explain count against nothing else.
        let records: Vec<(String, Vec<Death>)> = reached
            .iter()
            .map(|unit| {
                let deaths = Arc::make_mut(&mut self.evidence)
                    .remove(unit)
                    .unwrap_or_default()
                    .into_iter()
                    .map(|c| Death {
                        member: c.member,
                        at_ms: c.at_ms,
                    })
                    .collect();
                (unit.clone(), deaths)
            })
            .collect();
        self.forget_deaths(|c| {
            records
                .iter()
                .flat_map(|(_, deaths)| deaths)
                .any(|d| d.member == c.member && d.at_ms == c.at_ms)
        });
        for (unit, deaths) in records {
            let unit = &unit;
            let record = Record {
                since_ms: now_ms,
                deaths,
            };
            self.events.quarantined.push((unit.clone(), record.clone()));
            self.unsaved.insert(unit.clone(), record);
            self.unrecorded.insert(unit.clone());
            self.tried.remove(unit);
        }
        self.rehold();
        reached
    }

    /// Whether `unit`'s evidence quarantines it: `after` deaths, of two
    /// members at least, or one of them on its trial.
    fn convicts(&self, unit: &str, rule: QuarantineRule) -> bool {
        let Some(by) = self.evidence.get(unit) else {
            return false;
        };
        let members: BTreeSet<&str> = by.iter().map(|c| c.member.as_str()).collect();
        by.len() >= rule.after as usize && (members.len() >= 2 || by.iter().any(|c| c.trial))
    }

    /// Forgets the deaths counted at or after `since_ms`: they turned out
    /// to be part of a mass failure (the guard fired for their burst).
    pub fn retract_since(&mut self, since_ms: u64) {
        self.forget_deaths(|c| c.at_ms >= since_ms);
        self.rehold();
    }

    /// `{T}:quarantine` as read: what it holds is quarantined; an unsaved
    /// record it shows is saved; a saved one it no longer shows was
    /// released (its count restarts). Returns the fields that name no unit.
    pub fn observe_stored(&mut self, pairs: Vec<(String, String)>) -> Vec<UnreadableQuarantine> {
        let mut bad = Vec::new();
        let mut stored = BTreeMap::new();
        for (field, value) in pairs {
            match check_unit(field.as_bytes()) {
                Ok(_) => {
                    stored.insert(field, Record::decode(&value));
                }
                Err(why) => bad.push(UnreadableQuarantine {
                    field: excerpt(field.as_bytes()),
                    why,
                }),
            }
        }
        let mut released = Vec::new();
        if self.read {
            for unit in self.stored.keys() {
                if !stored.contains_key(unit) && !self.unsaved.contains_key(unit) {
                    released.push(unit.clone());
                }
            }
        }
        for unit in &released {
            if self.evidence.contains_key(unit) {
                Arc::make_mut(&mut self.evidence).remove(unit);
            }
            self.tried.remove(unit);
        }
        self.unsaved.retain(|u, _| !stored.contains_key(u));
        self.stored = stored;
        self.read = true;
        self.events.extend(QuarantineEvents {
            quarantined: Vec::new(),
            released,
        });
        self.rehold();
        bad
    }

    /// A write of these records was confirmed.
    pub fn saved(&mut self, units: &[String]) {
        for unit in units {
            if let Some(record) = self.unsaved.remove(unit) {
                self.stored.insert(unit.clone(), Some(record));
            }
        }
    }

    /// The records to write (decided, not known to be in Redis).
    pub fn unsaved(&self) -> Vec<(String, String)> {
        self.unsaved
            .iter()
            .map(|(u, r)| (u.clone(), r.encode()))
            .collect()
    }

    /// Moves the trials on at `now_ms`, given a trial unit's owner in the
    /// table members hold (`owner`) and the members that may take units
    /// now (`eligible`): a trial passes once its owner held it for the
    /// probation; each held unit not on trial is tried as soon as a member
    /// is free for it (see below). Deaths past the window are forgotten.
    pub fn tick(&mut self, now_ms: u64, owner: impl Fn(&str) -> Option<String>, eligible: &[&str]) {
        let Some(rule) = self.rule else { return };
        self.prune(now_ms);
        self.rehold();
        let mut passed = Vec::new();
        for (unit, t) in self.trials.iter_mut() {
            match (owner(unit), &t.held_by) {
                (None, _) => t.held_by = None,
                (Some(o), Some((by, _))) if o == *by => {}
                (Some(o), _) => t.held_by = Some((o, now_ms)),
            }
            if let Some((_, since)) = &t.held_by
                && now_ms.saturating_sub(*since) >= rule.probation_ms
            {
                passed.push(unit.clone());
            }
        }
        for unit in passed {
            self.trials.remove(&unit);
            self.tried.insert(unit);
        }
        // A trial whose member can no longer take units is tried again.
        self.trials
            .retain(|_, t| eligible.contains(&t.pin.as_str()));
        self.rehold();
        // Every held unit not on trial gets a member of its own: one that
        // never died holding it and no other trial is on (by hashing), else,
        // when every eligible member died holding it, one of those.
        let held: Vec<String> = self
            .held
            .iter()
            .filter(|u| !self.trials.contains_key(*u))
            .cloned()
            .collect();
        for unit in held {
            let killers: BTreeSet<&str> = self
                .evidence
                .get(&unit)
                .map(|by| by.iter().map(|c| c.member.as_str()).collect())
                .unwrap_or_default();
            let busy: BTreeSet<&str> = self.trials.values().map(|t| t.pin.as_str()).collect();
            let fresh: Vec<&str> = eligible
                .iter()
                .copied()
                .filter(|m| !killers.contains(m))
                .collect();
            let candidates: Vec<&str> = if fresh.is_empty() {
                eligible.to_vec()
            } else {
                fresh
            };
            let pin = candidates
                .into_iter()
                .filter(|m| !busy.contains(m))
                .max_by_key(|m| rendezvous(&unit, m))
                .map(str::to_string);
            if let Some(pin) = pin {
                self.trials.insert(unit, Trial { pin, held_by: None });
            }
        }
    }

    /// The trial units and the members they are pinned to, for the solve.
    pub fn trial_pins(&self) -> impl Iterator<Item = (&str, &str)> {
        self.trials
            .iter()
            .map(|(u, t)| (u.as_str(), t.pin.as_str()))
    }

    /// Units given to nobody: quarantined, and held but not on trial.
    pub fn excluded(&self) -> BTreeSet<&str> {
        self.stored
            .keys()
            .chain(self.unsaved.keys())
            .chain(self.held.iter().filter(|u| !self.trials.contains_key(*u)))
            .map(String::as_str)
            .collect()
    }

    /// Names [`Quarantine::excluded`] exactly (0: nothing excluded).
    pub fn key(&self) -> u128 {
        let excluded = self.excluded();
        if excluded.is_empty() {
            return 0;
        }
        let mut h = Xxh3::new();
        for u in excluded {
            h.update(&(u.len() as u64).to_le_bytes());
            h.update(u.as_bytes());
        }
        h.digest128().max(1)
    }

    pub fn is_quarantined(&self, unit: &str) -> bool {
        self.stored.contains_key(unit) || self.unsaved.contains_key(unit)
    }

    /// Every quarantined unit with its record (`None`: unreadable).
    pub fn quarantined(&self) -> Vec<(&str, Option<&Record>)> {
        let mut all: Vec<(&str, Option<&Record>)> = self
            .stored
            .iter()
            .map(|(u, r)| (u.as_str(), r.as_ref()))
            .chain(self.unsaved.iter().map(|(u, r)| (u.as_str(), Some(r))))
            .collect();
        all.sort_by(|a, b| a.0.cmp(b.0));
        all.dedup_by(|a, b| a.0 == b.0);
        all
    }

    /// Units held for trials (the trial unit among them).
    pub fn held(&self) -> &BTreeSet<String> {
        &self.held
    }

    /// The units being tried.
    pub fn trials(&self) -> impl Iterator<Item = &str> {
        self.trials.keys().map(String::as_str)
    }

    /// The deaths that count against `unit` now.
    pub fn deaths_of(&self, unit: &str) -> usize {
        self.evidence.get(unit).map_or(0, Vec::len)
    }

    /// Units quarantined that no history entry named yet.
    pub fn unrecorded(&self) -> Vec<String> {
        self.unrecorded.iter().cloned().collect()
    }

    /// A confirmed table write's history entry named these.
    pub fn recorded(&mut self, units: &[String]) {
        for u in units {
            self.unrecorded.remove(u);
        }
    }

    /// What happened since the last call.
    pub fn take_events(&mut self) -> QuarantineEvents {
        std::mem::take(&mut self.events)
    }

    fn prune(&mut self, now_ms: u64) {
        let Some(rule) = self.rule else { return };
        let oldest = now_ms.saturating_sub(rule.window_ms);
        self.forget_deaths(|c| c.at_ms < oldest);
        self.tried.retain(|u| self.evidence.contains_key(u));
    }

    /// Forgets the counted deaths `gone` names, and the units left with
    /// none. The shared evidence is written (copied, while a cycle's view
    /// shares it) only when one is: every tick asks.
    fn forget_deaths(&mut self, gone: impl Fn(&Counted) -> bool) {
        if !self.evidence.values().flatten().any(&gone) {
            return;
        }
        let evidence = Arc::make_mut(&mut self.evidence);
        for by in evidence.values_mut() {
            by.retain(|c| !gone(c));
        }
        evidence.retain(|_, by| !by.is_empty());
    }

    /// The held units from the evidence: one death short of the threshold
    /// or more (of two deaths at least), not tried, not quarantined; none
    /// when more than [`HOLD_LIMIT`]. Trials of units no longer held end.
    fn rehold(&mut self) {
        let Some(rule) = self.rule else {
            self.held.clear();
            self.trials.clear();
            return;
        };
        let short = rule.after.saturating_sub(1) as usize;
        let mut held: BTreeSet<String> = if short >= 2 {
            self.evidence
                .iter()
                .filter(|(u, by)| {
                    by.len() >= short && !self.tried.contains(*u) && !self.is_quarantined(u)
                })
                .map(|(u, _)| u.clone())
                .collect()
        } else {
            BTreeSet::new()
        };
        if held.len() > HOLD_LIMIT {
            held.clear();
        }
        self.trials.retain(|u, _| held.contains(u));
        self.held = held;
    }
}

/// Where a trial is pinned: the eligible member with the highest score.
fn rendezvous(unit: &str, member: &str) -> u64 {
    let mut h = Xxh3::new();
    h.update(unit.as_bytes());
    h.update(&[0]);
    h.update(member.as_bytes());
    h.digest()
}

#[cfg(test)]
mod tests;
