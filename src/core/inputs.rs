//! Validation and normalisation of the lists the holder reads from Redis.
//!
//! Pure: raw list contents in, [`Inputs`] out. Guarantees:
//! - the result depends only on the *sets* of entries: list order and duplicates
//!   do not matter;
//! - every entry that is dropped is reported as a [`Rejection`] naming the key and
//!   the (escaped, truncated) value, so the daemon can log it and count it;
//! - a malformed service address is not dropped silently: it stays a listed
//!   member that counts as failing, so operators see it in the failed counts.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::Ipv6Addr;

/// Longest work unit accepted, in bytes. Longer entries are rejected, not cut.
pub const MAX_UNIT_BYTES: usize = 4096;
/// Longest member address accepted: a 253-byte DNS name, brackets, `:` and a port.
pub const MAX_ADDR_BYTES: usize = 261;

/// What the holder read: each services list (in configuration order) and the units.
#[derive(Debug, Clone, Default)]
pub struct RawInputs {
    pub groups: Vec<(String, Vec<Vec<u8>>)>,
    pub units_key: String,
    pub units: Vec<Vec<u8>>,
}

/// One services namespace: the members that may receive work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// The services list key, which names the group.
    pub name: String,
    /// Distinct, well-formed member addresses, sorted.
    pub members: Vec<String>,
    /// Listed entries that cannot be pinged; they count as failing members.
    pub malformed: Vec<Malformed>,
}

/// One group's name and members, borrowed from [`Inputs`]: what the
/// mass-failure guard (`suspicion::review`) and the handoff planner
/// (`handoff::plan`) read of a group.
#[derive(Debug, Clone, Copy)]
pub struct GroupMembers<'a> {
    pub name: &'a str,
    pub members: &'a [String],
}

/// A services list entry that is not a member address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed {
    /// The entry as text (lossy for non-UTF-8): its name in liveness and status.
    pub name: String,
    /// The entry exactly as listed, to remove it (`-forget-after`).
    pub raw: Vec<u8>,
    pub reason: &'static str,
}

/// Validated, deduplicated inputs of one holder cycle.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Inputs {
    pub groups: Vec<Group>,
    /// Distinct valid work units, sorted.
    pub units: std::sync::Arc<Vec<String>>,
    pub rejections: Vec<Rejection>,
}

impl Inputs {
    /// The inputs of one group named `name`, for a solve outside a holder
    /// cycle (tests, benches, an embedder's own table): the members and
    /// units sorted and deduplicated, as a cycle's are; they are not
    /// validated.
    pub fn one_group(name: &str, members: &[String], units: &[String]) -> Inputs {
        let sorted = |list: &[String]| {
            let mut list = list.to_vec();
            list.sort_unstable();
            list.dedup();
            list
        };
        Inputs {
            groups: vec![Group {
                name: name.to_string(),
                members: sorted(members),
                malformed: vec![],
            }],
            units: sorted(units).into(),
            rejections: vec![],
        }
    }

    /// Each group's name and members, borrowed.
    pub fn group_members(&self) -> Vec<GroupMembers<'_>> {
        self.groups
            .iter()
            .map(|g| GroupMembers {
                name: &g.name,
                members: &g.members,
            })
            .collect()
    }

    /// Every distinct well-formed member of every group.
    pub fn members(&self) -> impl Iterator<Item = &str> {
        self.groups
            .iter()
            .flat_map(|g| g.members.iter().map(String::as_str))
    }
}

/// Why an entry was dropped or demoted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejection {
    /// A work unit that cannot be written into a comma-joined row.
    Unit {
        key: String,
        value: String,
        reason: &'static str,
    },
    /// A services list entry that is not a `host:port` address; counts as failing.
    Address {
        key: String,
        value: String,
        reason: &'static str,
    },
    /// The same member in two services lists; kept only in the first by name.
    DuplicateMember {
        member: String,
        kept_in: String,
        dropped_from: String,
    },
}

