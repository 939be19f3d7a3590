//! Why a ping failed, classified from what tonic reports: the reasons the
//! metrics count, and the one that matters most, a refused connection (the
//! member's process is gone, so a handoff from it needs no wait).

/// Why a ping failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PingFailure {
    /// The address cannot be dialled at all.
    Malformed(&'static str),
    /// No answer within the ping timeout (a hung or overloaded member).
    Timeout,
    /// Connection refused: nothing listens at the address, so the member's
    /// process is gone (a handoff from it needs no wait).
    Refused(String),
    /// Connection reset, unreachable, or otherwise unavailable.
    Unavailable(String),
    /// The TLS handshake failed: wrong or missing certificate on either side.
    Tls(String),
    /// The member answered with a gRPC error status.
    Status(tonic::Code, String),
}

impl PingFailure {
    /// The failure a gRPC status describes: a timeout, a refused or
    /// otherwise failed connection (found in the status' sources), a TLS
    /// handshake, or the member's own error status.
    pub(super) fn of(status: tonic::Status) -> PingFailure {
        classify(status)
    }

    /// Every [`PingFailure::reason`], so that metrics can show each at 0.
    pub const REASONS: [&'static str; 6] = [
        "malformed",
        "timeout",
        "refused",
        "unavailable",
        "tls",
        "status",
    ];

    /// One of each variant: a new variant breaks this match, and its test
    /// then checks that [`PingFailure::REASONS`] names it.
    #[cfg(test)]
    fn every() -> Vec<PingFailure> {
        let every = vec![
            PingFailure::Malformed(""),
            PingFailure::Timeout,
            PingFailure::Refused(String::new()),
            PingFailure::Unavailable(String::new()),
            PingFailure::Tls(String::new()),
            PingFailure::Status(tonic::Code::Internal, String::new()),
        ];
        for f in &every {
            match f {
                PingFailure::Malformed(_)
                | PingFailure::Timeout
                | PingFailure::Refused(_)
                | PingFailure::Unavailable(_)
                | PingFailure::Tls(_)
                | PingFailure::Status(..) => {}
            }
        }
        every
    }

    /// A short label for metrics and logs.
    pub fn reason(&self) -> &'static str {
        match self {
            PingFailure::Malformed(_) => "malformed",
            PingFailure::Timeout => "timeout",
            PingFailure::Refused(_) => "refused",
            PingFailure::Unavailable(_) => "unavailable",
            PingFailure::Tls(_) => "tls",
            PingFailure::Status(..) => "status",
        }
    }
}

impl std::fmt::Display for PingFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PingFailure::Malformed(why) => write!(f, "malformed address: {why}"),
            PingFailure::Timeout => write!(f, "no answer within the ping timeout"),
            PingFailure::Refused(why) => write!(f, "connection refused: {why}"),
            PingFailure::Unavailable(why) => write!(f, "unavailable: {why}"),
            PingFailure::Tls(why) => write!(f, "TLS handshake failed: {why}"),
            PingFailure::Status(code, msg) => write!(f, "answered {code:?}: {msg}"),
        }
    }
}

fn classify(status: tonic::Status) -> PingFailure {
    match status.code() {
        tonic::Code::DeadlineExceeded | tonic::Code::Cancelled => PingFailure::Timeout,
        tonic::Code::Unavailable | tonic::Code::Unknown if is_transport(&status) => {
            let mut why = status.message().to_string();
            let mut refused = false;
            let mut source = std::error::Error::source(&status);
            while let Some(s) = source {
                why = s.to_string();
                refused |= s
                    .downcast_ref::<std::io::Error>()
                    .is_some_and(|e| e.kind() == std::io::ErrorKind::ConnectionRefused);
                source = s.source();
            }
            if refused {
                PingFailure::Refused(why)
            } else if why.contains("timed out") {
                PingFailure::Timeout
            } else if is_tls_failure(&why) {
                PingFailure::Tls(why)
            } else {
                PingFailure::Unavailable(why)
            }
        }
        code => PingFailure::Status(code, status.message().to_string()),
    }
}

fn is_tls_failure(why: &str) -> bool {
    let why = why.to_ascii_lowercase();
    ["certificate", "tls", "handshake", "unknownissuer", "alert"]
        .iter()
        .any(|k| why.contains(k))
}

fn is_transport(status: &tonic::Status) -> bool {
    status.code() == tonic::Code::Unavailable || std::error::Error::source(status).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_is_listed_for_the_metrics() {
        let reasons: Vec<&str> = PingFailure::every()
            .iter()
            .map(PingFailure::reason)
            .collect();
        assert_eq!(reasons, PingFailure::REASONS);
    }
}
