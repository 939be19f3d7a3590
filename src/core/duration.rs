//! Go-style durations (`500ms`, `2s`, `1m30s`), the one syntax of every
//! duration setting: the daemon's flags and environment, and a member's
//! environment (`MemberOptions::from_env`).
//!
//! Pure: text in, a duration or the reason it is not one out.

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
