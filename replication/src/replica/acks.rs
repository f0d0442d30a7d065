//! acks=all waiters of one partition: released when the high watermark passes their last
//! offset, failed with NotEnoughReplicasAfterAppend when the ISR falls below
//! `min_insync_replicas` while they wait, and bounded (`waiters_max`).

use std::collections::BTreeMap;

use borges_protocol::ErrorCode;

/// Waiting acks=all produces of one partition. Lives on the partition's owning core. `T` is
/// what the owner needs to answer one (a reply channel).
#[derive(Debug)]
pub struct AckWaiters<T> {
    /// (last offset, sequence) -> token.
    waiting: BTreeMap<(i64, u64), T>,
    next_seq: u64,
    waiters_max: usize,
}

impl<T> AckWaiters<T> {
    /// At most `waiters_max` waiters at once.
    pub fn new(waiters_max: usize) -> AckWaiters<T> {
        AckWaiters {
            waiting: BTreeMap::new(),
            next_seq: 0,
            waiters_max,
        }
    }

    /// Waits for `last_offset` to be below the high watermark. Refused with `Busy` (and the
    /// token handed back) when `waiters_max` are waiting.
    pub fn wait(&mut self, last_offset: i64, token: T) -> Result<(), (ErrorCode, T)> {
        if self.waiting.len() >= self.waiters_max {
            return Err((ErrorCode::Busy, token));
        }
        self.waiting.insert((last_offset, self.next_seq), token);
        self.next_seq += 1;
        Ok(())
    }

    /// The waiters the high watermark `hw` releases (their last offset < `hw`), oldest first.
    pub fn release(&mut self, hw: i64) -> Vec<T> {
        let rest = self.waiting.split_off(&(hw, 0));
        let done = std::mem::replace(&mut self.waiting, rest);
        done.into_values().collect()
    }

    /// Every waiter, to fail (ISR below min.insync.replicas: NotEnoughReplicasAfterAppend;
    /// leadership lost: NotLeaderOrFollower).
    pub fn drain(&mut self) -> Vec<T> {
        std::mem::take(&mut self.waiting).into_values().collect()
    }

    /// How many wait.
    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn released_exactly_below_the_high_watermark_and_bounded() {
        let mut w = AckWaiters::new(3);
        w.wait(9, "a").unwrap();
        w.wait(4, "b").unwrap();
        w.wait(10, "c").unwrap();
        assert_eq!(w.wait(1, "d"), Err((ErrorCode::Busy, "d")));
        assert_eq!(w.release(4), Vec::<&str>::new(), "offset 4 needs hw 5");
        assert_eq!(w.release(10), vec!["b", "a"]);
        assert_eq!(w.drain(), vec!["c"]);
        assert!(w.is_empty());
    }
}
