use super::*;
use crate::metadata::{BrokerRegistration, CorePort, TopicRecord, Uuid};

fn registration(id: i32, cores: u16) -> BrokerRegistration {
    BrokerRegistration {
        id,
        incarnation: Uuid::random(),
        host: "127.0.0.1".into(),
        port: 9000 + id as u16,
        cores: (0..cores).map(|core| CorePort { core, port: 0 }).collect(),
        controller_addr: format!("127.0.0.1:{}", 9100 + id),
    }
}

/// Applies commands as a state machine would, at consecutive indexes.
struct Log {
    sm: ClusterMetadata,
    index: u64,
}

impl Log {
    fn new() -> Log {
        Log {
            sm: ClusterMetadata::default(),
            index: 0,
        }
    }

    fn apply(&mut self, c: MetadataChange) -> ChangeReply {
        self.index += 1;
        self.sm.apply(self.index, 1, &c)
    }

    fn image(&self) -> &MetadataImage {
        &self.sm.image
    }

    /// Registers and unfences brokers 1..=n; returns their epochs.
    fn brokers(&mut self, n: i32, cores: u16) -> Vec<u64> {
        let mut epochs = Vec::new();
        for id in 1..=n {
            let epoch = self.apply(MetadataChange::RegisterBroker(registration(id, cores)));
            assert_eq!(epoch.error, None);
            let r = self.apply(MetadataChange::UnfenceBroker {
                id,
                epoch: epoch.index,
            });
            assert_eq!(r.error, None);
            epochs.push(epoch.index);
        }
        epochs
    }

    fn topic(&mut self, name: &str, partitions: usize, rf: usize) {
        self.topic_with(name, partitions, rf, &[]);
    }

    fn topic_with(&mut self, name: &str, partitions: usize, rf: usize, configs: &[(&str, &str)]) {
        let placed = place_replicas(self.image(), partitions, rf).unwrap();
        let r = self.apply(MetadataChange::CreateTopic(TopicRecord {
            name: name.into(),
            id: Uuid::random(),
            internal: false,
            configs: configs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            partitions: placed,
        }));
        assert_eq!(r.error, None);
    }

    fn partition(&self, name: &str, p: usize) -> PartitionRecord {
        self.image().topics[name].partitions[p].clone()
    }

    fn epoch_of(&self, id: i32) -> u64 {
        self.image().brokers[&id].epoch
    }

    fn fence(&mut self, id: i32) {
        let epoch = self.epoch_of(id);
        let r = self.apply(MetadataChange::FenceBroker { id, epoch });
        assert_eq!(r.error, None);
    }

    /// The broker restarts: registers again, then is unfenced.
    fn come_back(&mut self, id: i32) {
        let reg = self.apply(MetadataChange::RegisterBroker(registration(id, 1)));
        assert_eq!(reg.error, None);
        let r = self.apply(MetadataChange::UnfenceBroker {
            id,
            epoch: reg.index,
        });
        assert_eq!(r.error, None);
    }

    /// The partition's leader asks for `isr`.
    fn alter_isr(&mut self, name: &str, isr: Vec<i32>) -> ChangeReply {
        let p = self.partition(name, 0);
        self.apply(MetadataChange::AlterPartition(AlterPartition {
            topic: name.into(),
            partition: 0,
            leader: p.leader,
            broker_epoch: self.epoch_of(p.leader),
            leader_epoch: p.leader_epoch,
            partition_epoch: p.partition_epoch,
            isr,
        }))
    }
}

#[test]
fn placement_uses_distinct_brokers_and_spreads_leaders_and_cores() {
    let mut log = Log::new();
    log.brokers(3, 2);
    log.topic("t", 6, 3);
    let mut leaders = BTreeMap::new();
    let mut cores: BTreeMap<(i32, u16), usize> = BTreeMap::new();
    for p in &log.image().topics["t"].partitions {
        let mut r = p.replicas.clone();
        r.sort();
        r.dedup();
        assert_eq!(r.len(), 3, "{p:?}");
        assert_eq!(p.isr, p.replicas);
        assert_eq!(p.leader, p.replicas[0]);
        assert_eq!(Some(p.core), p.core_on(p.leader));
        *leaders.entry(p.leader).or_insert(0) += 1;
        for (b, c) in p.replicas.iter().zip(&p.replica_cores) {
            *cores.entry((*b, *c)).or_default() += 1;
        }
    }
    assert_eq!(leaders.values().copied().collect::<Vec<_>>(), vec![2, 2, 2]);
    assert!(cores.values().all(|&n| n == 3), "{cores:?}");
    assert!(place_replicas(log.image(), 1, 4).is_err());
}

