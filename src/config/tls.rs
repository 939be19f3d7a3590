//! TLS settings: the CA, certificate and key files for Redis and for pings,
//! read at start so that a bad path or half a pair fails naming its flag.

use crate::edge::tls::{TlsError, TlsFiles};

use super::{
    ConfigError, File, Files, Layers, PING_TLS_CA, PING_TLS_CERT, PING_TLS_DOMAIN, PING_TLS_KEY,
    PingTls, REDIS_ROOTCA_CERTS, REDIS_TLS_CA, REDIS_TLS_CERT, REDIS_TLS_KEY, Setting, Typed,
    split_list,
};

/// Our own CA and a client certificate for Redis, read now so that a bad path
/// fails here; they need a `rediss://` URL (or `-redis-tls`).
pub(super) fn redis_tls(l: &Layers, urls: &[String]) -> Result<TlsFiles, ConfigError> {
    let cas = [&REDIS_TLS_CA, &REDIS_ROOTCA_CERTS];
    let files = tls_files(l, &cas, &REDIS_TLS_CERT, &REDIS_TLS_KEY)?;
    let settings = [
        &REDIS_TLS_CA.setting,
        &REDIS_ROOTCA_CERTS.setting,
        &REDIS_TLS_CERT.setting,
        &REDIS_TLS_KEY.setting,
    ];
    if !files.is_empty() {
        if !urls.iter().all(|u| u.starts_with("rediss://")) {
            let given = settings.into_iter().find(|s| given_text(l, s).is_some());
            let s = given.expect("some TLS file is given");
            return Err(l.invalid(s, "TLS files need a rediss:// URL or -redis-tls"));
        }
        files.load().map_err(|e| blame(l, &e, &settings))?;
    }
    Ok(files)
}

/// TLS for pings, when a CA to verify members is given.
pub(super) fn ping_tls(l: &Layers) -> Result<Option<PingTls>, ConfigError> {
    let files = tls_files(l, &[&PING_TLS_CA], &PING_TLS_CERT, &PING_TLS_KEY)?;
    if files.is_empty() {
        return Ok(None);
    }
    if files.ca.is_empty() {
        let s = if files.cert.is_some() {
            &PING_TLS_CERT
        } else {
            &PING_TLS_KEY
        };
        return Err(l.invalid(
            s,
            format!(
                "-ping-tls-ca is required with -{}: pings verify members with it",
                s.flag
            ),
        ));
    }
    let settings = [
        &PING_TLS_CA.setting,
        &PING_TLS_CERT.setting,
        &PING_TLS_KEY.setting,
    ];
    crate::edge::tls::ping_client(&files, None).map_err(|e| blame(l, &e, &settings))?;
    Ok(Some(PingTls {
        files,
        domain: l.get(&PING_TLS_DOMAIN)?,
    }))
}

/// CA files, and a certificate with its key: each of the pair needs the other.
fn tls_files(
    l: &Layers,
    cas: &[&'static Typed<Files>],
    cert: &'static Typed<File>,
    key: &'static Typed<File>,
) -> Result<TlsFiles, ConfigError> {
    let (cert_file, key_file) = (l.get(cert)?, l.get(key)?);
    let needs = |s: &'static Setting, other: &Setting| {
        l.invalid(s, format!("-{} is required with -{}", other.flag, s.flag))
    };
    match (&cert_file, &key_file) {
        (Some(_), None) => return Err(needs(cert, key)),
        (None, Some(_)) => return Err(needs(key, cert)),
        _ => {}
    }
    let mut ca = Vec::new();
    for s in cas {
        ca.extend(l.get(*s)?);
    }
    Ok(TlsFiles {
        ca,
        cert: cert_file,
        key: key_file,
    })
}

/// The text of `s` unless it is blank.
fn given_text(l: &Layers, s: &Setting) -> Option<String> {
    l.text(s).filter(|v| !v.trim().is_empty())
}

/// The error for an unusable TLS file, on the setting among `settings` that
/// names it (else the first given).
fn blame(l: &Layers, e: &TlsError, settings: &[&'static Setting]) -> ConfigError {
    let path = match e {
        TlsError::Read { path, .. } | TlsError::NotPem { path, .. } => Some(path),
        _ => None,
    };
    let names = |s: &&&Setting| {
        let paths = given_text(l, s).map(|v| split_list(&v)).unwrap_or_default();
        path.is_some_and(|p| paths.iter().any(|x| p == std::path::Path::new(x)))
    };
    let s = settings
        .iter()
        .find(names)
        .or_else(|| settings.iter().find(|s| given_text(l, s).is_some()))
        .unwrap_or(&settings[0]);
    ConfigError::new(s, &given_text(l, s).unwrap_or_default(), e.to_string())
}

#[cfg(test)]
mod tests {
    use crate::config::tests_support::with_env;

    #[test]
    fn a_tls_half_names_the_flag_given() {
        for (vars, flag, value, reason) in [
            (
                vec![
                    ("REDIS_URL", "rediss://h:1"),
                    ("REDIS_TLS_CERT", "/x/c.pem"),
                ],
                "redis-tls-cert",
                "/x/c.pem",
                "-redis-tls-key is required with -redis-tls-cert",
            ),
            (
                vec![("REDIS_URL", "rediss://h:1"), ("REDIS_TLS_KEY", "/x/k.pem")],
                "redis-tls-key",
                "/x/k.pem",
                "-redis-tls-cert is required with -redis-tls-key",
            ),
            (
                vec![("PING_TLS_CERT", "/x/c.pem")],
                "ping-tls-cert",
                "/x/c.pem",
                "-ping-tls-key is required with -ping-tls-cert",
            ),
            (
                vec![("PING_TLS_KEY", "/x/k.pem")],
                "ping-tls-key",
                "/x/k.pem",
                "-ping-tls-cert is required with -ping-tls-key",
            ),
            (
                vec![("PING_TLS_CERT", "/x/c.pem"), ("PING_TLS_KEY", "/x/k.pem")],
                "ping-tls-cert",
                "/x/c.pem",
                "-ping-tls-ca is required with -ping-tls-cert",
            ),
            (
                vec![
                    ("REDIS_TLS_KEY", "/x/k.pem"),
                    ("REDIS_TLS_CERT", "/x/c.pem"),
                ],
                "redis-tls-cert",
                "/x/c.pem",
                "TLS files need a rediss:// URL",
            ),
            (
                vec![
                    ("REDIS_URL", "rediss://h:1"),
                    ("REDIS_TLS_KEY", "/x/k.pem"),
                    ("REDIS_TLS_CERT", "/x/c.pem"),
                ],
                "redis-tls-cert",
                "/x/c.pem",
                "cannot read certificate",
            ),
        ] {
            let e = with_env(&vars).unwrap_err();
            assert_eq!((e.flag, e.value.as_str()), (flag, value), "{e}");
            assert!(e.reason.contains(reason), "{e}");
        }
    }
}
