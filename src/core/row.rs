//! The stored form of one matching-table row: the member's units joined by
//! [`SEPARATOR`] (the Go implementation's format). Units containing the
//! separator are rejected on input, so a row always splits back into the
//! units it was made of.

/// Separator between units in a row. Units containing it are rejected on input.
pub const SEPARATOR: char = ',';

/// Splits a stored row. An empty or missing row means "no units".
pub fn decode_row(value: &str) -> Vec<&str> {
    if value.is_empty() {
        Vec::new()
    } else {
        value.split(SEPARATOR).collect()
    }
}
