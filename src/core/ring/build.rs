//! Building the ring: every point of every unit put in ring order by a
//! three-level radix sort that never holds a hash for every point, and the
//! first point clockwise of each member found on the way. The result never
//! depends on the partition size or the width of unit indices.

use super::POINTS_PER_UNIT;
use super::packed::Packed;

/// Every point of every unit, in ring order, reduced to what the selection
/// needs: the index (in the sorted unit list) of the unit each point belongs
/// to, packed in as few bits as the largest index needs. Hashes are only
/// needed to put the points in order and to place the members, both done in
/// [`Ring::build`].
pub(super) struct Ring {
    owners: Packed,
}

impl Ring {
    /// Aim for about this many points per bucket of the fine counting sort,
    /// so that the insertion sort that finishes it has almost nothing to do.
    const TARGET_BUCKET_LEN: usize = 1;
    /// Aim for about this many points per coarse partition (the default of
    /// `partition_len` in [`Ring::build`]), within the limits below. The
    /// sort keys of one partition, 8 bytes a point, are the build's only
    /// temporary memory that grows with the input.
    pub(super) const TARGET_PARTITION_LEN: usize = 1 << 21;
    /// But at least this many bits for the coarse partition, once there is
    /// more than one: each partition hashes its points again, reading the
    /// unit strings of its points in unit order, and with 32 partitions or
    /// fewer it reads most of them, nearly sequentially. With more, fewer
    /// and farther apart, so that cache misses dominate: 256 partitions
    /// took five times as long as 32 for that pass at 1,000,000 units.
    const MIN_COARSE_BITS: u32 = 5;
    /// And at most this many: more write streams in the coarse scatter
    /// thrash the cache and TLB.
    const MAX_COARSE_BITS: u32 = 8;
    /// Aim for about this many points per bucket of the middle level (a
    /// scatter within the partition's keys), so that the fine sort of a
    /// bucket works within the L1 and L2 caches, up to the cap below.
    const TARGET_MIDDLE_LEN: usize = 1 << 12;
    /// At most this many bits for the middle level: more write streams
    /// thrash the cache.
    const MAX_MIDDLE_BITS: u32 = 8;
    /// A bucket this full means the hashes are far from uniform (only seen
    /// with test hashes): finish with a general sort instead of the
    /// insertion sort, which would go quadratic.
    const MAX_INSERTION_BUCKET: usize = 64;
    /// Bits of a point's index (`0..POINTS_PER_UNIT`) in a code.
    const POINT_BITS: u32 = 6;

