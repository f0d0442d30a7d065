//! Request memory of one core: the bytes of request frames being read or served, bounded by
//! `request_memory_bytes_max_per_core`.
//!
//! A connection takes memory as a frame's bytes arrive, in growing steps, never all at once
//! when only a header has come: a peer that declares a large frame and sends nothing more holds
//! one small step, not the declared size. That alone could deadlock honest clients (every
//! partial frame waiting for the memory the others hold), so the budget is split in two:
//!
//! - the **pool** (`bytes_max - reserve_bytes`), from which any frame takes its steps;
//! - the **reserve** (`reserve_bytes`, one largest frame), from which only the oldest waiter
//!   takes, and then takes everything its frame still needs at once. Its frame therefore never
//!   waits for memory again and completes (or its connection times out), and the reserve passes
//!   to the next waiter in arrival order. Some frame always progresses.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;

use borges_runtime::sync::Notify;

/// The request memory of one core. Lives on that core.
pub struct RequestMemory {
    pool_available_bytes: Cell<u64>,
    pool_bytes_max: u64,
    reserve_available_bytes: Cell<u64>,
    reserve_bytes_max: u64,
    /// Tickets of the frames waiting, oldest first; the front one may take from the reserve.
    waiting: RefCell<VecDeque<u64>>,
    ticket_next: Cell<u64>,
    /// Bumped whenever memory is released or the front of `waiting` changes.
    changed: Notify,
}

/// Bytes of request memory held by one frame; released on drop.
pub struct MemoryPermit {
    memory: Rc<RequestMemory>,
    pool_bytes: u64,
    reserve_bytes: u64,
}

impl MemoryPermit {
    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.pool_bytes + self.reserve_bytes
    }

    /// Adds `other`'s bytes to this permit.
    pub fn merge(&mut self, mut other: MemoryPermit) {
        strict_assert!(Rc::ptr_eq(&self.memory, &other.memory));
        self.pool_bytes += std::mem::take(&mut other.pool_bytes);
        self.reserve_bytes += std::mem::take(&mut other.reserve_bytes);
    }
}

impl Drop for MemoryPermit {
    fn drop(&mut self) {
        if self.bytes() == 0 {
            return;
        }
        let m = &self.memory;
        let pool = m.pool_available_bytes.get() + self.pool_bytes;
        let reserve = m.reserve_available_bytes.get() + self.reserve_bytes;
        strict_assert!(pool <= m.pool_bytes_max && reserve <= m.reserve_bytes_max);
        m.pool_available_bytes.set(pool);
        m.reserve_available_bytes.set(reserve);
        m.changed.notify_all();
    }
}

/// A frame's place in the queue of waiters; leaves the queue on drop (also when the wait is
/// abandoned, for example by a timeout).
struct Ticket<'a> {
    memory: &'a RequestMemory,
    id: u64,
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        let mut waiting = self.memory.waiting.borrow_mut();
        let was_front = waiting.front() == Some(&self.id);
        waiting.retain(|&t| t != self.id);
        drop(waiting);
        if was_front {
            self.memory.changed.notify_all();
        }
    }
}

impl RequestMemory {
    /// `bytes_max` in all, of which `reserve_bytes` (at most `bytes_max`) is the reserve that
    /// lets the oldest waiter finish its frame; `reserve_bytes` must be at least the largest
    /// frame.
    pub fn new(bytes_max: u64, reserve_bytes: u64) -> Rc<RequestMemory> {
        let reserve_bytes = reserve_bytes.min(bytes_max);
        Rc::new(RequestMemory {
            pool_available_bytes: Cell::new(bytes_max - reserve_bytes),
            pool_bytes_max: bytes_max - reserve_bytes,
            reserve_available_bytes: Cell::new(reserve_bytes),
            reserve_bytes_max: reserve_bytes,
            waiting: RefCell::new(VecDeque::new()),
            ticket_next: Cell::new(0),
            changed: Notify::default(),
        })
    }

