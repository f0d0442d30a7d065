//! The durable Raft log: reopening, torn and corrupt tails, truncation, purge, segment rolls,
//! and what survives a power cut (the disk's power-loss model).

mod common;

use std::path::Path;

use borges_replication::disk::Disk;
use borges_replication::log_store::{LogStore, MetaDir};
use borges_replication::types::{Entry, LogId, Vote};
use common::{Kv, Set};
use openraft::storage::RaftLogStorage;
use openraft::{CommittedLeaderId, EntryPayload, RaftLogReader};

fn entry(term: u64, index: u64) -> Entry<Kv> {
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(term, 0), index),
        payload: EntryPayload::Normal(Set {
            key: format!("k{index}"),
            value: format!("v{index}-{term}"),
        }),
    }
}

fn entries(term: u64, range: std::ops::Range<u64>) -> Vec<Entry<Kv>> {
    range.map(|i| entry(term, i)).collect()
}

async fn open(dir: &Path, disk: &Disk) -> LogStore<Kv> {
    LogStore::open(MetaDir::new(dir), "test-cluster", 1, disk.clone(), 512)
        .await
        .expect("log opens")
}

async fn indexes_terms(log: &mut LogStore<Kv>) -> Vec<(u64, u64)> {
    log.try_get_log_entries(..)
        .await
        .expect("read")
        .iter()
        .map(|e| (e.log_id.index, e.log_id.leader_id.term))
        .collect()
}

fn run(f: impl std::future::Future<Output = ()> + 'static) {
    borges_runtime::executor::run_local(f).expect("executor");
}

fn segments(dir: &Path) -> usize {
    std::fs::read_dir(MetaDir::new(dir).log_dir())
        .expect("log dir")
        .count()
}

#[test]
fn reopen_returns_entries_vote_and_committed_across_segments() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_path_buf();
    run(async move {
        let disk = Disk::real();
        let mut log = open(&d, &disk).await;
        log.save_vote(&Vote::new(3, 2)).await.unwrap();
        for chunk in (0..40u64).collect::<Vec<_>>().chunks(7) {
            log.append_durably(entries(1, chunk[0]..chunk[chunk.len() - 1] + 1))
                .await
                .unwrap();
        }
        let committed = Some(LogId::new(CommittedLeaderId::new(1, 0), 30));
        log.save_committed(committed).await.unwrap();
        drop(log);
        assert!(segments(&d) > 2, "512-byte segments roll");
        let mut log = open(&d, &disk).await;
        assert_eq!(
            indexes_terms(&mut log).await,
            (0..40).map(|i| (i, 1)).collect::<Vec<_>>()
        );
        assert_eq!(log.read_vote().await.unwrap(), Some(Vote::new(3, 2)));
        assert_eq!(log.read_committed().await.unwrap(), committed);
        let state = log.get_log_state().await.unwrap();
        assert_eq!(state.last_log_id.map(|l| l.index), Some(39));
    });
}

#[test]
fn a_foreign_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_path_buf();
    run(async move {
        drop(open(&d, &Disk::real()).await);
        let other = LogStore::<Kv>::open(MetaDir::new(&d), "other-cluster", 1, Disk::real(), 512)
            .await
            .err()
            .expect("foreign cluster refused");
        assert!(
            other
                .to_string()
                .contains("belongs to cluster test-cluster"),
            "{other}"
        );
        let node = LogStore::<Kv>::open(MetaDir::new(&d), "test-cluster", 2, Disk::real(), 512)
            .await
            .err()
            .expect("foreign node refused");
        assert!(node.to_string().contains("belongs to node 1"), "{node}");
    });
}

#[test]
fn recovery_cuts_a_torn_or_corrupt_tail_and_drops_what_follows() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_path_buf();
    run(async move {
        let log = open(&d, &Disk::real()).await;
        for i in 0..30u64 {
            log.append_durably(entries(2, i..i + 1)).await.unwrap();
        }
        drop(log);
    });
    // Flip one byte inside the second segment's first record: everything from there is gone.
    let log_dir = MetaDir::new(dir.path()).log_dir();
    let mut names: Vec<_> = std::fs::read_dir(&log_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    assert!(names.len() >= 3);
    let second = &names[1];
    let first_of_second: u64 = second
        .file_stem()
        .unwrap()
        .to_string_lossy()
        .parse()
        .unwrap();
    let mut bytes = std::fs::read(second).unwrap();
    bytes[20] ^= 0x40;
    std::fs::write(second, bytes).unwrap();
    let d = dir.path().to_path_buf();
    run(async move {
        let mut log = open(&d, &Disk::real()).await;
        let got = indexes_terms(&mut log).await;
        assert_eq!(
            got,
            (0..first_of_second).map(|i| (i, 2)).collect::<Vec<_>>()
        );
        // The log continues at the cut, without a hole.
        log.append_durably(entries(3, first_of_second..first_of_second + 2))
            .await
            .unwrap();
        drop(log);
        let mut log = open(&d, &Disk::real()).await;
        let got = indexes_terms(&mut log).await;
        assert_eq!(got.len() as u64, first_of_second + 2);
        assert_eq!(got.last(), Some(&(first_of_second + 1, 3)));
    });
}

