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
        let mut units = Vec::with_capacity(value.len() / 8 + 1);
        units.extend(split_row(value));
        units
    }
}

/// The pieces of `row` between separators, exactly as `row.split(SEPARATOR)`
/// (an empty row is one empty piece), about twice as fast: a holder splits
/// every row a leave touches several times a cycle, and `str::split` on a
/// `char` compares each match through `memcmp`.
pub fn split_row(row: &str) -> RowPieces<'_> {
    RowPieces { rest: Some(row) }
}

/// The iterator of [`split_row`].
#[derive(Debug, Clone)]
pub struct RowPieces<'a> {
    rest: Option<&'a str>,
}

impl<'a> Iterator for RowPieces<'a> {
    type Item = &'a str;

    #[inline]
    fn next(&mut self) -> Option<&'a str> {
        let rest = self.rest?;
        // The separator is ASCII: a byte equal to it never lies inside a
        // multi-byte character, so both slices are on character boundaries.
        match rest.bytes().position(|b| b == SEPARATOR as u8) {
            Some(i) => {
                self.rest = Some(&rest[i + 1..]);
                Some(&rest[..i])
            }
            None => {
                self.rest = None;
                Some(rest)
            }
        }
    }
}

impl std::iter::FusedIterator for RowPieces<'_> {}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// `split_row` is `str::split` on the separator, for any text
        /// (separators at either end, doubled, multi-byte characters).
        #[test]
        fn split_row_is_str_split(row in "[a,é😀-]{0,40}") {
            let ours: Vec<&str> = split_row(&row).collect();
            let std: Vec<&str> = row.split(SEPARATOR).collect();
            prop_assert_eq!(ours, std);
        }
    }

    #[test]
    fn decode_row_reads_an_empty_row_as_no_units() {
        assert!(decode_row("").is_empty());
        assert_eq!(decode_row("a,b"), ["a", "b"]);
        assert_eq!(decode_row(",a,"), ["", "a", ""]);
    }
}