#[test]
fn fencing_moves_leadership_to_the_isr_and_bumps_the_epoch() {
    let mut log = Log::new();
    let epochs = log.brokers(3, 1);
    log.topic("t", 3, 3);
    let before = log.partition("t", 0);
    let leader = before.leader;
    let epoch = epochs[(leader - 1) as usize];
    let stale = log.apply(MetadataChange::FenceBroker {
        id: leader,
        epoch: epoch + 100,
    });
    assert!(stale.error.is_some());
    assert_eq!(
        log.partition("t", 0),
        before,
        "a stale epoch changes nothing"
    );
    assert_eq!(
        log.apply(MetadataChange::FenceBroker { id: leader, epoch })
            .error,
        None
    );
    let after = log.partition("t", 0);
    assert_ne!(after.leader, leader);
    assert!(after.isr.contains(&after.leader) && !after.isr.contains(&leader));
    assert_eq!(after.leader_epoch, before.leader_epoch + 1);
    assert_eq!(Some(after.core), after.core_on(after.leader));
    for p in &log.image().topics["t"].partitions {
        assert_ne!(p.leader, leader);
    }
    assert_eq!(log.image().brokers[&leader].state, BrokerState::Fenced);
}

#[test]
fn the_last_isr_member_moves_to_the_elr_and_leads_again_when_back() {
    let mut log = Log::new();
    let epochs = log.brokers(1, 1);
    log.topic("t", 1, 1);
    log.apply(MetadataChange::FenceBroker {
        id: 1,
        epoch: epochs[0],
    });
    let p = log.partition("t", 0);
    assert_eq!(
        (p.leader, p.isr.clone(), p.elr.clone()),
        (NO_LEADER, vec![], vec![1])
    );
    let reg = log.apply(MetadataChange::RegisterBroker(registration(1, 1)));
    assert!(reg.index > epochs[0]);
    log.apply(MetadataChange::UnfenceBroker {
        id: 1,
        epoch: reg.index,
    });
    let p = log.partition("t", 0);
    assert_eq!((p.leader, p.leader_epoch), (1, 2));
    assert_eq!((p.isr, p.elr), (vec![1], vec![]));
}

/// KIP-966: replicas leaving an ISR that is below min.insync.replicas join the ELR (the high
/// watermark stops while the ISR is that small, so they hold every committed record); with
/// the ISR empty the leader comes from the ELR, never from a replica that left earlier.
#[test]
fn with_the_isr_empty_the_leader_comes_from_the_elr_only() {
    let mut log = Log::new();
    log.brokers(3, 1);
    log.topic_with("t", 1, 3, &[("min.insync.replicas", "2")]);
    let p = log.partition("t", 0);
    let (l, a, b) = (p.replicas[0], p.replicas[1], p.replicas[2]);
    log.fence(a);
    let p = log.partition("t", 0);
    assert_eq!(
        (p.isr.len(), p.elr.clone()),
        (2, vec![]),
        "ISR still at min: no ELR"
    );
    log.fence(b);
    let p = log.partition("t", 0);
    assert_eq!((p.isr.clone(), p.elr.clone()), (vec![l], vec![b]));
    log.fence(l);
    let p = log.partition("t", 0);
    assert_eq!(p.leader, NO_LEADER);
    assert_eq!((p.isr.clone(), p.elr.clone()), (vec![], vec![b, l]));
    // `a` left while the ISR was still at min.insync.replicas: it may miss committed records.
    log.come_back(a);
    assert_eq!(log.partition("t", 0).leader, NO_LEADER, "a is not eligible");
    let epoch_before = log.partition("t", 0).leader_epoch;
    log.come_back(b);
    let p = log.partition("t", 0);
    assert_eq!(p.leader, b, "an ELR member leads");
    assert_eq!(p.leader_epoch, epoch_before + 1);
    assert_eq!((p.isr.clone(), p.elr.clone()), (vec![b], vec![l]));
    assert_eq!(log.image().unclean_leader_elections, 0);
    // The ISR back at min.insync.replicas: the ELR is cleared.
    assert_eq!(log.alter_isr("t", vec![b, a]).error, None);
    let p = log.partition("t", 0);
    assert_eq!((p.isr.len(), p.elr.clone()), (2, vec![]));
}

