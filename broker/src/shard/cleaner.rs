//! The core's log cleaner task: every `cleaner_backoff_ms` it cleans the dirtiest compacted
//! partition of this core whose cleaning is due (`min.cleanable.dirty.ratio`,
//! `max.compaction.lag.ms`, or a tombstone's delete horizon passed), within the storage
//! settings' `cleaner_*` limits. The cleaner yields between its IO chunks and is rate limited,
//! so the core's produce and fetch tasks keep running while it works.

use std::rc::Rc;
use std::time::Duration;

use borges_runtime::time;
use borges_storage::Cleaner;

use super::Shard;

impl Shard {
    /// Runs until shutdown.
    pub(super) async fn run_cleaner(self: Rc<Self>) {
        let settings = &self.config.storage;
        let cleaner = match Cleaner::new(settings.cleaner()) {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(core = self.id, "log cleaner not started: {e}");
                return;
            }
        };
        let backoff = Duration::from_millis(settings.cleaner_backoff_ms.max(10));
        loop {
            time::sleep(backoff).await;
            if self.lifecycle.is_shutting_down() {
                return;
            }
            // Clean until nothing is due, then back off.
            while self.clean_one(&cleaner).await {
                if self.lifecycle.is_shutting_down() {
                    return;
                }
            }
        }
    }

    /// Cleans the dirtiest due partition; false if none was due or the cleaning failed.
    async fn clean_one(&self, cleaner: &Cleaner) -> bool {
        let logs: Vec<_> = self
            .partitions
            .all()
            .iter()
            .filter(|p| p.log().compaction().is_some())
            .map(|p| p.log().clone())
            .collect();
        if logs.is_empty() {
            return false;
        }
        let now = time::now_ms();
        match cleaner.clean_dirtiest(&logs, now).await {
            Ok(Some((_, outcome))) => {
                let m = &self.metrics;
                m.cleaner_runs.set(m.cleaner_runs.get() + 1);
                m.cleaner_bytes_in
                    .set(m.cleaner_bytes_in.get() + outcome.bytes_in);
                m.cleaner_bytes_out
                    .set(m.cleaner_bytes_out.get() + outcome.bytes_out);
                m.cleaner_last_run_ms.set(now.max(0) as u64);
                true
            }
            Ok(None) => false,
            Err(e) => {
                tracing::error!(core = self.id, "log cleaning failed: {e}");
                false
            }
        }
    }
}