impl Rejection {
    /// Every kind, for metrics and status counts.
    pub const KINDS: [&'static str; 3] = ["unit", "address", "duplicate_member"];

    /// A short machine-friendly kind, for metrics labels.
    pub fn kind(&self) -> &'static str {
        match self {
            Rejection::Unit { .. } => "unit",
            Rejection::Address { .. } => "address",
            Rejection::DuplicateMember { .. } => "duplicate_member",
        }
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejection::Unit { key, value, reason } => {
                write!(f, "work unit {value} in list {key:?} skipped: {reason}")
            }
            Rejection::Address { key, value, reason } => write!(
                f,
                "service address {value} in list {key:?} counts as failing: {reason}"
            ),
            Rejection::DuplicateMember {
                member,
                kept_in,
                dropped_from,
            } => write!(
                f,
                "member {member:?} is listed in {kept_in:?} and {dropped_from:?}; \
                 kept in {kept_in:?} only (a member belongs to one group)"
            ),
        }
    }
}

/// Renders a hostile value for a log line: escaped, and cut after 64 characters.
pub fn excerpt(raw: &[u8]) -> String {
    const SHOWN: usize = 64;
    let text = String::from_utf8_lossy(raw);
    let shown: String = text.chars().take(SHOWN).collect();
    if text.chars().count() > SHOWN {
        format!("{shown:?}… ({} bytes)", raw.len())
    } else {
        format!("{shown:?}")
    }
}

/// Checks a work unit: non-empty UTF-8 without `,` or control characters, at
/// most [`MAX_UNIT_BYTES`].
pub fn check_unit(raw: &[u8]) -> Result<&str, &'static str> {
    if raw.is_empty() {
        return Err("empty");
    }
    if raw.len() > MAX_UNIT_BYTES {
        return Err("longer than 4096 bytes");
    }
    let unit = std::str::from_utf8(raw).map_err(|_| "not UTF-8")?;
    if unit.contains(',') {
        return Err("contains ',' (the table's separator)");
    }
    // Control characters break line-based tools and terminals reading the table.
    if unit.chars().any(char::is_control) {
        return Err("contains control characters");
    }
    Ok(unit)
}

/// Checks a member address: `host:port` or `[v6]:port`, port 1..=65535.
pub fn check_member_addr(raw: &[u8]) -> Result<&str, &'static str> {
    if raw.is_empty() {
        return Err("empty");
    }
    if raw.len() > MAX_ADDR_BYTES {
        return Err("longer than 261 bytes");
    }
    let addr = std::str::from_utf8(raw).map_err(|_| "not UTF-8")?;
    let (host, port) = addr.rsplit_once(':').ok_or("missing ':port'")?;
    if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
        return Err("port is not a number");
    }
    match port.parse::<u16>() {
        Ok(0) | Err(_) => return Err("port out of range 1..=65535"),
        Ok(_) => {}
    }
    if let Some(inner) = host.strip_prefix('[') {
        let inner = inner.strip_suffix(']').ok_or("unclosed '[' in IPv6 host")?;
        let ip = inner.parse::<Ipv6Addr>().map_err(|_| "bad IPv6 address")?;
        if ip.is_unspecified() {
            return Err("unspecified address [::] cannot be dialled");
        }
    } else {
        if host == "0.0.0.0" {
            return Err("unspecified address 0.0.0.0 cannot be dialled");
        }
        if host.is_empty() {
            return Err("empty host");
        }
        let ok = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_');
        if !host.bytes().all(ok) {
            return Err("host has characters outside [A-Za-z0-9._-]");
        }
    }
    Ok(addr)
}

/// Validates and deduplicates one cycle's raw lists.
pub fn normalize(raw: &RawInputs) -> Inputs {
    let (units, mut rejections) = normalize_units(&raw.units_key, &raw.units);
    let groups: Vec<(&str, &[Vec<u8>])> = raw
        .groups
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_slice()))
        .collect();
    let (groups, group_rejections) = normalize_groups(&groups);
    rejections.extend(group_rejections);
    Inputs {
        groups,
        units: units.into(),
        rejections,
    }
}

/// The units part of [`normalize`]: the distinct valid units of list `key`,
/// sorted, and the rejected entries. It depends on the units list alone, so
/// a holder that knows the list unchanged keeps its last result.
pub fn normalize_units(key: &str, entries: &[Vec<u8>]) -> (Vec<String>, Vec<Rejection>) {
    let mut rejections = Vec::new();
    let mut units = BTreeSet::new();
    let mut bad_units = BTreeSet::new();
    for entry in entries {
        match check_unit(entry) {
            Ok(unit) => {
                units.insert(unit);
            }
            Err(reason) => {
                if bad_units.insert((entry.as_slice(), reason)) {
                    rejections.push(Rejection::Unit {
                        key: key.to_string(),
                        value: excerpt(entry),
                        reason,
                    });
                }
            }
        }
    }
    (units.into_iter().map(str::to_string).collect(), rejections)
}

