//! Quarantined units (`{T}:quarantine`, `core::quarantine`), as
//! `distributor workunits quarantine list`, `distributor status`,
//! `/api/status` and the page show them.

use serde::Serialize;

use crate::core::inputs::{check_unit, excerpt};
use crate::core::quarantine::Record;

/// How many quarantined units a status report lists.
pub const QUARANTINED_SHOWN: usize = 20;

/// The quarantine as read; `None` in a status report when it is empty.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct QuarantineReport {
    /// How many units are quarantined.
    pub units: usize,
    /// Them, sorted by unit (all of them for `quarantine list`, the first
    /// [`QUARANTINED_SHOWN`] in a status report).
    pub quarantined: Vec<QuarantinedUnit>,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct QuarantinedUnit {
    pub unit: String,
    /// Unix ms of the quarantine (`None`: the record does not parse; the
    /// unit is quarantined all the same).
    pub since_ms: Option<u64>,
    /// The deaths that caused it: member and unix ms.
    pub deaths: Vec<DeathReport>,
    /// The stored value, shortened, when it does not parse.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unreadable: Option<String>,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct DeathReport {
    pub member: String,
    pub at_ms: u64,
}

/// The report of the `{T}:quarantine` hash as read, listing at most
/// `shown` units; `None` when it is empty. Fields that name no unit are
/// not units (the holder skips them too).
pub fn quarantine_of<'a>(
    raw: impl IntoIterator<Item = (&'a String, &'a String)>,
    shown: usize,
) -> Option<QuarantineReport> {
    let mut all: Vec<QuarantinedUnit> = raw
        .into_iter()
        .filter(|(unit, _)| check_unit(unit.as_bytes()).is_ok())
        .map(|(unit, value)| match Record::decode(value) {
            Some(r) => QuarantinedUnit {
                unit: unit.clone(),
                since_ms: Some(r.since_ms),
                deaths: r
                    .deaths
                    .into_iter()
                    .map(|d| DeathReport {
                        member: d.member,
                        at_ms: d.at_ms,
                    })
                    .collect(),
                unreadable: None,
            },
            None => QuarantinedUnit {
                unit: unit.clone(),
                since_ms: None,
                deaths: Vec::new(),
                unreadable: Some(excerpt(value.as_bytes())),
            },
        })
        .collect();
    if all.is_empty() {
        return None;
    }
    all.sort_by(|a, b| a.unit.cmp(&b.unit));
    let units = all.len();
    all.truncate(shown);
    Some(QuarantineReport {
        units,
        quarantined: all,
    })
}

/// One line per quarantined unit: `<unit>  quarantined <n> s ago  <k>
/// deaths: <member>@<ms>, ...` (with `now_ms`; else `at <unix ms>`).
pub fn quarantine_text(q: &Option<QuarantineReport>, now_ms: Option<u64>) -> String {
    let Some(q) = q else {
        return String::new();
    };
    let mut out = String::new();
    for u in &q.quarantined {
        let since = match u.since_ms {
            Some(s) => match now_ms {
                Some(now) => format!("{} s ago", now.saturating_sub(s) / 1000),
                None => format!("at {s}"),
            },
            None => format!(
                "unknown (unreadable record {})",
                u.unreadable.as_deref().unwrap_or("")
            ),
        };
        let deaths: Vec<String> = u
            .deaths
            .iter()
            .map(|d| format!("{}@{}", d.member, d.at_ms))
            .collect();
        out += &format!(
            "{}  quarantined {since}  {} deaths: {}\n",
            u.unit,
            u.deaths.len(),
            deaths.join(", ")
        );
    }
    if q.quarantined.len() < q.units {
        out += &format!("… and {} more\n", q.units - q.quarantined.len());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quarantine_lists_units_sorted_with_their_deaths_and_names_a_bad_record() {
        let raw: Vec<(String, String)> = vec![
            ("u2".into(), "1000 a:1@900,b:1@950,c:1@1000".into()),
            ("u1".into(), "garbage".into()),
            ("a,b".into(), "1".into()),
        ];
        let q = quarantine_of(raw.iter().map(|(k, v)| (k, v)), 10).unwrap();
        assert_eq!(q.units, 2, "a field that names no unit is no unit");
        assert_eq!(q.quarantined[0].unit, "u1");
        assert_eq!(q.quarantined[0].unreadable.as_deref(), Some("\"garbage\""));
        assert_eq!(q.quarantined[1].deaths.len(), 3);
        let text = quarantine_text(&Some(q.clone()), Some(6_000));
        assert_eq!(
            text,
            "u1  quarantined unknown (unreadable record \"garbage\")  0 deaths: \n\
             u2  quarantined 5 s ago  3 deaths: a:1@900, b:1@950, c:1@1000\n"
        );
        assert_eq!(quarantine_of(std::iter::empty(), 10), None);
        let short = quarantine_of(raw.iter().map(|(k, v)| (k, v)), 1).unwrap();
        assert!(quarantine_text(&Some(short), Some(6_000)).ends_with("… and 1 more\n"));
        assert!(quarantine_text(&Some(q), None).contains("u2  quarantined at 1000  3 deaths"));
    }
}