    /// Bytes not held by any frame.
    pub fn available_bytes(&self) -> u64 {
        self.pool_available_bytes.get() + self.reserve_available_bytes.get()
    }

    /// `bytes` from the pool, if it has them now.
    pub fn try_take(self: &Rc<Self>, bytes: u64) -> Option<MemoryPermit> {
        let available = self.pool_available_bytes.get();
        if available < bytes {
            return None;
        }
        self.pool_available_bytes.set(available - bytes);
        Some(MemoryPermit {
            memory: self.clone(),
            pool_bytes: bytes,
            reserve_bytes: 0,
        })
    }

    /// Waits for `step_bytes` from the pool, or, as the oldest waiter, for `needed_bytes` (what
    /// the frame still needs in all, at least `step_bytes`) from the reserve, whichever comes
    /// first.
    pub async fn take(self: &Rc<Self>, step_bytes: u64, needed_bytes: u64) -> MemoryPermit {
        strict_assert!(step_bytes <= needed_bytes && needed_bytes <= self.reserve_bytes_max.max(1));
        if let Some(p) = self.try_take(step_bytes) {
            return p;
        }
        let id = self.ticket_next.get();
        self.ticket_next.set(id + 1);
        self.waiting.borrow_mut().push_back(id);
        let _ticket = Ticket { memory: self, id };
        loop {
            let seen = self.changed.generation();
            if let Some(p) = self.try_take(step_bytes) {
                return p;
            }
            if let Some(p) = self.try_take_reserve(id, needed_bytes) {
                return p;
            }
            self.changed.changed_since(seen).await;
        }
    }

    fn try_take_reserve(self: &Rc<Self>, id: u64, bytes: u64) -> Option<MemoryPermit> {
        let available = self.reserve_available_bytes.get();
        if self.waiting.borrow().front() != Some(&id) || available < bytes {
            return None;
        }
        self.reserve_available_bytes.set(available - bytes);
        Some(MemoryPermit {
            memory: self.clone(),
            pool_bytes: 0,
            reserve_bytes: bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use borges_runtime::executor::run_local;

    #[test]
    fn permits_return_their_bytes_to_where_they_came_from() {
        run_local(async {
            let m = RequestMemory::new(100, 40);
            let mut a = m.try_take(50).unwrap();
            assert!(m.try_take(11).is_none(), "only 10 left in the pool");
            let b = m.take(10, 30).await;
            assert_eq!(m.available_bytes(), 40);
            a.merge(b);
            assert_eq!(a.bytes(), 60);
            drop(a);
            assert_eq!(m.available_bytes(), 100);
        })
        .unwrap();
    }

    #[test]
    fn the_oldest_waiter_takes_what_its_frame_needs_from_the_reserve() {
        run_local(async {
            let m = RequestMemory::new(100, 40);
            let hog = m.try_take(60).unwrap();
            // The pool is empty: the first waiter takes its whole remainder from the reserve.
            let first = m.take(10, 40).await;
            assert_eq!(first.bytes(), 40);
            // The second waits, although the pool would give it nothing either.
            let m2 = m.clone();
            let second = borges_runtime::task::spawn(async move { m2.take(5, 20).await.bytes() });
            borges_runtime::task::yield_now().await;
            assert_eq!(m.available_bytes(), 0);
            drop(first);
            assert_eq!(second.await, 20, "the reserve passed on to the next waiter");
            drop(hog);
            assert_eq!(m.available_bytes(), 100);
        })
        .unwrap();
    }

    #[test]
    fn an_abandoned_wait_leaves_the_queue() {
        run_local(async {
            let m = RequestMemory::new(10, 10);
            let all = m.take(10, 10).await;
            let gave_up =
                borges_runtime::time::timeout(std::time::Duration::from_millis(1), m.take(1, 1))
                    .await;
            assert!(gave_up.is_none());
            drop(all);
            // Had the abandoned ticket stayed at the front, this would wait forever.
            assert_eq!(m.take(10, 10).await.bytes(), 10);
        })
        .unwrap();
    }
}
