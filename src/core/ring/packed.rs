//! The ring's storage: [`Packed`], unsigned integers of 1 to 32 bits packed
//! end to end, and the [`Writer`] that sets a range of them in order. Setting
//! a value leaves every other value as it is.

use std::ops::Range;

/// `len` unsigned integers of `width` bits each (`1..=32`), packed end to
/// end, little-endian, into bytes. A value is read and set as one unaligned
/// `u64` (it starts at most 7 bits into its first byte, and `7 + 32` bits
/// fit), which is why 7 bytes of padding follow.
pub(super) struct Packed {
    bytes: Vec<u8>,
    width: u32,
    pub(super) len: usize,
}

/// Where [`Packed::push`] writes next.
pub(super) struct Writer {
    /// The first byte not written yet.
    byte: usize,
    /// The bits not written yet, from that byte's bit 0 on, and how many
    /// (counting those below the first value, which stay 0).
    acc: u64,
    filled: u32,
}

impl Packed {
    /// `len` zeros.
    pub(super) fn zeroed(len: usize, width: u32) -> Self {
        assert!((1..=32).contains(&width), "packed width {width}");
        let bits = len
            .checked_mul(width as usize)
            .expect("packed size overflows usize");
        Packed {
            bytes: vec![0; bits.div_ceil(8) + 7],
            width,
            len,
        }
    }

    /// The byte where value `k` starts, and its bit offset in that byte.
    fn locate(&self, k: usize) -> (usize, u32) {
        debug_assert!(k < self.len);
        let bit = k * self.width as usize;
        (bit / 8, (bit % 8) as u32)
    }

    fn word(&self, byte: usize) -> u64 {
        u64::from_le_bytes(self.bytes[byte..byte + 8].try_into().unwrap())
    }

    fn mask(&self) -> u64 {
        (1 << self.width) - 1
    }

    /// Value `k`.
    pub(super) fn get(&self, k: usize) -> u64 {
        let (byte, shift) = self.locate(k);
        (self.word(byte) >> shift) & self.mask()
    }

    /// Sets value `k`, which is still zero, to `value`. (Setting the
    /// values of one range in order is faster with [`Packed::writer`]:
    /// this reads bytes the previous call has just written.)
    pub(super) fn or(&mut self, k: usize, value: u64) {
        debug_assert!(value <= self.mask() && self.get(k) == 0);
        let (byte, shift) = self.locate(k);
        let word = self.word(byte) | (value << shift);
        self.bytes[byte..byte + 8].copy_from_slice(&word.to_le_bytes());
    }

    /// Sets values `range` to zero.
    pub(super) fn clear(&mut self, range: Range<usize>) {
        let width = self.width as usize;
        let (mut bit, end) = (range.start * width, range.end * width);
        while bit < end && bit % 8 != 0 {
            self.bytes[bit / 8] &= !(1 << (bit % 8));
            bit += 1;
        }
        if bit < end / 8 * 8 {
            self.bytes[bit / 8..end / 8].fill(0);
            bit = end / 8 * 8;
        }
        while bit < end {
            self.bytes[bit / 8] &= !(1 << (bit % 8));
            bit += 1;
        }
    }

    /// Starts setting values in order from `k` on. They must be zero (see
    /// [`Packed::clear`]): a writer only sets bits, so it leaves the bits
    /// of the values before `k` and after its last one as they are.
    pub(super) fn writer(&self, k: usize) -> Writer {
        let bit = k * self.width as usize;
        Writer {
            byte: bit / 8,
            acc: 0,
            filled: (bit % 8) as u32,
        }
    }

    /// Sets the writer's next value.
    pub(super) fn push(&mut self, writer: &mut Writer, value: u64) {
        debug_assert!(value <= self.mask());
        writer.acc |= value << writer.filled;
        writer.filled += self.width;
        if writer.filled >= 32 {
            let bytes = &mut self.bytes[writer.byte..writer.byte + 4];
            let word = u32::from_le_bytes(bytes.try_into().unwrap()) | writer.acc as u32;
            bytes.copy_from_slice(&word.to_le_bytes());
            writer.byte += 4;
            writer.acc >>= 32;
            writer.filled -= 32;
        }
    }

    /// Writes the bits the writer still holds.
    pub(super) fn finish(&mut self, mut writer: Writer) {
        while writer.filled > 0 {
            self.bytes[writer.byte] |= writer.acc as u8;
            writer.byte += 1;
            writer.acc >>= 8;
            writer.filled = writer.filled.saturating_sub(8);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn packed_values_round_trip(
            width in 1u32..=32,
            values in proptest::collection::vec(any::<u32>(), 0..80),
            (from, to) in (0usize..80, 0usize..80),
        ) {
            let mask = (1u64 << width) - 1;
            let values: Vec<u64> = values.iter().map(|&v| u64::from(v) & mask).collect();
            let mut packed = Packed::zeroed(values.len(), width);
            for (k, &value) in values.iter().enumerate() {
                packed.or(k, value);
            }
            let got: Vec<u64> = (0..values.len()).map(|k| packed.get(k)).collect();
            prop_assert_eq!(&got, &values);
            // Overwrite a range, in place, with new values.
            let (from, to) = (from.min(to).min(values.len()), from.max(to).min(values.len()));
            let new = |k: usize| !values[k] & mask;
            packed.clear(from..to);
            let mut writer = packed.writer(from);
            for k in from..to {
                packed.push(&mut writer, new(k));
            }
            packed.finish(writer);
            let want: Vec<u64> = (0..values.len())
                .map(|k| if (from..to).contains(&k) { new(k) } else { values[k] })
                .collect();
            let got: Vec<u64> = (0..values.len()).map(|k| packed.get(k)).collect();
            prop_assert_eq!(got, want);
        }
    }
}
