//! Redis key and channel names, all derived from the table key.
//!
//! Guarantee: every coordination key lands in the same Redis Cluster hash slot as
//! the matching table itself, so one Lua script may check the lease and replace the
//! table atomically on a cluster as on a single node.
//!
//! Redis Cluster hashes only the part of a key between the first `{` and the next
//! `}` (when that part is non-empty). So:
//!
//! ```text
//! table key                 coordination prefix   example key
//! sys-matching-table        {sys-matching-table}  {sys-matching-table}:lease
//! app:{tenant7}:table       app:{tenant7}:table   app:{tenant7}:table:lease
//! ```
//!
//! A table key without a hash tag is wrapped in braces; one with a hash tag is used
//! as it is, since its tag already decides the slot.

/// All keys and channels of one distribution (one matching table).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    /// The matching table: a hash, field = member id, value = comma-joined units.
    pub table: String,
    /// The lease: a string holding the holder's random token, with a PX expiry.
    pub lease: String,
    /// The fencing epoch: an integer incremented by every lease acquisition.
    pub epoch: String,
    /// Table metadata: a hash (`generation`, `digest`, `epoch`, `holder`, ...).
    pub meta: String,
    /// Liveness state of every listed member, so that it survives a failover.
    pub liveness: String,
    /// The census: replica id → "index replicas unix_ms", as last seen by each replica.
    pub replicas: String,
    /// Members a holder suspects of a mass failure that it has not acted on:
    /// member → "since_ms replica", so that the next holder can confirm.
    pub suspects: String,
    /// Members' own reports (handoff protocol): member → "applied draining
    /// deadline_ms weight", written by the members.
    pub members: String,
    /// Members' statements for a holder's recovery (`core::handoff::Recovery`):
    /// member → `<tag> <processed> <unit>=<token>,...`, written by each
    /// member when a ping names a recovery it has not answered.
    pub held: String,
    /// The operator's weight overrides: member → integer 1..=1000, written by
    /// `distributor weights set`; an override beats the member's report.
    pub weights: String,
    /// Unit costs for `-balance cost`: unit → a positive number, written by
    /// whoever maintains the work list, or by `distributor costs set`.
    pub costs: String,
    /// Measured loads for `-balance load`: member → `<unix_ms>
    /// <unit>=<load>,...`, each member writing its own field (`core::load`).
    pub loads: String,
    /// Units in transit between owners: `<unit>,<group>` → `revoked_at
    /// since_ms to from`, written by the holder with the table.
    pub transit: String,
    /// Operator controls (`core::controls`): `member:<addr>` → `cordon|drain
    /// <unix_ms>`, `pin:<unit>` → member, `pause` → unix ms; written by the
    /// CLI, read by the holder with the reports.
    pub controls: String,
    /// Quarantined units (`core::quarantine`): unit → `<since_ms>
    /// <member>@<ms>,...` (the deaths that caused it), written by the holder
    /// (fenced), removed by `distributor workunits quarantine release`.
    pub quarantine: String,
    /// The change history: a capped stream, one entry per table write,
    /// added by the holder inside the fenced commit (`core::history`).
    pub changes: String,
    /// Pub/sub channel: the new generation, published after every table write.
    pub table_channel: String,
    /// Pub/sub channel: the released epoch, published when a holder lets go.
    pub lease_channel: String,
    /// Pub/sub channel: a member's id, published after it wrote its report.
    pub acked_channel: String,
    prefix: String,
}

impl Keys {
    pub fn new(table: &str) -> Self {
        let prefix = if hash_tag(table).is_some() {
            table.to_string()
        } else {
            format!("{{{table}}}")
        };
        let k = |suffix: &str| format!("{prefix}:{suffix}");
        Keys {
            table: table.to_string(),
            lease: k("lease"),
            epoch: k("epoch"),
            meta: k("meta"),
            liveness: k("liveness"),
            replicas: k("replicas"),
            suspects: k("suspects"),
            members: k("members"),
            held: k("held"),
            weights: k("weights"),
            costs: k("costs"),
            loads: k("loads"),
            transit: k("transit"),
            changes: k("changes"),
            controls: k("controls"),
            quarantine: k("quarantine"),
            table_channel: k("changed"),
            lease_channel: k("released"),
            acked_channel: k("acked"),
            prefix,
        }
    }

