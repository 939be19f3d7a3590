//! Step 1 of the cost balance and its bands: which units are hot and
//! which member isolates each, and every other member's band (see the
//! module docs of `core::balance`). Exact integer arithmetic throughout.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::Tolerance;
use crate::core::sticky::CONTESTED;

/// Hot units and the bands of the other members.
pub(super) struct Bands {
    /// Per member: the hot unit it isolates.
    pub(super) isolating: Vec<Option<u32>>,
    /// Hot units, in the order they were found.
    pub(super) hot: Vec<u32>,
    /// Hot units whose single live holder is not the member that isolates
    /// them: each is a move.
    pub(super) hot_moved: usize,
    /// The total cost and weight of the members that isolate nothing.
    total: u128,
    wsum: u128,
    pub(super) lo: Vec<u64>,
    pub(super) hi: Vec<u64>,
}

impl Bands {
    /// Step 1 and the bands, from each unit's holder `of` (an index or
    /// [`FREE`]/[`CONTESTED`]).
    pub(super) fn new(
        weights: &[u32],
        positions: &[u64],
        costs: &[u64],
        of: &[u32],
        t: Tolerance,
    ) -> Bands {
        let m = weights.len();
        let mut held = vec![0usize; m];
        for &h in of {
            if h < CONTESTED {
                held[h as usize] += 1;
            }
        }
        let mut isolating: Vec<Option<u32>> = vec![None; m];
        let mut total: u128 = costs.iter().map(|&c| u128::from(c)).sum();
        let mut wsum: u128 = weights.iter().map(|&w| u128::from(w)).sum();
        let mut by_weight: Vec<u32> = (0..m as u32).collect();
        by_weight.sort_unstable_by_key(|&i| (Reverse(weights[i as usize]), i));
        let mut heaviest = 0;
        let mut biggest: BinaryHeap<(u64, Reverse<u32>)> = costs
            .iter()
            .enumerate()
            .map(|(u, &c)| (c, Reverse(u as u32)))
            .collect();
        let mut hot = Vec::new();
        let mut hot_moved = 0;
        let mut remaining = m;
        while remaining > 1 {
            let Some(&(c, Reverse(u))) = biggest.peek() else {
                break;
            };
            while isolating[by_weight[heaviest] as usize].is_some() {
                heaviest += 1;
            }
            let wmax = u128::from(weights[by_weight[heaviest] as usize]);
            if u128::from(c) * wsum <= total * wmax {
                break;
            }
            biggest.pop();
            let holder = of[u as usize];
            let moves = |j: usize| {
                let own = holder == j as u32;
                held[j] - usize::from(own) + usize::from(holder < CONTESTED && !own)
            };
            let j = (0..m)
                .filter(|&j| isolating[j].is_none())
                .min_by_key(|&j| (moves(j), holder != j as u32, weights[j], positions[j], j))
                .expect("a member remains");
            isolating[j] = Some(u);
            hot.push(u);
            hot_moved += usize::from(holder < CONTESTED && holder != j as u32);
            remaining -= 1;
            wsum -= u128::from(weights[j]);
            total -= u128::from(c);
        }
        // Hot units are the costliest: unless every unit is hot, the
        // cheapest unit is not.
        let c_min = match hot.len() < costs.len() {
            true => costs.iter().map(|&c| u128::from(c)).min().unwrap_or(0),
            false => 0,
        };
        let (mut lo, mut hi) = (vec![0u64; m], vec![0u64; m]);
        let bp = u128::from(t.0);
        let scale = u128::from(Tolerance::MAX_BP);
        for i in 0..m {
            if isolating[i].is_some() {
                continue;
            }
            let share = total * u128::from(weights[i]); // over `wsum`
            let hi_t = (scale + bp) * share / (scale * wsum);
            // The multiples of `c_min` around the share.
            let step = c_min * wsum;
            let hi_c = share.div_ceil(step.max(1)) * c_min;
            let lo_t = ((scale - bp) * share).div_ceil(scale * wsum);
            let lo_c = share / step.max(1) * c_min;
            hi[i] = hi_t.max(hi_c) as u64;
            lo[i] = lo_t.min(lo_c) as u64;
        }
        Bands {
            isolating,
            hot,
            hot_moved,
            total,
            wsum,
            lo,
            hi,
        }
    }

    /// Member `i`'s share, rounded (it isolates nothing).
    pub(super) fn share(&self, i: usize, weights: &[u32]) -> u64 {
        let num = self.total * u128::from(weights[i]);
        ((2 * num + self.wsum) / (2 * self.wsum)) as u64
    }
}
