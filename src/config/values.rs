//! Parsers and checks of setting values: Go-style durations, sizes and log
//! filters.
//!
//! Pure: text in, a value or the reason it is not one out.

use std::time::Duration;

/// Parses a Go-style duration: `500ms`, `2s`, `1m30s`, `1.5h`, `250us`, `0`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err("empty duration".into());
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_len == 0 {
            return Err(format!(
                "expected a number at {rest:?} (example: 500ms, 2s, 1m30s)"
            ));
        }
        let number: f64 = rest[..num_len]
            .parse()
            .map_err(|_| format!("bad number {:?}", &rest[..num_len]))?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let nanos_per = match &rest[..unit_len] {
            "ns" => 1.0,
            "us" | "µs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            "" => return Err("missing unit (ns, us, ms, s, m, h)".into()),
            other => return Err(format!("unknown unit {other:?} (ns, us, ms, s, m, h)")),
        };
        rest = &rest[unit_len..];
        total += number * nanos_per;
    }
    if !total.is_finite() || total > u64::MAX as f64 {
        return Err("duration too large".into());
    }
    Ok(Duration::from_nanos(total.round() as u64))
}

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

    #[test]
    fn durations() {
        let ms = |s: &str| parse_duration(s).map(|d| d.as_millis());
        assert_eq!(ms("500ms"), Ok(500));
        assert_eq!(ms("2s"), Ok(2000));
        assert_eq!(ms("1m30s"), Ok(90_000));
        assert_eq!(ms("1.5h"), Ok(5_400_000));
        assert_eq!(ms("0"), Ok(0));
        assert_eq!(parse_duration("250us").unwrap(), Duration::from_micros(250));
        assert!(parse_duration("10").unwrap_err().contains("missing unit"));
        assert!(parse_duration("10d").unwrap_err().contains("unknown unit"));
        assert!(parse_duration("").is_err());
        assert!(parse_duration("ms").is_err());
    }

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
