//! Consumer groups at the protocol level: membership and assignment, commits and fencing,
//! offsets surviving restarts, listing, describing and deleting groups.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use borges_protocol::ErrorCode;
use borges_testkit::BrokerProcess;
use common::{Assignment, RawClient};

fn partitions(a: &Assignment) -> BTreeSet<(String, i32)> {
    a.iter()
        .flat_map(|(t, ps)| ps.iter().map(move |p| (t.clone(), *p)))
        .collect()
}

#[test]
fn members_split_partitions_without_overlap_and_commits_are_fenced() {
    let broker = BrokerProcess::start();
    let mut c = RawClient::connect(broker.addr());
    assert_eq!(c.create_topic("orders", 4, &[]), ErrorCode::None);
    let (code, port, core) = c.find_coordinator("billing");
    assert_eq!(code, ErrorCode::None);
    assert!(port > 0 && (core as usize) < 2);

    let mut a = RawClient::connect(broker.addr());
    let (code, a_id, a_epoch, a_owned) = a.join("billing", &["orders"]);
    assert_eq!(code, ErrorCode::None);
    assert_eq!(partitions(&a_owned).len(), 4);

    let mut b = RawClient::connect(broker.addr());
    let (code, b_id, b_epoch, b_first) =
        b.heartbeat("billing", "", 0, Some(&["orders"]), &Assignment::new());
    assert_eq!(code, ErrorCode::None);
    assert!(b_first.is_empty(), "b waits until a has revoked");
    // a is told to give up two partitions; it acknowledges by reporting what it kept.
    let (_, _, _, a_keep) = a.heartbeat("billing", &a_id, a_epoch, None, &a_owned);
    assert_eq!(partitions(&a_keep).len(), 2);
    let (_, _, a_epoch2, a_final) = a.heartbeat("billing", &a_id, a_epoch, None, &a_keep);
    assert!(a_epoch2 > a_epoch);
    let (_, _, b_epoch2, b_final) = b.heartbeat("billing", &b_id, b_epoch, None, &b_first);
    let (pa, pb) = (partitions(&a_final), partitions(&b_final));
    assert_eq!(pa.len() + pb.len(), 4);
    assert!(pa.is_disjoint(&pb), "no partition is owned twice");

    // Commits: members with their current epoch succeed; stale epochs and strangers are refused.
    let (t, p) = pa.iter().next().unwrap().clone();
    assert_eq!(
        a.commit("billing", &a_id, a_epoch2, &[(&t, p, 42)]),
        vec![ErrorCode::None]
    );
    assert_eq!(
        a.commit("billing", &a_id, a_epoch, &[(&t, p, 43)]),
        vec![ErrorCode::StaleMemberEpoch]
    );
    assert_eq!(
        c.commit("billing", "zombie", 1, &[(&t, p, 44)]),
        vec![ErrorCode::UnknownMemberId]
    );
    assert_eq!(
        c.commit("billing", "", -1, &[(&t, p, 45)]),
        vec![ErrorCode::NonEmptyGroup]
    );
    assert_eq!(c.committed("billing"), vec![(t.clone(), p, 42)]);
    let (code, state, members) = c.describe_group("billing");
    assert_eq!((code, members), (ErrorCode::None, 2));
    assert!(state == "Stable" || state == "Reconciling", "{state}");

    // b leaves; its partitions go back to a. A fenced epoch gets FencedMemberEpoch.
    let (code, _, epoch, _) = b.heartbeat("billing", &b_id, -1, None, &b_final);
    assert_eq!((code, epoch), (ErrorCode::None, -1));
    let (_, _, a_epoch3, a_all) = a.heartbeat("billing", &a_id, a_epoch2, None, &a_final);
    assert_eq!(partitions(&a_all).len(), 4);
    let (code, ..) = a.heartbeat("billing", &a_id, a_epoch3 + 10, None, &a_all);
    assert_eq!(code, ErrorCode::FencedMemberEpoch);
    assert_eq!(
        a.commit("billing", &a_id, a_epoch3, &[(&t, p, 50)]),
        vec![ErrorCode::UnknownMemberId]
    );
    let _ = b_epoch2;
}

#[test]
fn a_silent_member_expires_and_offsets_survive_restarts() {
    let mut broker = BrokerProcess::start();
    let mut c = RawClient::connect(broker.addr());
    assert_eq!(c.create_topic("events", 2, &[]), ErrorCode::None);
    let (_, id, epoch, owned) = c.join("audit", &["events"]);
    assert_eq!(partitions(&owned).len(), 2);
    assert_eq!(
        c.commit("audit", &id, epoch, &[("events", 0, 8), ("events", 1, 3)]),
        vec![ErrorCode::None, ErrorCode::None]
    );
    // The member stops heartbeating: after its 2 s session it is gone.
    let mut state = String::new();
    for _ in 0..100 {
        std::thread::sleep(Duration::from_millis(100));
        state = c.describe_group("audit").1;
        if state == "Empty" {
            break;
        }
    }
    assert_eq!(state, "Empty");
    assert_eq!(
        c.list_groups(),
        vec![("audit".to_string(), "Empty".to_string())]
    );
    // An empty group accepts administrative commits (reset-offsets).
    assert_eq!(
        c.commit("audit", "", -1, &[("events", 1, 4)]),
        vec![ErrorCode::None]
    );

    broker.kill9();
    broker.restart();
    let mut c = RawClient::connect(broker.addr());
    let mut committed = c.committed("audit");
    committed.sort();
    assert_eq!(
        committed,
        vec![("events".to_string(), 0, 8), ("events".to_string(), 1, 4)]
    );
    // Old member ids are unknown after a restart: the member must rejoin.
    let (code, ..) = c.heartbeat("audit", &id, epoch, None, &owned);
    assert_eq!(code, ErrorCode::UnknownMemberId);

    assert_eq!(c.delete_group("audit"), ErrorCode::None);
    assert_eq!(c.delete_group("audit"), ErrorCode::GroupIdNotFound);
    assert!(c.committed("audit").is_empty());
    broker.terminate(Duration::from_secs(30));
    broker.restart();
    let mut c = RawClient::connect(broker.addr());
    assert!(c.committed("audit").is_empty(), "deletion is durable");
    assert!(c.list_groups().is_empty());
}

#[test]
fn group_requests_are_validated() {
    let broker = BrokerProcess::start();
    let mut c = RawClient::connect(broker.addr());
    let (code, ..) = c.heartbeat("", "", 0, Some(&["x"]), &Assignment::new());
    assert_eq!(code, ErrorCode::InvalidGroupId);
    let (code, ..) = c.heartbeat("g", "", 0, None, &Assignment::new());
    assert_eq!(
        code,
        ErrorCode::InvalidRequest,
        "joining needs a subscription"
    );
    let (code, ..) = c.heartbeat("g", "nobody", 5, None, &Assignment::new());
    assert_eq!(code, ErrorCode::UnknownMemberId);
    assert_eq!(c.describe_group("nope").0, ErrorCode::GroupIdNotFound);
    // Subscribing to a topic that does not exist yet is allowed; partitions arrive with it.
    let (_, id, epoch, owned) = c.join("early", &["later"]);
    assert!(owned.is_empty());
    assert_eq!(c.create_topic("later", 3, &[]), ErrorCode::None);
    let (_, _, _, owned) = c.heartbeat("early", &id, epoch, None, &owned);
    assert_eq!(partitions(&owned).len(), 3);
    assert_eq!(c.delete_group("early"), ErrorCode::NonEmptyGroup);
}
