//! Parsers and checks of setting values: sizes and log filters (durations:
//! [`crate::core::duration`]).
//!
//! Pure: text in, a value or the reason it is not one out.

pub use crate::core::duration::parse_duration;

/// Parses a size: a whole number of bytes, or with a unit `B`, `KiB`, `MiB`,
/// `GiB` (also `KB`, `MB`, `GB`, taken as powers of 1024).
pub fn parse_bytes(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    let n: u64 = number.parse().ok()?;
    let scale: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" | "KB" | "K" => 1 << 10,
        "MiB" | "MB" | "M" => 1 << 20,
        "GiB" | "GB" | "G" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(scale)
}

const LEVELS: [&str; 6] = ["error", "warn", "info", "debug", "trace", "off"];

/// Checks a `-log` value: a level, or comma-separated `[target=]level`
/// directives (`info,distributor=debug`). Anything else would make the log
/// filter silently drop every line.
pub fn check_log_filter(s: &str) -> Result<(), String> {
    let expected = "expected error, warn, info, debug, trace or off, or comma-separated [target=]level directives such as info,distributor=debug";
    if s.trim().is_empty() {
        return Err(expected.into());
    }
    for directive in s.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let (target, level) = match directive.rsplit_once('=') {
            Some((target, level)) => (Some(target.trim()), level.trim()),
            None => (None, directive),
        };
        if !LEVELS.iter().any(|l| l.eq_ignore_ascii_case(level)) {
            return Err(format!("unknown level {level:?}; {expected}"));
        }
        if let Some(target) = target {
            let ok = !target.is_empty()
                && target
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | ':' | '-' | '.'));
            if !ok {
                return Err(format!("bad target {target:?}; {expected}"));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests_support::with_env;
    use proptest::prelude::*;
    use std::time::Duration;

    #[test]
    fn log_levels_and_directives() {
        for good in [
            "info",
            "WARN",
            "off",
            "info,distributor=debug",
            "distributor::edge::redis=trace",
        ] {
            with_env(&[("LOG", good)]).unwrap_or_else(|e| panic!("{good}: {e}"));
        }
        for bad in [
            "verbose",
            "",
            " ",
            "info,verbose",
            "distributor=loud",
            "=debug",
            "a b=info",
        ] {
            let e = with_env(&[("LOG", bad)]).unwrap_err();
            assert_eq!((e.flag, e.env, e.value.as_str()), ("log", "LOG", bad));
            assert!(
                e.reason.contains("error, warn, info, debug, trace or off"),
                "{e}"
            );
        }
    }

    proptest! {
        #[test]
        fn duration_round_trip(ms in 0u64..10_000_000) {
            prop_assert_eq!(parse_duration(&format!("{ms}ms")).unwrap(), Duration::from_millis(ms));
            let (s, rest) = (ms / 1000, ms % 1000);
            prop_assert_eq!(parse_duration(&format!("{s}s{rest}ms")).unwrap(), Duration::from_millis(ms));
        }

        #[test]
        fn parse_duration_never_panics(s in "\\PC{0,12}") {
            let _ = parse_duration(&s);
        }
    }
}
