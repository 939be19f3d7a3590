//! Placeholder until the ring module lands.
use std::collections::BTreeMap;
pub const POINTS_PER_UNIT: u32 = 50;
pub fn member_position(member: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(member.as_bytes(), 0)
}
pub fn unit_point(unit: &str, i: u32) -> u64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(unit.as_bytes(), i as u64)
}
pub fn assign<'a>(members: &[&'a str], units: &[&'a str]) -> BTreeMap<&'a str, Vec<&'a str>> {
    let mut ms: Vec<&str> = members.to_vec();
    ms.sort();
    ms.dedup();
    let mut us: Vec<&str> = units.to_vec();
    us.sort();
    us.dedup();
    let mut out: BTreeMap<&str, Vec<&str>> = ms.iter().map(|m| (*m, vec![])).collect();
    if ms.is_empty() {
        return out;
    }
    let mut pts: Vec<(u64, u32)> = us
        .iter()
        .enumerate()
        .flat_map(|(i, u)| (0..POINTS_PER_UNIT).map(move |p| (unit_point(u, p), i as u32)))
        .collect();
    pts.sort_unstable();
    let mut taken = vec![false; us.len()];
    let mut cursors: Vec<usize> = ms
        .iter()
        .map(|m| pts.partition_point(|p| p.0 < member_position(m)))
        .collect();
    let mut left = us.len();
    'outer: loop {
        for (k, m) in ms.iter().enumerate() {
            if left == 0 {
                break 'outer;
            }
            loop {
                let c = cursors[k] % pts.len();
                let u = pts[c].1 as usize;
                cursors[k] += 1;
                if !taken[u] {
                    taken[u] = true;
                    left -= 1;
                    out.get_mut(m).unwrap().push(us[u]);
                    break;
                }
            }
        }
    }
    for v in out.values_mut() {
        v.sort();
    }
    out
}
