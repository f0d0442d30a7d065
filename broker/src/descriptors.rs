//! The descriptor budget: `RLIMIT_NOFILE` shared out once at start-up between the log
//! (storage's enforced per-core budget, `StorageConfig::descriptors_max`), the broker's own
//! descriptors and connections, so that sockets never take the descriptors a segment roll or a
//! new partition needs. Plain arithmetic over the configuration, checked by unit tests.

use std::fmt;

use borges_storage::StorageConfig;

use crate::error::BrokerError;

/// Descriptors of the process outside the cores: standard streams, the data-directory lock,
/// log and ready files, signal handling, metadata writes, the metrics listener.
pub const PROCESS_DESCRIPTORS: u64 = 32;

/// Descriptors one core holds for itself: its io_uring rings and eventfds, its two listeners
/// and their spare descriptors, cross-core channels.
pub const CORE_DESCRIPTORS: u64 = 24;

/// Concurrent connections of the metrics endpoint; more are closed at once.
pub const METRICS_CONNECTIONS_MAX: u64 = 16;

/// Descriptors one admitted connection holds (the socket and a duplicate for its writer).
pub const DESCRIPTORS_PER_CONNECTION: u64 = 2;

/// Connections per core the log's budget must leave room for; when the configured storage
/// budget would leave fewer, storage's read cache and open writers are made smaller instead.
pub const CONNECTIONS_PER_CORE_MIN: u64 = 64;

/// The smallest read cache (`storage.open_files_max`) the broker runs with.
pub const OPEN_FILES_MIN: u32 = 16;

/// The fewest open writers (`storage.open_writers_max`) the broker runs with.
pub const OPEN_WRITERS_MIN: u32 = 8;

/// How the descriptor limit is shared out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescriptorPlan {
    /// `RLIMIT_NOFILE` (soft) found at start-up.
    pub limit_before: u64,
    /// `RLIMIT_NOFILE` (soft) after raising it to the hard limit where allowed.
    pub limit: u64,
    /// Cores.
    pub cores: u64,
    /// Reserved for the process and the cores themselves (refusals and metrics included).
    pub broker_reserve: u64,
    /// `(open_files_max, open_writers_max)` as configured.
    pub storage_configured: (u32, u32),
    /// `(open_files_max, open_writers_max)` each core's storage gets: as configured, or smaller
    /// when the limit does not hold them and [`CONNECTIONS_PER_CORE_MIN`] connections per core.
    pub storage: (u32, u32),
    /// Reserved for each core's log: `StorageConfig::descriptors_max` of `storage`.
    pub log_reserve_per_core: u64,
    /// `limits.connections_max` as configured.
    pub connections_max_configured: u32,
    /// Connections admitted at once: the configured limit, lowered to what the descriptors
    /// left over allow; a multiple of `cores`.
    pub connections_max: u32,
}

/// The log's budget with `(open_files_max, open_writers_max)`.
fn log_descriptors(base: &StorageConfig, (files, writers): (u32, u32)) -> u64 {
    StorageConfig {
        open_files_max: files,
        open_writers_max: writers,
        ..base.clone()
    }
    .descriptors_max()
}

/// The largest `(open_files_max, open_writers_max)`, both shrunk by the same fraction of the
/// configured values and not below the minimums, whose budget fits `room`; `None` when not even
/// the minimums do.
fn storage_fitting(base: &StorageConfig, room: u64) -> Option<(u32, u32)> {
    let configured = (base.open_files_max, base.open_writers_max);
    let floor = (
        OPEN_FILES_MIN.min(configured.0),
        OPEN_WRITERS_MIN.min(configured.1),
    );
    let scaled = |per_mille: u64| {
        let scale = |v: u32, min: u32| ((u64::from(v) * per_mille / 1000) as u32).max(min);
        (scale(configured.0, floor.0), scale(configured.1, floor.1))
    };
    if log_descriptors(base, configured) <= room {
        return Some(configured);
    }
    if log_descriptors(base, floor) > room {
        return None;
    }
    // Binary search over the fraction kept, in thousandths: fits(low) holds throughout.
    let (mut low, mut high) = (0u64, 1000u64);
    while low < high {
        let mid = low + (high - low).div_ceil(2);
        if log_descriptors(base, scaled(mid)) <= room {
            low = mid;
        } else {
            high = mid - 1;
        }
    }
    Some(scaled(low))
}

