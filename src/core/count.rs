//! Counters as this system stores them in Redis (generations, epochs,
//! versions, applied generations, client ids, waits): canonical decimal
//! text of an integer below 2^53, the range Lua's numbers hold exactly, so
//! the scripts and Rust read every stored counter alike.

/// The largest counter stored (2^53 - 1; see `scripts/prelude.lua`).
pub const MAX_COUNT: u64 = (1 << 53) - 1;

/// Parses a stored counter: 1 to 16 ASCII digits (leading zeros allowed),
/// at most [`MAX_COUNT`]; `None` for anything else (a sign, a space, an
/// exponent, a fraction, a larger number).
pub fn parse_count(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 16 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok().filter(|n| *n <= MAX_COUNT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_canonical_digits_below_two_to_the_53_are_counters() {
        assert_eq!(parse_count("0"), Some(0));
        assert_eq!(parse_count("007"), Some(7));
        assert_eq!(parse_count("9007199254740991"), Some(MAX_COUNT));
        for bad in [
            "",
            "9007199254740992",
            "99999999999999999",
            "-1",
            "+1",
            " 1",
            "1 ",
            "1e3",
            "1.0",
            "0x10",
        ] {
            assert_eq!(parse_count(bad), None, "{bad:?}");
        }
    }
}
