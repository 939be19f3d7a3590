//! TLS material for the two links that can be encrypted: replica → Redis
//! (`rediss://`) and holder → member (the ping).
//!
//! Files are PEM, named by path in the configuration and read when a
//! connection is set up, so a bad path fails at start with the flag's name.
//! Key material never appears in `Debug` output or logs: only paths do.
//! The crypto provider is ring, installed once per process.

use std::path::PathBuf;
use std::sync::Once;

use tonic::transport::{Certificate, ClientTlsConfig, Identity, ServerTlsConfig};

/// Paths of a CA bundle and of an optional certificate/key pair.
#[derive(Clone, Default, PartialEq, Eq, Debug)]
pub struct TlsFiles {
    /// CA certificates to trust (concatenated); empty = the system's roots.
    pub ca: Vec<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

/// Loaded PEM bytes; `Debug` shows sizes, never contents.
#[derive(Clone, Default)]
pub struct TlsMaterial {
    pub ca: Option<Vec<u8>>,
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsMaterial")
            .field("ca_bytes", &self.ca.as_ref().map(Vec::len))
            .field("identity", &self.identity.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

pub use crate::error::TlsError;

fn read(what: &'static str, path: &PathBuf) -> Result<Vec<u8>, TlsError> {
    let bytes = std::fs::read(path).map_err(|source| TlsError::Read {
        what,
        path: path.clone(),
        source,
    })?;
    if !bytes.windows(11).any(|w| w == b"-----BEGIN ") {
        return Err(TlsError::NotPem {
            what,
            path: path.clone(),
        });
    }
    Ok(bytes)
}

impl TlsFiles {
    pub fn is_empty(&self) -> bool {
        self.ca.is_empty() && self.cert.is_none() && self.key.is_none()
    }

    pub fn load(&self) -> Result<TlsMaterial, TlsError> {
        let ca = if self.ca.is_empty() {
            None
        } else {
            let mut all = Vec::new();
            for path in &self.ca {
                all.extend(read("CA certificate", path)?);
                all.push(b'\n');
            }
            Some(all)
        };
        let identity = match (&self.cert, &self.key) {
            (Some(c), Some(k)) => Some((read("certificate", c)?, read("private key", k)?)),
            (None, None) => None,
            _ => return Err(TlsError::Unpaired),
        };
        Ok(TlsMaterial { ca, identity })
    }
}

/// Installs ring as the process's rustls provider (idempotent).
pub fn install_crypto_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // Err means another provider was installed first; that one is used.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// A Redis client for `url`, with a custom CA and/or client certificate.
pub fn redis_client(url: &str, files: &TlsFiles) -> Result<redis::Client, redis::RedisError> {
    install_crypto_provider();
    if files.is_empty() {
        return redis::Client::open(url);
    }
    let m = files.load().map_err(|e| {
        redis::RedisError::from((
            redis::ErrorKind::InvalidClientConfig,
            "unusable TLS file",
            e.to_string(),
        ))
    })?;
    let certs = redis::TlsCertificates {
        client_tls: m
            .identity
            .map(|(client_cert, client_key)| redis::ClientTlsConfig {
                client_cert,
                client_key,
            }),
        root_cert: m.ca,
    };
    redis::Client::build_with_tls(url, certs)
}

/// The holder's side of ping TLS: trust `ca` (required), present
/// a client certificate when one is given (mTLS), and optionally verify
/// members against a fixed name instead of their address.
pub fn ping_client(files: &TlsFiles, domain: Option<&str>) -> Result<ClientTlsConfig, TlsError> {
    install_crypto_provider();
    let m = files.load()?;
    let mut cfg = ClientTlsConfig::new();
    // Members are internal endpoints: trust only the CA that signs them.
    let ca = m.ca.ok_or(TlsError::NoCa)?;
    cfg = cfg.ca_certificate(Certificate::from_pem(ca));
    if let Some((cert, key)) = m.identity {
        cfg = cfg.identity(Identity::from_pem(cert, key));
    }
    if let Some(d) = domain {
        cfg = cfg.domain_name(d);
    }
    Ok(cfg)
}

/// The member's side: serve with `cert`/`key`; with a CA, require client
/// certificates signed by it (mTLS).
pub fn ping_server(files: &TlsFiles) -> Result<ServerTlsConfig, TlsError> {
    install_crypto_provider();
    let m = files.load()?;
    let (cert, key) = m.identity.ok_or(TlsError::Unpaired)?;
    let mut cfg = ServerTlsConfig::new().identity(Identity::from_pem(cert, key));
    if let Some(ca) = m.ca {
        cfg = cfg.client_ca_root(Certificate::from_pem(ca));
    }
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_checked_and_never_printed() {
        let dir = std::env::temp_dir().join(format!("distributor-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pem = dir.join("a.pem");
        std::fs::write(
            &pem,
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let junk = dir.join("junk");
        std::fs::write(&junk, "not pem").unwrap();

        let ok = TlsFiles {
            ca: vec![pem.clone()],
            cert: Some(pem.clone()),
            key: Some(pem.clone()),
        };
        let m = ok.load().unwrap();
        assert!(!format!("{m:?}").contains("BEGIN"), "{m:?}");
        let e = TlsFiles {
            ca: vec![junk.clone()],
            ..Default::default()
        }
        .load()
        .unwrap_err();
        assert!(
            e.to_string().contains("junk") && e.to_string().contains("no PEM"),
            "{e}"
        );
        let e = TlsFiles {
            ca: vec![dir.join("missing")],
            ..Default::default()
        }
        .load()
        .unwrap_err();
        assert!(
            e.to_string().starts_with("cannot read CA certificate"),
            "{e}"
        );
        let e = TlsFiles {
            cert: Some(pem),
            ..Default::default()
        }
        .load()
        .unwrap_err();
        assert!(matches!(e, TlsError::Unpaired));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