/// The groups part of [`normalize`]: every services list `(key, entries)`,
/// in configuration order, to groups, and the rejected entries.
pub fn normalize_groups(lists: &[(&str, &[Vec<u8>])]) -> (Vec<Group>, Vec<Rejection>) {
    let mut rejections = Vec::new();
    // Groups are visited by name, so a member listed twice is kept in the same group
    // whatever the configuration order.
    let mut by_name: BTreeMap<&str, (BTreeSet<&str>, BTreeSet<&[u8]>)> = BTreeMap::new();
    for &(key, entries) in lists {
        let (good, bad) = by_name.entry(key).or_default();
        for entry in entries {
            match check_member_addr(entry) {
                Ok(addr) => {
                    good.insert(addr);
                }
                Err(_) => {
                    bad.insert(entry.as_slice());
                }
            }
        }
    }
    let mut owner: BTreeMap<&str, &str> = BTreeMap::new();
    let mut groups_by_name = BTreeMap::new();
    for (&name, (good, bad)) in &by_name {
        let mut members = Vec::new();
        for &m in good {
            match owner.get(m) {
                Some(&kept_in) => rejections.push(Rejection::DuplicateMember {
                    member: m.to_string(),
                    kept_in: kept_in.to_string(),
                    dropped_from: name.to_string(),
                }),
                None => {
                    owner.insert(m, name);
                    members.push(m.to_string());
                }
            }
        }
        let mut malformed = Vec::new();
        for &entry in bad {
            let reason = check_member_addr(entry).expect_err("sorted as bad");
            rejections.push(Rejection::Address {
                key: name.to_string(),
                value: excerpt(entry),
                reason,
            });
            malformed.push(Malformed {
                name: String::from_utf8_lossy(entry).into_owned(),
                raw: entry.to_vec(),
                reason,
            });
        }
        groups_by_name.insert(
            name,
            Group {
                name: name.to_string(),
                members,
                malformed,
            },
        );
    }
    // Keep configuration order for display; the content does not depend on it.
    let mut seen = BTreeSet::new();
    let groups = lists
        .iter()
        .filter(|(key, _)| seen.insert(*key))
        .filter_map(|(key, _)| groups_by_name.remove(key))
        .collect();
    (groups, rejections)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn raw(groups: &[(&str, &[&str])], units: &[&str]) -> RawInputs {
        RawInputs {
            groups: groups
                .iter()
                .map(|(k, v)| {
                    (
                        k.to_string(),
                        v.iter().map(|s| s.as_bytes().to_vec()).collect(),
                    )
                })
                .collect(),
            units_key: "units".into(),
            units: units.iter().map(|s| s.as_bytes().to_vec()).collect(),
        }
    }

    #[test]
    fn addresses() {
        for ok in [
            "127.0.0.1:50051",
            "worker-1.svc.cluster.local:80",
            "[::1]:9000",
            "a_b:1",
        ] {
            assert_eq!(check_member_addr(ok.as_bytes()), Ok(ok), "{ok}");
        }
        for (bad, why) in [
            ("", "empty"),
            ("host", "missing ':port'"),
            ("host:", "port is not a number"),
            ("host:0", "port out of range 1..=65535"),
            ("host:65536", "port out of range 1..=65535"),
            (":80", "empty host"),
            ("http://h:80", "host has characters outside [A-Za-z0-9._-]"),
            ("h st:80", "host has characters outside [A-Za-z0-9._-]"),
            ("[::1:80", "unclosed '[' in IPv6 host"),
            ("[zz]:80", "bad IPv6 address"),
            (
                "0.0.0.0:80",
                "unspecified address 0.0.0.0 cannot be dialled",
            ),
            ("[::]:80", "unspecified address [::] cannot be dialled"),
        ] {
            assert_eq!(check_member_addr(bad.as_bytes()), Err(why), "{bad:?}");
        }
        assert_eq!(check_member_addr(&[0xff, b':', b'1']), Err("not UTF-8"));
        let long = format!("{}:1", "a".repeat(300));
        assert!(check_member_addr(long.as_bytes()).is_err());
    }

    #[test]
    fn units_are_checked_and_reported_with_key_and_value() {
        let inputs = normalize(&raw(&[], &["a", "", "b,c", "a", "d"]));
        assert_eq!(*inputs.units, ["a", "d"]);
        assert_eq!(
            inputs.rejections,
            [
                Rejection::Unit {
                    key: "units".into(),
                    value: "\"\"".into(),
                    reason: "empty"
                },
                Rejection::Unit {
                    key: "units".into(),
                    value: "\"b,c\"".into(),
                    reason: "contains ',' (the table's separator)"
                },
            ]
        );
        let text = inputs.rejections[1].to_string();
        assert!(text.contains("\"units\"") && text.contains("b,c"), "{text}");
    }

    #[test]
    fn huge_values_are_excerpted() {
        let big = vec![b'x'; 1 << 20];
        let inputs = normalize(&RawInputs {
            units: vec![big],
            units_key: "u".into(),
            groups: vec![],
        });
        let Rejection::Unit { value, .. } = &inputs.rejections[0] else {
            panic!()
        };
        assert!(
            value.len() < 100 && value.contains("1048576 bytes"),
            "{value}"
        );
        assert_eq!(excerpt(b"a\x1b[31m"), "\"a\\u{1b}[31m\"");
    }

    #[test]
    fn malformed_members_stay_listed_as_failing() {
        let inputs = normalize(&raw(&[("g", &["h:1", "nonsense", "h:1"])], &[]));
        assert_eq!(inputs.groups[0].members, ["h:1"]);
        let bad = &inputs.groups[0].malformed;
        assert_eq!(bad.len(), 1);
        assert_eq!(
            (bad[0].name.as_str(), bad[0].raw.as_slice()),
            ("nonsense", &b"nonsense"[..])
        );
        assert_eq!(inputs.rejections.len(), 1);
        assert_eq!(inputs.rejections[0].kind(), "address");
    }

    #[test]
    fn member_in_two_groups_is_kept_in_the_first_by_name() {
        let a = normalize(&raw(&[("zeta", &["h:1", "h:2"]), ("alpha", &["h:1"])], &[]));
        let b = normalize(&raw(&[("alpha", &["h:1"]), ("zeta", &["h:2", "h:1"])], &[]));
        for inputs in [&a, &b] {
            let g = |n: &str| {
                inputs
                    .groups
                    .iter()
                    .find(|g| g.name == n)
                    .unwrap()
                    .members
                    .clone()
            };
            assert_eq!(g("alpha"), ["h:1"]);
            assert_eq!(g("zeta"), ["h:2"]);
            assert_eq!(
                inputs.rejections,
                [Rejection::DuplicateMember {
                    member: "h:1".into(),
                    kept_in: "alpha".into(),
                    dropped_from: "zeta".into()
                }]
            );
        }
        assert_eq!(
            a.groups[0].name, "zeta",
            "configuration order is kept for display"
        );
    }

    proptest! {
        #[test]
        fn order_and_duplicates_do_not_matter(
            units in proptest::collection::vec("[a-c,]{0,3}", 0..20),
            members in proptest::collection::vec("[a-c]{1,2}:[0-9]{1,2}", 0..10),
            seed in any::<u64>(),
        ) {
            fn refs(v: &[String]) -> Vec<&str> {
                v.iter().map(String::as_str).collect()
            }
            let base = normalize(&raw(&[("g", &refs(&members))], &refs(&units)));
            let mut u2 = units.clone();
            u2.extend(units.iter().cloned());
            let mut m2 = members.clone();
            m2.extend(members.iter().cloned());
            let rot = |v: &mut Vec<String>| if !v.is_empty() { let n = (seed as usize) % v.len(); v.rotate_left(n); v.reverse(); };
            rot(&mut u2);
            rot(&mut m2);
            let other = normalize(&raw(&[("g", &refs(&m2))], &refs(&u2)));
            prop_assert_eq!(&base.units, &other.units);
            prop_assert_eq!(&base.groups, &other.groups);
        }
    }
}