#[test]
fn a_torn_last_record_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_path_buf();
    run(async move {
        let log = LogStore::<Kv>::open(MetaDir::new(&d), "c", 1, Disk::real(), 1 << 20)
            .await
            .unwrap();
        log.append_durably(entries(1, 0..5)).await.unwrap();
    });
    let seg = MetaDir::new(dir.path())
        .log_dir()
        .join(format!("{:020}.log", 0));
    let len = std::fs::metadata(&seg).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
    f.set_len(len - 3).unwrap();
    let d = dir.path().to_path_buf();
    run(async move {
        let mut log = LogStore::<Kv>::open(MetaDir::new(&d), "c", 1, Disk::real(), 1 << 20)
            .await
            .unwrap();
        assert_eq!(
            indexes_terms(&mut log).await,
            (0..4).map(|i| (i, 1)).collect::<Vec<_>>()
        );
    });
}

#[test]
fn truncate_and_purge_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_path_buf();
    run(async move {
        let disk = Disk::real();
        let mut log = open(&d, &disk).await;
        log.append_durably(entries(1, 0..40)).await.unwrap();
        // A new leader's entries replace the tail from 25.
        log.truncate(LogId::new(CommittedLeaderId::new(1, 0), 25))
            .await
            .unwrap();
        log.append_durably(entries(2, 25..30)).await.unwrap();
        log.purge(LogId::new(CommittedLeaderId::new(1, 0), 12))
            .await
            .unwrap();
        drop(log);
        let mut log = open(&d, &disk).await;
        let want: Vec<(u64, u64)> = (13..25)
            .map(|i| (i, 1))
            .chain((25..30).map(|i| (i, 2)))
            .collect();
        assert_eq!(indexes_terms(&mut log).await, want);
        let state = log.get_log_state().await.unwrap();
        assert_eq!(state.last_purged_log_id.map(|l| l.index), Some(12));
        // Purging past the end (a snapshot install) empties the log; it continues after it.
        log.purge(LogId::new(CommittedLeaderId::new(4, 0), 100))
            .await
            .unwrap();
        assert!(indexes_terms(&mut log).await.is_empty());
        log.append_durably(entries(4, 101..103)).await.unwrap();
        drop(log);
        let mut log = open(&d, &disk).await;
        assert_eq!(indexes_terms(&mut log).await, vec![(101, 4), (102, 4)]);
        // An append that would leave a hole is refused.
        assert!(log.append_durably(entries(4, 105..106)).await.is_err());
    });
}

/// Planted bugs this catches: `save_vote` or `write_state` not waiting for the replacement's
/// fdatasync / directory fsync, and `append` not syncing the segment or the new segment's name.
#[test]
fn vote_and_appended_entries_survive_a_power_cut() {
    let dir = tempfile::tempdir().unwrap();
    let disk = Disk::with_power_loss_model();
    let (d, dk) = (dir.path().to_path_buf(), disk.clone());
    run(async move {
        let mut log = open(&d, &dk).await;
        log.save_vote(&Vote::new(7, 3)).await.unwrap();
        log.append_durably(entries(7, 0..20)).await.unwrap();
        log.save_vote(&Vote::new_committed(8, 1)).await.unwrap();
        log.truncate(LogId::new(CommittedLeaderId::new(7, 0), 15))
            .await
            .unwrap();
        log.append_durably(entries(8, 15..17)).await.unwrap();
    });
    disk.power_loss().unwrap();
    let (d, dk) = (dir.path().to_path_buf(), disk.clone());
    run(async move {
        let mut log = open(&d, &dk).await;
        assert_eq!(
            log.read_vote().await.unwrap(),
            Some(Vote::new_committed(8, 1))
        );
        let want: Vec<(u64, u64)> = (0..15)
            .map(|i| (i, 7))
            .chain((15..17).map(|i| (i, 8)))
            .collect();
        assert_eq!(indexes_terms(&mut log).await, want);
    });
}
