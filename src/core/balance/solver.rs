//! Steps 2 and 3 of the cost balance: placing the free units and the
//! repair rounds (give, take, swap), on exact integer loads. Every repair
//! move strictly reduces the total distance of the loads outside their
//! bands, so the rounds end; see the module docs of `core::balance`.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use xxhash_rust::xxh3::xxh3_64_with_seed;

use super::Tolerance;
use super::bands::Bands;
use crate::core::ring::member_position;
use crate::core::sticky::{CONTESTED, FREE, FREE_SEED};

mod chain;

/// Donors a receiver tries, at most, before it gives up in this round.
const MAX_DONORS_TRIED: usize = 64;

/// Orders members by load per weight (`load_a × w_b` against `load_b ×
/// w_a`), then by position and index: a total order, the same everywhere.
#[derive(Clone, Copy, PartialEq, Eq)]
struct ByLoad {
    load: u64,
    weight: u32,
    position: u64,
    member: u32,
}

impl Ord for ByLoad {
    fn cmp(&self, o: &Self) -> Ordering {
        let a = u128::from(self.load) * u128::from(o.weight);
        let b = u128::from(o.load) * u128::from(self.weight);
        a.cmp(&b)
            .then(self.position.cmp(&o.position))
            .then(self.member.cmp(&o.member))
    }
}

impl PartialOrd for ByLoad {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

/// A member's units, for giving: `(cost, Reverse(score), unit)` ascending,
/// so that among equal costs the highest score goes first (as in sticky).
type Units = Vec<(u64, Reverse<u64>, u32)>;

/// A member's units: unsorted until it gives one, then sorted.
enum Held {
    Bucket(Vec<u32>),
    Sorted(Units),
}

pub(super) struct Solver<'n, 'u> {
    names: &'n [&'n str],
    weights: Vec<u32>,
    positions: Vec<u64>,
    units: &'u [&'u str],
    costs: Vec<u64>,
    /// Each unit's owner so far, or [`FREE`].
    pub(super) owner: Vec<u32>,
    load: Vec<u64>,
    pub(super) bands: Bands,
    /// Moves the hot placement forces: hot units that change member, and
    /// the other units of the members that isolate them.
    forced: usize,
    /// Per member that isolates nothing: its units, bucketed at the first
    /// repair, sorted once it gives (most members never do).
    lists: Option<Vec<Held>>,
}