#[test]
fn an_isr_shrink_below_min_insync_through_alter_partition_fills_the_elr() {
    let mut log = Log::new();
    log.brokers(3, 1);
    log.topic_with("t", 1, 3, &[("min.insync.replicas", "2")]);
    let p = log.partition("t", 0);
    let (l, a, b) = (p.replicas[0], p.replicas[1], p.replicas[2]);
    assert_eq!(log.alter_isr("t", vec![l]).error, None);
    let p = log.partition("t", 0);
    assert_eq!((p.isr.clone(), p.elr.clone()), (vec![l], vec![a, b]));
    assert_eq!(log.alter_isr("t", vec![l, b]).error, None);
    let p = log.partition("t", 0);
    assert_eq!((p.isr.clone(), p.elr.clone()), (vec![l, b], vec![]));
}

/// Unclean election (a replica that is neither in the ISR nor in the ELR leads) only where
/// the topic enables it, and then counted in the image.
#[test]
fn unclean_election_is_off_by_default_and_counted_when_a_topic_enables_it() {
    let mut log = Log::new();
    log.brokers(3, 1);
    log.topic("t", 1, 3);
    let p = log.partition("t", 0);
    let (l, a, b) = (p.replicas[0], p.replicas[1], p.replicas[2]);
    log.fence(a);
    log.fence(b);
    log.fence(l);
    let p = log.partition("t", 0);
    assert_eq!(
        (p.leader, p.isr.clone(), p.elr.clone()),
        (NO_LEADER, vec![], vec![l])
    );
    log.come_back(a);
    assert_eq!(
        log.partition("t", 0).leader,
        NO_LEADER,
        "unclean election is off"
    );
    let configs: BTreeMap<String, String> = [(
        "unclean.leader.election.enable".to_string(),
        "true".to_string(),
    )]
    .into();
    let r = log.apply(MetadataChange::SetTopicConfigs {
        name: "t".into(),
        configs,
    });
    assert_eq!(r.error, None);
    let p = log.partition("t", 0);
    assert_eq!(p.leader, a, "turning it on elects at once");
    assert_eq!((p.isr.clone(), p.elr.clone()), (vec![a], vec![]));
    assert_eq!(log.image().unclean_leader_elections, 1);
    // The old ISR member comes back as a follower: nothing else is unclean.
    log.come_back(l);
    assert_eq!(log.partition("t", 0).leader, a);
    assert_eq!(log.image().unclean_leader_elections, 1);
}

#[test]
fn with_unclean_election_on_an_elr_member_is_still_preferred() {
    let mut log = Log::new();
    log.brokers(3, 1);
    log.topic_with("t", 1, 3, &[("unclean.leader.election.enable", "true")]);
    let p = log.partition("t", 0);
    let (l, a, b) = (p.replicas[0], p.replicas[1], p.replicas[2]);
    log.fence(a);
    log.fence(b);
    log.fence(l);
    log.come_back(l);
    let p = log.partition("t", 0);
    assert_eq!((p.leader, p.isr.clone()), (l, vec![l]));
    assert_eq!(log.image().unclean_leader_elections, 0);
    // While the last leader is down, any running replica leads (counted).
    log.fence(l);
    log.come_back(b);
    assert_eq!(log.partition("t", 0).leader, b);
    assert_eq!(log.image().unclean_leader_elections, 1);
}

#[test]
fn the_preferred_replica_leads_again_once_it_is_back_in_the_isr() {
    let mut log = Log::new();
    log.brokers(3, 1);
    log.topic("t", 1, 3);
    let p = log.partition("t", 0);
    let preferred = p.replicas[0];
    log.fence(preferred);
    let moved = log.partition("t", 0);
    assert_ne!(moved.leader, preferred);
    log.come_back(preferred);
    assert_eq!(
        preferred_leader_imbalance(log.image()),
        0,
        "not in the ISR yet"
    );
    let r = log.apply(MetadataChange::ElectPreferredLeaders);
    assert_eq!(r.error, None);
    assert_eq!(
        log.partition("t", 0).leader,
        moved.leader,
        "not in the ISR: stays"
    );
    let isr = moved.replicas.clone();
    assert_eq!(log.alter_isr("t", isr).error, None);
    assert_eq!(preferred_leader_imbalance(log.image()), 1);
    log.apply(MetadataChange::ElectPreferredLeaders);
    let back = log.partition("t", 0);
    assert_eq!(back.leader, preferred);
    assert_eq!(back.leader_epoch, moved.leader_epoch + 1);
    assert_eq!(Some(back.core), back.core_on(preferred));
    assert_eq!(preferred_leader_imbalance(log.image()), 0);
}

