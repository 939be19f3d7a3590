use std::collections::{BTreeMap, HashMap};

use proptest::prelude::*;

use super::*;

const RULE: QuarantineRule = QuarantineRule {
    after: 3,
    window_ms: 600_000,
    probation_ms: 1_000,
};

fn units(names: &[&'static str]) -> Vec<&'static str> {
    names.to_vec()
}

#[test]
fn records_round_trip_and_a_bad_value_is_none() {
    let r = Record {
        since_ms: 7,
        deaths: vec![
            Death {
                member: "10.0.0.1:80".into(),
                at_ms: 5,
            },
            Death {
                member: "[::1]:81".into(),
                at_ms: 6,
            },
        ],
    };
    assert_eq!(Record::decode(&r.encode()), Some(r));
    assert_eq!(
        Record::decode("9"),
        Some(Record {
            since_ms: 9,
            deaths: vec![]
        })
    );
    for bad in ["", "x 1", "1 a:1@x", "1 nodeath"] {
        assert_eq!(Record::decode(bad), None, "{bad:?}");
    }
}

#[test]
fn off_counts_nothing() {
    let mut q = Quarantine::new(QuarantineRule::OFF);
    for (i, m) in ["a:1", "b:1", "c:1", "d:1"].iter().enumerate() {
        assert!(q.observe_deaths([(*m, units(&["p"]))], i as u64).is_empty());
    }
    assert!(q.excluded().is_empty() && q.key() == 0);
}

#[test]
fn one_member_dying_again_and_again_quarantines_nothing() {
    let mut q = Quarantine::new(RULE);
    let elsewhere = ["b:1", "c:1"];
    for i in 0..20u64 {
        q.observe_deaths([("a:1", units(&["u1", "u2"]))], i * 1000);
        // Its units are tried elsewhere, each alone, and pass.
        q.tick(i * 1000 + 1, |_| None, &elsewhere);
        let pins: BTreeMap<String, String> = q
            .trial_pins()
            .map(|(u, m)| (u.to_string(), m.to_string()))
            .collect();
        assert!(
            pins.values().all(|m| m != "a:1"),
            "never on a member that died holding it"
        );
        let on_pin = |u: &str| pins.get(u).cloned();
        q.tick(i * 1000 + 2, on_pin, &elsewhere);
        q.tick(i * 1000 + 999, on_pin, &elsewhere);
    }
    assert!(
        q.quarantined().is_empty(),
        "one member's deaths convict nothing"
    );
    assert!(q.deaths_of("u1") >= 3);
}

#[test]
fn the_third_death_on_a_trial_quarantines_and_explains_its_companions() {
    let mut q = Quarantine::new(RULE);
    let members = ["a:1", "b:1", "c:1", "d:1", "e:1"];
    q.observe_deaths([("a:1", units(&["p", "c", "x"]))], 1_000);
    q.observe_deaths([("b:1", units(&["p", "c"]))], 2_000);
    // Both one death short: held, given to nobody until tried.
    assert_eq!(q.held().len(), 2);
    assert_eq!(q.excluded(), BTreeSet::from(["c", "p"]));
    q.tick(2_001, |_| None, &members);
    let pins: BTreeMap<String, String> = q
        .trial_pins()
        .map(|(u, m)| (u.to_string(), m.to_string()))
        .collect();
    assert_eq!(pins.len(), 2, "both tried at once: {pins:?}");
    assert_ne!(pins["c"], pins["p"], "each alone on its member");
    assert!(pins.values().all(|m| !["a:1", "b:1"].contains(&m.as_str())));
    assert!(q.excluded().is_empty(), "both on trial");
    // "c" passes its probation (1 s) on its member.
    let on_pin = |u: &str| (u == "c").then(|| pins["c"].clone());
    q.tick(2_100, on_pin, &members);
    q.tick(3_099, on_pin, &members);
    assert_eq!(q.trials().count(), 2, "probation not over");
    q.tick(3_100, on_pin, &members);
    assert_eq!(q.trials().collect::<Vec<_>>(), vec!["p"]);
    let before = q.key();
    // The poison unit's member dies: it alone reaches three.
    let got = q.observe_deaths([(pins["p"].as_str(), units(&["p", "y"]))], 5_000);
    assert_eq!(got, vec!["p".to_string()]);
    assert_eq!(q.excluded(), BTreeSet::from(["p"]));
    assert_ne!(q.key(), before);
    assert_eq!(q.deaths_of("c"), 0, "a:1's and b:1's deaths are explained");
    assert_eq!(q.deaths_of("x"), 0);
    assert_eq!(q.deaths_of("y"), 0);
    let events = q.take_events();
    assert_eq!(events.quarantined.len(), 1);
    assert_eq!(events.quarantined[0].1.deaths.len(), 3);
    assert_eq!(q.unsaved().len(), 1);
}

#[test]
fn trials_wait_for_a_member_of_their_own() {
    // The ring gives a restarted member the same units: only one member
    // ever dies with them. With one other member, they are tried one at a
    // time, there.
    let mut q = Quarantine::new(RULE);
    let members = ["a:1", "b:1"];
    q.observe_deaths([("a:1", units(&["p", "u"]))], 1_000);
    q.observe_deaths([("a:1", units(&["p", "u"]))], 2_000);
    q.tick(2_001, |_| None, &members);
    assert_eq!(q.trial_pins().collect::<Vec<_>>(), vec![("p", "b:1")]);
    assert_eq!(q.excluded(), BTreeSet::from(["u"]), "u waits for b:1");
    let got = q.observe_deaths([("b:1", units(&["p"]))], 2_100);
    assert_eq!(got, vec!["p".to_string()]);
    assert_eq!(q.deaths_of("u"), 0, "a:1's deaths were p's");
    assert!(q.excluded().len() == 1 && q.is_quarantined("p"));
}

#[test]
fn records_are_saved_once_confirmed_and_a_release_restarts_the_count() {
    let mut q = Quarantine::new(QuarantineRule {
        after: 2,
        window_ms: 600_000,
        probation_ms: 1_000,
    });
    q.observe_stored(vec![]);
    q.observe_deaths([("a:1", units(&["p"]))], 1);
    q.observe_deaths([("b:1", units(&["p"]))], 2);
    assert!(q.is_quarantined("p"));
    // A read before the write landed: still quarantined, still unsaved.
    q.observe_stored(vec![]);
    assert!(q.is_quarantined("p") && q.unsaved().len() == 1);
    q.saved(&["p".to_string()]);
    assert!(q.unsaved().is_empty() && q.is_quarantined("p"));
    // An operator's release.
    q.take_events();
    q.observe_stored(vec![]);
    assert!(!q.is_quarantined("p"));
    assert_eq!(q.take_events().released, vec!["p".to_string()]);
    q.observe_deaths([("c:1", units(&["p"]))], 3);
    assert!(!q.is_quarantined("p"), "its count restarted");
}

#[test]
fn a_stored_record_quarantines_whatever_its_value_and_bad_fields_are_named() {
    let mut q = Quarantine::new(RULE);
    let bad = q.observe_stored(vec![
        ("p".into(), "garbage".into()),
        ("a,b".into(), "1".into()),
    ]);
    assert_eq!(bad.len(), 1);
    assert_eq!(q.quarantined(), vec![("p", None)]);
    assert_eq!(q.excluded(), BTreeSet::from(["p"]));
}

#[test]
fn deaths_past_the_window_and_retracted_bursts_do_not_count() {
    let mut q = Quarantine::new(QuarantineRule {
        after: 2,
        window_ms: 1_000,
        probation_ms: 1_000,
    });
    q.observe_deaths([("a:1", units(&["p"]))], 0);
    q.observe_deaths([("b:1", units(&["p"]))], 1_001);
    assert!(!q.is_quarantined("p"), "a:1's death is past the window");
    assert_eq!(q.deaths_of("p"), 1);
    q.retract_since(1_001);
    assert_eq!(q.deaths_of("p"), 0, "b:1 died in a mass failure");
}

#[test]
fn too_many_candidates_are_not_held() {
    let mut q = Quarantine::new(RULE);
    let many: Vec<String> = (0..=HOLD_LIMIT).map(|i| format!("u{i}")).collect();
    let row: Vec<&str> = many.iter().map(String::as_str).collect();
    q.observe_deaths([("a:1", row.clone())], 1);
    q.observe_deaths([("b:1", row)], 2);
    assert!(q.held().is_empty() && q.excluded().is_empty());
}

/// A fleet as the holder sees it: `members` workers, `units` units placed
/// at random on live ones, a dead member back after a second. With
/// `poison`, the owner of unit 0 dies at once; `crashy` dies every
/// `crash_every` steps on its own.
struct Fleet {
    live: Vec<bool>,
    back_at: Vec<u64>,
    owner: HashMap<String, usize>,
    names: Vec<String>,
    members: Vec<String>,
}

fn run(
    members: usize,
    units: usize,
    poison: bool,
    crashy: Option<(usize, u64)>,
    seed: u64,
    steps: u64,
) -> (Quarantine, usize) {
    let mut rng = seed.max(1);
    let mut next = move |n: usize| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng % n as u64) as usize
    };
    let mut f = Fleet {
        live: vec![true; members],
        back_at: vec![0; members],
        owner: HashMap::new(),
        names: (0..units).map(|i| format!("u{i:03}")).collect(),
        members: (0..members).map(|i| format!("w{i}:80")).collect(),
    };
    let mut q = Quarantine::new(RULE);
    q.observe_stored(vec![]);
    let mut poison_deaths = 0;
    for step in 0..steps {
        let now = step * 100;
        for m in 0..members {
            if !f.live[m] && f.back_at[m] <= step {
                f.live[m] = true;
            }
        }
        let owners: HashMap<String, String> = f
            .owner
            .iter()
            .map(|(u, m)| (u.clone(), f.members[*m].clone()))
            .collect();
        let eligible: Vec<String> = (0..members)
            .filter(|m| f.live[*m])
            .map(|m| f.members[m].clone())
            .collect();
        let eligible: Vec<&str> = eligible.iter().map(String::as_str).collect();
        q.tick(now, |u| owners.get(u).cloned(), &eligible);
        let excluded: BTreeSet<String> = q.excluded().into_iter().map(str::to_string).collect();
        f.owner.retain(|u, _| !excluded.contains(u));
        // A trial unit goes to its pin, as the solver sends a pinned unit.
        for (u, m) in q.trial_pins() {
            let m = f.members.iter().position(|x| x == m).expect("a member");
            f.owner.insert(u.to_string(), m);
        }
        let alive: Vec<usize> = (0..members).filter(|m| f.live[*m]).collect();
        if !alive.is_empty() {
            for u in &f.names {
                if !excluded.contains(u) && !f.owner.contains_key(u) {
                    f.owner.insert(u.clone(), alive[next(alive.len())]);
                }
            }
        }
        let mut dying = BTreeSet::new();
        if poison && let Some(m) = f.owner.get("u000") {
            dying.insert(*m);
            poison_deaths += 1;
        }
        if let Some((m, every)) = crashy
            && step % every == 0
            && f.live[m]
        {
            dying.insert(m);
        }
        for m in dying {
            let row: Vec<String> = f
                .owner
                .iter()
                .filter(|(_, o)| **o == m)
                .map(|(u, _)| u.clone())
                .collect();
            f.owner.retain(|_, o| *o != m);
            f.live[m] = false;
            f.back_at[m] = step + 10;
            q.observe_deaths(
                [(
                    f.members[m].as_str(),
                    row.iter().map(String::as_str).collect(),
                )],
                now,
            );
        }
    }
    (q, poison_deaths)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// A poison unit among few enough candidates is quarantined alone
    /// (placement is random here; trials go to their pins).
    #[test]
    fn a_poison_unit_is_quarantined_alone(
        members in 4usize..9,
        units in 8usize..40,
        seed in any::<u64>(),
    ) {
        let (q, deaths) = run(members, units, true, None, seed, 400);
        let quarantined: Vec<&str> = q.quarantined().into_iter().map(|(u, _)| u).collect();
        prop_assert_eq!(quarantined, vec!["u000"]);
        prop_assert!(deaths <= 12, "{deaths} deaths");
        prop_assert!(q.held().is_empty() && q.trials().count() == 0);
    }

    /// Without a poison unit, a member that crash-loops on its own
    /// quarantines nothing, whatever it is given.
    #[test]
    fn a_crash_looping_member_quarantines_nothing(
        members in 2usize..9,
        units in 1usize..60,
        every in 1u64..20,
        seed in any::<u64>(),
    ) {
        let (q, _) = run(members, units, false, Some((0, every)), seed, 400);
        prop_assert!(q.quarantined().is_empty());
    }

    /// Whatever the deaths, the excluded set is the quarantined units plus
    /// the held ones not on trial, at most `HOLD_LIMIT` of them, and its
    /// key is 0 exactly when it is empty.
    #[test]
    fn the_excluded_set_is_what_the_book_says(
        deaths in prop::collection::vec((0usize..6, prop::collection::vec(0usize..30, 0..12)), 0..30),
    ) {
        let mut q = Quarantine::new(RULE);
        q.observe_stored(vec![]);
        for (i, (m, row)) in deaths.iter().enumerate() {
            let member = format!("m{m}:1");
            let row: Vec<String> = row.iter().map(|u| format!("u{u}")).collect();
            let now = i as u64 * 50;
            q.observe_deaths([(member.as_str(), row.iter().map(String::as_str).collect())], now);
            q.tick(now + 10, |_| None, &["m0:1", "m9:1"]);
            let excluded = q.excluded();
            prop_assert!(q.held().len() <= HOLD_LIMIT);
            for u in &excluded {
                prop_assert!(q.is_quarantined(u) || (q.held().contains(*u) && !q.trials().any(|t| t == *u)));
            }
            for (u, _) in q.quarantined() {
                prop_assert!(excluded.contains(u));
            }
            prop_assert_eq!(q.key() == 0, excluded.is_empty());
        }
    }
}