    /// Builds the ring for a non-empty, sorted, duplicate-free unit list, and
    /// finds for each of `positions` the index of the first point with hash
    /// `>= position` (0 if there is none: the ring wraps).
    ///
    /// A three-level radix sort on the top hash bits, each level a counting
    /// sort, which never holds a hash for every point (that alone would be
    /// 8 bytes a point). The ring itself is a packed array of `W`-bit slots,
    /// one per point, `W` the bits of the largest unit index (at least 6,
    /// at most `min_width`): 20 bits at 1,000,000 units. It holds a code for
    /// each point until level 3 writes the unit indices over the codes.
    ///
    /// 1. Coarse: the top `C` bits (0, or 5 to 8) split the points into
    ///    partitions laid out in ring order. A first pass hashes every point
    ///    and counts the points of each partition (and of each bucket, for
    ///    level 2); a second hashes them again and scatters a code for each,
    ///    into the slots of its partition. The codes must fit in `W` bits, so
    ///    the units are split into at most 64 groups of consecutive indices,
    ///    and each partition is laid out group by group: where a slot is
    ///    tells its group, and the code holds the unit index within the
    ///    group (`W - 6` bits) and the point index (6 bits). With a single
    ///    partition the points are in unit order already, and the scatter is
    ///    skipped.
    /// 2. Middle, one partition at a time: the partition's points are hashed
    ///    a third time, from their codes, in unit order, and their sort keys
    ///    (8 bytes each: see `key` below) scattered by the next `M <= 8` bits
    ///    into buckets, in a buffer the size of the largest partition.
    /// 3. Fine, one bucket at a time: a counting sort on the next bits
    ///    (about one bucket per point) into a second, bucket-sized buffer
    ///    leaves only tiny runs out of order, and one insertion sort pass
    ///    finishes it. Keys that tie on their hash bits are put in order by
    ///    [`Ring::resolve`]. The member positions in the bucket are looked
    ///    up by binary search, then the unit indices are written over the
    ///    partition's codes, in ring order.
    ///
    /// So the peak is the packed array plus one partition's keys: about 125
    /// plus 12.5 bytes a unit at 1,000,000 units (32 partitions). Hashing
    /// every point three times rather than twice costs about a tenth of the
    /// time; packing codes and keys into fewer bytes than the 12 a point of
    /// a plain `(hash, unit)` sort also moves less memory, and the whole
    /// takes no longer than that sort did.
    pub(super) fn build(
        units: &[&str],
        point: impl Fn(&str, u32) -> u64,
        positions: &[u64],
        partition_len: usize,
        min_width: u32,
    ) -> (Ring, Vec<usize>) {
        const {
            assert!(POINTS_PER_UNIT <= 1 << Self::POINT_BITS);
        }
        u32::try_from(units.len()).expect("more than u32::MAX work units");
        let len = units
            .len()
            .checked_mul(POINTS_PER_UNIT as usize)
            .expect("point count overflows usize");
        // Bits per slot: enough for every unit index (the final content),
        // and at least `POINT_BITS` (a code holds a point index).
        let width = bits_to_hold(units.len() - 1)
            .max(Self::POINT_BITS)
            .max(min_width.min(32));
        let unit_mask = (1u64 << width) - 1;
        // A code is `(unit index within its group) << POINT_BITS | i`.
        let group_bits = width - Self::POINT_BITS;
        let groups = ((units.len() - 1) >> group_bits) + 1;
        // `len >= POINTS_PER_UNIT`, so `1 <= sort_bits < 64`.
        let sort_bits = bits_to_hold(len / Self::TARGET_BUCKET_LEN);
        let coarse_bits = match bits_to_hold(len / partition_len.max(1)) {
            0 => 0,
            bits => bits.clamp(Self::MIN_COARSE_BITS, Self::MAX_COARSE_BITS),
        }
        .min(sort_bits);
        let middle_bits = bits_to_hold((len >> coarse_bits) / Self::TARGET_MIDDLE_LEN)
            .min(Self::MAX_MIDDLE_BITS)
            .min(sort_bits - coarse_bits);
        let fine_bits = sort_bits - coarse_bits - middle_bits;
        let partitions = 1usize << coarse_bits;
        let middles = 1usize << middle_bits;
        // A bucket: the points whose hashes share their top `bucket_bits`;
        // its index is those bits. Partition `c` has buckets
        // `c * middles..(c + 1) * middles`.
        let bucket_bits = coarse_bits + middle_bits;
        let bucket_of = |hash: u64| top(hash, bucket_bits);
        let coarse_of = |hash: u64| top(hash, coarse_bits);
        // Sort key of a point within its bucket: the hash bits below the
        // bucket's, but with the unit index in the low `width` bits, over
        // the lowest hash bits if `width > bucket_bits` (7 of them at
        // 1,000,000 units). Integer order is ring order, except among keys
        // with equal hash bits (`key >> width`): see `Ring::resolve`.
        let key = |hash: u64, unit: usize| ((hash << bucket_bits) & !unit_mask) | unit as u64;
        let fine_of = |key: u64| top(key, fine_bits);
        let point = &point;

        // Level 1: count per group and partition, and per bucket.
        // `counts[g * partitions + c]`: points of group `g` in partition `c`.
        let mut counts = vec![0usize; groups * partitions];
        let mut bucket_len = vec![0usize; partitions * middles];
        for (index, unit) in units.iter().enumerate() {
            let row = &mut counts[(index >> group_bits) * partitions..][..partitions];
            for i in 0..POINTS_PER_UNIT {
                let hash = point(unit, i);
                row[coarse_of(hash)] += 1;
                bucket_len[bucket_of(hash)] += 1;
            }
        }
        // Partitions in ring order, each one group by group.
        // `region_start[g * partitions + c]`: where group `g` starts in
        // partition `c`.
        let mut partition_start = Vec::with_capacity(partitions + 1);
        let mut region_start = vec![0usize; groups * partitions];
        let mut total = 0;
        for c in 0..partitions {
            partition_start.push(total);
            for g in 0..groups {
                region_start[g * partitions + c] = total;
                total += counts[g * partitions + c];
            }
        }
        partition_start.push(total);
        // Scatter the codes. With a single partition, point `k` in unit
        // order belongs at slot `k`: nothing to write.
        let mut owners = Packed::zeroed(len, width);
        if partitions > 1 {
            let mut next = region_start.clone();
            let low_mask = (1usize << group_bits) - 1;
            for (index, unit) in units.iter().enumerate() {
                let next = &mut next[(index >> group_bits) * partitions..][..partitions];
                let base = ((index & low_mask) as u64) << Self::POINT_BITS;
                for i in 0..POINTS_PER_UNIT {
                    let slot = &mut next[coarse_of(point(unit, i))];
                    owners.or(*slot, base | u64::from(i));
                    *slot += 1;
                }
            }
        }

        // Levels 2 and 3, one partition at a time, visiting the member
        // positions in increasing order alongside.
        let mut by_position: Vec<usize> = (0..positions.len()).collect();
        by_position.sort_unstable_by_key(|&m| positions[m]);
        let mut by_position = by_position.into_iter().peekable();
        let mut starts = vec![0usize; positions.len()];
        let largest_partition = partition_start.windows(2).map(|w| w[1] - w[0]).max();
        let mut keys = vec![0u64; largest_partition.unwrap_or(0)];
        let mut sorted = vec![0u64; bucket_len.iter().copied().max().unwrap_or(0)];
        let mut middle_next = vec![0usize; middles];
        let mut fine_start = vec![0usize; 1 << fine_bits];
        for c in 0..partitions {
            let (lo, hi) = (partition_start[c], partition_start[c + 1]);
            let buckets = c * middles..(c + 1) * middles;
            let mut total = 0;
            for (next, &len) in middle_next.iter_mut().zip(&bucket_len[buckets.clone()]) {
                (*next, total) = (total, total + len);
            }
            // Level 2: hash the partition's points again and scatter their
            // keys by bucket.
            let keys = &mut keys[..hi - lo];
            let mut scatter = |unit: usize, i: u32| {
                let hash = point(units[unit], i);
                let slot = &mut middle_next[bucket_of(hash) & (middles - 1)];
                keys[*slot] = key(hash, unit);
                *slot += 1;
            };
            if partitions == 1 {
                for unit in 0..units.len() {
                    for i in 0..POINTS_PER_UNIT {
                        scatter(unit, i);
                    }
                }
            } else {
                for g in 0..groups {
                    let start = region_start[g * partitions + c];
                    for k in start..start + counts[g * partitions + c] {
                        let code = owners.get(k);
                        let unit = (g << group_bits) | (code >> Self::POINT_BITS) as usize;
                        scatter(unit, (code & ((1 << Self::POINT_BITS) - 1)) as u32);
                    }
                }
            }
            // Level 3, one bucket at a time. The codes are all read: the
            // unit indices replace them.
            owners.clear(lo..hi);
            let mut writer = owners.writer(lo);
            let mut bucket_lo = 0;
            for bucket in buckets {
                let bucket_keys = &keys[bucket_lo..bucket_lo + bucket_len[bucket]];
                let base = lo + bucket_lo;
                bucket_lo += bucket_keys.len();
                fine_start.fill(0);
                for &key in bucket_keys {
                    fine_start[fine_of(key)] += 1;
                }
                let mut total = 0;
                let mut largest = 0;
                for slot in &mut fine_start {
                    largest = largest.max(*slot);
                    (*slot, total) = (total, total + *slot);
                }
                let sorted = &mut sorted[..bucket_keys.len()];
                for &key in bucket_keys {
                    let slot = &mut fine_start[fine_of(key)];
                    sorted[*slot] = key;
                    *slot += 1;
                }
                // Fine buckets are in order, so every key is out of place
                // only within its own tiny one.
                if largest <= Self::MAX_INSERTION_BUCKET {
                    insertion_sort(sorted);
                } else {
                    sorted.sort_unstable();
                }
                let resolve =
                    |run: &[u64]| Self::resolve(run, bucket, bucket_bits, width, units, point);
                // Runs of keys with equal hash bits: put them in ring order.
                let mut run_lo = sorted
                    .windows(2)
                    .position(|pair| pair[0] >> width == pair[1] >> width)
                    .unwrap_or(sorted.len());
                while run_lo < sorted.len() {
                    let bits = sorted[run_lo] >> width;
                    let run_len = sorted[run_lo..]
                        .iter()
                        .position(|&key| key >> width != bits)
                        .unwrap_or(sorted.len() - run_lo);
                    if run_len > 1 {
                        let run = &mut sorted[run_lo..run_lo + run_len];
                        let points = resolve(run);
                        for (key, (_, unit)) in run.iter_mut().zip(points) {
                            *key = (bits << width) | u64::from(unit);
                        }
                    }
                    run_lo += run_len;
                }
                while let Some(m) = by_position.next_if(|&m| bucket_of(positions[m]) == bucket) {
                    let position = positions[m];
                    // Unit index 0 makes this the smallest key with these
                    // hash bits: the keys before `k` have smaller hashes.
                    let target = key(position, 0);
                    let mut k = sorted.partition_point(|&key| key < target);
                    let run_len = sorted[k..]
                        .iter()
                        .position(|&key| key >> width != target >> width)
                        .unwrap_or(sorted.len() - k);
                    if run_len > 0 {
                        // The same hash bits as the position: compare whole
                        // hashes.
                        let run = resolve(&sorted[k..k + run_len]);
                        k += run.iter().filter(|&&(hash, _)| hash < position).count();
                    }
                    let k = base + k;
                    starts[m] = if k == len { 0 } else { k };
                }
                for &key in sorted.iter() {
                    owners.push(&mut writer, key & unit_mask);
                }
            }
            owners.finish(writer);
        }
        (Ring { owners }, starts)
    }