impl DescriptorPlan {
    /// Shares `limit` (raised from `limit_before`) out for `cores` cores, `connections_max`
    /// connections and the log budget of `storage`; an error when not even the smallest log
    /// budget and one connection per core fit.
    pub fn new(
        (limit_before, limit): (u64, u64),
        cores: usize,
        connections_max: u32,
        storage: &StorageConfig,
    ) -> Result<DescriptorPlan, BrokerError> {
        let cores = cores.max(1) as u64;
        let refusals = u64::from(crate::admission::REFUSALS_IN_PROGRESS_MAX);
        let broker_reserve =
            PROCESS_DESCRIPTORS + METRICS_CONNECTIONS_MAX + cores * (CORE_DESCRIPTORS + refusals);
        let configured_per_core = u64::from(connections_max).div_ceil(cores).max(1);
        let wanted_per_core = configured_per_core.min(CONNECTIONS_PER_CORE_MIN);
        let per_core_left = limit.saturating_sub(broker_reserve) / cores;
        let room = per_core_left.saturating_sub(wanted_per_core * DESCRIPTORS_PER_CONNECTION);
        let fitted = storage_fitting(storage, room)
            .or_else(|| {
                let room = per_core_left.saturating_sub(DESCRIPTORS_PER_CONNECTION);
                storage_fitting(storage, room)
            })
            .ok_or_else(|| {
                let floor = (OPEN_FILES_MIN, OPEN_WRITERS_MIN);
                BrokerError::Config(format!(
                    "RLIMIT_NOFILE {limit} is too low: {cores} cores need {broker_reserve} \
                     descriptors for the broker and the log at least {} per core; raise the \
                     limit (ulimit -n, LimitNOFILE=)",
                    log_descriptors(storage, floor)
                ))
            })?;
        let log_reserve_per_core = log_descriptors(storage, fitted);
        let per_core = ((per_core_left - log_reserve_per_core) / DESCRIPTORS_PER_CONNECTION)
            .min(configured_per_core)
            .max(1);
        let plan = DescriptorPlan {
            limit_before,
            limit,
            cores,
            broker_reserve,
            storage_configured: (storage.open_files_max, storage.open_writers_max),
            storage: fitted,
            log_reserve_per_core,
            connections_max_configured: connections_max,
            connections_max: (per_core * cores).min(u64::from(u32::MAX) / cores * cores) as u32,
        };
        assert!(plan.descriptors_planned() <= limit.max(plan.descriptors_planned_min()));
        Ok(plan)
    }

    /// Descriptors the plan accounts for: broker, log, and every connection.
    pub fn descriptors_planned(&self) -> u64 {
        self.broker_reserve
            + self.cores * self.log_reserve_per_core
            + u64::from(self.connections_max) * DESCRIPTORS_PER_CONNECTION
    }

    /// What the plan needs with one connection per core (it never plans fewer).
    fn descriptors_planned_min(&self) -> u64 {
        self.broker_reserve + self.cores * (self.log_reserve_per_core + DESCRIPTORS_PER_CONNECTION)
    }
}

impl fmt::Display for DescriptorPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "connections_max {}", self.connections_max_configured)?;
        if self.connections_max < self.connections_max_configured {
            write!(f, " lowered to {}", self.connections_max)?;
        }
        write!(f, ": RLIMIT_NOFILE {}", self.limit)?;
        if self.limit != self.limit_before {
            write!(f, " (raised from {})", self.limit_before)?;
        }
        write!(
            f,
            ", log descriptor reserve {} ({} cores x {}), broker reserve {}, {} per connection",
            self.cores * self.log_reserve_per_core,
            self.cores,
            self.log_reserve_per_core,
            self.broker_reserve,
            DESCRIPTORS_PER_CONNECTION,
        )?;
        let ((files_configured, writers_configured), (files, writers)) =
            (self.storage_configured, self.storage);
        if (files, writers) != (files_configured, writers_configured) {
            write!(
                f,
                "; storage.open_files_max {files_configured} lowered to {files} and \
                 storage.open_writers_max {writers_configured} to {writers} to fit"
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(limit: u64, cores: usize, connections_max: u32) -> DescriptorPlan {
        DescriptorPlan::new(
            (limit, limit),
            cores,
            connections_max,
            &StorageConfig::default(),
        )
        .unwrap()
    }

    #[test]
    fn connections_get_what_the_log_and_the_broker_leave() {
        let p = plan(20_000, 2, 10_000);
        let log = 2 * StorageConfig::default().descriptors_max();
        assert_eq!(p.log_reserve_per_core * 2, log);
        assert!(p.descriptors_planned() <= 20_000, "{p}");
        assert!(
            20_000 - p.descriptors_planned() < 2 * 2,
            "{p}: nothing left unused"
        );
        assert_eq!(p.connections_max % 2, 0);
        let line = p.to_string();
        assert!(
            line.starts_with("connections_max 10000 lowered to "),
            "{line}"
        );
        assert!(
            line.contains(&format!("log descriptor reserve {log}")),
            "{line}"
        );
    }

    #[test]
    fn the_configured_limit_stands_when_descriptors_allow_it() {
        let p = plan(1 << 20, 2, 10_000);
        assert_eq!(p.connections_max, 10_000);
        assert_eq!(p.storage, p.storage_configured);
        assert!(!p.to_string().contains("lowered"), "{p}");
    }

    #[test]
    fn a_low_limit_shrinks_the_log_budget_before_connections() {
        let p = plan(1000, 2, 10_000);
        assert!(p.storage.0 < p.storage_configured.0, "{p}");
        assert!(
            p.storage.0 >= OPEN_FILES_MIN && p.storage.1 >= OPEN_WRITERS_MIN,
            "{p}"
        );
        assert!(
            u64::from(p.connections_max) >= 2 * CONNECTIONS_PER_CORE_MIN,
            "{p}"
        );
        assert!(p.descriptors_planned() <= 1000, "{p}");
        assert!(
            p.to_string()
                .contains("storage.open_files_max 4096 lowered"),
            "{p}"
        );
    }

    #[test]
    fn a_limit_that_cannot_hold_the_smallest_budget_is_refused() {
        let err =
            DescriptorPlan::new((256, 256), 2, 10_000, &StorageConfig::default()).unwrap_err();
        assert!(
            err.to_string().contains("RLIMIT_NOFILE 256 is too low"),
            "{err}"
        );
    }
}