#[test]
fn alter_partition_checks_leader_epochs_and_members() {
    let mut log = Log::new();
    let epochs = log.brokers(3, 1);
    log.topic("t", 1, 3);
    let p = log.partition("t", 0);
    let follower = p.replicas[1];
    let alter = AlterPartition {
        topic: "t".into(),
        partition: 0,
        leader: p.leader,
        broker_epoch: epochs[(p.leader - 1) as usize],
        leader_epoch: p.leader_epoch,
        partition_epoch: p.partition_epoch,
        isr: vec![p.leader, p.replicas[2]],
    };
    let wrong_epoch = AlterPartition {
        leader_epoch: p.leader_epoch + 1,
        ..alter.clone()
    };
    let r = log.apply(MetadataChange::AlterPartition(wrong_epoch));
    assert_eq!(
        r.error.map(|e| e.0),
        Some(ErrorCode::FencedLeaderEpoch as u16)
    );
    let not_leader = AlterPartition {
        leader: follower,
        broker_epoch: epochs[(follower - 1) as usize],
        ..alter.clone()
    };
    assert!(log
        .apply(MetadataChange::AlterPartition(not_leader))
        .error
        .is_some());
    assert_eq!(
        log.apply(MetadataChange::AlterPartition(alter.clone()))
            .error,
        None
    );
    let q = log.partition("t", 0);
    assert_eq!(q.isr, alter.isr);
    assert_eq!(q.partition_epoch, p.partition_epoch + 1);
    // The same request again carries a stale partition epoch.
    assert!(log
        .apply(MetadataChange::AlterPartition(alter))
        .error
        .is_some());
}

#[test]
fn producer_id_blocks_never_overlap() {
    let mut log = Log::new();
    log.brokers(2, 1);
    let a = log.apply(MetadataChange::AllocateProducerIds {
        broker: 1,
        size: 1000,
    });
    let b = log.apply(MetadataChange::AllocateProducerIds {
        broker: 2,
        size: 1000,
    });
    assert_eq!((a.block_start, b.block_start), (Some(0), Some(1000)));
    let refused = log.apply(MetadataChange::AllocateProducerIds {
        broker: 9,
        size: 1000,
    });
    assert!(refused.error.is_some() && refused.block_start.is_none());
    assert_eq!(log.image().next_producer_id, 2000);
}

#[test]
fn refused_commands_still_advance_the_revision_and_state_round_trips() {
    let mut log = Log::new();
    log.brokers(1, 1);
    let r = log.apply(MetadataChange::DeleteTopic {
        name: "nope".into(),
    });
    assert_eq!(
        r.error.map(|e| e.0),
        Some(ErrorCode::UnknownTopicOrPartition as u16)
    );
    assert_eq!(log.image().revision, log.index);
    let bytes = log.sm.encode().unwrap();
    let back = ClusterMetadata::decode(&bytes).unwrap();
    assert_eq!(back.image, log.sm.image);
}

fn acl_record(principal: &str) -> crate::metadata::AclRecord {
    crate::metadata::AclRecord {
        principal: principal.into(),
        resource_type: "Topic".into(),
        resource_name: "orders".into(),
        pattern: "Literal".into(),
        operation: "Write".into(),
        permission: "Allow".into(),
    }
}