    /// Whether `key` is the table or one of its coordination keys (present or
    /// future: everything under the coordination prefix is reserved).
    pub fn is_reserved(&self, key: &str) -> bool {
        key == self.table
            || key
                .strip_prefix(self.prefix.as_str())
                .is_some_and(|rest| rest.starts_with(':'))
    }

    /// The census counter of interval number `n` (seed 002: `{name}:{number}`).
    pub fn census(&self, n: u64) -> String {
        format!("{}:census:{n}", self.prefix)
    }
}

/// Checks that coordination keys can share the table key's slot.
///
/// A key with braces but no usable hash tag (`a{}b`, `a{b`) is hashed whole, and no
/// suffixed key can hash to the same slot, so such a table key is refused.
pub fn check_table_key(key: &str) -> Result<(), &'static str> {
    if key.is_empty() {
        return Err("must not be empty");
    }
    if hash_tag(key).is_none() && (key.contains('{') || key.contains('}')) {
        return Err(
            "has braces but no non-empty {hash tag}; coordination keys could not share its cluster slot",
        );
    }
    Ok(())
}

/// The part of `key` that Redis Cluster hashes, if the key has a hash tag.
pub fn hash_tag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let close = key[open + 1..].find('}')?;
    let tag = &key[open + 1..open + 1 + close];
    (!tag.is_empty()).then_some(tag)
}

/// The bytes Redis Cluster feeds to CRC16 for `key`.
pub fn slot_input(key: &str) -> &str {
    hash_tag(key).unwrap_or(key)
}

/// The Redis Cluster slot of `key`: CRC16 (XMODEM) of its hash-tag part, mod 16384.
pub fn slot(key: &str) -> u16 {
    let mut crc: u16 = 0;
    for &b in slot_input(key).as_bytes() {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis_cluster() {
        // Values from `CLUSTER KEYSLOT` on a real cluster.
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("bar"), 5061);
        assert_eq!(slot("{user1000}.following"), slot("{user1000}.followers"));
        assert_eq!(slot("123456789"), 0x31C3, "the CRC16 check value");
        let k = Keys::new("sys-matching-table");
        assert_eq!(slot(&k.lease), slot(&k.table));
    }

    #[test]
    fn coordination_keys_are_reserved() {
        let k = Keys::new("sys-matching-table");
        for key in [
            &k.table,
            &k.lease,
            &k.epoch,
            &k.meta,
            &k.suspects,
            &k.members,
            &k.weights,
            &k.transit,
            &k.changes,
            &k.controls,
            &k.quarantine,
            &k.census(7),
        ] {
            assert!(k.is_reserved(key), "{key}");
        }
        assert!(!k.is_reserved("sys-channels"));
        assert!(!k.is_reserved("{sys-matching-table}"));
        let tagged = Keys::new("app:{t7}:table");
        assert!(tagged.is_reserved("app:{t7}:table:lease"));
        assert!(!tagged.is_reserved("app:{t7}:tablex"));
    }

    #[test]
    fn plain_table_key_is_wrapped() {
        let k = Keys::new("sys-matching-table");
        assert_eq!(k.lease, "{sys-matching-table}:lease");
        assert_eq!(k.census(42), "{sys-matching-table}:census:42");
        assert_eq!(slot_input(&k.lease), "sys-matching-table");
        assert_eq!(slot_input(&k.table), "sys-matching-table");
    }

    #[test]
    fn tagged_table_key_keeps_its_tag() {
        let k = Keys::new("app:{t7}:table");
        assert_eq!(k.meta, "app:{t7}:table:meta");
        for key in [
            &k.table,
            &k.lease,
            &k.epoch,
            &k.meta,
            &k.liveness,
            &k.replicas,
            &k.members,
            &k.weights,
            &k.transit,
            &k.changes,
            &k.acked_channel,
        ] {
            assert_eq!(slot_input(key), "t7");
        }
    }

    #[test]
    fn empty_braces_are_not_a_tag() {
        assert_eq!(hash_tag("a{}b"), None);
        assert_eq!(hash_tag("a{b"), None);
        assert_eq!(hash_tag("{x}{y}"), Some("x"));
        // Such keys cannot share a slot with anything derived from them.
        assert!(check_table_key("a{}b").is_err());
        assert!(check_table_key("a{b").is_err());
        assert!(check_table_key("").is_err());
        assert!(check_table_key("a{b}c").is_ok());
        assert!(check_table_key("sys-matching-table").is_ok());
    }
}
