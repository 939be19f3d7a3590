//! Redis URLs: checked as redis-rs reads them, built from the Redis
//! settings, and redacted for display.
//!
//! Guarantee: no check's reason quotes the URL it checks, and [`redact_url`]
//! replaces every password with `***`, reading malformed input conservatively.

use super::{
    ConfigError, Kind, Layers, REDIS_ADDRS, REDIS_CLUSTER, REDIS_PASS, REDIS_PASSWORD_FILE,
    REDIS_SENTINEL_MASTER, REDIS_TLS, REDIS_URL, REDIS_USER, split_list,
};
use crate::edge::redis::SentinelOptions;

/// A userinfo's user, its hidden password and the `@` that ends it.
type Span = (std::ops::Range<usize>, std::ops::Range<usize>, usize);

/// Where the userinfo of every `user:pass@` in `s` lies: for each, the byte
/// ranges of the user (kept), of what is hidden (the password, or the whole
/// userinfo when it has no `:`), and the index of its `@`.
///
/// Conservative on malformed input: a userinfo runs back from its `@` to the
/// `redis://` or `rediss://` of the last entry since the previous `@` that has
/// one (to the start of an entry with another scheme), else to the first `,`
/// since the previous `@`, else to the start. An `@` with no new entry since
/// the previous one extends that userinfo, and so does one after an empty
/// password or right after a `,`. So a password holding `@`, `/`, `,` or
/// `://` is never shown whole; only one holding `,redis://` cannot be told
/// from a list of URLs.
pub(super) fn userinfo_spans(s: &str) -> Vec<Span> {
    let mut spans: Vec<Span> = Vec::new();
    let mut start = 0;
    while let Some(at) = s[start..].find('@').map(|i| start + i) {
        let range = &s[start..at];
        // The last entry of the range that starts with a scheme: its userinfo
        // starts after the first "://" (a password may hold ',' or "://").
        let mut info_start = None;
        let mut offset = start;
        for entry in range.split(',') {
            let trimmed = entry.trim_start();
            let lead = entry.len() - trimmed.len();
            if let Some(i) = trimmed.find("://")
                && is_scheme(&trimmed[..i])
            {
                // Past a scheme Redis does not take, a `user:` may be the
                // start of a password (`u://pw@h` from `u:` + `//pw`).
                let known = matches!(&trimmed[..i], "redis" | "rediss");
                info_start = Some(offset + lead + if known { i + 3 } else { 0 });
            }
            offset += entry.len() + 1;
        }
        // A userinfo with an empty password is not ended by an '@' that
        // another follows without a new scheme: the password starts with
        // '@' (and may hold ',').
        // Nor does a ',' right before this '@' start an entry: the password
        // holds ",@".
        let previous_empty = spans
            .last()
            .is_some_and(|(_, hidden, _): &Span| hidden.is_empty());
        let no_entry = range
            .rsplit(',')
            .next()
            .is_some_and(|e| e.trim().is_empty());
        if let (None, false, Some(last)) = (
            info_start,
            range.contains(',') && !previous_empty && !no_entry,
            spans.last_mut(),
        ) {
            // No new entry since the previous '@': the password holds an '@'
            // (as the URL standard reads it, the userinfo ends at the last one).
            let (_, hidden, last_at) = last;
            hidden.end = at;
            *last_at = at;
            start = at + 1;
            continue;
        }
        // Without a scheme: the previous entry's host ends at the first ','
        // (a host has none; a password may).
        let info_start = info_start
            .or_else(|| (start > 0).then(|| range.find(',').map(|i| start + i + 1))?)
            .unwrap_or(start);
        let info = &s[info_start..at];
        match info.find(':') {
            Some(colon) => spans.push((
                info_start..info_start + colon,
                info_start + colon + 1..at,
                at,
            )),
            None => spans.push((info_start..info_start, info_start..at, at)),
        }
        start = at + 1;
    }
    spans
}

fn is_scheme(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_alphabetic())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

