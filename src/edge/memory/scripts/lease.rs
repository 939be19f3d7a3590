//! `acquire.lua`, `renew.lua` and `release.lua`: the lease, its fencing
//! epoch and the holder's connection record.

use redis::Value;

use super::{COUNT, Call, MAX_SAFE, bulk, count, int, invalid, num, wrong_type};
use crate::edge::memory::keyspace::WrongType;

/// `prelude.lua`'s `CONNECTION`.
const CONNECTION: &str = "'<client id>' or '<client id>@<run id>'";

/// `prelude.lua`'s `connection`: '<client id>' or '<client id>@<run id>'
/// (40 hex digits).
fn connection(s: Option<&[u8]>) -> bool {
    let Some(s) = s else { return false };
    match s.iter().position(|b| *b == b'@') {
        Some(at) => {
            let run = &s[at + 1..];
            count(Some(&s[..at])).is_some()
                && run.len() == 40
                && run.iter().all(u8::is_ascii_hexdigit)
        }
        None => count(Some(s)).is_some(),
    }
}

impl Call<'_> {
    /// `acquire.lua`.
    pub(super) fn acquire(&mut self) -> Result<Value, WrongType> {
        let argv = self.argv;
        let a = |i: usize| argv.get(i - 1).map(Vec::as_slice);
        let Some(ttl) = count(a(2)).filter(|t| *t > 0) else {
            return Ok(invalid(b"ARGV", b"ttl_ms", a(2), "a TTL in ms > 0"));
        };
        let Some(floor) = count(a(3)) else {
            return Ok(invalid(b"ARGV", b"epoch_floor", a(3), COUNT));
        };
        if count(a(5)).is_none() {
            return Ok(invalid(b"ARGV", b"now_ms", a(5), COUNT));
        }
        if count(a(6)).is_none() {
            return Ok(invalid(b"ARGV", b"failure_threshold", a(6), COUNT));
        }
        let Some(generation_floor) = count(a(7)) else {
            return Ok(invalid(b"ARGV", b"generation_floor", a(7), COUNT));
        };
        if a(8) != Some(b"") && !connection(a(8)) {
            return Ok(invalid(b"ARGV", b"client_id", a(8), CONNECTION));
        }
        let dead_token = a(9).unwrap_or_default().to_vec();
        let now = self.now;

        let epoch_type = self.type_of(2);
        if epoch_type != "string" && epoch_type != "none" {
            return Ok(wrong_type(self.key(2), epoch_type, "string"));
        }
        let mut epoch = 0;
        if epoch_type == "string" {
            let text = self.ks.get(&self.keys[1], now)?;
            match count(text.as_deref()) {
                Some(e) if e + 1 < MAX_SAFE => epoch = e,
                _ => {
                    return Ok(invalid(
                        self.key(2).as_bytes(),
                        b"",
                        text.as_deref(),
                        &format!("{COUNT}, below its largest"),
                    ));
                }
            }
        }
        if floor + 1 >= MAX_SAFE {
            return Ok(invalid(
                b"ARGV",
                b"epoch_floor",
                a(3),
                &format!("{COUNT}, below its largest"),
            ));
        }

        let meta_type = self.type_of(3);
        let (mut generation, mut stored_floor) = (0, 0);
        if meta_type == "hash" {
            for (field, slot) in [
                ("generation", &mut generation),
                ("generation_floor", &mut stored_floor),
            ] {
                if let Some(v) = self.hget(3, field)? {
                    match count(Some(&v)) {
                        Some(n) => *slot = n,
                        None => {
                            return Ok(invalid(
                                self.key(3).as_bytes(),
                                field.as_bytes(),
                                Some(&v),
                                COUNT,
                            ));
                        }
                    }
                }
            }
        }

        let mut lease_type = self.type_of(1);
        if !dead_token.is_empty()
            && lease_type == "string"
            && meta_type == "hash"
            && self.ks.get(&self.keys[0], now)? == Some(dead_token.clone())
            && count(self.arg(10)) == Some(epoch)
        {
            let mut record = dead_token.clone();
            record.push(b' ');
            record.extend_from_slice(self.arg(11).unwrap_or_default());
            if self.hget(3, "holder_conn")? == Some(record) {
                self.del(1);
                lease_type = "none";
            }
        }
        let lease_key = self.key(1).to_string();
        let mut foreign = String::new();
        if lease_type != "none" && lease_type != "string" {
            foreign = format!("the lease key holds a {lease_type}");
        } else if lease_type == "string" && self.ks.pttl(&lease_key, now) < 0 {
            foreign = "the lease key has no TTL".into();
        }

        if meta_type != "hash" && meta_type != "none" {
            self.del(3);
        }
        if generation_floor > stored_floor {
            self.hset(
                3,
                vec![Self::pair("generation_floor", num(generation_floor))],
            )?;
            stored_floor = generation_floor;
        }
        let known_generation = generation.max(stored_floor);

        if lease_type == "none" {
            let token = self.arg(1).unwrap_or_default().to_vec();
            self.ks.set(&lease_key, token.clone(), Some(ttl), now);
            epoch = epoch.max(floor) + 1;
            let epoch_key = self.key(2).to_string();
            self.ks.set(&epoch_key, num(epoch), None, now);
            let mut conn = token;
            conn.push(b' ');
            conn.extend_from_slice(self.arg(8).unwrap_or_default());
            let pairs = vec![
                Self::pair("holder", self.arg(4).unwrap_or_default()),
                Self::pair("holder_epoch", num(epoch)),
                Self::pair("acquired_at_ms", self.arg(5).unwrap_or_default()),
                Self::pair("failure_threshold", self.arg(6).unwrap_or_default()),
                Self::pair("holder_conn", conn),
            ];
            self.hset(3, pairs)?;
            return Ok(Value::Array(vec![int(1), int(epoch as i64)]));
        }
        if epoch < floor {
            let epoch_key = self.key(2).to_string();
            self.ks.set(&epoch_key, num(floor), None, now);
            epoch = floor;
        }
        if !foreign.is_empty() {
            let mut pttl = self.ks.pttl(&lease_key, now);
            if pttl < 0 {
                self.ks.pexpire(&lease_key, ttl, now);
                pttl = ttl as i64;
            }
            return Ok(Value::Array(vec![
                int(0),
                int(pttl),
                bulk(""),
                int(epoch as i64),
                int(known_generation as i64),
                bulk(foreign),
                bulk(""),
                bulk(""),
            ]));
        }
        let token = self.ks.get(&lease_key, now)?.unwrap_or_default();
        let (mut holder, mut client) = (Vec::new(), Vec::new());
        if meta_type == "hash" {
            holder = self.hget(3, "holder")?.unwrap_or_default();
            let conn = self.hget(3, "holder_conn")?.unwrap_or_default();
            let mut prefix = token.clone();
            prefix.push(b' ');
            if conn.starts_with(&prefix) {
                client = conn[prefix.len()..].to_vec();
            }
        }
        Ok(Value::Array(vec![
            int(0),
            int(self.ks.pttl(&lease_key, now)),
            bulk(holder),
            int(epoch as i64),
            int(known_generation as i64),
            bulk(""),
            bulk(token),
            bulk(client),
        ]))
    }

    /// `renew.lua`.
    pub(super) fn renew(&mut self) -> Result<Value, WrongType> {
        let Some(ttl) = count(self.arg(3)).filter(|t| *t > 0) else {
            return Ok(invalid(b"ARGV", b"ttl_ms", self.arg(3), "a TTL in ms > 0"));
        };
        let client = self.arg(4).unwrap_or_default().to_vec();
        if !client.is_empty() && !connection(Some(&client)) {
            return Ok(invalid(b"ARGV", b"client_id", Some(&client), CONNECTION));
        }
        let lost = |why: &str| Value::Array(vec![int(0), bulk(why)]);
        match self.type_of(1) {
            "none" => return Ok(lost("expired")),
            "string" => {}
            _ => return Ok(lost("foreign")),
        }
        if !self.holds(1, 1)? {
            return Ok(lost("taken"));
        }
        if !self.holds(2, 2)? {
            return Ok(lost("epoch"));
        }
        let meta_type = self.type_of(3);
        let (lease_key, now) = (self.key(1).to_string(), self.now);
        self.ks.pexpire(&lease_key, ttl, now);
        if meta_type == "hash" || meta_type == "none" {
            let mut record = self.arg(1).unwrap_or_default().to_vec();
            record.push(b' ');
            record.extend_from_slice(&client);
            if self.hget(3, "holder_conn")? != Some(record.clone()) {
                self.hset(3, vec![Self::pair("holder_conn", record)])?;
            }
        }
        Ok(Value::Array(vec![int(1)]))
    }

    /// `release.lua`.
    pub(super) fn release(&mut self) -> Result<Value, WrongType> {
        if !self.holds(1, 1)? {
            return Ok(int(0));
        }
        let meta_type = self.type_of(2);
        self.del(1);
        if meta_type == "hash" || meta_type == "none" {
            self.hset(2, vec![Self::pair("holder", "")])?;
        }
        let (channel, epoch) = (
            self.arg(3).unwrap_or_default().to_vec(),
            self.arg(2).unwrap_or_default().to_vec(),
        );
        self.publish(&channel, epoch);
        Ok(int(1))
    }
}
