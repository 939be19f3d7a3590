//! `commit.lua` and `table_state.lua`: the fenced table write and the
//! reading of the stored table's state.

use redis::Value;

use super::{COUNT, Call, MAX_SAFE, bulk, count, int, invalid, num, table_digest};
use crate::edge::memory::keyspace::WrongType;

impl Call<'_> {
    /// `table_state.lua`.
    pub(super) fn table_state(&mut self) -> Result<Value, WrongType> {
        if self.type_of(2) != "hash" {
            return Ok(Value::Array(vec![Value::Nil, Value::Nil]));
        }
        let digest = self.hget(2, "digest")?;
        let generation = self.hget(2, "generation")?;
        let members = self.hget(2, "members")?;
        if let Some(g) = &generation
            && count(Some(g)).is_none()
        {
            return Ok(invalid(
                self.key(2).as_bytes(),
                b"generation",
                Some(g),
                COUNT,
            ));
        }
        let rows = count(Some(members.as_deref().unwrap_or_default()));
        let (table, now) = (self.key(1).to_string(), self.now);
        let intact = match self.type_of(1) {
            "none" => rows == Some(0),
            "hash" if Some(self.ks.hlen(&table, now)? as u64) == rows => {
                self.arg(1) != Some(b"1")
                    || Some(table_digest(&self.ks.hgetall(&table, now)?).into_bytes()) == digest
            }
            _ => false,
        };
        let or_nil = |v: Option<Vec<u8>>| v.map_or(Value::Nil, bulk);
        Ok(Value::Array(vec![
            if intact { or_nil(digest) } else { Value::Nil },
            or_nil(generation),
        ]))
    }

    /// `commit.lua`.
    pub(super) fn commit(&mut self) -> Result<Value, WrongType> {
        if let Some(refused) = self.fenced(4, 3)? {
            return Ok(refused);
        }
        let argv = self.argv;
        let a = |i: usize| argv.get(i - 1).map(Vec::as_slice);
        let Some(argv_floor) = count(a(3)) else {
            return Ok(invalid(b"ARGV", b"generation_floor", a(3), COUNT));
        };
        if count(a(5)).is_none() {
            return Ok(invalid(b"ARGV", b"now_ms", a(5), COUNT));
        }
        let rows_only = a(8) == Some(b"2");
        let row_width: u128 = if rows_only { 3 } else { 2 };
        let counts = [9, 10, 11, 12, 13, 15, 19, 22].map(|i| count(a(i)));
        let shaped = match counts {
            [
                Some(r),
                Some(s),
                Some(d),
                Some(su),
                Some(un),
                Some(t),
                Some(h),
                Some(rm),
            ] => {
                let n = |x: u64| u128::from(x);
                (self.argv.len() as u128
                    == 25
                        + row_width * n(r)
                        + 2 * n(rm)
                        + 2 * n(s)
                        + n(d)
                        + 2 * n(su)
                        + n(un)
                        + 2 * n(t)
                        + 2 * n(h))
                .then_some([r, s, d, su, un, t, h, rm].map(|x| x as usize))
            }
            _ => None,
        };
        let Some(
            [
                n_rows,
                n_set,
                n_del,
                n_sus,
                n_unsus,
                n_transit,
                n_history,
                n_removed,
            ],
        ) = shaped
        else {
            let mut listed = Vec::new();
            for (k, i) in [9, 10, 11, 12, 13, 15, 19, 22].into_iter().enumerate() {
                if k > 0 {
                    listed.push(b' ');
                }
                listed.extend_from_slice(a(i).unwrap_or_default());
            }
            listed.extend_from_slice(format!(" for {} arguments", self.argv.len()).as_bytes());
            return Ok(invalid(
                b"ARGV",
                b"counts",
                Some(&listed),
                "counts that match the arguments",
            ));
        };
        if !rows_only && (n_removed != 0 || a(21) != Some(b"")) {
            let mut v = a(22).unwrap_or_default().to_vec();
            v.push(b' ');
            v.extend_from_slice(a(21).unwrap_or_default());
            return Ok(invalid(
                b"ARGV",
                b"n_removed",
                Some(&v),
                "0 and no base_digest without a rows write",
            ));
        }
        let server = a(23).unwrap_or_default().to_vec();
        if !server.is_empty() && (server.len() != 40 || !server.iter().all(u8::is_ascii_hexdigit)) {
            return Ok(invalid(
                b"ARGV",
                b"server",
                Some(&server),
                "a run id (40 hex digits) or empty",
            ));
        }
        let Some(n_reports) = count(a(24)) else {
            return Ok(invalid(b"ARGV", b"reports", a(24), COUNT));
        };
        let Some(deadline_max) = count(a(25)) else {
            return Ok(invalid(b"ARGV", b"deadline_max", a(25), COUNT));
        };
        let Some(history_kept) = count(a(20)).filter(|&k| k > 0) else {
            return Ok(invalid(
                b"ARGV",
                b"history_kept",
                a(20),
                "an integer in 1..2^53-1",
            ));
        };
        let write_table = a(8) == Some(b"1") || rows_only;
        if n_history > 0 && !write_table {
            return Ok(invalid(
                b"ARGV",
                b"n_history",
                a(19),
                "a history entry written with the table",
            ));
        }
        let write_transit = a(14) == Some(b"1");
        let mut expected_version = None;
        if a(18) != Some(b"") {
            match count(a(18)) {
                Some(v) => expected_version = Some(v),
                None => return Ok(invalid(b"ARGV", b"expected_version", a(18), COUNT)),
            }
        }

        let meta_type = self.type_of(2);
        let meta = self.key(2).as_bytes().to_vec();
        let mut version = 0;
        if meta_type == "hash"
            && let Some(v) = self.hget(2, "version")?
        {
            match count(Some(&v)) {
                Some(n) => version = n,
                None => return Ok(invalid(&meta, b"version", Some(&v), COUNT)),
            }
        }
        if version + 1 >= MAX_SAFE {
            return Ok(invalid(
                &meta,
                b"version",
                Some(&num(version)),
                &format!("{COUNT}, below its largest"),
            ));
        }
        if expected_version.is_some_and(|e| e != version) {
            return Ok(Value::Array(vec![int(-4), int(version as i64)]));
        }
        let mut generation: i64 = -1;
        let mut current = 0;
        if write_table {
            let mut stored_floor = 0;
            if meta_type == "hash" {
                for (field, slot) in [
                    ("generation", &mut current),
                    ("generation_floor", &mut stored_floor),
                ] {
                    if let Some(v) = self.hget(2, field)? {
                        match count(Some(&v)) {
                            Some(n) => *slot = n,
                            None => {
                                return Ok(invalid(&meta, field.as_bytes(), Some(&v), COUNT));
                            }
                        }
                    }
                }
            }
            let g = current.max(stored_floor).max(argv_floor) + 1;
            if g >= MAX_SAFE {
                return Ok(invalid(
                    &meta,
                    b"generation",
                    Some(&num(g - 1)),
                    &format!("{COUNT}, below its largest"),
                ));
            }
            generation = g as i64;
        }
        let rows_at = 26;
        let removed_at = rows_at + row_width as usize * n_rows;
        if rows_only && let Some(what) = self.off_base(rows_at, n_rows, removed_at, n_removed)? {
            return Ok(Value::Array(vec![int(-4), int(version as i64), bulk(what)]));
        }
        let liveness_type = self.type_of(5);
        let suspects_type = self.type_of(6);
        let transit_type = self.type_of(7);
        let changes_type = if n_history > 0 {
            self.type_of(8)
        } else {
            "none"
        };

        let set_at = removed_at + 2 * n_removed;
        let del_at = set_at + 2 * n_set;
        let sus_at = del_at + n_del;
        let unsus_at = sus_at + 2 * n_sus;
        let transit_at = unsus_at + n_unsus;
        let pairs = |from: usize, n: usize| -> Vec<(Vec<u8>, Vec<u8>)> {
            (0..n)
                .map(|k| {
                    let i = from + 2 * k;
                    (
                        self.arg(i).unwrap_or_default().to_vec(),
                        self.arg(i + 1).unwrap_or_default().to_vec(),
                    )
                })
                .collect()
        };
        let names = |from: usize, n: usize| -> Vec<Vec<u8>> {
            (from..from + n)
                .map(|i| self.arg(i).unwrap_or_default().to_vec())
                .collect()
        };
        let (rows, removed) = if rows_only {
            let rows = (0..n_rows)
                .map(|k| {
                    let i = rows_at + 3 * k;
                    (
                        self.arg(i).unwrap_or_default().to_vec(),
                        self.arg(i + 1).unwrap_or_default().to_vec(),
                    )
                })
                .collect();
            let removed = pairs(removed_at, n_removed).into_iter().map(|(m, _)| m);
            (rows, removed.collect())
        } else {
            (pairs(rows_at, n_rows), Vec::new())
        };
        let health_set = pairs(set_at, n_set);
        let health_del = names(del_at, n_del);
        let suspects_set = pairs(sus_at, n_sus);
        let suspects_del = names(unsus_at, n_unsus);
        let transit = pairs(transit_at, n_transit);
        let history = pairs(transit_at + 2 * n_transit, n_history);

        if write_transit
            && !write_table
            && let Some((f, v)) = transit.iter().find(|(_, v)| v.starts_with(b"0 "))
        {
            return Ok(invalid(
                b"ARGV",
                f,
                Some(v),
                "a revocation written with the table",
            ));
        }

        // Writes from here on; none of them can fail.
        if meta_type != "hash" && meta_type != "none" {
            self.del(2);
        }
        if liveness_type != "hash" && liveness_type != "none" {
            self.del(5);
        }
        if suspects_type != "hash" && suspects_type != "none" {
            self.del(6);
        }
        if write_transit && transit_type != "none" {
            self.del(7);
        }
        if changes_type != "stream" && changes_type != "none" {
            self.del(8);
        }
        let now = self.now;
        // The history entry's `rows`: the members set, then those deleted.
        let written_names: Vec<Vec<u8>> = if rows_only {
            rows.iter()
                .map(|(m, _)| m.clone())
                .chain(removed.iter().cloned())
                .collect()
        } else {
            Vec::new()
        };
        if write_table {
            let table = self.key(1).to_string();
            let members = if rows_only {
                self.hset(1, rows)?;
                self.ks.hdel(&table, &removed, now)?;
                self.ks.hlen(&table, now)? as u64
            } else {
                self.del(1);
                self.hset(1, rows)?;
                n_rows as u64
            };
            let mut fields = vec![
                Self::pair("generation", num(generation as u64)),
                Self::pair("digest", self.arg(4).unwrap_or_default()),
                Self::pair("epoch", self.arg(2).unwrap_or_default()),
                Self::pair("writer", self.arg(6).unwrap_or_default()),
                Self::pair("written_at_ms", self.arg(5).unwrap_or_default()),
                Self::pair("members", num(members)),
                Self::pair("assignment", self.arg(16).unwrap_or_default()),
            ];
            if self.arg(17) != Some(b"") {
                fields.push(Self::pair("last_change", self.arg(17).unwrap_or_default()));
            }
            self.hset(2, fields)?;
            if n_history > 0 {
                let written = rows_written(rows_only, &written_names);
                let mut entry = vec![
                    Self::pair("generation", num(generation as u64)),
                    Self::pair("previous_generation", num(current)),
                    Self::pair("at_ms", self.arg(5).unwrap_or_default()),
                    Self::pair("epoch", self.arg(2).unwrap_or_default()),
                    Self::pair("writer", self.arg(6).unwrap_or_default()),
                    Self::pair("rows", written),
                ];
                entry.extend(history);
                let k = self.key(8).to_string();
                self.ks.xadd(&k, entry, history_kept as usize, now)?;
                let meta = self.key(2).to_string();
                self.ks.hdel(&meta, &[b"history_error".to_vec()], now)?;
            }
        }
        self.hset(5, health_set)?;
        let k = self.key(5).to_string();
        self.ks.hdel(&k, &health_del, now)?;
        self.hset(6, suspects_set)?;
        let k = self.key(6).to_string();
        self.ks.hdel(&k, &suspects_del, now)?;
        if write_transit {
            let numbered = generation.to_string().into_bytes();
            for (f, v) in transit {
                let v = if v.starts_with(b"0 ") {
                    let mut n = numbered.clone();
                    n.extend_from_slice(&v[1..]);
                    n
                } else {
                    v
                };
                self.hset(7, vec![(f, v)])?;
            }
        }
        self.hset(2, vec![Self::pair("version", num(version + 1))])?;
        let k = self.key(2).to_string();
        if server.is_empty() {
            self.ks.hdel(&k, &[b"server".to_vec()], now)?;
        } else {
            self.hset(2, vec![(b"server".to_vec(), server)])?;
        }
        if write_transit {
            self.hset(2, vec![Self::pair("transit", num(n_transit as u64))])?;
        }
        self.hset(
            2,
            vec![
                Self::pair("reports", num(n_reports)),
                Self::pair("deadline_max", num(deadline_max)),
            ],
        )?;
        if write_table {
            let channel = self.arg(7).unwrap_or_default().to_vec();
            self.publish(&channel, generation.to_string().into_bytes());
        }
        Ok(Value::Array(vec![
            int(1),
            int(generation),
            int(version as i64 + 1),
        ]))
    }

    /// A rows write's check of its base: `Some(what)` names the first thing
    /// Redis holds that is not the base (the stored digest, the table's
    /// type, its row count, a replaced row).
    fn off_base(
        &mut self,
        rows_at: usize,
        n_rows: usize,
        removed_at: usize,
        n_removed: usize,
    ) -> Result<Option<Vec<u8>>, WrongType> {
        let stored = if self.type_of(2) == "hash" {
            self.hget(2, "digest")?
        } else {
            None
        };
        if stored.as_deref() != self.arg(21) {
            return Ok(Some(format!("{} digest", self.key(2)).into_bytes()));
        }
        let table = self.key(1).to_string();
        let table_type = self.type_of(1);
        if !matches!(table_type, "hash" | "none") {
            return Ok(Some(format!("{table} type").into_bytes()));
        }
        // The row count stored with the digest is the table's.
        let members = count(self.hget(2, "members")?.as_deref());
        let now = self.now;
        let rows = if table_type == "hash" {
            self.ks.hlen(&table, now)? as u64
        } else {
            0
        };
        if members != Some(rows) {
            return Ok(Some(format!("{} members", self.key(2)).into_bytes()));
        }
        let replaced = (0..n_rows)
            .map(|k| (rows_at + 3 * k, 2, true))
            .chain((0..n_removed).map(|k| (removed_at + 2 * k, 1, false)));
        for (i, at, may_be_new) in replaced.collect::<Vec<_>>() {
            let member = self.arg(i).unwrap_or_default().to_vec();
            let replaces = self.arg(i + at).unwrap_or_default().to_vec();
            let holds = match self.ks.hget(&table, &member, now)? {
                None => may_be_new && replaces.is_empty(),
                Some(row) => {
                    crate::core::table::hex(&crate::core::table::row_hash(&member, &row)).as_bytes()
                        == replaces
                }
            };
            if !holds {
                let mut what = format!("{table} ").into_bytes();
                what.extend_from_slice(&member);
                return Ok(Some(what));
            }
        }
        Ok(None)
    }
}

/// `commit.lua`'s `rows` of a history entry: the members a rows write set or
/// deleted, comma-separated, or `*` (a whole write, over 1,000 rows or
/// 64 KiB, or a member named with a comma).
fn rows_written(rows_only: bool, names: &[Vec<u8>]) -> Vec<u8> {
    let mut bytes = 0;
    let whole = !rows_only
        || names.iter().any(|n| {
            bytes += n.len() + 1;
            names.len() > 1000 || bytes > 65536 || n.contains(&b',')
        });
    if whole {
        return b"*".to_vec();
    }
    names.join(&b',')
}
