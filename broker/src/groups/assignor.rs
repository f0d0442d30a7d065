//! The server-side assignor: every partition of the subscribed topics goes to exactly one member
//! subscribed to its topic; members keep the partitions they had when balance allows (sticky),
//! and in a group whose members share a subscription every member gets either
//! ⌊P/M⌋ or ⌈P/M⌉ partitions.

use std::collections::{BTreeMap, BTreeSet};

/// Partitions by topic.
pub type Assignment = BTreeMap<String, BTreeSet<i32>>;

/// One member as the assignor sees it.
#[derive(Debug, Clone)]
pub struct MemberSubscription {
    /// Member id.
    pub member_id: String,
    /// Topics it subscribes to.
    pub topics: BTreeSet<String>,
}

/// Number of partitions in an assignment.
#[cfg(test)]
pub fn count(a: &Assignment) -> usize {
    a.values().map(BTreeSet::len).sum()
}

/// Computes the target assignment. `partition_counts` holds the subscribed topics that exist;
/// `previous` is the last target assignment (for stickiness).
pub fn assign(
    members: &[MemberSubscription],
    partition_counts: &BTreeMap<String, usize>,
    previous: &BTreeMap<String, Assignment>,
) -> BTreeMap<String, Assignment> {
    let mut result: BTreeMap<String, Assignment> = members
        .iter()
        .map(|m| (m.member_id.clone(), Assignment::new()))
        .collect();
    if members.is_empty() {
        return result;
    }
    let subscribed: BTreeMap<&str, &BTreeSet<String>> = members
        .iter()
        .map(|m| (m.member_id.as_str(), &m.topics))
        .collect();
    let partitions: Vec<(String, i32)> = partition_counts
        .iter()
        .filter(|(t, _)| members.iter().any(|m| m.topics.contains(*t)))
        .flat_map(|(t, &n)| (0..n as i32).map(move |p| (t.clone(), p)))
        .collect();
    let total = partitions.len();
    let floor = total / members.len();
    let mut ceil_slots = total % members.len();
    let mut loads: BTreeMap<&str, usize> = subscribed.keys().map(|m| (*m, 0)).collect();
    let mut unassigned: Vec<(String, i32)> = Vec::new();
    // Sticky pass: previous owners keep partitions up to the balanced share.
    let mut owner_of: BTreeMap<(&str, i32), &str> = BTreeMap::new();
    for (member, a) in previous {
        for (t, ps) in a {
            for &p in ps {
                owner_of.insert((t.as_str(), p), member.as_str());
            }
        }
    }
    for (t, p) in &partitions {
        let keeper = owner_of
            .get(&(t.as_str(), *p))
            .copied()
            .filter(|m| subscribed.get(m).is_some_and(|topics| topics.contains(t)));
        let kept = keeper.is_some_and(|m| {
            let load = loads[m];
            if load < floor {
                true
            } else if load == floor && ceil_slots > 0 {
                ceil_slots -= 1;
                true
            } else {
                false
            }
        });
        match (kept, keeper) {
            (true, Some(m)) => {
                *loads.get_mut(m).unwrap_or(&mut 0) += 1;
                result
                    .entry(m.to_string())
                    .or_default()
                    .entry(t.clone())
                    .or_default()
                    .insert(*p);
            }
            _ => unassigned.push((t.clone(), *p)),
        }
    }
    // Fill pass: each remaining partition goes to the least-loaded eligible member.
    for (t, p) in unassigned {
        let target = loads
            .iter()
            .filter(|(m, _)| subscribed[*m].contains(&t))
            .min_by_key(|(m, load)| (**load, **m))
            .map(|(m, _)| *m);
        if let Some(m) = target {
            *loads.get_mut(m).unwrap_or(&mut 0) += 1;
            result
                .entry(m.to_string())
                .or_default()
                .entry(t.clone())
                .or_default()
                .insert(p);
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sub(id: &str, topics: &[&str]) -> MemberSubscription {
        MemberSubscription {
            member_id: id.to_string(),
            topics: topics.iter().map(|t| t.to_string()).collect(),
        }
    }

    fn counts(pairs: &[(&str, usize)]) -> BTreeMap<String, usize> {
        pairs.iter().map(|(t, n)| (t.to_string(), *n)).collect()
    }

    fn check_exactly_once(
        members: &[MemberSubscription],
        partition_counts: &BTreeMap<String, usize>,
        out: &BTreeMap<String, Assignment>,
    ) {
        let mut seen = BTreeSet::new();
        for (m, a) in out {
            let topics = &members.iter().find(|s| &s.member_id == m).unwrap().topics;
            for (t, ps) in a {
                assert!(topics.contains(t), "{m} got {t} without subscribing");
                for p in ps {
                    assert!(seen.insert((t.clone(), *p)), "{t}-{p} assigned twice");
                }
            }
        }
        for (t, n) in partition_counts {
            if members.iter().any(|m| m.topics.contains(t)) {
                for p in 0..*n as i32 {
                    assert!(seen.contains(&(t.clone(), p)), "{t}-{p} unassigned");
                }
            }
        }
    }

    #[test]
    fn splits_four_partitions_between_two_members() {
        let members = [sub("a", &["orders"]), sub("b", &["orders"])];
        let pc = counts(&[("orders", 4)]);
        let out = assign(&members, &pc, &BTreeMap::new());
        assert_eq!(count(&out["a"]), 2);
        assert_eq!(count(&out["b"]), 2);
        check_exactly_once(&members, &pc, &out);
    }

    #[test]
    fn a_joining_member_takes_only_what_balance_requires() {
        let pc = counts(&[("t", 6)]);
        let two = [sub("a", &["t"]), sub("b", &["t"])];
        let before = assign(&two, &pc, &BTreeMap::new());
        let three = [sub("a", &["t"]), sub("b", &["t"]), sub("c", &["t"])];
        let after = assign(&three, &pc, &before);
        check_exactly_once(&three, &pc, &after);
        for m in ["a", "b"] {
            assert_eq!(count(&after[m]), 2);
            for (t, ps) in &after[m] {
                assert!(ps.is_subset(&before[m][t]), "{m} only loses partitions");
            }
        }
        assert_eq!(count(&after["c"]), 2);
    }

    #[test]
    fn unchanged_membership_keeps_the_assignment() {
        let pc = counts(&[("t", 7), ("u", 3)]);
        let members = [
            sub("a", &["t", "u"]),
            sub("b", &["t", "u"]),
            sub("c", &["t", "u"]),
        ];
        let first = assign(&members, &pc, &BTreeMap::new());
        let second = assign(&members, &pc, &first);
        assert_eq!(first, second);
    }

    proptest! {
        #[test]
        fn every_partition_once_and_balanced(
            n_members in 1usize..8,
            partitions in proptest::collection::vec(0usize..12, 1..4),
            churn in proptest::collection::vec(any::<bool>(), 8),
        ) {
            let topics: Vec<String> = (0..partitions.len()).map(|i| format!("t{i}")).collect();
            let pc: BTreeMap<String, usize> = topics.iter().cloned().zip(partitions.iter().copied()).collect();
            let all: Vec<&str> = topics.iter().map(String::as_str).collect();
            let members: Vec<_> = (0..n_members).map(|i| sub(&format!("m{i}"), &all)).collect();
            let first = assign(&members, &pc, &BTreeMap::new());
            check_exactly_once(&members, &pc, &first);
            let loads: Vec<usize> = first.values().map(count).collect();
            prop_assert!(loads.iter().max().unwrap() - loads.iter().min().unwrap() <= 1);
            // Some members leave, others stay: still exactly once and balanced.
            let kept: Vec<_> = members.iter().enumerate().filter(|(i, _)| !churn[*i] || *i == 0).map(|(_, m)| m.clone()).collect();
            let second = assign(&kept, &pc, &first);
            check_exactly_once(&kept, &pc, &second);
            let loads: Vec<usize> = second.values().map(count).collect();
            prop_assert!(loads.iter().max().unwrap() - loads.iter().min().unwrap() <= 1);
        }

        #[test]
        fn mixed_subscriptions_only_get_their_topics(
            subs in proptest::collection::vec(proptest::collection::btree_set(0usize..3, 1..3), 1..6),
            partitions in proptest::collection::vec(1usize..6, 3),
        ) {
            let pc: BTreeMap<String, usize> = partitions.iter().enumerate().map(|(i, n)| (format!("t{i}"), *n)).collect();
            let members: Vec<MemberSubscription> = subs.iter().enumerate().map(|(i, s)| MemberSubscription {
                member_id: format!("m{i}"),
                topics: s.iter().map(|t| format!("t{t}")).collect(),
            }).collect();
            let out = assign(&members, &pc, &BTreeMap::new());
            check_exactly_once(&members, &pc, &out);
        }
    }
}