#[test]
fn acls_are_replaced_on_their_generation_only_and_kept_by_snapshots() {
    let mut log = Log::new();
    log.brokers(1, 1);
    assert_eq!(log.image().acl_generation, 0);
    let first = log.apply(MetadataChange::ReplaceAcls {
        based_on: 0,
        acls: vec![acl_record("User:alice")],
    });
    assert_eq!(first.error, None);
    assert_eq!(log.image().acl_generation, first.index);
    // A second broker's change computed from generation 0 lost the race: refused, and the
    // first one's ACLs stay.
    let late = log.apply(MetadataChange::ReplaceAcls {
        based_on: 0,
        acls: vec![acl_record("User:bob")],
    });
    assert_eq!(
        late.error.map(|e| e.0),
        Some(ErrorCode::OperationInProgress as u16)
    );
    assert_eq!(log.image().acls, vec![acl_record("User:alice")]);
    let again = log.apply(MetadataChange::ReplaceAcls {
        based_on: first.index,
        acls: vec![acl_record("User:alice"), acl_record("User:bob")],
    });
    assert_eq!(again.error, None);
    // The snapshot (the encoded state machine) carries the ACLs and their generation.
    let back = ClusterMetadata::decode(&log.sm.encode().unwrap()).unwrap();
    assert_eq!(back.image.acls.len(), 2);
    assert_eq!(back.image.acl_generation, again.index);
    // An image from before ACLs (no such fields) reads as "never held ACLs"; one without
    // ACLs is written without the fields.
    let plain = serde_json::to_string(&MetadataImage::default()).unwrap();
    assert!(!plain.contains("acl"), "{plain}");
    let old: MetadataImage = serde_json::from_str(&plain).unwrap();
    assert_eq!((old.acl_generation, old.acls.len()), (0, 0));
}

fn scram_record(name: &str) -> crate::metadata::ScramCredentialRecord {
    crate::metadata::ScramCredentialRecord {
        name: name.into(),
        mechanism: "SCRAM-SHA-256".into(),
        iterations: 4096,
        salt: "c2FsdA==".into(),
        stored_key: "c3RvcmVk".into(),
        server_key: "c2VydmVy".into(),
    }
}

#[test]
fn scram_credentials_are_replaced_on_their_generation_only_within_the_limit() {
    let mut log = Log::new();
    log.brokers(1, 1);
    assert_eq!(log.image().scram_generation, 0);
    let first = log.apply(MetadataChange::ReplaceScramCredentials {
        based_on: 0,
        credentials: vec![scram_record("alice")],
    });
    assert_eq!(first.error, None);
    assert_eq!(log.image().scram_generation, first.index);
    assert!(log
        .image()
        .scram_credential("alice", "SCRAM-SHA-256")
        .is_some());
    // A change computed from generation 0 lost the race to the first: refused, nothing changes.
    let late = log.apply(MetadataChange::ReplaceScramCredentials {
        based_on: 0,
        credentials: vec![scram_record("bob")],
    });
    assert_eq!(
        late.error.map(|e| e.0),
        Some(ErrorCode::OperationInProgress as u16)
    );
    assert_eq!(log.image().scram_credentials, vec![scram_record("alice")]);
    assert_eq!(log.image().scram_generation, first.index);
    // One over the limit is refused with its own error; exactly the limit is taken.
    let max = crate::metadata::SCRAM_CREDENTIALS_MAX;
    let many: Vec<_> = (0..=max).map(|i| scram_record(&format!("u{i}"))).collect();
    let over = log.apply(MetadataChange::ReplaceScramCredentials {
        based_on: first.index,
        credentials: many.clone(),
    });
    assert_eq!(
        over.error.map(|e| e.0),
        Some(ErrorCode::LimitExceeded as u16)
    );
    assert_eq!(log.image().scram_credentials.len(), 1);
    let full = log.apply(MetadataChange::ReplaceScramCredentials {
        based_on: first.index,
        credentials: many[..max].to_vec(),
    });
    assert_eq!(full.error, None);
    assert_eq!(log.image().scram_credentials.len(), max);
    // Snapshots (the encoded state machine) carry the credentials and their generation.
    let back = ClusterMetadata::decode(&log.sm.encode().unwrap()).unwrap();
    assert_eq!(back.image.scram_credentials.len(), max);
    assert_eq!(back.image.scram_generation, full.index);
    // An image from before SCRAM in the metadata reads as "never held credentials"; one
    // without them is written without the fields.
    let plain = serde_json::to_string(&MetadataImage::default()).unwrap();
    assert!(!plain.contains("scram"), "{plain}");
    let old: MetadataImage = serde_json::from_str(&plain).unwrap();
    assert_eq!((old.scram_generation, old.scram_credentials.len()), (0, 0));
}

#[test]
fn a_scram_record_debug_shows_no_secret() {
    let shown = format!("{:?}", scram_record("alice"));
    assert!(
        shown.contains("alice") && !shown.contains("c3RvcmVk"),
        "{shown}"
    );
}