impl<'n, 'u> Solver<'n, 'u> {
    pub(super) fn new(
        names: &'n [&'n str],
        weights: Vec<u32>,
        units: &'u [&'u str],
        costs: Vec<u64>,
        mut owner: Vec<u32>,
        t: Tolerance,
    ) -> Self {
        let positions: Vec<u64> = names.iter().map(|m| member_position(m)).collect();
        let bands = Bands::new(&weights, &positions, &costs, &owner, t);
        let mut hot = bands.hot.clone();
        hot.sort_unstable();
        let mut forced = bands.hot_moved;
        // The other units of a member that isolates a hot unit are free;
        // each that is not hot itself (counted above) was held: a move.
        for (u, h) in owner.iter_mut().enumerate() {
            if *h < CONTESTED
                && let Some(own) = bands.isolating[*h as usize]
                && own != u as u32
            {
                *h = FREE;
                forced += usize::from(hot.binary_search(&(u as u32)).is_err());
            }
        }
        for (j, isolated) in bands.isolating.iter().enumerate() {
            if let &Some(u) = isolated {
                owner[u as usize] = j as u32;
            }
        }
        let mut load = vec![0u64; names.len()];
        for (u, &h) in owner.iter().enumerate() {
            if h < CONTESTED {
                load[h as usize] += costs[u];
            }
        }
        Solver {
            names,
            weights,
            positions,
            units,
            costs,
            owner,
            load,
            bands,
            forced,
            lists: None,
        }
    }

    /// Whether member `i` isolates nothing: the bands apply to it.
    fn open(&self, i: usize) -> bool {
        self.bands.isolating[i].is_none()
    }

    fn by_load(&self, i: usize) -> ByLoad {
        ByLoad {
            load: self.load[i],
            weight: self.weights[i],
            position: self.positions[i],
            member: i as u32,
        }
    }

    fn entry(&self, member: usize, u: u32) -> (u64, Reverse<u64>, u32) {
        let score = xxh3_64_with_seed(self.units[u as usize].as_bytes(), self.positions[member]);
        (self.costs[u as usize], Reverse(score), u)
    }

    /// The lower bound of "Fewest moves", before any free unit is placed:
    /// the hot placement's moves, plus the larger of two bounds (a move
    /// takes one unit from one member and gives it to one):
    /// - giving: for each member whose kept units exceed `hi`, the fewest
    ///   of its units that cover the excess (its largest ones);
    /// - taking: the load members below `lo` lack, less the free units'
    ///   load (placed, not moved), over the costliest unit anyone holds.
    pub(super) fn minimum(&self) -> usize {
        let m = self.names.len();
        let over: Vec<bool> = (0..m)
            .map(|i| self.open(i) && self.load[i] > self.bands.hi[i])
            .collect();
        let lacking: u128 = (0..m)
            .filter(|&i| self.open(i))
            .map(|i| u128::from(self.bands.lo[i].saturating_sub(self.load[i])))
            .sum();
        let taking = if lacking > 0 {
            let (mut free, mut largest) = (0u128, 0u128);
            for (u, &h) in self.owner.iter().enumerate() {
                let c = u128::from(self.costs[u]);
                if h == FREE {
                    free += c;
                } else if h < CONTESTED && self.open(h as usize) {
                    largest = largest.max(c);
                }
            }
            match largest {
                0 => 0,
                _ => lacking.saturating_sub(free).div_ceil(largest) as usize,
            }
        } else {
            0
        };
        if !over.contains(&true) {
            return self.forced + taking;
        }
        let mut held: Vec<Vec<u64>> = vec![Vec::new(); m];
        for (u, &h) in self.owner.iter().enumerate() {
            if h < CONTESTED && over[h as usize] {
                held[h as usize].push(self.costs[u]);
            }
        }
        let mut giving = 0;
        for (i, mut costs) in held.into_iter().enumerate() {
            if !over[i] {
                continue;
            }
            costs.sort_unstable_by(|a, b| b.cmp(a));
            let excess = self.load[i] - self.bands.hi[i];
            let mut covered = 0u64;
            for c in costs {
                if covered >= excess {
                    break;
                }
                covered += c;
                giving += 1;
            }
        }
        self.forced + giving.max(taking)
    }

    /// Step 2: free units, largest first, onto the lowest load per weight.
    pub(super) fn place_free(&mut self) {
        let mut free: Vec<(Reverse<u64>, u64, u32)> = self
            .owner
            .iter()
            .enumerate()
            .filter(|&(_, &h)| h == FREE)
            .map(|(u, _)| {
                let key = xxh3_64_with_seed(self.units[u].as_bytes(), FREE_SEED);
                (Reverse(self.costs[u]), key, u as u32)
            })
            .collect();
        if free.is_empty() {
            return;
        }
        free.sort_unstable();
        let mut heap: BinaryHeap<Reverse<ByLoad>> = (0..self.names.len())
            .filter(|&i| self.open(i))
            .map(|i| Reverse(self.by_load(i)))
            .collect();
        for (_, _, u) in free {
            // The least loaded per weight where the unit fits below `hi`,
            // else the least loaded.
            let c = self.costs[u as usize];
            let mut tried: Vec<Reverse<ByLoad>> = Vec::new();
            let mut to = None;
            while tried.len() < MAX_DONORS_TRIED {
                let Some(Reverse(e)) = heap.pop() else {
                    break;
                };
                let i = e.member as usize;
                if c <= self.bands.hi[i].saturating_sub(self.load[i]) {
                    to = Some(i);
                    break;
                }
                tried.push(Reverse(e));
            }
            let i = match to {
                Some(i) => i,
                None => {
                    let Reverse(least) = tried.remove(0);
                    least.member as usize
                }
            };
            heap.extend(tried);
            self.give(u, i);
            heap.push(Reverse(self.by_load(i)));
        }
    }

    /// Gives unit `u`, free or owned, to member `to`.
    fn give(&mut self, u: u32, to: usize) {
        let c = self.costs[u as usize];
        let from = self.owner[u as usize];
        if from < CONTESTED {
            self.load[from as usize] -= c;
            let e = self.entry(from as usize, u);
            match self.lists.as_mut().map(|l| &mut l[from as usize]) {
                Some(Held::Sorted(list)) => {
                    let at = list.binary_search(&e).expect("listed with its owner");
                    list.remove(at);
                }
                Some(Held::Bucket(bucket)) => {
                    let at = bucket.iter().position(|&x| x == u).expect("in its bucket");
                    bucket.swap_remove(at);
                }
                None => {}
            }
        }
        self.owner[u as usize] = to as u32;
        self.load[to] += c;
        let e = self.entry(to, u);
        match self.lists.as_mut().map(|l| &mut l[to]) {
            Some(Held::Sorted(list)) => {
                let at = list.binary_search(&e).unwrap_err();
                list.insert(at, e);
            }
            Some(Held::Bucket(bucket)) => bucket.push(u),
            None => {}
        }
    }

    /// Buckets every member's units, once: a counting pass, no sort.
    fn build_lists(&mut self) {
        if self.lists.is_some() {
            return;
        }
        let mut sizes = vec![0usize; self.names.len()];
        for &h in &self.owner {
            if h < CONTESTED {
                sizes[h as usize] += 1;
            }
        }
        let mut buckets: Vec<Vec<u32>> = sizes.into_iter().map(Vec::with_capacity).collect();
        for (u, &h) in self.owner.iter().enumerate() {
            if h < CONTESTED {
                buckets[h as usize].push(u as u32);
            }
        }
        self.lists = Some(buckets.into_iter().map(Held::Bucket).collect());
    }

    /// Sorts member `i`'s units, if they are not yet: before it gives.
    fn sort_list(&mut self, i: usize) {
        self.build_lists();
        let Some(Held::Bucket(bucket)) = self.lists.as_mut().map(|l| &mut l[i]) else {
            return;
        };
        let bucket = std::mem::take(bucket);
        let mut list: Units = bucket.into_iter().map(|u| self.entry(i, u)).collect();
        list.sort_unstable();
        self.lists.as_mut().expect("built")[i] = Held::Sorted(list);
    }

    /// Member `i`'s sorted units ([`Solver::sort_list`] first).
    fn list(&self, i: usize) -> &Units {
        match &self.lists.as_ref().expect("built")[i] {
            Held::Sorted(list) => list,
            Held::Bucket(_) => unreachable!("sorted before it gives"),
        }
    }

    /// Step 3, members above `hi`: each gives to the lowest load per
    /// weight. Returns the moves made.
    pub(super) fn shed_over(&mut self) -> usize {
        let mut over: Vec<ByLoad> = (0..self.names.len())
            .filter(|&i| self.open(i) && self.load[i] > self.bands.hi[i])
            .map(|i| self.by_load(i))
            .collect();
        if over.is_empty() {
            return 0;
        }
        self.build_lists();
        // The heaviest (per weight) first.
        over.sort_unstable_by(|a, b| b.cmp(a));
        let mut heap: BinaryHeap<Reverse<ByLoad>> = (0..self.names.len())
            .filter(|&i| self.open(i))
            .map(|i| Reverse(self.by_load(i)))
            .collect();
        let mut moves = 0;
        for giver in over {
            let i = giver.member as usize;
            self.sort_list(i);
            while self.load[i] > self.bands.hi[i] {
                let Some((u, j, fixes)) = self.shed_one(i, &mut heap) else {
                    break;
                };
                // No single unit brings it within its band: giving would
                // take two moves or more, and a swap that does it takes
                // exactly two.
                if !fixes && let Some((x, b, y)) = self.swap_for(i) {
                    heap.push(Reverse(self.by_load(j)));
                    self.give(x, b);
                    self.give(y, i);
                    heap.push(Reverse(self.by_load(b)));
                    heap.push(Reverse(self.by_load(i)));
                    moves += 2;
                    continue;
                }
                self.give(u, j);
                heap.push(Reverse(self.by_load(j)));
                moves += 1;
            }
        }
        moves
    }

    /// The unit over-full member `i` gives and its receiver: the first
    /// receiver, by load per weight, that can take a unit of `i` without
    /// leaving its band, and of `i`'s units the one that brings `i` within
    /// its band nearest its share (`true`: it fixes `i` alone), or else the
    /// largest that fits. The receiver's heap entry is popped; every other
    /// is left in `heap`.
    fn shed_one(
        &self,
        i: usize,
        heap: &mut BinaryHeap<Reverse<ByLoad>>,
    ) -> Option<(u32, usize, bool)> {
        let mut tried = Vec::new();
        let mut found = None;
        while tried.len() < MAX_DONORS_TRIED {
            let Some(j) = self.least(heap, i) else {
                break;
            };
            let room = self.bands.hi[j].saturating_sub(self.load[j]);
            let spare = self.load[i] - self.bands.lo[i];
            let limit = room.min(spare);
            let excess = self.load[i] - self.bands.hi[i];
            let toward = self.load[i].saturating_sub(self.bands.share(i, &self.weights));
            let list = self.list(i);
            let fits = list.partition_point(|e| e.0 <= limit);
            if let Some(at) = nearest(list, excess, limit, toward) {
                found = Some((list[at].2, j, true));
            } else if fits > 0 {
                found = Some((list[fits - 1].2, j, false));
            } else {
                tried.push(Reverse(self.by_load(j)));
                continue;
            }
            break;
        }
        heap.extend(tried);
        found
    }

    /// A swap that brings member `a` (outside its band) and its partner
    /// both within their bands: `(x, b, y)`, `x` going from `a` to `b` and
    /// `y` back. Partners by load per weight, the least loaded first when
    /// `a` is above its band, the most loaded when below; the first
    /// [`MAX_DONORS_TRIED`] only.
    fn swap_for(&mut self, a: usize) -> Option<(u32, usize, u32)> {
        let over = self.load[a] > self.bands.hi[a];
        self.sort_list(a);
        for b in self.partners(a, over, MAX_DONORS_TRIED) {
            self.sort_list(b);
            if let Some((x, y)) = self.swap_pair(a, b) {
                return Some((x, b, y));
            }
        }
        None
    }

    /// The open members other than `a` by load per weight, the least
    /// loaded first when `over` (`a` gives), the most loaded first when
    /// not (`a` takes): the first `limit`, selected in linear time, since
    /// sorting every member for each member out of its band would not
    /// scale.
    fn partners(&self, a: usize, over: bool, limit: usize) -> Vec<usize> {
        let mut order: Vec<ByLoad> = (0..self.names.len())
            .filter(|&b| b != a && self.open(b))
            .map(|b| self.by_load(b))
            .collect();
        let by = |x: &ByLoad, y: &ByLoad| if over { x.cmp(y) } else { y.cmp(x) };
        if order.len() > limit {
            order.select_nth_unstable_by(limit, by);
            order.truncate(limit);
        }
        order.sort_unstable_by(by);
        order.into_iter().map(|o| o.member as usize).collect()
    }

    /// Step 3's swaps: each member outside its band, heaviest first, swaps
    /// one unit with the first partner that lets both end within their
    /// bands. Returns the moves made (two per swap).
    pub(super) fn swap(&mut self) -> usize {
        let out: Vec<usize> = (0..self.names.len())
            .filter(|&i| {
                self.open(i) && !(self.bands.lo[i]..=self.bands.hi[i]).contains(&self.load[i])
            })
            .collect();
        if out.is_empty() {
            return 0;
        }
        self.build_lists();
        let mut moves = 0;
        for a in out {
            if (self.bands.lo[a]..=self.bands.hi[a]).contains(&self.load[a]) {
                continue;
            }
            if let Some((x, b, y)) = self.swap_for(a) {
                self.give(x, b);
                self.give(y, a);
                moves += 2;
            } else if let Some(chain) = self.chain_for(a) {
                moves += chain.len();
                for (u, to) in chain {
                    self.give(u, to);
                }
            }
        }
        moves
    }

    /// A unit `x` of `a` and `y` of `b` whose exchange leaves both within
    /// their bands: `c_x − c_y` within the range that allows. Of `a`'s
    /// units, the first in its order that has a partner.
    fn swap_pair(&self, a: usize, b: usize) -> Option<(u32, u32)> {
        let (la, lb) = (i128::from(self.load[a]), i128::from(self.load[b]));
        let (lo_a, hi_a) = (i128::from(self.bands.lo[a]), i128::from(self.bands.hi[a]));
        let (lo_b, hi_b) = (i128::from(self.bands.lo[b]), i128::from(self.bands.hi[b]));
        // a: la − d ∈ [lo_a, hi_a]; b: lb + d ∈ [lo_b, hi_b].
        let low = (la - hi_a).max(lo_b - lb);
        let high = (la - lo_a).min(hi_b - lb);
        if low > high {
            return None;
        }
        let (xs, ys) = (self.list(a), self.list(b));
        for &(cx, _, x) in xs.iter().rev() {
            // c_y ∈ [c_x − high, c_x − low], and at least 1.
            let from = (i128::from(cx) - high).max(1);
            let to = i128::from(cx) - low;
            if to < from {
                continue;
            }
            let at = ys.partition_point(|e| i128::from(e.0) < from);
            if let Some(&(cy, _, y)) = ys.get(at)
                && i128::from(cy) <= to
            {
                return Some((x, y));
            }
        }
        None
    }

    /// Pops `heap`'s least loaded open member other than `not`, skipping
    /// stale entries (a member whose load changed was pushed again).
    fn least(&self, heap: &mut BinaryHeap<Reverse<ByLoad>>, not: usize) -> Option<usize> {
        let mut skipped = None;
        let found = loop {
            let Reverse(e) = heap.pop()?;
            let j = e.member as usize;
            if e.load != self.load[j] {
                continue;
            }
            if j == not {
                skipped = Some(e);
                continue;
            }
            break Some(j);
        };
        if let Some(e) = skipped {
            heap.push(Reverse(e));
        }
        found
    }

    /// Step 3, members below `lo`: each takes from the highest load per
    /// weight. Returns the moves made.
    pub(super) fn fill_under(&mut self) -> usize {
        let mut under: Vec<ByLoad> = (0..self.names.len())
            .filter(|&i| self.open(i) && self.load[i] < self.bands.lo[i])
            .map(|i| self.by_load(i))
            .collect();
        if under.is_empty() {
            return 0;
        }
        self.build_lists();
        // The lightest (per weight) first.
        under.sort_unstable();
        let mut donors: BinaryHeap<ByLoad> = (0..self.names.len())
            .filter(|&i| self.open(i))
            .map(|i| self.by_load(i))
            .collect();
        let mut moves = 0;
        for taker in under {
            let r = taker.member as usize;
            let mut tried = Vec::new();
            while self.load[r] < self.bands.lo[r] && tried.len() < MAX_DONORS_TRIED {
                let Some(d) = donors.pop() else {
                    break;
                };
                let di = d.member as usize;
                if d.load != self.load[di] {
                    continue;
                }
                if di == r || self.load[di] <= self.bands.lo[di] {
                    tried.push(d);
                    continue;
                }
                let limit =
                    (self.bands.hi[r] - self.load[r]).min(self.load[di] - self.bands.lo[di]);
                self.sort_list(di);
                let list = self.list(di);
                let fits = list.partition_point(|e| e.0 <= limit);
                if fits == 0 {
                    tried.push(d);
                    continue;
                }
                let deficit = self.bands.lo[r] - self.load[r];
                let toward = self
                    .bands
                    .share(r, &self.weights)
                    .saturating_sub(self.load[r]);
                let at = nearest(list, deficit, limit, toward).unwrap_or(fits - 1);
                let u = list[at].2;
                self.give(u, r);
                donors.push(self.by_load(di));
                moves += 1;
            }
            donors.extend(tried);
            // Its own entry is stale now; push the current one.
            donors.push(self.by_load(r));
        }
        moves
    }
}

/// In `list` (sorted by cost), the unit whose cost is within `low..=high`
/// and nearest `toward` (the cheaper of two as near): one move that lands
/// a member within its band and as near its share as one unit can, so
/// that the next small change of costs does not take it out again.
fn nearest(list: &Units, low: u64, high: u64, toward: u64) -> Option<usize> {
    let from = list.partition_point(|e| e.0 < low);
    let to = list.partition_point(|e| e.0 <= high);
    if from >= to {
        return None;
    }
    let at = list[from..to].partition_point(|e| e.0 < toward) + from;
    let above = (at < to).then_some(at);
    // The cheapest entry of the nearest cost below: the first of its run.
    let below = (at > from).then(|| {
        let c = list[at - 1].0;
        list[from..at].partition_point(|e| e.0 < c) + from
    });
    match (below, above) {
        (Some(b), Some(a)) => Some(if toward - list[b].0 <= list[a].0 - toward {
            b
        } else {
            a
        }),
        (b, a) => b.or(a),
    }
}
