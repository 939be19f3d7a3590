//! `register.lua`, `replace_list.lua`, `forget.lua` and `quarantine.lua`:
//! the services and units lists, forgetting members, and recording
//! quarantined units.

use redis::Value;

use super::{Call, count, int, invalid, wrong_type};
use crate::edge::memory::keyspace::WrongType;

impl Call<'_> {
    /// `register.lua`.
    pub(super) fn register(&mut self) -> Result<Value, WrongType> {
        let t = self.type_of(1);
        if t != "list" && t != "none" {
            return Ok(wrong_type(self.key(1), t, "list"));
        }
        let (key, now) = (self.key(1).to_string(), self.now);
        let value = self.arg(1).unwrap_or_default().to_vec();
        if self.ks.lpos(&key, &value, now)?.is_some() {
            return Ok(int(0));
        }
        let front = self.arg(2) == Some(b"LPUSH");
        self.ks.push(&key, &[value], front, now)?;
        Ok(int(1))
    }

    /// `replace_list.lua`.
    pub(super) fn replace_list(&mut self) -> Result<Value, WrongType> {
        let t = self.type_of(1);
        if t != "list" && t != "none" {
            return Ok(wrong_type(self.key(1), t, "list"));
        }
        let (key, now) = (self.key(1).to_string(), self.now);
        self.ks.del(&key, now);
        self.ks.push(&key, self.argv, false, now)?;
        Ok(int(self.argv.len() as i64))
    }

    /// `forget.lua`.
    pub(super) fn forget(&mut self) -> Result<Value, WrongType> {
        if let Some(refused) = self.fenced(1, 2)? {
            return Ok(refused);
        }
        let lists = self.keys.len() - 4;
        for i in 5..=self.keys.len() {
            let t = self.type_of(i);
            if t != "list" && t != "none" {
                return Ok(wrong_type(self.key(i), t, "list"));
            }
        }
        for i in (3..=self.argv.len()).step_by(2) {
            match count(self.arg(i)) {
                Some(n) if n <= lists as u64 => {}
                _ => {
                    return Ok(invalid(
                        b"ARGV",
                        b"list number",
                        self.arg(i),
                        &format!("a list number in 0..{lists}"),
                    ));
                }
            }
        }
        let reports = self.type_of(3) == "hash";
        let loads = self.type_of(4) == "hash";
        let now = self.now;
        let mut out = vec![int(1)];
        for i in (3..=self.argv.len()).step_by(2) {
            let n = count(self.arg(i)).expect("checked above") as usize;
            let member = self.arg(i + 1).unwrap_or_default().to_vec();
            if n > 0 {
                let list = self.key(4 + n).to_string();
                out.push(int(self.ks.lrem_all(&list, &member, now)? as i64));
            } else {
                out.push(int(0));
            }
            if reports {
                let k = self.key(3).to_string();
                self.ks.hdel(&k, std::slice::from_ref(&member), now)?;
            }
            if loads {
                let k = self.key(4).to_string();
                self.ks.hdel(&k, &[member], now)?;
            }
        }
        Ok(Value::Array(out))
    }

    /// `quarantine.lua`.
    pub(super) fn quarantine(&mut self) -> Result<Value, WrongType> {
        if let Some(refused) = self.fenced(1, 2)? {
            return Ok(refused);
        }
        let t = self.type_of(3);
        if t != "hash" && t != "none" {
            return Ok(wrong_type(self.key(3), t, "hash"));
        }
        if !self.argv.len().is_multiple_of(2) {
            let n = (self.argv.len() as i64 - 2).to_string();
            return Ok(invalid(
                b"ARGV",
                b"pairs",
                Some(n.as_bytes()),
                "an even count of unit and record",
            ));
        }
        for i in (3..=self.argv.len()).step_by(2) {
            let unit = self.arg(i).unwrap_or_default();
            if unit.is_empty() || unit.contains(&b',') {
                return Ok(invalid(
                    b"ARGV",
                    b"unit",
                    Some(unit),
                    "a unit name: not empty, no comma",
                ));
            }
            let record = self.arg(i + 1).unwrap_or_default();
            let digits: Vec<u8> = record
                .iter()
                .copied()
                .take_while(u8::is_ascii_digit)
                .collect();
            if count(Some(&digits)).is_none() {
                return Ok(invalid(
                    b"ARGV",
                    unit,
                    Some(record),
                    "<since_ms> <member>@<ms>,...",
                ));
            }
        }
        let (key, now) = (self.key(3).to_string(), self.now);
        let mut added = 0;
        for i in (3..=self.argv.len()).step_by(2) {
            let pair = (
                self.arg(i).unwrap_or_default().to_vec(),
                self.arg(i + 1).unwrap_or_default().to_vec(),
            );
            added += self.ks.hset(&key, &[pair], now)?;
        }
        Ok(Value::Array(vec![int(1), int(added as i64)]))
    }
}