/// Replaces the password of every `user:pass@` in a URL, a comma-separated
/// list of URLs or a scheme-less `user:pass@host:port` with `***` (a userinfo
/// without `:` is replaced whole). An entry of the list that is neither a
/// Redis URL nor a `host:port` (after that) shows nothing past its first `:`
/// (after its `redis://`): it may be a password typed where a URL belongs
/// (`redis://h:1,garbage:Sup3rSecret`).
pub fn redact_url(url: &str) -> String {
    let mut out = String::new();
    let mut from = 0;
    for (user, hidden, at) in userinfo_spans(url) {
        out.push_str(&url[from..user.end]);
        if hidden.start > user.end {
            out.push(':');
        }
        out.push_str("***");
        from = at;
    }
    out.push_str(&url[from..]);
    // Every password is `***` now, so a ',' left separates entries.
    out.split(',')
        .map(|entry| match malformed_tail(entry) {
            Some(tail) => format!("{}***", &entry[..tail.start]),
            None => entry.to_string(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Where the part of a URL-list entry that may hold a secret starts and ends,
/// when the entry is malformed: everything after its first `:` after a
/// `redis://` or `rediss://` (all after that when there is none), after its
/// first `:` otherwise (a password may start with `//`), or all of a bare
/// word. `None` for a well-formed entry and one with a userinfo (`@`: its
/// password is what [`userinfo_spans`] finds).
pub(super) fn malformed_tail(entry: &str) -> Option<std::ops::Range<usize>> {
    let trimmed = entry.trim();
    if trimmed.is_empty()
        || trimmed.contains('@')
        || check_redis_url(trimmed, true).is_ok()
        || check_host_port(trimmed, true).is_ok()
    {
        return None;
    }
    let scheme = entry
        .find("://")
        .filter(|&i| matches!(entry[..i].trim_start(), "redis" | "rediss"));
    let after_scheme = scheme.map_or(0, |i| i + 3);
    match entry[after_scheme..].find(':') {
        Some(colon) => Some(after_scheme + colon + 1..entry.len()),
        // A bare word may be a password pasted after a ','.
        None if scheme.is_none() => Some(entry.len() - entry.trim_start().len()..entry.len()),
        // A password may itself begin with `//` (`garbage://pw`): all after
        // the scheme of a malformed entry may be secret.
        None => Some(after_scheme..entry.len()).filter(|r| !r.is_empty()),
    }
}

/// Checks `host[:port]` (`[v6]` too). Reasons never quote the input, which may
/// hold a password when the URL is malformed.
fn check_host_port(hp: &str, port_required: bool) -> Result<(), String> {
    let (host, port) = if let Some(v6) = hp.strip_prefix('[') {
        let (addr, after) = v6
            .split_once(']')
            .ok_or("an IPv6 host needs its closing ]")?;
        if addr.parse::<std::net::Ipv6Addr>().is_err() {
            return Err("the host in [] is not an IPv6 address".into());
        }
        match after {
            "" => (addr, None),
            p => (
                addr,
                Some(
                    p.strip_prefix(':')
                        .ok_or("expected :port after the IPv6 host")?,
                ),
            ),
        }
    } else {
        match hp.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (hp, None),
        }
    };
    if host.is_empty() {
        return Err("the host is missing".into());
    }
    if host.contains(|c: char| c.is_whitespace() || matches!(c, '@' | '/' | '?' | '#' | ',')) {
        return Err("the host has characters a host name cannot have".into());
    }
    match port {
        None if port_required => Err("the port is missing".into()),
        None => Ok(()),
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n >= 1 && p.bytes().all(|b| b.is_ascii_digit()) => Ok(()),
            _ => Err("the port must be a number from 1 to 65535".into()),
        },
    }
}

/// Checks one Redis URL as redis-rs reads it: scheme `redis` or `rediss`,
/// optional userinfo, a host (unless `-redis-addrs` replaces it), a port from
/// 1 to 65535 if given, an optional `/db` number, and a query string. Reasons
/// never quote the URL.
fn check_redis_url(url: &str, host_required: bool) -> Result<(), String> {
    let form = "expected redis://[user:pass@]host[:port][/db] or rediss://...";
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(form.into());
    };
    if scheme != "redis" && scheme != "rediss" {
        return Err(format!("the scheme must be redis or rediss; {form}"));
    }
    // As the URL standard (and so redis-rs) reads it: the authority ends at the
    // first '/', '?' or '#', and its userinfo at the last '@' in it.
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if host_required {
        check_host_port(host_port, false).map_err(|e| format!("{e}; {form}"))?;
    }
    let path = &tail[..tail.find(['?', '#']).unwrap_or(tail.len())];
    let db = path.trim_matches('/');
    if !db.is_empty() && (db.parse::<u32>().is_err() || !db.bytes().all(|b| b.is_ascii_digit())) {
        return Err(format!("the database must be a whole number; {form}"));
    }
    if host_required {
        // What is left (query parameters, a fragment, percent-encoding) is
        // redis-rs' own business: ask it, so that a URL that passes here
        // also opens. Its messages never quote the URL.
        redis::IntoConnectionInfo::into_connection_info(url)
            .map_err(|e| format!("redis cannot use it: {e}"))?;
    }
    Ok(())
}

/// The Redis URLs: `-redis-url` (one, or seed nodes of a Redis Cluster) with
/// its host replaced by each `-redis-addrs` entry, the user and password of
/// `-redis-user` and `-redis-pass` or `-redis-password-file` (so it never has
/// to sit on a command line) over the URL's own, and `rediss://` with
/// `-redis-tls`.
pub(super) fn redis_urls(l: &Layers) -> Result<Vec<String>, ConfigError> {
    let list = l.get(&REDIS_URL)?;
    let mut urls = split_list(&list);
    if urls.is_empty() {
        return Err(ConfigError::new(
            &REDIS_URL,
            "",
            "expected redis://host:port",
        ));
    }
    let addrs = l.get(&REDIS_ADDRS)?;
    for url in &urls {
        // -redis-addrs replaces the host, so only the rest of the URL counts then.
        check_redis_url(url, addrs.is_none())
            .map_err(|e| ConfigError::new(&REDIS_URL, &entry(&list, url), e))?;
    }
    if let Some(addrs) = addrs {
        let expected = "expected host:port[,host:port...]";
        let hosts = split_list(&addrs);
        if hosts.is_empty() {
            return Err(l.invalid(&REDIS_ADDRS, expected));
        }
        for h in &hosts {
            check_host_port(h, true).map_err(|e| {
                ConfigError::new(&REDIS_ADDRS, &entry(&addrs, h), format!("{e}; {expected}"))
            })?;
        }
        // Only the host changes: scheme (TLS), user, password and db stay.
        let (scheme, rest) = urls[0].split_once("://").expect("checked above");
        let (auth, host_and_db) = match rest.rsplit_once('@') {
            Some((a, h)) => (format!("{a}@"), h),
            None => (String::new(), rest),
        };
        let db = host_and_db.find('/').map_or("", |i| &host_and_db[i..]);
        urls = hosts
            .iter()
            .map(|h| format!("{scheme}://{auth}{h}{db}"))
            .collect();
        for url in &urls {
            check_redis_url(url, true).map_err(|e| ConfigError::new(&REDIS_ADDRS, url, e))?;
        }
    }
    let (user, pass) = credentials(l)?;
    // With Sentinel the URLs name the sentinels: the credentials are the
    // master's (see `redis_sentinel`).
    let sentinel = l.get(&REDIS_SENTINEL_MASTER)?.is_some();
    let force_tls = l.get(&REDIS_TLS)?;
    for url in &mut urls {
        if !sentinel {
            *url = crate::edge::redis::url::with_credentials(url, user.as_deref(), pass.as_deref());
        }
        if force_tls && url.starts_with("redis://") {
            *url = url.replacen("redis://", "rediss://", 1);
        }
    }
    Ok(urls)
}

/// `-redis-user`, and `-redis-pass` or else `-redis-password-file`.
fn credentials(l: &Layers) -> Result<(Option<String>, Option<String>), ConfigError> {
    let file_pass = l.get(&REDIS_PASSWORD_FILE)?;
    let pass = l.get(&REDIS_PASS)?.or(file_pass);
    Ok((l.get(&REDIS_USER)?, pass))
}

/// The Sentinel master to ask for, with the credentials of the master, when
/// `-redis-sentinel-master` is given (not with `-redis-cluster`).
pub(super) fn redis_sentinel(l: &Layers) -> Result<Option<SentinelOptions>, ConfigError> {
    let Some(master) = l.get(&REDIS_SENTINEL_MASTER)? else {
        return Ok(None);
    };
    if master.trim().is_empty() {
        return Err(l.invalid(&REDIS_SENTINEL_MASTER, "expected the master's name"));
    }
    if l.get(&REDIS_CLUSTER)? {
        return Err(l.invalid(
            &REDIS_SENTINEL_MASTER,
            "Sentinel and -redis-cluster exclude each other",
        ));
    }
    let (username, password) = credentials(l)?;
    Ok(Some(SentinelOptions {
        master: master.trim().to_string(),
        username,
        password,
    }))
}

/// An entry of a list for an error, unless a password holds a ',' (then the
/// entry would show a piece of it): then the whole list, redacted.
fn entry(list: &str, entry: &str) -> String {
    if Kind::Url.secrets(list).iter().any(|p| p.contains(',')) {
        list.to_string()
    } else {
        entry.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests_support::{no_env, with_env};
    use crate::config::{REDIS_CLUSTER, RawConfig, SETTINGS, resolve};
    use proptest::prelude::*;

    #[test]
    fn password_from_a_file_and_acl_user() {
        let dir = std::env::temp_dir().join(format!("distributor-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("redis-password");
        std::fs::write(&file, "s3cr:t\n").unwrap();
        let env = |k: &str| match k {
            "REDIS_PASSWORD_FILE" => Some(file.display().to_string()),
            "REDIS_USER" => Some("distributor".to_string()),
            _ => None,
        };
        let c = resolve(&RawConfig::default(), &env).unwrap();
        assert_eq!(c.redis_url, "redis://distributor:s3cr%3At@127.0.0.1:6379");
        assert_eq!(
            c.redis_url_redacted(),
            "redis://distributor:***@127.0.0.1:6379"
        );
        // A user in the URL stays when only the password comes from elsewhere.
        let raw = RawConfig::default()
            .with(&REDIS_URL, "redis://app@h:1")
            .with(&REDIS_PASS, "p");
        assert_eq!(
            resolve(&raw, &no_env).unwrap().redis_url,
            "redis://app:p@h:1"
        );
        let missing = RawConfig::default().with(&REDIS_PASSWORD_FILE, "/nonexistent/pw");
        let e = resolve(&missing, &no_env).unwrap_err();
        assert_eq!(e.flag, "redis-password-file");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn redis_addrs_replaces_only_the_host() {
        let raw = RawConfig::default()
            .with(&REDIS_URL, "rediss://app:pw@old:6379/3")
            .with(&REDIS_ADDRS, "new:6380");
        assert_eq!(
            resolve(&raw, &no_env).unwrap().redis_url,
            "rediss://app:pw@new:6380/3"
        );
    }

    #[test]
    fn several_nodes_mean_cluster() {
        let raw = RawConfig::default()
            .with(&REDIS_ADDRS, "a:7000, b:7001,c:7002")
            .with(&REDIS_PASS, "pw");
        let c = resolve(&raw, &no_env).unwrap();
        assert!(c.redis_cluster);
        assert_eq!(
            c.redis_url,
            "redis://:pw@a:7000,redis://:pw@b:7001,redis://:pw@c:7002"
        );
        assert_eq!(
            c.redis_url_redacted(),
            "redis://:***@a:7000,redis://:***@b:7001,redis://:***@c:7002"
        );
        assert_eq!(c.redis_options().urls.len(), 3);
        let one = RawConfig::default().with(&REDIS_CLUSTER, "true");
        let c = resolve(&one, &no_env).unwrap();
        assert!(c.redis_cluster && c.redis_options().is_cluster());
        let bad = RawConfig::default().with(&REDIS_URL, "redis://a:1,http://b:2");
        assert_eq!(resolve(&bad, &no_env).unwrap_err().flag, "redis-url");
    }

    #[test]
    fn redis_addrs_and_password() {
        let raw = RawConfig::default()
            .with(&REDIS_ADDRS, "10.0.0.5:6380")
            .with(&REDIS_PASS, "p@ss:w/rd");
        let c = resolve(&raw, &no_env).unwrap();
        assert_eq!(c.redis_url, "redis://:p%40ss%3Aw%2Frd@10.0.0.5:6380");
        assert_eq!(c.redis_url_redacted(), "redis://:***@10.0.0.5:6380");
        assert_eq!(redact_url("redis://u:secret@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(redact_url("redis://h:1"), "redis://h:1");
    }

    const PW: &str = "hunter2-Sekr3t";

    fn assert_no_password(what: &str, texts: &[String]) {
        for text in texts {
            assert!(!text.contains(PW), "{what}: the password shows in {text}");
        }
    }

    #[test]
    fn passwords_never_appear_in_errors_or_debug() {
        // Malformed forms of the URL settings, each with the password inside.
        let url_forms = [
            format!("redis://user:{PW}@host:99999"),
            format!("redis://user:{PW}@host:0"),
            format!("redis://user:{PW}@host:1/notadb"),
            format!("redis://user:{PW}@:1"),
            format!("redis://user:{PW}@"),
            format!("user:{PW}@host:1"),
            format!("http://user:{PW}@host:1"),
            format!("redis://a:1,http://user:{PW}@b:2"),
            format!("redis://a:1,user:{PW}@b:2"),
            format!("redis://:{PW}@host:1 , redis://:{PW}@host:x"),
            format!("redis://user:{PW}@[::1:1"),
            format!("redis://user:x@{PW}@h:99999"),
            format!("redis://user:{PW}/x@h:99999"),
            format!("rediss://user:{PW}@h:1?protocol=resp9"),
            format!("redis://{PW}@h:99999"),
            format!("redis://:{PW},x@h:99999"),
            format!("{PW}@h:1"),
            format!("h:1,user:{PW}@h:2"),
            format!("user:{PW}@h"),
            format!("user:{PW}@h:1/0"),
        ];
        let plain_forms = [
            "bad value",
            "-1s",
            "",
            " , ",
            "0",
            "1ns",
            "x{}y",
            "redis://h:0",
        ];
        let background = [
            ("REDIS_URL", format!("redis://user:{PW}@h:1")),
            ("REDIS_PASSWORD", PW.to_string()),
        ];
        let mut errors = 0;
        for s in SETTINGS {
            let forms: Vec<String> = match s.kind {
                Kind::Url => url_forms.to_vec(),
                Kind::Secret => vec![PW.to_string(), format!("{PW}@h:1")],
                Kind::Text | Kind::Bool => plain_forms.iter().map(|f| f.to_string()).collect(),
            };
            for form in forms {
                // The setting under test, through each of its variables, over a
                // background that holds the password in the URL and REDIS_PASSWORD.
                for env_name in s.env {
                    let mut vars: Vec<(&str, &str)> =
                        background.iter().map(|(k, v)| (*k, v.as_str())).collect();
                    vars.retain(|(k, _)| k != env_name);
                    vars.push((env_name, &form));
                    if s.kind == Kind::Secret {
                        // A secret is never checked: make something else fail.
                        vars.push(("POLL_INTERVAL", "fast"));
                    }
                    let what = format!("{env_name}={form:?}");
                    match with_env(&vars) {
                        Err(e) => {
                            errors += 1;
                            assert_no_password(&what, &[e.to_string(), format!("{e:?}")]);
                        }
                        Ok(c) => assert_no_password(&what, &[format!("{c:?}")]),
                    }
                }
            }
        }
        assert!(
            errors > 100,
            "only {errors} errors: the forms do not exercise the checks"
        );
        // Every malformed URL form is refused, naming its flag.
        for form in &url_forms {
            let e = with_env(&[("REDIS_URL", form)]).unwrap_err();
            assert_eq!(e.flag, "redis-url", "{form}: {e}");
        }
        let e = with_env(&[("REDIS_ADDRS", &format!("user:{PW}@h:1"))]).unwrap_err();
        assert_eq!((e.flag, e.value.as_str()), ("redis-addrs", "user:***@h:1"));
        let e = with_env(&[("REDIS_URL", &format!("redis://user:{PW}@host:99999"))]).unwrap_err();
        assert_eq!(e.value, "redis://user:***@host:99999");

        // A valid configuration with a password, and the raw values.
        let c = with_env(&[("REDIS_URL", &format!("redis://user:{PW}@h:1/2"))]).unwrap();
        assert_no_password("valid config", &[format!("{c:?}"), c.redis_url_redacted()]);
        assert!(format!("{c:?}").contains("redis://user:***@h:1/2"), "{c:?}");
        let c = with_env(&[("REDIS_PASS", PW), ("REDIS_ADDRS", "a:1,b:2")]).unwrap();
        assert_no_password("cluster config", &[format!("{c:?}")]);
        let raw = RawConfig::default()
            .with(&REDIS_PASS, PW)
            .with(&REDIS_URL, format!("redis://u:{PW}@h:1"))
            .with(&REDIS_ADDRS, format!("u:{PW}@h:1"));
        assert_no_password("raw config", &[format!("{raw:?}")]);
    }

    #[test]
    fn redaction_hides_every_password() {
        for (url, shown) in [
            ("redis://u:secret@h:1/0", "redis://u:***@h:1/0"),
            ("redis://h:1", "redis://h:1"),
            ("u:secret@h:1", "u:***@h:1"),
            ("redis://secret@h:1", "redis://***@h:1"),
            ("redis://:secret@h:1", "redis://:***@h:1"),
            ("redis://u:sec@ret@h:1", "redis://u:***@h:1"),
            ("redis://u:a@b:c@h:1", "redis://u:***@h:1"),
            ("u:a@b:c@h:1,v:d@h:2", "u:***@h:1,v:***@h:2"),
            ("redis://u:sec,ret@h:1", "redis://u:***@h:1"),
            ("redis://u:a://b@h:1", "redis://u:***@h:1"),
            (
                "redis://a:1,http://u:secret@b:2",
                "redis://a:1,http:***@b:2",
            ),
            ("u://a=!:@h:1", "u:***@h:1"),
            (
                " redis://a:1, redis://:secret@b:2",
                " redis://a:1, redis://:***@b:2",
            ),
            ("h:1,u:secret@h:2", "h:***@h:2"),
            // A malformed entry may be a password where a URL belongs.
            (
                "redis://127.0.0.1:6379,garbage:Sup3rSecretPW",
                "redis://127.0.0.1:6379,garbage:***",
            ),
            ("redis://h:1, garbage:a:b", "redis://h:1, garbage:***"),
            ("redis://h:x,y", "redis://h:***,***"),
            ("redis://h:1, Sup3rSecret", "redis://h:1, ***"),
            ("redis://a:1,garbage://a#0_", "redis://a:1,garbage:***"),
            ("redis://a:1,redis://a b", "redis://a:1,redis://***"),
            ("redis://u:@#~~0,@h:1", "redis://u:***@h:1"),
            ("redis://u:@,!#a:@h:1", "redis://u:***@h:1"),
            ("u:@,a:@h:1", "u:***@h:1"),
            ("redis://u:*@aAA,@h:1", "redis://u:***@h:1"),
            ("u:a,b:c@h:1", "u:***@h:1"),
            (
                "redis://:a@h:1,redis://:b@h:2,c:d@h:3",
                "redis://:***@h:1,redis://:***@h:2,c:***@h:3",
            ),
        ] {
            assert_eq!(redact_url(url), shown);
        }
    }

    #[test]
    fn redis_urls_are_checked_in_full() {
        for bad in [
            "redis://host:99999",
            "redis://host:0",
            "redis://host:x",
            "redis://host:",
            "redis://:6379",
            "redis://",
            "redis://h:1/db",
            "redis://h:1/-1",
            "host:6379",
            "unix:///tmp/redis.sock",
            "redis://0.0.0.0:6379",
            "redis://[::1:6379",
            "rediss://h:1?protocol=resp9",
            "redis://h:1,redis://h:99999",
        ] {
            let e = with_env(&[("REDIS_URL", bad)]).unwrap_err();
            // Shown redacted: a malformed entry may hold a password.
            let shown = redact_url(bad.rsplit(',').next().unwrap());
            assert_eq!((e.flag, e.value.as_str()), ("redis-url", shown.as_str()));
        }
        for good in [
            "redis://h",
            "redis://h:6379/0",
            "redis://h:6379/",
            "rediss://u:p@h:1/15?protocol=resp3",
            "redis://[::1]:6379",
            "redis://u@h:1",
            "rediss://h:1#insecure",
            "redis://:p%40ss@h:1",
        ] {
            with_env(&[("REDIS_URL", good)]).unwrap_or_else(|e| panic!("{good}: {e}"));
        }
        for bad in ["h:99999", "h", ":1", "h:0", "h:1/0", "[::1]", "a:1,b"] {
            let e = with_env(&[("REDIS_ADDRS", bad)]).unwrap_err();
            assert_eq!(e.flag, "redis-addrs", "{bad}: {e}");
        }
        // -redis-addrs replaces the host, so the URL needs none then.
        let c = with_env(&[("REDIS_URL", "rediss://:pw@/2"), ("REDIS_ADDRS", "h:7")]).unwrap();
        assert_eq!(c.redis_url, "rediss://:pw@h:7/2");
    }

    /// A password without the characters that would end a list entry or
    /// make it a userinfo.
    fn plain(pw: &str) -> String {
        pw.replace(['@', ','], "x")
    }

    proptest! {
        /// Whatever a password holds, no URL form shows it whole, and no
        /// error over such a URL does.
        #[test]
        fn no_password_survives_redaction(
            pw in "[A-Za-z0-9!#$%&*+,;=@:/._~-]{6,20}",
            port in prop::sample::select(vec!["1", "99999", "", "x"]),
        ) {
            for url in [
                format!("redis://u:{pw}@h:{port}"),
                format!("redis://:{pw}@h:{port}/0"),
                format!("u:{pw}@h:{port}"),
                format!("redis://a:1,redis://:{pw}@h:{port}"),
                format!("redis://:{pw}@h:{port},redis://b:2"),
                format!("rediss://u:{pw}@h:{port}#insecure"),
                // A password typed where a URL of the list belongs (with
                // an '@' it reads as a userinfo, redacted above; a ',' would
                // end the entry).
                format!("redis://a:1,garbage:{}", plain(&pw)),
                format!("garbage:{},redis://a:1", plain(&pw)),
            ] {
                let pw = if url.contains("garbage") { plain(&pw) } else { pw.clone() };
                let shown = redact_url(&url);
                prop_assert!(!shown.contains(&pw), "{} shown as {}", url, shown);
                for var in ["REDIS_URL", "REDIS_ADDRS"] {
                    let vars = [(var, url.as_str()), ("REDIS_PASS", pw.as_str())];
                    let text = match with_env(&vars) {
                        Ok(c) => format!("{c:?}"),
                        Err(e) => format!("{e} {e:?}"),
                    };
                    prop_assert!(!text.contains(&pw), "{}={}: {}", var, url, text);
                }
            }
        }
    }
}
