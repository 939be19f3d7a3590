//! The unit costs a holder knows (`-balance cost`), and what a read's
//! outcome makes of them.
//!
//! Guarantees, tested below:
//! - a failed read never loses costs already known: the holder goes on
//!   with them, says so once, and reads again next cycle;
//! - with none known, a read that may work next time (a timeout, a lost
//!   connection) plans nothing: planning with every unit at the same cost
//!   would move units for nothing, only to move them back;
//! - a key of the wrong type is bad input, not a passing fault: with none
//!   known the holder balances as if no cost were declared, and says so;
//! - a hash over `-max-list-entries` or `-max-list-bytes` plans nothing,
//!   costs known or not: the last table stays, and the error names the key
//!   and the setting (what is in it cannot be told);
//! - unreadable entries are skipped (`core::costs`), and reported when
//!   they change, never every cycle (where `WATCH` is not permitted the
//!   hash is read every cycle).

use std::sync::Arc;

use crate::edge::redis::{CostsRead, DecodedCosts};
use crate::error::StoreError;

#[derive(Debug, Clone, Default)]
pub(in crate::coordinator) struct KnownCosts {
    /// The version of the hash `decoded` was read at, while known.
    pub(in crate::coordinator) version: Option<u64>,
    pub(in crate::coordinator) decoded: Option<Arc<DecodedCosts>>,
    /// The last read's problem (a failed read), while it lasts.
    pub(in crate::coordinator) problem: Option<String>,
    /// Whether the driver has something new to say: other unreadable
    /// entries than the last read's, or a new problem.
    pub(in crate::coordinator) news: bool,
}

impl KnownCosts {
    /// Takes a read's outcome; `Err` when the cycle must plan nothing.
    pub(in crate::coordinator) fn observe(&mut self, read: CostsRead) -> Result<(), StoreError> {
        self.news = false;
        match read.content {
            None if self.decoded.is_some() => Ok(()),
            // The store says unchanged at a version held only with costs:
            // a bug, not a state of Redis. Read again next cycle.
            None => {
                self.version = None;
                Err(StoreError::Reply {
                    op: "read costs",
                    detail: "reported unchanged, but none are known".into(),
                })
            }
            Some(Ok(decoded)) => {
                let before = self.decoded.as_ref().map(|d| (&d.unreadable, stale(d)));
                self.news = before != Some((&decoded.unreadable, stale(&decoded)))
                    || self.problem.is_some();
                self.version = read.version;
                self.decoded = Some(decoded);
                self.problem = None;
                Ok(())
            }
            Some(Err(e)) => {
                self.version = None;
                let problem = Some(e.to_string());
                self.news = self.problem != problem;
                self.problem = problem;
                if matches!(e, StoreError::TooLong { .. }) {
                    Err(e)
                } else if self.decoded.is_some() {
                    Ok(())
                } else if matches!(e, StoreError::WrongType { .. }) {
                    self.decoded = Some(Arc::default());
                    Ok(())
                } else {
                    Err(e)
                }
            }
        }
    }

    /// The costs to solve with: those known, else none declared.
    pub(in crate::coordinator) fn costs(&self) -> Arc<DecodedCosts> {
        self.decoded.clone().unwrap_or_default()
    }
}

/// The members whose loads were left out for their date.
fn stale(d: &DecodedCosts) -> Vec<&str> {
    d.stale.iter().map(|s| s.member.as_str()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(version: u64, pairs: &[(&str, &str)]) -> CostsRead {
        let pairs = pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        CostsRead {
            version: Some(version),
            content: Some(Ok(Arc::new(DecodedCosts::decode(pairs)))),
        }
    }

    fn failed(e: StoreError) -> CostsRead {
        CostsRead {
            version: None,
            content: Some(Err(e)),
        }
    }

    fn timeout() -> StoreError {
        StoreError::Timeout {
            op: "read costs",
            timeout: std::time::Duration::from_secs(1),
        }
    }

    fn wrong_type() -> StoreError {
        StoreError::WrongType {
            key: "{t}:costs".into(),
            expected: "hash",
            actual: "string".into(),
        }
    }

    #[test]
    fn a_failed_read_keeps_the_known_costs_and_says_so_once() {
        let mut k = KnownCosts::default();
        k.observe(read(1, &[("a", "5"), ("b", "junk")])).unwrap();
        assert!(k.news);
        // Read again (a guard that cannot vouch): the same entries are not
        // news; another unreadable entry is.
        k.observe(read(2, &[("a", "5"), ("b", "junk")])).unwrap();
        assert!(!k.news);
        k.observe(read(3, &[("a", "5"), ("b", "junk"), ("c", "-1")]))
            .unwrap();
        assert!(k.news);
        assert_eq!(k.costs().costs.of("a"), 5000);
        assert_eq!(k.costs().unreadable.len(), 2);
        k.observe(CostsRead {
            version: Some(1),
            content: None,
        })
        .unwrap();
        assert!(!k.news, "unchanged: nothing new to report");
        k.observe(failed(timeout())).unwrap();
        assert!(k.news && k.problem.is_some());
        assert_eq!(k.version, None, "read again next cycle");
        assert_eq!(k.costs().costs.of("a"), 5000, "kept");
        k.observe(failed(timeout())).unwrap();
        assert!(!k.news, "the same problem is said once");
    }

    #[test]
    fn with_none_known_a_passing_fault_plans_nothing_and_a_wrong_type_counts_none() {
        let mut k = KnownCosts::default();
        assert!(k.observe(failed(timeout())).is_err());
        assert!(k.decoded.is_none());
        k.observe(failed(wrong_type())).unwrap();
        assert_eq!(k.costs().costs.declared(), 0);
        assert!(k.problem.as_deref().unwrap().contains("{t}:costs"));
        let mut fresh = KnownCosts::default();
        let unchanged = CostsRead {
            version: Some(3),
            content: None,
        };
        assert!(fresh.observe(unchanged).is_err());
    }

    #[test]
    fn a_hash_over_a_limit_plans_nothing_even_with_costs_known() {
        let mut k = KnownCosts::default();
        k.observe(read(1, &[("a", "5")])).unwrap();
        let e = StoreError::too_long("hash", "{t}:costs", "entries", 10);
        assert!(matches!(
            k.observe(failed(e)),
            Err(StoreError::TooLong { .. })
        ));
        assert_eq!(k.version, None, "read again next cycle");
        assert!(k.problem.as_deref().unwrap().contains("-max-list-entries"));
        // Within the limit again, the read is taken as usual.
        k.observe(read(2, &[("a", "7")])).unwrap();
        assert_eq!(
            (k.costs().costs.of("a"), k.problem.as_deref()),
            (7000, None)
        );
    }
}
