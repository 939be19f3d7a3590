//! Credentials put into a Redis URL: the one way the daemon's settings
//! (`-redis-user`, `-redis-pass`) and a member's environment
//! (`REDIS_USER`, `REDIS_PASS`) reach a URL.
//!
//! Pure text; the URL is assumed checked (it has a `scheme://`).

/// `url` with its user and/or password replaced by those given (each kept
/// from the URL when not given), percent-encoded.
pub fn with_credentials(url: &str, user: Option<&str>, pass: Option<&str>) -> String {
    if user.is_none() && pass.is_none() {
        return url.to_string();
    }
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (auth, host) = rest.rsplit_once('@').unwrap_or(("", rest));
    let (url_user, url_pass) = auth.split_once(':').unwrap_or((auth, ""));
    let user = user.map_or_else(|| url_user.to_string(), encode_userinfo);
    let pass = pass.map_or_else(|| url_pass.to_string(), encode_userinfo);
    format!("{scheme}://{user}:{pass}@{host}")
}

/// The URLs of a comma-separated list for display, with no secret: each
/// entry as `scheme://host:port/db` when redis-rs reads it as a URL, and
/// `<malformed>` otherwise (a password holding `,` splits its URL into
/// entries that are malformed, so nothing of it shows).
pub fn display_urls(list: &str) -> String {
    list.split(',')
        .map(|entry| match redis::parse_redis_url(entry.trim()) {
            Some(u) => {
                let host = u.host_str().unwrap_or("");
                match u.port() {
                    Some(p) => format!("{}://{host}:{p}{}", u.scheme(), u.path()),
                    None => format!("{}://{host}{}", u.scheme(), u.path()),
                }
            }
            _ => "<malformed>".to_string(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Percent-encodes a user or password for use in a URL.
fn encode_userinfo(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_replace_those_of_the_url_and_are_encoded() {
        let u = "redis://old:secret@h:6379/2";
        assert_eq!(with_credentials(u, None, None), u);
        assert_eq!(
            with_credentials(u, None, Some("p@ss/w,rd")),
            "redis://old:p%40ss%2Fw%2Crd@h:6379/2"
        );
        assert_eq!(
            with_credentials("rediss://h", Some("app"), Some("pw")),
            "rediss://app:pw@h"
        );
        let parsed = redis::parse_redis_url(&with_credentials("redis://h:1", None, Some("a:b@c")))
            .expect("a URL redis-rs reads");
        assert_eq!(
            percent_decoded(parsed.password().expect("a password")),
            "a:b@c"
        );
    }

    #[test]
    fn displayed_urls_show_no_secret() {
        assert_eq!(
            display_urls("redis://u:secret@h:1/2,rediss://h2"),
            "redis://h:1/2,rediss://h2"
        );
        for list in [
            "redis://u:se,cret@h:1",
            "garbage:secret",
            "redis://:s@cret@h",
        ] {
            let shown = display_urls(list);
            assert!(
                !shown.contains("se") || !shown.contains("cret"),
                "{list} → {shown}"
            );
            assert!(!shown.contains("secret"), "{list} → {shown}");
        }
    }

    fn percent_decoded(s: &str) -> String {
        let b = s.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < b.len() {
            if b[i] == b'%' {
                out.push(u8::from_str_radix(&s[i + 1..i + 3], 16).unwrap());
                i += 3;
            } else {
                out.push(b[i]);
                i += 1;
            }
        }
        String::from_utf8(out).unwrap()
    }
}
