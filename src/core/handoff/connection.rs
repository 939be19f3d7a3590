//! The Redis connection a member reads its row on, as its report names it:
//! the client id Redis gave the connection and the run id of the Redis
//! server it is on.
//!
//! Guarantee: a connection is only ever looked for on the server it is on.
//! Client ids are numbered per server process (from 1 at every start), so
//! after a failover or a restart the id a dead member named may belong to
//! another, live connection of the server the holder now asks; the run id
//! tells them apart. A connection named with another server's run id is
//! gone from the server the holder asks, whatever ids that one has. One
//! named without a run id (an older member, or Redis refused `INFO`) is
//! looked for by its id alone, as before.

use std::fmt;

/// A Redis server process's run id (`INFO server`, `run_id`): 40 hex
/// digits, random at every start.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RunId([u8; RunId::LEN]);

impl RunId {
    /// Its length in hex digits.
    pub const LEN: usize = 40;

    /// The run id of 40 times `c` (a hex digit), for tests.
    #[cfg(test)]
    pub(crate) fn repeated(c: char) -> RunId {
        RunId::parse(&c.to_string().repeat(RunId::LEN)).expect("a hex digit")
    }

    /// Parses exactly 40 hex digits (either case); `None` for anything else.
    pub fn parse(s: &str) -> Option<RunId> {
        let b = s.as_bytes();
        if b.len() != RunId::LEN || !b.iter().all(u8::is_ascii_hexdigit) {
            return None;
        }
        let mut out = [0u8; RunId::LEN];
        for (o, c) in out.iter_mut().zip(b) {
            *o = c.to_ascii_lowercase();
        }
        Some(RunId(out))
    }

    /// The `run_id` line of an `INFO server` reply; `None` when there is no
    /// such line or it is not a run id.
    pub fn from_info(info: &str) -> Option<RunId> {
        info.lines()
            .find_map(|l| l.strip_prefix("run_id:"))
            .and_then(|v| RunId::parse(v.trim()))
    }

    pub fn as_str(&self) -> &str {
        // Only ASCII hex digits are ever stored.
        std::str::from_utf8(&self.0).expect("a run id is ASCII")
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RunId({})", self.as_str())
    }
}

/// A member's Redis connection: its client id (`CLIENT ID`), and the run id
/// of the server it is on where the member could tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RedisConnection {
    pub client: u64,
    pub server: Option<RunId>,
}

impl RedisConnection {
    /// A connection known by its client id alone.
    pub fn id(client: u64) -> RedisConnection {
        RedisConnection {
            client,
            server: None,
        }
    }

    pub fn on(client: u64, server: RunId) -> RedisConnection {
        RedisConnection {
            client,
            server: Some(server),
        }
    }

    /// Whether it is certainly not a connection of the server whose run id
    /// is `server` (`None`: that server's run id is not known, so nothing
    /// is certain).
    pub fn elsewhere_than(&self, server: Option<RunId>) -> bool {
        matches!((self.server, server), (Some(a), Some(b)) if a != b)
    }

    /// The stored form: `<client id>` or `<client id>@<run id>`.
    pub fn encode(&self) -> String {
        match self.server {
            Some(s) => format!("{}@{s}", self.client),
            None => self.client.to_string(),
        }
    }

    /// Parses [`RedisConnection::encode`]'s form; `None` for anything else.
    pub fn decode(s: &str) -> Option<RedisConnection> {
        let (client, server) = match s.split_once('@') {
            Some((c, r)) => (c, Some(RunId::parse(r)?)),
            None => (s, None),
        };
        Some(RedisConnection {
            client: super::parse_count(client)?,
            server,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "8c1f1a7c0e4f4b5c9f2d3e4a5b6c7d8e9f0a1b2c";
    const B: &str = "0000000000000000000000000000000000000001";

    #[test]
    fn a_run_id_is_exactly_forty_hex_digits() {
        assert_eq!(RunId::parse(A).unwrap().as_str(), A);
        assert_eq!(
            RunId::parse(&A.to_uppercase()).unwrap(),
            RunId::parse(A).unwrap(),
            "either case, stored lowercase"
        );
        for bad in ["", &A[1..], &format!("{A}0"), &A.replace('c', "g"), " "] {
            assert_eq!(RunId::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_run_id_is_read_from_an_info_reply() {
        let info = format!("# Server\r\nredis_version:7.0.15\r\nrun_id:{A}\r\ntcp_port:6379\r\n");
        assert_eq!(RunId::from_info(&info), RunId::parse(A));
        assert_eq!(
            RunId::from_info("# Server\r\nredis_version:7.0.15\r\n"),
            None
        );
        assert_eq!(RunId::from_info("run_id:xyz\r\n"), None);
    }

    #[test]
    fn a_connection_round_trips_and_rejects_garbage() {
        let on = RedisConnection::on(17, RunId::parse(A).unwrap());
        assert_eq!(on.encode(), format!("17@{A}"));
        assert_eq!(RedisConnection::decode(&on.encode()), Some(on));
        let id = RedisConnection::id(17);
        assert_eq!(id.encode(), "17");
        assert_eq!(RedisConnection::decode("17"), Some(id));
        for bad in [
            "",
            "@",
            "17@",
            "@abc",
            "x@",
            "17@zz",
            &format!("-1@{A}"),
            &format!("17@{A}@{A}"),
        ] {
            assert_eq!(RedisConnection::decode(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn only_another_known_server_is_certain() {
        let (a, b) = (RunId::parse(A).unwrap(), RunId::parse(B).unwrap());
        assert!(RedisConnection::on(3, a).elsewhere_than(Some(b)));
        assert!(!RedisConnection::on(3, a).elsewhere_than(Some(a)));
        assert!(!RedisConnection::on(3, a).elsewhere_than(None));
        assert!(!RedisConnection::id(3).elsewhere_than(Some(b)));
    }
}
