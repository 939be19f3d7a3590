//! Step 3's last resort: chains of moves through an intermediary, for a
//! member outside its band that no single move or swap lands, as tight
//! bands over coarse units need. Every chain lands that member and the
//! intermediary within their bands and moves every other member it touches
//! toward (or keeps it within) its band, so the distance outside the bands
//! strictly falls, as every repair's must.

use std::cmp::Reverse;

use super::Solver;

/// Intermediaries and ends a chain tries, at most, each: the work grows
/// as their product.
const MAX_CHAIN_TRIED: usize = 16;

/// Costs of the cheaper unit a chain's first swap tries, per costlier one.
const MAX_SWAP_COSTS: usize = 8;

impl Solver<'_, '_> {
    /// Moves through an intermediary, for member `a` outside its band
    /// when no single move or swap reaches it, as tight bands over coarse
    /// units need when every receiver has less room than any unit that
    /// fixes `a`. Above its band, `a` gives one unit to `b` (or swaps one
    /// for a cheaper one of `b`'s), and `b` passes smaller units on to
    /// members with room; below, `a` takes one unit from `b` (or swaps one
    /// for a costlier one), and `b` takes smaller ones from members with
    /// load to spare. `a` and `b` end within their bands and every other
    /// member moves toward or stays within its band, so the distance
    /// outside the bands strictly falls. Intermediaries by load per weight
    /// (the least loaded first when `a` gives, the most when it takes), the
    /// others by room or spare load, the first [`MAX_CHAIN_TRIED`] of each.
    /// Returns the moves as `(unit, to)`.
    pub(super) fn chain_for(&mut self, a: usize) -> Option<Vec<(u32, usize)>> {
        let over = self.load[a] > self.bands.hi[a];
        let middles = self.partners(a, over, MAX_CHAIN_TRIED);
        // Room to take (above) or load to spare (below), the most first,
        // then by member: a total order.
        let slack = |c: usize| {
            if over {
                self.bands.hi[c].saturating_sub(self.load[c])
            } else {
                self.load[c].saturating_sub(self.bands.lo[c])
            }
        };
        let mut ends: Vec<(Reverse<u64>, usize)> = (0..self.names.len())
            .filter(|&c| c != a && self.open(c))
            .map(|c| (Reverse(slack(c)), c))
            .filter(|e| e.0.0 > 0)
            .collect();
        ends.sort_unstable();
        ends.truncate(MAX_CHAIN_TRIED + 1);
        self.sort_list(a);
        for &m in middles.iter().chain(ends.iter().map(|e| &e.1)) {
            self.sort_list(m);
        }
        for &b in &middles {
            for first in self.first_steps(a, b, over) {
                if let Some(rest) = self.pass_on(b, &first, over, &ends) {
                    let mut moves = first.moves;
                    moves.extend(rest);
                    return Some(moves);
                }
            }
        }
        None
    }

    /// A chain's first steps between `a` (outside its band) and `b`, each
    /// landing `a` within its band: one unit (from `a` to `b` when `a` is
    /// above, back when below), then swaps of one unit each way; distinct
    /// costs once each, a bounded number of each.
    fn first_steps(&self, a: usize, b: usize, over: bool) -> Vec<FirstStep> {
        let la = self.load[a];
        // What `a` must lose (above) or gain (below) to land in its band.
        let (low, high) = if over {
            (la - self.bands.hi[a], la - self.bands.lo[a])
        } else {
            (self.bands.lo[a] - la, self.bands.hi[a] - la)
        };
        // The side that sends the costlier unit: `a` above, `b` below.
        let (giver, taker) = if over { (a, b) } else { (b, a) };
        let (gives, takes) = (self.list(giver), self.list(taker));
        let mut steps = Vec::new();
        let from = gives.partition_point(|e| e.0 < low);
        let to = gives.partition_point(|e| e.0 <= high);
        for run in distinct(&gives[from..to]).take(MAX_CHAIN_TRIED) {
            let (c, _, u) = gives[from + run];
            steps.push(FirstStep {
                moves: vec![(u, taker)],
                shift: c,
                kept: None,
            });
        }
        // Swaps: `x` (cost cx) one way, `y` (cy < cx) back, cx − cy within
        // `low..=high`.
        for run in distinct(gives).rev().take(MAX_CHAIN_TRIED) {
            let (cx, _, x) = gives[run];
            let (lo_y, hi_y) = (cx.saturating_sub(high).max(1), cx.saturating_sub(low));
            if cx <= low || hi_y < lo_y {
                continue;
            }
            let from = takes.partition_point(|e| e.0 < lo_y);
            let to = takes.partition_point(|e| e.0 <= hi_y.min(cx - 1));
            for run in distinct(&takes[from..to]).take(MAX_SWAP_COSTS) {
                let (cy, _, y) = takes[from + run];
                steps.push(FirstStep {
                    moves: vec![(x, taker), (y, giver)],
                    shift: cx - cy,
                    kept: Some(y).filter(|_| over),
                });
            }
        }
        steps
    }

    /// For [`Solver::chain_for`]: after `b` gained (`over`) or lost
    /// `first.shift`, the moves that bring it back within its band,
    /// greedily: to each end in turn (not `b`), the largest unit that fits
    /// its room (or spare load) and what `b` may still pass without leaving
    /// its band on the other side. `Some(vec![])` when `b` stays within it.
    fn pass_on(
        &self,
        b: usize,
        first: &FirstStep,
        over: bool,
        ends: &[(Reverse<u64>, usize)],
    ) -> Option<Vec<(u32, usize)>> {
        let (lo, hi) = (self.bands.lo[b], self.bands.hi[b]);
        let load = if over {
            self.load[b] + first.shift
        } else {
            self.load[b].checked_sub(first.shift)?
        };
        // `need` must pass, `most` may: back within `lo..=hi`.
        let (need, most) = if over {
            (load.saturating_sub(hi), load.saturating_sub(lo))
        } else {
            (lo.saturating_sub(load), hi.saturating_sub(load))
        };
        if need == 0 {
            return Some(Vec::new());
        }
        let mut moves = Vec::new();
        let mut passed = 0u64;
        // Units already moving: `b`'s unit swapped to `a` stays there.
        let mut used: Vec<u32> = first.kept.into_iter().collect();
        for &(Reverse(room), e) in ends {
            if e == b {
                continue;
            }
            // Above, `b`'s units go to `e`; below, `e`'s come to `b`.
            let units = self.list(if over { b } else { e });
            let mut room = room;
            while passed < need {
                let limit = room.min(most - passed);
                let mut at = units.partition_point(|x| x.0 <= limit);
                while at > 0 && used.contains(&units[at - 1].2) {
                    at -= 1;
                }
                if at == 0 {
                    break;
                }
                let (cost, _, u) = units[at - 1];
                used.push(u);
                moves.push((u, if over { e } else { b }));
                room -= cost;
                passed += cost;
            }
            if passed >= need {
                return Some(moves);
            }
        }
        None
    }
}

/// A chain's first step (see [`Solver::chain_for`]): its moves, what the
/// intermediary gains or loses by them, and its unit that went to the
/// member outside its band (not to be passed on).
struct FirstStep {
    moves: Vec<(u32, usize)>,
    shift: u64,
    kept: Option<u32>,
}

/// The index of the first entry of each run of equal costs in `list`.
fn distinct(list: &[(u64, Reverse<u64>, u32)]) -> impl DoubleEndedIterator<Item = usize> + '_ {
    (0..list.len()).filter(move |&i| i == 0 || list[i - 1].0 != list[i].0)
}