    /// The points of a run of keys of `bucket` with equal hash bits, as
    /// `(hash, unit index)` in ring order. A key has lost its point index
    /// and perhaps the lowest hash bits, so this hashes every point of the
    /// run's units again and keeps those that fall in the run: as many, for
    /// each unit, as it has keys in the run. With the real hash a run is
    /// rare (at 1,000,000 units, two points in a bucket of about 6,000 with
    /// 44 more equal bits: about once in a hundred builds).
    fn resolve(
        run: &[u64],
        bucket: usize,
        bucket_bits: u32,
        width: u32,
        units: &[&str],
        point: impl Fn(&str, u32) -> u64,
    ) -> Vec<(u64, u32)> {
        let bits = run[0] >> width;
        let unit_mask = (1u64 << width) - 1;
        let mut of_run: Vec<u32> = run.iter().map(|&key| (key & unit_mask) as u32).collect();
        of_run.sort_unstable();
        of_run.dedup();
        let mut points = Vec::with_capacity(run.len());
        for unit in of_run {
            for i in 0..POINTS_PER_UNIT {
                let hash = point(units[unit as usize], i);
                // The same test as the key's, `(hash << bucket_bits) >> width`.
                let in_run = top(hash, bucket_bits) == bucket
                    && (hash << bucket_bits) & !unit_mask == bits << width;
                if in_run {
                    points.push((hash, unit));
                }
            }
        }
        debug_assert_eq!(points.len(), run.len());
        points.sort_unstable();
        points
    }

    /// Unit index of the point at `k`.
    pub(super) fn unit_at(&self, k: usize) -> usize {
        self.owners.get(k) as usize
    }

    pub(super) fn len(&self) -> usize {
        self.owners.len
    }
}

/// The top `bits` bits of `hash` (0 for none).
fn top(hash: u64, bits: u32) -> usize {
    // `checked_shr`: with no bits the shift would be by 64.
    hash.checked_shr(64 - bits).unwrap_or(0) as usize
}

/// Sorts a slice in which every element is at most a few places from where
/// it belongs; then this is linear, and beats any general sort.
fn insertion_sort<T: Ord + Copy>(v: &mut [T]) {
    for k in 1..v.len() {
        let x = v[k];
        let mut j = k;
        while j > 0 && v[j - 1] > x {
            v[j] = v[j - 1];
            j -= 1;
        }
        v[j] = x;
    }
}

/// Number of bits needed to represent `n` (0 for 0).
fn bits_to_hold(n: usize) -> u32 {
    usize::BITS - n.leading_zeros()
}
